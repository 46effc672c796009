"""Generalised state-dependent exploration (gSDE; Raffin, Kober and Stulp 2022) for Gaussian actor-critics.

Instead of independent noise at every step, the exploration noise is a linear function of the policy's latent
features ``z(s)`` (the actor trunk's last hidden layer, detached):

    a = mu(s) + z(s) @ E,    E[i, j] ~ N(0, sigma[i, j]^2),    sigma = exp(log_std)   (latent_dim x action_dim)

with ``E`` held fixed for ``sde_sample_freq`` steps (-1: a whole rollout) and one ``E`` per sub-env, so that a
sub-env explores smoothly along its trajectory. Given ``s``, ``a`` is Gaussian with mean ``mu(s)`` and per-dimension
variance ``sum_i z_i(s)^2 sigma[i, j]^2`` (+ 1e-6), which is the distribution the losses use (``ActorCritic``
computes it as the policy output's ``sigma``, so log-probabilities, ratios and entropies are those of the ordinary
diagonal Gaussian). ``full_std=False`` learns one ``sigma`` per latent feature, shared by the action dimensions.
As Stable-Baselines3 defines it (``use_sde``, ``sde_sample_freq``, ``full_std``, ``log_std_init``; ``use_expln``,
``learn_features`` and squashing are not offered). Evaluation and ``zoo export`` take the mean.

``StateDependentNoise`` holds the matrices and the step counter; the policy saves both with its state (the draws
come from torch's global generator, which checkpoints hold), so a resumed run explores exactly as an unbroken one.
"""

from __future__ import annotations

from typing import Any

import torch


class StateDependentNoise:
    """The exploration matrices of ``num_envs`` sub-envs, resampled on schedule.

    ``sample_freq``: resample every that many calls of ``noise`` (-1 or 0: only at ``start_rollout``).
    """

    def __init__(self, sample_freq: int) -> None:
        self.sample_freq = int(sample_freq)
        self.matrices: torch.Tensor | None = None  # (num_envs, latent_dim, action_dim)
        self.steps = 0  # calls of ``noise`` since the matrices were drawn

    def resample(self, std: torch.Tensor, num_envs: int) -> None:
        """Draw one matrix per sub-env: ``std * N(0, 1)`` elementwise, ``std`` of shape (latent, action)."""
        std = std.detach()
        self.matrices = std * torch.randn(num_envs, *std.shape, dtype=std.dtype, device=std.device)
        self.steps = 0

    def start_rollout(self, std: torch.Tensor, num_envs: int) -> None:
        """At the start of each rollout: new matrices when they are drawn per rollout (or not drawn yet)."""
        if self.sample_freq <= 0 or self.matrices is None or len(self.matrices) != num_envs:
            self.resample(std, num_envs)

    def noise(self, latent: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """The exploration noise ``z @ E`` of a batch of latent features ``(num_envs, latent_dim)``, one matrix per
        row; the matrices are drawn first where none fit or ``sample_freq`` steps have passed."""
        if self.matrices is None or len(self.matrices) != len(latent) or (
                self.sample_freq > 0 and self.steps >= self.sample_freq):
            self.resample(std, len(latent))
        self.steps += 1
        assert self.matrices is not None
        return torch.bmm(latent.detach().unsqueeze(1), self.matrices).squeeze(1)

    def state_dict(self) -> dict[str, Any]:
        return {"matrices": None if self.matrices is None else self.matrices.clone(), "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.matrices = None if state["matrices"] is None else state["matrices"].clone()
        self.steps = int(state["steps"])
