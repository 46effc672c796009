"""Plugin discovery: the built-in plugin, then every entry point of the ``zoo`` group, through pluggy.

``load_plugins()`` is idempotent: the first call in a process does the work and later calls return the same
report, so spawned worker processes (which start with empty registries) can simply call it again. A plugin
that fails to import, fails pluggy's validation, or raises inside a hook is skipped with a warning naming it;
whatever it registered before failing is removed again, so a plugin is either fully loaded or not at all.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pluggy

from . import hookspecs
from .errors import ConfigError, ZooError
from .registry import ENV_REGISTRY, MODEL_REGISTRY, PIPELINE_REGISTRY, POLICY_REGISTRY, SUITE_REGISTRY, Registry

BUILTIN_PLUGIN_MODULE = "zoo.builtin_plugin"
BUILTIN_PLUGIN_NAME = "built-in"
ENTRY_POINT_GROUP = "zoo"

# Which registry each hook fills; the order is the order in which one plugin's hooks are called.
_REGISTRY_BY_HOOK: dict[str, Registry] = {
    "register_models": MODEL_REGISTRY,
    "register_envs": ENV_REGISTRY,
    "register_policies": POLICY_REGISTRY,
    "register_pipelines": PIPELINE_REGISTRY,
    "register_bench_suites": SUITE_REGISTRY,
}


class ZooPluginWarning(UserWarning):
    """Warning category for a plugin that could not be loaded (filterable with ``-W``)."""


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that was skipped: its name and a one-line description of the error."""

    name: str
    error: str


