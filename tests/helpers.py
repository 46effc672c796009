"""Helpers the test modules share (``from helpers import ...``): a run's metrics rows, a config file, a free port, a
policy built for a test.

``metrics_rows`` reads metrics.jsonl strictly (every line one JSON object, as written), unlike ``zoo.run.metrics_files.
read_rows``, which forgives what a kill leaves (a cut last line, blank lines): a test of the files must see them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from easydict import EasyDict

from zoo.run.metrics_files import METRICS_JSONL

TIMINGS = ("wall_time", "sps")  # what differs between two runs of the same seed


def load_tool(name: str) -> Any:
    """The module ``tools/<name>.py`` of the repository (the tools are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def registered_envs(**factories: Any) -> Iterator[None]:
    """Each ``name=factory`` in zoo's env registry while the block runs (a fixture's ``with``), removed after."""
    from zoo.registry import ENV_REGISTRY

    for name, factory in factories.items():
        ENV_REGISTRY.register(name, factory)
    try:
        yield
    finally:
        for name in factories:
            ENV_REGISTRY.unregister(name)


def metrics_rows(run: Path, without: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every row of ``run``'s metrics.jsonl, each line parsed as it is, without the keys ``without``."""
    found = [json.loads(line) for line in (run / METRICS_JSONL).read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in without} for row in found] if without else found


def write_config(folder: Path, config: dict[str, Any] | str, name: str = "cfg.py") -> Path:
    """A config file ``folder/name``: a dict as ``config = {...}``, a string as it is."""
    path = folder / name
    path.write_text(config if isinstance(config, str) else f"config = {config!r}\n")
    return path


def end_spawned_worker() -> None:
    """End a ``torch.multiprocessing.spawn`` worker that has saved its results, without the interpreter's teardown
    (``os._exit(0)``, as ``zoo.run.launch.end_rank`` ends a torchrun rank): gloo's threads free a collective's tensors
    after it returns, and one that needs the GIL while the interpreter finalises aborts the process (SIGABRT)."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def new_policy(cls: type, observation_space: gym.Space, action_space: gym.Space, seed: int = 0,
                acting_only: bool = False, **config: Any) -> Any:
    """A ``cls`` policy on CPU from its ``default_config`` updated with ``config``, its weights drawn after
    ``torch.manual_seed(seed)``."""
    cfg = EasyDict({**cls.default_config, **config})
    torch.manual_seed(seed)
    return cls(cfg, observation_space, action_space, torch.device("cpu"), acting_only=acting_only)


def predicted_returns(agent: Any, make_env: Any, episodes: int, seed: int) -> list[float]:
    """The returns of ``episodes`` episodes (episode ``k`` reset with ``seed + k``) played one env at a time by a
    recurrent agent's ``predict``, its state carried from step to step: the reference a recurrent evaluation or
    video must equal."""
    returns = []
    for episode in range(episodes):
        env = make_env()
        obs, _ = env.reset(seed=seed + episode)
        state, total, done = None, 0.0, False
        while not done:
            action, state = agent.predict(obs, state=state)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return returns
