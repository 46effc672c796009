"""IMPALA and the ``parallel_async`` pipeline: the V-trace learner against a plain loop, then the processes.

- ``ImpalaPolicy.learn``'s loss and gradients equal a hand-written per-step V-trace loop (float64), with a
  terminated step at t=0, a truncated step at the last step and inside the unroll, autoreset steps, and a
  behaviour policy that differs from the target (importance weights on both sides of the clip).
- Shared memory: slots keep unrolls apart and side by side in order; the weight board never hands out a torn copy.
- The pipeline in-process: counters, lag and throughput metrics, a bounded queue, killed actors restarted (or the
  run stopped in one line), a broken env stopping the run, resume; through ``zoo run``: SIGTERM saves and leaves
  no actor behind.
- The one actor loop against a scripted learner (newer weights only, version tags, seeds, one-line failures), and
  both pools as ``ActorPool``s with their checkpoint state; the torchrun tests run the same loop on a rank.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_dppo import _alive, _children  # the /proc helpers

from zoo.config import load_config_file
from zoo.config.resolve import resolve_config
from zoo.data import Unroll
from zoo.envs import EnvSpec
from zoo.errors import ConfigError, NonFiniteError
from zoo.pipelines.actor_learner import (
    ActorError,
    ActorPool,
    LocalActorPool,
    RemoteActorPool,
    UnrollSlots,
    WeightBoard,
    run_actor,
)
from zoo.policies import ImpalaPolicy, LearnContext
from zoo.policies.build import build_policy
from zoo.run import build_pipeline, train
from zoo.run.run_dir import load_weights_only

T, B, OBS_DIM = 6, 2, 3
CONFIGS = Path(__file__).resolve().parent.parent / "configs"


# -- the learner's maths ---------------------------------------------------------------------------------------
def _policy(action_space: gym.Space, **cfg):
    obs_space = gym.spaces.Box(-5.0, 5.0, (OBS_DIM,), np.float32)
    config = resolve_config({"env": {"id": "CartPole-v1"}, "policy": {"type": "impala", **cfg},
                             "pipeline": {"type": "parallel_async"}}).policy
    torch.manual_seed(0)
    policy = ImpalaPolicy(config, obs_space, action_space, torch.device("cpu"))
    policy.model.double()
    captured = []
    policy.optimizer.minimize = lambda loss, *args: captured.append(loss) or loss.detach()  # the loss, not a step
    return policy, captured


def _unroll(discrete: bool) -> Unroll:
    g = torch.Generator().manual_seed(1)
    terminated = torch.zeros(T, B, dtype=torch.bool)
    truncated = torch.zeros(T, B, dtype=torch.bool)
    valid = torch.ones(T, B, dtype=torch.bool)
    terminated[0, 0] = True  # env 0: ends at once, then its autoreset step
    valid[1, 0] = False
    truncated[T - 1, 0] = True  # ... and is truncated at the last step
    truncated[2, 1] = True  # env 1: truncated inside the unroll, autoreset next
    valid[3, 1] = False
    if discrete:
        action = torch.randint(0, 3, (T, B), generator=g)
        behaviour = torch.randn(T, B, 3, generator=g, dtype=torch.float64)
    else:
        action = torch.randn(T, B, 2, generator=g, dtype=torch.float64)
        behaviour = torch.cat([0.5 * torch.randn(T, B, 2, generator=g, dtype=torch.float64),
                               torch.full((T, B, 2), 0.8, dtype=torch.float64)], -1)
    return Unroll(obs=torch.randn(T + 1, B, OBS_DIM, generator=g, dtype=torch.float64), action=action,
                  reward=torch.randn(T, B, generator=g, dtype=torch.float64), terminated=terminated,
                  truncated=truncated, valid=valid, behaviour={"policy_output": behaviour}, policy_version=0)


def _reference_loss(policy: ImpalaPolicy, u: Unroll) -> torch.Tensor:
    """V-trace written out step by step (Espeholt et al. 2018, eq. 1 and the policy-gradient advantage)."""
    cfg = policy.cfg
    gamma, lam = cfg.gamma, cfg.vtrace_lambda
    policy_loss = value_loss = entropy_sum = torch.zeros((), dtype=torch.float64)
    for b in range(B):
        values = policy.model.value(u.obs[:, b])
        out = policy._bounded(policy.model.policy_output(u.obs[:, b]))
        vs_next, value_next = None, values[T].detach()  # v_{t+1} and V(x_{t+1}) seen from step t
        for t in reversed(range(T)):
            if policy.discrete:
                logp_all = torch.log_softmax(out[t], -1)
                logp = logp_all[u.action[t, b]]
                entropy = -(logp_all.exp() * logp_all).sum()
                blogp = torch.log_softmax(u.behaviour["policy_output"][t, b], -1)[u.action[t, b]]
            else:
                mu, sigma = out["mu"][t], out["sigma"][t]
                bmu, bsigma = u.behaviour["policy_output"][t, b].chunk(2)
                normal, bnormal = torch.distributions.Normal(mu, sigma), torch.distributions.Normal(bmu, bsigma)
                logp = normal.log_prob(u.action[t, b]).sum()
                entropy = normal.entropy().sum()
                blogp = bnormal.log_prob(u.action[t, b]).sum()
            rho = float(torch.exp(logp.detach() - blogp))
            value = values[t].detach()
            bootstrap = values[t + 1].detach()  # V of the observation after step t (the final one at an end)
            discount = 0.0 if (u.terminated[t, b] or not u.valid[t, b]) else gamma
            continues = not (u.terminated[t, b] or u.truncated[t, b] or not u.valid[t, b]) and t < T - 1
            reward = float(u.reward[t, b]) * cfg.reward_scale
            delta = min(cfg.rho_clip, rho) * (reward + discount * bootstrap - value)
            vs = value + delta
            if continues:
                vs = vs + discount * lam * min(cfg.c_clip, rho) * (vs_next - value_next)
            target_next = vs_next if continues else bootstrap
            advantage = min(cfg.rho_pg_clip, rho) * (reward + discount * target_next - value)
            weight = float(u.valid[t, b])
            policy_loss = policy_loss - logp * advantage * weight
            value_loss = value_loss + (values[t] - vs) ** 2 * weight
            entropy_sum = entropy_sum + entropy * weight
            vs_next, value_next = vs, value
    n = T * B
    return policy_loss / n + cfg.value_coef * value_loss / n - cfg.entropy_coef * entropy_sum / n


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "box"])
@pytest.mark.parametrize("settings", [{}, {"vtrace_lambda": 0.7, "rho_clip": 0.9, "c_clip": 0.8, "rho_pg_clip": 1.3,
                                          "reward_scale": 0.5, "gamma": 0.9}], ids=["defaults", "clips"])
def test_learn_is_vtrace_written_out_step_by_step(discrete, settings):
    space = gym.spaces.Discrete(3) if discrete else gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    policy, captured = _policy(space, entropy_coef=0.01, **settings)
    u = _unroll(discrete)
    policy.learn(u, LearnContext())
    reference = _reference_loss(policy, u)
    assert torch.allclose(captured[0], reference, rtol=1e-10, atol=1e-12), (captured[0], reference)
    params = list(policy.model.parameters())
    mine = torch.autograd.grad(captured[0], params, allow_unused=True)
    theirs = torch.autograd.grad(reference, params, allow_unused=True)
    for a, b in zip(mine, theirs, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, rtol=1e-9, atol=1e-12)


def test_importance_weights_matter_and_a_rollout_is_an_unroll_of_the_current_policy():
    policy, captured = _policy(gym.spaces.Discrete(3))
    u = _unroll(True)
    policy.learn(u, LearnContext())
    on_policy = Unroll(**{**u.__dict__, "behaviour": {"policy_output": policy.model.policy_output(u.obs[:T]).detach()}})
    policy.learn(on_policy, LearnContext())
    assert not torch.allclose(captured[0], captured[1])


def test_actors_need_only_the_actor_weights_and_a_bounded_mean_stays_in_the_box():
    space = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    policy, _ = _policy(space)
    policy.model.float()
    with torch.no_grad():
        policy.model.policy_head.bias.fill_(50.0)  # a mean far outside the bounds before squashing
    out = policy.collect(torch.zeros(4, OBS_DIM))
    assert set(out.extras) == {"policy_output"}  # no value: actors never run the critic
    mu = out.extras["policy_output"][:, :2]
    assert bool((mu <= 2.0).all()) and bool((mu > 1.9).all())
    assert np.all(np.abs(policy.evaluate(torch.zeros(4, OBS_DIM))) <= 2.0)
    actor = ImpalaPolicy(policy.cfg, policy.observation_space, space, torch.device("cpu"), acting_only=True)
    actor.load_actor_state_dict(policy.actor_state_dict())
    assert np.array_equal(actor.evaluate(torch.ones(3, OBS_DIM)), policy.evaluate(torch.ones(3, OBS_DIM)))


# -- shared memory -------------------------------------------------------------------------------------------
def test_slots_keep_unrolls_apart_and_read_them_side_by_side_in_order():
    units = []
    for k in range(3):
        u = _unroll(True)
        units.append(Unroll(**{**u.__dict__, "obs": u.obs.float() + k, "reward": u.reward.float() + 10 * k,
                               "behaviour": {"policy_output": u.behaviour["policy_output"].float()},
                               "policy_version": 7 + k}))
    slots = UnrollSlots(4, UnrollSlots.specs(units[0]))
    for k, u in enumerate(units):
        slots.write(k + 1, u)
    one = slots.read([2])
    assert torch.equal(one.obs, units[1].obs) and one.policy_version == 8
    both = slots.read([3, 1])
    assert torch.equal(both.obs[:, :B], units[2].obs) and torch.equal(both.obs[:, B:], units[0].obs)
    assert torch.equal(both.reward[:, B:], units[0].reward) and torch.equal(both.valid[:, :B], units[2].valid)
    assert both.policy_version == 7  # the oldest
    slots.write(1, units[1])
    assert torch.equal(both.obs[:, B:], units[0].obs)  # a read is a copy: the slot may be reused at once


def test_the_weight_board_never_hands_out_a_torn_copy():
    board = WeightBoard({"a": torch.zeros(50_000), "b": torch.zeros(3, 7)})
    stop = threading.Event()

    def publish():
        version = 0
        while not stop.is_set():
            version += 1
            board.publish({"a": torch.full((50_000,), float(version)), "b": torch.full((3, 7), float(version))},
                          version)

    writer = threading.Thread(target=publish)
    writer.start()
    try:
        seen = set()
        for _ in range(300):
            version, weights = board.read()
            assert bool((weights["a"] == version).all()) and bool((weights["b"] == version).all())
            seen.add(version)
    finally:
        stop.set()
        writer.join()
    assert len(seen) >= 3  # reads overlapped several publications


# -- the pipeline --------------------------------------------------------------------------------------------
def _config(tmp_path: Path, **pipeline) -> dict:
    return {
        "exp_name": "imp", "seed": 0, "runs_dir": str(tmp_path / "runs"), "env": {"id": "CartPole-v1"},
        "policy": {"type": "impala", "hidden_sizes": [16], "learning_rate": 1e-3},
        "pipeline": {"type": "parallel_async", "num_actors": 2, "num_envs": 2, "unroll_length": 8,
                     "batch_unrolls": 2, "queue_size": 4, "eval_every": 0, "max_env_steps": 3_200,
                     "checkpoint_every": 10, **pipeline},
    }


def _pipeline(tmp_path: Path, **pipeline):
    return build_pipeline(resolve_config(_config(tmp_path, **pipeline)))


def _wait(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("timed out")
        time.sleep(0.02)


def test_iterations_count_consumed_steps_and_report_lag_and_throughput(tmp_path):
    pipeline = _pipeline(tmp_path)
    try:
        rows = [pipeline.iterate() for _ in range(20)]
        assert pipeline.env_steps == 20 * 2 * 8 * 2
        for key in ("policy_lag_mean", "policy_lag_max", "actor_sps", "learner_sps", "learner_idle",
                    "queue_depth", "actor_restarts", "policy_loss", "value_loss", "entropy"):
            assert all(np.isfinite(row[key]) for row in rows), key
        assert rows[-1]["actor_sps"] > 0 and rows[-1]["learner_sps"] > 0 and 0 <= rows[-1]["learner_idle"] <= 1
        assert all(row["policy_lag_max"] >= row["policy_lag_mean"] >= 0 for row in rows)
        assert pipeline.board.version() == pipeline.version == 20
        assert pipeline.episodes > 0
        actors = [actor.process for actor in pipeline.pool.actors]
    finally:
        pipeline.close()
    assert not any(process.is_alive() for process in actors)


def test_actors_block_when_the_learner_falls_behind(tmp_path):
    pipeline = _pipeline(tmp_path, queue_size=3, batch_unrolls=1)
    try:
        pipeline.iterate()
        time.sleep(1.5)  # the learner takes nothing: at most the free slots get filled
        written = int(pipeline.pool.steps_done.sum())
        assert written <= 4 * 8 * 2  # the one unroll taken plus the three slots
        time.sleep(0.5)
        assert int(pipeline.pool.steps_done.sum()) == written
        assert pipeline.pool.queue_depth() == 3
    finally:
        pipeline.close()


def test_a_killed_actor_is_restarted_and_the_run_goes_on(tmp_path):
    pipeline = _pipeline(tmp_path)
    try:
        pool = pipeline.pool
        for _ in range(500):  # kill it while it holds a slot, which must come back
            pipeline.iterate()
            with pool.lock:
                if pool.actors[1].holding:
                    victim = pool.actors[1].process
                    os.kill(victim.pid, signal.SIGKILL)
                    break
        _wait(lambda: pool.restarts == 1)
        rows = [pipeline.iterate() for _ in range(30)]
        assert rows[-1]["actor_restarts"] == 1.0
        with pool.lock:  # every slot is free, ready or held by a live actor: the dead one's came back
            held = [slot for actor in pool.actors for slot in actor.holding]
            assert sorted([*pool.free, *(entry[0] for entry in pool.ready), *held]) == list(range(4))
        assert pipeline.pool.actors[1].process.pid != victim.pid and pipeline.pool.actors[1].incarnation == 2
    finally:
        pipeline.close()


def test_without_restarts_a_killed_actor_stops_the_run_in_one_line(tmp_path):
    pipeline = _pipeline(tmp_path, restart_actors=False)
    try:
        pipeline.iterate()
        os.kill(pipeline.pool.actors[0].process.pid, signal.SIGKILL)
        with pytest.raises(ActorError) as error:
            for _ in range(1000):
                pipeline.iterate()
        assert str(error.value) == "actor 0 of 2 was killed by SIGKILL (pipeline.restart_actors is false)"
    finally:
        pipeline.close()


BROKEN_ENV = '''
import gymnasium
from zoo.registry import ENV_REGISTRY


class BrokenCartPole(gymnasium.Wrapper):
    def __init__(self):
        super().__init__(gymnasium.make("CartPole-v1"))

    def step(self, action):
        raise ValueError("the test env broke on purpose")


ENV_REGISTRY.register("broken_cartpole", BrokenCartPole)
'''


def test_an_actor_that_always_fails_stops_the_run_with_its_error(tmp_path):
    (tmp_path / "broken_env.py").write_text(BROKEN_ENV)
    config = _config(tmp_path)
    config.update(import_names=["broken_env"], import_paths=[str(tmp_path)], env={"id": "broken_cartpole"})
    started = time.monotonic()
    with pytest.raises(ActorError) as error:
        train(config)
    assert time.monotonic() - started < 30
    message = str(error.value)
    assert message.startswith("actor ") and ("failed: env 'broken_cartpole' raised in step(): ValueError: the test "
                                             "env broke on purpose (ZOO_DEBUG=1 shows the traceback), 3 times in a "
                                             "row") in message and "--resume" in message and "\n" not in message


def test_resume_continues_the_learner_and_gives_actors_new_seeds(tmp_path):
    summary = train(_config(tmp_path))
    run_dir = Path(summary["run_dir"])
    state = load_weights_only(run_dir / "checkpoint.pt")
    assert state["components"]["actors"]["incarnations"] == [1, 1] and state["learner_version"] == 100
    resumed = train(None, ["pipeline.max_env_steps=4800"], resume=run_dir)
    assert resumed["env_steps"] == 4800
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["iteration"] for row in rows] == list(range(1, 151))
    state = load_weights_only(run_dir / "checkpoint.pt")
    assert state["components"]["actors"]["incarnations"] == [2, 2] and state["learner_version"] == 150


def test_a_queue_smaller_than_a_batch_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="queue_size .3. is smaller than pipeline.batch_unrolls .4."):
        _pipeline(tmp_path, queue_size=3, batch_unrolls=4)


# -- the actor loop and the pools ----------------------------------------------------------------------------------
class _ScriptedLearner:
    """An ``ActorChannel`` in this process: publishes version 0, then version 1 after the second unroll; says stop
    after ``count`` unrolls; ``error`` is raised by the first delivery instead."""

    def __init__(self, weights: list[dict], incarnation: int = 0, count: int = 4, error: BaseException | None = None):
        self.by_version, self.published = weights, (0, weights[0])
        self.incarnation, self.count, self.error = incarnation, count, error
        self.events: list[str] = []
        self.unrolls: list[Unroll] = []
        self.failures: list[tuple[str, bool]] = []

    def connect(self):
        self.events.append("connect")
        return self.incarnation

    def ready(self):
        self.events.append("ready")

    def weights(self, version):
        if self.published[0] == version:
            return None
        self.events.append(f"weights {self.published[0]}")
        return self.published

    def deliver(self, unroll, episodes):
        if self.error is not None:
            raise self.error
        self.unrolls.append(unroll)
        if len(self.unrolls) == 2:
            self.published = (1, self.by_version[1])
        return len(self.unrolls) < self.count

    def fail(self, line, fatal):
        self.failures.append((line, fatal))

    def learner_gone(self, error):
        return isinstance(error, EOFError)


def _run_actor(cfg, channel) -> None:
    threads = torch.get_num_threads()
    try:
        run_actor(cfg, 0, channel)
    finally:
        torch.set_num_threads(threads)  # an actor runs on one thread; this test process does not


def _actor_weights(cfg) -> tuple[list[dict], list[ImpalaPolicy]]:
    """Two acting-only policies (initialised apart: the weights of versions 0 and 1) and their actor weights."""
    spaces = EnvSpec.from_config(cfg).spaces()
    policies = [build_policy(cfg, *spaces, "cpu", acting_only=True) for _ in range(2)]
    return [policy.actor_state_dict() for policy in policies], policies


def test_the_actor_loop_loads_only_newer_weights_and_tags_each_unroll_with_their_version(tmp_path):
    cfg = resolve_config(_config(tmp_path))
    weights, policies = _actor_weights(cfg)
    channel = _ScriptedLearner(weights)
    _run_actor(cfg, channel)
    assert channel.events == ["connect", "ready", "weights 0", "weights 1"] and channel.failures == []
    assert [u.policy_version for u in channel.unrolls] == [0, 0, 1, 1]
    for unroll in channel.unrolls:
        assert unroll.obs.shape == (8 + 1, 2, 4) and unroll.action.shape == (8, 2)
        # the behaviour logits are those of the weights the unroll is tagged with, at its observations
        expected = policies[unroll.policy_version].model.policy_output(unroll.obs[:8])
        torch.testing.assert_close(unroll.behaviour["policy_output"], expected.detach(), rtol=1e-5, atol=1e-6)
    again, other = _ScriptedLearner(weights), _ScriptedLearner(weights, incarnation=1)
    _run_actor(cfg, again)
    _run_actor(cfg, other)
    for mine, same in zip(channel.unrolls, again.unrolls, strict=True):  # seeds from (seed, actor, incarnation)
        assert torch.equal(mine.obs, same.obs) and torch.equal(mine.action, same.action)
    assert not torch.equal(channel.unrolls[0].obs, other.unrolls[0].obs)  # a new start collects new episodes


@pytest.mark.parametrize(("error", "report"), [
    (NonFiniteError("env 'x' returned a non-finite reward"), ("env 'x' returned a non-finite reward", True)),
    (ValueError("the env broke"), ("ValueError: the env broke", False)),
    (EOFError(), None),  # the learner is gone: nothing to tell it
], ids=["zoo_error_is_fatal", "other_error", "learner_gone"])
def test_the_actor_loop_reports_a_failure_in_one_line_and_raises_it(tmp_path, error, report):
    cfg = resolve_config(_config(tmp_path))
    channel = _ScriptedLearner(_actor_weights(cfg)[0], error=error)
    with pytest.raises(type(error)):
        _run_actor(cfg, channel)
    assert channel.failures == ([] if report is None else [report])


def test_both_pools_are_actor_pools_and_carry_their_state_in_checkpoints(tmp_path):
    pipeline = _pipeline(tmp_path)  # built, not started
    try:
        local = pipeline.pool
        remote = RemoteActorPool(pipeline.cfg, pipeline.slots, pipeline.board)
        assert isinstance(local, LocalActorPool) and isinstance(local, ActorPool) and isinstance(remote, ActorPool)
        assert pipeline.components() == {"actors": local}
        assert local.state_dict() == remote.state_dict() == {"incarnations": [0, 0], "restarts": 0}
        local.load_state_dict({"incarnations": [3, 5], "restarts": 2})
        assert local.state_dict() == {"incarnations": [3, 5], "restarts": 2}
        assert [actor.incarnation for actor in local.actors] == [3, 5]  # the next starts seed from these
        assert pipeline.state_dict()["components"]["actors"] == {"incarnations": [3, 5], "restarts": 2}
        remote.load_state_dict({"incarnations": [3, 5], "restarts": 2})  # remote seeds come from the learner
        assert remote.state_dict() == {"incarnations": [0, 0], "restarts": 2}
        with pytest.raises(ConfigError, match="the checkpoint has 3 actors, the config 2"):
            local.load_state_dict({"incarnations": [1, 1, 1], "restarts": 0})
    finally:
        pipeline.close()


def test_impala_is_registered_on_parallel_async():
    cfg = resolve_config(load_config_file(CONFIGS / "impala_cartpole.py"))
    assert cfg.pipeline.type == "parallel_async"
    out = subprocess.run([sys.executable, "-m", "zoo", "list"], capture_output=True, text=True, check=True).stdout
    assert any(line.split()[0] == "impala" and "pipelines: parallel_async" in line
               for line in out.splitlines() if line.strip())


@pytest.mark.parametrize("how", ["sigterm", "ctrl_c"])
def test_a_stop_signal_saves_and_leaves_no_actor_behind(tmp_path, how):
    config = _config(tmp_path, max_env_steps=10_000_000)
    path = tmp_path / "impala_cfg.py"
    path.write_text(f"config = {config!r}\n")
    process = subprocess.Popen([sys.executable, "-m", "zoo", "run", "--config", str(path)], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    metrics = tmp_path / "runs" / "imp" / "metrics.jsonl"
    _wait(lambda: metrics.exists() and metrics.read_text().count("\n") >= 30 or process.poll() is not None, 60)
    actors = _children(process.pid)
    assert len(_alive(actors)) >= 2
    if how == "sigterm":
        process.send_signal(signal.SIGTERM)
    else:
        os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == (143 if how == "sigterm" else 130), err
    assert "zoo run --resume" in out
    _wait(lambda: _alive(actors) == [], 10)
    rows = metrics.read_text().count("\n")
    assert load_weights_only(tmp_path / "runs" / "imp" / "checkpoint.pt")["loop"]["iteration"] == rows


@pytest.mark.parametrize(("sets", "words"), [
    (["pipeline.queue_size=2", "pipeline.batch_unrolls=3"], ("queue_size", "batch_unrolls")),
    (["pipeline.num_actors=0"], ("pipeline.num_actors",)),
    (["pipeline.unroll_length=0"], ("pipeline.unroll_length",)),
    (["pipeline.start_method=thread"], ("pipeline.start_method",)),
    (["pipeline.rollout_steps=8"], ("rollout_steps",)),
    (["pipeline.type=serial_onpolicy"], ("impala", "parallel_async")),
    (["policy.type=ppo"], ("ppo", "parallel_async")),
    (["policy.rho_clip=-1"], ("policy.rho_clip",)),
    (["policy.vtrace_lambda=1.5"], ("policy.vtrace_lambda",)),
    (["env.id=CartPole-v9"], ("CartPole-v9",)),
])
def test_bad_input_is_one_line_before_any_actor_starts(tmp_path, sets, words):
    path = tmp_path / "impala_cfg.py"
    path.write_text(f"config = {_config(tmp_path)!r}\n")
    args = [arg for pair in sets for arg in ("--set", pair)]
    result = subprocess.run([sys.executable, "-m", "zoo", "run", "--config", str(path), *args], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("zoo: error: "), result.stderr
    assert all(word in lines[0] for word in words), lines[0]
    assert not (tmp_path / "runs").exists()


def _torchrun_nodes(config: dict, tmp_path: Path, kill_actor_after_rows: int | None = None):
    """Two torchrun "machines" on 127.0.0.1: node 0 runs the learner, node 1 one actor."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = tmp_path / "impala_cfg.py"
    path.write_text(f"config = {config!r}\n")
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", f"--node-rank={rank}",
         "--master-addr=127.0.0.1", f"--master-port={port}", "-m", "zoo", "run", "--config", str(path)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    ) for rank in range(2)]
    started = None
    try:
        if kill_actor_after_rows is not None:
            metrics = tmp_path / "runs" / "imp" / "metrics.jsonl"
            _wait(lambda: metrics.exists() and metrics.read_text().count("\n") >= kill_actor_after_rows, 90)
            actor = [pid for pid in _children(nodes[1].pid) if b"zoo" in Path(f"/proc/{pid}/cmdline").read_bytes()]
            assert len(actor) == 1
            os.kill(actor[0], signal.SIGKILL)
            started = time.monotonic()
        results = [node.communicate(timeout=120) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
    return [node.returncode for node in nodes], results, started


@pytest.mark.slow
def test_two_torchrun_nodes_learner_and_actor_train_one_run(tmp_path):
    codes, results, _ = _torchrun_nodes(_config(tmp_path, max_env_steps=6_400), tmp_path)
    assert codes == [0, 0], results
    assert "reason=max_env_steps env_steps=6400" in results[0][0]
    assert "reason=stopped_by_learner" in results[1][0]
    rows = (tmp_path / "runs" / "imp" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 200 and json.loads(rows[-1])["actor_sps"] > 0
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["imp"]  # only the learner wrote


@pytest.mark.slow
def test_a_killed_torchrun_actor_stops_the_learner_within_30s_in_one_line(tmp_path):
    config = _config(tmp_path, max_env_steps=10**9, actor_timeout_s=5.0)
    codes, results, started = _torchrun_nodes(config, tmp_path, kill_actor_after_rows=20)
    assert codes[0] != 0 and time.monotonic() - started < 30
    errors = [line for line in results[0][1].splitlines() if line.startswith("zoo: error:")]
    assert len(errors) == 1 and "actor 0 of 1 (rank 1) stopped responding" in errors[0], results[0][1]
    assert "--resume" in errors[0]
    state = load_weights_only(tmp_path / "runs" / "imp" / "checkpoint.pt")
    assert state["loop"]["iteration"] >= 10


def test_discrete_actors_act_in_numpy_as_the_torch_path_does():
    from zoo.accel.numpy_acting import NumpyRolloutActor
    from zoo.policies.base import CollectActor

    policy, _ = _policy(gym.spaces.Discrete(3))
    policy.model.float()  # _policy made it float64 (torch path); float32 CPU models act in numpy
    obs = torch.randn(4, 64, OBS_DIM)

    def rollout(numpy_acting):
        policy.cfg.numpy_acting = numpy_acting
        torch.manual_seed(5)
        actor = policy.rollout_actor(4, 64)
        assert isinstance(actor, NumpyRolloutActor if numpy_acting else CollectActor)
        for t in range(4):
            actor.act(t, obs[t].numpy())
        return actor.finish()

    (fast_action, fast), (slow_action, slow) = rollout(True), rollout(False)
    assert torch.equal(fast_action, slow_action) and set(fast) == set(slow) == {"policy_output"}
    torch.testing.assert_close(fast["policy_output"], slow["policy_output"], rtol=1e-5, atol=1e-6)
    policy.model.double()  # a float64 model falls back to torch by itself
    assert not policy.numpy_acting_applies() and isinstance(policy.rollout_actor(4, 64), CollectActor)
    assert policy.collect(obs[0].double()).extras["policy_output"].dtype == torch.float64
    box, _ = _policy(gym.spaces.Box(-1.0, 1.0, (2,)))  # Gaussian actors: collect (bound_mean squashes the mean)
    box.model.float()
    assert box.numpy_acting_applies() and isinstance(box.rollout_actor(4, 64), CollectActor)
