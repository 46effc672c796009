"""``EnvSpec``: the ``env`` section of a config, as the one object everything that builds an env goes through.

Training, actors, evaluation, ``zoo eval``, ``zoo.load`` and videos all build their envs from a spec: the id
(a zoo registry name or a gymnasium id), its keyword arguments and the episode time limit, applied the same way
everywhere. ``spaces()`` builds one env to read its (flattened) observation and action spaces.

``backend`` picks what steps the envs: ``"gymnasium"`` (Python, the default) or ``"envpool"`` (EnvPool's C++ threads,
``zoo.envs.envpool_backend``); every caller gets the same gymnasium API and zoo's semantics from either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from ..errors import ConfigError
from .factory import make_env, make_vector_env
from .masks import MASK_KEY, check_source, with_action_masks

BACKENDS = ("gymnasium", "envpool")


@dataclass(frozen=True)
class EnvSpec:
    """An env to build: ``id``, ``kwargs`` (for the factory or ``gym.make``; EnvPool's options on its backend),
    ``max_episode_steps`` (a time limit, truncation; None: the env's own) and ``backend`` (see the module
    docstring).

    Examples:
        >>> spec = EnvSpec("CartPole-v1", max_episode_steps=200)
        >>> venv = spec.make_vector(8, seed=0)
        >>> observation_space, action_space = spec.spaces()
    """

    id: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    max_episode_steps: int | None = None
    backend: str = "gymnasium"
    action_mask: str = "none"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"env.backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        check_source(self.action_mask)
        if self.envpool and self.action_mask not in ("auto", "none"):
            raise ConfigError(f"env.action_mask={self.action_mask}: the envpool backend's envs give no action masks; "
                              f"set env.backend=gymnasium, or env.action_mask=none")

    @property
    def mask_key(self) -> str | None:
        """The Dict observations' key that holds the action mask (``env.action_mask=obs:<key>``), else None."""
        return check_source(self.action_mask)

    @property
    def envpool(self) -> bool:
        """Whether EnvPool steps the envs."""
        return self.backend == "envpool"

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> EnvSpec:
        """The spec of a resolved config's ``env`` section."""
        env = cfg["env"]
        return cls(env["id"], dict(env.get("kwargs") or {}), env.get("max_episode_steps"),
                   env.get("backend") or "gymnasium",  # a run directory from before env.backend has none
                   env.get("action_mask") or "none")  # nor one from before env.action_mask: no masks

    def make(self, **extra_kwargs: Any) -> gym.Env:
        """One env, time limit applied; ``extra_kwargs`` (e.g. ``render_mode``) join the spec's kwargs."""
        if self.envpool:
            from .envpool_backend import make_envpool_env

            return make_envpool_env(self.id, {**self.kwargs, **extra_kwargs}, self.max_episode_steps)
        env = make_env(self.id, mask_key=self.mask_key, **{**self.kwargs, **extra_kwargs})
        if self.max_episode_steps is not None:
            env = gym.wrappers.TimeLimit(env, self.max_episode_steps)
        return env

    def make_vector(self, num_envs: int, seed: int | None = None, mode: str = "auto",
                    **extra_kwargs: Any) -> gym.vector.VectorEnv:
        """A NEXT_STEP-autoreset vector env of ``num_envs`` copies (see ``make_vector_env``)."""
        if self.envpool:
            from .envpool_backend import make_envpool_vector_env

            return make_envpool_vector_env(self.id, num_envs, seed=seed, mode=mode,
                                           env_kwargs={**self.kwargs, **extra_kwargs},
                                           max_episode_steps=self.max_episode_steps)
        venv = make_vector_env(self.id, num_envs, seed=seed, mode=mode, env_kwargs={**self.kwargs, **extra_kwargs},
                               mask_key=self.mask_key,
                               max_episode_steps=self.max_episode_steps)
        try:
            return with_action_masks(venv, self.action_mask, self.id)  # infos["action_mask"] (zoo.envs.masks)
        except ConfigError:
            venv.close()
            raise

    def mask_width(self) -> int:
        """The width of the action masks this spec's vector envs give (``env.action_mask``; zoo.envs.masks), 0 where
        they give none (``none``, actions that take no mask, ``auto`` on an env without masks). Builds and resets
        one env to know where the source is not ``none``."""
        if self.action_mask == "none" or self.envpool:
            return 0
        venv = self.make_vector(1, seed=0, mode="sync")
        try:
            _, infos = venv.reset(seed=0)
            return int(np.shape(infos[MASK_KEY])[-1]) if MASK_KEY in infos else 0
        finally:
            venv.close()

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        """The observation space (flattened into a Box where the env's is not one) and the action space."""
        env = self._make_plain()  # built each time: spaces carry RNGs that callers must not share
        try:
            return env.observation_space, env.action_space
        finally:
            env.close()

    def native_observation_space(self) -> gym.Space | None:
        """The env's own observation space where zoo flattens it (Dict, Tuple, Discrete...), else None."""
        env = self._make_plain()
        try:
            return env.env.observation_space if isinstance(env, gym.wrappers.FlattenObservation) else None
        finally:
            env.close()

    def _make_plain(self) -> gym.Env:
        """One env without the time limit (to read its spaces)."""
        if self.envpool:
            from .envpool_backend import make_envpool_env

            return make_envpool_env(self.id, dict(self.kwargs))
        return make_env(self.id, mask_key=self.mask_key, **self.kwargs)
