"""SAC's and TD3's acting in numpy (``explore_action`` on arrays: ``OffPolicyPolicy.acts_in_numpy``, the actors' numpy
forward, ``zoo.accel.numpy_acting.LiveMLP``) against the same ``explore_action`` on tensors: the same noise draws
from torch's generator, the same actions up to float rounding, for every activation, clamped log-stds and
asymmetric action bounds; always the weights of now (updated in place, loaded, or a new actor); one formula for both
(an edited ``explore_action`` changes both); torch where numpy does not apply."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import new_policy

from zoo.accel.numpy_acting import LiveMLP
from zoo.data import ReplayBuffer, Transitions
from zoo.policies import LearnContext, SACACEPolicy, SACPolicy, TD3Policy

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
ACT_SPACE = gym.spaces.Box(np.array([-2.0, 0.0, -0.5], np.float32), np.array([2.0, 1.0, 3.0], np.float32),
                           dtype=np.float32)
SMALL = {"hidden_sizes": [24, 16], "batch_size": 8}


def _torch_actions(policy: SACPolicy, obs: torch.Tensor, seed: int) -> np.ndarray:
    torch.manual_seed(seed)
    with torch.no_grad():
        return policy.explore_action(obs).numpy()


def _numpy_actions(policy: SACPolicy, obs: torch.Tensor, seed: int) -> np.ndarray:
    torch.manual_seed(seed)
    assert policy.acts_in_numpy(obs), "explore would not act in numpy"
    actions = policy.explore(obs)
    assert _forward(policy) is not None, "explore did not act in numpy"
    return actions


def _forward(policy: SACPolicy) -> LiveMLP | None:
    """The actor's numpy forward pass (its ``LiveMLP``), None before the first numpy call."""
    return policy.actor._numpy._mlp


@pytest.mark.parametrize("activation, input_activation", [("relu", None), ("tanh", None), ("relu", "elu")])
@pytest.mark.parametrize("batch", [1, 4])
def test_numpy_acting_draws_and_acts_as_explore_action(activation, input_activation, batch):
    policy = new_policy(SACPolicy, OBS_SPACE, ACT_SPACE, seed=1, activation=activation,
                        input_activation=input_activation, **SMALL)
    obs = 3.0 * torch.randn(batch, 5)
    actions = _numpy_actions(policy, obs, seed=7)
    expected = _torch_actions(policy, obs, seed=7)
    assert actions.dtype == np.float32 and actions.shape == (batch, 3) and actions.flags.c_contiguous
    np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-6)
    # the noise is torch's: another seed gives other actions, and the generator moved on as explore_action's does
    assert not np.allclose(_numpy_actions(policy, obs, seed=8), expected)
    torch.manual_seed(7)
    policy.explore(obs)
    after_numpy = torch.rand(1)
    torch.manual_seed(7)
    policy.explore_action(obs)
    assert torch.equal(torch.rand(1), after_numpy)


def test_log_stds_are_clamped_into_their_bounds_as_the_actor_clamps_them():
    # a tight band: every log-std the network outputs is clamped, and the noise's scale shows it
    policy = new_policy(SACPolicy, OBS_SPACE, ACT_SPACE, seed=2, log_std_min=-0.5, log_std_max=-0.4, **SMALL)
    with torch.no_grad():
        policy.actor.layers[-1].bias[3:] = torch.tensor([-3.0, 0.0, 3.0])
    obs = torch.randn(6, 5)
    np.testing.assert_allclose(_numpy_actions(policy, obs, 3), _torch_actions(policy, obs, 3), rtol=1e-5, atol=1e-6)


def test_numpy_acting_follows_the_weights_updated_in_place_loaded_or_replaced():
    policy = new_policy(SACPolicy, OBS_SPACE, ACT_SPACE, seed=3, **SMALL)
    obs = torch.randn(2, 5)
    _numpy_actions(policy, obs, 0)
    forward = _forward(policy)
    # learning steps write the weights in place: the same views read them
    replay = ReplayBuffer(64, (5,), (3,))
    rng = np.random.default_rng(0)
    replay.add(Transitions(obs=rng.normal(size=(64, 5)).astype(np.float32),
                           action=rng.uniform(-0.5, 0.5, (64, 3)).astype(np.float32),
                           reward=rng.normal(size=64).astype(np.float32), next_obs=rng.normal(size=(64, 5)).astype(
                               np.float32), terminated=np.zeros(64, bool), truncated=np.zeros(64, bool)))
    before = _numpy_actions(policy, obs, 0)
    policy.learn(replay, LearnContext(updates=5))
    after = _numpy_actions(policy, obs, 0)
    assert _forward(policy) is forward and not np.allclose(before, after)
    np.testing.assert_allclose(after, _torch_actions(policy, obs, 0), rtol=1e-5, atol=1e-6)
    # another policy's state loaded in place
    other = new_policy(SACPolicy, OBS_SPACE, ACT_SPACE, seed=4, **SMALL)
    policy.load_state_dict(other.state_dict())
    np.testing.assert_allclose(_numpy_actions(policy, obs, 0), _torch_actions(other, obs, 0), rtol=1e-5, atol=1e-6)
    # a parameter replaced, then the whole actor: new views
    with torch.no_grad():
        policy.actor.layers[1].weight = torch.nn.Parameter(torch.randn_like(policy.actor.layers[1].weight))
    np.testing.assert_allclose(_numpy_actions(policy, obs, 0), _torch_actions(policy, obs, 0), rtol=1e-5, atol=1e-6)
    policy.actor = policy._new_actor("orthogonal")
    np.testing.assert_allclose(_numpy_actions(policy, obs, 0), _torch_actions(policy, obs, 0), rtol=1e-5, atol=1e-6)
    assert _forward(policy) is not forward


