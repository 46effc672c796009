"""DPPO (Heess et al. 2017, "Emergence of Locomotion Behaviours in Rich Environments"): PPO on synchronous
data-parallel workers.

The algorithm is PPO's; what makes it DPPO is the pipeline, ``parallel_sync``: every worker collects with its
own envs and computes its own gradients, the gradients are averaged by all-reduce before every optimiser step,
and running observation and reward statistics are merged across workers. ``dppo`` is PPO whose default pipeline
is ``parallel_sync`` (``ppo`` and ``a2c`` run on it too when the config sets ``pipeline.type``).
"""

from __future__ import annotations

from typing import ClassVar

from .ppo import PPOPolicy


class DPPOPolicy(PPOPolicy):
    """PPO that runs on ``parallel_sync`` by default (see the module docstring); also runs serially.

    Examples:
        >>> from zoo.config.resolve import resolve_config
        >>> cfg = resolve_config({"policy": {"type": "dppo"}})
        >>> cfg.pipeline.type, DPPOPolicy.pipelines  # its first pipeline is the default
        ('parallel_sync', ('parallel_sync', 'serial_onpolicy'))
        >>> DPPOPolicy.default_config == PPOPolicy.default_config  # PPO's keys and defaults
        True
    """

    pipelines: ClassVar[tuple[str, ...]] = ("parallel_sync", "serial_onpolicy")
