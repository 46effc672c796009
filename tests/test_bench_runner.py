"""``zoo bench``: every (entry, seed) of a suite as an ordinary run directory, resumable, failures reported by name.

Each test runs real ``zoo run`` / ``zoo eval`` child processes on a tiny suite (CartPole, 2k env steps).
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zoo.bench import runner
from zoo.bench.suites import Entry

CONFIG = ("config = dict(exp_name='b', env=dict(id='CartPole-v1'), policy=dict(type='ppo', epochs=1), "
          "pipeline=dict(num_envs=4, rollout_steps=32, max_env_steps=2048, eval_every=4, eval_episodes=2))\n")
TINY = Entry("tiny_ppo", "tiny.py", ("pipeline.stop_return=None",), 0.1)
BROKEN = Entry("broken", "tiny.py", ("env.id=NoSuchEnv-v9",), 0.1)


@pytest.fixture
def suite(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "tiny.py").write_text(CONFIG)
    monkeypatch.setattr(runner, "configs_dir", lambda *_: configs)
    monkeypatch.setitem(runner.SUITES, "tiny", (TINY,))
    monkeypatch.setitem(runner.SUITES, "tiny_broken", (TINY, BROKEN))
    return tmp_path / "runs"


def _final(run: Path) -> dict:
    return json.loads((run / "final_eval.json").read_text())


@pytest.mark.slow  # trains real runs: the quick loop stays under 3 minutes
def test_a_suite_trains_and_evaluates_every_seed_into_ordinary_run_directories(suite):
    out = io.StringIO()
    assert runner.bench(["tiny"], seeds=2, jobs=2, runs_dir=str(suite), stream=out) == 0
    for seed in (0, 1):
        run = suite / "bench" / "tiny_ppo" / f"seed_{seed}"
        final = _final(run)
        assert final["episodes"] == 10 and final["deterministic"] and len(final["returns"]) == 10
        assert (run / "model.pt").is_file() and "seed: " + str(seed) in (run / "config.yaml").read_text()
    assert "2/2 runs finished" in out.getvalue() and "min left" in out.getvalue()


@pytest.mark.slow  # trains real runs: tens of seconds (the quick loop stays under 3 minutes)
def test_started_again_it_does_only_what_is_left(suite, tmp_path):
    assert runner.bench(["tiny"], seeds=3, jobs=2, runs_dir=str(suite), stream=io.StringIO()) == 0
    runs = [suite / "bench" / "tiny_ppo" / f"seed_{seed}" for seed in range(3)]
    untouched = (runs[0] / "final_eval.json").read_bytes(), (runs[0] / "checkpoint.pt").stat().st_mtime_ns
    (runs[1] / "final_eval.json").unlink()  # trained, not yet evaluated
    for name in ("model.pt", "final_eval.json"):  # stopped during training: resumes
        (runs[2] / name).unlink()
    plans = {run.name: [step[3] for step in runner.plan(runner.Run(TINY, i, run), tmp_path / "configs")]
             for i, run in enumerate(runs)}
    assert plans == {"seed_0": [], "seed_1": ["eval"], "seed_2": ["run", "eval"]}
    assert runner.bench(["tiny"], seeds=3, jobs=2, runs_dir=str(suite), stream=io.StringIO()) == 0
    assert ((runs[0] / "final_eval.json").read_bytes(), (runs[0] / "checkpoint.pt").stat().st_mtime_ns) == untouched
    assert all((run / "final_eval.json").is_file() for run in runs)


def test_a_failing_run_is_reported_by_name_and_the_others_finish(suite):
    out = io.StringIO()
    assert runner.bench(["tiny_broken"], seeds=1, jobs=1, runs_dir=str(suite), stream=out) == 1
    assert (suite / "bench" / "tiny_ppo" / "seed_0" / "final_eval.json").is_file()
    report = out.getvalue().splitlines()[-1]
    assert report.startswith("zoo bench: broken/seed_0 failed:") and "NoSuchEnv-v9" in report


@pytest.mark.slow
def test_killed_mid_way_and_started_again_it_finishes_without_training_a_finished_run_again(suite, tmp_path):
    command = [sys.executable, "-c", "import sys; from zoo.bench import runner; from zoo.bench.suites import Entry; "
               f"runner.configs_dir = lambda *_: __import__('pathlib').Path({str(tmp_path / 'configs')!r}); "
               f"runner.SUITES['tiny'] = ({TINY!r},); "
               f"sys.exit(runner.bench(['tiny'], seeds=4, jobs=1, runs_dir={str(suite)!r}))"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    first = suite / "bench" / "tiny_ppo" / "seed_0" / "final_eval.json"
    deadline = time.monotonic() + 120
    while not first.is_file():
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    done_before = first.read_bytes()
    assert not (suite / "bench" / "tiny_ppo" / "seed_3" / "final_eval.json").exists()
    assert runner.bench(["tiny"], seeds=4, jobs=2, runs_dir=str(suite), stream=io.StringIO()) == 0
    assert first.read_bytes() == done_before  # seed 0 was neither trained nor evaluated again
    assert all((suite / "bench" / "tiny_ppo" / f"seed_{seed}" / "final_eval.json").is_file() for seed in range(4))


def test_bad_suites_and_a_second_runner_are_one_line(suite):
    from zoo.errors import ZooError

    with pytest.raises(ZooError, match="unknown benchmark suite 'nope': choose from"):
        runner.bench(["nope"], runs_dir=str(suite))
    (suite / "bench").mkdir(parents=True)
    import fcntl

    with open(suite / "bench" / ".lock", "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ZooError, match="another zoo bench is running"):
            runner.bench(["tiny"], runs_dir=str(suite))


@pytest.mark.slow  # trains real runs: the quick loop stays under 3 minutes
def test_the_report_tables_finished_runs_beside_published_figures_and_pending_ones_as_pending(suite, tmp_path):
    from zoo.bench import report

    assert runner.bench(["tiny"], seeds=2, jobs=2, runs_dir=str(suite), stream=io.StringIO()) == 0
    docs = tmp_path / "docs"
    docs.mkdir()
    path = report.report(["tiny", "tiny_broken"], runs_dir=str(suite), out=str(docs / "benchmarks.md"), seeds=3,
                         reps=200, configs=tmp_path / "configs")
    text = Path(path).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| tiny_ppo "))
    assert "| CartPole-v1 | ppo | 2,048 | 2/3 |" in row and "[" in row and "CleanRL" in row
    finals = [json.loads((suite / "bench" / "tiny_ppo" / f"seed_{s}" / "final_eval.json").read_text()) for s in (0, 1)]
    means = [sum(f["returns"]) / len(f["returns"]) for f in finals]
    assert f"{sum(means) / 2:,.1f} +- " in row  # the mean over seeds of each seed's final evaluation
    assert "| broken | NoSuchEnv-v9 | ppo | 2,048 | 0/3 | pending |  |  | none found |" in text  # what it will train
    assert (docs / "benchmarks" / "tiny.png").is_file() and "![tiny](benchmarks/tiny.png)" in text


@pytest.mark.slow  # trains real runs: tens of seconds (the quick loop stays under 3 minutes)
def test_shards_split_the_runs_disjointly_and_one_report_combines_them(suite, tmp_path):
    import fcntl

    from zoo.bench import report
    from zoo.errors import ConfigError, ZooError

    runs = [runner.Run(TINY, seed, Path(f"seed_{seed}")) for seed in range(7)]
    slices = [runner.shard_of(runs, (k, 3)) for k in (1, 2, 3)]
    assert sorted(run.seed for part in slices for run in part) == list(range(7))  # disjoint, complete
    assert [len(part) for part in slices] == [3, 2, 2]
    assert runner.parse_shard("2/4") == (2, 4)
    for bad in ("0/2", "3/2", "1", "a/b", "1/2/3"):
        with pytest.raises(ConfigError, match="is not K/M"):
            runner.parse_shard(bad)
    (suite / "bench").mkdir(parents=True)
    # shard 1 "runs on another machine" (its lock is held): shard 2 still trains its own slice ...
    with open(suite / "bench" / ".lock-shard-1-of-2", "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert runner.bench(["tiny"], seeds=3, runs_dir=str(suite), stream=io.StringIO(), shard=(2, 2)) == 0
        with pytest.raises(ZooError, match="for shard 1/2"):  # ... but a second runner of shard 1 is refused
            runner.bench(["tiny"], seeds=3, runs_dir=str(suite), shard=(1, 2))
    trained = sorted(p.name for p in (suite / "bench" / "tiny_ppo").iterdir())
    assert trained == ["seed_1"]
    out = io.StringIO()
    assert runner.bench(["tiny"], seeds=3, runs_dir=str(suite), stream=out, shard=(1, 2)) == 0
    assert "2/2 runs finished" in out.getvalue()
    assert sorted(p.name for p in (suite / "bench" / "tiny_ppo").iterdir()) == ["seed_0", "seed_1", "seed_2"]
    docs = tmp_path / "docs"
    docs.mkdir()
    text = Path(report.report(["tiny"], runs_dir=str(suite), out=str(docs / "benchmarks.md"), seeds=3, reps=200,
                              configs=tmp_path / "configs")).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| tiny_ppo "))
    assert "| 3/3 |" in row  # one table from both shards' runs


@pytest.mark.slow  # trains real runs: tens of seconds (the quick loop stays under 3 minutes)
def test_results_kept_as_data_regenerate_the_report_without_run_directories(suite, tmp_path):
    import gzip
    import shutil

    from zoo.bench import report
    from zoo.bench.results import compressed

    results = tmp_path / "results"
    assert runner.bench(["tiny"], seeds=2, runs_dir=str(suite), stream=io.StringIO(), results=results) == 0
    for seed in (0, 1):
        run, kept = suite / "bench" / "tiny_ppo" / f"seed_{seed}", results / "tiny_ppo" / f"seed_{seed}"
        assert sorted(p.name for p in kept.iterdir()) == ["config.yaml", "environment.json", "final_eval.json",
                                                          "metrics.jsonl.gz"]
        assert gzip.decompress((kept / "metrics.jsonl.gz").read_bytes()) == (run / "metrics.jsonl").read_bytes()
        assert (kept / "final_eval.json").read_bytes() == (run / "final_eval.json").read_bytes()
    assert compressed(b"rows\n") == compressed(b"rows\n")  # the same rows, the same bytes: commits stay quiet
    docs = tmp_path / "docs"
    docs.mkdir()

    def table(**where) -> list[str]:
        text = Path(report.report(["tiny"], out=str(docs / "benchmarks.md"), seeds=2, reps=200,
                                  configs=tmp_path / "configs", **where)).read_text()
        return text.splitlines()

    from_runs = table(runs_dir=str(suite))
    shutil.rmtree(suite)  # a fresh clone: no run directory at all
    from_results = table(results=results)
    assert from_results[3:] == from_runs[3:] and "| 2/2 |" in "\n".join(from_results)  # all but the header line
    assert table(results=results) == from_results  # the same results, the same file
    # a run evaluated before the results folder existed is kept on the next start, without training
    other = tmp_path / "later"
    assert runner.bench(["tiny"], seeds=1, runs_dir=str(tmp_path / "runs2"), stream=io.StringIO()) == 0
    out = io.StringIO()
    assert runner.bench(["tiny"], seeds=1, runs_dir=str(tmp_path / "runs2"), stream=out, results=other) == 0
    assert (other / "tiny_ppo" / "seed_0" / "final_eval.json").is_file() and "1/1 runs finished" in out.getvalue()


def test_a_damaged_kept_metrics_file_is_one_line(tmp_path):
    from zoo.errors import ZooError
    from zoo.run.view import RunView

    kept = tmp_path / "seed_0"
    kept.mkdir()
    (kept / "config.yaml").write_text("seed: 0\n")
    (kept / "metrics.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ZooError, match="not a readable gzip file"):
        _ = RunView(kept).rows


def test_a_kept_metrics_file_that_decompresses_too_far_is_refused(tmp_path, monkeypatch):
    from zoo.bench.results import compressed
    from zoo.errors import ZooError
    from zoo.run import metrics_files
    from zoo.run.view import RunView

    monkeypatch.setattr(metrics_files, "MAX_DECOMPRESSED_BYTES", 1000)
    kept = tmp_path / "seed_0"
    kept.mkdir()
    (kept / "metrics.jsonl.gz").write_bytes(compressed(b'{"iteration": 1}\n' * 100))  # 1,700 bytes inflated
    with pytest.raises(ZooError, match="decompresses to more than"):
        _ = RunView(kept).rows
    (kept / "metrics.jsonl.gz").write_bytes(compressed(b'{"iteration": 1}\n' * 10))
    assert RunView(kept).rows == [{"iteration": 1}] * 10


@pytest.mark.slow  # trains real runs: tens of seconds (the quick loop stays under 3 minutes)
def test_a_new_runs_directory_goes_on_from_the_kept_results(suite, tmp_path):
    import shutil

    results = tmp_path / "results"
    assert runner.bench(["tiny"], seeds=2, runs_dir=str(suite), stream=io.StringIO(), results=results) == 0
    kept = [results / "tiny_ppo" / f"seed_{seed}" for seed in range(3)]
    first = [(k / "final_eval.json").read_bytes() for k in kept[:2]]
    shutil.rmtree(suite)  # the runs directory laid anew; the results were committed
    out = io.StringIO()
    assert runner.bench(["tiny"], seeds=3, runs_dir=str(suite), stream=out, results=results) == 0
    assert out.getvalue().splitlines()[0].startswith("zoo bench: 2/3 runs finished, 0 running, 1 waiting")
    assert sorted(p.name for p in (suite / "bench" / "tiny_ppo").iterdir()) == ["seed_2"]  # only the new seed
    assert [(k / "final_eval.json").read_bytes() for k in kept[:2]] == first
    assert (kept[2] / "final_eval.json").is_file()
    from zoo.bench.results import finished_kept

    configs = tmp_path / "configs"
    assert finished_kept(kept[0], TINY, 0, configs) is None and finished_kept(kept[0], TINY, 1, configs)
    assert finished_kept(results / "tiny_ppo" / "seed_7", TINY, 7, configs) == ""  # nothing kept: trains, silently
    copy = tmp_path / "copy"
    shutil.copytree(kept[0], copy)
    (copy / "config.yaml").write_text("seed: [unclosed\n")
    assert finished_kept(copy, TINY, 0, configs) == f"'{copy / 'config.yaml'}' cannot be read as a config"
    # kept files that are not the entry's finished run train again and are replaced once evaluated
    shutil.rmtree(suite)
    config = kept[0] / "config.yaml"
    config.write_text(config.read_text().replace("epochs: 1", "epochs: 2"))  # a config changed since
    (kept[1] / "final_eval.json").write_text('{"returns": [1.0]}')  # damaged: 1 episode, not 10
    (kept[2] / "metrics.jsonl.gz").unlink()
    out = io.StringIO()
    assert runner.bench(["tiny"], seeds=3, runs_dir=str(suite), stream=out, results=results) == 0
    said = out.getvalue()
    assert "tiny_ppo/seed_0 trains again: " in said and "policy.epochs is 2 there, 1 for the entry" in said
    assert "tiny_ppo/seed_1 trains again: " in said and "not a final evaluation of 10 episodes" in said
    assert "tiny_ppo/seed_2 trains again: " in said and "has no metrics.jsonl.gz" in said
    assert "0/3 runs finished" in said and "3/3 runs finished" in said
    assert sorted(p.name for p in (suite / "bench" / "tiny_ppo").iterdir()) == ["seed_0", "seed_1", "seed_2"]
    assert "epochs: 1" in config.read_text() and len(_final(kept[1])["returns"]) == 10
    assert (kept[2] / "metrics.jsonl.gz").is_file()
    # without --results nothing is taken from anywhere else: a fresh runs directory trains every seed
    assert runner.bench(["tiny"], seeds=1, runs_dir=str(tmp_path / "fresh"), stream=io.StringIO()) == 0
    assert (tmp_path / "fresh" / "bench" / "tiny_ppo" / "seed_0" / "final_eval.json").is_file()


def test_entries_pick_what_trains_and_a_name_that_is_no_entry_is_one_line(suite, tmp_path):
    from zoo.errors import ConfigError

    out = io.StringIO()
    assert runner.bench(["tiny_broken"], seeds=1, runs_dir=str(suite), stream=out, only=["tiny_ppo"]) == 0
    assert "1/1 runs finished" in out.getvalue() and not (suite / "bench" / "broken").exists()
    entries = runner.entries_of(["mujoco"])
    picked = runner.pick_entries(entries, ["td3_hopper", "ppo_hopper"], ["mujoco"])
    assert [e.name for e in picked] == ["ppo_hopper", "td3_hopper"]  # the suites' order, not the names'
    assert runner.pick_entries(entries, None, ["mujoco"]) == entries
    with pytest.raises(ConfigError, match=r"--entries: 'sac_hoper' is not an entry of mujoco: did you mean "
                                          r"'sac_hopper'\?"):
        runner.pick_entries(entries, ["sac_hoper"], ["mujoco"])
    with pytest.raises(ConfigError, match="'cartpole' is not an entry of ace: choose from sac_hopper, "):
        runner.pick_entries(runner.entries_of(["ace"]), ["cartpole"], ["ace"])
    done = subprocess.run([sys.executable, "-m", "zoo", "bench", "ace", "--report", str(tmp_path / "b.md"),
                           "--entries", "sac_hopper"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "drop --entries" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "b.md").exists()
