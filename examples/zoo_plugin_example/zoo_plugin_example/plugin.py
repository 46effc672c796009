"""A complete zoo plugin: one policy class and the hook that registers it.

``ReinforceBaselinePolicy`` is REINFORCE with a learned value baseline: Monte-Carlo advantages (GAE with
lambda = 1), normalised and clipped, fed to rl_utils' A2C loss. Everything else (networks, sampling,
evaluation, optimiser, checkpoint state) is inherited from ``OnPolicyActorCritic``, and the built-in
``serial_onpolicy`` pipeline drives it, filling ``batch.advantage`` and ``batch.returns`` before ``learn``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from zoo.hookspecs import hookimpl
from zoo.policies.actor_critic import OnPolicyActorCritic
from zoo.policies.base import Rollout, normalize_advantage
from zoo.rl_utils import a2c_data, a2c_error, a2c_error_continuous


class ReinforceBaselinePolicy(OnPolicyActorCritic):
    """REINFORCE with a value baseline, for Discrete and Box action spaces."""

    # Every key a config's `policy` section may set, with its default; unknown keys are rejected.
    default_config: ClassVar[dict[str, Any]] = {
        **OnPolicyActorCritic.common_config,
        "learning_rate": 1e-3,
        "gae_lambda": 1.0,  # Monte-Carlo returns: plain REINFORCE with a baseline
        "normalize_advantage": True,
        "advantage_clip": 3.0,  # clip normalised advantages to [-c, c]; 0 disables
    }
    # Checked before a run starts, like the built-ins' ranges.
    config_ranges: ClassVar[dict[str, tuple[float | None, float | None]]] = {
        **OnPolicyActorCritic.config_ranges,
        "advantage_clip": (0.0, None),
    }

    def learn(self, batch: Rollout, progress: float) -> dict[str, float]:
        cfg = self.cfg
        samples = batch.valid_samples()  # autoreset steps dropped: their action was ignored by the env
        obs, action, returns = samples.obs, samples.action, samples.returns
        advantage = normalize_advantage(samples.advantage) if cfg.normalize_advantage else samples.advantage
        if cfg.advantage_clip > 0:
            advantage = advantage.clamp(-cfg.advantage_clip, cfg.advantage_clip)
        lr = self._set_learning_rate(progress)
        output, value = self.model(obs)
        data = a2c_data(output, action, value, advantage, returns, None)
        loss = a2c_error(data) if self.discrete else a2c_error_continuous(data)
        total = loss.policy_loss + cfg.value_coef * loss.value_loss - cfg.entropy_coef * loss.entropy_loss
        grad_norm = self._step(total)
        return {
            "policy_loss": loss.policy_loss.item(),
            "value_loss": loss.value_loss.item(),
            "entropy": loss.entropy_loss.item(),
            "grad_norm": grad_norm,
            "learning_rate": lr,
        }


@hookimpl
def register_policies(register):
    """Called once per process by zoo.plugins.load_plugins; the name is what `policy.type` refers to."""
    register("reinforce_baseline", ReinforceBaselinePolicy)
