"""SAC-ACE (Ji et al., ICML 2024): SAC with causal action weights and gradient-dormancy-guided resets.

``SACACEPolicy`` (registered ``sac_ace``) is ``SACPolicy`` plus ACE's keys, declared here alone; each part has
its own switch (``causal_weights``, ``dormant_reset``; both on by default), and with both off it is SAC exactly.

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
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict
from torch import nn

from ..config.schema import Field
from ..data import ReplayBuffer
from ..rl_utils import causal_action_weights
from .base import LearnContext
from .continuous_networks import INITS
from .optim import flatten_parameters
from .sac import SACPolicy


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
        device: where ``tensor``, the weights as the learning step reads them, lives.
    """

    def __init__(
        self, action_dim: int, interval: int, sample_size: int, apply_after: int, temperature: float = 1.0,
        use_abs: bool = True, device: torch.device | str = "cpu",
    ) -> None:
        self.weights = np.ones(action_dim)
        # The weights as float32 on the learner's device, changed in place (a learning step's state tensor).
        self.tensor = torch.ones(action_dim, device=device)
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
        self._copy_to_tensor()
        return True

    def _copy_to_tensor(self) -> None:
        self.tensor.copy_(torch.as_tensor(self.weights, dtype=torch.float32))

    def tensors(self) -> list[torch.Tensor]:
        """The tensor a learning step reads (``tensor``): learner state (``zoo.policies.state``)."""
        return [self.tensor]

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
        self._copy_to_tensor()

    def close(self) -> None:
        """Stop the background thread (after the running fit, if any)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


class SACACEPolicy(SACPolicy):
    """SAC-ACE: SAC with causality-aware entropy weights and gradient-dormancy-guided resets (ACE's defaults).

    Examples:
        >>> from zoo.config.resolve import resolve_config; from zoo.policies import build_policy
        >>> cfg = resolve_config({"policy": {"type": "sac_ace", "hidden_sizes": [16]}})
        >>> cfg.policy.causal_weights, cfg.policy.dormant_reset, "causal_weights" in SACPolicy.default_config
        (True, True, False)
        >>> policy = build_policy(cfg, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)))
        >>> policy.weighted_log_prob(torch.tensor([[-1.0, -2.0]]))  # the weights start at 1: the plain sum
        tensor([-3.])
    """

    fields: ClassVar[dict[str, Field]] = {
        **SACPolicy.fields,
        "causal_weights": Field(True, "ACE: weight log-probs per action dimension by DirectLiNGAM effects"),
        "causal_interval": Field(10_000, "env steps between DirectLiNGAM fits", range=(1, None)),
        "causal_sample_size": Field(10_000, "the most recent transitions each fit uses", range=(10, 10_000_000)),
        "causal_apply_after": Field(200, "gradient updates between a fit's start and its weights' use",
                                    range=(0, None)),
        "causal_temperature": Field(1.0, "softmax temperature of the causal weights", range=(1e-6, None)),
        "causal_use_abs": Field(False, "softmax of |effect| instead of the signed effect (ACE's code and paper: "
                                "signed)"),
        "dormant_reset": Field(True, "ACE: gradient-dormancy-guided resets"),
        "reset_interval": Field(100_000, "gradient updates between resets", range=(1, None)),
        "reset_start": Field(5_000, "no reset before this many updates", range=(0, None)),
        "dormant_tau": Field(0.05, "a neuron is dormant below tau x its layer's mean gradient norm",
                             range=(0.0, 1.0)),
        "reset_factor_min": Field(0.2, "lowest mixing factor of a reset", range=(0.0, 1.0)),
        "reset_factor_max": Field(0.9, "highest mixing factor of a reset", range=(0.0, 1.0)),
        "reset_init": Field("torch", "the fresh weights a reset mixes in: torch (nn.Linear's default), xavier, or "
                            "orthogonal (orthogonal weights, zero biases: ACE's code)", choices=INITS),
    }
    retired_fields: ClassVar[dict[str, Any]] = {}  # sac's retired keys are this class's own
    learning_parts: ClassVar[tuple[str, ...]] = (*SACPolicy.learning_parts, "resets", "last_dormant_fraction",
                                                 "last_reset_factor", "causal")

    def __init__(
        self, cfg: EasyDict, observation_space: gym.Space, action_space: gym.Space, device: torch.device,
        acting_only: bool = False,
    ) -> None:
        super().__init__(cfg, observation_space, action_space, device, acting_only)
        self.resets = 0
        self.last_dormant_fraction: float | None = None
        self.last_reset_factor: float | None = None
        self.causal = CausalWeightSchedule(
            self.action_dim, cfg.causal_interval, cfg.causal_sample_size, cfg.causal_apply_after,
            cfg.causal_temperature, cfg.causal_use_abs, self.device,
        )

    def weighted_log_prob(self, per_dim: torch.Tensor) -> torch.Tensor:
        """``sum_k w_k log pi_k`` with the causal weights (the plain sum when they are off)."""
        return per_dim.sum(-1) if not self.cfg.causal_weights else (per_dim * self.causal.tensor).sum(-1)

    def prepare_learning(self, replay: ReplayBuffer, ctx: LearnContext) -> None:
        if self.cfg.causal_weights:
            self.causal.maybe_start(replay, ctx.env_steps, self.updates)

    def before_update(self) -> None:
        if self.cfg.causal_weights:
            self.causal.maybe_apply(self.updates)

    def after_update(self) -> None:
        """The reset, every ``reset_interval`` updates from ``reset_start`` on, after the update (its target step
        included, as in ACE's code), outside the compiled step, from the actor's latest gradients (the actor
        optimiser's gradient buffer)."""
        cfg = self.cfg
        if cfg.dormant_reset and self.updates >= cfg.reset_start and self.updates % cfg.reset_interval == 0:
            self._dormancy_reset()

    def _dormancy_reset(self) -> None:
        """ACE's reset, from the actor's gradients of the update just made (see the module docstring)."""
        cfg = self.cfg
        fraction = gradient_dormant_fraction(list(self.actor.layers), cfg.dormant_tau)
        factor = reset_factor(fraction, cfg.reset_factor_min, cfg.reset_factor_max)
        fresh_actor = flatten_parameters(self._new_actor(cfg.reset_init).to(self.device))
        perturb_(self.actor_optimizer.flat, fresh_actor, factor)
        for flat in (self.critic_optimizer.flat, self.target_flat):  # each gets its own fresh draw
            perturb_(flat, flatten_parameters(self._new_critic(cfg.reset_init).to(self.device)), factor)
        self.actor_optimizer.reset_state()
        self.critic_optimizer.reset_state()
        self.resets += 1
        self.last_dormant_fraction, self.last_reset_factor = fraction, factor

    def learn_metrics(self) -> dict[str, float]:
        metrics = super().learn_metrics()
        if self.cfg.causal_weights:
            metrics.update({f"causal_weight_{k}": float(w) for k, w in enumerate(self.causal.weights)})
        if self.last_dormant_fraction is not None:
            metrics.update(dormant_fraction=self.last_dormant_fraction, reset_factor=self.last_reset_factor,
                           resets=float(self.resets))
        return metrics

    def close(self) -> None:
        """Stop the background causal fit, if one runs."""
        self.causal.close()
