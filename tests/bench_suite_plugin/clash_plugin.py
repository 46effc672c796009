"""A plugin whose suite takes the name of another plugin's suite (``suite_plugin``) with other entries: refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zoo.bench.suites import Entry
from zoo.hookspecs import hookimpl

from .plugin import CONFIG


@hookimpl
def register_bench_suites(register: Callable[[str, Any], Any]) -> None:
    register("suite_plugin", (Entry("other_cartpole", CONFIG),))
