"""IMPALA under action masks (zoo.policies.masking): its actors (numpy, torch and recurrent) never take an invalid
action and ship each step's mask with the unroll; the learner's V-trace target is the policy under the same mask as
the behaviour (log-probabilities, ratios and entropy), so no gradient reaches an invalid action's logit; a whole
parallel_async run on an env that gives masks takes none."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import metrics_rows, new_policy, registered_envs

import zoo.policies.impala as impala_module
from zoo.config.resolve import resolve_config
from zoo.envs import EnvSpec
from zoo.envs.masked import MaskedChoice
from zoo.errors import ConfigError
from zoo.pipelines.actor_learner.transport import actor_layout
from zoo.pipelines.collector import VectorCollector
from zoo.policies import ImpalaPolicy, LearnContext
from zoo.rl_utils import MASKED_LOGIT

MEMORY = {"recurrent": "lstm", "recurrent_size": 8}


def _policy(**config):
    env = MaskedChoice()
    return new_policy(ImpalaPolicy, env.observation_space, env.action_space, hidden_sizes=[16], **config)


@pytest.mark.parametrize("config", [{}, {"numpy_acting": False}, MEMORY])
def test_masked_impala_actors_never_take_an_invalid_action_in_10000_steps(config):
    policy = _policy(**config)
    collector = VectorCollector(EnvSpec("MaskedChoice-v0", {}, action_mask="auto"), 8, seed=0, vector_mode="sync")
    collector.check_masks(policy)
    for _ in range(10_000 // (8 * 20) + 1):
        unroll = collector.rollout(policy, 20).to_unroll(0)
        assert unroll.behaviour["action_mask"].shape == (20, 8, 6)
        chosen = unroll.behaviour["action_mask"].gather(-1, unroll.action.long().unsqueeze(-1))
        assert bool(chosen.all())
        policy.learn(unroll, LearnContext(progress=0.0))
    assert sum(collector.venv.unwrapped.get_attr("invalid_actions")) == 0
    unmasked = VectorCollector(EnvSpec("MaskedChoice-v0", {}, action_mask="none"), 8, seed=0, vector_mode="sync")
    for _ in range(4):
        unmasked.rollout(_policy(**config), 20)
    assert sum(unmasked.venv.unwrapped.get_attr("invalid_actions")) > 0  # unmasked, the count can fail
    collector.close()
    unmasked.close()


def _unroll(policy, steps=16, envs=4, seed=1):
    """An unroll acted by ``policy``'s own actor under random masks in which action 5 is never valid."""
    from zoo.data import Unroll

    rng = np.random.default_rng(seed)
    masks = rng.random((steps, envs, 6)) < 0.5
    masks[np.arange(steps)[:, None], np.arange(envs)[None], rng.integers(0, 5, (steps, envs))] = True
    masks[..., 5] = False
    obs = rng.uniform(0, 1, (steps + 1, envs, 12)).astype(np.float32)
    if policy.recurrent:
        actor = policy.memory_actor(steps, envs, None)
        starts = np.zeros((steps + 1, envs), bool)
        starts[0] = starts[9] = True  # an episode starts inside the unroll too
        actions = [actor.act(t, obs[t], starts[t], masks[t]) for t in range(steps)]
        memory = {"episode_start": torch.from_numpy(starts), "memory": actor.memory_sequence()[0]}
    else:
        actor = policy.rollout_actor(steps, envs)
        actions = [actor.act(t, obs[t], masks[t]) for t in range(steps)]
        memory = {}
    raw, extras = actor.finish()
    assert masks[np.arange(steps)[:, None], np.arange(envs)[None], np.stack(actions)].all()
    flags = torch.zeros(steps, envs, dtype=torch.bool)
    return Unroll(obs=torch.from_numpy(obs), action=raw, reward=torch.ones(steps, envs), terminated=flags,
                  truncated=flags, valid=~flags, behaviour=extras, policy_version=0, **memory)


