"""``zoo bench`` and its report on synthetic run directories (config.yaml, metrics.jsonl, final_eval.json, model.pt
written here, no training): what the report publishes (seed count, scores, verdicts), which seed folders the runner
and the report refuse, what a final evaluation must hold, where the configs are found, and refused writes.
"""

from __future__ import annotations

import errno
import io
import json
import os
from pathlib import Path

import pytest

from zoo.bench import report, runner, runs
from zoo.bench.suites import Entry
from zoo.cli import main
from zoo.config import dump_config
from zoo.errors import ZooError

CONFIG = ("config = dict(exp_name='b', env=dict(id='CartPole-v1'), policy=dict(type='ppo', epochs=1), "
          "pipeline=dict(num_envs=4, rollout_steps=32, max_env_steps=2048, eval_every=4, eval_episodes=2))\n")
TINY = Entry("tiny_ppo", "tiny.py", ("pipeline.stop_return=None",), 0.1)
OTHER = Entry("tiny_other", "tiny.py", ("pipeline.stop_return=None", "policy.epochs=2"), 0.1)


@pytest.fixture
def configs(tmp_path, monkeypatch):
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "tiny.py").write_text(CONFIG)
    monkeypatch.setitem(runner.SUITES, "tiny", (TINY,))
    monkeypatch.setitem(runner.SUITES, "pair", (OTHER, TINY))
    monkeypatch.setattr(report, "_figure", lambda *args: False)  # the figure has tests of its own (test_plot.py)
    return folder


