"""Deterministic evaluation on separate envs: each of N envs plays exactly one episode (no short-episode bias)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from easydict import EasyDict

from ..envs import make_vector_env
from ..policies.base import Policy


def evaluate_policy(
    cfg: EasyDict,
    policy: Policy,
    normalize_obs: Callable[[Any], np.ndarray] | None,
    episodes: int,
    seed: int,
    render: bool = False,
    batch: int = 16,
) -> list[float]:
    """Raw (unnormalised) returns of ``episodes`` deterministic episodes, played ``batch`` at a time.

    ``normalize_obs`` maps raw observations to the policy's inputs with frozen training statistics
    (``NormalizeObservation.normalize``, or ``NormalizeObservation.frozen(state)`` for a saved run), or is None.
    """
    returns: list[float] = []
    env_kwargs = dict(cfg.env.kwargs)
    if render:
        env_kwargs["render_mode"] = "human"
    while len(returns) < episodes:
        count = min(batch, episodes - len(returns))
        mode = "sync" if render else cfg.pipeline.vector_mode
        venv = make_vector_env(cfg.env.id, count, seed=seed + len(returns), mode=mode, env_kwargs=env_kwargs,
                               max_episode_steps=cfg.env.max_episode_steps)
        try:
            obs, _ = venv.reset(seed=seed + len(returns))
            total = np.zeros(count)
            running = np.ones(count, dtype=bool)
            while running.any():
                obs_array = np.asarray(obs, dtype=np.float32) if normalize_obs is None else normalize_obs(obs)
                action = policy.evaluate(torch.as_tensor(obs_array, device=policy.device))
                obs, reward, terminated, truncated, _ = venv.step(action)
                total += np.where(running, reward, 0.0)
                running &= ~(terminated | truncated)
        finally:
            venv.close()
        returns.extend(total.tolist())
    return returns
