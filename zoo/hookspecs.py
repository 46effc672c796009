"""The hooks a zoo plugin may implement (pluggy project name ``"zoo"``).

A plugin is any importable module (or object) with functions marked ``@hookimpl`` whose names match the hook
specifications below. Each hook receives one argument, ``register(name, obj)``, which binds ``obj`` under
``name`` in the matching registry and records the plugin's name as its source, so that ``zoo list`` and
duplicate-name errors can say where every name came from. The built-in algorithms use exactly the same path.

Writing a third-party plugin, in two steps:

1. A module in your package, e.g. ``my_zoo_ext/plugin.py``::

       from zoo.hookspecs import hookimpl
       from my_zoo_ext.policy import MyPolicy

       @hookimpl
       def register_policies(register):
           register("my_policy", MyPolicy)

2. An entry point in your package's ``pyproject.toml``; its name becomes the source shown by ``zoo list``::

       [project.entry-points.zoo]
       my_zoo_ext = "my_zoo_ext.plugin"

After ``pip install`` of your package, ``policy.type = "my_policy"`` works in any zoo config. Implement only
the hooks you need. Importing your plugin module should be cheap and free of side effects beyond
registration, because every spawned worker process loads plugins again.

For code that is not packaged, list its modules in a config's ``import_names`` instead and register with the
decorators, e.g. ``@POLICY_REGISTRY.register("my_policy")``.
"""

from __future__ import annotations

import pluggy

from .registry import RegisterFunction

PROJECT_NAME = "zoo"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def register_policies(register: RegisterFunction) -> None:
    """Register policy classes: call ``register(name, policy_class)`` once per policy.

    The name is what a config's ``policy.type`` refers to. Registering a name another plugin already uses
    raises DuplicateNameError naming both sources; zoo then skips this plugin with a warning.
    """


@hookspec
def register_envs(register: RegisterFunction) -> None:
    """Register environment factories: call ``register(name, factory)`` once per environment."""


@hookspec
def register_pipelines(register: RegisterFunction) -> None:
    """Register training pipelines: call ``register(name, pipeline_class)``."""


@hookspec
def register_models(register: RegisterFunction) -> None:
    """Register network (model) classes: call ``register(name, model_class)``."""
