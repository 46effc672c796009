"""IMPALA's faults with real actor processes: what a learner does when its actors stop delivering.

- A stop signal reaches a learner waiting for unrolls from actors that are all stopped (SIGSTOP): it saves the
  state before the waiting iteration and exits 128 + signal, leaving no actor behind; the run resumes.
- An actor that holds a slot and delivers nothing for ``actor_timeout_s`` is killed and restarted (or stops the
  run in one line without restarts); actors merely waiting for a slot while the learner is slow are not stalled.
- A ZooError in an actor (a NaN reward) stops the run at once instead of restarting the actor again and again.
- Config checks: ``num_envs`` is frozen on resume; thousands of actors are refused before any process starts.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_dppo import _alive, _children  # the /proc helpers
from test_impala import _config, _pipeline, _wait

from zoo.errors import ConfigError
from zoo.pipelines.actor_learner import ActorError, RemoteActorPool
from zoo.pipelines.loop import IterationAbandoned
from zoo.run import train
from zoo.run.run_dir import load_weights_only


def _python_children(pid: int) -> list[int]:
    """The learner's actor processes: its children that run Python (a fork keeps the interpreter's executable)."""
    found = []
    for child in _children(pid):
        try:
            if Path(f"/proc/{child}/exe").resolve() == Path(sys.executable).resolve():
                found.append(child)
        except OSError:
            continue
    return sorted(found)


def _start_run(tmp_path: Path, config: dict, *args: str) -> subprocess.Popen:
    path = tmp_path / "impala_cfg.py"
    path.write_text(f"config = {config!r}\n")
    return subprocess.Popen([sys.executable, "-m", "zoo", "run", "--config", str(path), *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _rows(metrics: Path) -> int:
    return metrics.read_text().count("\n") if metrics.exists() else 0


def _cleanup(process: subprocess.Popen, actors: list[int]) -> None:
    for pid in actors:
        for signum in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, signum)
            except OSError:
                pass
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("zoo: error:")]


# -- 1. a stop signal while every actor is stopped ---------------------------------------------------------------
@pytest.mark.slow
def test_a_stop_signal_reaches_a_learner_waiting_for_stopped_actors(tmp_path):
    # actor_timeout_s is long: the actors are stopped, not stalled, for this test's whole length
    process = _start_run(tmp_path, _config(tmp_path, max_env_steps=10_000_000, actor_timeout_s=60.0))
    run = tmp_path / "runs" / "imp"
    metrics = run / "metrics.jsonl"
    actors: list[int] = []
    try:
        _wait(lambda: _rows(metrics) >= 10 or process.poll() is not None, 60)
        actors = _python_children(process.pid)
        assert len(actors) == 2
        for pid in actors:
            os.kill(pid, signal.SIGSTOP)
        rows = -1
        while rows != _rows(metrics):  # the learner used up the filled slots and waits
            rows = _rows(metrics)
            time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        out, err = process.communicate(timeout=20)
        assert process.returncode == 143, err
        assert time.monotonic() - sent < 10
        assert "zoo run --resume" in out and "Traceback" not in err
        _wait(lambda: _alive(actors) == [], 10)
        state = load_weights_only(run / "checkpoint.pt")
        assert state["loop"]["iteration"] == _rows(metrics) == rows
        steps = state["loop"]["env_steps"]
        resumed = subprocess.run([sys.executable, "-m", "zoo", "run", "--resume", str(run), "--set",
                                  f"pipeline.max_env_steps={steps + 10 * 32}"], cwd=tmp_path, capture_output=True,
                                 text=True, timeout=60)
        assert resumed.returncode == 0, resumed.stderr
        iterations = [json.loads(line)["iteration"] for line in metrics.read_text().splitlines()]
        assert iterations == list(range(1, rows + 11))
    finally:
        _cleanup(process, actors)


@pytest.mark.parametrize("remote", [False, True], ids=["local", "torchrun"])
def test_both_pools_abandon_their_wait_when_a_stop_is_requested(tmp_path, remote):
    pipeline = _pipeline(tmp_path)  # built, not started: no actor will ever deliver
    pool = RemoteActorPool(pipeline.cfg, pipeline.slots, pipeline.board) if remote else pipeline.pool
    asked = time.monotonic() + 0.3
    try:
        with pytest.raises(IterationAbandoned):
            pool.take(2, stop=lambda: time.monotonic() > asked)
        assert time.monotonic() - asked < 1.0
    finally:
        pipeline.close()


# -- 2. a stalled actor ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_stalled_actor_is_restarted_and_actors_waiting_for_a_slow_learner_are_not(tmp_path):
    pipeline = _pipeline(tmp_path, actor_timeout_s=2.0)
    victim = None
    try:
        pool = pipeline.pool
        for _ in range(5):
            pipeline.iterate()
        time.sleep(2.5)  # a slow learner: the actors fill every free slot, then wait without one
        assert pool.restarts == 0
        victim = pool.actors[1].process.pid
        os.kill(victim, signal.SIGSTOP)
        deadline = time.monotonic() + 15
        while pool.restarts == 0:  # actor 0 alone keeps the learner going meanwhile
            pipeline.iterate()
            assert time.monotonic() < deadline, "the stopped actor was never restarted"
        delivered, rows = int(pool.steps_done[1]), []
        while len(rows) < 30 or int(pool.steps_done[1]) == delivered:  # until the new actor 1 delivers
            rows.append(pipeline.iterate())
            assert time.monotonic() < deadline + 15, "the new actor never delivered"
        assert rows[-1]["actor_restarts"] == 1.0 and pool.restarts == 1
        assert pool.actors[1].process.pid != victim and pool.actors[1].incarnation == 2
        assert _alive([victim]) == []
    finally:
        if victim is not None and _alive([victim]):
            os.kill(victim, signal.SIGKILL)
        pipeline.close()


def test_the_stall_clock_runs_only_while_a_ready_actor_holds_a_slot(tmp_path):
    pipeline = _pipeline(tmp_path, actor_timeout_s=2.0)  # built, not started: no actor process
    pool, ours, theirs = pipeline.pool, *multiprocessing.Pipe()
    actor, now = pool.actors[0], time.monotonic()
    actor.conn = ours
    try:
        def stalled(started: float, ready: float | None, assigned: float, holding: bool) -> str | None:
            actor.started_at, actor.assigned_at = now - started, now - assigned
            actor.ready_at = None if ready is None else now - ready
            actor.holding = [0] if holding else []
            return pool._stalled(actor)

        assert stalled(30, None, 30, True) is None  # still starting (a spawned actor imports torch)
        assert stalled(61, None, 61, True) == "stalled: not ready 60 s after its start, so it was killed"
        assert stalled(9, 3, 3, True) == "stalled: no unroll for 2 s, so it was killed"
        assert stalled(9, 1, 3, True) is None  # the clock starts when it is ready ...
        assert stalled(9, 3, 1, True) is None  # ... and holds a slot
        assert stalled(9, 9, 9, False) is None  # waiting for a free slot: the learner is slow, not the actor
        theirs.send(("unroll", 0, 16, []))
        assert stalled(9, 3, 3, True) is None  # its unroll is there, not read yet
        ours.recv()  # read: nothing waits in the pipe any more
        actor.round_done = True  # lockstep: its round delivered, it waits for the learner's next version
        assert stalled(9, 3, 3, True) is None
        pool.published()  # the next version: it owes its next round from now
        actor.assigned_at = actor.ready_at = now - 3
        assert not actor.round_done and pool._stalled(actor) is None  # published just now: the clock restarted
        pool.published_at = now - 3
        assert pool._stalled(actor) == "stalled: no unroll for 2 s, so it was killed"
    finally:
        actor.conn = None
        ours.close()
        theirs.close()
        pipeline.close()


@pytest.mark.slow
def test_without_restarts_a_stalled_actor_stops_the_run_in_one_line(tmp_path):
    config = _config(tmp_path, max_env_steps=10_000_000, actor_timeout_s=2.0, restart_actors=False,
                     checkpoint_every=5)
    process = _start_run(tmp_path, config)
    run = tmp_path / "runs" / "imp"
    actors: list[int] = []
    try:
        _wait(lambda: _rows(run / "metrics.jsonl") >= 10 or process.poll() is not None, 60)
        actors = _python_children(process.pid)
        assert len(actors) == 2
        os.kill(actors[1], signal.SIGSTOP)
        stopped = time.monotonic()
        _, err = process.communicate(timeout=20)
        assert process.returncode == 2 and time.monotonic() - stopped < 10, err
        errors = _errors(err)
        assert len(errors) == 1 and "Traceback" not in err, err
        assert re.search(r"actor [01] of 2 stalled: no unroll for 2 s", errors[0]), errors[0]
        assert "pipeline.actor_timeout_s" in errors[0] and f"zoo run --resume {run}" in errors[0]
        _wait(lambda: _alive(actors) == [], 10)
        state = load_weights_only(run / "checkpoint.pt")
        assert state["loop"]["iteration"] >= 10 and state["loop"]["iteration"] % 5 == 0
    finally:
        _cleanup(process, actors)


# -- 3. a non-finite env output --------------------------------------------------------------------------------
NAN_ENV = '''
import gymnasium
from zoo.registry import ENV_REGISTRY


class NanCartPole(gymnasium.Wrapper):
    """CartPole whose reward is NaN from its 80th step on (counted over episodes)."""

    def __init__(self):
        super().__init__(gymnasium.make("CartPole-v1"))
        self.steps = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        return obs, float("nan") if self.steps >= 80 else reward, terminated, truncated, info


ENV_REGISTRY.register("nan_cartpole", NanCartPole)
'''


def test_a_nan_reward_stops_the_run_at_once_instead_of_restarting_the_actor(tmp_path):
    (tmp_path / "impala_faults_nan_env.py").write_text(NAN_ENV)  # a module name no other test uses
    config = _config(tmp_path, checkpoint_every=2)
    config.update(import_names=["impala_faults_nan_env"], import_paths=[str(tmp_path)], env={"id": "nan_cartpole"})
    with pytest.raises(ActorError) as error:
        train(config)
    message = str(error.value)
    assert message.startswith(("actor 0 of 2 failed: ", "actor 1 of 2 failed: ")), message
    assert "env 'nan_cartpole' returned a non-finite reward" in message and "\n" not in message
    assert "(not restarted: it would fail the same way)" in message and "times in a row" not in message
    assert "--resume" in message
    run = tmp_path / "runs" / "imp"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows and all(row["actor_restarts"] == 0 for row in rows)
    assert load_weights_only(run / "checkpoint.pt")["components"]["actors"] == {"incarnations": [1, 1],
                                                                                "restarts": 0}


# -- 4. config checks ----------------------------------------------------------------------------------------------
def test_resume_may_not_change_the_number_of_envs_but_may_change_the_unrolls(tmp_path):
    run = Path(train(_config(tmp_path, max_env_steps=320))["run_dir"])
    result = subprocess.run([sys.executable, "-m", "zoo", "run", "--resume", str(run), "--set",
                             "pipeline.num_envs=3", "--set", "pipeline.max_env_steps=640"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("zoo: error: "), result.stderr
    assert "pipeline.num_envs" in lines[0]
    # they do not shape the learner's saved state: a resume may change them
    summary = train(None, ["pipeline.unroll_length=4", "pipeline.batch_unrolls=1", "pipeline.queue_size=2",
                           "pipeline.max_env_steps=640"], resume=run)
    assert summary["reason"] == "max_env_steps" and summary["env_steps"] == 640


def test_thousands_of_actors_are_refused_before_any_process_starts(tmp_path):
    before = _children(os.getpid())
    with pytest.raises(ConfigError) as error:
        _pipeline(tmp_path, num_actors=4096).close()
    message = str(error.value)
    assert "4,096 IMPALA actors" in message and "lower pipeline.num_actors" in message and "\n" not in message
    assert _children(os.getpid()) == before


def test_an_unroll_still_in_the_pipe_of_an_actor_that_exited_is_delivered_not_dropped():
    import threading
    from collections import deque

    from zoo.pipelines.actor_learner.local_pool import LocalActorPool, _Actor

    class Exited:  # an actor process that has already exited cleanly
        exitcode = 0

        def join(self, timeout=None):
            pass

        def is_alive(self):
            return False

    pool = LocalActorPool.__new__(LocalActorPool)  # the bookkeeping only: no processes
    pool.lock, pool.free, pool.ready, pool.error = threading.Condition(), deque([5]), deque(), None
    pool.restart, pool.restarts, pool._to_restart, pool.actors = True, 0, [], []
    actor = _Actor(0)
    actor.process, actor.holding = Exited(), [3, 4]
    learner_end, actor_end = multiprocessing.Pipe()
    actor.conn = learner_end
    actor_end.send(("unroll", 3, 0, [(1.0, 10)]))  # written before it exited; the exit code was seen first
    actor_end.close()
    with pool.lock:
        pool._lost(actor, None)
    assert [entry[:2] for entry in pool.ready] == [(3, [(1.0, 10)])]  # the filled slot counts
    assert sorted(pool.free) == [4, 5] and actor.conn is None and actor.delivered  # only the unfilled one is free
    assert pool.restarts == 1 and pool.error is None
