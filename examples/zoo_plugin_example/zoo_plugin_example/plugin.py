"""A complete zoo plugin: one policy class and the hook that registers it, plus a callback, using zoo's public
names only.

``ReinforceBaselinePolicy`` is REINFORCE with a learned value baseline: Monte-Carlo advantages (GAE with
lambda = 1, computed by the inherited ``process_rollout``), normalised and clipped, fed to rl_utils' A2C loss.
Networks, sampling, evaluation, the optimiser, the minibatch driver and checkpoint state come from
``ActorCriticPolicy``; the built-in ``serial_onpolicy`` pipeline drives it, ``parallel_sync`` runs it on several
workers unchanged, and ``policy.recurrent: lstm`` gives it memory (its update reads the model through
``forward_batch``).

``on_run_end`` shows the callback hooks (``zoo.hookspecs``: ``on_metrics_row``, ``on_evaluation``,
``should_stop``, ``on_run_end``): a logger for W&B or MLflow would send each row from ``on_metrics_row``; this
one writes a one-line summary of every run into its run directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import torch

from zoo.config.schema import Field
from zoo.hookspecs import hookimpl
from zoo.policies import ActorCriticPolicy, LearnContext
from zoo.rl_utils import a2c_data, a2c_error, a2c_error_continuous


class ReinforceBaselinePolicy(ActorCriticPolicy):
    """REINFORCE with a value baseline, for Discrete and Box action spaces."""

    # Every key a config's `policy` section may set, declared once: default, meaning, range (checked before a run
    # starts) and whether --resume may change it; unknown keys are rejected. `zoo config reinforce_baseline` shows them.
    fields: ClassVar[dict[str, Field]] = {
        **ActorCriticPolicy.fields,
        "learning_rate": ActorCriticPolicy.fields["learning_rate"].but(1e-3),
        "gae_lambda": ActorCriticPolicy.fields["gae_lambda"].but(1.0, "Monte-Carlo returns: REINFORCE with a baseline"),
        "advantage_clip": Field(3.0, "clip normalised advantages to [-c, c]; 0 disables", range=(0.0, None)),
    }

    # The loss reads no behaviour log-probabilities: process_rollout need not compute them.
    needs_log_prob: ClassVar[bool] = False

    def update(self, batch: dict[str, Any], ctx: LearnContext) -> dict[str, torch.Tensor]:
        """One gradient update on the rollout (the base's ``learn``: advantages arrive normalised where
        ``normalize_advantage``, over every worker's samples on ``parallel_sync``)."""
        advantage = batch["advantage"]
        if self.cfg.advantage_clip > 0:
            advantage = advantage.clamp(-self.cfg.advantage_clip, self.cfg.advantage_clip)
        output, value = self.forward_batch(batch)  # the model on the samples (policy.recurrent: chunks and memory)
        data = a2c_data(output, batch["action"], value, advantage, batch["returns"], None)
        loss = a2c_error(data) if self.discrete else a2c_error_continuous(data)
        total = loss.policy_loss + self.cfg.value_coef * loss.value_loss - self.cfg.entropy_coef * loss.entropy_loss
        done = self.optimizer.minimize(total, self.cfg.max_grad_norm, ctx.sync_gradients)
        return {"policy_loss": loss.policy_loss.detach(), "value_loss": loss.value_loss.detach(),
                "grad_norm": self.optimizer.grad_norm.clone(), "loss": done}


@hookimpl
def register_policies(register):
    """Called once per process by zoo.plugins.load_plugins; the name is what `policy.type` refers to."""
    register("reinforce_baseline", ReinforceBaselinePolicy)


@hookimpl
def on_run_end(summary, run_dir, cfg):
    """Called once when any run ends (in the process that writes its run directory)."""
    if run_dir is not None:
        line = {"policy": cfg["policy"]["type"], "reason": summary["reason"], "env_steps": summary["env_steps"]}
        (Path(run_dir) / "example_plugin_summary.json").write_text(json.dumps(line) + "\n")

