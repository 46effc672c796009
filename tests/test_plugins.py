"""Plugin discovery: fake built-in and entry-point plugins, failures, duplicates, idempotence, import_names."""

from __future__ import annotations

import importlib.metadata
import sys
import types
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from zoo import plugins
from zoo.errors import ConfigError
from zoo.hookspecs import hookimpl
from zoo.plugins import PluginFailure, ZooPluginWarning, import_modules, load_plugins
from zoo.registry import ENV_REGISTRY, MODEL_REGISTRY, PIPELINE_REGISTRY, POLICY_REGISTRY

REGISTRIES = (POLICY_REGISTRY, ENV_REGISTRY, PIPELINE_REGISTRY, MODEL_REGISTRY)


class BuiltinPolicy: ...


class GoodPolicy: ...


class OtherPolicy: ...


class GoodEnv: ...


class GoodPipeline: ...


class GoodModel: ...


def make_plugin_module(monkeypatch: pytest.MonkeyPatch, module_name: str, **hooks: object) -> types.ModuleType:
    """A plugin module in sys.modules (so EntryPoint.load and import_module find it) with the given hooks."""
    module = types.ModuleType(module_name)
    for hook_name, function in hooks.items():
        setattr(module, hook_name, function)
    monkeypatch.setitem(sys.modules, module_name, module)
    return module


def register_one(name: str, obj: object, hook: str = "register_policies") -> object:
    """A hookimpl function named ``hook`` that registers ``obj`` as ``name``."""

    def implementation(register):
        register(name, obj)

    implementation.__name__ = hook
    return hookimpl(implementation)


class FakeInstall:
    """Stands in for installed distributions: the entry points they declare and the look-ups made."""

    def __init__(self) -> None:
        self.entry_points: list[importlib.metadata.EntryPoint] = []
        self.lookups: list[str] = []

    def __call__(self, *, group: str) -> list[importlib.metadata.EntryPoint]:
        self.lookups.append(group)
        return [entry_point for entry_point in self.entry_points if entry_point.group == group]

    def add(self, name: str, value: str) -> None:
        self.entry_points.append(importlib.metadata.EntryPoint(name=name, value=value, group="zoo"))


@pytest.fixture
def fake_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeInstall]:
    """Fresh plugin state, a fake built-in plugin and fake entry points; registrations are undone afterwards."""
    monkeypatch.setattr(plugins, "_report", None)
    make_plugin_module(monkeypatch, "zoo.builtin_plugin", register_policies=register_one("builtin_algo", BuiltinPolicy))
    install = FakeInstall()
    monkeypatch.setattr(importlib.metadata, "entry_points", install)
    before = {registry.kind: set(registry.names()) for registry in REGISTRIES}
    yield install
    for registry in REGISTRIES:
        for name in set(registry.names()) - before[registry.kind]:
            registry.unregister(name)


def load_without_warnings() -> plugins.PluginReport:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return load_plugins()


def test_builtin_and_entry_point_plugins_register_with_their_names_as_source(fake_world, monkeypatch):
    make_plugin_module(monkeypatch, "fake_good_ext", register_policies=register_one("good_algo", GoodPolicy))
    fake_world.add("good_ext", "fake_good_ext")
    report = load_without_warnings()
    assert report.loaded == ["built-in", "good_ext"]
    assert report.failures == []
    assert report.ok
    assert POLICY_REGISTRY.get("good_algo") is GoodPolicy
    assert POLICY_REGISTRY.source("good_algo") == "good_ext"
    assert POLICY_REGISTRY.get("builtin_algo") is BuiltinPolicy
    assert POLICY_REGISTRY.source("builtin_algo") == "built-in"
    assert report.lines() == ["plugin built-in: loaded", "plugin good_ext: loaded"]


def test_every_hook_fills_its_own_registry(fake_world, monkeypatch):
    make_plugin_module(
        monkeypatch,
        "fake_all_kinds",
        register_envs=register_one("good_env", GoodEnv, "register_envs"),
        register_pipelines=register_one("good_pipeline", GoodPipeline, "register_pipelines"),
        register_models=register_one("good_model", GoodModel, "register_models"),
    )
    fake_world.add("all_kinds", "fake_all_kinds")
    load_without_warnings()
    assert ENV_REGISTRY.get("good_env") is GoodEnv
    assert PIPELINE_REGISTRY.get("good_pipeline") is GoodPipeline
    assert MODEL_REGISTRY.get("good_model") is GoodModel
    assert {ENV_REGISTRY.source("good_env"), MODEL_REGISTRY.source("good_model")} == {"all_kinds"}
    assert "good_env" not in POLICY_REGISTRY


