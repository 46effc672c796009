"""A2C (Mnih et al. 2016, synchronous): one gradient step per rollout on rl_utils' a2c_error."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ..config.schema import Field
from ..rl_utils import a2c_data, a2c_error, a2c_error_continuous, a2c_error_multi_discrete
from .actor_critic import ActorCriticPolicy
from .base import LearnContext
from .onpolicy import ONPOLICY_COMPILE_FIELD


class A2CPolicy(ActorCriticPolicy):
    """Advantage actor-critic for Discrete, MultiDiscrete, MultiBinary and Box action spaces.

    Examples:
        >>> import gymnasium as gym; from zoo.policies import build_policy
        >>> from zoo.config.resolve import resolve_config
        >>> cfg = resolve_config({"policy": {"type": "a2c", "hidden_sizes": [16]}})
        >>> policy = build_policy(cfg, gym.spaces.Box(-1, 1, (4,)), gym.spaces.MultiDiscrete([3, 2]))
        >>> cfg.policy.optimizer, cfg.policy.gae_lambda, policy.evaluate(torch.zeros(5, 4)).shape  # classic A2C
        ('rmsprop', 1.0, (5, 2))
    """

    multi_discrete_actions: ClassVar[bool] = True
    needs_log_prob: ClassVar[bool] = False  # the loss is -log pi(a|s) * A under the current weights only
    compilable: ClassVar[bool] = True
    # auto keeps A2C eager: its one small update per rollout gained too little for the compile (a2c_pendulum at 1M
    # steps, docs/speed.md); policy.compile=on compiles it.
    compile_auto_min_updates: ClassVar[int | None] = None

    fields: ClassVar[dict[str, Field]] = {
        **ActorCriticPolicy.fields,
        "optimizer": ActorCriticPolicy.fields["optimizer"].but("rmsprop", "the flat optimiser (RMSprop as in A2C)"),
        "learning_rate": ActorCriticPolicy.fields["learning_rate"].but(7e-4),
        "gae_lambda": ActorCriticPolicy.fields["gae_lambda"].but(1.0, "GAE lambda (1: n-step returns)"),
        "normalize_advantage": ActorCriticPolicy.fields["normalize_advantage"].but(
            False, "zero-mean unit-std advantages (off in classic A2C)"),
        "compile": ONPOLICY_COMPILE_FIELD,
    }

    def update(self, batch: dict[str, Any], ctx: LearnContext) -> dict[str, torch.Tensor]:
        """The rollout's one update, in order: the forward pass, rl_utils' A2C loss (on advantages normalised where
        configured), the optimiser step."""
        cfg = self.cfg
        output, value = self.forward_batch(batch)
        action, advantage, returns = batch["action"], batch["advantage"], batch["returns"]
        if self.nvec is not None:
            loss = a2c_error_multi_discrete(a2c_data(self.unpack_policy_output(output), action, value, advantage,
                                                     returns, None))
        else:
            data = a2c_data(output, action, value, advantage, returns, None)
            loss = a2c_error(data) if self.discrete else a2c_error_continuous(data)
        total = loss.policy_loss + cfg.value_coef * loss.value_loss - cfg.entropy_coef * loss.entropy_loss
        done = self.optimizer.minimize(total, cfg.max_grad_norm, ctx.sync_gradients)
        return {"policy_loss": loss.policy_loss.detach(), "value_loss": loss.value_loss.detach(),
                "entropy": loss.entropy_loss.detach(), "grad_norm": self.optimizer.grad_norm.clone(), "loss": done}
