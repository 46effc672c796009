"""Where action masks come from (``env.action_mask``): every vector env zoo builds hands them on in its infos.

An env marks the actions that are valid in its current state by one of:

- a method ``action_masks()`` (sb3-contrib's convention: MaskablePPO's envs work unchanged), read after every reset
  and step (through wrappers, ``get_wrapper_attr``);
- ``info["action_mask"]`` returned by ``reset`` and ``step``.

``env.action_mask`` names the source: ``auto`` (the method where the env has one, it wins over an info key, as in
sb3-contrib; else the info key where the first reset gives one; else no masks), ``method``, ``info`` or ``none``
(the default: masks ignored). A mask is bools (or 0/1), ``(n,)`` for ``Discrete(n)`` (index ``i``: action
``start + i``) and ``(sum(nvec),)`` for MultiDiscrete (the components' masks side by side); True: valid.

``ActionMasks`` wraps the vector env: after every reset and step ``infos[MASK_KEY]`` is ``(num_envs, width)``
bool, each row the mask of that sub-env's current observation (after an autoreset step, the new episode's first).
Each mask is checked: its shape, and at least one valid action (each component's, MultiDiscrete): an env that
offers none stops the run with an error naming the env, the sub-env and the step, never a NaN later. The envs of
the EnvPool backend give no masks (``auto`` is none there; another source is refused).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ..errors import ConfigError, EnvError

MASK_SOURCES = ("auto", "none", "info", "method")
"""The values of ``env.action_mask``."""
MASK_KEY = "zoo_action_mask"
"""The key of the checked masks in a vector env's infos (``ActionMasks``): not the env's own ``action_mask``, which
gymnasium's vector infos carry too, so that ``env.action_mask=none`` really ignores it."""


def mask_width(action_space: gym.Space) -> int:
    """The length of a mask of ``action_space``: ``n`` (Discrete), ``sum(nvec)`` (MultiDiscrete), else 0."""
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return int(np.sum(action_space.nvec))
    return 0


def masks_of(infos: dict[str, Any], num_envs: int, width: int) -> np.ndarray | None:
    """The ``(num_envs, width)`` bool masks in a vector env's ``infos`` (``ActionMasks``'), or None without."""
    masks = infos.get(MASK_KEY) if isinstance(infos, dict) else None
    if masks is None:
        return None
    return np.asarray(masks, dtype=bool).reshape(num_envs, width)


