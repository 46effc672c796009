"""Direct tests of guards in zoo bench and the run view that a mutation audit found caught only indirectly, or not
at all (issue 39, section 3): each fails when its one line is broken. Fast: hand-made folders, no training."""

from __future__ import annotations

import gzip
import io
import json
import time
from pathlib import Path

import pytest

from zoo.bench import runner, runs
from zoo.bench.locks import RunLocks
from zoo.bench.results import KEPT_TRAINING_ROWS, compressed, keep, thinned
from zoo.bench.suites import Entry
from zoo.config import dump_config
from zoo.errors import ZooError
from zoo.run.view import find_runs, is_run, read_final_returns

CONFIG = ("config = dict(exp_name='b', env=dict(id='CartPole-v1'), policy=dict(type='ppo', epochs=1), "
          "pipeline=dict(num_envs=4, rollout_steps=32, max_env_steps=2048, eval_every=4, eval_episodes=2))\n")
TINY = Entry("tiny_ppo", "tiny.py", ("pipeline.stop_return=None",), 0.1)


@pytest.fixture
def configs(tmp_path):
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "tiny.py").write_text(CONFIG)
    return folder


def _lines(steps: list[int]) -> bytes:
    return "".join(json.dumps({"iteration": k + 1, "env_steps": s}) + "\n" for k, s in enumerate(steps)).encode()


def _run(path: Path, configs: Path, final_eval: str | None, seed: int = 0) -> Path:
    path.mkdir(parents=True)
    dump_config(runs.expected_config(TINY, seed, configs), path / "config.yaml")
    (path / "metrics.jsonl").write_bytes(_lines([2048]))
    (path / "checkpoint.pt").write_bytes(b"placeholder")
    if final_eval is not None:
        (path / "final_eval.json").write_text(final_eval)
    return path


# -- zoo.bench.results --------------------------------------------------------------------------------------------
def test_keep_refuses_a_damaged_final_evaluation_and_writes_nothing(tmp_path, configs):
    run = _run(tmp_path / "run", configs, json.dumps({"returns": [1.0] * 9 + [float("nan")]}))
    destination = tmp_path / "results" / TINY.name / "seed_0"
    with pytest.raises(ZooError, match=r"returns\[9\] is nan, not a finite return"):
        keep(run, destination)
    assert not (tmp_path / "results").exists()


def test_thinning_keeps_up_to_rows_plus_two_lines_whole_and_thins_from_one_more():
    rows = 10
    flat = [1] * (rows + 1) + [100]  # rows + 2 lines, all but the last in one cell of the grid
    assert thinned(_lines(flat), rows) == _lines(flat)  # the first and the last row besides `rows`: whole
    longer = [1] * (rows + 2) + [100]  # rows + 3 lines: thinned to the first row of each cell and the last
    assert thinned(_lines(longer), rows) == b"".join(_lines(longer).splitlines(keepends=True)[i] for i in (0, rows + 2))
    assert KEPT_TRAINING_ROWS == 500


def test_the_kept_gzip_has_no_timestamp_and_no_name_so_the_same_rows_give_the_same_bytes(monkeypatch):
    data = compressed(b'{"iteration": 1}\n')
    assert data[3] == 0 and data[4:8] == b"\0\0\0\0"  # FLG: no file name; MTIME: 0
    monkeypatch.setattr(time, "time", lambda: 1_900_000_000.0)  # another second, another day
    assert compressed(b'{"iteration": 1}\n') == data
    assert gzip.decompress(data) == b'{"iteration": 1}\n'


# -- zoo.bench.runner ---------------------------------------------------------------------------------------------
def test_a_seed_with_its_own_run_directory_in_progress_resumes_whatever_the_results_folder_keeps(tmp_path, configs):
    root = tmp_path / "runs" / "bench"
    run = _run(root / TINY.name / "seed_0", configs, None)  # stopped during training: a checkpoint, no model
    kept = tmp_path / "results" / TINY.name / "seed_0"
    finished = _run(tmp_path / "elsewhere", configs, json.dumps({"returns": [5.0] * 10, "episodes": 10,
                                                                 "seed": runs.eval_seed(0)}))
    keep(finished, kept)  # the same seed finished in the results folder (another machine's, committed)
    bench = runner.Bench([runner.Run(TINY, 0, run)], 1, io.StringIO(), configs, results=tmp_path / "results",
                         locks=RunLocks(root))
    target = bench.runs[0]
    assert bench._look(target, time.monotonic() + 5, time.monotonic())
    assert target.kept_at is None and [step[3:5] for step in target.steps] == [["run", "--resume"], ["eval", str(run)]]
    bench.locks.release_all()


def test_the_slices_of_a_suite_take_every_entrys_seeds_in_turn():
    entries = runner.entries_of(["classic"])
    everything = runner.bench_runs(entries, 5, Path("runs"))
    assert [(run.entry.name, run.seed) for run in everything[:len(entries) + 1]] == [
        *[(entry.name, 0) for entry in entries], (entries[0].name, 1)]  # seed-major
    first = runner.shard_of(everything, (1, 5))
    assert len({run.entry.name for run in first}) > len(entries) // 2  # a slice mixes the entries


def test_each_entry_trains_its_own_seed_count_unless_seeds_is_given():
    small, large = Entry("small", "ppo_cartpole.py", seeds=2), Entry("large", "ppo_cartpole.py", seeds=3)
    planned = runner.bench_runs([small, large], None, Path("runs"))
    assert [(run.entry.name, run.seed) for run in planned] == [
        ("small", 0), ("large", 0), ("small", 1), ("large", 1), ("large", 2)]  # seed-major, each to its own count
    assert [(run.entry.name, run.seed) for run in runner.bench_runs([small, large], 1, Path("runs"))] == [
        ("small", 0), ("large", 0)]
    ace = {entry.name: entry.seeds for entry in runner.entries_of(["ace", "mujoco"])}
    assert ace["sac_ace_hopper"] == ace["sac_hopper"] == ace["sac_ace_noreset_halfcheetah"] == ace["td3_hopper"] == 10
    assert ace["ppo_hopper"] == 5


# -- zoo.run.view -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["NaN", "-Infinity"])
def test_a_final_evaluation_holding_nan_or_infinity_is_refused(tmp_path, value):
    (tmp_path / "final_eval.json").write_text('{"returns": [1, 2, 3, ' + value + ', 5, 6, 7, 8, 9, 10]}')
    shown = "nan" if value == "NaN" else "-inf"
    with pytest.raises(ZooError, match=rf"returns\[3\] is {shown}, not a finite return within \+-1e\+12"):
        read_final_returns(tmp_path)
    with pytest.raises(ZooError, match=rf"returns\[3\] is {shown}"):
        read_final_returns(tmp_path, episodes=None)


def test_a_kept_seed_with_only_its_compressed_metrics_is_a_run(tmp_path):
    kept = tmp_path / "results" / "entry" / "seed_0"
    kept.mkdir(parents=True)
    (kept / "config.yaml").write_text("seed: 0\n")
    assert not is_run(kept)
    (kept / "metrics.jsonl.gz").write_bytes(compressed(b'{"iteration": 1}\n'))
    assert is_run(kept)
    assert find_runs([str(tmp_path / "results" / "entry")]) == [kept]