def _write_run(path: Path, entry: Entry, seed: int, configs: Path, returns: list | None = None,
               evals: list | None = None) -> Path:
    path.mkdir(parents=True)
    cfg = runs.expected_config(entry, seed, configs)
    cfg.update(runs_dir=str(path.parent), exp_name=path.name)
    dump_config(cfg, path / "config.yaml")
    evals = [10.0 * k for k in range(1, 17)] if evals is None else evals  # eval_return_mean per row (None: no eval)
    rows = [{"iteration": k, "env_steps": 128 * k, "wall_time": 6.0 * k, "eval_return_mean": evals[k - 1]}
            for k in range(1, 17)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    for name in ("checkpoint.pt", "model.pt"):
        (path / name).write_bytes(b"placeholder")
    if returns is not None:
        (path / "final_eval.json").write_text(json.dumps({"returns": returns, "episodes": len(returns)}))
    return path


def _seeds(root: Path, entry: Entry, configs: Path, finals: list[float]) -> None:
    for seed, final in enumerate(finals):
        _write_run(root / "bench" / entry.name / f"seed_{seed}", entry, seed, configs, [final] * 10)


def _report(tmp_path: Path, configs: Path, suites: list[str], seeds: int) -> str:
    out = tmp_path / "benchmarks.md"
    report.report(suites, runs_dir=str(tmp_path / "runs"), out=str(out), seeds=seeds, reps=200, configs=configs)
    return out.read_text()


# -- what the report publishes ---------------------------------------------------------------------------------------
def test_without_seeds_the_report_counts_each_entry_against_its_own_seed_count(tmp_path, configs, monkeypatch):
    ten = Entry("tiny_ppo", "tiny.py", TINY.overrides, 0.1, seeds=10)  # the same runs, a protocol of 10 seeds
    _seeds(tmp_path / "runs", ten, configs, [100.0, 200.0, 300.0, 400.0, 500.0, 600.0])
    monkeypatch.setitem(runner.SUITES, "tiny", (ten,))
    out = tmp_path / "benchmarks.md"
    report.report(["tiny"], runs_dir=str(tmp_path / "runs"), out=str(out), reps=200, configs=configs)
    row = next(line for line in out.read_text().splitlines() if line.startswith("| tiny_ppo"))
    assert "| 6/10 | 350.0 [" in row  # all six finished seeds scored, of the entry's ten
    assert "| 5/5 |" in _report(tmp_path, configs, ["tiny"], 5)  # --seeds 5: seeds 0-4 only


def test_the_report_counts_every_finished_seed_and_scores_all_of_them(tmp_path, configs):
    _seeds(tmp_path / "runs", TINY, configs, [100.0, 200.0, 300.0])
    row = next(line for line in _report(tmp_path, configs, ["tiny"], 3).splitlines() if line.startswith("| tiny_ppo"))
    assert row.startswith("| tiny_ppo | CartPole-v1 | ppo | 2,048 | 3/3 | 200.0 [")
    assert "| 200.0 +- 81.6 | 1.6 |" in row  # mean +- std over the 3 seeds; 96 s of training per run


@pytest.mark.parametrize(("new", "base", "verdict"), [
    ([300.0, 310.0, 320.0], [100.0, 110.0, 120.0], "better"),
    ([100.0, 110.0, 120.0], [300.0, 310.0, 320.0], "worse"),
    ([100.0, 300.0, 200.0], [150.0, 250.0, 200.0], "no difference shown at 95%"),  # CI [-100, 100] holds 0
])
def test_a_comparison_is_better_or_worse_only_when_its_whole_interval_is(tmp_path, configs, monkeypatch, new, base,
                                                                         verdict):
    monkeypatch.setattr(report, "COMPARISONS", (("pair", "tiny_other", "tiny_ppo"),))
    _seeds(tmp_path / "runs", OTHER, configs, new)
    _seeds(tmp_path / "runs", TINY, configs, base)
    row = next(line for line in _report(tmp_path, configs, ["pair"], 3).splitlines()
               if line.startswith("| tiny_other vs tiny_ppo"))
    # the late measure: every run's last 5 evaluations are 120..160 here, so no difference at all
    assert row.endswith(f"| 3 vs 3 | {verdict} | 0.0 [0.0, 0.0] | no difference shown at 95% |")


def test_a_comparison_also_reads_the_mean_of_each_runs_last_five_periodic_evaluations(tmp_path, configs,
                                                                                       monkeypatch):
    monkeypatch.setattr(report, "COMPARISONS", (("pair", "tiny_other", "tiny_ppo"),))
    root = tmp_path / "runs" / "bench"
    # tiny_other ends higher at its last checkpoint, but its last five evaluations average lower
    late_other, late_base = [[100.0, 110.0, 120.0], [200.0, 210.0, 220.0]]
    for seed in range(3):
        other = [0.0] * 10 + [5000.0] + [late_other[seed]] * 5  # an early peak is not among the last five
        base = [0.0] * 11 + [late_base[seed] - 10.0, late_base[seed] + 10.0] * 2 + [late_base[seed]]
        _write_run(root / "tiny_other" / f"seed_{seed}", OTHER, seed, configs, [300.0 + seed] * 10, other)
        _write_run(root / "tiny_ppo" / f"seed_{seed}", TINY, seed, configs, [100.0 + seed] * 10, base)
    text = _report(tmp_path, configs, ["pair"], 3)
    row = next(line for line in text.splitlines() if line.startswith("| tiny_other vs tiny_ppo"))
    # IQM of 3 seeds trims none: the difference of the means, -100 (late) and +200 (final), each CI excluding 0
    assert row.startswith("| tiny_other vs tiny_ppo | 200.0 [") and "| 3 vs 3 | better | -100.0 [" in row
    assert row.endswith("| worse |") and "last 5 evals: IQM difference [95% CI]" in text
    early_only = [0.0] * 10 + [None] * 6
    _write_run(root / "tiny_other" / "seed_3", OTHER, 3, configs, [300.0] * 10, [None] * 16)  # never evaluated
    _write_run(root / "tiny_ppo" / "seed_3", TINY, 3, configs, [100.0] * 10, early_only)
    row = next(line for line in _report(tmp_path, configs, ["pair"], 4).splitlines()
               if line.startswith("| tiny_other vs tiny_ppo"))
    assert row.endswith("| 4 vs 4 | better | no periodic evaluations |  |")


def test_the_report_refuses_a_seed_folder_of_another_seed_or_config_by_name(tmp_path, configs):
    root = tmp_path / "runs" / "bench" / "tiny_ppo"
    _write_run(root / "seed_0", TINY, 0, configs, [1.0] * 10)
    _write_run(root / "seed_1", TINY, 5, configs, [1.0] * 10)  # copied from seed 5
    with pytest.raises(ZooError, match=r"'.*seed_1' holds a run of another config or seed, not tiny_ppo seed 1 \(seed "
                                       r"is 5 there, 1 for the entry\): move it away"):
        _report(tmp_path, configs, ["tiny"], 2)
    (root / "seed_1" / "config.yaml").unlink()
    dump_config({**runs.expected_config(OTHER, 1, configs)}, root / "seed_1" / "config.yaml")  # replaced
    with pytest.raises(ZooError, match=r"not tiny_ppo seed 1 \(policy.epochs is 2 there, 1 for the entry\)"):
        _report(tmp_path, configs, ["tiny"], 2)


# -- what the runner does with a seed folder it finds ------------------------------------------------------------------
def _plan(path: Path, configs: Path, seed: int = 0) -> list[str]:
    return [" ".join(step[3:5]) for step in runner.plan(runner.Run(TINY, seed, path), configs)]


def test_a_folder_killed_before_its_config_or_first_checkpoint_is_removed_and_trained_again(tmp_path, configs):
    path = tmp_path / "seed_0"
    path.mkdir()
    (path / ".lock").write_text("123")
    (path / ".config.yaml.123.abcd.tmp").write_text("half")
    assert _plan(path, configs) == ["run --config", "eval " + str(path)] and not path.exists()
    _write_run(path, TINY, 0, configs)
    (path / "checkpoint.pt").unlink()
    (path / "model.pt").unlink()
    assert _plan(path, configs) == ["run --config", "eval " + str(path)] and not path.exists()


def test_a_folder_of_a_run_left_half_way_resumes_or_evaluates(tmp_path, configs):
    path = _write_run(tmp_path / "seed_0", TINY, 0, configs)
    assert _plan(path, configs) == ["eval " + str(path)]
    (path / "model.pt").unlink()
    assert _plan(path, configs) == ["run --resume", "eval " + str(path)]
    (path / "final_eval.json").write_text(json.dumps({"returns": [1.5] * 10}))
    assert _plan(path, configs) == []


def test_foreign_folders_and_damaged_evaluations_are_failed_runs_never_touched(tmp_path, configs):
    root = tmp_path / "runs" / "bench" / "tiny_ppo"
    _write_run(root / "seed_0", TINY, 3, configs)
    (root / "seed_1").mkdir(parents=True)
    (root / "seed_1" / "notes.txt").write_text("mine")
    _write_run(root / "seed_2", TINY, 2, configs, ["500"] * 10)
    before = sorted(str(p) for p in root.rglob("*"))
    out = io.StringIO()
    assert runner.bench(["tiny"], seeds=3, runs_dir=str(tmp_path / "runs"), stream=out, configs=configs) == 1
    lines = out.getvalue().splitlines()[-3:]
    assert lines[0].startswith(f"zoo bench: tiny_ppo/seed_0 failed: '{root / 'seed_0'}' holds a run of another "
                               "config or seed, not tiny_ppo seed 0 (seed is 3 there, 0 for the entry)")
    assert lines[1] == (f"zoo bench: tiny_ppo/seed_1 failed: '{root / 'seed_1'}' is not a run directory of zoo bench "
                        "(no config.yaml, but other files): move it away, zoo bench neither trains into nor reports it")
    assert lines[2].startswith(f"zoo bench: tiny_ppo/seed_2 failed: '{root / 'seed_2' / 'final_eval.json'}' is not a "
                               "final evaluation of 10 episodes: returns[0] is \"500\", not a number")
    assert sorted(str(p) for p in root.rglob("*")) == before


# -- final_eval.json -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("content", "problem"), [
    ('{"returns": "500"}', "it has no list of 'returns'"),
    (json.dumps({"returns": [1e308] * 10}), "returns[0] is 1e+308, not a finite return within +-1e+12"),
    ('{"returns": [1, 2, 1e999, 4, 5, 6, 7, 8, 9, 10]}', "returns[2] is inf, not a finite return within +-1e+12"),
    (json.dumps({"returns": [1.0] * 9 + [True]}), "returns[9] is true, not a number"),
    (json.dumps({"returns": [1.0] * 9}), "it holds 9 returns"),
    (json.dumps({"returns": [1.0] * 10, "episodes": 9}), "its 'episodes' says 9"),
    (json.dumps([1.0] * 10), "it has no list of 'returns'"),
    ('{"returns": [1.0,', "it cannot be read as JSON (JSONDecodeError)"),
])
def test_a_final_evaluation_is_ten_finite_numbers_or_one_line_naming_the_file(tmp_path, content, problem):
    (tmp_path / "final_eval.json").write_text(content)
    with pytest.raises(ZooError) as caught:
        runs.read_final_returns(tmp_path)
    assert str(caught.value) == (f"'{tmp_path / 'final_eval.json'}' is not a final evaluation of 10 episodes: "
                                 f"{problem}; delete it and evaluate the run again (zoo bench, or zoo eval RUN "
                                 f"--json FILE)")


