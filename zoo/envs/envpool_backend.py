"""EnvPool as an env backend (``env.backend = "envpool"``): the envs step in EnvPool's C++ threads, and zoo sees one
NEXT_STEP vector env with gymnasium's semantics, behind the same wrappers and collector as the gymnasium backend.

EnvPool (``pip install 'zoo-rl[envpool]'``) has its own ids (``envpool.list_all_envs()``: ``Hopper-v5``,
``CartPole-v1``, ``Pong-v5``...) and options (``env.kwargs``: its config keys, e.g. ``episodic_life`` for Atari,
``num_threads``). Where its conventions differ from gymnasium's, ``EnvPoolVectorEnv`` adapts them
(tests/test_envpool_backend.py pins each against the gymnasium backend on the same env):

- Time limits: EnvPool reports a step that both ends the episode and reaches its time limit as truncated only,
  so a fall at the last step would bootstrap. zoo gives EnvPool an unreachable limit and applies the limit itself
  from ``info["elapsed_step"]``: ``truncated`` where the limit is reached, ``terminated`` as the env says, both
  where both hold (gymnasium's ``TimeLimit``). A sub-env zoo truncated is reset at the next step (an autoreset
  step: its action ignored, reward 0), as EnvPool resets the sub-envs it ended itself. The limit is
  ``env.max_episode_steps``, else EnvPool's own for the id (1000 for Hopper-v5, 500 for CartPole-v1, 27000 for
  Atari: the 108,000 frames of ALE v5). Under ``episodic_life`` ``elapsed_step`` counts a whole game.
- Seeds: EnvPool seeds its envs once, when the pool is built (int32 seeds; ``reset(seed=...)`` is ignored with a
  warning). Here ``reset(seed=s)`` builds the pool again with seed ``s`` (unless it is the fresh pool of that seed),
  so the same seed gives the same episodes, as with gymnasium; a seed beyond int32 is folded into it.
- Dtypes: a float64 Box action space (EnvPool's MuJoCo) is declared float32 as gymnasium's is; actions are cast to
  the pool's dtype (int32 for Discrete, float64 for MuJoCo), rewards returned as float64 (EnvPool: float32), as
  gymnasium's ``SyncVectorEnv`` returns them.
- Atari (``Pong-v5``...): EnvPool preprocesses in C++ (no-op starts, frame skip 4 with max-pooling, 84x84
  grayscale, 4-frame stack, newest last: the shapes and frame order of zoo's ``atari`` env), but its defaults
  differ from zoo's gymnasium ``atari`` env: no sticky actions (``repeat_action_probability=0``), FIRE pressed
  after reset (``use_fire_reset``), and ``episodic_life`` continues the game after a lost life (the gymnasium
  wrapper's ``terminal_on_life_loss`` starts a new game), so episodes are lives and returns are per life there.
  ``noop_max=0`` crashes EnvPool 1.2 and is refused.
- State: EnvPool's envs keep their state in C++ with no API to read or set it, so a checkpoint cannot hold their
  episodes: the resume says so in one line and starts fresh ones (``zoo.envs.state``), never silently.

Observations that are not a Box (DMC's Dict) are flattened as on the gymnasium backend.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import os
import warnings
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import load_env_creator
from gymnasium.vector import AutoresetMode

from ..errors import ConfigError, ZooError, first_line
from .state import EnvNotCaptured

INSTALL_HINT = "pip install 'zoo-rl[envpool]'"
# EnvPool's limit while zoo applies the time limit (large, and safe from int32 overflow in Atari's frame counts).
_UNREACHABLE_STEPS = 100_000_000
# Config keys zoo sets itself, with the config key that says what the user wants instead.
_ZOO_SETS = {"num_envs": "pipeline.num_envs", "batch_size": "pipeline.num_envs (EnvPool's synchronous mode)",
             "seed": "seed", "env_seed": "seed", "max_episode_steps": "env.max_episode_steps",
             "gym_reset_return_info": "nothing (zoo needs the reset infos)"}
_WRAPPER_OPTIONS = ("render_mode", "render_env_id", "render_width", "render_height", "render_camera_id")
_INT32 = 2**31


def import_envpool() -> Any:
    """The ``envpool`` module, or a one-line ZooError naming the extra that installs it."""
    try:
        return importlib.import_module("envpool")
    except ImportError as exc:
        raise ZooError(f"env.backend 'envpool' needs the envpool package, which could not be imported "
                       f"({first_line(exc, 120)}): {INSTALL_HINT}") from None


def _unknown_id_error(env_id: str, known: list[str]) -> ConfigError:
    plain = env_id.split("/", 1)[1] if env_id.startswith("ALE/") else None
    if plain in known:
        return ConfigError(f"EnvPool names gymnasium's '{env_id}' '{plain}': set env.id='{plain}' (EnvPool's "
                           f"preprocessing included), or env.backend=gymnasium")
    if env_id == "atari":
        return ConfigError("env.id 'atari' is zoo's gymnasium Atari env: EnvPool's Atari ids are '<Game>-v5' (e.g. "
                           "env.id='Pong-v5', its options in env.kwargs), or use env.backend=gymnasium")
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
    hint = f"closest EnvPool ids: {', '.join(close)}; " if close else ""
    return ConfigError(f"EnvPool has no env '{env_id}' ({hint}envpool.list_all_envs() lists its ids): use "
                       f"env.backend=gymnasium for it")


def check_envpool_env(env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """EnvPool's default config of ``env_id`` after checking that it has that id and takes ``kwargs``; one-line
    ConfigErrors naming an unknown id or option and the gymnasium backend (a gymnasium-only option is named as
    such)."""
    envpool = import_envpool()
    known = envpool.list_all_envs()
    if env_id not in known:
        raise _unknown_id_error(env_id, known)
    config = dict(envpool.make_spec(env_id).config._asdict())
    for key in kwargs:
        if key in _ZOO_SETS:
            raise ConfigError(f"env.kwargs.{key} is set by zoo on the envpool backend: set {_ZOO_SETS[key]} instead")
        if key not in config and key not in _WRAPPER_OPTIONS:
            options = sorted(set(config) - set(_ZOO_SETS) - {"base_path", "max_num_players"})
            raise ConfigError(f"env.kwargs.{key} is {_gymnasium_only(env_id, key)}EnvPool's '{env_id}' does not "
                              f"take it (it takes: {', '.join(options)}): drop it, or use env.backend=gymnasium")
    if kwargs.get("render_mode") is not None and _is_mujoco(envpool, env_id) and not (
            os.environ.get("MUJOCO_GL") or os.environ.get("DISPLAY")):
        raise ZooError(f"rendering EnvPool's MuJoCo env '{env_id}' without a display needs an offscreen OpenGL (MuJoCo "
                       f"would end the process): set MUJOCO_GL=egl (or osmesa)")
    if kwargs.get("noop_max", 1) == 0 and "noop_max" in config:
        raise ConfigError("env.kwargs.noop_max=0 crashes EnvPool 1.2's Atari envs: use noop_max=1 (its starts "
                          "then have no random no-ops), or env.backend=gymnasium")
    return config


def _is_mujoco(envpool: Any, env_id: str) -> bool:
    """Whether EnvPool's ``env_id`` is one of its MuJoCo envs (its module under ``envpool.mujoco``)."""
    try:
        return str(envpool.registration.registry.specs[env_id][0]).startswith("envpool.mujoco")
    except Exception:  # another registry layout: assume not
        return False