def test_broken_plugin_warns_and_the_others_still_load(fake_world, monkeypatch):
    fake_world.add("broken_ext", "fake_zoo_module_that_does_not_exist")
    make_plugin_module(monkeypatch, "fake_good_ext", register_policies=register_one("good_algo", GoodPolicy))
    fake_world.add("good_ext", "fake_good_ext")
    with pytest.warns(ZooPluginWarning) as caught:
        report = load_plugins()
    messages = [str(warning.message) for warning in caught]
    assert messages == ["zoo plugin 'broken_ext' failed to load: No module named 'fake_zoo_module_that_does_not_exist'"]
    assert report.loaded == ["built-in", "good_ext"]
    assert report.failures == [PluginFailure("broken_ext", "No module named 'fake_zoo_module_that_does_not_exist'")]
    assert not report.ok
    assert report.lines()[-1].startswith("plugin broken_ext: FAILED (No module named")
    assert POLICY_REGISTRY.source("good_algo") == "good_ext"


def test_duplicate_name_names_both_sources_and_rolls_the_plugin_back(fake_world, monkeypatch):
    make_plugin_module(monkeypatch, "fake_first_ext", register_policies=register_one("shared_name", GoodPolicy))

    @hookimpl
    def register_policies(register):
        register("second_only", OtherPolicy)  # registered before the clash, must be removed again
        register("shared_name", OtherPolicy)

    make_plugin_module(monkeypatch, "fake_second_ext", register_policies=register_policies)
    fake_world.add("first_ext", "fake_first_ext")
    fake_world.add("second_ext", "fake_second_ext")
    with pytest.warns(ZooPluginWarning) as caught:
        report = load_plugins()
    (message,) = [str(warning.message) for warning in caught]
    assert message.startswith("zoo plugin 'second_ext' failed to load: policy 'shared_name' is registered twice")
    assert f"by first_ext ({__name__}.GoodPolicy) and by second_ext ({__name__}.OtherPolicy)" in message
    assert report.loaded == ["built-in", "first_ext"]
    assert [failure.name for failure in report.failures] == ["second_ext"]
    assert POLICY_REGISTRY.get("shared_name") is GoodPolicy
    assert "second_only" not in POLICY_REGISTRY


def test_hook_raising_any_exception_is_isolated_with_its_type_in_the_message(fake_world, monkeypatch):
    @hookimpl
    def register_envs(register):
        raise KeyError("missing")

    make_plugin_module(monkeypatch, "fake_raising_ext", register_envs=register_envs)
    fake_world.add("raising_ext", "fake_raising_ext")
    with pytest.warns(ZooPluginWarning, match=r"^zoo plugin 'raising_ext' failed to load: KeyError: 'missing'$"):
        report = load_plugins()
    assert report.loaded == ["built-in"]


def test_misspelt_hook_name_is_reported_as_a_failure(fake_world, monkeypatch):
    make_plugin_module(
        monkeypatch, "fake_typo_ext", register_policy=register_one("typo_algo", GoodPolicy, "register_policy")
    )
    fake_world.add("typo_ext", "fake_typo_ext")
    with pytest.warns(ZooPluginWarning, match=r"zoo plugin 'typo_ext' failed to load: .*register_policy"):
        report = load_plugins()
    assert [failure.name for failure in report.failures] == ["typo_ext"]
    assert "typo_algo" not in POLICY_REGISTRY


def test_missing_builtin_plugin_is_a_failure_but_entry_points_still_load(fake_world, monkeypatch):
    monkeypatch.setattr(plugins, "BUILTIN_PLUGIN_MODULE", "fake_zoo_builtin_that_does_not_exist")
    make_plugin_module(monkeypatch, "fake_good_ext", register_policies=register_one("good_algo", GoodPolicy))
    fake_world.add("good_ext", "fake_good_ext")
    with pytest.warns(ZooPluginWarning, match="zoo plugin 'built-in' failed to load"):
        report = load_plugins()
    assert report.loaded == ["good_ext"]
    assert "builtin_algo" not in POLICY_REGISTRY


def test_entry_point_pointing_at_the_builtin_module_is_not_loaded_twice(fake_world):
    fake_world.add("builtin", "zoo.builtin_plugin")
    fake_world.add("builtin_attr", "zoo.builtin_plugin:something")
    report = load_without_warnings()
    assert report.loaded == ["built-in"]
    assert POLICY_REGISTRY.source("builtin_algo") == "built-in"


def test_exact_duplicate_entry_points_load_once(fake_world, monkeypatch):
    make_plugin_module(monkeypatch, "fake_good_ext", register_policies=register_one("good_algo", GoodPolicy))
    fake_world.add("good_ext", "fake_good_ext")
    fake_world.add("good_ext", "fake_good_ext")  # e.g. an editable and a regular install
    assert load_without_warnings().loaded == ["built-in", "good_ext"]


def test_load_is_idempotent_and_force_reloads_without_duplicate_errors(fake_world, monkeypatch):
    make_plugin_module(monkeypatch, "fake_good_ext", register_policies=register_one("good_algo", GoodPolicy))
    fake_world.add("good_ext", "fake_good_ext")
    first = load_without_warnings()
    second = load_without_warnings()
    assert second is first
    assert fake_world.lookups == ["zoo"]
    # A reload (as after installing a package) meets the same objects again: no DuplicateNameError.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        forced = load_plugins(force=True)
    assert forced is not first
    assert forced.loaded == ["built-in", "good_ext"] and forced.ok
    assert fake_world.lookups == ["zoo", "zoo"]
    assert load_plugins() is forced