@pytest.mark.parametrize(("content", "problem"), [
    (json.dumps({"returns": []}), "it holds 0 returns"),
    (json.dumps({"returns": [1.0] * 3, "episodes": 4}), "its 'episodes' says 4"),
    (json.dumps({"returns": [1.0, "2"]}), "returns[1] is \"2\", not a number"),
])
def test_any_count_for_plot_but_it_must_agree_with_itself(tmp_path, content, problem):
    (tmp_path / "final_eval.json").write_text(content)
    with pytest.raises(ZooError) as caught:
        runs.read_final_returns(tmp_path, episodes=None)
    assert str(caught.value) == (f"'{tmp_path / 'final_eval.json'}' is not a final evaluation (zoo eval --json): "
                                 f"{problem}; delete it and evaluate the run again (zoo bench, or zoo eval RUN "
                                 f"--json FILE)")
    (tmp_path / "final_eval.json").write_text(json.dumps({"returns": [3.0, 4.0], "episodes": 2}))
    assert runs.read_final_returns(tmp_path, episodes=None) == [3.0, 4.0]


def test_a_good_final_evaluation_reads_exactly(tmp_path):
    (tmp_path / "final_eval.json").write_text(json.dumps({"returns": [1, -2.5] * 5, "episodes": 10}))
    assert runs.read_final_returns(tmp_path) == [1.0, -2.5] * 5


