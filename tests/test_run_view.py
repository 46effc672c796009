"""The read-only run view (zoo.run.view.RunView, issue 28 item 5) that plot, bench, tune and --seeds read runs
through: on a synthetic run directory, no training."""

from __future__ import annotations

import json

import pytest

from zoo.errors import ZooError
from zoo.run.view import RunView, find_runs


def _run(folder, seed: int, rows: list[dict], model: bool = False, returns: list | None = None):
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(f"seed: {seed}\nexp_name: {folder.name}\nenv:\n  id: CartPole-v1\n")
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    if model:
        (folder / "model.pt").write_bytes(b"")
    if returns is not None:
        (folder / "final_eval.json").write_text(json.dumps({"returns": returns, "episodes": len(returns)}))
    return folder


def test_the_view_reads_config_rows_last_values_and_the_final_evaluation(tmp_path):
    rows = [{"iteration": 1, "eval_return_mean": 5.0}, {"iteration": 2}, {"iteration": 3, "eval_return_mean": 7.5}]
    view = RunView(_run(tmp_path / "exp" / "seed_0", 0, rows, model=True, returns=[1.0, 2.0]))
    assert (view.config.seed, view.config.env.id) == (0, "CartPole-v1")
    assert view.rows == rows
    assert (view.last("eval_return_mean"), view.last("iteration"), view.last("missing")) == (7.5, 3, None)
    assert (view.has_config, view.has_checkpoint, view.finished, view.evaluated) == (True, False, True, True)
    assert view.final_returns(episodes=None) == [1.0, 2.0]
    with pytest.raises(ZooError, match="holds 2 returns"):
        view.final_returns()  # zoo bench's 10


def test_seeds_of_one_config_share_a_group_key_and_a_folder_finds_them(tmp_path):
    first = _run(tmp_path / "exp" / "seed_0", 0, [{"iteration": 1}])
    second = _run(tmp_path / "exp" / "seed_1", 1, [])
    assert RunView(first).group_key() == RunView(second).group_key()
    assert RunView(second).rows == [] and RunView(tmp_path / "nothing").rows == []
    assert not RunView(first).finished and not RunView(first).evaluated
    assert find_runs([str(tmp_path / "exp")]) == [first, second]
    with pytest.raises(ZooError, match="matches no run directory"):
        find_runs([str(tmp_path / "none*")])


def test_a_run_directory_with_no_metrics_yet_is_left_out_and_said_so(tmp_path, caplog):
    # a seed stopped before its first row: leaving it out silently would change an aggregate over seeds unseen
    first = _run(tmp_path / "exp" / "seed_0", 0, [{"iteration": 1}])
    started = tmp_path / "exp" / "seed_1"
    started.mkdir()
    (started / "config.yaml").write_text("seed: 1\n")
    (tmp_path / "exp" / "notes").mkdir()  # not a run directory at all: not mentioned
    with caplog.at_level("WARNING", logger="zoo"):
        assert find_runs([str(tmp_path / "exp")]) == [first]
        assert find_runs([str(tmp_path / "exp" / "seed_*")]) == [first]
    said = [record.getMessage() for record in caplog.records]
    assert said == [f"left out '{started}': a run directory with no metrics yet (stopped before its first row)"] * 2
