"""Build single and vector environments from a name.

A name is looked up first in zoo's ``ENV_REGISTRY`` (a factory called with keyword arguments, returning a
``gymnasium.Env``) and then in gymnasium's registry; a name in neither loads zoo's plugins (once per process) and
is looked up again, so built-in factories such as ``"atari"`` resolve outside a training run too.

Vector environments always use gymnasium's ``NEXT_STEP`` autoreset: when sub-env ``i`` ends at step ``t`` the
observation returned at ``t`` is the final observation of that episode, and the next ``step()`` ignores env ``i``'s
action, resets it and returns the new episode's first observation with reward 0 and
``terminated = truncated = False`` (an "autoreset step").

Seeding: ``make_vector_env(..., seed=s)`` seeds the batched and single action spaces with ``s`` and makes the
first ``reset()`` without an explicit seed behave as ``reset(seed=s)``. For ``sync`` and ``async`` vector envs
this seeds sub-env ``i`` with ``s + i``; a ``vector_entry_point`` env (e.g. CartPole's numpy implementation) has
one generator for the whole batch, seeded with ``s``. Either way the same seed gives the same observations.

Observations: zoo's policies take Box observations, so both ``make_env`` and ``make_vector_env`` flatten any other
observation space when the env is built (gymnasium's ``FlattenObservation``, made picklable in
``zoo.envs.wrappers`` so that checkpoints save such envs: per sub-env in ``sync``/``async`` mode, on the batch for a
``vector_entry_point`` env). Training, evaluation and ``zoo eval --video`` all build
their envs here and so all see the same flattened Box. Discrete and MultiDiscrete become one-hot Boxes,
MultiBinary a Box of its 0/1 values, Dict and Tuple the concatenation of their flattened parts (Dict in
gymnasium's sorted key order); a Box, image Boxes included, is left untouched. Spaces without a fixed-size flat
form (Graph, Sequence, Text, OneOf) are refused with a ConfigError: wrap such an env so that it gives Box or
Dict-of-Box observations.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import inspect
import multiprocessing
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator
from gymnasium.vector import AutoresetMode
from gymnasium.vector.async_vector_env import _async_worker

from ..errors import ConfigError, ZooError, first_line
from ..lifetime import die_with_parent
from ..registry import ENV_REGISTRY
from .calls import GuardedCalls
from .extras import MODULE_EXTRAS, missing_package_error
from .flattening import flattened, needs_flattening
from .wrappers import flatten_vector_observation

VECTOR_MODES = ("auto", "sync", "async", "vector_entry_point")


def _registered_name(env_id: str) -> str:
    """The gymnasium id without a ``module:`` prefix, after importing that module (which registers the env, as
    ``gym.make("module:EnvId")`` does); a one-line ZooError when it cannot be imported."""
    if ":" not in env_id:
        return env_id
    module, name = env_id.split(":", 1)
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module and module in MODULE_EXTRAS:
            raise ZooError(f"env id '{env_id}' needs the module '{module}', which is not installed: pip install "
                           f"'zoo-rl[{MODULE_EXTRAS[module]}]'") from None
        raise ZooError(f"env id '{env_id}' names the module '{module}', which cannot be imported "
                       f"({type(exc).__name__}: {first_line(exc, 120)}): put it on PYTHONPATH, or list it in "
                       f"import_names (its folder in import_paths) and use the id '{name}'") from None
    except Exception as exc:
        raise ZooError(f"env id '{env_id}' names the module '{module}', which cannot be imported "
                       f"({type(exc).__name__}: {first_line(exc, 120)}): put it on PYTHONPATH, or list it in "
                       f"import_names (its folder in import_paths) and use the id '{name}'") from None
    return name


def _is_gym_id(env_id: str) -> bool:
    try:
        gym.spec(_registered_name(env_id))
    except (gym.error.Error, ImportError):
        return False
    return True


def _check_known(env_id: str) -> None:
    """Raise a one-line ZooError unless ``env_id`` names a zoo factory or a gymnasium id.

    Names in neither registry load zoo's plugins first (once per process), so that the built-in factories (e.g.
    ``"atari"``) and installed plugins' envs resolve when ``make_env`` is called outside a training run.
    """
    if env_id in ENV_REGISTRY or _is_gym_id(env_id):
        return
    from ..plugins import load_plugins  # here: plugins import policies (torch), needed only for unknown names

    load_plugins()
    if env_id not in ENV_REGISTRY:
        raise _unknown_env_error(env_id)


def _unknown_env_error(env_id: str) -> ZooError:
    candidates = list(gym.registry) + ENV_REGISTRY.names()
    close = difflib.get_close_matches(env_id, candidates, n=3, cutoff=0.4)
    hint = f"closest ids: {', '.join(close)}" if close else "see gymnasium.pprint_registry() for the ids"
    return ZooError(f"unknown env '{env_id}': neither in zoo's env registry nor gymnasium's; {hint}")


def _gym_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """gymnasium's spec for ``env_id`` or a one-line ZooError with the closest ids."""
    try:
        return gym.spec(_registered_name(env_id))
    except (gym.error.Error, ImportError) as err:
        raise _unknown_env_error(env_id) from err


