"""Per-process set-up shared by every pipeline: plugins, torch threads, and seeds derived from the config seed.

Every random stream of a run comes from the one config ``seed`` through ``numpy.random.SeedSequence`` with a
spawn key ``(rank, component, ...)``: workers of a multi-process pipeline (rank) and the components of one
process (torch, numpy, python, env, eval...) get independent, reproducible streams, with no magic offsets that
could make two of them collide.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch
from easydict import EasyDict

from ..accel import settings as accel_settings

# Spawn-key index of each component; append new ones at the end so existing streams keep their seeds.
COMPONENTS = {"torch": 0, "numpy": 1, "python": 2, "env": 3, "eval": 4, "replay": 5, "actions": 6}


def derive_seed(seed: int, *keys: int) -> int:
    """A 32-bit seed for the stream ``keys`` of ``seed`` (``SeedSequence(seed, spawn_key=keys)``)."""
    return int(np.random.SeedSequence(int(seed), spawn_key=tuple(int(key) for key in keys)).generate_state(1)[0])


def component_seed(seed: int, rank: int, component: str, *more: int) -> int:
    """The seed of ``component`` (a key of ``COMPONENTS``) on ``rank``, optionally refined by ``more`` keys."""
    return derive_seed(seed, rank, COMPONENTS[component], *more)


def setup_process(cfg: EasyDict, rank: int = 0) -> dict[str, int]:
    """Set torch threads and the acceleration wing's settings (``accel``: ``zoo.accel.settings``), and seed the
    global RNGs (plugins and ``import_names`` are loaded once, at the process's start:
    ``zoo.plugins.load_run_plugins``). Returns the component seeds of this rank by name."""
    if torch.get_num_threads() != cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    accel_settings.configure(cfg.get("accel"))
    seeds = {name: component_seed(cfg.seed, rank, name) for name in COMPONENTS}
    random.seed(seeds["python"])
    np.random.seed(seeds["numpy"])
    torch.manual_seed(seeds["torch"])
    return seeds


def rng_state() -> dict[str, Any]:
    """The global RNG states (torch, CUDA when initialised, numpy, python) as plain values and tensors."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                             "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state`` returned."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(tuple(state["numpy"]))
    random.setstate(_tuples(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _tuples(value: Any) -> Any:
    # random.setstate wants tuples all the way down; a round trip through some formats gives lists.
    return tuple(_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def process_device(name: str) -> torch.device:
    """This process's device for the config's ``device``: a plain ``cuda`` in one of several processes on a
    machine becomes ``cuda:LOCAL_RANK`` (modulo the GPUs there: one GPU per worker, as torchrun and zoo's own
    supervisor set LOCAL_RANK), made the current CUDA device."""
    device = torch.device(name)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        index = int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return device
