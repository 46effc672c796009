"""zoo: a plugin-based reinforcement-learning algorithm zoo (PyTorch + Gymnasium).

Python API (imports stay light until called)::

    import zoo
    summary = zoo.train("configs/ppo_cartpole.py", ["seed=1", "pipeline.max_env_steps=50000"])
    agent = zoo.load(summary["run_dir"])
    action = agent.predict(obs)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .run.load import Agent

__version__ = "0.1.0"
"""The version of the installed zoo-rl package."""
__all__ = ["__version__", "load", "train"]


def train(config: Any = None, overrides: list[Any] | None = None, resume: str | Path | None = None,
          repair: bool = False) -> dict[str, Any]:
    """Train from a config file path or dict, with ``--set``-style overrides (``["policy.learning_rate=1e-3"]``),
    or continue a run directory with ``resume`` (``repair``: restore a damaged config.yaml from the checkpoint and
    keep the readable metrics rows). Returns the summary: ``reason``, ``env_steps``, ``wall_time``,
    ``episode_return_mean``, ``run_dir``. Bad input raises ``zoo.errors.ZooError`` with a one-line message."""
    from .run import train as _train

    return _train(config, overrides, resume, repair)


def load(run_dir: str | Path, device: str = "cpu", which: str = "last", trust_imports: bool = False) -> Agent:
    """A run's trained policy as an ``Agent`` with ``predict(obs, deterministic=True)``; applies the run's
    observation normalisation and reads weights only: no code from the run directory runs (nor the modules its
    config names, unless ``trust_imports``: only for run directories you trust)."""
    from .run.load import load_agent

    return load_agent(run_dir, device, which, trust_imports)
