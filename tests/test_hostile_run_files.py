"""Run directories and bench folders as hostile input (issue 39, section 2): FIFOs, devices and links in a file's
place are refused before anything opens them (never a hang), one runner at a time per run (entry and seed) however
the runs directory is sliced, bounded ``--seeds``/``--jobs``, and no ``zoo-child-*`` folder outlives a ``kill -9``.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zoo.bench import runner, runs
from zoo.bench.locks import RunLocks
from zoo.bench.suites import Entry
from zoo.cli import main
from zoo.config import dump_config
from zoo.errors import RunDirectoryError, ZooError
from zoo.run.run_dir import RunDirectory, lock_owner
from zoo.run.state_files import load_weights_only, read_regular
from zoo.run.view import RunView

CONFIG = ("config = dict(exp_name='b', env=dict(id='CartPole-v1'), policy=dict(type='ppo', epochs=1), "
          "pipeline=dict(num_envs=4, rollout_steps=32, max_env_steps=2048, eval_every=4, eval_episodes=2))\n")
TINY = Entry("tiny_ppo", "tiny.py", ("pipeline.stop_return=None",), 0.1)


@pytest.fixture
def configs(tmp_path, monkeypatch):
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "tiny.py").write_text(CONFIG)
    monkeypatch.setitem(runner.SUITES, "tiny", (TINY,))
    monkeypatch.setattr(runner, "configs_dir", lambda *_: folder)
    return folder


def _run(path: Path, configs: Path, seed: int = 0, evaluated: bool = True) -> Path:
    """A finished run directory of TINY's ``seed`` (placeholders for the weights: nothing here loads them)."""
    path.mkdir(parents=True)
    cfg = runs.expected_config(TINY, seed, configs)
    cfg.update(runs_dir=str(path.parent), exp_name=path.name)
    dump_config(cfg, path / "config.yaml")
    (path / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "env_steps": 2048, "wall_time": 1.0}) + "\n")
    for name in ("checkpoint.pt", "model.pt"):
        (path / name).write_bytes(b"placeholder")
    if evaluated:
        (path / "final_eval.json").write_text(json.dumps({"returns": [1.0] * 10, "episodes": 10,
                                                          "seed": runs.eval_seed(seed)}))
    return path


