"""The one way a policy is built from a resolved config: its class by name, the spaces checked, then constructed.

Training, actors (acting-only copies), ``zoo eval``, ``zoo.load`` and the exporter all build policies here, so a
policy whose ``check_spaces`` refuses an env is refused in one line wherever it is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch

from ..registry import POLICY_REGISTRY
from .base import Policy


def policy_class(cfg: Mapping[str, Any]) -> type[Policy]:
    """The registered class of ``cfg.policy.type`` (a did-you-mean error when unknown)."""
    return POLICY_REGISTRY.get(cfg["policy"]["type"])


def build_policy(cfg: Mapping[str, Any], observation_space: gym.Space, action_space: gym.Space,
                 device: torch.device | str = "cpu", acting_only: bool = False) -> Policy:
    """``cfg.policy.type``'s policy for these spaces (``check_spaces`` first: a ConfigError line for spaces it
    cannot handle), built from the ``policy`` section on ``device``; ``acting_only``: no optimiser or critic.

    Examples:
        >>> from zoo.config.resolve import resolve_config
        >>> cfg = resolve_config({"policy": {"type": "ppo", "hidden_sizes": [16]}})  # defaults merged, checked
        >>> policy = build_policy(cfg, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), acting_only=True)
        >>> type(policy).__name__, policy.evaluate(torch.zeros(3, 4)).shape
        ('PPOPolicy', (3,))
    """
    cls = policy_class(cfg)
    cls.check_spaces(observation_space, action_space)
    return cls(cfg["policy"], observation_space, action_space, torch.device(device), acting_only=acting_only)
