"""Runs: train (``train``), resume (``resume``) and load (``load``, the loaded ``Agent``) run directories; launch a
pipeline's processes (``launch``, ``supervisor``); the run directory's files (``run_dir``, ``state_files``,
``metrics_files``) and the observers that write them (``observers``); several seeds of one config (``seeds``) and
which folder may hold them (``seeds_parent``).
"""

from .build import build_pipeline
from .load import Agent, load_agent, load_run
from .log import ensure_logging
from .train import run_worker, train

__all__ = ["Agent", "build_pipeline", "ensure_logging", "load_agent", "load_run", "run_worker", "train"]