def _fifo(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def _dev_zero(path: Path) -> Path:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")
    return path


# -- no read ever blocks or runs forever -------------------------------------------------------------------------
@pytest.mark.parametrize("make", [_fifo, _dev_zero])
def test_every_reader_refuses_a_fifo_or_a_device_before_opening_it(tmp_path, configs, make):
    run = _run(tmp_path / "run", configs)
    started = time.monotonic()
    kind = re.escape("a FIFO (named pipe)" if make is _fifo else "a character device")
    for name in ("checkpoint.pt", "metrics.jsonl", "environment.json", "final_eval.json"):
        make(run / name)
    with pytest.raises(RunDirectoryError, match=f"checkpoint.pt' is {kind}, not a regular file"):
        load_weights_only(run / "checkpoint.pt")
    with pytest.raises(ZooError, match=f"metrics.jsonl' is {kind}, not a regular file"):
        _ = RunView(run).rows
    with pytest.raises(ZooError, match=f"final_eval.json' is not a final evaluation .*: it is {kind}, not a regular"):
        RunView(run).final_returns()
    assert RunView(run).started is None  # a record only: unreadable is unknown
    make(run / ".lock")
    assert lock_owner(run) is None  # no zoo process can hold that
    with pytest.raises(RunDirectoryError, match=r"\.lock' is .*, not a regular file: zoo locks a run directory"):
        RunDirectory(run).lock()
    assert time.monotonic() - started < 5


_COMMANDS = [["run", "--resume", "{run}"], ["export", "{run}", "--format", "torchscript"], ["eval", "{run}"],
             ["plot", "{run}"]]
_STATE_FILES = (".lock", "checkpoint.pt", "metrics.jsonl")


# config.yaml a FIFO: named as one, not "no config.yaml" (the file is there); zoo plot does not read the config
@pytest.mark.parametrize("command, names", [(c, _STATE_FILES) for c in _COMMANDS]
                         + [(c, ("config.yaml",)) for c in _COMMANDS[:3]])
def test_the_commands_say_one_line_for_a_fifo_in_a_run_directory(tmp_path, configs, capsys, command, names):
    run = _run(tmp_path / "run", configs)
    for name in names:
        _fifo(run / name)
    started = time.monotonic()
    assert main([part.replace("{run}", str(run)) for part in command]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zoo: error: ") and err.count("\n") == 1 and "is a FIFO (named pipe), not a regular" in err
    assert time.monotonic() - started < 30


def test_zoo_bench_refuses_a_fifo_environment_record_without_blocking(tmp_path, configs):
    run = _run(tmp_path / "runs" / "bench" / TINY.name / "seed_0", configs)
    _fifo(run / "environment.json")
    out = io.StringIO()
    started = time.monotonic()
    assert runner.bench(["tiny"], seeds=1, runs_dir=str(tmp_path / "runs"), stream=out,
                        results=tmp_path / "results") == 1
    assert time.monotonic() - started < 15  # was: blocked in open() for 16 minutes, deaf to SIGTERM
    assert out.getvalue().splitlines()[-1].startswith(f"zoo bench: tiny_ppo/seed_0 failed: "
                                                      f"'{run / 'environment.json'}' is a FIFO (named pipe)")
    assert not (tmp_path / "results" / TINY.name / "seed_0").exists()


def test_read_regular_is_bounded_before_it_reads(tmp_path):
    path = tmp_path / "big.json"
    with open(path, "wb") as sparse:
        sparse.truncate(1 << 40)  # a terabyte of holes
    with pytest.raises(RunDirectoryError, match="is larger than 1,024 bytes"):
        read_regular(path, 1024)


def test_a_seed_folder_that_is_a_symbolic_link_is_a_failed_run_never_trained_into(tmp_path, configs):
    outside = _run(tmp_path / "outside", configs, evaluated=False)
    (outside / "model.pt").unlink()  # stopped during training: resumable, were it followed
    folder = tmp_path / "runs" / "bench" / TINY.name
    folder.mkdir(parents=True)
    (folder / "seed_0").symlink_to(outside, target_is_directory=True)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in outside.iterdir())
    out = io.StringIO()
    assert runner.bench(["tiny"], seeds=1, runs_dir=str(tmp_path / "runs"), stream=out) == 1
    assert out.getvalue().splitlines()[-1] == (f"zoo bench: tiny_ppo/seed_0 failed: '{folder / 'seed_0'}' is a "
                                               "symbolic link: zoo bench trains only into folders of its own under the "
                                               "runs directory: move it away, zoo bench neither trains into nor "
                                               "reports it")
    assert sorted((p.name, p.stat().st_mtime_ns) for p in outside.iterdir()) == before


# -- one runner per run, however the runs directory is sliced ----------------------------------------------------------
def test_a_run_another_runner_holds_is_left_to_it_never_trained_twice(tmp_path, configs):
    root = tmp_path / "runs" / "bench"
    other = RunLocks(root)  # another zoo bench (--shard 1/3, say) is running seed 0
    assert other.take("tiny_ppo/seed_0") is None
    out = io.StringIO()
    started = time.monotonic()
    assert runner.bench(["tiny"], seeds=1, runs_dir=str(tmp_path / "runs"), stream=out, shard=(1, 2)) == 1
    assert out.getvalue().splitlines()[-1] == (
        f"zoo bench: tiny_ppo/seed_0 failed: another zoo bench (pid {os.getpid()}) is running it (an overlapping "
        "--shard, or the same runs directory): left to it; run this command again once that one has finished")
    assert not (root / TINY.name).exists() and time.monotonic() - started < 15  # nothing trained, no seed_0_2
    other.release_all()
    assert RunLocks(root).take("tiny_ppo/seed_0") is None  # free again once its runner lets go (or dies)


def test_runs_are_seed_major_so_slices_mix_entries_and_seeds():
    a, b, c = (Entry(name, "x.py") for name in "abc")
    order = [(run.entry.name, run.seed) for run in runner.bench_runs([a, b, c], 2, Path("r"))]
    assert order == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1), ("c", 1)]
    classic = runner.entries_of(["classic"])
    minutes = [sum(run.entry.est_minutes for run in runner.shard_of(runner.bench_runs(classic, 5, Path("r")), (k, 2)))
               for k in (1, 2)]
    assert max(minutes) < 1.5 * min(minutes)  # entry-major, one slice would take the MuJoCo-free half's twice


