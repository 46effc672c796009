"""PPO (Schulman et al. 2017): clipped surrogate, optional value clip and dual clip, minibatch epochs."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from ..config.schema import Field
from ..data import Rollout
from ..rl_utils import ppo_data
from ..rl_utils.ppo import _ppo_terms
from .actor_critic import ActorCriticPolicy, advantage_moments, normalize_advantage, normalize_with
from .base import LearnContext
from .onpolicy_compile import ONPOLICY_COMPILE_FIELD, CompiledLearning, mean_rows, pad_rows

METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")


class PPOPolicy(CompiledLearning, ActorCriticPolicy):
    """Proximal Policy Optimization for Discrete, MultiDiscrete, MultiBinary and Box action spaces.

    Runs serially (``serial_onpolicy``) and, unchanged, on data-parallel pipelines: the number of minibatches
    and the target-KL early stop are decided through ``ctx`` so that every learner takes the same steps.
    """

    multi_discrete_actions: ClassVar[bool] = True
    compilable: ClassVar[bool] = True
    # A 200k-step ppo_hopper run (31,360 minibatch updates) ran 1.11x faster compiled from an empty inductor cache,
    # 1.46x with a warm one (docs/speed.md); shorter runs are not measured to gain: auto leaves them eager.
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

    def planned_updates(self, calls: int, samples: int) -> int:
        """``epochs`` passes of ``ceil(samples / minibatch_size)`` minibatch updates per learn call."""
        return calls * self.cfg.epochs * math.ceil(samples / self.cfg.minibatch_size)

    def minibatch_losses(self, columns: tuple[torch.Tensor, ...], index: torch.Tensor, clip: float | torch.Tensor,
                         moments: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, Any, Any]:
        """The maths of one minibatch, in order: the rows ``index`` of the rollout's columns (obs, action, behaviour
        output, old value, advantage, return), the advantages normalised (over every learner's minibatch where
        ``moments`` are given), the forward pass and rl_utils' clipped PPO loss. Returns the total to minimise, the
        ``ppo_loss`` and the ``ppo_info`` (0-dim tensors: no host sync here)."""
        cfg = self.cfg
        obs, action, behaviour, value_old, advantage, returns = (column[index] for column in columns)
        if moments is not None:
            advantage = normalize_with(advantage, moments)
        elif cfg.normalize_advantage:
            advantage = normalize_advantage(advantage)
        output, value_new = self.model(obs)
        old = self.unpack_policy_output(behaviour)
        if self.nvec is not None:  # one joint ratio over the K components
            output = self.unpack_policy_output(output)
        kind = "multi_discrete" if self.nvec is not None else "discrete" if self.discrete else "continuous"
        data = ppo_data(output, old, action, value_new, value_old, advantage, returns, None)
        loss, info = _ppo_terms(data, clip, cfg.value_clip, cfg.dual_clip, kind)
        total = loss.policy_loss + cfg.value_coef * loss.value_loss - cfg.entropy_coef * loss.entropy_loss
        return total, loss, info

    def learning_step(self, columns: tuple[torch.Tensor, ...], index: torch.Tensor,
                      clip: float | torch.Tensor) -> torch.Tensor:
        """One minibatch update with no host sync (what ``policy.compile`` compiles): ``minibatch_losses`` and
        ``FlatOptimizer.minimize``; returns the metrics row (``METRICS``, then the loss, NaN if the step was
        skipped)."""
        total, loss, info = self.minibatch_losses(columns, index, clip)
        done = self.optimizer.minimize(total, self.cfg.max_grad_norm)
        return torch.stack([loss.policy_loss.detach(), loss.value_loss.detach(), loss.entropy_loss.detach(),
                            info.approx_kl, info.clipfrac, done])

    def learn(self, batch: Rollout, ctx: LearnContext) -> dict[str, float]:
        cfg = self.cfg
        samples = batch.valid_samples()  # autoreset steps dropped: their action was ignored by the env
        columns = (samples.obs, samples.action, samples.policy_output, samples.value, samples.advantage,
                   samples.returns)
        lr = self.update_learning_rate(ctx)
        clip = cfg.clip_ratio * (1.0 - ctx.progress if cfg.anneal_clip else 1.0)
        clip = max(clip, 1e-8)
        count = samples.obs.shape[0]
        # Every learner runs the same number of minibatches (data-parallel learners may hold different counts).
        minibatches = ctx.min(math.ceil(count / cfg.minibatch_size))
        if minibatches == 0:  # only autoreset steps (possible with tiny rollouts): nothing to learn from
            return {"learning_rate": lr, "updates": 0.0}
        epochs = []
        for _ in range(cfg.epochs):  # every epoch's minibatches drawn first (nothing else draws in between)
            order = torch.randperm(count, device=samples.obs.device)
            if minibatches * cfg.minibatch_size >= count:
                epochs.append(order.split(cfg.minibatch_size))
            else:
                epochs.append(order.tensor_split(minibatches))
        shared = None  # data-parallel learners: every minibatch's advantage moments over all learners, at once
        if cfg.normalize_advantage and ctx.world_size > 1:
            shared = iter(advantage_moments(samples.advantage, [index for chunks in epochs for index in chunks], ctx))
        compiling = self.compiling(ctx) and shared is None  # the sync-free update (zoo.policies.onpolicy_compile)
        if compiling:  # the compiled graph's inputs: one shape in every call, and an annealed clip as a tensor
            columns = tuple(pad_rows(column, self.planned_samples) for column in columns)
        step_clip = torch.tensor(clip, device=samples.obs.device) if compiling and cfg.anneal_clip else clip
        rows, stop = [], False
        for chunks in epochs:
            for index in chunks:
                if compiling:
                    row = self.run_update(len(index) == cfg.minibatch_size, columns, index, step_clip)
                else:
                    total, loss, info = self.minibatch_losses(columns, index, clip,
                                                              None if shared is None else next(shared))
                    self.optimizer_step(total, ctx)
                    row = torch.stack([loss.policy_loss, loss.value_loss, loss.entropy_loss, info.approx_kl,
                                       info.clipfrac, total]).detach()
                rows.append(row)
                if cfg.target_kl is not None and ctx.mean(float(row[3])) > 1.5 * cfg.target_kl:
                    stop = True
                    break
            if stop:
                break
        metrics = mean_rows(rows, METRICS)
        metrics.update(learning_rate=lr, updates=float(len(rows)))
        return metrics