@dataclass
class PluginReport:
    """What ``load_plugins`` did: plugin names loaded (in load order) and the plugins that failed."""

    loaded: list[str] = field(default_factory=list)
    failures: list[PluginFailure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no plugin failed."""
        return not self.failures

    def lines(self) -> list[str]:
        """Human-readable summary, one line per plugin, for ``zoo list``."""
        lines = [f"plugin {name}: loaded" for name in self.loaded]
        lines += [f"plugin {failure.name}: FAILED ({failure.error})" for failure in self.failures]
        return lines


_lock = threading.RLock()  # re-entrant: a plugin's import may itself call load_plugins()
_report: PluginReport | None = None
_manager: pluggy.PluginManager | None = None
CALLBACK_HOOKS = ("on_metrics_row", "on_evaluation", "should_stop", "on_run_end")


def callback_manager(import_names: Sequence[str] = ()) -> pluggy.PluginManager | None:
    """A plugin manager holding the callback hooks (``zoo.hookspecs``) of the loaded plugins and of the already
    imported ``import_names`` modules of one run (so a stop rule kept next to one config applies to that run only),
    or None when none implements any."""
    load_plugins()
    assert _manager is not None
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    candidates = [(name, plugin) for name, plugin in _manager.list_name_plugin()]
    candidates += [(f"import_names:{name}", sys.modules[name]) for name in import_names if name in sys.modules]
    for name, plugin in candidates:
        if any(hasattr(getattr(plugin, hook, None), f"{hookspecs.PROJECT_NAME}_impl") for hook in CALLBACK_HOOKS):
            if not manager.is_registered(plugin):
                manager.register(plugin, name=name)
    return manager if manager.get_plugins() else None


def load_plugins(force: bool = False) -> PluginReport:
    """Load the built-in plugin and all ``zoo`` entry-point plugins into the registries, once per process.

    Arguments:
        force: load again even if plugins were already loaded in this process (e.g. after installing a
            package); registering the same object under the same name again is a no-op.

    Returns:
        The PluginReport of the load that did the work (later calls without ``force`` return the same one).

    The built-in plugin is imported directly from ``zoo.builtin_plugin`` so that a plain source checkout on
    ``PYTHONPATH`` works without installed metadata; an entry point pointing at that module is skipped so it
    is not loaded twice.
    """
    global _report
    with _lock:
        if _report is not None and not force:
            return _report
        global _manager
        manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        manager.add_hookspecs(hookspecs)
        _manager = manager
        report = PluginReport()
        _report = report  # a nested call (from a plugin being imported) sees the load in progress, not a new one
        _load_one(manager, report, BUILTIN_PLUGIN_NAME, lambda: importlib.import_module(BUILTIN_PLUGIN_MODULE))
        for entry_point in _discover_entry_points(report):
            _load_one(manager, report, entry_point.name, entry_point.load, _distribution(entry_point))
        return report


def _discover_entry_points(report: PluginReport) -> list[importlib.metadata.EntryPoint]:
    """Entry points of the ``zoo`` group, minus the built-in one and exact duplicates (double installs)."""
    try:
        entry_points = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception as exc:  # broken distribution metadata must not take the built-ins down with it
        _record_failure(report, f"entry points of group '{ENTRY_POINT_GROUP}'", exc)
        return []
    seen: set[tuple[str, str]] = set()
    selected = []
    for entry_point in entry_points:
        module_name = entry_point.value.split(":", 1)[0].strip()
        if module_name == BUILTIN_PLUGIN_MODULE or (entry_point.name, entry_point.value) in seen:
            continue
        seen.add((entry_point.name, entry_point.value))
        selected.append(entry_point)
    return selected


def _distribution(entry_point: importlib.metadata.EntryPoint) -> str | None:
    """The name of the installed distribution that declares ``entry_point`` (what to ``pip uninstall``)."""
    dist = getattr(entry_point, "dist", None)
    return getattr(dist, "name", None) if dist is not None else None


def _load_one(
    manager: pluggy.PluginManager, report: PluginReport, name: str, load: Callable[[], Any],
    distribution: str | None = None,
) -> None:
    """Import one plugin, register it with pluggy and run its hooks; on any error undo it and warn."""
    try:
        plugin = load()
        manager.register(plugin, name=name)
    except Exception as exc:
        _record_failure(report, name, exc, distribution)
        return
    added: list[tuple[Registry, str]] = []
    try:
        manager.check_pending()  # hookimpls with misspelt names, e.g. `register_policy`
        for hook_name, registry in _REGISTRY_BY_HOOK.items():
            register = _make_register(registry, name, added)
            for impl in getattr(manager.hook, hook_name).get_hookimpls():
                # Calling each plugin's implementation ourselves (rather than the hook on all plugins at once)
                # is what lets the callback know the plugin's name and isolates one plugin's errors.
                if impl.plugin_name != name or impl.hookwrapper or impl.wrapper:
                    continue
                impl.function(*[register for _ in impl.argnames])
    except Exception as exc:
        for registry, registered_name in reversed(added):
            registry.unregister(registered_name)
        manager.unregister(name=name)
        _record_failure(report, name, exc, distribution)
        return
    report.loaded.append(name)


def _make_register(registry: Registry, source: str, added: list[tuple[Registry, str]]) -> Callable[..., Any]:
    """The ``register(name, obj)`` callback handed to one plugin's hook, remembering what it added."""

    def register(name: str, obj: Any) -> Any:
        is_new = name not in registry
        registry.register(name, obj, source=source)
        if is_new:
            added.append((registry, name))
        return obj

    return register


def _describe(exc: BaseException) -> str:
    # zoo's own errors and import errors already read as a sentence; others need their type to make sense
    # (str(KeyError('x')) is just "'x'").
    if isinstance(exc, ZooError | ImportError) and str(exc):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _record_failure(report: PluginReport, name: str, exc: BaseException, distribution: str | None = None) -> None:
    description = _describe(exc)
    if distribution:  # the fix names what the user installed, not the entry point
        description += f" (from the package '{distribution}': fix or update it, or `pip uninstall {distribution}`)"
    report.failures.append(PluginFailure(name, description))
    warnings.warn(f"zoo plugin '{name}' failed to load: {description}", ZooPluginWarning, stacklevel=4)


def import_modules(names: Sequence[str], search_paths: Sequence[str] = ()) -> list[ModuleType]:
    """Import the modules named in a config's ``import_names`` so their registry decorators run.

    Arguments:
        names: importable module names, e.g. ``["my_policies", "lab.envs.maze"]``.
        search_paths: directories appended to ``sys.path`` (if missing) before importing, e.g. the config's own
            directory, so modules kept next to a config are found from any working directory.

    Returns:
        The imported modules, in order.

    Raises:
        ConfigError: ``names`` is not a list of strings, a module cannot be found, or importing it raised;
            the message names the module and the fix.
    """
    if isinstance(names, str):  # one name: list("my_mod") would be one-letter module names
        raise ConfigError(
            f"import_names must be a list of module names, got str {names!r}: write [{names!r}] "
            f"(on the command line: --set 'import_names=[{names}]')"
        )
    if not isinstance(names, Sequence) or not all(isinstance(n, str) for n in names):
        raise ConfigError(
            f"import_names must be a list of module names, e.g. ['my_policies'], got {type(names).__name__} {names!r}"
        )
    for path in search_paths:
        if path not in sys.path:
            sys.path.append(path)
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
                raise ConfigError(
                    f"import_names: module '{name}' not found: put it next to the config file, list its directory "
                    f"in import_paths, or put that directory on PYTHONPATH"
                ) from exc
            raise ConfigError(
                f"import_names: importing module '{name}' failed: {exc}: install the missing dependency"
            ) from exc
        except Exception as exc:
            raise ConfigError(
                f"import_names: importing module '{name}' failed: {_describe(exc)}: fix the error in that module"
            ) from exc
    return modules


def load_run_plugins(cfg: Mapping[str, Any]) -> None:
    """What a process needs before it builds anything of a run: the installed plugins and the run's own
    ``import_names`` modules (found in its ``import_paths``). Called once at the start of every process that
    trains (the main process when it resolves the config, each DPPO worker, each IMPALA actor); idempotent."""
    load_plugins()
    # Passed as they are: list() of a string would split it into one-letter module names.
    import_modules(cfg.get("import_names") or [], list(cfg.get("import_paths") or []))