@pytest.mark.slow
def test_two_overlapping_shardings_at_once_train_each_seed_once(tmp_path, configs):
    command = [sys.executable, "-c", "import sys; from pathlib import Path; from zoo.bench import runner; from "
               f"zoo.bench.suites import Entry; runner.configs_dir = lambda *_: Path({str(configs)!r}); "
               f"runner.SUITES['tiny'] = ({TINY!r},); "
               f"sys.exit(runner.bench(['tiny'], seeds=3, runs_dir={str(tmp_path / 'runs')!r}, "
               "shard=(1, int(sys.argv[1]))))"]
    first = subprocess.Popen([*command, "2"], stderr=subprocess.PIPE, text=True)  # seeds 0 and 2
    second = subprocess.Popen([*command, "3"], stderr=subprocess.PIPE, text=True)  # seed 0
    errors = [process.communicate(timeout=600)[1] for process in (first, second)]
    trained = sorted(p.name for p in (tmp_path / "runs" / "bench" / TINY.name).iterdir())
    assert trained == ["seed_0", "seed_2"], errors  # never seed_0_2
    left = [err for err in errors if "is running it (an overlapping --shard" in err]
    assert len(left) == 1 or all(code == 0 for code in (first.returncode, second.returncode)), errors


# -- bounded counts -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "line"), [
    (["bench", "classic", "--seeds", "99999999999999999999999"],
     "--seeds must be at least 1 and at most 1000 seeds, got 99999999999999999999999"),
    (["bench", "classic", "--seeds", "0"], "--seeds must be at least 1 and at most 1000 seeds, got 0"),
    (["bench", "classic", "--jobs", "100000"],
     "--jobs must be at least 1 and at most 256 (runs at once, each a process), got 100000"),
    (["run", "--config", "configs/ppo_cartpole.py", "--seeds", "0", "1", "--jobs", "999"],
     "--jobs must be at least 1 and at most 256 (runs at once, each a process), got 999"),
    (["run", "--config", "configs/ppo_cartpole.py", "--seeds", *map(str, range(1001))],
     "--seeds must be at least 1 and at most 1000 seeds, got 1001"),
])
def test_seeds_and_jobs_are_bounded_in_one_line(capsys, args, line):
    started = time.monotonic()
    assert main(args) == 2
    assert capsys.readouterr().err == f"zoo: error: {line}\n"
    assert time.monotonic() - started < 5  # was: a MemoryError planning 10**23 runs


# -- no temporary folder outlives kill -9 ------------------------------------------------------------------------------
def test_a_runner_killed_with_sigkill_leaves_no_child_folder_after_the_next_start(tmp_path, monkeypatch):
    import tempfile

    from zoo.run.children import start_child

    script = ("import os, signal, sys, time; from zoo.run.children import ChildRuns\n"
              "runs = ChildRuns()\nfor key in range(3):\n    runs.start(key, ['sleep', '60'])\n"
              "print('started', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL and done.stdout == "started\n", done.stderr
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("zoo-child-"))
    assert len(left) == 3  # what a kill -9 leaves ...
    (tmp_path / "zoo-child-older").mkdir()  # ... and a folder of an older zoo, without an owner: never touched
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    child = start_child([sys.executable, "-c", "pass"])  # the next start removes them
    child.wait()
    child.finish()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("zoo-child-")) == ["zoo-child-older"]
