"""``zoo bench`` killed (``kill -9``) is ``zoo bench`` resumed: its children die with it (SIGTERM, so that they save),
and the rerun, started at once, waits for them and trains every seed exactly once, into exactly ``seed_<k>``.

Each test runs a real ``zoo bench`` process on a tiny suite (CartPole, 2k env steps, 2 seeds side by side), kills it
at one moment, reruns it in this process and checks /proc for orphans.
"""

from __future__ import annotations

import functools
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from zoo.bench import runner
from zoo.bench.locks import RunLocks, take_lock
from zoo.bench.suites import Entry

CONFIG = ("config = dict(exp_name='b', env=dict(id='CartPole-v1'), policy=dict(type='ppo', epochs=1), "
          "pipeline=dict(num_envs=4, rollout_steps=32, max_env_steps=2048, eval_every=4, eval_episodes=2))\n")
TINY = Entry("tiny_ppo", "tiny.py", ("pipeline.stop_return=None",), 0.1)
# Long enough (about 5 s of training) that an orphan would still be training well after the kill.
LONGER = Entry("tiny_ppo", "tiny.py", ("pipeline.stop_return=None", "pipeline.max_env_steps=16384"), 0.1)
SEEDS = 2
ORPHAN_S = 3.0  # on an idle machine; scaled by how slowly a child starts here (``_orphan_s``)


