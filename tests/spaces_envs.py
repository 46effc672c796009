"""Small envs with the spaces zoo supports beyond Box/Discrete, each learnable in seconds (tests/test_spaces.py).

Every env shows a cue and pays for the action that matches it, for ``length`` steps (then truncates), so that the
best return is ``length`` and random play scores a known fraction of it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class MatchComponentsEnv(gym.Env):
    """Cue: one one-hot per component; reward: the fraction of components whose action matches the cue.

    ``binary=True`` gives MultiBinary(K) actions (every component has 2 choices); otherwise
    MultiDiscrete(nvec, start=start). Random play: ``mean(1 / nvec)`` per step.
    """

    def __init__(self, nvec: tuple[int, ...] = (3, 2), binary: bool = False, start: tuple[int, ...] | None = None,
                 length: int = 8, render_mode: str | None = None) -> None:
        self.nvec = (2,) * len(nvec) if binary else tuple(nvec)
        self.start = np.zeros(len(self.nvec), dtype=np.int64) if start is None else np.asarray(start)
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (sum(self.nvec),), np.float32)
        if binary:
            self.action_space = gym.spaces.MultiBinary(len(self.nvec))
        else:
            self.action_space = gym.spaces.MultiDiscrete(self.nvec, start=self.start)
        self._target = np.zeros(len(self.nvec), dtype=np.int64)
        self._t = 0

    def _observe(self) -> np.ndarray:
        self._target = np.array([self.np_random.integers(n) for n in self.nvec])
        obs = np.zeros(sum(self.nvec), dtype=np.float32)
        obs[np.cumsum((0,) + self.nvec[:-1]) + self._target] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        assert self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype)), action
        reward = float(np.mean(np.asarray(action) - self.start == self._target))
        self._t += 1
        return self._observe(), reward, False, self._t >= self.length, {}


class BrightSideEnv(gym.Env):
    """A 40x40 single-channel uint8 image (channels last) with a bright square on the left or the right half;
    Discrete(2): pay 1 for naming the side. Random play: 0.5 per step."""

    def __init__(self, length: int = 8, render_mode: str | None = None) -> None:
        self.length = length
        self.observation_space = gym.spaces.Box(0, 255, (40, 40, 1), np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self._side = 0
        self._t = 0

    def _observe(self) -> np.ndarray:
        self._side = int(self.np_random.integers(2))
        image = self.np_random.integers(0, 40, (40, 40, 1), dtype=np.uint8)  # dim noise
        row = int(self.np_random.integers(0, 28))
        col = int(self.np_random.integers(0, 8)) + 20 * self._side
        image[row:row + 12, col:col + 12] = 255
        return image

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(int(action) == self._side)
        self._t += 1
        return self._observe(), reward, False, self._t >= self.length, {}


class DictCueEnv(gym.Env):
    """Dict observation ``{"cue": Discrete(3), "noise": Box(2)}``; Discrete(3): pay 1 for repeating the cue.

    zoo flattens the observation (one-hot cue, then the noise). Random play: 1/3 per step."""

    def __init__(self, length: int = 8, render_mode: str | None = None) -> None:
        self.length = length
        self.observation_space = gym.spaces.Dict(
            {"cue": gym.spaces.Discrete(3), "noise": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)}
        )
        self.action_space = gym.spaces.Discrete(3)
        self._cue = 0
        self._t = 0

    def _observe(self) -> dict[str, Any]:
        self._cue = int(self.np_random.integers(3))
        return {"cue": self._cue, "noise": self.np_random.uniform(-1, 1, 2).astype(np.float32)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        reward = float(int(action) == self._cue)
        self._t += 1
        return self._observe(), reward, False, self._t >= self.length, {}
