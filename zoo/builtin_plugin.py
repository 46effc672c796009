"""zoo's own plugin: built-in policies and pipelines register through the same hooks as third parties."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .hookspecs import hookimpl


@hookimpl
def register_policies(register: Callable[[str, Any], Any]) -> None:
    from .policies import A2CPolicy, DPPOPolicy, PPOPolicy, SACACEPolicy, SACPolicy

    register("a2c", A2CPolicy)
    register("ppo", PPOPolicy)
    register("dppo", DPPOPolicy)
    register("sac", SACPolicy)
    register("sac_ace", SACACEPolicy)


@hookimpl
def register_pipelines(register: Callable[[str, Any], Any]) -> None:
    from .pipelines import ParallelSyncPipeline, SerialOffPolicyPipeline, SerialOnPolicyPipeline

    register("serial_onpolicy", SerialOnPolicyPipeline)
    register("serial_offpolicy", SerialOffPolicyPipeline)
    register("parallel_sync", ParallelSyncPipeline)
