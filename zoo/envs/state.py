"""Env state: what a checkpoint holds of a vector env, so that a resumed run continues its episodes exactly.

The collector's checkpoint pickles its vector env (zoo's wrappers, gymnasium's vector env, every sub-env and its
wrappers). Pickling keeps an object's whole state only where the object lets it: Python's own pickling saves every
attribute, but gymnasium's MuJoCo, Box2D and Atari envs pickle their constructor arguments alone (``EzPickle``), so
an unpickled Hopper-v5 would stand at its start pose with no random generator. ``snapshot`` adds what such a
pickle loses and refuses what it cannot vouch for; ``restore`` puts it back.

The rule: an env is captured when every object of its pickle is either pickled by Python's default (its
attributes, recursively), or pickled by code zoo knows to keep everything (``TRUSTED_PICKLING``: numpy, torch,
collections, gymnasium's spaces, zoo's own...), or is a layer (wrapper or env) zoo adds the state of:

- one that implements the env-state protocol, ``get_env_state() -> state`` and ``set_env_state(state)``
  (``EnvStateProtocol``), which any custom env or wrapper may do;
- one of gymnasium's own MuJoCo envs (module ``gymnasium.envs.mujoco``): zoo saves its whole ``MjData`` (the
  integration state and the derived quantities some envs read before stepping, such as Ant-v5's ``xpos``: the
  integration state of ``mj_getState`` alone does not continue Ant-v5 or Humanoid-v5 exactly) and its Python
  attributes (random generator, spaces), and copies them back with ``mj_copyData``.

Any other custom pickling (``EzPickle``, a C extension's own) may drop state without a trace, so such an env is
not captured: its checkpoint holds no episodes in progress and the resume says so in one line. What pickling
cannot see at all (state kept in module globals, files or other processes) is the env author's to capture with
the protocol.
"""

from __future__ import annotations

import copyreg
import io
import pickle
import types
import zlib
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from ..errors import first_line

# Modules whose classes' own pickling keeps the whole object (checked by reading it, or zoo's own).
TRUSTED_PICKLING = ("builtins", "collections", "copyreg", "datetime", "decimal", "enum", "fractions", "functools",
                    "pathlib", "random", "re", "numpy", "torch", "gymnasium.spaces", "zoo")
_PICKLING_METHODS = ("__reduce__", "__reduce_ex__", "__getstate__", "__setstate__")
_BY_NAME = (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType)
_FORMAT = "zoo-env-snapshot-1"  # the first item of a snapshot; a checkpoint of zoo before env states has none
_MUJOCO_MODULES = "gymnasium.envs.mujoco."
# MujocoEnv attributes rebuilt by its constructor (what EzPickle re-runs) and restored through ``mj_copyData``.
_MUJOCO_REBUILT = frozenset({"model", "data", "mujoco_renderer"})
# MjModel sizes that must match for ``mj_copyData`` to copy between two MjData (it copies their buffers whole).
_MUJOCO_SIZES = ("nq", "nv", "na", "nu", "nbody", "nmocap", "nuserdata", "nplugin", "nbuffer", "narena")


@runtime_checkable
class EnvStateProtocol(Protocol):
    """What a custom env (or wrapper) implements for an exact resume when its pickle loses state.

    Contract: ``get_env_state()`` is called between steps and returns a picklable object; zoo pickles the env
    (whatever its own pickling keeps) together with that object, and on resume calls ``set_env_state(state)`` on
    the unpickled env before its next ``step``. From then on the env must give the same observations, rewards,
    terminations and random draws as the original would have.
    """

    def get_env_state(self) -> Any:
        """The state that pickling the env loses."""

    def set_env_state(self, state: Any) -> None:
        """Restore ``get_env_state()``'s output on the unpickled env."""


