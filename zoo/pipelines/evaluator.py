"""Deterministic evaluation on separate envs: each of N envs plays exactly one episode (no short-episode bias)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from easydict import EasyDict

from ..envs import make_vector_env
from ..policies.base import Policy


def evaluate_policy(
    cfg: EasyDict,
    policy: Policy,
    obs_normalizer: Any,
    episodes: int,
    seed: int,
    render: bool = False,
    batch: int = 16,
) -> list[float]:
    """Raw (unnormalised) returns of ``episodes`` deterministic episodes, played ``batch`` at a time.

    ``obs_normalizer`` (a ``NormalizeObservation`` wrapper or None) supplies frozen training statistics.
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
                obs_array = np.asarray(obs, dtype=np.float32)
                if obs_normalizer is not None:  # the training statistics, frozen
                    obs_array = obs_normalizer.obs_rms.normalize(
                        np.asarray(obs, dtype=np.float64), obs_normalizer.clip, obs_normalizer.epsilon
                    ).astype(np.float32)
                action = policy.evaluate(torch.as_tensor(obs_array, device=policy.device))
                obs, reward, terminated, truncated, _ = venv.step(action)
                total += np.where(running, reward, 0.0)
                running &= ~(terminated | truncated)
        finally:
            venv.close()
        returns.extend(total.tolist())
    return returns
