"""A plugin with three suites zoo bench cannot use: one is not a tuple of Entry, one's config file is missing, one's
entry takes the name (the runs' folder) of a built-in entry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from zoo.bench.suites import Entry
from zoo.hookspecs import hookimpl


@hookimpl
def register_bench_suites(register: Callable[[str, Any], Any]) -> None:
    register("broken_not_entries", ("ppo_cartpole.py",))
    register("broken_missing_config", (Entry("broken_missing", Path(__file__).with_name("no_such_config.py")),))
    register("broken_shared_name", (Entry("ppo_cartpole", "ppo_cartpole.py", ("pipeline.max_env_steps=256",)),))