@pytest.mark.parametrize("config", [{}, {"numpy_acting": False}, MEMORY])
def test_the_vtrace_target_is_the_policy_under_the_behaviours_mask(config, monkeypatch):
    """The target logits V-trace sees are the fresh ones masked with each step's stored mask (equal to the stored
    behaviour logits: the same weights); action 5, invalid at every step, gets no gradient, so its row of the
    policy head does not move. Dropping the mask from the target breaks both."""
    policy = _policy(**config)
    unroll = _unroll(policy)
    mask = unroll.behaviour["action_mask"]
    seen = {}
    original = impala_module.vtrace_error_discrete_action

    def spy(data, *args, **kwargs):
        seen["target"] = data.target_output.detach().clone()
        return original(data, *args, **kwargs)

    monkeypatch.setattr(impala_module, "vtrace_error_discrete_action", spy)
    head = policy.model.policy_head
    before = torch.cat([head.weight[5], head.bias[5:6]]).detach().clone()
    policy.learn(unroll, LearnContext(progress=0.0))
    assert bool((seen["target"][~mask] == MASKED_LOGIT).all())
    torch.testing.assert_close(seen["target"], unroll.behaviour["policy_output"], rtol=1e-5, atol=1e-5)
    after = torch.cat([head.weight[5], head.bias[5:6]]).detach()
    assert torch.equal(before, after), "an action invalid at every step moved: gradient leaked through the target"


def test_the_actor_layout_ships_the_masks_only_where_the_env_gives_them():
    def layout(source):
        cfg = resolve_config({"env": {"id": "MaskedChoice-v0", "action_mask": source},
                              "policy": {"type": "impala", "hidden_sizes": [8]},
                              "pipeline": {"type": "parallel_async", "num_envs": 3, "unroll_length": 5}})
        return actor_layout(cfg).fields

    assert layout("auto")["behaviour.action_mask"] == ((5, 3, 6), torch.bool)
    assert "behaviour.action_mask" not in layout("none")


class Costly(MaskedChoice):
    """MaskedChoice whose invalid actions cost -10,000: one taken anywhere in a run makes the mean return of the
    episodes around it negative (an episode scores at most 20)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, (-10_000.0 if reward == -1.0 else reward), terminated, truncated, info


@pytest.fixture
def costly():
    with registered_envs(**{"CostlyChoice-v0": Costly}):
        yield


@pytest.mark.parametrize("recurrent", ["none", "gru"])
def test_a_masked_parallel_async_run_takes_no_invalid_action(tmp_path, costly, recurrent):
    import zoo

    summary = zoo.train({"exp_name": "m", "runs_dir": str(tmp_path), "seed": 0,
                         "env": {"id": "CostlyChoice-v0", "action_mask": "auto"},
                         "policy": {"type": "impala", "hidden_sizes": [16], "recurrent": recurrent,
                                    "recurrent_size": 8},
                         "pipeline": {"type": "parallel_async", "num_actors": 2, "num_envs": 4, "unroll_length": 16,
                                      "batch_unrolls": 2, "max_env_steps": 4000, "eval_every": 0,
                                      "start_method": "fork"}})
    rows = metrics_rows(Path(summary["run_dir"]))
    returns = [row["episode_return_mean"] for row in rows if row.get("episode_return_mean") is not None]
    assert summary["env_steps"] >= 4000 and returns and min(returns) >= 0.0, returns[:10]
    assert all(np.isfinite(row["policy_loss"]) for row in rows if "policy_loss" in row)
    pytest.importorskip("onnxruntime")
    from zoo.export.command import export_run

    for fmt in ("onnx", "torchscript"):  # the file takes the mask and plays as predict does, checked on env masks
        export_run(summary["run_dir"], fmt, check=32)


def test_a_gaussian_impala_takes_no_mask():
    policy = new_policy(ImpalaPolicy, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)), hidden_sizes=[8])
    with pytest.raises(ConfigError, match="masks are for Discrete and MultiDiscrete actions"):
        policy.collect(torch.zeros(2, 3), action_mask=torch.ones(2, 2, dtype=torch.bool))
