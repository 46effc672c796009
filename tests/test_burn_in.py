"""``policy.burn_in``: each learning chunk of a recurrent policy starts from the memory the current weights give,
by re-running up to ``burn_in`` earlier steps of its env (without gradients) from the memory the acting loop had
before them (``Rollout.sequences(length, burn_in)``, ``MemoryLearning.burned_memory``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import new_policy

from zoo.errors import ConfigError
from zoo.pipelines.collector import VectorCollector
from zoo.policies import ImpalaPolicy, LearnContext, PPOPolicy


def _setup(kind="lstm", length=2, burn_in=3, rollouts=2, steps=8):
    env = gym.make("CartPole-v1")
    policy = new_policy(PPOPolicy, env.observation_space, env.action_space, recurrent=kind, recurrent_size=8,
                        hidden_sizes=[8], sequence_length=length, minibatch_size=8, burn_in=burn_in)
    collector = VectorCollector("CartPole-v1", 3, seed=1, vector_mode="sync", max_episode_steps=5)
    for _ in range(rollouts - 1):
        collector.rollout(policy, steps)  # memories carried in from rollouts before
    return policy, policy.process_rollout(collector.rollout(policy, steps))


def test_the_burn_in_columns_are_the_steps_before_each_chunk_of_its_env():
    _, rollout = _setup()
    chunks = rollout.sequences(2, 3)
    assert chunks["burn_obs"].shape == (12, 3, 4) and chunks["burn_start"].shape == (12, 3)
    for j in range(4):
        for env in range(3):
            row, start = j * 3 + env, 2 * j
            held = min(3, start)
            assert int(chunks["burn_steps"][row]) == held
            assert torch.equal(chunks["burn_obs"][row, 3 - held:], rollout.obs[start - held:start, env])
            assert torch.equal(chunks["burn_start"][row, 3 - held:], rollout.episode_start[start - held:start, env])
            assert not chunks["burn_obs"][row, :3 - held].any() and not chunks["burn_start"][row, :3 - held].any()
            assert torch.equal(chunks["burn_memory"][row], rollout.memory[start - held, env])
    assert "burn_obs" not in rollout.sequences(2)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize(("length", "burn_in"), [(2, 1), (2, 3), (4, 2), (4, 5), (1, 4)])
def test_with_the_acting_weights_burn_in_rebuilds_the_stored_memory_and_the_acting_outputs(kind, length, burn_in):
    """Re-running the steps before each chunk with the weights that acted gives back the memory the acting loop
    stored at the chunk's start (episodes of 5 steps: resets inside the burn-in windows), so the chunks reproduce
    the behaviour outputs and values; a dropped reset or a shifted window breaks it."""
    policy, rollout = _setup(kind, length, burn_in)
    batch = policy.gather(policy.learning_columns(rollout), None, None, {})
    burned = policy.burned_memory(batch)
    torch.testing.assert_close(burned, batch["memory"], rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        output, value = policy.forward_batch(batch)
    torch.testing.assert_close(output, batch["policy_output"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(value, batch["value"], rtol=1e-5, atol=1e-6)


def test_after_the_weights_change_each_chunk_starts_from_the_current_weights_memory():
    """The burned memory against a plain loop: from the acting loop's memory ``held`` steps before the chunk, one
    step at a time with the current weights, zeroed at each episode start; chunks at the rollout's start keep the
    stored memory."""
    policy, rollout = _setup(length=2, burn_in=3)
    with torch.no_grad():
        for parameter in policy.model.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    batch = policy.gather(policy.learning_columns(rollout), None, None, {})
    assert bool(batch["burn_start"].any())  # some burn-in window crosses an episode start
    burned = policy.burned_memory(batch)
    for j in range(4):
        for env in range(3):
            row, start = j * 3 + env, 2 * j
            held = min(3, start)
            memory = rollout.memory[start - held, env][None]
            for t in range(start - held, start):
                if rollout.episode_start[t, env]:
                    memory = torch.zeros_like(memory)
                with torch.no_grad():
                    _, _, memory = policy.model(rollout.obs[t, env][None, None], memory)
            if rollout.episode_start[start, env]:
                memory = torch.zeros_like(memory)
            torch.testing.assert_close(burned[row], memory[0], rtol=1e-5, atol=1e-6)
            if held == 0:
                assert torch.equal(burned[row], rollout.memory[start, env])
    assert not torch.allclose(burned, batch["memory"])  # the stored memory is the old weights'


def test_a_recurrent_update_with_burn_in_learns_and_impala_does_not_offer_the_key():
    policy, rollout = _setup(burn_in=4)
    before = [p.detach().clone() for p in policy.model.parameters()]
    metrics = policy.learn(rollout, LearnContext(progress=0.0))
    assert all(np.isfinite(v) for v in metrics.values())
    assert any(not torch.equal(p, b) for p, b in zip(policy.model.parameters(), before))
    assert PPOPolicy.default_config["burn_in"] == 0 and "burn_in" not in ImpalaPolicy.fields


def test_burn_in_where_every_chunk_starts_its_rollout_is_refused_in_one_line():
    policy, _ = _setup(length=2, burn_in=4)
    policy.cfg.sequence_length = 8
    with pytest.raises(ConfigError, match=r"policy.burn_in=4 .* one chunk of each rollout \(8 steps\): set "
                                          r"policy.sequence_length below pipeline.rollout_steps \(e.g. 4\)"):
        policy.check_rollout_steps(8)
    policy.check_rollout_steps(16)  # two chunks a rollout: the second one's burn-in reads the first's steps
