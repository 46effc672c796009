"""``MaskedKnapsack-v0``: fill a knapsack, one item a step; the task where action masks matter (zoo.envs.masks).

Each episode draws ``n`` items, each with a value in [0, 1) and a weight in [``min_weight``, 1), and a knapsack of
``capacity``. Action ``i < n`` puts item ``i`` in and scores its value; action ``n`` stops (always valid, scores 0).
An item is valid while it is not taken and its weight fits in the room left; taking an invalid one (again, or too
heavy) scores ``invalid_reward`` (-1) and ends the episode. The episode also ends when no item left fits. The
observation is the values, the weights, which items are taken and the room left (``3n + 1`` floats): never the mask
itself, so that a policy without masks must learn the rules (an item once taken is gone; a weight above the room
left does not fit) before it can learn which items are worth their weight, where a masked policy only learns the
latter. Pure numpy: a step and its mask take about 9 us here.

At the defaults (20 items, capacity 3, weights from 0.1), over 1,000 episodes: a random valid item each step scores
3.09 an episode, the greedy choice by value 4.88, by value per weight 5.38; no policy's mean can pass 5.58, the
fractional knapsack's value (an item may be cut); taking the most valuable item then stopping scores 0.95.

``masks`` says how the env gives its masks: ``both`` (an ``action_masks()`` method, sb3-contrib's convention, and
``info["action_mask"]``), ``method``, ``info`` or ``none``. ``invalid_actions`` counts the invalid actions taken
since the env was made. ``reset(options={"values": ..., "weights": ...})`` sets an episode's items by hand. The
module imports gymnasium and numpy only: benchmarks/maskable_speed.py loads this file alone into sb3-contrib's venv,
so that MaskablePPO trains on the same class.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["MaskedKnapsack"]

MASK_MODES = ("both", "method", "info", "none")


class MaskedKnapsack(gym.Env):
    """See the module docstring."""

    metadata = {"render_modes": []}

    def __init__(self, n: int = 20, capacity: float = 3.0, min_weight: float = 0.1, invalid_reward: float = -1.0,
                 masks: str = "both") -> None:
        if masks not in MASK_MODES:
            raise ValueError(f"masks must be both, method, info or none, got {masks!r}")
        if not 0.0 < min_weight < 1.0 or capacity < 1.0:
            raise ValueError(f"need 0 < min_weight < 1 <= capacity (every item fits an empty knapsack), got "
                             f"min_weight={min_weight}, capacity={capacity}")
        self.n, self.capacity, self.min_weight = int(n), float(capacity), float(min_weight)
        self.invalid_reward, self.masks = float(invalid_reward), masks
        self.observation_space = gym.spaces.Box(0.0, max(1.0, self.capacity), (3 * self.n + 1,), np.float32)
        self.action_space = gym.spaces.Discrete(self.n + 1)
        self.invalid_actions = 0
        self.values = np.zeros(self.n)
        self.weights = np.ones(self.n)
        self.taken = np.zeros(self.n, dtype=bool)
        self.room = self.capacity
        # The mask, worked out once per state (the method, the info and the end-of-episode check all read it).
        self._valid = np.ones(self.n + 1, dtype=bool)

    def valid_actions(self) -> np.ndarray:
        """``(n + 1,)`` bool: the items not taken that fit in the room left, then stop (always valid)."""
        return self._valid.copy()

    def _update(self) -> None:
        np.less_equal(self.weights, self.room, out=self._valid[:-1])
        self._valid[:-1] &= ~self.taken

    def _obs(self) -> np.ndarray:
        obs = np.empty(3 * self.n + 1, dtype=np.float32)
        obs[: self.n], obs[self.n: 2 * self.n], obs[2 * self.n: 3 * self.n] = self.values, self.weights, self.taken
        obs[-1] = self.room
        return obs

    def _info(self) -> dict[str, Any]:
        # Nothing else in the info: a gymnasium vector env merges every key of every sub-env's info at every step.
        return {"action_mask": self._valid.copy()} if self.masks in ("both", "info") else {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.values = self.np_random.random(self.n)
        self.weights = self.np_random.uniform(self.min_weight, 1.0, self.n)
        for key in ("values", "weights"):  # an episode's items given by hand (tests, hand-made cases)
            if options and key in options:
                setattr(self, key, np.array(options[key], dtype=np.float64).reshape(self.n))
        self.taken = np.zeros(self.n, dtype=bool)
        self.room = self.capacity
        self._update()
        return self._obs(), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        action = int(action)
        if action == self.n:
            return self._obs(), 0.0, True, False, self._info()
        if not (0 <= action < self.n and self._valid[action]):
            self.invalid_actions += 1
            return self._obs(), self.invalid_reward, True, False, self._info()
        self.taken[action] = True
        self.room -= self.weights[action]
        self._update()
        full = not self._valid[:-1].any()  # nothing left fits: the episode is over
        return self._obs(), float(self.values[action]), full, False, self._info()

    def action_masks(self) -> np.ndarray:
        """The actions valid now (True), sb3-contrib's convention (where ``masks`` offers the method)."""
        if self.masks not in ("both", "method"):
            raise AttributeError("action_masks")  # as if the env had no such method
        return self._valid.copy()
