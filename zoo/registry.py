"""Name -> class registries, one per kind (policy, env, pipeline, model), and the registry of benchmark suites.

A registry remembers where each name came from (``"built-in"`` or a plugin's name) so that errors and
``zoo list`` can say it. Registering the same object under the same name twice is a no-op, which makes
plugin loading idempotent in spawned worker processes. A registry of data rather than code (benchmark suites:
tuples of ``zoo.bench.suites.Entry``) compares what is registered by value: an equal suite again is the same one.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from .errors import DuplicateNameError, UnknownNameError

T = TypeVar("T")


def _qualified_name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


class Registry:
    """A mapping from names to classes or factories of one kind.

    Examples:
        >>> POLICY = Registry("policy")
        >>> @POLICY.register("ppo")
        ... class PPOPolicy: ...
        >>> POLICY.get("ppo") is PPOPolicy
        True
    """

    def __init__(self, kind: str, by_value: bool = False) -> None:
        self.kind = kind
        self.by_value = by_value  # data, not classes: the same name again is the same entry when its value is equal
        self._entries: dict[str, tuple[Any, str]] = {}

    def _same(self, old: Any, obj: Any) -> bool:
        if self.by_value:
            return bool(old is obj or old == obj)
        return old is obj or _qualified_name(old) == _qualified_name(obj)

    def _shown(self, obj: Any) -> str:
        return "" if self.by_value else f" ({_qualified_name(obj)})"

    def register(self, name: str, obj: Any = None, source: str = "built-in") -> Any:
        """Register ``obj`` under ``name``; without ``obj`` return a decorator.

        Raises DuplicateNameError when ``name`` is already bound to a different object.
        """
        if obj is None:

            def decorator(target: T) -> T:
                self.register(name, target, source)
                return target

            return decorator
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")
        existing = self._entries.get(name)
        if existing is not None:
            old, old_source = existing
            if self._same(old, obj):
                return obj
            raise DuplicateNameError(
                f"{self.kind} '{name}' is registered twice: by {old_source}{self._shown(old)} and by "
                f"{source}{self._shown(obj)}; rename one of them"
            )
        self._entries[name] = (obj, source)
        return obj

    def get(self, name: str) -> Any:
        """Return the object registered as ``name`` or raise UnknownNameError with a suggestion."""
        try:
            return self._entries[name][0]
        except KeyError:
            raise UnknownNameError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        """The one-line error for an unknown ``name``: what is registered and the closest match."""
        names = sorted(self._entries)
        close = difflib.get_close_matches(str(name), names, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"unknown {self.kind} '{name}': {hint}registered: {', '.join(names) or '(none)'}"

    def source(self, name: str) -> str:
        """Where ``name`` came from: ``"built-in"`` or the plugin's name."""
        self.get(name)
        return self._entries[name][1]

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def items(self) -> Iterator[tuple[str, Any, str]]:
        """Yield ``(name, object, source)`` sorted by name."""
        for name in self.names():
            obj, source = self._entries[name]
            yield name, obj, source

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests and plugin reloads)."""
        self._entries.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)


POLICY_REGISTRY = Registry("policy")
"""Policy classes by the name a config's ``policy.type`` uses: ``@POLICY_REGISTRY.register("my_policy")`` on a class
in a module named by ``import_names``, or ``register("my_policy", MyPolicy)`` in a ``register_policies`` hook."""
ENV_REGISTRY = Registry("env")
"""Environment factories by the name a config's ``env.id`` uses (before Gymnasium's ids): ``factory(**env.kwargs)``
returns a new ``gymnasium.Env`` (the contract: ``zoo.hookspecs.register_envs``)."""
PIPELINE_REGISTRY = Registry("pipeline")
"""Training pipelines by the name a config's ``pipeline.type`` uses (a policy lists those it runs on)."""
MODEL_REGISTRY = Registry("model")
"""Observation encoders by the name ``policy.encoder`` uses (the contract: ``zoo.hookspecs.register_models``)."""
SUITE_REGISTRY = Registry("benchmark suite", by_value=True)
"""``zoo bench``'s suites by name: tuples of ``zoo.bench.suites.Entry`` (``zoo.hookspecs.register_bench_suites``)."""

RegisterFunction = Callable[..., Any]
