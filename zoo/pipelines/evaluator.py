"""Deterministic evaluation on separate envs: each of N envs plays exactly one episode (no short-episode bias)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from ..envs import EnvSpec
from ..envs.masks import mask_width, masks_of
from ..errors import ZooError
from ..policies.base import Policy


def evaluate_policy(
    policy: Policy,
    env: EnvSpec,
    episodes: int,
    seed: int,
    *,
    normalize_obs: Callable[[Any], np.ndarray] | None = None,
    vector_mode: str = "auto",
    step_limit: int = 100_000,
    render: bool = False,
    deterministic: bool = True,
    batch: int = 16,
) -> list[float]:
    """Raw (unnormalised) returns of ``episodes`` episodes, played ``batch`` at a time.

    Arguments:
        policy: acts with ``policy.evaluate`` (``deterministic``) or ``policy.collect``.
        env: the env, as in the run's config (``EnvSpec.from_config``).
        episodes, seed: how many episodes; the envs of the batch starting at episode ``k`` are seeded ``seed + k``.
        normalize_obs: maps raw observations to the policy's inputs with frozen training statistics
            (``VectorCollector.normalize_observation()``, or ``NormalizeObservation.frozen(state)`` for a saved
            run), or None.
        step_limit: an episode that has not ended after this many steps stops the evaluation with a ZooError
            (an env that never ends would otherwise hang it).
    """
    returns: list[float] = []
    extra = {"render_mode": "human"} if render else {}
    env_id = env.id
    while len(returns) < episodes:
        count = min(batch, episodes - len(returns))
        venv = env.make_vector(count, seed=seed + len(returns), mode="sync" if render else vector_mode, **extra)
        try:
            obs, infos = venv.reset(seed=seed + len(returns))
            width = mask_width(venv.single_action_space)
            mask = masks_of(infos, count, width)  # the env's action masks (env.action_mask), None without
            total = np.zeros(count)
            running = np.ones(count, dtype=bool)
            steps = 0
            memory = None  # a recurrent policy's: every env plays one episode, from its start
            recurrent = getattr(policy, "recurrent", False)
            while running.any():
                if steps >= step_limit:
                    raise ZooError(
                        f"evaluation: an episode of '{env_id}' did not end within {step_limit} steps: set "
                        f"env.max_episode_steps to bound the env's episodes"
                    )
                obs_array = np.asarray(obs, dtype=np.float32) if normalize_obs is None else normalize_obs(obs)
                obs_tensor = torch.as_tensor(obs_array, device=policy.device)
                masked = {} if mask is None else {"action_mask": torch.as_tensor(mask, device=policy.device)}
                if recurrent:
                    action, memory = policy.act_with_memory(obs_tensor, memory, None, deterministic, **masked)
                elif deterministic:
                    action = policy.evaluate(obs_tensor, **masked)
                else:
                    action = policy.collect(obs_tensor, **masked).action
                obs, reward, terminated, truncated, infos = venv.step(action)
                mask = None if mask is None else masks_of(infos, count, width)
                total += np.where(running, reward, 0.0)
                running &= ~(terminated | truncated)
                steps += 1
        except gym.error.DependencyNotInstalled as exc:  # rendering needs pygame, which envs import only then
            raise ZooError(f"evaluating '{env_id}'{' with --render' if render else ''} needs a missing package: "
                           f"{str(exc).strip().splitlines()[0]}") from None
        finally:
            venv.close()
        returns.extend(total.tolist())
    return returns