def test_sac_ace_acts_in_numpy_too_and_elsewhere_torch_acts():
    ace = new_policy(SACACEPolicy, OBS_SPACE, ACT_SPACE, seed=5, **SMALL)
    obs = torch.randn(3, 5)
    np.testing.assert_allclose(_numpy_actions(ace, obs, 1), _torch_actions(ace, obs, 1), rtol=1e-5, atol=1e-6)
    policy = new_policy(SACPolicy, OBS_SPACE, ACT_SPACE, seed=5, **SMALL)
    assert policy.numpy_explore(obs.double()) is None  # not float32 observations

    class Shifted(SACPolicy):  # a subclass with its own explore_action is not second-guessed
        def explore_action(self, obs: torch.Tensor) -> torch.Tensor:
            return super().explore_action(obs) + 1.0

    shifted = new_policy(Shifted, OBS_SPACE, ACT_SPACE, seed=5, **SMALL)
    assert not Shifted.numpy_acting and shifted.numpy_explore(obs) is None
    torch.manual_seed(2)
    np.testing.assert_allclose(shifted.explore(obs), _torch_actions(policy, obs, 2) + 1.0, rtol=1e-5, atol=1e-6)

    class Declared(Shifted):  # one that says its explore_action takes arrays acts in numpy with it
        numpy_acting = True

    declared = new_policy(Declared, OBS_SPACE, ACT_SPACE, seed=5, **SMALL)
    np.testing.assert_allclose(_numpy_actions(declared, obs, 2), _torch_actions(policy, obs, 2) + 1.0, rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("cls", [SACPolicy, TD3Policy])
def test_one_formula_an_explore_action_edited_in_place_changes_both_paths(cls, monkeypatch):
    policy = new_policy(cls, OBS_SPACE, ACT_SPACE, seed=5, **SMALL)
    obs = torch.randn(3, 5)
    expected = _torch_actions(policy, obs, 2) * 0.5 + 0.25
    original = cls.explore_action
    monkeypatch.setattr(cls, "explore_action", lambda self, obs: original(self, obs) * 0.5 + 0.25)
    np.testing.assert_allclose(_numpy_actions(policy, obs, 2), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_torch_actions(policy, obs, 2), expected, rtol=1e-5, atol=1e-6)


def test_live_mlp_is_the_layers_forward_pass_and_knows_when_it_is_stale():
    layers = [torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)]
    forward = LiveMLP(layers, ["elu"])
    x = torch.randn(5, 4)
    expected = layers[1](torch.nn.functional.elu(layers[0](x))).detach().numpy()
    np.testing.assert_allclose(forward(x.numpy()), expected, rtol=1e-5, atol=1e-6)
    assert forward.current(layers)
    assert not forward.current([layers[0], torch.nn.Linear(8, 2)])
    layers[0].bias.data = torch.zeros(8)  # new storage under the same parameter
    assert not forward.current(layers)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("batch", [1, 4])
def test_td3_acts_in_numpy_as_explore_action_with_its_noise_clipped_into_the_bounds(activation, batch):
    # large noise: many actions clip at -1 or 1 before the scaling into the asymmetric bounds
    policy = new_policy(TD3Policy, OBS_SPACE, ACT_SPACE, seed=6, activation=activation, exploration_noise=0.8,
                        **SMALL)
    obs = 3.0 * torch.randn(batch, 5)
    actions = _numpy_actions(policy, obs, seed=4)
    expected = _torch_actions(policy, obs, seed=4)
    assert actions.dtype == np.float32 and actions.shape == (batch, 3) and actions.flags.c_contiguous
    np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-6)
    clipped = np.isclose(expected, ACT_SPACE.low) | np.isclose(expected, ACT_SPACE.high)
    assert clipped.any() or batch == 1
    assert not np.allclose(_numpy_actions(policy, obs, seed=5), expected)  # torch's noise, scaled
    quiet = new_policy(TD3Policy, OBS_SPACE, ACT_SPACE, seed=6, activation=activation, exploration_noise=0.0,
                       **SMALL)
    with torch.no_grad():
        deterministic = quiet.deterministic_action(obs).numpy()
    np.testing.assert_allclose(_numpy_actions(quiet, obs, seed=5), deterministic, rtol=1e-5, atol=1e-6)


def test_td3_numpy_acting_follows_a_replaced_actor():
    policy = new_policy(TD3Policy, OBS_SPACE, ACT_SPACE, seed=7, **SMALL)
    obs = torch.randn(2, 5)
    _numpy_actions(policy, obs, 0)
    forward = _forward(policy)
    policy.actor.load_state_dict(new_policy(TD3Policy, OBS_SPACE, ACT_SPACE, seed=8, **SMALL).actor.state_dict())
    np.testing.assert_allclose(_numpy_actions(policy, obs, 0), _torch_actions(policy, obs, 0), rtol=1e-5, atol=1e-6)
    assert _forward(policy) is forward  # loaded in place: the same views
    policy.actor = type(policy.actor)(5, 3, SMALL["hidden_sizes"])
    np.testing.assert_allclose(_numpy_actions(policy, obs, 0), _torch_actions(policy, obs, 0), rtol=1e-5, atol=1e-6)
    assert _forward(policy) is not forward
