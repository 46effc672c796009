"""The plugin module: one suite, ``suite_plugin``, of one tiny entry (PPO on CartPole-v1 for 256 env steps) whose
config file is shipped in this package (``configs/tiny_cartpole.py``, an absolute path built from ``__file__``, as a
pip-installed plugin would), with a published figure of its own for the report."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from zoo.bench.published import Published
from zoo.bench.suites import Entry
from zoo.hookspecs import hookimpl

CONFIG = Path(__file__).resolve().parent / "configs" / "tiny_cartpole.py"
FIGURE = Published("Example lib", "ppo", "CartPole-v1", 123.4, 5.6, 3, 256, "final evaluation", "the test plugin",
                   "a made-up figure: the report must show it in the entry's row")
ENTRY = Entry("suite_plugin_cartpole", CONFIG, ("pipeline.max_env_steps=256", "pipeline.stop_return=None"),
              est_minutes=0.1, seeds=3, published=(FIGURE,))


@hookimpl
def register_bench_suites(register: Callable[[str, Any], Any]) -> None:
    register("suite_plugin", (ENTRY,))
