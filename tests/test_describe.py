"""``zoo config POLICY``: every key of the policy's and pipeline's config with its default, allowed values and a
meaning read from the classes' own source."""

from __future__ import annotations

import subprocess
import sys

import pytest

import zoo.config.resolve as experiment
from zoo.describe import describe, key_docs
from zoo.errors import ZooError
from zoo.plugins import load_plugins
from zoo.registry import PIPELINE_REGISTRY, POLICY_REGISTRY


def test_every_key_of_every_builtin_policy_and_pipeline_has_a_meaning():
    load_plugins()
    for registry in (POLICY_REGISTRY, PIPELINE_REGISTRY):
        for name, cls, _ in registry.items():
            docs = key_docs(cls)
            assert [key for key in cls.default_config if not docs.get(key)] == [], name
    docs = experiment.BASE_DOCS
    top = [key for key, value in experiment.BASE_CONFIG.items() if not isinstance(value, dict)]
    sections = [f"{section}.{key}" for section in ("env", "logger") for key in experiment.BASE_CONFIG[section]]
    assert [key for key in [*top, *sections] if not docs.get(key)] == []


def test_meanings_come_from_the_declared_schema_without_the_sources(monkeypatch):
    """An installed wheel may ship without sources (or with them stripped): the table still has every meaning."""
    import inspect

    def no_source(obj):
        raise OSError("no source")

    monkeypatch.setattr(inspect, "getsource", no_source)
    load_plugins()
    for registry in (POLICY_REGISTRY, PIPELINE_REGISTRY):
        for name, cls, source in registry.items():
            if source == "built-in":
                docs = key_docs(cls)
                assert [key for key in cls.default_config if not docs.get(key)] == [], name
    assert "the budget: env steps" in describe("ppo")


def _line(text: str, key: str) -> list[str]:
    return next(line.split(None, 3) for line in text.splitlines() if line.split()[:1] == [key])


def test_the_table_shows_defaults_ranges_choices_and_meanings():
    text = describe("ppo")
    assert text.splitlines()[0].startswith("policy ppo (zoo.policies.ppo.PPOPolicy) on pipeline serial_onpolicy")
    clip = _line(text, "clip_ratio")
    assert clip[1] == "0.2" and clip[2] == "[0," and "PPO's clip range" in clip[3]
    assert "one of adam, rmsprop" in " ".join(_line(text, "optimizer"))
    assert "[0, 9223372036854775807]" in " ".join(_line(text, "seed"))
    assert _line(text, "rollout_steps")[1] == "128"
    parallel = describe("ppo", "parallel_sync")
    assert "world_size" in parallel and "rollout_steps" in parallel
    assert "queue_size" in describe("impala") and "causal_interval" in describe("sac_ace")


def test_bad_names_are_one_line():
    with pytest.raises(ZooError, match="does not run on pipeline 'parallel_async'"):
        describe("ppo", "parallel_async")
    out = subprocess.run([sys.executable, "-m", "zoo", "config", "ppq"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "ppo" in out.stderr
