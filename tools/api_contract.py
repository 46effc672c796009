"""The plugin contract's API page (docs/api/plugins.md), written by ``tools/docs_pages.py``.

``CONTRACT`` names, by section, every class, function and constant a plugin author may import: the policy bases,
the learning helpers, the learner state, the batch types, config keys, the spaces helpers, the registries, the
hooks and the errors. Each is rendered from its docstring by mkdocstrings. ``contract_names()`` also reads the
hooks from ``zoo.hookspecs`` itself, so a new hook gets a page without an edit here;
tests/test_api_pages.py fails when a public name of the contract (``zoo.policies.__all__``, every hook, every name
the example plugins import from zoo) has no entry on an API page.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

# (section title, what it is for, dotted paths of the defining modules' names)
CONTRACT: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Policy bases",
     "Subclass one of these. `Policy` is the contract every pipeline calls; `ActorCriticPolicy` (on-policy: A2C, "
     "PPO, DPPO, IMPALA) and `OffPolicyPolicy` (replay: SAC, TD3, DQN) implement all of it but the algorithm. A "
     "subclass's `fields` extend its base's: the keys a base honours (`compile`, `precision`, ...) come without "
     "declaring them.",
     ("zoo.policies.base.Policy", "zoo.policies.actor_critic.ActorCriticPolicy",
      "zoo.policies.off_policy.OffPolicyPolicy", "zoo.policies.base.CollectOutput", "zoo.policies.base.RolloutActor",
      "zoo.policies.base.ActingGraph", "zoo.policies.build.build_policy")),
    ("Learning",
     "What `learn` and `update` get and use: the context, the flat optimiser, target updates, the advantage "
     "helpers and the data-parallel gradient hook.",
     ("zoo.policies.base.LearnContext", "zoo.policies.optim.FlatOptimizer", "zoo.policies.off_policy.soft_update",
      "zoo.policies.actor_critic.normalize_advantage", "zoo.policies.actor_critic.advantage_moments",
      "zoo.policies.actor_critic.normalize_with", "zoo.policies.optim.sync_parameter_gradients")),
    ("The learner state",
     "Declared once by a policy's `acting_parts` and `learning_parts`; checkpoints, actors' weights, flat parameter "
     "views and exports all come from it.",
     ("zoo.policies.state", "zoo.policies.state.LearnerState")),
    ("Batch types",
     "What `learn` is handed: on-policy rollouts and actor unrolls, replay transitions, and flat samples. The "
     "off-policy minibatch `update` gets is described on `OffPolicyPolicy.update`.",
     ("zoo.data.batches.Rollout", "zoo.data.batches.Unroll", "zoo.data.batches.Samples",
      "zoo.data.batches.Transitions", "zoo.data.replay.ReplayBuffer")),
    ("Config keys",
     "A key of a policy's (or pipeline's) section, declared once: its default, meaning, range or choices and "
     "whether a resume may change it.",
     ("zoo.config.schema.Field", "zoo.config.checks.Range", "zoo.config.schema.declare_fields")),
    ("Spaces helpers",
     "Box actions between a tanh actor's [-1, 1] and the env's bounds, and the check that refuses unbounded ones.",
     ("zoo.policies.continuous_networks.BoxActions", "zoo.policies.continuous_networks.check_bounded_box")),
    ("Registries",
     "Name -> class maps, filled by the hooks below (or, for unpackaged code named by a config's `import_names`, by "
     "their `register` decorators).",
     ("zoo.registry.Registry", "zoo.registry.POLICY_REGISTRY", "zoo.registry.ENV_REGISTRY",
      "zoo.registry.PIPELINE_REGISTRY", "zoo.registry.MODEL_REGISTRY", "zoo.registry.SUITE_REGISTRY")),
    ("Hooks",
     "A plugin implements any of these with `@hookimpl` (entry point group `zoo`).",
     ("zoo.hookspecs", "zoo.hookspecs.hookimpl")),
    ("Benchmark suites",
     "What a `register_bench_suites` hook registers: a suite is a tuple of entries, each a config with its budget, "
     "seed count and, optionally, the published figures its report shows beside zoo's.",
     ("zoo.bench.suites.Entry", "zoo.bench.published.Published")),
    ("Built-in policies",
     "The algorithms zoo ships, on the same bases: subclass one to change a part of it (their keys come with them).",
     ("zoo.policies.a2c.A2CPolicy", "zoo.policies.ppo.PPOPolicy", "zoo.policies.dppo.DPPOPolicy",
      "zoo.policies.impala.ImpalaPolicy", "zoo.policies.sac.SACPolicy", "zoo.policies.ace.SACACEPolicy",
      "zoo.policies.td3.TD3Policy", "zoo.policies.dqn.DQNPolicy")),
    ("Errors",
     "Raise `ConfigError` for a setting a policy cannot take: zoo prints its one line and exits with 2.",
     ("zoo.errors.ZooError", "zoo.errors.ConfigError", "zoo.errors.NonFiniteError", "zoo.errors.EnvError")),
)


def hook_names() -> list[str]:
    """Every hook specification of ``zoo.hookspecs``, in source order, as dotted paths."""
    module = importlib.import_module("zoo.hookspecs")
    return [f"zoo.hookspecs.{name}" for name, obj in vars(module).items()
            if inspect.isfunction(obj) and hasattr(obj, "zoo_spec")]


def contract_sections() -> list[tuple[str, str, list[str]]]:
    """``CONTRACT`` with the hooks read from ``zoo.hookspecs``."""
    return [(title, intro, [*paths, *(hook_names() if title == "Hooks" else [])]) for title, intro, paths in CONTRACT]


def resolve(path: str) -> Any:
    """The object a dotted path names (a module, or a name in one)."""
    try:
        return importlib.import_module(path)
    except ImportError:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)


# Sections whose entries show the docstring alone (the built-in policies' methods are the bases' contract).
SUMMARY_ONLY = ("Built-in policies",)


def entry(path: str, heading_level: int, members: bool = True) -> list[str]:
    """One mkdocstrings entry (``members=False``: the docstring alone, e.g. a module whose members have entries of
    their own)."""
    options = [f"      heading_level: {heading_level}"]
    if not members:
        options += ["      members: false"]
    return [f"::: {path}", "    options:", *options, ""]


def api_plugins(notice: str, docstring_of: Any) -> str:
    """The whole page; ``docstring_of(path)`` returns a name's docstring or raises naming the one without."""
    lines = [notice, "", "# The plugin contract: API reference", "",
             "Every class, function and constant a plugin author imports, by what it is for, each from its docstring. "
             "[The policy contract](../plugins.md) says how they fit together; the two tested examples, "
             "[a packaged on-policy plugin](../examples.md#a-packaged-on-policy-plugin) and "
             "[an off-policy algorithm in one module](../examples.md#an-off-policy-algorithm-in-one-module), use them.",
             ""]
    for title, intro, paths in contract_sections():
        lines += [f"## {title}", "", intro, ""]
        for path in paths:
            docstring_of(path)
            lines += entry(path, 3, members=not (inspect.ismodule(resolve(path)) or title in SUMMARY_ONLY))
    return "\n".join(lines).rstrip() + "\n"