@functools.cache
def _orphan_s() -> float:
    """How long a killed runner's child may take to end: ``ORPHAN_S``, or twice a bare child's start (python and
    torch imported) where the machine is loaded (CI beside a benchmark: 3.6 s seen). An orphan goes on to train
    and evaluate after that start, so it still outlasts this."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, zoo.run.children"], check=True)
    return max(ORPHAN_S, 2.0 * (time.monotonic() - started))


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found |= {int(child) for child in handle.read().split()}
    except OSError:
        pass
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.fixture
def configs(tmp_path, monkeypatch):
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "tiny.py").write_text(CONFIG)
    monkeypatch.setattr(runner, "configs_dir", lambda *_: folder)
    monkeypatch.setitem(runner.SUITES, "tiny", (TINY,))
    return folder


def _kill_at(moment, configs: Path, runs: Path, entry: Entry = TINY) -> set[int]:
    """Start zoo bench, kill -9 it once ``moment(children)`` says so; the pids of every child it had."""
    script = ("import sys, pathlib; from zoo.bench import runner; from zoo.bench.suites import Entry; "
              f"runner.configs_dir = lambda *_: pathlib.Path({str(configs)!r}); runner.SUITES['tiny'] = ({entry!r},); "
              f"sys.exit(runner.bench(['tiny'], seeds={SEEDS}, jobs={SEEDS}, runs_dir={str(runs)!r}))")
    process = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL)
    seen: set[int] = set()
    deadline = time.monotonic() + 180
    try:
        while True:
            assert process.poll() is None and time.monotonic() < deadline, "zoo bench ended before the moment"
            children = _children(process.pid)
            seen |= children
            if moment(children):
                break
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    return seen


def _rerun_and_check(runs: Path, seen: set[int], steps: int = 2048) -> None:
    assert seen, "the killed zoo bench had started no child"
    killed = time.monotonic()
    ended: dict[int, float] = {}

    def watch() -> None:  # when each child of the killed runner ends, while the rerun goes on
        while len(ended) < len(seen) and time.monotonic() - killed < 60:
            ended.update({pid: time.monotonic() - killed for pid in seen if pid not in ended and not _alive(pid)})
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    # At once: the killed runner's children may still be saving; the rerun waits for them.
    out = io.StringIO()
    code = runner.bench(["tiny"], seeds=SEEDS, jobs=SEEDS, runs_dir=str(runs), stream=out)
    assert code == 0, out.getvalue()
    watcher.join()
    # Died with it: at once (startup, evaluation) or after saving the iteration in progress (a fraction of a second
    # here); an orphan would go on training or evaluating for seconds.
    assert set(ended) == seen and max(ended.values()) < _orphan_s(), ended
    folder = runs / "bench" / "tiny_ppo"
    assert sorted(path.name for path in folder.iterdir()) == [f"seed_{k}" for k in range(SEEDS)]  # no seed_k_2
    for seed in range(SEEDS):
        run = folder / f"seed_{seed}"
        assert f"seed: {seed}\n" in (run / "config.yaml").read_text()
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        # Trained exactly once: every iteration once, in order, to the budget (iterations of 128 steps).
        assert [row["iteration"] for row in rows] == list(range(1, steps // 128 + 1))
        assert rows[-1]["env_steps"] == steps
        assert len(json.loads((run / "final_eval.json").read_text())["returns"]) == 10


@pytest.mark.slow
def test_killed_before_its_children_wrote_a_config_the_rerun_trains_each_seed_once(configs, tmp_path):
    runs = tmp_path / "runs"
    first = runs / "bench" / "tiny_ppo" / "seed_0" / "config.yaml"
    seen = _kill_at(lambda children: len(children) == SEEDS and not first.exists(), configs, runs)
    _rerun_and_check(runs, seen)


@pytest.mark.slow
def test_killed_mid_training_the_children_save_and_the_rerun_resumes_them(configs, tmp_path, monkeypatch):
    monkeypatch.setitem(runner.SUITES, "tiny", (LONGER,))
    runs = tmp_path / "runs"
    seed_0 = runs / "bench" / "tiny_ppo" / "seed_0"

    def mid_training(children: set[int]) -> bool:
        try:
            rows = (seed_0 / "metrics.jsonl").read_text().count("\n")
        except OSError:
            return False
        return 2 <= rows and not (seed_0 / "model.pt").exists()

    seen = _kill_at(mid_training, configs, runs, LONGER)
    _rerun_and_check(runs, seen, 16384)


@pytest.mark.slow
def test_killed_during_the_final_evaluation_the_rerun_evaluates_again(configs, tmp_path):
    runs = tmp_path / "runs"
    seen = _kill_at(lambda children: any(" eval " in _cmdline(pid) for pid in children), configs, runs)
    _rerun_and_check(runs, seen)


# -- zoo.run.children, fast ------------------------------------------------------------------------------------------
def test_a_child_writes_any_amount_of_output_without_a_reader_and_gets_one_blas_thread(tmp_path):
    from zoo.run.children import start_child

    script = ("import os, sys; sys.stdout.write('x' * 300000); sys.stdout.flush(); "
              "print(os.environ['OPENBLAS_NUM_THREADS'], file=sys.stderr)")
    child = start_child([sys.executable, "-c", script], env={k: v for k, v in os.environ.items()
                                                              if k != "OPENBLAS_NUM_THREADS"})
    assert child.wait(timeout=20) == 0  # a pipe nobody reads would have blocked it at 64 KiB
    assert child.read_output() == "x" * 300000 + "1\n"
    child = start_child([sys.executable, "-c", script], env={**os.environ, "OPENBLAS_NUM_THREADS": "3"})
    assert child.wait(timeout=20) == 0 and child.read_output().endswith("x3\n")


def test_a_child_gets_sigterm_when_its_parent_is_killed(tmp_path):
    marker = tmp_path / "got"
    child_script = ("import pathlib, signal, time; signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path("
                    f"{str(marker)!r}).write_text(str(a[0])), exit(0))); print('ready', flush=True); time.sleep(60)")
    parent_script = ("import sys, time; from zoo.run.children import start_child; "
                     f"child = start_child([sys.executable, '-c', {child_script!r}]); print(child.pid, flush=True); "
                     "time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", parent_script], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    time.sleep(1.0)  # the child's handler is installed
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid) and marker.read_text() == str(int(signal.SIGTERM))


def test_wait_for_release_waits_for_the_lock_holder_and_is_bounded(tmp_path):
    from zoo.run.children import wait_for_release
    from zoo.run.run_dir import lock_owner

    assert wait_for_release(tmp_path / "missing", timeout_s=0.1) and not (tmp_path / "missing").exists()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; h = open(sys.argv[1], 'a+'); "
                               "fcntl.flock(h, fcntl.LOCK_EX); h.write(str(os.getpid())); h.flush(); print(1, "
                               "flush=True); time.sleep(float(sys.argv[2]))", str(tmp_path / ".lock"), "1.5"],
                              stdout=subprocess.PIPE, text=True)
    holder.stdout.readline()
    assert lock_owner(tmp_path) == str(holder.pid)
    started = time.monotonic()
    assert not wait_for_release(tmp_path, timeout_s=0.3)
    assert 0.3 <= time.monotonic() - started < 1.0
    assert wait_for_release(tmp_path, timeout_s=10) and lock_owner(tmp_path) is None
    holder.wait()


@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
def test_a_run_lock_passed_to_a_child_outlives_its_killed_runner_and_a_rerun_waits_for_that_child(tmp_path, reaped):
    # The runner is killed while its child is still starting (or saving): the child, not the ended runner, decides
    # when the run is free, so a rerun started at once never trains the seed beside it.
    path, started, done = tmp_path / "run.lock", tmp_path / "started", tmp_path / "done"
    child = ("import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "pathlib.Path(sys.argv[1]).touch(); time.sleep(1.5); pathlib.Path(sys.argv[2]).touch()")
    runner_script = ("import sys, time, pathlib; from zoo.bench.locks import take_lock; "
                     "from zoo.run.children import start_child; "
                     f"lock, _ = take_lock(pathlib.Path({str(path)!r})); "
                     f"child = start_child([sys.executable, '-c', {child!r}, {str(started)!r}, {str(done)!r}], "
                     "hold=lock); print(child.pid, flush=True); time.sleep(60)")
    killed = subprocess.Popen([sys.executable, "-c", runner_script], stdout=subprocess.PIPE, text=True)
    pid = int(killed.stdout.readline())
    deadline = time.monotonic() + 30
    while not started.exists():
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.01)
    killed.kill()
    if reaped:
        killed.wait()
    else:  # killed, not yet reaped by its parent: ended all the same
        while _alive(killed.pid):
            time.sleep(0.01)
    lock, holder = take_lock(path, time.monotonic())  # no wait for orphans: refused, and said why
    assert lock is None and holder == f"{killed.pid}, ended, its child still holding it"
    lock, _ = take_lock(path, time.monotonic(), time.monotonic() + 20)
    assert lock is not None and done.exists() and not _alive(pid)  # taken once the child had ended, not before
    assert os.pread(lock, 300, 0).decode().split()[0] == str(os.getpid())
    os.close(lock)
    killed.wait()


def test_the_bench_passes_each_runs_lock_to_the_child_it_starts_for_it(configs, tmp_path):
    root = tmp_path / "runs" / "bench"
    bench = runner.Bench([runner.Run(TINY, 0, root / TINY.name / "seed_0")], 1, io.StringIO(), configs,
                         locks=RunLocks(root))
    run = bench.runs[0]
    assert bench.locks.take(run.label) is None
    run.steps = [[sys.executable, "-c", "import time; time.sleep(30)"]]
    bench._start(run)
    try:
        bench.locks.release(run.label)  # as a kill of the runner would
        assert RunLocks(root).take(run.label) is not None  # the child holds it
    finally:
        bench.children.stop()
    assert RunLocks(root).take(run.label) is None  # free once the child has ended


def test_the_runner_waits_a_moment_for_a_lock_left_by_a_killed_runner_then_refuses(tmp_path):
    # A killed runner's child caught between fork and exec holds the lock's file for an instant.
    hold = ("import fcntl, sys, time; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(float(sys.argv[2]))")
    path = tmp_path / ".lock"
    for held_s, wait_s, taken in ((1.0, 10.0, True), (30.0, 0.5, False)):
        holder = subprocess.Popen([sys.executable, "-c", hold, str(path), str(held_s)], stdout=subprocess.PIPE)
        assert holder.stdout.readline() == b"held\n"
        lock, _ = take_lock(path, time.monotonic() + wait_s)
        assert (lock is not None) is taken
        if lock is not None:
            os.close(lock)
        holder.kill()
        holder.wait()
