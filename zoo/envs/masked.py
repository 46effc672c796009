"""``MaskedChoice-v0``: a small task whose invalid actions end the episode, with its masks (zoo.envs.masks).

At every step a target among ``n`` actions is shown (one-hot) together with the actions valid now (the target is
always one of them); choosing the target scores +1, another valid action 0, and an invalid action -1 and ends the
episode. Episodes last ``length`` steps. With ``random_masks`` (the default) each other action is valid with
probability ``p_valid`` anew at every step, so a policy must read the mask (in the observation) or be given it; a
masked policy never loses an episode to an invalid action. ``masks`` says how the env gives them: ``both`` (an
``action_masks()`` method and ``info["action_mask"]``), ``method``, ``info`` or ``none``. ``invalid_actions``
counts the invalid actions taken since the env was made (also in every step's info), for tests.

``MASKED_ENVS`` registers it and ``MaskedKnapsack-v0`` (zoo.envs.knapsack: a task where masks matter).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from .knapsack import MaskedKnapsack

__all__ = ["MASKED_ENVS", "MaskedChoice"]


class MaskedChoice(gym.Env):
    """See the module docstring."""

    metadata = {"render_modes": []}

    def __init__(self, n: int = 6, length: int = 20, random_masks: bool = True, p_valid: float = 0.5,
                 masks: str = "both") -> None:
        if masks not in ("both", "method", "info", "none"):
            raise ValueError(f"masks must be both, method, info or none, got {masks!r}")
        self.n, self.length, self.random_masks, self.p_valid, self.masks = int(n), int(length), random_masks, \
            float(p_valid), masks
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2 * self.n,), np.float32)
        self.action_space = gym.spaces.Discrete(self.n)
        self.invalid_actions = 0
        self._t = 0
        self._target = 0
        self._valid = np.ones(self.n, dtype=bool)

    def _draw(self) -> None:
        self._target = int(self.np_random.integers(self.n))
        if self.random_masks:
            self._valid = self.np_random.random(self.n) < self.p_valid
        else:
            self._valid = np.ones(self.n, dtype=bool)
        self._valid[self._target] = True

    def _obs(self) -> np.ndarray:
        obs = np.zeros(2 * self.n, dtype=np.float32)
        obs[self._target] = 1.0
        obs[self.n:] = self._valid
        return obs

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"invalid_actions": self.invalid_actions}
        if self.masks in ("both", "info"):
            info["action_mask"] = self._valid.copy()
        return info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._draw()
        return self._obs(), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        action = int(action)
        self._t += 1
        if not self._valid[action]:
            self.invalid_actions += 1
            return self._obs(), -1.0, True, False, self._info()
        reward = 1.0 if action == self._target else 0.0
        self._draw()
        return self._obs(), reward, False, self._t >= self.length, self._info()

    def action_masks(self) -> np.ndarray:
        """The actions valid now (True), sb3-contrib's convention (where ``masks`` offers the method)."""
        if self.masks not in ("both", "method"):
            raise AttributeError("action_masks")  # as if the env had no such method
        return self._valid.copy()


def make_masked_choice(**kwargs: Any) -> gym.Env:
    """``MaskedChoice(**kwargs)`` (the registered factory)."""
    return MaskedChoice(**kwargs)


def make_masked_knapsack(**kwargs: Any) -> gym.Env:
    """``MaskedKnapsack(**kwargs)`` (the registered factory)."""
    return MaskedKnapsack(**kwargs)


MASKED_ENVS = {"MaskedChoice-v0": make_masked_choice, "MaskedKnapsack-v0": make_masked_knapsack}
