"""ACE's two additions to SAC (Ji et al., ICML 2024): causal action weights and gradient-dormancy-guided resets.

Causal weights. Every ``interval`` env steps, DirectLiNGAM on ``[states | actions | reward]`` of the most recent
``sample_size`` transitions gives, per action dimension, its direct effect on the reward; ``action_dim *
softmax(effects / temperature)`` turns those into weights of mean 1 (``zoo.rl_utils.causal_action_weights``).
SAC-ACE then uses ``sum_k w_k log pi_k`` in place of ``log pi`` in its three entropy terms. The official code
stops training while it fits; here the fit runs in a background thread on a copy of the data, and its weights
take effect exactly ``apply_after`` gradient updates after it started (waiting for it if it is late), so a seed
gives one result however fast the machine is, and a checkpoint taken while a fit is pending saves its result and
the update at which it applies, so ``--resume`` is exact too.

Resets. The gradient-dormant fraction ``beta`` of the actor's neurons (every linear layer's output units whose
weight-gradient row norm is below ``tau`` times that layer's mean row norm, counted over all layers) sets the
factor ``a = clip(1 - beta, low, high)``; actor, critics and target critics then move to ``a * theta + (1 - a) *
theta_fresh`` (a fresh initialisation of the same networks) and the optimisers forget their moments.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data import ReplayBuffer
from ..rl_utils import causal_action_weights


def gradient_dormant_fraction(layers: list[nn.Linear], tau: float = 0.05) -> float:
    """Fraction of the output neurons of ``layers`` whose weight-gradient row norm is below ``tau`` times the
    mean row norm of their layer (the gradients of the latest backward pass; bias gradients are not counted)."""
    dormant, total = 0, 0
    for layer in layers:
        norms = layer.weight.grad.norm(dim=1)
        dormant += int((norms < tau * norms.mean()).sum())
        total += norms.numel()
    return dormant / max(total, 1)


def reset_factor(dormant_fraction: float, low: float = 0.2, high: float = 0.9) -> float:
    """ACE's perturbation factor ``clip(1 - dormant_fraction, low, high)``: the share of the old weights kept."""
    return min(max(low, 1.0 - dormant_fraction), high)


@torch.no_grad()
def perturb_(flat: torch.Tensor, fresh: torch.Tensor, factor: float) -> None:
    """``flat <- factor * flat + (1 - factor) * fresh``, in place."""
    flat.mul_(factor).add_(fresh, alpha=1.0 - factor)


class CausalWeightSchedule:
    """ACE's causal weights, refitted in the background on a fixed schedule (see the module docstring).

    Arguments:
        action_dim: number of action dimensions (the weights start at 1 for each).
        interval: env steps between fits; sample_size: the most recent transitions each fit uses.
        apply_after: gradient updates between a fit's start and the moment its weights are used.
        temperature, use_abs: passed to ``causal_action_weights``.
    """

    def __init__(
        self, action_dim: int, interval: int, sample_size: int, apply_after: int, temperature: float = 1.0,
        use_abs: bool = True,
    ) -> None:
        self.weights = np.ones(action_dim)
        self.interval, self.sample_size, self.apply_after = interval, sample_size, apply_after
        self.temperature, self.use_abs = temperature, use_abs
        self.next_fit_at = interval  # env steps
        self.fits = 0
        self._future: Future | None = None
        self._pending: np.ndarray | None = None  # a restored fit's result, not yet applied
        self._apply_at: int | None = None  # the update at which the pending weights apply
        self._executor: ThreadPoolExecutor | None = None

    def maybe_start(self, replay: ReplayBuffer, env_steps: int, updates: int) -> None:
        """Start a fit when ``env_steps`` reached the next fit point and the replay holds enough transitions."""
        if env_steps < self.next_fit_at or self._apply_at is not None:
            return
        self.next_fit_at = (env_steps // self.interval + 1) * self.interval
        if len(replay) < self.sample_size:
            return
        data = replay.recent(self.sample_size)  # a copy: the buffer may change while the thread reads
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zoo-causal-fit")
        self._future = self._executor.submit(
            causal_action_weights, data.obs.reshape(len(data), -1), data.action.reshape(len(data), -1), data.reward,
            self.temperature, self.use_abs,
        )
        self._apply_at = updates + self.apply_after

    def maybe_apply(self, updates: int) -> bool:
        """Use the pending fit's weights when ``updates`` reached its point (waiting for it); True when applied."""
        if self._apply_at is None or updates < self._apply_at:
            return False
        self.weights = self._result()
        self._future, self._pending, self._apply_at = None, None, None
        self.fits += 1
        return True

    def _result(self) -> np.ndarray:
        return self._pending if self._future is None else np.asarray(self._future.result(), dtype=np.float64)

    def state_dict(self) -> dict[str, Any]:
        """Weights, schedule, and a pending fit's result with its update (waits for a running fit)."""
        pending = None if self._apply_at is None else {"weights": self._result(), "apply_at": self._apply_at}
        return {"weights": self.weights.copy(), "next_fit_at": self.next_fit_at, "fits": self.fits,
                "pending": pending}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict`` output."""
        self.weights = np.asarray(state["weights"], dtype=np.float64).copy()
        self.next_fit_at, self.fits = int(state["next_fit_at"]), int(state["fits"])
        pending = state["pending"]
        self._future = None
        self._pending = None if pending is None else np.asarray(pending["weights"], dtype=np.float64)
        self._apply_at = None if pending is None else int(pending["apply_at"])

    def close(self) -> None:
        """Stop the background thread (after the running fit, if any)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
