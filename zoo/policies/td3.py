"""TD3 (Fujimoto, van Hoof and Meger 2018, "Addressing Function Approximation Error in Actor-Critic Methods").

A deterministic actor ``a = tanh(mu(s))`` in [-1, 1] and twin critics ``Q_1, Q_2`` (one batched ``EnsembleQ``), on
the off-policy base (``zoo.policies.off_policy``: the replay holds env actions, rescaled here to [-1, 1]). Every
update, with ``c = noise_clip`` and ``sigma = policy_noise`` in [-1, 1] action units:

1. target policy smoothing: ``a' = clip(tanh(mu_target(s')) + clip(eps, -c, c), -1, 1)``, ``eps ~ N(0, sigma^2)``;
2. clipped double Q: ``y = r + gamma * (1 - terminated) * min(Q_1target(s', a'), Q_2target(s', a'))``; a
   truncated transition bootstraps from its final observation, a terminated one does not;
3. critics: ``sum_i mean (Q_i(s, a) - y)^2``;
4. delayed policy updates: every ``policy_delay`` critic updates, the actor maximises ``Q_1(s, tanh(mu(s)))``,
   then the target actor and target critics move ``tau`` towards the online ones (Polyak).

Exploration: ``clip(tanh(mu(s)) + N(0, exploration_noise^2), -1, 1)`` scaled into the env's bounds (before
``pipeline.learning_starts`` the pipeline acts uniformly at random). Evaluation and ``zoo export``: ``tanh(mu(s))``
scaled. Defaults as Stable-Baselines3's TD3 and CleanRL's td3_continuous_action (learning rate 1e-3 as SB3).
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict

from ..config.schema import Field
from ..sizes import check_parameter_memory
from .base import ActingGraph, LearnContext
from .continuous_networks import BoxActions, DeterministicActor, EnsembleQ, check_bounded_box, clip, normal_like
from .off_policy import ACTOR_CRITIC_FIELDS, OffPolicyPolicy, soft_update
from .optim import FlatOptimizer, flatten_parameters


class TD3Policy(OffPolicyPolicy):
    """Twin Delayed DDPG for bounded 1-D Box actions.

    Examples:
        >>> from zoo.config.resolve import resolve_config; from zoo.policies import build_policy
        >>> cfg = resolve_config({"policy": {"type": "td3", "hidden_sizes": [16]}})
        >>> policy = build_policy(cfg, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(0, 4, (2,)))
        >>> actions = policy.evaluate(torch.randn(8, 3))  # the actor's tanh output, scaled into [0, 4]
        >>> cfg.policy.policy_delay, actions.shape, bool(((actions >= 0) & (actions <= 4)).all())
        (2, (8, 2), True)
    """

    compilable: ClassVar[bool] = True
    numpy_acting: ClassVar[bool] = True  # explore_action takes arrays too (zoo.policies.continuous_networks)
    acting_parts: ClassVar[tuple[str, ...]] = ("actor",)
    learning_parts: ClassVar[tuple[str, ...]] = ("critic", "actor_target", "critic_target", "actor_optimizer",
                                                 "critic_optimizer")
    fields: ClassVar[dict[str, Field]] = {
        **ACTOR_CRITIC_FIELDS,
        "actor_learning_rate": ACTOR_CRITIC_FIELDS["actor_learning_rate"].but(1e-3),
        "critic_learning_rate": ACTOR_CRITIC_FIELDS["critic_learning_rate"].but(1e-3),
        "tau": ACTOR_CRITIC_FIELDS["tau"].but(0.005, "Polyak rate of the target actor and critics"),
        "policy_delay": Field(2, "actor and target updates every N critic updates", range=(1, None)),
        "policy_noise": Field(0.2, "std of the target policy smoothing noise, in [-1, 1] action units",
                              range=(0.0, None)),
        "noise_clip": Field(0.5, "the smoothing noise is clipped to [-noise_clip, noise_clip]", range=(0.0, None)),
        "exploration_noise": Field(0.1, "std of the Gaussian exploration noise, in [-1, 1] action units",
                                   range=(0.0, None)),
    }

    @classmethod
    def check_spaces(cls, observation_space: gym.Space, action_space: gym.Space) -> None:
        check_bounded_box("TD3", observation_space, action_space)

    def __init__(
        self, cfg: EasyDict, observation_space: gym.Space, action_space: gym.Space, device: torch.device,
        acting_only: bool = False,
    ) -> None:
        super().__init__(cfg, observation_space, action_space, device, acting_only)
        self.check_spaces(observation_space, action_space)
        self.obs_dim = int(np.prod(observation_space.shape))
        self.action_dim = int(action_space.shape[0])
        hidden = list(cfg.hidden_sizes)
        check_parameter_memory("policy.hidden_sizes", [self.obs_dim + self.action_dim, *hidden], 4, 1,
                               not acting_only)
        self.actions = BoxActions(action_space, self.device)
        self.actor = DeterministicActor(self.obs_dim, self.action_dim, hidden, cfg.activation).to(self.device)
        if acting_only:
            return
        self.critic = EnsembleQ(self.obs_dim, self.action_dim, hidden, 2, 1, cfg.activation).to(self.device)
        self.actor_target = DeterministicActor(self.obs_dim, self.action_dim, hidden, cfg.activation).to(self.device)
        self.critic_target = EnsembleQ(self.obs_dim, self.action_dim, hidden, 2, 1, cfg.activation).to(self.device)
        self.actor_optimizer = FlatOptimizer(self.actor, "adam", cfg.actor_learning_rate)
        self.critic_optimizer = FlatOptimizer(self.critic, "adam", cfg.critic_learning_rate)
        # The targets start as copies; as flat buffers one Polyak step is one operation per network.
        self.actor_target_flat = flatten_parameters(self.actor_target)
        self.critic_target_flat = flatten_parameters(self.critic_target)
        self.actor_target_flat.copy_(self.actor_optimizer.flat)
        self.critic_target_flat.copy_(self.critic_optimizer.flat)
        self.actor_target.requires_grad_(False)
        self.critic_target.requires_grad_(False)

    # -- acting -------------------------------------------------------------------------------------------
    def _flat_obs(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.reshape(len(obs), -1) if obs.ndim > 2 else obs

    def explore_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's action plus Gaussian noise, clipped to [-1, 1], scaled into the action bounds (tensors, or
        arrays: ``numpy_acting``)."""
        action = self.actor(self._flat_obs(obs))
        return self.actions.to_env(clip(action + self.cfg.exploration_noise * normal_like(action), -1.0, 1.0))

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's action scaled into the bounds (what ``evaluate`` returns; traceable)."""
        return self.actions.to_env(self.actor(self._flat_obs(obs)))

    def export_module(self) -> torch.nn.Module:
        """The actor alone (the critics do not act)."""
        return ActingGraph(self, {"actor": self.actor})

    # -- learning -----------------------------------------------------------------------------------------
    def smoothed_target_action(self, next_obs: torch.Tensor) -> torch.Tensor:
        """Target policy smoothing: the target actor's action plus clipped Gaussian noise, clipped to [-1, 1]."""
        cfg = self.cfg
        action = self.actor_target(next_obs)
        noise = (cfg.policy_noise * torch.randn_like(action)).clamp(-cfg.noise_clip, cfg.noise_clip)
        return (action + noise).clamp(-1.0, 1.0)

    @torch.no_grad()
    def td_target(self, reward: torch.Tensor, next_obs: torch.Tensor, terminated: torch.Tensor) -> torch.Tensor:
        """``r + gamma * (1 - terminated) * min_i Q_i,target(s', smoothed a')`` for a batch ``(B,)``."""
        next_q = self.critic_target(next_obs, self.smoothed_target_action(next_obs)).squeeze(-1).min(0).values
        # A terminated transition does not bootstrap; a truncated one does, from its final observation.
        return reward + self.cfg.gamma * (1.0 - terminated.float()) * next_q

    def cadences(self) -> dict[str, int]:
        return {"actor": self.cfg.policy_delay}

    def update(self, batch: dict[str, torch.Tensor], ctx: LearnContext) -> dict[str, torch.Tensor]:
        """One critic update; every ``policy_delay``-th (``self.due["actor"]``) also the actor and the targets.
        Sync-free: one graph when compiled."""
        cfg = self.cfg
        obs, next_obs = batch["obs"].flatten(1), batch["next_obs"].flatten(1)
        action = self.actions.to_unit(batch["action"].reshape(len(obs), -1))
        target_q = self.td_target(batch["reward"], next_obs, batch["terminated"])
        q = self.critic(obs, action).squeeze(-1)
        critic_loss = (q - target_q).pow(2).mean(1).sum()
        metrics = {"critic_loss": self.critic_optimizer.minimize(critic_loss, cfg.max_grad_norm, ctx.sync_gradients),
                   "q_mean": q.detach().mean()}
        if self.due["actor"]:
            # Q_1 alone, its weights held fixed: the actor's gradient flows through the action only.
            actor_loss = -self.critic(obs, self.actor(obs), detach_weights=True)[0].mean()
            metrics["actor_loss"] = self.actor_optimizer.minimize(actor_loss, cfg.max_grad_norm, ctx.sync_gradients)
            soft_update(self.actor_target_flat, self.actor_optimizer.flat, cfg.tau)
            soft_update(self.critic_target_flat, self.critic_optimizer.flat, cfg.tau)
        return metrics
