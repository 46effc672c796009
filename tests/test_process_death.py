"""No process outlives the one that started it, and none prints a traceback when it goes.

- Async env workers (``pipeline.vector_mode=async``) of a ``zoo run`` killed with SIGKILL exit within seconds and
  silently: no "Traceback" from gymnasium's worker loop on the terminal. A Ctrl-C, which reaches them too, is
  left to the main process: it finishes the iteration and saves.
- ``stop_when_parent_dies``: a process whose parent dies runs its SIGTERM handler (its stop handling), as soon as
  one is installed, and, if it is still alive after the grace period, exits anyway.
(The torchrun case, a killed agent, is in test_dppo.py beside the other torchrun tests.)
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_dppo import _alive, _children  # the /proc helpers


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _alive(pids)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


ASYNC_PPO = {
    "exp_name": "a", "seed": 0, "env": {"id": "CartPole-v1"}, "policy": {"type": "ppo", "epochs": 1},
    "pipeline": {"num_envs": 2, "rollout_steps": 16, "vector_mode": "async", "max_env_steps": 10_000_000,
                 "eval_every": 0, "checkpoint_every": 0},
}


def _start_async_run(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A ``zoo run`` with async envs, in a process group of its own (so that `finally` can kill everything it
    started), once it has written 2 metrics rows; its run directory."""
    path = tmp_path / "cfg.py"
    path.write_text(f"config = {dict(ASYNC_PPO, runs_dir=str(tmp_path / 'runs'))!r}\n")
    run_dir = tmp_path / "runs" / "a"
    process = subprocess.Popen([sys.executable, "-m", "zoo", "run", "--config", str(path)], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        metrics = run_dir / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no metrics row within 60 s"
            time.sleep(0.02)
    except BaseException:
        _kill_group(process)
        raise
    return process, run_dir


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_async_env_workers_of_a_killed_run_exit_at_once_without_a_traceback(tmp_path):
    process, _ = _start_async_run(tmp_path)
    try:
        workers = _children(process.pid)
        assert len(workers) >= 2  # one per sub-env
        process.kill()
        # EOF on stderr only once every process holding it (the env workers inherit it) has exited.
        _, err = process.communicate(timeout=20)
        assert _wait_gone(workers, 5.0) == []
    finally:
        _kill_group(process)
    assert "Traceback" not in err, err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_reaching_the_async_env_workers_too_still_saves_at_the_stop_without_a_traceback(tmp_path):
    process, run_dir = _start_async_run(tmp_path)
    try:
        workers = _children(process.pid)
        os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the workers get it too
        out, err = process.communicate(timeout=30)
        assert _wait_gone(workers, 5.0) == []
    finally:
        _kill_group(process)
    assert process.returncode == 130 and "checkpoint saved; continue with: zoo run --resume" in out, (out, err)
    assert "Traceback" not in err, err


WATCHED = """
import os, signal, sys, time
sys.path[:0] = {path!r}
from zoo.lifetime import stop_when_parent_dies

handler = {{
    "exits": lambda signum, frame: (print("SIGTERM", flush=True), os._exit(0)),
    "ignores": lambda signum, frame: print("SIGTERM ignored", flush=True),
}}
parent = os.getppid()
if {mode!r} != "installed_late":
    signal.signal(signal.SIGTERM, handler[{mode!r}])
stop_when_parent_dies(grace_s={grace})
print("watching", flush=True)
if {mode!r} == "installed_late":  # the default action at first: the watcher waits for a handler, kills nothing
    while os.getppid() == parent:
        time.sleep(0.01)
    time.sleep(1.0)
    signal.signal(signal.SIGTERM, handler["exits"])
while True:  # busy, as a training loop is
    time.sleep(0.01)
"""

# The middle process: starts the watched one (sharing its stdout), reports its pid, then waits to be killed.
MIDDLE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
print(child.pid, flush=True)
time.sleep(60)
"""


def _read_lines(fd: int, count: int, seconds: float) -> list[str]:
    """The first ``count`` lines from ``fd`` (fewer at EOF), waiting at most ``seconds``."""
    data, deadline = b"", time.monotonic() + seconds
    while data.count(b"\n") < count:
        left = deadline - time.monotonic()
        assert left > 0 and select.select([fd], [], [], left)[0], f"no {count} lines within {seconds} s: {data!r}"
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.decode().splitlines()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("mode", ["exits", "ignores", "installed_late"])
def test_a_process_whose_parent_dies_runs_its_sigterm_handler_and_exits_after_the_grace_period(mode):
    code = textwrap.dedent(WATCHED).format(path=sys.path, mode=mode, grace=3.0)
    middle = subprocess.Popen([sys.executable, "-c", MIDDLE, code], stdout=subprocess.PIPE,
                              start_new_session=True)
    try:
        assert middle.stdout is not None
        fd = middle.stdout.fileno()
        lines = _read_lines(fd, 2, 15.0)
        assert len(lines) == 2 and lines[1] == "watching", lines
        watched = int(lines[0])
        middle.kill()
        middle.wait()
        killed = time.monotonic()
        # The watched process is reparented (to init or a subreaper, which reaps it): gone from /proc when done.
        assert _wait_gone([watched], 10.0) == []
        elapsed = time.monotonic() - killed
        rest = _read_lines(fd, 10, 5.0)  # up to EOF: the watched process, the last writer, is gone
    finally:
        _kill_group(middle)
    if mode == "exits":  # at the watcher's next poll
        assert rest == ["SIGTERM"] and elapsed < 2.0, (rest, elapsed)
    elif mode == "ignores":  # the handler ran but the process went on: the backstop ended it after the grace
        assert rest == ["SIGTERM ignored"] and 3.0 <= elapsed < 6.0, (rest, elapsed)
    else:  # not killed by the default action meanwhile: its handler ran once installed
        assert rest == ["SIGTERM"] and 1.0 <= elapsed < 3.0, (rest, elapsed)
