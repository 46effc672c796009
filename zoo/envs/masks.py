"""Where action masks come from (``env.action_mask``): every vector env zoo builds hands them on in its infos.

An env marks the actions that are valid in its current state by one of:

- a method ``action_masks()`` (sb3-contrib's convention: MaskablePPO's envs work unchanged), read after every reset
  and step (through wrappers, ``get_wrapper_attr``);
- ``info["action_mask"]`` returned by ``reset`` and ``step``;
- a key of its Dict observations (``MaskFromObservation`` moves it into the info before the rest is flattened).

``env.action_mask`` names the source: ``auto`` (the method where the env has one, it wins over an info key, as in
sb3-contrib; else the info key where the first reset gives one; else no masks), ``method``, ``info``,
``obs:<key>`` or ``none`` (the default: masks ignored). A mask is bools (or 0/1), ``(n,)`` for ``Discrete(n)``
(index ``i``: action ``start + i``) and ``(sum(nvec),)`` for MultiDiscrete (the components' masks side by side);
True: valid.

``ActionMasks`` wraps the vector env: after every reset and step ``infos[MASK_KEY]`` is ``(num_envs, width)``
bool, each row the mask of that sub-env's current observation. With gymnasium's NEXT_STEP autoreset, the step that
ends an episode returns its final observation with the final observation's mask (the sub-env resets only at the
next step), and the autoreset step after it returns the new episode's first observation with that one's mask: so a
replay's ``next_action_mask`` of a truncated transition is the mask of the final observation it bootstraps from.
Each mask is checked: its shape, and at least one valid action (each component's, MultiDiscrete): an env that
offers none stops the run with an error naming the env, the sub-env and the step, never a NaN later (but at an
episode's final observation, from which no action is taken, a mask without a valid action, a full board, is given
as all valid). The envs of the EnvPool backend give no masks (``auto`` is none there; another source is refused).
``EnvMasks`` reads and checks the masks of one env alike, for what plays a single env (videos).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from ..errors import ConfigError, EnvError

MASK_SOURCES = ("auto", "none", "info", "method")
"""The values of ``env.action_mask`` besides ``obs:<key>``."""
OBS_PREFIX = "obs:"
"""``env.action_mask=obs:<key>``: the mask is the Dict observations' ``key`` (``MaskFromObservation``)."""
MASK_KEY = "zoo_action_mask"
"""The key of the checked masks in a vector env's infos (``ActionMasks``): not the env's own ``action_mask``, which
gymnasium's vector infos carry too, so that ``env.action_mask=none`` really ignores it."""


def check_source(source: str) -> str | None:
    """The observation key of ``env.action_mask=source`` (``obs:<key>``), None for the other sources; a one-line
    ConfigError for a value that is none of them."""
    if isinstance(source, str) and source.startswith(OBS_PREFIX) and len(source) > len(OBS_PREFIX):
        return source[len(OBS_PREFIX):]
    if source not in MASK_SOURCES:
        raise ConfigError(f"env.action_mask must be one of {', '.join(MASK_SOURCES)} or obs:<key> (a Dict "
                          f"observation's key), got {source!r}")
    return None


