"""SAC's network options that ACE's official settings use, each checked against its definition: Xavier-uniform and
orthogonal initial weights with zero biases (``policy.init``), ELU after the first hidden layer only
(``policy.input_activation``), the fresh weights a dormancy reset mixes in (``policy.reset_init``), and the
``configs/sac_ace_official_*.py`` files building the networks of ACE's code (3 x 1024, batch 512, signed effects).
"""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import new_policy
from test_sac import ACT_SPACE, OBS_DIM, OBS_SPACE, make_replay
from torch.nn.utils import parameters_to_vector

from zoo.config import load_config_file
from zoo.config.resolve import resolve_config
from zoo.policies import LearnContext, SACACEPolicy, SACPolicy

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _actor_matrices(actor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(weight as (fan_out, fan_in), bias) of each actor layer."""
    return [(layer.weight.detach(), layer.bias.detach()) for layer in actor.layers]


def _critic_matrices(critic) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(weight as (fan_out, fan_in), bias) of each layer of each ensemble member."""
    return [(weight[e].detach().T, bias[e, 0].detach()) for weight, bias in zip(critic.weights, critic.biases)
            for e in range(critic.ensemble)]


def _assert_xavier(weight: torch.Tensor) -> None:
    fan_out, fan_in = weight.shape
    bound = math.sqrt(6.0 / (fan_in + fan_out))  # Glorot & Bengio (2010), gain 1: U(-bound, bound)
    assert weight.abs().max() <= bound
    assert weight.abs().max() > 0.9 * bound  # the whole range is used, not a narrower init
    # the variance of U(-b, b) is b^2 / 3 = 2 / (fan_in + fan_out); the sample variance of n draws has a relative
    # standard deviation of about 0.89 / sqrt(n): five of them
    assert weight.var().item() == pytest.approx(2.0 / (fan_in + fan_out), rel=4.5 / math.sqrt(weight.numel()))


def _assert_orthogonal(weight: torch.Tensor) -> None:
    rows, cols = weight.shape
    gram = weight @ weight.T if rows <= cols else weight.T @ weight  # orthonormal rows, or columns when taller
    torch.testing.assert_close(gram, torch.eye(min(rows, cols)), rtol=0, atol=1e-5)


@pytest.mark.parametrize("init", ["xavier", "orthogonal"])
def test_init_draws_every_actor_and_critic_weight_by_its_rule_with_zero_biases(init):
    check = _assert_xavier if init == "xavier" else _assert_orthogonal
    policy = new_policy(SACPolicy, OBS_SPACE, ACT_SPACE, seed=3, hidden_sizes=[96, 80], init=init)
    layers = _actor_matrices(policy.actor) + _critic_matrices(policy.critic)
    assert len(layers) == 3 + 2 * 3
    for weight, bias in layers:
        check(weight)
        assert not bias.any()
    for (a, _), (b, _) in zip(_critic_matrices(policy.critic)[0::2], _critic_matrices(policy.critic)[1::2]):
        assert not torch.equal(a, b)  # each critic its own draw
    for got, want in zip(policy.target.parameters(), policy.critic.parameters()):
        assert torch.equal(got, want)  # the targets start as copies
    # the default is nn.Linear's: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), biases too; neither rule above
    default = new_policy(SACPolicy, OBS_SPACE, ACT_SPACE, seed=3, hidden_sizes=[96, 80])
    for weight, bias in _actor_matrices(default.actor) + _critic_matrices(default.critic):
        assert bias.any() and weight.abs().max() <= 1.0 / math.sqrt(weight.shape[1])
    with pytest.raises(AssertionError):
        _assert_xavier(_actor_matrices(default.actor)[1][0])
    with pytest.raises(AssertionError):
        _assert_orthogonal(_actor_matrices(default.actor)[1][0])


def test_input_activation_follows_the_first_hidden_layer_only():
    policy = new_policy(SACPolicy, OBS_SPACE, ACT_SPACE, seed=4, hidden_sizes=[16, 12, 8], activation="relu",
                        input_activation="elu")
    obs, action = torch.randn(7, OBS_DIM), torch.rand(7, ACT_SPACE.shape[0]) * 2 - 1
    x = obs
    layers = _actor_matrices(policy.actor)
    for k, (weight, bias) in enumerate(layers[:-1]):
        x = (F.elu if k == 0 else F.relu)(x @ weight.T + bias)
    mu, log_std = (x @ layers[-1][0].T + layers[-1][1]).chunk(2, dim=-1)
    got_mu, got_log_std = policy.actor(obs)
    torch.testing.assert_close(got_mu, mu)
    torch.testing.assert_close(got_log_std, log_std.clamp(policy.cfg.log_std_min, policy.cfg.log_std_max))
    critic = _critic_matrices(policy.critic)
    for e in range(2):
        x = torch.cat([obs, action], -1)
        for k, (weight, bias) in enumerate(critic[e::2][:-1]):
            x = (F.elu if k == 0 else F.relu)(x @ weight.T + bias)
        weight, bias = critic[e::2][-1]
        torch.testing.assert_close(policy.critic(obs, action)[e], x @ weight.T + bias)


def test_a_reset_mixes_in_fresh_networks_drawn_by_reset_init(monkeypatch):
    policy = new_policy(SACACEPolicy, OBS_SPACE, ACT_SPACE, seed=5, hidden_sizes=[24, 16], batch_size=8,
                        init="xavier", reset_init="orthogonal", causal_weights=False, reset_interval=2,
                        reset_start=2, reset_factor_min=0.2, reset_factor_max=0.9)
    drawn, before = [], {}
    new_actor, new_critic = policy._new_actor, policy._new_critic

    def snapshot() -> dict[str, torch.Tensor]:
        return {name: parameters_to_vector(getattr(policy, name).parameters()).detach().clone()
                for name in ("actor", "critic", "target")}

    def record_actor(init=None):
        before.update(snapshot())  # after the update, before the reset moves anything
        drawn.append(("actor", init, new_actor(init)))
        return drawn[-1][2]

    def record_critic(init=None):
        drawn.append(("critic", init, new_critic(init)))
        return drawn[-1][2]

    monkeypatch.setattr(policy, "_new_actor", record_actor)
    monkeypatch.setattr(policy, "_new_critic", record_critic)
    replay = make_replay()
    assert "resets" not in policy.learn(replay, LearnContext(updates=1)) and not drawn
    metrics = policy.learn(replay, LearnContext(updates=1))
    assert metrics["resets"] == 1.0 and [(kind, init) for kind, init, _ in drawn] == [
        ("actor", "orthogonal"), ("critic", "orthogonal"), ("critic", "orthogonal")]
    actor, critic, target = (module for _, _, module in drawn)
    for weight, bias in _actor_matrices(actor) + _critic_matrices(critic):
        _assert_orthogonal(weight)
        assert not bias.any()
    factor = metrics["reset_factor"]
    after = snapshot()
    for name, fresh in (("actor", actor), ("critic", critic), ("target", target)):
        fresh_flat = parameters_to_vector(fresh.parameters()).detach()
        torch.testing.assert_close(after[name], factor * before[name] + (1.0 - factor) * fresh_flat)
    assert not torch.equal(after["critic"], after["target"])  # the targets get a fresh draw of their own


@pytest.mark.parametrize(("name", "obs_dim", "action_dim"), [("hopper", 11, 3), ("halfcheetah", 17, 6)])
def test_the_official_configs_build_ace_as_its_authors_code(name, obs_dim, action_dim):
    path = CONFIGS / f"sac_ace_official_{name}.py"
    cfg = resolve_config(load_config_file(path), [], path.parent)
    p = cfg.policy
    assert (p.type, list(p.hidden_sizes), p.input_activation, p.activation, p.init, p.reset_init) == (
        "sac_ace", [1024, 1024, 1024], "elu", "relu", "xavier", "orthogonal")
    assert (p.batch_size, p.actor_learning_rate, p.critic_learning_rate, p.alpha_learning_rate) == (512, 3e-4, 3e-4,
                                                                                                     3e-4)
    assert (p.actor_update_interval, p.target_update_interval, p.causal_use_abs, p.dormant_reset) == (2, 2, False,
                                                                                                     True)
    assert (cfg.pipeline.random_steps, cfg.pipeline.learning_starts, cfg.pipeline.max_env_steps) == (
        10_000, 513, 1_000_000)
    obs = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
    act = gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)
    torch.manual_seed(0)
    policy = SACACEPolicy(cfg.policy, obs, act, torch.device("cpu"))
    try:
        assert [tuple(w.shape) for w, _ in _actor_matrices(policy.actor)] == [
            (1024, obs_dim), (1024, 1024), (1024, 1024), (2 * action_dim, 1024)]
        assert [tuple(w.shape) for w in policy.critic.weights] == [
            (2, obs_dim + action_dim, 1024), (2, 1024, 1024), (2, 1024, 1024), (2, 1024, 1)]
        assert policy.actor.activation_names == ["elu", "relu", "relu"]
        for weight, bias in _actor_matrices(policy.actor)[:2] + _critic_matrices(policy.critic)[:2]:
            _assert_xavier(weight)
            assert not bias.any()
    finally:
        policy.close()


def test_sac_ace_weights_by_the_signed_effects_by_default():
    assert SACACEPolicy.default_config["causal_use_abs"] is False  # ACE's code and paper; true is zoo's option