def _accepted_keywords(env_id: str) -> list[str] | None:
    """The keyword arguments the env's constructor (or zoo factory) names, or None when it takes ``**kwargs``."""
    try:
        if env_id in ENV_REGISTRY:
            creator = ENV_REGISTRY.get(env_id)
        else:
            creator = _gym_spec(env_id).entry_point
            creator = load_env_creator(creator) if isinstance(creator, str) else creator
        parameters = inspect.signature(creator).parameters.values()
    except Exception:  # no signature to read: say nothing rather than something wrong
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]


def _construction_error(env_id: str, kwargs: dict[str, Any], exc: BaseException) -> ZooError:
    """A one-line error for an env that could not be built, naming unknown kwargs where that is the cause."""
    accepted = _accepted_keywords(env_id)
    if accepted is not None:
        unknown = sorted(set(kwargs) - set(accepted) - {"render_mode", "max_episode_steps"})
        if unknown:
            return ConfigError(
                f"env '{env_id}' does not accept env.kwargs {unknown}: remove them (it accepts: "
                f"{', '.join(accepted) or 'none'})"
            )
    detail = str(exc).splitlines()[0] if str(exc) else ""
    return ConfigError(
        f"env '{env_id}' could not be built with env.kwargs {kwargs}: {type(exc).__name__}: {detail}: "
        f"check env.kwargs and the env's own requirements"
    )


@contextlib.contextmanager
def _one_line_construction_errors(env_id: str, kwargs: dict[str, Any]) -> Iterator[None]:
    """Turn what an env's constructor raises (bad kwargs, a missing package, its own failure) into one line."""
    try:
        yield
    except ZooError:
        raise
    except (gym.error.DependencyNotInstalled, ImportError) as exc:
        raise _missing_package_error(env_id, exc) from exc
    except Exception as exc:
        raise _construction_error(env_id, kwargs, exc) from exc


def _missing_package_error(env_id: str, exc: BaseException) -> ZooError:
    """One line naming the missing module and the ``pip install`` that provides it (``zoo.envs.extras``)."""
    entry_point = ""
    if env_id not in ENV_REGISTRY:
        with contextlib.suppress(Exception):
            entry_point = str(gym.spec(_registered_name(env_id)).entry_point)
    return missing_package_error(env_id, entry_point, exc)


def make_env(env_id: str, *, mask_key: str | None = None, **kwargs: Any) -> gym.Env:
    """Build one environment.

    Arguments:
        env_id: a name in ``ENV_REGISTRY`` (its factory is called with ``kwargs``) or a gymnasium id
            (``gym.make(env_id, **kwargs)``; ``max_episode_steps`` is accepted there).
        mask_key: the key of a Dict observation that holds the action mask (``env.action_mask=obs:<key>``): moved
            into ``info["action_mask"]`` before the rest is flattened (``zoo.envs.masks.MaskFromObservation``).
        kwargs: keyword arguments for the factory or for ``gym.make``.

    Returns:
        The environment; observations that are not a Box are flattened into one (see the module docstring).

    Raises:
        ZooError: ``env_id`` is unknown to both registries; the message names the closest ids.
        ConfigError: the env could not be built with ``kwargs``, or its observation space cannot be flattened
            into a Box (Graph, Sequence, Text, OneOf).

    Examples:
        >>> env = make_env("CartPole-v1", max_episode_steps=50)
    """
    _check_known(env_id)
    factory = ENV_REGISTRY.get(env_id) if env_id in ENV_REGISTRY else None
    with _one_line_construction_errors(env_id, kwargs):
        env = factory(**kwargs) if factory is not None else gym.make(env_id, **kwargs)
    try:
        return flattened(env_id, env, mask_key)
    except ConfigError:
        env.close()
        raise


