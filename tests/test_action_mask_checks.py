"""The vector check of the envs' masks (zoo.envs.masks.ActionMasks, one numpy pass a step) against the check of each
mask on its own (``_checked``, the reference): the same masks out where all are good, the same one-line error where
one is not, for Discrete and MultiDiscrete actions, bool and 0/1 masks, a wrong length and a component left with no
valid action."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from zoo.envs.masks import ActionMasks
from zoo.errors import EnvError


class Stub(gym.Env):
    def __init__(self, action_space: gym.Space) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = action_space

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        return np.zeros(1, dtype=np.float32), 0.0, False, False, {}


def _wrapper(space: gym.Space, num_envs: int = 4) -> ActionMasks:
    return ActionMasks(gym.vector.SyncVectorEnv([lambda: Stub(space)] * num_envs), "method", "Stub-v0")


def _reference(wrapper: ActionMasks, raw) -> np.ndarray | str:
    try:
        return np.stack([wrapper._checked(np.asarray(row), env) for env, row in enumerate(raw)])
    except EnvError as exc:
        return str(exc)


def _vector(wrapper: ActionMasks, raw) -> np.ndarray | str:
    try:
        return wrapper._all_checked(raw)
    except EnvError as exc:
        return str(exc)


@pytest.mark.parametrize("space", [gym.spaces.Discrete(4), gym.spaces.MultiDiscrete([3, 2, 2])])
def test_the_vector_check_agrees_with_each_masks_own_check(space):
    wrapper = _wrapper(space)
    wrapper.steps[:] = [3, 1, 4, 1]
    rng = np.random.default_rng(0)
    faults = 0
    for trial in range(300):
        rows = rng.random((4, wrapper.width)) < (0.4 if trial % 2 else 0.9)  # 0.4: often one with no valid action
        raw = tuple(rows.astype(np.int64)) if trial % 3 == 0 else tuple(rows)
        if trial % 7 == 0:
            raw = (*raw[:2], np.ones(wrapper.width + 1, dtype=bool), raw[3])  # one of the wrong length
        if trial % 11 == 0:
            raw = (raw[0], np.full(wrapper.width, 2), *raw[2:])  # values other than 0 and 1
        expected, got = _reference(wrapper, raw), _vector(wrapper, raw)
        if isinstance(expected, str):
            faults += 1
            assert got == expected
        else:
            assert isinstance(got, np.ndarray) and got.dtype == bool and np.array_equal(got, expected)
            assert not any(np.shares_memory(got, row) for row in raw)  # a copy: the env may reuse its arrays
    assert 30 < faults < 270  # both branches seen often
