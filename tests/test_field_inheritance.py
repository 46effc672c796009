"""A policy's ``fields`` extend its bases' (zoo.config.schema.declare_fields): a plugin on a family base gets the
keys the base honours (``compile``, ``precision``, ``batch_size`` off-policy; every actor-critic key on-policy)
without declaring them, and its run says why it compiled or not."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from torch import nn

from zoo import train
from zoo.config.schema import Field
from zoo.errors import ConfigError
from zoo.policies import ActorCriticPolicy, OffPolicyPolicy
from zoo.policies.impala import ImpalaPolicy
from zoo.policies.optim import FlatOptimizer
from zoo.policies.ppo import PPOPolicy
from zoo.registry import POLICY_REGISTRY


class TinyQ(OffPolicyPolicy):
    """A plugin-style Q-learner declaring only its own keys (no compile, precision or batch_size)."""

    compilable: ClassVar[bool] = True
    acting_parts: ClassVar[tuple[str, ...]] = ("q",)
    learning_parts: ClassVar[tuple[str, ...]] = ("optimizer",)
    fields: ClassVar[dict[str, Field]] = {
        "hidden": Field(16, "width of the hidden layer", range=(1, None), frozen=True),
        "learning_rate": Field(1e-3, "Adam learning rate", range=(0.0, None)),
        "gamma": Field(0.99, "discount", range=(0.0, 1.0)),
    }

    def __init__(self, cfg, observation_space, action_space, device, acting_only=False) -> None:
        super().__init__(cfg, observation_space, action_space, device, acting_only)
        size = int(np.prod(observation_space.shape))
        self.q = nn.Sequential(nn.Linear(size, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, int(action_space.n)))
        if not acting_only:
            self.optimizer = FlatOptimizer(self.q, "adam", cfg.learning_rate)

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(obs).argmax(-1)

    def explore_action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(obs).argmax(-1)

    def update(self, batch: dict[str, torch.Tensor], ctx: Any) -> dict[str, torch.Tensor]:
        action = batch["action"].long().reshape(-1)
        q = self.q(batch["obs"]).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            bootstrap = (~batch["terminated"]).float() * self.q(batch["next_obs"]).max(-1).values
        loss = ((q - (batch["reward"] + self.cfg.gamma * bootstrap)) ** 2).mean()
        return {"q_loss": self.optimizer.minimize(loss)}


@pytest.fixture
def tiny_q():
    POLICY_REGISTRY.register("tiny_q_inherits")(TinyQ)
    yield "tiny_q_inherits"
    POLICY_REGISTRY.unregister("tiny_q_inherits") if hasattr(POLICY_REGISTRY, "unregister") else None


def test_an_off_policy_plugin_gets_the_keys_its_base_honours():
    assert list(TinyQ.fields) == ["batch_size", "precision", "compile", "hidden", "learning_rate", "gamma"]
    assert TinyQ.default_config["compile"] == "auto" and TinyQ.default_config["precision"] == "fp32"
    assert TinyQ.config_choices["compile"] == ("auto", "on", "off")
    assert "bf16" in TinyQ.config_choices["precision"]
    assert TinyQ.config_ranges["batch_size"] == (1, 1_000_000)
    assert "compiled graph" in TinyQ.config_docs["compile"]


def test_a_subclass_declaring_one_key_keeps_every_key_of_its_family():
    class OneMore(PPOPolicy):
        fields: ClassVar[dict[str, Field]] = {"my_coef": Field(0.5, "what my_coef weighs")}

    class Redefaulted(ActorCriticPolicy):
        fields: ClassVar[dict[str, Field]] = {"learning_rate": ActorCriticPolicy.fields["learning_rate"].but(1e-3)}

    assert set(PPOPolicy.fields) < set(OneMore.fields) and list(OneMore.fields)[-1] == "my_coef"
    assert OneMore.default_config["clip_ratio"] == 0.2 and OneMore.default_config["compile"] == "auto"
    assert OneMore.default_config["recurrent"] == "none"
    assert Redefaulted.default_config["learning_rate"] == 1e-3  # a declared key replaces the base's
    assert set(Redefaulted.fields) == set(ActorCriticPolicy.fields)
    assert "compile" in ActorCriticPolicy.fields  # the on-policy base offers it to every plugin


def test_withdrawn_keys_are_not_offered_and_a_misspelt_one_is_an_error():
    for key in ("use_sde", "sde_sample_freq", "full_std", "sequence_length"):
        assert key not in ImpalaPolicy.fields and key not in ImpalaPolicy.default_config

    class AfterImpala(ImpalaPolicy):  # a subclass of a class that withdrew keys does not get them back
        fields: ClassVar[dict[str, Field]] = {"extra": Field(1, "an extra key")}

    assert "sequence_length" not in AfterImpala.fields and "vtrace_lambda" in AfterImpala.fields
    with pytest.raises(TypeError, match="'sequence_lenght'.*remove the name"):
        class Misspelt(ActorCriticPolicy):
            fields: ClassVar[dict[str, Field]] = {}
            withdrawn_fields: ClassVar[tuple[str, ...]] = ("sequence_lenght",)


def _run(tmp_path, policy: str, *overrides: str) -> dict:
    train({"exp_name": "inh", "runs_dir": str(tmp_path), "env": {"id": "CartPole-v1"},
           "policy": {"type": policy, "batch_size": 16},
           "pipeline": {"learning_starts": 32, "steps_per_iteration": 32, "max_env_steps": 64, "eval_every": 0,
                        "buffer_size": 128}}, list(overrides))
    (session,) = json.loads((tmp_path / "inh" / "environment.json").read_text())["sessions"]
    return session


def test_the_inherited_keys_work_from_a_run_and_the_run_says_why_it_ran_eager(tmp_path, tiny_q):
    session = _run(tmp_path / "a", tiny_q, "policy.precision=bf16", "policy.compile=off")
    assert session["precision"] == "bf16" and session["compile"] is False
    assert session["compile_reason"] == "policy.compile=off"
    session = _run(tmp_path / "b", tiny_q)  # auto, 32 planned updates: too few to pay
    assert session["compile"] is False and session["compile_reason"].startswith("auto: 32 planned updates")
    with pytest.raises(ConfigError, match="unknown config key 'policy.compiel'"):
        _run(tmp_path / "c", tiny_q, "policy.compiel=on")


@pytest.mark.slow
def test_an_off_policy_plugin_compiles_with_the_inherited_key(tmp_path, tiny_q):
    session = _run(tmp_path, tiny_q, "policy.compile=on")
    assert session["compile"] is True and session["compile_reason"] == "policy.compile=on"
