"""zoo's own plugin: built-in policies, pipelines, envs, models and benchmark suites register through the same hooks
as third parties."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .hookspecs import hookimpl


@hookimpl
def register_policies(register: Callable[[str, Any], Any]) -> None:
    from .policies import A2CPolicy, DPPOPolicy, DQNPolicy, ImpalaPolicy, PPOPolicy, SACACEPolicy, SACPolicy, TD3Policy

    register("a2c", A2CPolicy)
    register("ppo", PPOPolicy)
    register("dppo", DPPOPolicy)
    register("impala", ImpalaPolicy)
    register("sac", SACPolicy)
    register("sac_ace", SACACEPolicy)
    register("td3", TD3Policy)
    register("dqn", DQNPolicy)


@hookimpl
def register_pipelines(register: Callable[[str, Any], Any]) -> None:
    from .pipelines import ParallelAsyncPipeline, ParallelSyncPipeline, SerialOffPolicyPipeline, SerialOnPolicyPipeline

    register("serial_onpolicy", SerialOnPolicyPipeline)
    register("serial_offpolicy", SerialOffPolicyPipeline)
    register("parallel_sync", ParallelSyncPipeline)
    register("parallel_async", ParallelAsyncPipeline)


@hookimpl
def register_envs(register: Callable[[str, Any], Any]) -> None:
    from .envs.atari import make_atari_env  # imports gymnasium only; ale-py is imported when an env is built
    from .envs.masked import MASKED_ENVS
    from .envs.partial import PARTIAL_ENVS

    register("atari", make_atari_env)
    for name, factory in {**PARTIAL_ENVS, **MASKED_ENVS}.items():
        register(name, factory)


@hookimpl
def register_models(register: Callable[[str, Any], Any]) -> None:
    from .policies.networks import BUILTIN_ENCODERS

    for name, encoder in BUILTIN_ENCODERS.items():
        register(name, encoder)


@hookimpl
def register_bench_suites(register: Callable[[str, Any], Any]) -> None:
    from .bench.suites import BUILTIN_SUITES

    for name, entries in BUILTIN_SUITES.items():
        register(name, entries)
