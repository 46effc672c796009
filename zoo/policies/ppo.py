"""PPO (Schulman et al. 2017): clipped surrogate, optional value clip and dual clip, minibatch epochs."""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from ..config.schema import Field
from ..data import Rollout
from ..rl_utils import ppo_data, ppo_data_continuous, ppo_error, ppo_error_continuous, ppo_error_multi_discrete
from .actor_critic import ActorCriticPolicy, advantage_moments, normalize_advantage, normalize_with
from .base import LearnContext


class PPOPolicy(ActorCriticPolicy):
    """Proximal Policy Optimization for Discrete, MultiDiscrete, MultiBinary and Box action spaces.

    Runs serially (``serial_onpolicy``) and, unchanged, on data-parallel pipelines: the number of minibatches
    and the target-KL early stop are decided through ``ctx`` so that every learner takes the same steps.
    """

    multi_discrete_actions: ClassVar[bool] = True
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
    }

    def learn(self, batch: Rollout, ctx: LearnContext) -> dict[str, float]:
        cfg = self.cfg
        samples = batch.valid_samples()  # autoreset steps dropped: their action was ignored by the env
        obs, action, behaviour = samples.obs, samples.action, samples.policy_output
        value_old, advantage, returns = samples.value, samples.advantage, samples.returns
        lr = self.update_learning_rate(ctx)
        clip = cfg.clip_ratio * (1.0 - ctx.progress if cfg.anneal_clip else 1.0)
        clip = max(clip, 1e-8)
        count = obs.shape[0]
        # Every learner runs the same number of minibatches (data-parallel learners may hold different counts).
        minibatches = ctx.min(math.ceil(count / cfg.minibatch_size))
        if minibatches == 0:  # only autoreset steps (possible with tiny rollouts): nothing to learn from
            return {"learning_rate": lr, "updates": 0.0}
        totals = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0, "clipfrac": 0.0}
        epochs = []
        for _ in range(cfg.epochs):  # every epoch's minibatches drawn first (nothing else draws in between)
            order = torch.randperm(count, device=obs.device)
            if minibatches * cfg.minibatch_size >= count:
                epochs.append(order.split(cfg.minibatch_size))
            else:
                epochs.append(order.tensor_split(minibatches))
        shared = None  # data-parallel learners: every minibatch's advantage moments over all learners, at once
        if cfg.normalize_advantage and ctx.world_size > 1:
            shared = iter(advantage_moments(advantage, [index for chunks in epochs for index in chunks], ctx))
        updates, stop = 0, False
        for chunks in epochs:
            for index in chunks:
                adv = advantage[index]
                if shared is not None:
                    adv = normalize_with(adv, next(shared))
                elif cfg.normalize_advantage:
                    adv = normalize_advantage(adv)
                output, value_new = self.model(obs[index])
                old = self.unpack_policy_output(behaviour[index])
                if self.nvec is not None:  # one joint ratio over the K components
                    output = self.unpack_policy_output(output)
                    data = ppo_data(output, old, action[index], value_new, value_old[index], adv, returns[index], None)
                    loss, info = ppo_error_multi_discrete(data, clip, cfg.value_clip, cfg.dual_clip)
                elif self.discrete:
                    data = ppo_data(output, old, action[index], value_new, value_old[index], adv, returns[index], None)
                    loss, info = ppo_error(data, clip, cfg.value_clip, cfg.dual_clip)
                else:
                    data = ppo_data_continuous(
                        output, old, action[index], value_new, value_old[index], adv, returns[index], None
                    )
                    loss, info = ppo_error_continuous(data, clip, cfg.value_clip, cfg.dual_clip)
                total = loss.policy_loss + cfg.value_coef * loss.value_loss - cfg.entropy_coef * loss.entropy_loss
                self.optimizer_step(total, ctx)
                updates += 1
                totals["policy_loss"] += loss.policy_loss.item()
                totals["value_loss"] += loss.value_loss.item()
                totals["entropy"] += loss.entropy_loss.item()
                totals["approx_kl"] += info.approx_kl
                totals["clipfrac"] += info.clipfrac
                if cfg.target_kl is not None and ctx.mean(info.approx_kl) > 1.5 * cfg.target_kl:
                    stop = True
                    break
            if stop:
                break
        metrics = {key: value / max(updates, 1) for key, value in totals.items()}
        metrics.update(learning_rate=lr, updates=float(updates))
        return metrics