def _build_single_env(
    env_id: str, factory: Callable[..., gym.Env] | None, kwargs: dict[str, Any], max_episode_steps: int | None,
    mask_key: str | None = None,
) -> gym.Env:
    """Sub-env constructor for Sync/AsyncVectorEnv; observations that are not a Box are flattened.

    The factory object itself (not its name) is passed so that a spawned worker, whose ENV_REGISTRY may be
    empty, can still build it.
    """
    if factory is None:
        extra = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
        env = gym.make(env_id, **kwargs, **extra)
    else:
        env = factory(**kwargs)
        if max_episode_steps is not None:
            env = gym.wrappers.TimeLimit(env, max_episode_steps=max_episode_steps)
    return flattened(env_id, env, mask_key)


def _async_context() -> str:
    """Start method for AsyncVectorEnv workers.

    fork is used where it is safe (Linux): workers only step numpy/gymnasium code (no torch threads, no CUDA),
    start in milliseconds instead of re-importing torch and gymnasium (about a second each with spawn), and
    see envs registered at run time in gymnasium's registry. macOS (fork-unsafe system libraries) and Windows
    (no fork) use spawn; cloudpickle ships the sub-env constructor, including the zoo factory object.
    """
    if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods():
        return "fork"
    return "spawn"


# What a worker sees when its parent has gone (killed, exited): the pipe to it broke.
_PARENT_GONE = (EOFError, BrokenPipeError, ConnectionResetError, KeyboardInterrupt)


def _async_env_worker(*args: Any) -> None:
    """The process of one ``async`` sub-env: gymnasium's own worker loop (``_async_worker``, with whatever arguments
    this gymnasium version passes), in a process that dies with its parent and ends silently once it is gone.

    Unchanged, the loop takes a pipe that broke (EOFError, BrokenPipeError, ConnectionResetError) for an env error:
    it tries to report it to the dead parent, fails, and prints a traceback per worker onto the user's terminal.
    Real env errors still reach the parent as gymnasium reports them. Module-level, so that it pickles for the
    spawn start method.

    Signals: Ctrl-C (SIGINT) and a hang-up (SIGHUP) reach the terminal's whole process group, and are the parent's
    to handle (a training loop finishes its iteration with these envs, saves, then closes them): the worker ignores
    them instead of reporting a KeyboardInterrupt that ends the parent's iteration. SIGTERM kills it (the default),
    even where a forked worker inherited a handler of its parent's; its parent's death sends it SIGKILL. As
    ``PR_SET_PDEATHSIG`` follows the thread that started the worker, the thread that builds an async vector env
    must outlive it (zoo builds them in the main thread).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):  # not on Windows
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(signal.SIGKILL)  # a parent killed with SIGKILL leaves no worker behind (Linux), stopped or not
    try:
        _async_worker(*args)
    except _PARENT_GONE:
        pass


def _vector_entry_point_accepts(spec: gym.envs.registration.EnvSpec, names: set[str]) -> bool:
    """Whether the spec's vector entry point takes every keyword in ``names``."""
    creator = spec.vector_entry_point
    if isinstance(creator, str):
        creator = load_env_creator(creator)
    try:
        parameters = inspect.signature(creator).parameters
    except (TypeError, ValueError):  # builtins without a signature: assume it takes what it is given
        return True
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return True
    return names <= set(parameters)


def _resolve_mode(env_id: str, mode: str, env_kwargs: dict[str, Any], max_episode_steps: int | None,
                  mask_key: str | None = None) -> str:
    if mode not in VECTOR_MODES:
        raise ConfigError(f"invalid vector env mode '{mode}': valid modes are {', '.join(VECTOR_MODES)}")
    if mode in ("sync", "async"):
        return mode
    if mask_key is not None:  # the mask is moved out of each sub-env's observations: not a batched env's
        if mode == "vector_entry_point":
            raise ConfigError(f"env.action_mask=obs:{mask_key} takes the mask from each sub-env: use vector mode "
                              f"sync or async for '{env_id}'")
        return "sync"
    if env_id in ENV_REGISTRY:
        if mode == "vector_entry_point":
            raise ConfigError(f"env '{env_id}' is a zoo registry factory: it has no vector_entry_point; use sync/async")
        return "sync"
    spec = _gym_spec(env_id)
    keywords = set(env_kwargs) | ({"max_episode_steps"} if max_episode_steps is not None else set())
    usable = spec.vector_entry_point is not None and _vector_entry_point_accepts(spec, keywords)
    if mode == "auto":
        # A vector entry point that cannot take the requested kwargs (or time limit) falls back to sync.
        return "vector_entry_point" if usable else "sync"
    if spec.vector_entry_point is None:
        raise ConfigError(f"env '{env_id}' has no vector_entry_point; use mode 'auto', 'sync' or 'async'")
    if not usable:
        raise ConfigError(
            f"the vector_entry_point of '{env_id}' does not accept {sorted(keywords)}; use mode 'sync' or 'async'"
        )
    return mode


