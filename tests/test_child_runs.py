"""One runner for child runs (issue 28, item 5): ``zoo.run.children.ChildRuns`` reads a ``zoo run`` child's summary
from the file it writes (never from its text), its error from one place, and ``zoo run --seeds --jobs N``'s children
die with it and hear its stop signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zoo import cli
from zoo.run.children import SUMMARY_ENV, ChildRuns, error_line
from zoo.run.run_dir import CONFIG_FILE, lock_owner

SUMMARY = {"reason": "max_env_steps", "iteration": 3, "env_steps": 96, "wall_time": 1.5,
           "episode_return_mean": 12.25, "run_dir": "/somewhere/seed_0"}


def _ended(children: ChildRuns, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    found: dict = {}
    while len(children) and time.monotonic() < deadline:
        found.update(children.ended())
        time.sleep(0.05)
    return found


def test_the_summary_is_read_from_the_file_the_child_writes_not_from_its_text():
    writes = (f"from zoo.run.children import write_summary; write_summary({SUMMARY!r}); "
              "print('run_dir=/elsewhere reason=stop_return env_steps=7 wall_time=1.0s')")
    prints_only = "print('run_dir=/elsewhere reason=stop_return env_steps=7 wall_time=1.0s')"
    children = ChildRuns()
    children.start("writes", [sys.executable, "-c", writes])
    children.start("prints", [sys.executable, "-c", prints_only])
    ended = _ended(children)
    assert ended["writes"].summary == SUMMARY
    assert ended["writes"].code == 0 and ended["writes"].error is None
    assert ended["prints"].summary is None  # a summary line alone is text, not an outcome
    assert ended["prints"].output == "run_dir=/elsewhere reason=stop_return env_steps=7 wall_time=1.0s\n"


def test_a_failed_child_gives_its_last_error_line_and_leaves_no_temporary_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read again
    script = ("import sys; print('zoo: error: first'); print('zoo: internal error: ValueError: second'); "
              "print('a last word'); sys.exit(2)")
    children = ChildRuns()
    children.start(0, [sys.executable, "-c", script])
    ended = _ended(children)[0]
    assert (ended.code, ended.summary, ended.error) == (2, None, "zoo: internal error: ValueError: second")
    assert list(tmp_path.iterdir()) == []


def test_error_line_is_the_last_zoo_error_line():
    assert error_line("x\nzoo: error: a\nzoo: error: b\ny\n") == "zoo: error: b"
    assert error_line("zoo: errors: no\nTraceback\n") is None


def test_a_stop_goes_to_every_running_child():
    children = ChildRuns()
    for key in ("a", "b"):
        children.start(key, [sys.executable, "-c", "import time; time.sleep(60)"])
    started = time.monotonic()
    ended = dict(children.stop())
    assert time.monotonic() - started < 30
    assert {key: value.code for key, value in ended.items()} == {"a": -signal.SIGTERM, "b": -signal.SIGTERM}
    assert len(children) == 0


CONFIG = ("config = dict(exp_name='many', env=dict(id='CartPole-v1'), policy=dict(type='ppo', epochs=1, "
          "minibatch_size=32), pipeline=dict(num_envs=1, rollout_steps=32, max_env_steps={steps}))\n")


def test_zoo_run_writes_its_summary_where_the_runner_asked(tmp_path, monkeypatch, capsys):
    config = tmp_path / "cfg.py"
    config.write_text(CONFIG.format(steps=64))
    monkeypatch.setenv(SUMMARY_ENV, str(tmp_path / "summary.json"))
    assert cli.main(["run", "--config", str(config), "--set", f"runs_dir={tmp_path / 'runs'}", "-q"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    line = dict(part.split("=", 1) for part in capsys.readouterr().out.split())
    assert summary["run_dir"] == line["run_dir"] == str(tmp_path / "runs" / "many")
    assert (summary["reason"], summary["env_steps"]) == ("max_env_steps", 64)
    assert line["wall_time"] == f"{summary['wall_time']:.1f}s"


def _seeds(tmp_path: Path) -> subprocess.Popen:
    config = tmp_path / "cfg.py"
    config.write_text(CONFIG.format(steps=10**8))
    return subprocess.Popen([sys.executable, "-m", "zoo", "run", "--config", str(config), "--set",
                             f"runs_dir={tmp_path / 'runs'}", "--seeds", "0", "1", "--jobs", "2", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _has_row(run: Path) -> bool:
    path = run / "metrics.jsonl"
    return path.is_file() and path.stat().st_size > 0


def _wait_training(tmp_path: Path, parent: subprocess.Popen) -> list[Path]:
    runs = [tmp_path / "runs" / "many" / f"seed_{seed}" for seed in (0, 1)]
    deadline = time.monotonic() + 120
    # Training: a first metrics row is written only once the run handles stop signals (it saves on SIGTERM).
    while not all((run / CONFIG_FILE).is_file() and lock_owner(run) and _has_row(run) for run in runs):
        assert time.monotonic() < deadline and parent.poll() is None, parent.communicate()
        time.sleep(0.2)
    return runs


def _kill(pids: list[int]) -> None:
    for pid in pids:  # what a broken runner left training as orphans
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _released(runs: list[Path], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(lock_owner(run) for run in runs):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.slow
def test_seeds_children_die_with_a_killed_parent(tmp_path):
    parent = _seeds(tmp_path)
    runs = _wait_training(tmp_path, parent)
    owners = [int(lock_owner(run)) for run in runs]
    parent.kill()
    parent.wait()
    try:
        assert _released(runs, 60)  # each child got SIGTERM, saved and let go of its run directory
    finally:
        _kill(owners)


@pytest.mark.slow
def test_seeds_pass_a_sigterm_on_and_report_the_interrupted_seeds(tmp_path):
    parent = _seeds(tmp_path)
    runs = _wait_training(tmp_path, parent)
    owners = [int(lock_owner(run)) for run in runs]
    parent.send_signal(signal.SIGTERM)
    try:
        out, err = parent.communicate(timeout=120)
        assert parent.returncode == 128 + signal.SIGTERM, err
        rows = [line.split() for line in out.splitlines()[-3:]]
        assert [(row[0], row[1]) for row in rows[:2]] == [("0", "interrupted"), ("1", "interrupted")]
        assert [row[-1] for row in rows[:2]] == [str(run) for run in runs]
        assert _released(runs, 1)
    finally:
        _kill(owners)
