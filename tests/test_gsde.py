"""gSDE (``zoo.policies.gsde``, ``policy.use_sde``): the state-dependent std against a hand-written loop, the noise's
distribution against it, matrices held per sub-env and resampled on schedule, the latent features detached, exact
state round trips, the mean for evaluation, and a short run end to end."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from zoo.errors import ConfigError
from zoo.policies.a2c import A2CPolicy
from zoo.policies.ppo import PPOPolicy
from zoo.rl_utils import gaussian_log_prob
from zoo.run import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)


def make(cls=PPOPolicy, seed: int = 0, **overrides):
    cfg = EasyDict({**cls.default_config, "hidden_sizes": [8, 5], "use_sde": True, "init_log_std": -1.0,
                    **overrides})
    torch.manual_seed(seed)
    return cls(cfg, OBS, BOX, torch.device("cpu"))


@pytest.mark.parametrize("full_std", [True, False])
def test_sigma_is_the_std_of_the_latent_linear_noise_by_a_plain_loop(full_std):
    policy = make(full_std=full_std)
    model = policy.model
    assert model.log_std.shape == ((5, 2) if full_std else (5, 1))
    with torch.no_grad():
        model.log_std.copy_(torch.randn_like(model.log_std) * 0.5)
    obs = torch.randn(4, 3)
    output, latent = model.policy_and_latent(obs)
    sigma = np.exp(model.log_std.detach().numpy().astype(np.float64))
    for b in range(4):
        for j in range(2):
            variance = sum(float(latent[b, i].detach()) ** 2 * sigma[i, j if full_std else 0] ** 2 for i in range(5))
            assert float(output["sigma"][b, j]) == pytest.approx(math.sqrt(variance + 1e-6), rel=1e-5)
    # the noise z @ E, E drawn entry by entry with those stds, has exactly that variance (Monte Carlo, 20k draws)
    noise = policy.sde_noise
    draws = []
    for _ in range(20_000 // 4):
        noise.resample(model.sde_std(), 1)
        draws.append(noise.noise(latent[:1], model.sde_std()))
    empirical = torch.cat(draws).var(0)
    assert torch.allclose(empirical, output["sigma"][0].detach() ** 2 - 1e-6, rtol=0.06)


def test_the_matrices_are_per_sub_env_and_held_for_the_rollout():
    policy = make()
    obs = torch.randn(1, 3).expand(3, 3)  # three sub-envs in the same state
    policy.rollout_actor(4, 3)
    first = policy.collect(obs).raw_action
    assert not torch.allclose(first[0], first[1])  # one matrix per sub-env
    assert torch.equal(policy.collect(obs).raw_action, first)  # held within the rollout (sde_sample_freq -1)
    policy.rollout_actor(4, 3)
    assert not torch.allclose(policy.collect(obs).raw_action, first)  # a new rollout, new matrices
    mu = policy.model.policy_output(obs)["mu"]
    assert torch.allclose(torch.as_tensor(policy.evaluate(obs)), policy._to_env_tensor(mu))  # evaluation: the mean


def test_sde_sample_freq_resamples_every_n_steps():
    policy = make(sde_sample_freq=2)
    obs = torch.randn(2, 3)
    policy.rollout_actor(8, 2)
    actions = [policy.collect(obs).raw_action for _ in range(6)]
    assert torch.equal(actions[0], actions[1]) and torch.equal(actions[2], actions[3])
    assert not torch.allclose(actions[1], actions[2]) and not torch.allclose(actions[3], actions[4])


def test_the_behaviour_log_prob_is_the_diagonal_gaussians_and_the_latent_is_detached():
    policy = make()
    obs = torch.randn(6, 3)
    policy.rollout_actor(1, 6)
    out = policy.collect(obs)
    packed = out.extras["policy_output"]
    mu, sigma = packed.chunk(2, -1)
    expected = (-0.5 * ((out.raw_action - mu) / sigma) ** 2 - sigma.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
    assert torch.allclose(policy.log_prob(packed, out.raw_action), expected, atol=1e-5)
    assert torch.allclose(gaussian_log_prob(mu, sigma, out.raw_action), expected, atol=1e-5)
    sigma_graph = policy.model.policy_output(obs)["sigma"]
    sigma_graph.sum().backward()
    assert policy.model.log_std.grad.abs().sum() > 0
    assert all(layer.weight.grad is None or not layer.weight.grad.any() for layer in policy.model._actor_hidden)


def test_state_round_trip_explores_exactly_as_unbroken():
    first = make(sde_sample_freq=3, seed=1)
    obs = torch.randn(2, 3)
    first.rollout_actor(5, 2)
    first.collect(obs)
    second = make(sde_sample_freq=3, seed=2)
    second.load_state_dict(first.state_dict())
    torch.manual_seed(9)
    a = [first.collect(obs).raw_action for _ in range(5)]
    torch.manual_seed(9)
    b = [second.collect(obs).raw_action for _ in range(5)]
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_traceable_for_export_and_ortho_init_off_uses_torch_defaults():
    policy = make(cls=A2CPolicy, ortho_init=False)
    traced = torch.jit.trace(policy.export_module(), torch.randn(2, 3))  # what zoo export traces
    obs = torch.randn(5, 3)
    assert torch.allclose(traced(obs), policy.deterministic_action(obs))
    head = policy.model.policy_head.weight
    assert head.abs().max() > 0.05  # torch's default init; orthogonal with gain 0.01 would keep it below 0.02
    assert make(cls=A2CPolicy).model.policy_head.weight.abs().max() < 0.02


def test_refused_where_it_does_not_apply(tmp_path):
    with pytest.raises(ConfigError, match="use_sde needs Box actions"):
        train({"runs_dir": str(tmp_path), "env": {"id": "CartPole-v1"}, "policy": {"type": "ppo", "use_sde": True}})
    with pytest.raises(ConfigError, match="unknown config key 'policy.use_sde'"):
        train({"runs_dir": str(tmp_path), "env": {"id": "Pendulum-v1"}, "policy": {"type": "impala", "use_sde": True}})


def test_a_short_run_resumes_exactly(tmp_path):
    from helpers import TIMINGS, metrics_rows

    config = {"runs_dir": str(tmp_path), "env": {"id": "Pendulum-v1"}, "seed": 3,
              "policy": {"type": "a2c", "use_sde": True, "init_log_std": -2.0, "ortho_init": False, "anneal_lr": False,
                         "sde_sample_freq": 4},
              "pipeline": {"num_envs": 4, "rollout_steps": 8, "max_env_steps": 1024, "eval_every": 0}}
    whole = train({**config, "exp_name": "whole"})
    half = train({**config, "exp_name": "half", "pipeline": {**config["pipeline"], "max_env_steps": 512}})
    train(None, ["pipeline.max_env_steps=1024"], resume=half["run_dir"])
    from pathlib import Path

    rows = [metrics_rows(Path(run["run_dir"]), TIMINGS) for run in (whole, half)]
    assert rows[0] == rows[1]