def test_zoo_plot_aggregate_refuses_a_damaged_final_evaluation_in_one_line(tmp_path, configs, capsys):
    run = _write_run(tmp_path / "seed_0", TINY, 0, configs, [1e308] * 10)
    assert main(["plot", str(run), "--aggregate", "--reps", "100"]) == 2
    assert capsys.readouterr().err == (f"zoo: error: '{run / 'final_eval.json'}' is not a final evaluation (zoo eval "
                                       "--json): returns[0] is 1e+308, not a finite return within +-1e+12; delete it "
                                       "and evaluate the run again (zoo bench, or zoo eval RUN --json FILE)\n")


# -- where the configs are -------------------------------------------------------------------------------------------
def test_the_configs_are_those_of_the_clone_the_user_is_in(tmp_path, configs, monkeypatch):
    monkeypatch.setattr(runs, "PACKAGE_CONFIGS", tmp_path / "site-packages" / "configs")
    monkeypatch.chdir(tmp_path)
    assert runs.configs_dir([TINY]) == Path.cwd() / "configs"
    monkeypatch.chdir(tmp_path / "configs")
    with pytest.raises(ZooError) as caught:
        runs.configs_dir([TINY])
    assert str(caught.value) == (
        f"zoo bench trains the configs of a zoo clone, and found no configs/ folder holding tiny.py: looked in "
        f"'{tmp_path / 'configs' / 'configs'}' (no such folder) and '{tmp_path / 'site-packages' / 'configs'}' (no "
        f"such folder); run it from the root of a zoo clone")
    (tmp_path / "configs" / "configs").mkdir()
    with pytest.raises(ZooError, match=r"looked in '.*configs/configs' \(lacks tiny.py\) and"):
        runs.configs_dir([TINY])


# -- refused writes --------------------------------------------------------------------------------------------------
def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_under_zoo_plot_out_is_one_line_and_leaves_no_temporary(tmp_path, configs, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    run = _write_run(tmp_path / "runs" / "seed_0", TINY, 0, configs)
    out = tmp_path / "figures"
    out.mkdir()

    def half_written(self, path, *args, **kwargs):
        Path(path).write_bytes(b"\x89PNG half")
        _full_disk()

    monkeypatch.setattr(Figure, "savefig", half_written)
    assert main(["plot", str(run), "--out", str(out / "c.png")]) == 2
    assert capsys.readouterr().err == (f"zoo: error: cannot write '{out / 'c.png'}' (No space left on device): free "
                                       "space on that disk, or write it elsewhere\n")
    assert list(out.iterdir()) == []


def test_a_full_disk_under_aggregate_json_and_bench_report_is_one_line(tmp_path, configs, capsys, monkeypatch):
    _seeds(tmp_path / "runs", TINY, configs, [1.0, 2.0])
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr("zoo.run.state_files.os.fsync", _full_disk)
    assert main(["plot", str(tmp_path / "runs" / "bench" / "tiny_ppo"), "--aggregate", "--reps", "100", "--json",
                 str(out / "a.json")]) == 2
    assert capsys.readouterr().err == (f"zoo: error: cannot write '{out / 'a.json'}' (No space left on device): free "
                                       "space on that disk, or write it elsewhere\n")
    monkeypatch.chdir(tmp_path)  # the clone the user is in: its configs/
    assert main(["bench", "tiny", "--seeds", "2", "--runs-dir", str(tmp_path / "runs"), "--report",
                 str(out / "b.md")]) == 2
    assert capsys.readouterr().err == (f"zoo: error: cannot write '{out / 'b.md'}' (No space left on device): free "
                                       "space on that disk, or write it elsewhere\n")
    assert sorted(path.name for path in out.rglob("*")) == ["benchmarks"]  # the figures' folder, empty
