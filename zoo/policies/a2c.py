"""A2C (Mnih et al. 2016, synchronous): one gradient step per rollout on rl_utils' a2c_error."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ..config.schema import Field
from ..data import Rollout
from ..rl_utils import a2c_data, a2c_error, a2c_error_continuous, a2c_error_multi_discrete
from .actor_critic import ActorCriticPolicy, normalize_advantage
from .base import LearnContext
from .onpolicy_compile import ONPOLICY_COMPILE_FIELD, CompiledLearning, mean_rows

METRICS = ("policy_loss", "value_loss", "entropy", "grad_norm")


class A2CPolicy(CompiledLearning, ActorCriticPolicy):
    """Advantage actor-critic for Discrete, MultiDiscrete, MultiBinary and Box action spaces."""

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

    def losses(self, obs: torch.Tensor, action: torch.Tensor, advantage: torch.Tensor,
               returns: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """The maths of one update, in order: the forward pass and rl_utils' A2C loss on (already normalised)
        advantages; returns the total to minimise and the ``a2c_loss``."""
        cfg = self.cfg
        output, value = self.model(obs)
        if self.nvec is not None:
            loss = a2c_error_multi_discrete(a2c_data(self.unpack_policy_output(output), action, value, advantage,
                                                     returns, None))
        else:
            data = a2c_data(output, action, value, advantage, returns, None)
            loss = a2c_error(data) if self.discrete else a2c_error_continuous(data)
        total = loss.policy_loss + cfg.value_coef * loss.value_loss - cfg.entropy_coef * loss.entropy_loss
        return total, loss

    def learning_step(self, obs: torch.Tensor, action: torch.Tensor, advantage: torch.Tensor,
                      returns: torch.Tensor) -> torch.Tensor:
        """One update with no host sync (what ``policy.compile`` compiles): advantages normalised where configured,
        ``losses``, ``FlatOptimizer.minimize``; returns the metrics row (``METRICS``, then the loss, NaN if the
        step was skipped)."""
        if self.cfg.normalize_advantage:
            advantage = normalize_advantage(advantage)
        total, loss = self.losses(obs, action, advantage, returns)
        done = self.optimizer.minimize(total, self.cfg.max_grad_norm)
        return torch.stack([loss.policy_loss.detach(), loss.value_loss.detach(), loss.entropy_loss.detach(),
                            self.optimizer.grad_norm.clone(), done])

    def learn(self, batch: Rollout, ctx: LearnContext) -> dict[str, float]:
        cfg = self.cfg
        samples = batch.valid_samples()  # autoreset steps dropped: their action was ignored by the env
        obs, action, returns = samples.obs, samples.action, samples.returns
        lr = self.update_learning_rate(ctx)
        if self.compiling(ctx) and obs.shape[0] > 0:  # compiled for whole rollouts (no autoreset step dropped)
            row = self.run_update(obs.shape[0] == self.planned_samples, obs, action, samples.advantage, returns)
            return {**mean_rows([row], METRICS), "learning_rate": lr}
        advantage = normalize_advantage(samples.advantage, ctx) if cfg.normalize_advantage else samples.advantage
        if ctx.min(obs.shape[0]) == 0:  # only autoreset steps (possible with tiny rollouts): nothing to learn from
            return {"learning_rate": lr}
        total, loss = self.losses(obs, action, advantage, returns)
        grad_norm = self.optimizer_step(total, ctx)
        return {
            "policy_loss": loss.policy_loss.item(),
            "value_loss": loss.value_loss.item(),
            "entropy": loss.entropy_loss.item(),
            "grad_norm": grad_norm,
            "learning_rate": lr,
        }