class ActionMasks(gym.vector.VectorWrapper):
    """``infos[MASK_KEY]`` ``(num_envs, width)`` after every reset and step (the module docstring).

    Arguments:
        env: the vector env (NEXT_STEP autoreset).
        source: ``auto``, ``info`` or ``method`` (``none``: do not wrap).
        env_id: the env's name, for messages.
    """

    def __init__(self, env: gym.vector.VectorEnv, source: str, env_id: str) -> None:
        super().__init__(env)
        space = env.single_action_space
        self.width = mask_width(space)
        if self.width == 0 and source != "auto":
            raise ConfigError(f"env.action_mask={source}, but env '{env_id}' has {space} actions: masks are for "
                              f"Discrete and MultiDiscrete actions; set env.action_mask=none")
        self.source, self.env_id = source, env_id
        self.nvec = np.asarray(space.nvec).reshape(-1) if isinstance(space, gym.spaces.MultiDiscrete) else None
        # Where each component's mask starts in a row (one component for Discrete).
        self.starts = np.zeros(1, dtype=np.int64) if self.nvec is None else np.cumsum([0, *self.nvec[:-1]])
        self.steps = np.zeros(env.num_envs, dtype=np.int64)  # each sub-env's step in its episode, for messages
        self._ended = np.zeros(env.num_envs, dtype=bool)  # which sub-envs ended at the last step (autoreset next)
        self.active: str | None = None  # the source in use, decided at the first reset (auto)

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        if self.active is None:
            self.active = self._decide(infos)
        self.steps[:] = 0
        self._ended[:] = False
        return obs, self._with_masks(infos)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        obs, reward, terminated, truncated, infos = self.env.step(actions)
        self.steps += 1
        self.steps[self._ended] = 0  # the step after an episode's end was its autoreset: a new episode's step 0
        self._ended = np.logical_or(terminated, truncated)
        return obs, reward, terminated, truncated, self._with_masks(infos)

    def _decide(self, infos: dict[str, Any]) -> str:
        if self.width == 0:
            return "none"
        has_method = self._has_method()
        if self.source == "method" and not has_method:
            raise ConfigError(f"env.action_mask=method, but env '{self.env_id}' has no action_masks() method: give "
                              f"it one, or set env.action_mask to info or none")
        if self.source == "info" and "action_mask" not in infos:
            raise ConfigError(f"env.action_mask=info, but env '{self.env_id}' gives no info['action_mask'] at "
                              f"reset: set env.action_mask to method or none")
        if self.source == "auto":
            return "method" if has_method else ("info" if "action_mask" in infos else "none")
        return self.source

    def _has_method(self) -> bool:
        try:
            self.env.unwrapped.call("action_masks")
        except AttributeError:
            return False
        return True

    def _with_masks(self, infos: dict[str, Any]) -> dict[str, Any]:
        if self.active in (None, "none"):
            return infos
        if self.active == "method":
            raw = self.env.unwrapped.call("action_masks")
        else:
            raw = infos.get("action_mask")
            if raw is None or ("_action_mask" in infos and not np.all(infos["_action_mask"])):
                missing = 0 if raw is None else int(np.flatnonzero(~np.asarray(infos["_action_mask"]))[0])
                raise EnvError(f"env '{self.env_id}' gave no info['action_mask'] for sub-env {missing} at step "
                               f"{int(self.steps[missing])} of its episode: give one with every reset and step")
        return {**infos, MASK_KEY: self._all_checked(raw)}

    def _all_checked(self, raw: Any) -> np.ndarray:
        """The ``(num_envs, width)`` bool masks of ``raw`` (one per sub-env, copied), checked in one pass of numpy;
        where that finds a fault, ``_checked`` of each in turn names the first sub-env at fault (no message is
        formatted at a step without one)."""
        try:
            masks = np.array(raw)
        except ValueError:  # rows of different lengths
            masks = None
        if masks is not None and masks.shape == (self.num_envs, self.width) and masks.dtype != object:
            if masks.dtype != bool and np.isin(masks, (0, 1)).all():
                masks = masks.astype(bool)
            if masks.dtype == bool and np.logical_or.reduceat(masks, self.starts, axis=1).all():
                return masks  # every sub-env has a valid action (in each component)
        return np.stack([self._checked(np.asarray(row), env) for env, row in enumerate(raw)])

    def _checked(self, mask: np.ndarray, env: int) -> np.ndarray:
        where = f"env '{self.env_id}' (sub-env {env}, step {int(self.steps[env])} of its episode)"
        if mask.shape != (self.width,):
            raise EnvError(f"{where} gave an action mask of shape {mask.shape}, expected ({self.width},): one bool "
                           f"per action (MultiDiscrete: the components' side by side)")
        if mask.dtype != bool:
            if not np.isin(mask, (0, 1)).all():
                raise EnvError(f"{where} gave an action mask with values other than 0 and 1: {mask.tolist()}")
            mask = mask.astype(bool)
        parts = [mask] if self.nvec is None else np.split(mask, np.cumsum(self.nvec)[:-1])
        if not all(part.any() for part in parts):
            scope = "" if self.nvec is None else " in a component"
            raise EnvError(f"{where} gave an action mask with no valid action{scope}: {mask.astype(int).tolist()}; "
                           f"an env must leave at least one action valid")
        return mask


def with_action_masks(venv: gym.vector.VectorEnv, source: str, env_id: str) -> gym.vector.VectorEnv:
    """``venv`` wrapped in ``ActionMasks`` for ``source`` (``env.action_mask``), or as it is for ``none``."""
    if source not in MASK_SOURCES:
        raise ConfigError(f"env.action_mask must be one of {', '.join(MASK_SOURCES)}, got {source!r}")
    if source == "none" or (source == "auto" and mask_width(venv.single_action_space) == 0):
        return venv  # nothing to mask: no wrapper, no cost
    return ActionMasks(venv, source, env_id)