def _gymnasium_only(env_id: str, key: str) -> str:
    """'a gymnasium option: ' when gymnasium's env of that id names ``key`` in its constructor, else 'unknown to
    EnvPool: '."""
    try:
        creator = gym.spec(env_id).entry_point
        creator = load_env_creator(creator) if isinstance(creator, str) else creator
        named = key in inspect.signature(creator).parameters
    except Exception:  # no gymnasium env of that id, or no signature to read
        named = False
    return "a gymnasium option: " if named else "unknown to EnvPool: "


def pool_seed(seed: int) -> int:
    """An EnvPool seed for zoo's seed (0 to 2**63 - 1): the seed itself below 2**30, else folded below 2**30 by
    numpy's SeedSequence (so nearby large seeds stay apart). EnvPool seeds sub-env ``i`` with ``pool_seed + i`` in
    int32: below 2**30, up to 2**30 sub-envs never overflow it."""
    if 0 <= seed < _INT32 // 2:
        return int(seed)
    return int(np.random.SeedSequence(seed).generate_state(1)[0]) % (_INT32 // 2)


def _scatter(into: Any, values: Any, rows: np.ndarray, size: int) -> Any:
    """``values`` (the results of the sub-envs ``rows``: an array, or a dict of them as in EnvPool's infos) written
    at ``rows`` of ``into`` (the same structure for all ``size`` sub-envs; created, zero-filled, where None)."""
    if isinstance(values, dict):
        into = {} if into is None else into
        for key, value in values.items():
            into[key] = _scatter(into.get(key), value, rows, size)
        return into
    values = np.asarray(values)
    if into is None:
        into = np.zeros((size, *values.shape[1:]), dtype=values.dtype)
    into[rows] = values
    return into


def _gymnasium_action_space(space: gym.Space) -> gym.Space:
    """EnvPool's action space as gymnasium's envs declare it: a float64 Box (EnvPool's MuJoCo) becomes float32, the
    dtype of gymnasium's MuJoCo envs and of zoo's policies' actions (the pool still gets float64)."""
    if isinstance(space, gym.spaces.Box) and space.dtype == np.float64:
        with _quiet():
            return gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32)
    return space


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Without gymnasium's warnings about EnvPool's spaces (float64 bounds cast to float32: harmless)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


class EnvPoolVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of EnvPool's ``env_id`` as a NEXT_STEP gymnasium vector env with zoo's semantics (see
    the module docstring).

    Examples:
        >>> venv = EnvPoolVectorEnv("Hopper-v5", 8, seed=0)
        >>> obs, info = venv.reset()
        >>> obs, reward, terminated, truncated, info = venv.step(venv.action_space.sample())
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["rgb_array", "human"]}

    def __init__(self, env_id: str, num_envs: int, seed: int | None = None, kwargs: dict[str, Any] | None = None,
                 max_episode_steps: int | None = None) -> None:
        if seed is None:  # unseeded, as gymnasium's envs are without a seed
            seed = int(np.random.SeedSequence().generate_state(1)[0])
        self.env_id = env_id
        self.kwargs = dict(kwargs or {})
        config = check_envpool_env(env_id, self.kwargs)
        self.num_envs = num_envs
        self.max_episode_steps = int(max_episode_steps or config["max_episode_steps"])
        self.render_mode = self.kwargs.get("render_mode")
        self._pool = self._build(seed)
        self.single_observation_space = self._pool.single_observation_space
        self.single_action_space = _gymnasium_action_space(self._pool.single_action_space)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self._action_dtype = np.dtype(self._pool.spec.action_array_spec["action"].dtype)
        self._resetting = np.zeros(num_envs, dtype=bool)  # sub-envs zoo truncated: zoo resets them at the next step

    def _build(self, seed: int) -> Any:
        """A fresh pool seeded ``seed`` (sub-env ``i``: EnvPool's seed ``pool_seed(seed) + i``)."""
        envpool = import_envpool()
        self._seed, self._fresh = seed, True
        try:
            with _quiet():
                pool = envpool.make_gymnasium(self.env_id, num_envs=self.num_envs, batch_size=self.num_envs,
                                              seed=pool_seed(seed),
                                              max_episode_steps=max(_UNREACHABLE_STEPS, self.max_episode_steps + 1),
                                              **self.kwargs)
                _ = pool.single_observation_space, pool.single_action_space  # built lazily: quietly here
            return pool
        except Exception as exc:  # a value EnvPool refuses (its own assertion or type check)
            raise ConfigError(f"EnvPool could not build '{self.env_id}' with env.kwargs {self.kwargs}: "
                              f"{type(exc).__name__}: {first_line(exc, 160)}: check env.kwargs") from None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Reset every sub-env (or ``options["reset_mask"]``'s); a ``seed`` builds the pool again with that seed,
        as a fresh pool of that seed would start (a list of seeds is refused: EnvPool seeds sub-env ``i`` with
        ``seed + i``)."""
        if seed is not None:
            if not isinstance(seed, (int, np.integer)):
                raise ConfigError(f"the envpool backend takes one int seed per vector env, got {seed!r}")
            if not (self._fresh and int(seed) == self._seed):
                self._pool.close()
                self._pool = self._build(int(seed))
        self._fresh = False
        mask = None if options is None else options.get("reset_mask")
        if mask is None:
            self._resetting[:] = False
            return self._pool.reset()
        mask = np.asarray(mask, dtype=bool)
        ids = np.flatnonzero(mask).astype(np.int32)
        obs, info = self._pool.reset(env_id=ids)
        self._resetting[mask] = False
        return _scatter(None, obs, ids, self.num_envs), _scatter(None, info, ids, self.num_envs)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """One step of every sub-env (NEXT_STEP autoreset; see the module docstring for the time limit)."""
        self._fresh = False
        actions = np.asarray(actions, dtype=self._action_dtype)
        if self._resetting.any():
            obs, reward, terminated, truncated, info = self._step_and_reset(actions)
        else:
            obs, reward, terminated, truncated, info = self._pool.step(actions)
        elapsed = info["elapsed_step"]
        limit = elapsed >= self.max_episode_steps
        ended_by_pool = terminated | truncated  # EnvPool resets these at the next step itself
        truncated = truncated | limit
        self._resetting = limit & ~ended_by_pool
        return obs, np.asarray(reward, dtype=np.float64), terminated, truncated, info

    def _step_and_reset(self, actions: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Step the sub-envs in episodes; reset those zoo truncated at the last step (their autoreset step)."""
        resetting = np.flatnonzero(self._resetting).astype(np.int32)
        stepping = np.flatnonzero(~self._resetting).astype(np.int32)
        obs = info = None
        size = self.num_envs
        reward = np.zeros(self.num_envs, dtype=np.float32)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        if stepping.size:
            step_obs, step_reward, step_terminated, step_truncated, step_info = self._pool.step(
                actions[stepping], env_id=stepping)
            rows = np.asarray(step_info["env_id"])
            obs, info = _scatter(None, step_obs, rows, size), _scatter(None, step_info, rows, size)
            reward[rows], terminated[rows], truncated[rows] = step_reward, step_terminated, step_truncated
        reset_obs, reset_info = self._pool.reset(env_id=resetting)
        rows = np.asarray(reset_info["env_id"])
        obs, info = _scatter(obs, reset_obs, rows, size), _scatter(info, reset_info, rows, size)
        self._resetting[:] = False
        return obs, reward, terminated, truncated, info

    def render(self) -> Any:
        """The pool's frames (``render_mode`` in env.kwargs)."""
        return self._pool.render()

    def close_extras(self, **kwargs: Any) -> None:
        """Close the pool (its threads end)."""
        self._pool.close()

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise EnvNotCaptured("EnvPool's C++ envs (env.backend=envpool), which expose no state to save",
                             fix="env.backend=gymnasium resumes exactly")


class EnvPoolEnv(gym.Env):
    """One EnvPool env as a ``gymnasium.Env`` (``EnvSpec.make``: videos, spaces, export samples): a one-env
    ``EnvPoolVectorEnv``, with its time limit and seeding."""

    def __init__(self, env_id: str, kwargs: dict[str, Any] | None = None,
                 max_episode_steps: int | None = None) -> None:
        self.vector = EnvPoolVectorEnv(env_id, 1, seed=0, kwargs=kwargs, max_episode_steps=max_episode_steps)
        self.observation_space = self.vector.single_observation_space
        self.action_space = self.vector.single_action_space
        self.render_mode = self.vector.render_mode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Start an episode (``seed``: as ``EnvPoolVectorEnv.reset``)."""
        obs, info = self.vector.reset(seed=seed)
        return obs[0], _first(info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """One step of the env."""
        obs, reward, terminated, truncated, info = self.vector.step(np.asarray(action)[None])
        return obs[0], float(reward[0]), bool(terminated[0]), bool(truncated[0]), _first(info)

    def render(self) -> Any:
        """The env's frame (``render_mode="rgb_array"``)."""
        frames = self.vector.render()
        return None if frames is None else frames[0]

    def close(self) -> None:
        """Close the pool."""
        self.vector.close()


def _first(info: dict) -> dict:
    return {key: _first(value) if isinstance(value, dict) else np.asarray(value)[0] for key, value in info.items()}


# Vector modes of the gymnasium backend that mean nothing here: EnvPool steps its envs in its own threads, and
# returns the whole batch at every step (synchronous, as "sync").
_MODES = ("auto", "sync")


def make_envpool_vector_env(env_id: str, num_envs: int, seed: int | None = None, mode: str = "auto",
                            env_kwargs: dict[str, Any] | None = None,
                            max_episode_steps: int | None = None) -> gym.vector.VectorEnv:
    """The envpool backend's ``make_vector_env``: ``EnvPoolVectorEnv`` (observations flattened into a Box where
    they are not one), inside ``GuardedCalls``, its action spaces seeded with ``seed``.

    Raises:
        ConfigError: a gymnasium-only vector ``mode`` (async, vector_entry_point), or an id or option EnvPool
            lacks. ZooError: envpool is not installed.
    """
    from .calls import GuardedCalls
    from .flattening import needs_flattening
    from .wrappers import flatten_vector_observation

    if mode not in _MODES:
        raise ConfigError(f"pipeline.vector_mode '{mode}' is a gymnasium backend mode; env.backend=envpool steps its "
                          f"envs in EnvPool's threads: set vector_mode=auto, or env.backend=gymnasium")
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ConfigError(f"num_envs must be a positive integer, got {num_envs!r}")
    venv: gym.vector.VectorEnv = EnvPoolVectorEnv(env_id, num_envs, seed, env_kwargs, max_episode_steps)
    if needs_flattening(env_id, venv.single_observation_space):
        venv = flatten_vector_observation(venv)
    venv = GuardedCalls(venv, env_id)
    if seed is not None:
        venv.action_space.seed(seed)
        venv.single_action_space.seed(seed)
    return venv


def make_envpool_env(env_id: str, env_kwargs: dict[str, Any] | None = None,
                     max_episode_steps: int | None = None) -> gym.Env:
    """The envpool backend's ``make_env``: one ``EnvPoolEnv``, flattened where its observations are not a Box."""
    from .flattening import needs_flattening
    from .wrappers import FlattenObservation

    env: gym.Env = EnvPoolEnv(env_id, env_kwargs, max_episode_steps)
    return FlattenObservation(env) if needs_flattening(env_id, env.observation_space) else env
