"""Partially observed classic-control tasks: the same envs with their velocities taken out of the observations.

``CartPoleNoVel-v1`` observes the cart's position and the pole's angle (CartPole-v1 without indices 1 and 3),
``PendulumNoVel-v1`` the cosine and sine of the angle (Pendulum-v1 without the angular velocity): the tasks of
rl-baselines3-zoo's recurrent rows (which zero those entries where these drop them: the same information). A policy
must remember earlier observations to act well; a feed-forward one sees a single frame, or with ``frames=k`` (in
``env.kwargs``) the last ``k`` observations side by side (the first repeated before it), the classic stand-in
for memory.

``PopGym-v0`` is one of popgym's tasks (``env.kwargs.task``, e.g. ``RepeatFirstEasy``: say the suit of the first card
of the deck at every step, 51 steps later included; ``RepeatPreviousEasy``: the suit of the card 4 steps back), its
Discrete observations one-hot, with ``frames`` as above. It needs ``pip install 'zoo-rl[popgym]'``; popgym's own ids
(``popgym:popgym-RepeatFirstEasy-v0``) work too, without ``frames``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["PARTIAL_ENVS", "KeepObservations", "StackObservations", "make_cartpole_novel", "make_pendulum_novel",
           "make_popgym"]


class KeepObservations(gym.ObservationWrapper):
    """Observations reduced to the entries at ``keep`` (a 1-D Box)."""

    def __init__(self, env: gym.Env, keep: tuple[int, ...]) -> None:
        super().__init__(env)
        space = env.observation_space
        self.keep = np.asarray(keep, dtype=np.intp)
        self.observation_space = gym.spaces.Box(space.low[self.keep], space.high[self.keep], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation)[self.keep]


class StackObservations(gym.Wrapper):
    """The last ``frames`` observations side by side, oldest first (the first one repeated before it), flattened;
    plain numpy state, so that a checkpoint captures it."""

    def __init__(self, env: gym.Env, frames: int) -> None:
        super().__init__(env)
        space = env.observation_space
        self.frames = frames
        self.observation_space = gym.spaces.Box(np.tile(space.low, frames), np.tile(space.high, frames),
                                                dtype=space.dtype)
        self._stack = np.zeros((frames, *space.shape), dtype=space.dtype)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._stack[...] = obs
        return self._stack.reshape(-1).copy(), info

    def step(self, action: Any) -> tuple[np.ndarray, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._stack[:-1] = self._stack[1:]
        self._stack[-1] = obs
        return self._stack.reshape(-1).copy(), reward, terminated, truncated, info


def _stacked(env: gym.Env, frames: int) -> gym.Env:
    if int(frames) != frames or frames < 1:
        raise ValueError(f"frames must be a whole number of at least 1, got {frames!r}")
    return env if frames == 1 else StackObservations(env, int(frames))


def make_cartpole_novel(frames: int = 1, **kwargs: Any) -> gym.Env:
    """CartPole-v1 observing the cart's position and the pole's angle only (the last ``frames`` of them)."""
    return _stacked(KeepObservations(gym.make("CartPole-v1", **kwargs), (0, 2)), frames)


def make_pendulum_novel(frames: int = 1, **kwargs: Any) -> gym.Env:
    """Pendulum-v1 observing cos and sin of the angle only (the last ``frames`` of them)."""
    return _stacked(KeepObservations(gym.make("Pendulum-v1", **kwargs), (0, 1)), frames)


def make_popgym(task: str = "RepeatFirstEasy", frames: int = 1, **kwargs: Any) -> gym.Env:
    """popgym's ``task`` (its env id without ``popgym-`` and ``-v0``, e.g. ``RepeatPreviousEasy``), observations
    flattened (Discrete: one-hot), the last ``frames`` of them."""
    import popgym  # noqa: F401  (registers its envs with gymnasium; zoo-rl[popgym])

    env_id = f"popgym-{task}-v0"
    if env_id not in gym.registry:
        known = sorted(name[len("popgym-"):-len("-v0")] for name in gym.registry if name.startswith("popgym-"))
        raise ValueError(f"popgym has no task '{task}' (tasks: {', '.join(known)})")
    return _stacked(gym.wrappers.FlattenObservation(gym.make(env_id, **kwargs)), frames)


PARTIAL_ENVS = {"CartPoleNoVel-v1": make_cartpole_novel, "PendulumNoVel-v1": make_pendulum_novel,
                "PopGym-v0": make_popgym}