class EnvNotCaptured(Exception):  # noqa: N818 (a finding, not a failure of zoo's)
    """An object of a vector env whose state zoo cannot vouch for; ``what`` names its class and its pickling,
    ``fix`` (if any) what makes a resume exact (None: implementing the env-state protocol)."""

    def __init__(self, what: str, fix: str | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.fix = fix


class EnvNotRestored(Exception):  # noqa: N818
    """A snapshot whose episodes cannot continue exactly; ``why`` says why in a few words."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _implements_protocol(layer: Any) -> bool:
    return callable(getattr(layer, "get_env_state", None)) and callable(getattr(layer, "set_env_state", None))


def _is_gymnasium_mujoco(layer: Any) -> bool:
    if not type(layer).__module__.startswith(_MUJOCO_MODULES):
        return False
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv  # imports mujoco: only for an env from that package

    return isinstance(layer, MujocoEnv)


def capture_kind(layer: Any) -> str:
    """How zoo captures ``layer``: ``"protocol"``, ``"mujoco"``, or ``"pickle"`` (its pickle, if zoo trusts it)."""
    if _implements_protocol(layer):
        return "protocol"
    return "mujoco" if _is_gymnasium_mujoco(layer) else "pickle"


def _layers(venv: gym.vector.VectorEnv) -> Iterator[tuple[str, Any]]:
    """``(path, layer)`` of every layer, outermost first: the vector wrappers, the vector env, then each sub-env's
    wrappers and the sub-env (``SyncVectorEnv``; other vector envs hold their sub-envs themselves)."""
    path, layer = "venv", venv
    while isinstance(layer, gym.vector.VectorWrapper):
        yield path, layer
        path, layer = f"{path}.env", layer.env
    yield path, layer
    if isinstance(layer, gym.vector.SyncVectorEnv):
        for index, env in enumerate(layer.envs):
            sub_path = f"{path}.envs[{index}]"
            while isinstance(env, gym.Wrapper):
                yield sub_path, env
                sub_path, env = f"{sub_path}.env", env.env
            yield sub_path, env


def _own_pickling(cls: type) -> type | None:
    """The class in ``cls``'s MRO (``object`` aside) that defines how ``cls`` pickles, or None (Python's default)."""
    for klass in cls.__mro__:
        if klass is object:
            break
        if any(name in vars(klass) for name in _PICKLING_METHODS):
            return klass
    return cls if cls in copyreg.dispatch_table else None


def _trusted(klass: type) -> bool:
    module = klass.__module__ or ""
    return any(module == name or module.startswith(name + ".") for name in TRUSTED_PICKLING)


def _vouched_for(cls: type, definer: type) -> bool:
    """Whether pickling through ``definer`` keeps an object of ``cls`` whole: ``definer`` is trusted, and ``cls`` is
    no outside subclass of numpy's array, whose pickle drops a subclass's attributes."""
    return _trusted(definer) and not (issubclass(cls, np.ndarray) and not _trusted(cls))


class _CheckingPickler(pickle.Pickler):
    """A pickler that notes the first object whose own pickling zoo does not trust (the layers in ``handled``
    aside: zoo adds their state)."""

    def __init__(self, file: io.BytesIO, handled: set[int]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.handled = handled
        self.untrusted: str | None = None

    def reducer_override(self, obj: Any) -> Any:
        if self.untrusted is None and not isinstance(obj, _BY_NAME) and id(obj) not in self.handled:
            definer = _own_pickling(type(obj))
            if definer is not None and not _vouched_for(type(obj), definer) and not _pickled_by_name(obj):
                cls = type(obj)
                self.untrusted = (f"{cls.__module__}.{cls.__qualname__}, pickled by "
                                  f"{definer.__module__}.{definer.__qualname__}")
        return NotImplemented


def _pickled_by_name(obj: Any) -> bool:
    """Whether ``obj`` pickles as a reference to a global (e.g. a compiled function), not as state."""
    try:
        return isinstance(obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL), str)
    except Exception:
        return False


def _checked_pickle(obj: Any, handled: set[int]) -> tuple[bytes, str | None]:
    buffer = io.BytesIO()
    pickler = _CheckingPickler(buffer, handled)
    pickler.dump(obj)
    return buffer.getvalue(), pickler.untrusted


def snapshot(venv: gym.vector.VectorEnv, *extra: Any) -> bytes:
    """``venv`` (episodes in progress) and ``extra`` objects as bytes for ``restore``.

    Raises ``EnvNotCaptured`` when an object's pickling may lose state (see the module docstring), and whatever
    pickling raises for an object that cannot be pickled at all (e.g. the workers of an async vector env)."""
    states, handled = [], set()
    for path, layer in _layers(venv):
        kind = capture_kind(layer)
        if kind == "protocol":
            states.append((path, kind, layer.get_env_state()))
        elif kind == "mujoco":
            states.append((path, kind, mujoco_env_state(layer)))
        else:
            continue
        handled.add(id(layer))
    data, untrusted = _checked_pickle((_FORMAT, venv, states, extra), handled)
    if untrusted is not None:
        raise EnvNotCaptured(untrusted)
    return data


def restore(data: bytes) -> tuple[gym.vector.VectorEnv, tuple[Any, ...]]:
    """The vector env and the ``extra`` objects of a ``snapshot``, the env's episodes ready to continue.

    A snapshot of zoo before env states (a plain pickle of ``(venv, *extra)``) is accepted where that pickle kept
    everything. Raises ``EnvNotRestored`` (the env closed) when the episodes cannot continue exactly. Unpickles:
    only for checkpoints you trust."""
    saved = pickle.loads(data)
    if not (isinstance(saved, tuple) and len(saved) == 4 and isinstance(saved[0], str) and saved[0] == _FORMAT):
        venv, *rest = saved
        _, lost = _checked_pickle(venv, set())
        if lost is not None:
            venv.close()
            raise EnvNotRestored(f"it predates env states, and its pickle lost those of {lost}")
        return venv, tuple(rest)
    _, venv, states, extra = saved
    try:
        _apply(venv, states)
    except Exception as exc:
        venv.close()
        raise EnvNotRestored(f"its saved state does not restore: {type(exc).__name__}: {first_line(exc, 120)}") \
            from exc
    return venv, extra


def _apply(venv: gym.vector.VectorEnv, states: list[tuple[str, str, Any]]) -> None:
    """Apply the saved states to the unpickled ``venv``, innermost layer first; ValueError when its layers do not
    match them."""
    layers = dict(_layers(venv))
    expected = {path for path, layer in layers.items() if capture_kind(layer) != "pickle"}
    if expected != {path for path, _, _ in states}:
        raise ValueError("the saved env states do not match the env's layers")
    for path, kind, state in reversed(states):
        layer = layers[path]
        if capture_kind(layer) != kind:
            raise ValueError(f"the saved env state of {path} ({kind}) does not fit the env")
        if kind == "protocol":
            layer.set_env_state(state)
        else:
            set_mujoco_env_state(layer, state)


def mujoco_env_state(env: Any) -> dict[str, Any]:
    """The state of a gymnasium ``MujocoEnv``: its ``MjData`` (pickled, compressed: about 30 KB for Hopper-v5) and
    its Python attributes besides the simulator (random generator, spaces, settings). A custom ``MujocoEnv`` may
    return it from its ``get_env_state`` when it keeps nothing else elsewhere."""
    attributes = {name: value for name, value in vars(env).items() if name not in _MUJOCO_REBUILT}
    return {"data": zlib.compress(pickle.dumps(env.data), 1), "attributes": attributes}


def set_mujoco_env_state(env: Any, state: dict[str, Any]) -> None:
    """Restore ``mujoco_env_state`` output on ``env`` (rebuilt from its constructor arguments, same model).

    Raises ValueError when the saved data belongs to a model of other sizes (nothing is copied then)."""
    import mujoco

    saved = pickle.loads(zlib.decompress(state["data"]))
    differing = [name for name in _MUJOCO_SIZES if getattr(saved.model, name) != getattr(env.model, name)]
    if differing:
        raise ValueError(f"the saved MuJoCo data is of another model (differing sizes: {', '.join(differing)})")
    mujoco.mj_copyData(env.data, env.model, saved)
    vars(env).update(state["attributes"])
