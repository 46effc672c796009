"""A plugin whose second suite takes a built-in suite's name (``classic``): refused, and its first suite with it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zoo.bench.suites import Entry
from zoo.hookspecs import hookimpl

from .plugin import CONFIG


@hookimpl
def register_bench_suites(register: Callable[[str, Any], Any]) -> None:
    register("clash_first", (Entry("clash_first_cartpole", CONFIG),))
    register("classic", (Entry("clash_cartpole", CONFIG),))
