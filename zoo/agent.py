"""``zoo.load(run_dir)``'s agent: a re-export of ``zoo.run.load.Agent`` and ``load_agent`` (where they live, below
the commands, so that ``zoo eval``, ``zoo.load`` and ``zoo export`` share one path)."""

from __future__ import annotations

from .run.load import Agent
from .run.load import load_agent as load

__all__ = ["Agent", "load"]
