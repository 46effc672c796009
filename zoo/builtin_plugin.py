"""zoo's own plugin: built-in policies and pipelines register through the same hooks as third parties."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .hookspecs import hookimpl


@hookimpl
def register_policies(register: Callable[[str, Any], Any]) -> None:
    from .policies import A2CPolicy, PPOPolicy, SACACEPolicy, SACPolicy

    register("a2c", A2CPolicy)
    register("ppo", PPOPolicy)
    register("sac", SACPolicy)
    register("sac_ace", SACACEPolicy)


@hookimpl
def register_pipelines(register: Callable[[str, Any], Any]) -> None:
    from .pipelines import SerialOffPolicyPipeline, SerialOnPolicyPipeline

    register("serial_onpolicy", SerialOnPolicyPipeline)
    register("serial_offpolicy", SerialOffPolicyPipeline)