class _SeedFirstReset(gym.vector.VectorWrapper):
    """Make the first ``reset()`` without a seed use the seed given to ``make_vector_env``."""

    def __init__(self, env: gym.vector.VectorEnv, seed: int) -> None:
        super().__init__(env)
        self._pending_seed: int | None = seed

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Reset, using the stored seed once if none is given."""
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        return self.env.reset(seed=seed, options=options)


def make_vector_env(
    env_id: str,
    num_envs: int,
    seed: int | None = None,
    mode: str = "auto",
    env_kwargs: dict[str, Any] | None = None,
    max_episode_steps: int | None = None,
    mask_key: str | None = None,
) -> gym.vector.VectorEnv:
    """Build a NEXT_STEP-autoreset vector environment of ``num_envs`` copies of ``env_id``.

    Arguments:
        env_id: a name in ``ENV_REGISTRY`` or a gymnasium id (see ``make_env``).
        num_envs: number of sub-environments (>= 1).
        seed: seeds the action spaces and the first ``reset()`` (sub-env ``i`` gets ``seed + i`` in sync/async;
            see the module docstring). ``None`` leaves everything unseeded.
        mode: ``"auto"`` (``vector_entry_point`` for a gymnasium id whose spec has one that accepts the
            requested kwargs, otherwise ``"sync"``), ``"sync"`` (one process), ``"async"`` (one worker process
            per sub-env) or ``"vector_entry_point"`` (the env's own batched implementation).
        env_kwargs: keyword arguments for each sub-env's factory / ``gym.make``.
        max_episode_steps: time limit per episode (truncation); overrides the spec's default.
        mask_key: a Dict observation's key that holds the action mask, moved into the infos (see ``make_env``);
            sub-envs in ``sync``/``async`` mode only.

    Returns:
        A ``gymnasium.vector.VectorEnv`` whose ``metadata["autoreset_mode"]`` is ``AutoresetMode.NEXT_STEP`` and
        whose ``single_observation_space`` is a Box: other observation spaces are flattened (see the module
        docstring), per sub-env in ``sync``/``async`` mode and on the batch for ``vector_entry_point``.

    Raises:
        ConfigError: invalid ``mode``/``num_envs``, a mode the env cannot provide, or an observation space that
            cannot be flattened into a Box (Graph, Sequence, Text, OneOf).
        ZooError: unknown ``env_id``.

    Examples:
        >>> venv = make_vector_env("CartPole-v1", num_envs=8, seed=0)
        >>> obs, info = venv.reset()  # same as venv.reset(seed=0)
        >>> obs.shape
        (8, 4)
    """
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ConfigError(f"num_envs must be a positive integer, got {num_envs!r}")
    env_kwargs = dict(env_kwargs or {})
    _check_known(env_id)
    resolved = _resolve_mode(env_id, mode, env_kwargs, max_episode_steps, mask_key)
    with _one_line_construction_errors(env_id, env_kwargs):
        venv = _build_vector_env(env_id, num_envs, resolved, env_kwargs, max_episode_steps, mask_key)
    venv = GuardedCalls(venv, env_id)  # innermost: only the user's env runs inside it
    if venv.metadata.get("autoreset_mode") != AutoresetMode.NEXT_STEP:
        found = venv.metadata.get("autoreset_mode")
        venv.close()
        raise ConfigError(f"env '{env_id}' in mode '{resolved}' autoresets with {found}; zoo needs NEXT_STEP")
    if seed is not None:
        venv.action_space.seed(seed)
        venv.single_action_space.seed(seed)
        venv = _SeedFirstReset(venv, seed)
    return venv


def _build_vector_env(
    env_id: str, num_envs: int, resolved: str, env_kwargs: dict[str, Any], max_episode_steps: int | None,
    mask_key: str | None,
) -> gym.vector.VectorEnv:
    if resolved == "vector_entry_point":
        extra = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
        venv = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **env_kwargs, **extra)
        try:
            if needs_flattening(env_id, venv.single_observation_space):
                venv = flatten_vector_observation(venv)
        except ConfigError:
            venv.close()
            raise
    else:
        factory = ENV_REGISTRY.get(env_id) if env_id in ENV_REGISTRY else None
        build = functools.partial(_build_single_env, env_id, factory, env_kwargs, max_episode_steps, mask_key)
        env_fns = [build] * num_envs
        if resolved == "sync":
            venv = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.NEXT_STEP)
        else:
            venv = gym.vector.AsyncVectorEnv(env_fns, context=_async_context(), autoreset_mode=AutoresetMode.NEXT_STEP,
                                             worker=_async_env_worker)
    return venv
