"""The numpy acting path (zoo.accel.numpy_acting) against the torch reference (``collect``, ``values_of``), on
cases where a bug would show: Gaussian actions with a non-unit sigma and several dimensions, near-uniform logits
(the noise decides every action), a Discrete ``start`` offset; the rollout's values and log-probabilities; and the
public switch ``numpy_acting``."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict
from helpers import new_policy

from zoo.accel import numpy_acting as numpy_actor
from zoo.accel.numpy_acting import NumpyRolloutActor
from zoo.policies import A2CPolicy, PPOPolicy
from zoo.policies.base import CollectActor, CollectOutput

OBS_SPACE = gym.spaces.Box(-2.0, 2.0, (2, 3), np.float32)  # not flat: the MLP takes it flattened
T, B = 5, 32


def make_policy(action_space: gym.Space, cls: type = PPOPolicy, **overrides) -> PPOPolicy:
    policy = new_policy(cls, OBS_SPACE, action_space, **{"hidden_sizes": [16, 16], **overrides})
    with torch.no_grad():  # biases start at 0: give them values, so that the folded biases count
        for name, parameter in policy.model.named_parameters():
            if name.endswith("bias"):
                parameter.uniform_(-0.3, 0.3)
    return policy


def observations(steps: int = T) -> np.ndarray:
    return np.random.default_rng(0).uniform(-2.0, 2.0, (steps, B, *OBS_SPACE.shape)).astype(np.float32)


def drive(policy: PPOPolicy, obs: np.ndarray, numpy_acting: bool):
    """A rollout actor driven over ``obs`` from one torch seed: env actions, raw actions, extras."""
    policy.cfg.numpy_acting = numpy_acting
    torch.manual_seed(7)
    actor = policy.rollout_actor(len(obs), obs.shape[1])
    assert isinstance(actor, NumpyRolloutActor if numpy_acting else CollectActor)
    env_actions = np.stack([np.array(actor.act(t, obs[t]), copy=True) for t in range(len(obs))])
    raw, extras = actor.finish()
    return env_actions, raw, extras


def test_gaussian_actions_with_a_non_unit_sigma_and_several_dimensions():
    space = gym.spaces.Box(-0.5, 0.5, (3,), np.float32)
    policy = make_policy(space, init_log_std=-0.7)
    with torch.no_grad():
        policy.model.log_std.copy_(torch.tensor([-0.7, 0.4, -1.5]))  # a different sigma per dimension
    obs = observations()
    (env_np, raw_np, fast), (env_torch, raw_torch, slow) = drive(policy, obs, True), drive(policy, obs, False)
    assert raw_np.shape == (T, B, 3) and fast["policy_output"].shape == (T, B, 6)
    torch.testing.assert_close(fast["policy_output"], slow["policy_output"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(raw_np, raw_torch, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(env_np, env_torch, rtol=1e-5, atol=1e-6)
    assert (np.abs(raw_np.numpy()) > 0.5).any() and np.abs(env_np).max() <= 0.5  # clipped for the env only
    spread = (raw_np - fast["policy_output"][..., :3]).std(dim=(0, 1))  # the noise's scale is each sigma
    torch.testing.assert_close(spread, torch.tensor([-0.7, 0.4, -1.5]).exp(), rtol=0.2, atol=0.0)


def test_near_uniform_logits_sample_as_collect_does():
    policy = make_policy(gym.spaces.Discrete(5))  # the policy head's gain is 0.01: logits within ~0.05
    with torch.no_grad():
        policy.model.policy_head.bias.zero_()
    obs = observations(8)
    (env_np, raw_np, fast), (env_torch, raw_torch, slow) = drive(policy, obs, True), drive(policy, obs, False)
    logits = slow["policy_output"]
    assert (logits.max(-1).values - logits.min(-1).values).max() < 0.1  # the noise decides every action
    assert torch.equal(raw_np, raw_torch) and np.array_equal(env_np, env_torch)
    assert len(np.unique(env_np)) == 5 and all(len(np.unique(env_np[t])) >= 3 for t in range(8))
    torch.testing.assert_close(fast["policy_output"], logits, rtol=1e-5, atol=1e-6)


def test_a_discrete_start_offset_reaches_the_env_and_the_raw_action_stays_an_index():
    policy = make_policy(gym.spaces.Discrete(4, start=-2))
    obs = observations()
    (env_np, raw_np, _), (env_torch, raw_torch, _) = drive(policy, obs, True), drive(policy, obs, False)
    assert torch.equal(raw_np, raw_torch) and raw_np.min() >= 0 and raw_np.max() <= 3
    np.testing.assert_array_equal(env_np, env_torch)
    np.testing.assert_array_equal(env_np, raw_np.numpy() - 2)
    assert env_np.min() < 0


def test_the_handed_over_log_probabilities_are_the_torch_ones():
    policy = make_policy(gym.spaces.Discrete(3))
    with torch.no_grad():
        policy.model.policy_head.weight.mul_(1000.0)  # far from uniform: log-probs from about 0 to very negative
    _, raw, extras = drive(policy, observations(), True)
    expected = policy.log_prob(extras["policy_output"], raw)
    torch.testing.assert_close(extras["log_prob"], expected, rtol=1e-5, atol=1e-5)
    assert expected.max() > -0.05 and expected.min() < -2.0  # certain and unlikely samples alike
    assert "log_prob" not in drive(make_policy(gym.spaces.Discrete(3), A2CPolicy), observations(), True)[2]


@pytest.mark.parametrize("shared", [False, True])
def test_the_rollout_values_are_the_critics(shared):
    from zoo.data import Rollout

    policy = make_policy(gym.spaces.Discrete(2), shared_network=shared)
    obs = torch.from_numpy(observations())
    last_obs = torch.from_numpy(observations(1)[0])
    flags = torch.zeros(T, B, dtype=torch.bool)
    rollout = Rollout(obs=obs, action=torch.zeros(T, B, dtype=torch.int64), reward=torch.ones(T, B),
                      terminated=flags, truncated=flags, valid=~flags, last_obs=last_obs,
                      extras={"policy_output": torch.zeros(T, B, 2)})
    values = policy._rollout_values(rollout)
    assert values.shape == (T + 1, B) and values.dtype == torch.float32
    torch.testing.assert_close(values, policy.values_of(torch.cat([obs, last_obs[None]])), rtol=1e-5, atol=1e-6)
    processed = policy.process_rollout(rollout)
    torch.testing.assert_close(processed.extras["next_value"][-1], policy.value(last_obs), rtol=1e-5, atol=1e-6)


def test_the_public_switch_turns_the_numpy_path_off(monkeypatch):
    from zoo.pipelines import VectorCollector

    def refuse(*args, **kwargs):
        raise AssertionError("the numpy path was called")

    monkeypatch.setattr(numpy_actor.FoldedMLP, "__init__", refuse)
    monkeypatch.setattr(numpy_actor.FoldedMLP, "load", refuse)
    monkeypatch.setattr(numpy_actor.NumpyActing, "rollout_actor", refuse)
    monkeypatch.setattr(numpy_actor.NumpyActing, "rollout_values", refuse)
    for switch in (False, True):
        collector = VectorCollector("CartPole-v1", 4, seed=0)
        cfg = EasyDict({**PPOPolicy.default_config, "numpy_acting": switch})
        policy = PPOPolicy(cfg, collector.observation_space, collector.action_space, torch.device("cpu"))
        try:
            if switch:  # (the patches would catch a call)
                with pytest.raises(AssertionError, match="numpy path"):
                    collector.rollout(policy, 4)
            else:
                batch = policy.process_rollout(collector.rollout(policy, 4))
                assert {"value", "log_prob", "advantage"} <= set(batch.extras)
        finally:
            collector.close()


def test_what_acts_in_numpy_and_what_through_collect():
    assert make_policy(gym.spaces.Discrete(3)).numpy_acting_applies()
    multi = make_policy(gym.spaces.MultiDiscrete([3, 2]))  # MultiDiscrete and MultiBinary: collect
    assert not multi.numpy_acting_applies() and isinstance(multi.rollout_actor(T, B), CollectActor)
    double = make_policy(gym.spaces.Discrete(3))
    double.model.double()  # a float64 model: torch, found at the next rollout
    assert isinstance(double.rollout_actor(T, B), CollectActor)

    class OwnCollect(PPOPolicy):  # the rule: an own collect is called at every step...
        def collect(self, obs: torch.Tensor) -> CollectOutput:
            return super().collect(obs)

    class DeclaredCollect(PPOPolicy):  # ...unless the class states that the numpy actor samples as it does
        numpy_rollout_actions = ("discrete",)

        def collect(self, obs: torch.Tensor) -> CollectOutput:
            return super().collect(obs)

    class Inherited(DeclaredCollect):
        pass

    space = gym.spaces.Discrete(3)
    assert isinstance(make_policy(space, OwnCollect).rollout_actor(T, B), CollectActor)
    assert isinstance(make_policy(space, DeclaredCollect).rollout_actor(T, B), NumpyRolloutActor)
    assert isinstance(make_policy(space, Inherited).rollout_actor(T, B), NumpyRolloutActor)
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    assert isinstance(make_policy(box, DeclaredCollect).rollout_actor(T, B), CollectActor)
