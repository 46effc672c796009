"""Direct tests of policy and rl_utils guards that survived a mutation audit (issue 39, section 3): DQN's target
starts as a copy of the online network, gSDE with ``sde_sample_freq=0`` draws once per rollout, the off-policy base
refuses a Box with an infinite bound on either side, and ``q_nstep_td_error`` checks per-sample discounts on its
``truncated=`` path. Each fails when its one line is broken."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from zoo.errors import ConfigError
from zoo.policies.dqn import DQNPolicy
from zoo.policies.gsde import StateDependentNoise
from zoo.policies.off_policy import check_bounded_box
from zoo.policies.ppo import PPOPolicy
from zoo.rl_utils import q_nstep_td_data, q_nstep_td_error

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)


# -- DQN ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dueling", [False, True])
def test_the_dqn_target_starts_as_an_exact_copy_of_the_online_network(dueling):
    cfg = EasyDict({**DQNPolicy.default_config, "hidden_sizes": [16, 8], "dueling": dueling})
    torch.manual_seed(0)
    policy = DQNPolicy(cfg, OBS, gym.spaces.Discrete(4), torch.device("cpu"))
    online, target = dict(policy.q.named_parameters()), dict(policy.target.named_parameters())
    assert online.keys() == target.keys() and len(online) >= 4
    for name, weight in online.items():
        assert torch.equal(weight, target[name]), name
        assert weight.data_ptr() != target[name].data_ptr()  # a copy, not the same tensor
    assert not any(weight.requires_grad for weight in target.values())
    obs = torch.randn(5, 3)
    assert torch.equal(policy.q(obs), policy.target(obs))


# -- gSDE ---------------------------------------------------------------------------------------------------------
def _sde_policy(sample_freq: int) -> PPOPolicy:
    cfg = EasyDict({**PPOPolicy.default_config, "hidden_sizes": [8, 5], "use_sde": True, "init_log_std": -1.0,
                    "sde_sample_freq": sample_freq})
    torch.manual_seed(0)
    return PPOPolicy(cfg, OBS, gym.spaces.Box(-2.0, 2.0, (2,), np.float32), torch.device("cpu"))


@pytest.mark.parametrize("sample_freq", [0, -1])
def test_gsde_with_sample_freq_0_or_minus_1_draws_once_per_rollout(sample_freq):
    policy = _sde_policy(sample_freq)
    obs = torch.randn(2, 3)
    rollouts = []
    for _ in range(2):
        policy.rollout_actor(12, 2)
        actions = [policy.collect(obs).raw_action for _ in range(12)]
        assert all(torch.equal(action, actions[0]) for action in actions)  # held the whole rollout
        rollouts.append(actions[0])
    assert not torch.allclose(rollouts[0], rollouts[1])  # each rollout draws new matrices


def test_the_noise_schedule_itself_resamples_only_at_a_rollout_for_0():
    noise = StateDependentNoise(0)
    std, latent = torch.ones(4, 2), torch.ones(3, 4)
    noise.start_rollout(std, 3)
    first = noise.matrices.clone()
    for _ in range(50):
        noise.noise(latent, std)
    assert torch.equal(noise.matrices, first)
    noise.start_rollout(std, 3)
    assert not torch.equal(noise.matrices, first)


# -- the off-policy base's Box check -------------------------------------------------------------------------------
@pytest.mark.parametrize(("low", "high"), [(-1.0, np.inf), (-np.inf, 1.0), ([-1.0, -1.0], [1.0, np.inf]),
                                           ([-np.inf, -1.0], [1.0, 1.0])])
def test_an_action_box_with_an_infinite_bound_on_either_side_is_refused(low, high):
    space = gym.spaces.Box(np.array(low, np.float32) * np.ones(2, np.float32),
                           np.array(high, np.float32) * np.ones(2, np.float32), dtype=np.float32)
    with pytest.raises(ConfigError, match="it takes a 1-D Box with finite bounds"):
        check_bounded_box("SAC", OBS, space)
    check_bounded_box("SAC", OBS, gym.spaces.Box(-1.0, 1.0, (2,), np.float32))  # finite: fine


# -- q_nstep_td_error's per-sample discounts with truncated= ----------------------------------------------------------
@pytest.mark.parametrize("gammas", [[0.9], [0.9, 0.8], [0.9, 0.8, 0.7, 0.6]])
def test_per_sample_discounts_must_number_the_batch_on_the_truncated_path(gammas):
    batch, nstep = 3, 2
    data = q_nstep_td_data(torch.zeros(batch, 2), torch.ones(batch, 2), torch.zeros(batch, dtype=torch.long),
                           torch.zeros(batch, dtype=torch.long), torch.ones(nstep, batch),
                           torch.zeros(nstep, batch, dtype=torch.bool), None)
    truncated = torch.zeros(nstep, batch, dtype=torch.bool)
    with pytest.raises(ValueError, match=f"gamma has {len(gammas)} entries, expected one per batch entry"):
        q_nstep_td_error(data, gammas, nstep, truncated=truncated)
    loss, per_sample = q_nstep_td_error(data, [0.5, 0.5, 0.5], nstep, truncated=truncated)
    assert torch.allclose(per_sample, torch.full((batch,), (1 + 0.5 + 0.25) ** 2))  # r0 + g r1 + g^2 * 1, q = 0
