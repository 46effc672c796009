"""SAC (Haarnoja et al. 2018) on the off-policy base; SAC-ACE (``zoo.policies.ace``) is a subclass of it.

A tanh-squashed Gaussian actor (log-prob with the tanh Jacobian correction), twin Q critics (one batched module)
with Polyak-averaged targets, an automatic temperature with target entropy ``-|A|``, and actor, temperature and
target updates every ``actor_update_interval`` / ``target_update_interval`` critic updates. ``critic_loss:
hl_gauss`` makes each critic a categorical over a fixed support trained with rl_utils' HL-Gauss cross-entropy
(Farebrother et al. 2024) instead of a squared error.

Actions: the replay holds env actions (the off-policy convention); the critics see them rescaled to [-1, 1], the
range of the actor's tanh. Log-probabilities are those of that [-1, 1] action (as Stable-Baselines3's), so the
target entropy does not depend on the env's action bounds. Minibatches, metric averaging and the checkpointed
generator: ``zoo.policies.off_policy``. Subclasses hook in through ``weighted_log_prob`` (the log-prob used in the
three entropy terms) and the base's ``after_update`` (SAC-ACE's resets).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict
from torch import nn

from ..config.schema import Field
from ..errors import ConfigError
from ..rl_utils import HLGauss, tanh_log_det_jacobian
from ..sizes import check_parameter_memory
from .base import ActingGraph, LearnContext
from .continuous_networks import INITS, BoxActions, EnsembleQ, SquashedGaussianActor, check_bounded_box
from .off_policy import ACTOR_CRITIC_FIELDS, OffPolicyPolicy, soft_update
from .optim import FlatOptimizer, flatten_parameters

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class _LogAlpha(nn.Module):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(float(np.log(value))))


class SACPolicy(OffPolicyPolicy):
    """Soft actor-critic for bounded 1-D Box actions.

    Examples:
        >>> from zoo.config.resolve import resolve_config; from zoo.policies import build_policy
        >>> cfg = resolve_config({"policy": {"type": "sac", "hidden_sizes": [16]}})
        >>> policy = build_policy(cfg, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)))
        >>> actions = policy.evaluate(torch.randn(8, 3))  # the tanh mean, scaled into the bounds
        >>> actions.shape, bool((abs(actions) <= 2).all())
        ((8, 1), True)
    """

    compilable: ClassVar[bool] = True
    numpy_acting: ClassVar[bool] = True  # explore_action takes arrays too (zoo.policies.continuous_networks)
    acting_parts: ClassVar[tuple[str, ...]] = ("actor",)
    learning_parts: ClassVar[tuple[str, ...]] = ("critic", "target", "actor_optimizer", "critic_optimizer",
                                                 "alpha_optimizer", "log_alpha")
    fields: ClassVar[dict[str, Field]] = {
        **ACTOR_CRITIC_FIELDS,
        "tau": ACTOR_CRITIC_FIELDS["tau"].but(0.005, "Polyak rate of the target critics"),
        "alpha_learning_rate": Field(3e-4, "Adam learning rate of the temperature", range=(0.0, 10.0)),
        "init_alpha": Field(1.0, "initial entropy temperature", range=(1e-8, 1e6)),
        "auto_alpha": Field(True, "learn the temperature towards target_entropy"),
        "target_entropy": Field(None, "the temperature's entropy target (None: -|A|)", type=float),
        "actor_update_interval": Field(1, "actor and temperature update every N critic updates", range=(1, None)),
        "target_update_interval": Field(1, "target critics update every N critic updates", range=(1, None)),
        "input_activation": Field(None, "activation after the first hidden layer of actor and critics (None: "
                                  "activation; ACE's code: elu)", type=str, frozen=True),
        "init": Field("torch", "initial weights: torch (nn.Linear's default), xavier (Xavier-uniform, zero biases: "
                      "ACE's code) or orthogonal", choices=INITS, frozen=True),
        "log_std_min": Field(-20.0, "lower clamp of the actor's log std", range=(-50.0, 10.0)),
        "log_std_max": Field(2.0, "upper clamp of the actor's log std", range=(-50.0, 10.0)),
        "critic_loss": Field("mse", "mse, or hl_gauss: categorical critics with the HL-Gauss cross-entropy",
                             choices=("mse", "hl_gauss"), frozen=True),
        "hl_gauss_min": Field(None, "lower end of the HL-Gauss support: required with critic_loss='hl_gauss'",
                              type=float),
        "hl_gauss_max": Field(None, "upper end of the HL-Gauss support", type=float),
        "hl_gauss_bins": Field(101, "bins of the HL-Gauss support", range=(2, 100_000), frozen=True),
        "hl_gauss_sigma_ratio": Field(0.75, "HL-Gauss sigma as a multiple of the bin width", range=(1e-6, 100.0)),
    }

    # sac held SAC-ACE's keys before sac_ace declared them alone: older run directories still load and resume
    # (zoo.config.resolve drops them while ACE's parts are off).
    retired_fields: ClassVar[dict[str, Any]] = {
        "causal_weights": False, "dormant_reset": False, **dict.fromkeys((
            "causal_interval", "causal_sample_size", "causal_apply_after", "causal_temperature", "causal_use_abs",
            "reset_interval", "reset_start", "dormant_tau", "reset_factor_min", "reset_factor_max"))}
    retired_hint: ClassVar[str] = "ACE's parts are policy.type=sac_ace's now"

    @classmethod
    def check_spaces(cls, observation_space: gym.Space, action_space: gym.Space) -> None:
        check_bounded_box("SAC", observation_space, action_space)

    def __init__(
        self, cfg: EasyDict, observation_space: gym.Space, action_space: gym.Space, device: torch.device,
        acting_only: bool = False,
    ) -> None:
        super().__init__(cfg, observation_space, action_space, device, acting_only)
        self.check_spaces(observation_space, action_space)
        if cfg.log_std_min >= cfg.log_std_max:
            raise ConfigError(f"policy.log_std_min ({cfg.log_std_min}) must be below log_std_max ({cfg.log_std_max})")
        if cfg.get("input_activation") not in (None, "relu", "tanh", "elu"):
            raise ConfigError(f"policy.input_activation '{cfg.input_activation}' is unknown: use relu, tanh, elu or "
                              f"null (the same as policy.activation)")
        self.obs_dim = int(np.prod(observation_space.shape))
        self.action_dim = int(action_space.shape[0])
        hidden = list(cfg.hidden_sizes)
        out_dim = cfg.hl_gauss_bins if cfg.critic_loss == "hl_gauss" else 1
        check_parameter_memory("policy.hidden_sizes", [self.obs_dim + self.action_dim, *hidden], 4, out_dim,
                               not acting_only)
        self.actions = BoxActions(action_space, self.device)
        self.actor = self._new_actor().to(self.device)
        self.support = self._support(cfg)
        if acting_only:
            return
        self.critic = self._new_critic().to(self.device)
        self.target = self._new_critic().to(self.device)
        self.actor_optimizer = FlatOptimizer(self.actor, "adam", cfg.actor_learning_rate)
        self.critic_optimizer = FlatOptimizer(self.critic, "adam", cfg.critic_learning_rate)
        self.target_flat = flatten_parameters(self.target)
        self.target_flat.copy_(self.critic_optimizer.flat)
        self.target.requires_grad_(False)
        self.alpha_module = _LogAlpha(cfg.init_alpha).to(self.device)
        self.alpha_optimizer = FlatOptimizer(self.alpha_module, "adam", cfg.alpha_learning_rate)
        self.log_alpha = self.alpha_module.log_alpha  # the temperature's state: saved as the bare tensor
        self.target_entropy = -float(self.action_dim) if cfg.target_entropy is None else float(cfg.target_entropy)

    @staticmethod
    def _support(cfg: EasyDict) -> HLGauss | None:
        if cfg.critic_loss != "hl_gauss":
            return None
        if cfg.hl_gauss_min is None or cfg.hl_gauss_max is None or not cfg.hl_gauss_min < cfg.hl_gauss_max:
            raise ConfigError(
                "policy.critic_loss='hl_gauss' needs the value support: set policy.hl_gauss_min < policy.hl_gauss_max "
                "to bound the discounted returns (e.g. -1700 and 0 for Pendulum)"
            )
        return HLGauss(float(cfg.hl_gauss_min), float(cfg.hl_gauss_max), cfg.hl_gauss_bins, cfg.hl_gauss_sigma_ratio)

    def _new_actor(self, init: str | None = None) -> SquashedGaussianActor:
        cfg = self.cfg
        return SquashedGaussianActor(self.obs_dim, self.action_dim, list(cfg.hidden_sizes), cfg.activation,
                                     (cfg.log_std_min, cfg.log_std_max), cfg.get("input_activation"),
                                     init or cfg.get("init", "torch"))

    def _new_critic(self, init: str | None = None) -> EnsembleQ:
        cfg = self.cfg
        out_dim = cfg.hl_gauss_bins if cfg.critic_loss == "hl_gauss" else 1
        return EnsembleQ(self.obs_dim, self.action_dim, list(cfg.hidden_sizes), 2, out_dim, cfg.activation,
                         cfg.get("input_activation"), init or cfg.get("init", "torch"))

    # -- acting -------------------------------------------------------------------------------------------
    def _sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A reparameterised squashed sample: (action in [-1, 1], per-dimension log-prob, weighted log-prob).

        ``tanh_gaussian_log_prob(mu, sigma, u)`` written for ``u = mu + sigma * noise``: ``(u - mu) / sigma`` is
        the noise itself and ``log sigma`` the network's output, which saves a third of the operations (same
        values and gradients; tested against rl_utils).
        """
        mu, log_std = self.actor(obs.flatten(1) if obs.ndim > 2 else obs)
        noise = torch.randn_like(mu)
        pre_tanh = mu + log_std.exp() * noise
        per_dim = (-0.5 * noise.square() - _LOG_SQRT_2PI) - log_std - tanh_log_det_jacobian(pre_tanh)
        return torch.tanh(pre_tanh), per_dim, self.weighted_log_prob(per_dim)

    def weighted_log_prob(self, per_dim: torch.Tensor) -> torch.Tensor:
        """The log-prob of the entropy terms from the per-dimension ones: their sum (SAC-ACE weights them)."""
        return per_dim.sum(-1)

    def explore_action(self, obs: torch.Tensor) -> torch.Tensor:
        """A squashed Gaussian sample, scaled into the action bounds (tensors, or arrays: ``numpy_acting``)."""
        return self.actions.to_env(self.actor.sample(obs.reshape(len(obs), -1) if obs.ndim > 2 else obs))

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        """``tanh`` of the mean, scaled into the action bounds (what ``evaluate`` returns; traceable)."""
        mu, _ = self.actor(obs.flatten(1) if obs.ndim > 2 else obs)
        return self.actions.to_env(torch.tanh(mu))

    def export_module(self) -> torch.nn.Module:
        """The actor alone (the critics do not act)."""
        return ActingGraph(self, {"actor": self.actor})

    # -- learning -----------------------------------------------------------------------------------------
    def q_values(self, obs: torch.Tensor, action: torch.Tensor, target: bool = False,
                 detach_weights: bool = False) -> torch.Tensor:
        """The critics' Q values ``(2, B)`` for [-1, 1]-scaled actions (expectations for HL-Gauss critics)."""
        out = (self.target if target else self.critic)(obs, action, detach_weights)
        return out.squeeze(-1) if self.support is None else self.support.to_scalar(out)

    def cadences(self) -> dict[str, int]:
        return {"actor": self.cfg.actor_update_interval, "target": self.cfg.target_update_interval}

    def update(self, batch: dict[str, torch.Tensor], ctx: LearnContext) -> dict[str, torch.Tensor]:
        """One critic update; actor and temperature every ``actor_update_interval``, targets every
        ``target_update_interval`` critic updates (``self.due``). Sync-free: one graph when compiled."""
        cfg = self.cfg
        obs, next_obs = batch["obs"].flatten(1), batch["next_obs"].flatten(1)
        action = self.actions.to_unit(batch["action"].reshape(len(obs), -1))
        alpha = self.alpha_module.log_alpha.detach().exp()
        with torch.no_grad():
            next_action, _, next_log_prob = self._sample(next_obs)
            next_q = self.q_values(next_obs, next_action, target=True).min(0).values
            # A terminated transition does not bootstrap; a truncated one does, from its final observation.
            not_terminated = 1.0 - batch["terminated"].float()
            target_q = batch["reward"] + cfg.gamma * not_terminated * (next_q - alpha * next_log_prob)
        out = self.critic(obs, action)
        if self.support is None:
            critic_loss = 0.5 * (out.squeeze(-1) - target_q).pow(2).mean(1).sum()
            q_mean = out.detach().mean()
        else:
            critic_loss = self.support.loss(out, target_q.expand(out.shape[0], -1)) * out.shape[0]
            q_mean = self.support.to_scalar(out.detach()).mean()
        metrics = {"critic_loss": self.critic_optimizer.minimize(critic_loss, cfg.max_grad_norm,
                                                                          ctx.sync_gradients), "q_mean": q_mean}
        if self.due["actor"]:
            metrics.update(self._update_actor_and_alpha(obs, alpha, ctx))
        if self.due["target"]:
            soft_update(self.target_flat, self.critic_optimizer.flat, cfg.tau)
        return metrics

    def _update_actor_and_alpha(self, obs: torch.Tensor, alpha: torch.Tensor,
                                ctx: LearnContext) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        action, per_dim, log_prob = self._sample(obs)
        q = self.q_values(obs, action, detach_weights=True).min(0).values
        actor_loss = (alpha * log_prob - q).mean()
        metrics = {"actor_loss": self.actor_optimizer.minimize(actor_loss, cfg.max_grad_norm, ctx.sync_gradients),
                   "entropy": -per_dim.detach().sum(-1).mean()}
        if cfg.auto_alpha:
            # loss(log_alpha) = -log_alpha * mean(log_prob + target_entropy): its gradient, -gap, is written
            # directly, without a backward pass through a graph this small.
            gap = log_prob.detach().mean() + self.target_entropy
            grad = -gap.reshape(1)
            ctx.sync_gradients(grad)
            log_alpha = self.alpha_module.log_alpha.detach()
            metrics["alpha_loss"] = -log_alpha * self.alpha_optimizer.apply_gradient(grad, gap)
        return metrics

    def learn_metrics(self) -> dict[str, torch.Tensor]:
        return {"alpha": self.alpha_module.log_alpha.detach().exp()}
