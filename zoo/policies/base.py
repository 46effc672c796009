"""The policy plugin contract shared by built-in and third-party policies.

A policy owns its networks and optimiser and knows its maths; it never steps an environment (the pipeline's
collector does) and never writes files (the pipeline does). The contract is deliberately small:

- ``default_config``: every hyper-parameter with its default (the config schema for the ``policy`` section);
- ``pipeline``: the registered name of the pipeline that drives it (``"serial_onpolicy"`` for A2C/PPO);
- ``collect(obs) -> CollectOutput``: stochastic actions plus what learning needs (log-prob, value);
- ``evaluate(obs) -> actions``: deterministic actions;
- ``value(obs) -> values``: the critic alone (bootstrapping truncated episodes and rollout ends);
- ``learn(batch) -> dict[str, float]``: one update from a rollout, returning metrics;
- ``state_dict()`` / ``load_state_dict()``: everything needed to resume (networks and optimiser).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict


@dataclass
class CollectOutput:
    """What a policy returns for a batch of observations during collection.

    ``action`` is what the env receives (numpy, already clipped to the action space where needed);
    ``raw_action`` is what the loss needs (the unclipped Gaussian sample, or the discrete index), ``log_prob``
    its log-probability under the behaviour policy, ``value`` the critic's estimate and ``policy_output`` the
    behaviour policy's parameters as one tensor (logits, or mu and sigma concatenated) for ratio-based losses.
    """

    action: np.ndarray
    raw_action: torch.Tensor
    log_prob: torch.Tensor
    value: torch.Tensor
    policy_output: torch.Tensor


@dataclass
class Rollout:
    """A time-major on-policy batch with shapes ``(T, B, ...)`` as stored by the serial on-policy collector.

    ``valid`` is False for NEXT_STEP autoreset transitions (the action was ignored by the env); ``advantage``
    and ``returns`` are filled by the pipeline with rl_utils' gae before ``learn`` is called.
    """

    obs: torch.Tensor
    action: torch.Tensor
    log_prob: torch.Tensor
    value: torch.Tensor
    policy_output: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    valid: torch.Tensor
    next_value: torch.Tensor
    advantage: torch.Tensor | None = None
    returns: torch.Tensor | None = None

    def valid_samples(self) -> Rollout:
        """The valid transitions flattened to ``(N, ...)``: autoreset steps (action ignored) are dropped."""
        valid = self.valid.reshape(-1)
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        if bool(valid.all()):  # the usual case: flattening is a view, no copy
            return Rollout(**{name: None if x is None else x.flatten(0, 1) for name, x in fields.items()})
        return Rollout(**{name: None if x is None else x.flatten(0, 1)[valid] for name, x in fields.items()})


def normalize_advantage(advantage: torch.Tensor) -> torch.Tensor:
    """Zero mean, unit std (left unchanged for a single sample, whose std is undefined)."""
    if advantage.numel() < 2:
        return advantage
    return (advantage - advantage.mean()) / (advantage.std() + 1e-8)


class Policy:
    """Base class: subclasses set ``default_config`` and implement the methods below."""

    default_config: ClassVar[dict[str, Any]] = {}
    pipeline: ClassVar[str] = "serial_onpolicy"
    # Config keys with allowed ranges, checked before a run starts: key -> (low, high) inclusive, None = open.
    config_ranges: ClassVar[dict[str, tuple[float | None, float | None]]] = {}
    # Config keys that take one of a few values, checked before a run starts: key -> allowed values.
    config_choices: ClassVar[dict[str, tuple[Any, ...]]] = {}

    def __init__(
        self, cfg: EasyDict, observation_space: gym.Space, action_space: gym.Space, device: torch.device
    ) -> None:
        self.cfg = cfg
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = device

    def collect(self, obs: torch.Tensor) -> CollectOutput:
        """Sample actions for a batch of observations (no gradient)."""
        raise NotImplementedError

    def evaluate(self, obs: torch.Tensor) -> np.ndarray:
        """Deterministic actions for evaluation (no gradient)."""
        raise NotImplementedError

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Critic values of a batch of observations (no gradient)."""
        raise NotImplementedError

    def learn(self, batch: Rollout, progress: float) -> dict[str, float]:
        """Update from a batch; ``progress`` in [0, 1] is the fraction of the env-step budget used (annealing)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Networks and optimiser state."""
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        raise NotImplementedError