def test_import_modules_runs_registration_decorators(tmp_path, monkeypatch):
    (tmp_path / "zoo_test_unpackaged_policy.py").write_text(
        "from zoo.registry import POLICY_REGISTRY\n"
        "@POLICY_REGISTRY.register('unpackaged_algo')\n"
        "class UnpackagedPolicy: ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "zoo_test_unpackaged_policy", raising=False)
    try:
        (module,) = import_modules(["zoo_test_unpackaged_policy"])
        assert POLICY_REGISTRY.get("unpackaged_algo") is module.UnpackagedPolicy
        assert POLICY_REGISTRY.source("unpackaged_algo") == "built-in"
    finally:
        POLICY_REGISTRY.unregister("unpackaged_algo")
        sys.modules.pop("zoo_test_unpackaged_policy", None)


def test_import_modules_errors_name_the_module_and_the_fix(tmp_path, monkeypatch):
    (tmp_path / "zoo_test_raises_on_import.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "zoo_test_needs_missing_dep.py").write_text("import zoo_test_dependency_that_is_missing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as not_found:
        import_modules(["zoo_test_no_such_module"])
    assert str(not_found.value) == (
        "import_names: module 'zoo_test_no_such_module' not found: put it next to the config file, list its "
        "directory in import_paths, or put that directory on PYTHONPATH"
    )
    with pytest.raises(ConfigError) as raised:
        import_modules(["zoo_test_raises_on_import"])
    assert str(raised.value) == (
        "import_names: importing module 'zoo_test_raises_on_import' failed: RuntimeError: boom: "
        "fix the error in that module"
    )
    with pytest.raises(ConfigError, match="No module named 'zoo_test_dependency_that_is_missing': install the"):
        import_modules(["zoo_test_needs_missing_dep"])
    with pytest.raises(ConfigError) as one_string:
        import_modules("my_policies")
    assert str(one_string.value) == ("import_names must be a list of module names, got str 'my_policies': write "
                                     "['my_policies'] (on the command line: --set 'import_names=[my_policies]')")
    for name in ("zoo_test_raises_on_import", "zoo_test_needs_missing_dep"):
        sys.modules.pop(name, None)


def test_modules_next_to_the_config_are_found_from_any_directory(tmp_path, monkeypatch):
    from zoo.run import train
    from zoo.run.run_dir import CONFIG_FILE

    lab = tmp_path / "lab"
    lab.mkdir()
    (lab / "zoo_test_lab_env.py").write_text(
        "import gymnasium as gym\n"
        "from zoo.registry import ENV_REGISTRY\n"
        "@ENV_REGISTRY.register('zoo_test_lab_cartpole')\n"
        "def make(**kwargs):\n"
        "    return gym.make('CartPole-v1', **kwargs)\n"
    )
    (lab / "cfg.py").write_text(
        "config = dict(import_names=['zoo_test_lab_env'], env=dict(id='zoo_test_lab_cartpole'),\n"
        "              policy=dict(type='a2c'),\n"
        "              pipeline=dict(num_envs=2, rollout_steps=4, max_env_steps=16, eval_every=0))\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(lab))])
    monkeypatch.delitem(sys.modules, "zoo_test_lab_env", raising=False)
    try:
        summary = train(lab / "cfg.py", [f"runs_dir={tmp_path / 'runs'}"])
        assert summary["env_steps"] == 16
        saved = (Path(summary["run_dir"]) / CONFIG_FILE).read_text()
        assert str(lab.resolve()) in saved  # the run's config.yaml finds the module again, from anywhere
    finally:
        ENV_REGISTRY.unregister("zoo_test_lab_cartpole")
        sys.modules.pop("zoo_test_lab_env", None)


def test_nested_call_during_loading_returns_the_load_in_progress(fake_world, monkeypatch):
    seen = []

    @hookimpl
    def register_models(register):
        seen.append(load_plugins())  # e.g. a plugin module that imports code calling load_plugins()

    make_plugin_module(monkeypatch, "fake_nested_ext", register_models=register_models)
    fake_world.add("nested_ext", "fake_nested_ext")
    report = load_without_warnings()
    assert seen == [report] and seen[0] is report
    assert fake_world.lookups == ["zoo"]


class _Distribution:
    name = "broken-zoo-ext"


def test_a_broken_installed_plugin_names_the_package_to_fix_and_the_cli_shows_one_clean_line(
    fake_world, monkeypatch, capsys
):
    from zoo.cli import main

    entry_point = importlib.metadata.EntryPoint(name="broken_ext", value="fake_zoo_module_missing", group="zoo")
    monkeypatch.setattr(importlib.metadata.EntryPoint, "dist", _Distribution(), raising=False)
    fake_world.entry_points.append(entry_point)
    assert main(["list"]) == 0
    out, err = capsys.readouterr()
    assert "policies:" in out and "policys" not in out
    assert err.strip().splitlines() == [
        "zoo: warning: zoo plugin 'broken_ext' failed to load: No module named 'fake_zoo_module_missing' (from the "
        "package 'broken-zoo-ext': fix or update it, or `pip uninstall broken-zoo-ext`)"
    ]