class MaskFromObservation(gym.Wrapper):
    """Moves the action mask out of a Dict observation (its ``key``, ``env.action_mask=obs:<key>``) into
    ``info["action_mask"]`` of every reset and step: the policy sees the other keys (flattened), the mask is read
    as an info mask. A one-line ConfigError where the observations are not a Dict with ``key`` and another key."""

    def __init__(self, env: gym.Env, key: str, env_id: str) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Dict) or key not in space.spaces:
            found = (f"Dict observations with keys {', '.join(map(str, space.spaces))}"
                     if isinstance(space, gym.spaces.Dict) else f"{type(space).__name__} observations")
            raise ConfigError(f"env.action_mask={OBS_PREFIX}{key}, but env '{env_id}' has {found}: name the key "
                              f"of its mask, or another source (auto, method, info)")
        rest = {name: part for name, part in space.spaces.items() if name != key}
        if not rest:
            raise ConfigError(f"env.action_mask={OBS_PREFIX}{key}: env '{env_id}' observes nothing but its mask")
        self.key = key
        self.observation_space = gym.spaces.Dict(rest)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        return self._split(obs, info)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs, info = self._split(obs, info)
        return obs, reward, terminated, truncated, info

    def _split(self, obs: dict[str, Any], info: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        rest = {name: value for name, value in obs.items() if name != self.key}
        return rest, {**info, "action_mask": np.asarray(obs[self.key])}


def component_sizes(space: gym.Space) -> np.ndarray | None:
    """A MultiDiscrete space's component sizes, flat (its masks' parts side by side); None for any other space."""
    return np.asarray(space.nvec).reshape(-1) if isinstance(space, gym.spaces.MultiDiscrete) else None


def component_offsets(sizes: np.ndarray) -> np.ndarray:
    """Where each component's part of a mask row starts (its first column), for components of ``sizes``:
    ``[0, sizes[0], sizes[0] + sizes[1], ...]``; ``offsets[1:]`` are the points that ``np.split`` a row at."""
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


class MaskComponents(NamedTuple):
    """The components of a Discrete or MultiDiscrete action space (one for Discrete), flat: ``sizes`` (how many
    values each takes), ``starts`` (the action value of each one's first value, the space's ``start``) and
    ``offsets`` (the mask column where each one's part of a mask row starts, ``component_offsets``)."""

    sizes: np.ndarray
    starts: np.ndarray
    offsets: np.ndarray


def mask_components(space: gym.Space) -> MaskComponents:
    """The ``MaskComponents`` of a Discrete (one component) or MultiDiscrete ``space``; a TypeError for any other
    space (whose actions take no mask)."""
    if isinstance(space, gym.spaces.Discrete):
        sizes, starts = np.array([int(space.n)]), np.array([int(space.start)])
    elif isinstance(space, gym.spaces.MultiDiscrete):
        sizes = component_sizes(space)
        starts = np.broadcast_to(np.asarray(space.start), space.shape).reshape(-1)
    else:
        raise TypeError(f"{space} actions take no mask: masks are for Discrete and MultiDiscrete actions")
    return MaskComponents(sizes, starts, component_offsets(sizes))


def mask_width(action_space: gym.Space) -> int:
    """The length of a mask of ``action_space``: ``n`` (Discrete), ``sum(nvec)`` (MultiDiscrete), else 0."""
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return int(np.sum(action_space.nvec))
    return 0


def random_valid_actions(space: gym.Space, masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One uniformly random action of ``space`` (a sub-env's Discrete or MultiDiscrete space) per row of ``masks``
    ``(N, width)``, among the valid ones (each component's, MultiDiscrete), drawn with ``rng``: what random steps
    take under masks (an unmasked draw would take invalid actions)."""
    keys = np.where(masks, rng.random(masks.shape), -1.0)  # the largest key of the valid ones: uniform among them
    if isinstance(space, gym.spaces.Discrete):
        return (space.start + keys.argmax(-1)).astype(space.dtype)
    _, starts, offsets = mask_components(space)
    parts = np.split(keys, offsets[1:], axis=-1)
    actions = starts + np.stack([part.argmax(-1) for part in parts], -1)
    return actions.astype(space.dtype).reshape(len(masks), *space.shape)


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
        self.nvec = component_sizes(space)
        # Where each component's mask starts in a row (one component for Discrete).
        self.starts = mask_components(space).offsets if self.width else np.zeros(1, dtype=np.int64)
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
        return decide_source(self.source, self.width, self._has_method, "action_mask" in infos, self.env_id)

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
        return checked_mask(mask, self.width, self.nvec, where, final=bool(self._ended[env]))


class EnvMasks:
    """The checked action mask of one (not vector) env's current observation, for what plays a single env
    (``zoo eval --video``): ``read(info)`` after every reset and step, None where the env gives no masks.

    Arguments:
        env: the env (built by ``EnvSpec.make``, which moves an ``obs:<key>`` mask into the info).
        source: ``env.action_mask``.
        env_id: the env's name, for messages.
    """

    def __init__(self, env: gym.Env, source: str, env_id: str) -> None:
        space = env.action_space
        self.env, self.env_id = env, env_id
        self.source = "info" if source.startswith(OBS_PREFIX) else source
        self.width = 0 if source == "none" else mask_width(space)
        self.nvec = component_sizes(space)
        self.active: str | None = None
        self.step = 0

    def read(self, info: dict[str, Any], reset: bool = False, final: bool = False) -> np.ndarray | None:
        """The mask of the observation that came with ``info`` (``reset``: the first of an episode; ``final``: its
        last, after which no action is taken)."""
        if self.width == 0:
            return None
        self.step = 0 if reset else self.step + 1
        if self.active is None:
            self.active = decide_source(self.source, self.width, self._has_method, "action_mask" in info,
                                        self.env_id)
        where = f"env '{self.env_id}' (step {self.step} of its episode)"
        if self.active == "none":
            return None
        if self.active == "method":
            raw = self.env.get_wrapper_attr("action_masks")()
        elif "action_mask" not in info:
            raise EnvError(f"{where} gave no info['action_mask']: give one with every reset and step")
        else:
            raw = info["action_mask"]
        return checked_mask(np.asarray(raw), self.width, self.nvec, where, final=final)

    def _has_method(self) -> bool:
        try:
            self.env.get_wrapper_attr("action_masks")()
        except AttributeError:
            return False
        return True


def decide_source(source: str, width: int, has_method: Any, has_info: bool, env_id: str) -> str:
    """The source in use (``method``, ``info`` or ``none``) for ``env.action_mask=source`` on an env whose actions'
    masks are ``width`` wide (0: actions that take none), ``has_method()`` saying whether it has ``action_masks()``
    and ``has_info`` whether its first reset gave ``info["action_mask"]``; a ConfigError for a source it lacks."""
    if width == 0:
        return "none"
    if source == "method" and not has_method():
        raise ConfigError(f"env.action_mask=method, but env '{env_id}' has no action_masks() method: give it one, or "
                          f"set env.action_mask to info or none")
    if source == "info" and not has_info:
        raise ConfigError(f"env.action_mask=info, but env '{env_id}' gives no info['action_mask'] at reset: set "
                          f"env.action_mask to method or none")
    if source == "auto":
        return "method" if has_method() else ("info" if has_info else "none")
    return source


def checked_mask(mask: np.ndarray, width: int, nvec: np.ndarray | None, where: str, final: bool = False) -> np.ndarray:
    """``mask`` as ``(width,)`` bool, or an EnvError naming ``where`` for a wrong shape, values other than 0 and 1,
    or no valid action (in a component, MultiDiscrete: ``nvec``). ``final``: the mask of an episode's final
    observation, from which no action is taken: one without a valid action (a full board) is given as all valid,
    so that nothing downstream (a target's max over valid actions) meets an empty mask."""
    if mask.shape != (width,):
        raise EnvError(f"{where} gave an action mask of shape {mask.shape}, expected ({width},): one bool per "
                       f"action (MultiDiscrete: the components' side by side)")
    if mask.dtype != bool:
        if not np.isin(mask, (0, 1)).all():
            raise EnvError(f"{where} gave an action mask with values other than 0 and 1: {mask.tolist()}")
        mask = mask.astype(bool)
    parts = [mask] if nvec is None else np.split(mask, component_offsets(nvec)[1:])
    if final and not all(part.any() for part in parts):
        return np.ones(width, dtype=bool)
    if not all(part.any() for part in parts):
        scope = "" if nvec is None else " in a component"
        raise EnvError(f"{where} gave an action mask with no valid action{scope}: {mask.astype(int).tolist()}; an "
                       f"env must leave at least one action valid")
    return mask


def with_action_masks(venv: gym.vector.VectorEnv, source: str, env_id: str) -> gym.vector.VectorEnv:
    """``venv`` wrapped in ``ActionMasks`` for ``source`` (``env.action_mask``), or as it is for ``none``
    (``obs:<key>``: the sub-envs moved the mask into their infos, ``MaskFromObservation``)."""
    if check_source(source) is not None:
        source = "info"
    if source == "none" or (source == "auto" and mask_width(venv.single_action_space) == 0):
        return venv  # nothing to mask: no wrapper, no cost
    return ActionMasks(venv, source, env_id)
