"""The action mask of an exported graph: which runs take one, the observations and masks its check feeds, and which
exported actions a mask forbids.

A run exports with the mask as an input (``action_mask``: bool ``(N, width)``, True where an action is valid;
``width`` is ``n`` for ``Discrete(n)``, ``sum(nvec)`` for MultiDiscrete, the components' masks side by side) where
its env gives masks (``env.action_mask`` is not ``none`` and its vector env's first reset hands masks on,
``zoo.envs.masks``) and its policy takes them (``takes_action_mask``). The check's observations then come from that
same vector env (one sub-env, random valid actions), each with the mask the env gave with it; half of the check's
rows keep that mask and the other half get a mask with one valid action (per component) drawn at random, so that a
graph that ignores its mask fails the check even for a policy that learned to choose valid actions by itself (an
observation may show the valid actions, as ``MaskedChoice-v0``'s does).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ..envs import EnvSpec
from ..envs.masks import mask_components, mask_width, masks_of, random_valid_actions


def takes_masks(spec: EnvSpec, policy: Any) -> bool:
    """Whether a run's env may give masks its policy takes: ``env.action_mask`` not ``none``, Discrete or
    MultiDiscrete actions, and a policy with ``takes_action_mask`` (whether the env does give them shows at its
    first reset: ``sample_with_masks``)."""
    return (spec.action_mask != "none" and mask_width(policy.action_space) > 0
            and bool(getattr(policy, "takes_action_mask", False)))


def sample_with_masks(spec: EnvSpec, count: int, seed: int,
                      native: gym.Space | None) -> tuple[list[Any], np.ndarray] | None:
    """``count`` observations (as the env gives them: unflattened with ``native`` where zoo flattens them) and
    their masks ``(count, width)`` from one sub-env of the run's vector env, playing random valid actions from a
    reset with ``seed``; None where the env gives no masks. The last observation of an episode is left out (an
    autoreset step follows it: the action taken there is ignored)."""
    venv = spec.make_vector(1, seed=seed, mode="sync")
    try:
        space = venv.single_action_space
        width = mask_width(space)
        obs, infos = venv.reset(seed=seed)
        mask = masks_of(infos, 1, width)
        if mask is None:
            return None
        rng = np.random.default_rng(seed)
        observations: list[Any] = []
        masks: list[np.ndarray] = []
        ended = False
        while len(observations) < count:
            if not ended:
                observations.append(obs[0])
                masks.append(mask[0])
            obs, _, terminated, truncated, infos = venv.step(random_valid_actions(space, mask, rng))
            mask = masks_of(infos, 1, width)
            ended = bool(terminated[0] or truncated[0])
    finally:
        venv.close()
    if native is not None:
        observations = [gym.spaces.unflatten(native, o) for o in observations]
    return observations, np.stack(masks)


def check_masks(masks: np.ndarray, space: gym.Space, seed: int) -> np.ndarray:
    """The masks the check feeds: ``masks`` (the env's) with every other row, from the second, replaced by a mask
    with one valid action per component, drawn at random (the module docstring)."""
    nvec, _, offsets = mask_components(space)
    rng = np.random.default_rng(seed)
    mixed = masks.copy()
    for row in range(1, len(mixed), 2):
        mixed[row] = False
        mixed[row, offsets + rng.integers(0, nvec)] = True
    return mixed


def invalid_rows(actions: np.ndarray, masks: np.ndarray, space: gym.Space) -> np.ndarray:
    """``(N,)`` bools: which of the env ``actions`` (``(N, *action_shape)``) a row of ``masks`` forbids (any
    component's)."""
    nvec, start, offsets = mask_components(space)
    index = np.asarray(actions, np.int64).reshape(len(actions), -1) - start
    inside = (index >= 0) & (index < nvec)
    columns = np.clip(index, 0, nvec - 1) + offsets
    valid = np.take_along_axis(np.asarray(masks, bool), columns, axis=1) & inside
    return ~valid.all(axis=1)


__all__ = ["check_masks", "invalid_rows", "sample_with_masks", "takes_masks"]
