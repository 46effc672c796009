"""PPO (Schulman et al. 2017): clipped surrogate, optional value clip and dual clip, minibatch epochs."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from ..config.schema import Field
from ..rl_utils import ppo_data
from ..rl_utils.ppo import _ppo_terms
from .actor_critic import ActorCriticPolicy
from .base import LearnContext
from .onpolicy import ONPOLICY_COMPILE_FIELD


class PPOPolicy(ActorCriticPolicy):
    """Proximal Policy Optimization for Discrete, MultiDiscrete, MultiBinary and Box action spaces.

    Runs serially (``serial_onpolicy``) and, unchanged, on data-parallel pipelines: the number of minibatches
    and the target-KL early stop are decided through ``ctx`` so that every learner takes the same steps.

    Examples:
        >>> class WideClipPPO(PPOPolicy):  # a subclass re-defaults a key; PPO's other keys come with it
        ...     fields = {"clip_ratio": PPOPolicy.fields["clip_ratio"].but(0.3)}
        >>> PPOPolicy.default_config["clip_ratio"], WideClipPPO.default_config["clip_ratio"]
        (0.2, 0.3)
        >>> WideClipPPO.default_config.keys() == PPOPolicy.default_config.keys()
        True
    """

    multi_discrete_actions: ClassVar[bool] = True
    compilable: ClassVar[bool] = True
    # auto compiles runs planning this many minibatch updates: whole ppo_hopper runs measured faster compiled, from an
    # empty inductor cache too (docs/speed.md); shorter runs are not measured to gain, and stay eager.
    compile_auto_min_updates: ClassVar[int | None] = 30_000
    fields: ClassVar[dict[str, Field]] = {
        **ActorCriticPolicy.fields,
        "clip_ratio": Field(0.2, "PPO's clip range epsilon", range=(0.0, 1.0)),
        "anneal_clip": Field(False, "decay clip_ratio linearly to 0 over the budget"),
        "value_clip": Field(False, "clip value updates to clip_ratio around the old values"),
        "dual_clip": Field(None, "dual-clip constant c > 1 (None: off)", type=float, range=(1.0, None)),
        "epochs": Field(10, "passes over each rollout", range=(1, 10_000)),
        "minibatch_size": Field(64, "samples per gradient step", range=(1, None)),
        "target_kl": Field(None, "stop the epochs when the approximate KL exceeds 1.5x this (None: off)", type=float,
                           range=(0.0, None)),
        "compile": ONPOLICY_COMPILE_FIELD,
    }

    def update(self, batch: dict[str, Any], ctx: LearnContext) -> dict[str, torch.Tensor]:
        """One minibatch update, in order: the forward pass, rl_utils' clipped PPO loss (the advantages arrive
        normalised where configured; ``clip`` is the scheduled clip range), the optimiser step."""
        cfg = self.cfg
        output, value_new = self.forward_batch(batch)
        old = self.unpack_policy_output(batch["policy_output"])
        if self.nvec is not None:  # one joint ratio over the K components
            output = self.unpack_policy_output(output)
        kind = "multi_discrete" if self.nvec is not None else "discrete" if self.discrete else "continuous"
        data = ppo_data(output, old, batch["action"], value_new, batch["value"], batch["advantage"],
                        batch["returns"], None)
        loss, info = _ppo_terms(data, batch["clip"], cfg.value_clip, cfg.dual_clip, kind)
        total = loss.policy_loss + cfg.value_coef * loss.value_loss - cfg.entropy_coef * loss.entropy_loss
        return {"policy_loss": loss.policy_loss.detach(), "value_loss": loss.value_loss.detach(),
                "entropy": loss.entropy_loss.detach(), "approx_kl": info.approx_kl, "clipfrac": info.clipfrac,
                "loss": self.optimizer.minimize(total, cfg.max_grad_norm, ctx.sync_gradients)}

    def schedule(self, ctx: LearnContext) -> dict[str, float]:
        """The clip range at ``ctx.progress`` (annealed linearly to 0 where ``anneal_clip``; at least 1e-8)."""
        cfg = self.cfg
        return {"clip": max(cfg.clip_ratio * (1.0 - ctx.progress if cfg.anneal_clip else 1.0), 1e-8)}

    def minibatches(self, count: int, ctx: LearnContext) -> list[torch.Tensor | None]:
        """``epochs`` passes over the samples (a recurrent policy's chunks) in shuffled minibatches of
        ``minibatch_units()``, every epoch's drawn first; every learner runs the same number (data-parallel learners
        may hold different counts)."""
        cfg = self.cfg
        size = self.minibatch_units()
        minibatches = ctx.min(math.ceil(count / size))
        if minibatches == 0:
            return []
        epochs = []
        for _ in range(cfg.epochs):
            order = torch.randperm(count, device=self.device)
            if minibatches * size >= count:
                epochs.extend(order.split(size))
            else:
                epochs.extend(order.tensor_split(minibatches))
        return epochs

    def stop_updates(self, metrics: torch.Tensor, names: tuple[str, ...], ctx: LearnContext) -> bool:
        """The target-KL early stop: the approximate KL, averaged over the learners, above 1.5x ``target_kl``."""
        target = self.cfg.target_kl
        return target is not None and ctx.mean(float(metrics[names.index("approx_kl")])) > 1.5 * target

    def learn_metrics(self, updates: int) -> dict[str, float]:
        return {"updates": float(updates)}

    def planned_updates(self, calls: int, samples: int) -> int:
        """``epochs`` passes of ``ceil(samples / minibatch_size)`` minibatch updates per learn call (a recurrent
        learner's: of its chunks in minibatches of ``minibatch_units()``)."""
        return calls * self.cfg.epochs * math.ceil(self.learning_rows(samples) / self.minibatch_units())
