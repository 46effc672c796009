"""Which observation spaces zoo flattens into a Box, and the one-line refusal of those that have no fixed-size flat
form (``zoo.envs.factory``'s module docstring says what each becomes)."""

from __future__ import annotations

import gymnasium as gym

from ..errors import ConfigError
from .masks import MaskFromObservation
from .wrappers import FlattenObservation

# Spaces that gymnasium flattens into a fixed-size Box (Dict and Tuple when all their parts are one of these).
FLAT_LEAVES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def unflattenable_part(space: gym.Space, path: str = "") -> tuple[str, gym.Space] | None:
    """The first (path, sub-space) of ``space`` with no fixed-size flat form, or None when it all flattens."""
    if isinstance(space, FLAT_LEAVES):
        return None
    if isinstance(space, gym.spaces.Dict):
        parts = [(f"{path}[{key!r}]", sub_space) for key, sub_space in space.spaces.items()]
    elif isinstance(space, gym.spaces.Tuple):
        parts = [(f"{path}[{index}]", sub_space) for index, sub_space in enumerate(space.spaces)]
    else:
        return path, space
    for part_path, sub_space in parts:
        found = unflattenable_part(sub_space, part_path)
        if found is not None:
            return found
    return None


def needs_flattening(env_id: str, space: gym.Space) -> bool:
    """False for a Box, True for a space that flattens into one; a one-line ConfigError for any other space."""
    if isinstance(space, gym.spaces.Box):
        return False
    found = unflattenable_part(space)
    if found is not None:
        path, part = found
        where = f" (a {type(part).__name__} at observation{path})" if path else ""
        raise ConfigError(
            f"env '{env_id}' has {type(space).__name__} observations{where}, which zoo cannot flatten into a Box: "
            f"wrap the env (e.g. in a gymnasium.ObservationWrapper) so that it gives Box or Dict-of-Box observations"
        )
    return True


def flattened(env_id: str, env: gym.Env, mask_key: str | None = None) -> gym.Env:
    """``env`` itself when its observations are a Box, else wrapped in ``FlattenObservation``; ``mask_key``: first
    the action mask moved out of the Dict observations into the infos (``MaskFromObservation``)."""
    if mask_key is not None:
        env = MaskFromObservation(env, mask_key, env_id)
    if not needs_flattening(env_id, env.observation_space):
        return env
    return FlattenObservation(env)
