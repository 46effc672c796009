"""The example third-party plugin (examples/zoo_plugin_example) loads through a faked entry point and trains."""

from __future__ import annotations

import importlib.metadata
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from zoo import plugins
from zoo.cli import main
from zoo.plugins import load_plugins
from zoo.registry import ENV_REGISTRY, MODEL_REGISTRY, PIPELINE_REGISTRY, POLICY_REGISTRY

REGISTRIES = (POLICY_REGISTRY, ENV_REGISTRY, PIPELINE_REGISTRY, MODEL_REGISTRY)

EXAMPLE_DIR = Path(__file__).resolve().parents[1] / "examples" / "zoo_plugin_example"
EXAMPLE_CONFIG = EXAMPLE_DIR / "config.py"
ENTRY_POINT = importlib.metadata.EntryPoint(name="example", value="zoo_plugin_example.plugin", group="zoo")


@pytest.fixture
def example_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The example plugin as if pip-installed: its directory on sys.path and its entry point in group 'zoo'."""
    monkeypatch.syspath_prepend(str(EXAMPLE_DIR))
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda *, group: [ENTRY_POINT] if group == ENTRY_POINT.group else []
    )
    monkeypatch.setattr(plugins, "_report", None)  # restored afterwards, so other tests see the real state
    for module in ("zoo_plugin_example", "zoo_plugin_example.plugin"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    before = {registry.kind: set(registry.names()) for registry in REGISTRIES}
    try:
        yield
    finally:  # unregister everything the forced load added (the example's policy, built-ins if not loaded yet)
        for registry in REGISTRIES:
            for name in set(registry.names()) - before[registry.kind]:
                registry.unregister(name)


def test_example_plugin_registers_lists_and_trains(example_plugin, tmp_path, capsys):
    report = load_plugins(force=True)
    assert report.ok, report.lines()
    assert "example" in report.loaded
    policy_cls = POLICY_REGISTRY.get("reinforce_baseline")
    assert POLICY_REGISTRY.source("reinforce_baseline") == "example"
    assert policy_cls.__module__ == "zoo_plugin_example.plugin"

    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    (row,) = [line for line in listed.splitlines() if line.split()[:1] == ["reinforce_baseline"]]
    assert row.split()[1] == "example"
    assert "plugin example: loaded" in listed

    overrides = ["--set", f"runs_dir={tmp_path}", "--set", "pipeline.max_env_steps=2048"]
    code = main(["run", "--config", str(EXAMPLE_CONFIG), *overrides])
    assert code == 0, capsys.readouterr().err
    run_dir = tmp_path / "reinforce_baseline_cartpole"
    for name in ("config.yaml", "metrics.csv", "checkpoint.pt"):
        assert (run_dir / name).is_file(), name
    assert "type: reinforce_baseline" in (run_dir / "config.yaml").read_text()
    assert len((run_dir / "metrics.csv").read_text().splitlines()) >= 2  # header and at least one iteration
    written = json.loads((run_dir / "example_plugin_summary.json").read_text())  # the plugin's on_run_end callback
    assert written["policy"] == "reinforce_baseline" and written["reason"] == "max_env_steps"


def test_the_example_plugin_gets_memory_by_the_key_alone(example_plugin, tmp_path, capsys):
    """A plugin on ActorCriticPolicy whose update reads forward_batch takes policy.recurrent with no code of its
    own (issue 52): it trains with a GRU and its checkpoint holds the core."""
    assert load_plugins(force=True).ok
    overrides = ["--set", f"runs_dir={tmp_path}", "--set", "pipeline.max_env_steps=1024", "--set",
                 "policy.recurrent=gru", "--set", "env.id=CartPoleNoVel-v1", "--set", "policy.sequence_length=8",
                 "--set", "pipeline.eval_every=0"]
    assert main(["run", "--config", str(EXAMPLE_CONFIG), "-q", *overrides]) == 0, capsys.readouterr().err
    from zoo.run.run_dir import load_weights_only

    weights = load_weights_only(tmp_path / "reinforce_baseline_cartpole" / "checkpoint.pt")["policy"]["model"]
    assert any(name.startswith("actor_core.rnn.") for name in weights)
