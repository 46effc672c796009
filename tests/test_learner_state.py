"""The learner state (zoo.policies.state): one declaration, ``acting_parts`` and ``learning_parts``, from which
checkpoints, actor weights, exported networks, a compiled step's static tensors and its flat views all come. A tensor
kept in a dict or a list is state like any other; loading is in place (a compiled step and a CUDA graph keep the
addresses); nothing is found by looking through the policy's attributes."""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict
from torch import nn

from zoo.policies import ActingGraph, OffPolicyPolicy, Policy, SACPolicy
from zoo.policies.optim import FlatOptimizer, flat_parameters, flatten_parameters
from zoo.policies.state import part_state

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
CPU = torch.device("cpu")


class Counter:
    """An object with state of its own and a tensor a learning step reads."""

    def __init__(self) -> None:
        self.count, self.tensor = 0, torch.zeros(2)

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count, "tensor": self.tensor.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.count = state["count"]
        self.tensor.copy_(state["tensor"])

    def tensors(self) -> list[torch.Tensor]:
        return [self.tensor]


class Declared(Policy):
    """Every kind of part: a network, an optimiser, a tensor, a dict and a list of tensors, a tuple, an object, a
    counter, a value that may be None, and a network that is not declared (it must be invisible)."""

    acting_parts: ClassVar[tuple[str, ...]] = ("actor", "scales")
    learning_parts: ClassVar[tuple[str, ...]] = ("critic", "optimizer", "target", "bias", "history", "pair", "counter",
                                                 "steps", "last")

    def __init__(self, cfg: EasyDict, observation_space: gym.Space, action_space: gym.Space, device: torch.device,
                 acting_only: bool = False) -> None:
        super().__init__(cfg, observation_space, action_space, device, acting_only)
        self.actor = nn.Linear(3, 2)
        self.scales = {"a": torch.ones(2), "b": torch.full((3,), 2.0)}
        self.critic = nn.Linear(5, 1)
        self.optimizer = FlatOptimizer(self.critic, "adam", 1e-3)
        self.target = nn.Linear(5, 1)
        flatten_parameters(self.target)
        self.bias = torch.zeros(4)
        self.history = [torch.zeros(2), torch.ones(1)]
        self.pair = (torch.zeros(1), torch.ones(1))
        self.counter = Counter()
        self.steps = 0
        self.last: float | None = None
        self.undeclared = nn.Linear(2, 2)

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.actor(obs)) * self.scales["a"]


def build(seed: int = 0, acting_only: bool = False) -> Declared:
    torch.manual_seed(seed)
    return Declared(EasyDict(), OBS, ACT, CPU, acting_only)


def changed(policy: Declared) -> Declared:
    """Every part moved away from its initial value."""
    with torch.no_grad():
        for tensor in (policy.actor.weight, policy.critic.weight, policy.target.weight, policy.bias,
                       policy.scales["b"], policy.history[1], policy.pair[0], policy.counter.tensor):
            tensor.add_(1.5)
        policy.optimizer.exp_avg.add_(0.25)
    policy.optimizer.steps = 7
    policy.counter.count, policy.steps, policy.last = 3, 11, 0.5
    return policy


def test_every_kind_of_part_saves_and_loads_in_place():
    source, target = changed(build(0)), build(1)
    addresses = [t.data_ptr() for t in target.learner_state.state_tensors()]
    target.load_state_dict(copy.deepcopy(source.state_dict()))
    assert [t.data_ptr() for t in target.learner_state.state_tensors()] == addresses  # in place, every tensor
    for mine, theirs in zip(target.learner_state.state_tensors(), source.learner_state.state_tensors(), strict=True):
        assert torch.equal(mine, theirs)
    assert (target.counter.count, target.steps, target.last, target.optimizer.steps) == (3, 11, 0.5, 7)
    assert isinstance(target.pair, tuple) and torch.equal(target.pair[0], source.pair[0])
    assert not torch.equal(target.undeclared.weight, source.undeclared.weight)  # not declared: not state
    assert set(source.state_dict()) == {*Declared.acting_parts, *Declared.learning_parts}
    # a value that was None is None again when the state says so (a restored earlier state)
    target.load_state_dict(build(2).state_dict())
    assert target.last is None and target.steps == 0


def test_the_state_tensors_are_the_declared_ones_each_once_including_those_in_dicts_lists_and_objects():
    policy = build()
    found = {id(t) for t in policy.learner_state.state_tensors()}
    expected = [policy.actor.weight, policy.actor.bias, *policy.scales.values(), policy.critic.weight,
                *policy.optimizer.tensors(), flat_parameters(policy.target), policy.target.weight, policy.bias,
                *policy.history, *policy.pair, policy.counter.tensor]
    assert {id(t) for t in expected} <= found
    assert len(found) == len(policy.learner_state.state_tensors())  # each once
    assert id(policy.undeclared.weight) not in found


def test_acting_only_copies_hold_the_acting_parts_and_actors_get_their_weights():
    learner, actor = changed(build(0)), build(1, acting_only=True)
    assert set(actor.learner_state.names()) == {"actor", "scales"}
    actor.load_state_dict(learner.state_dict())  # a learner's checkpoint: the learning parts are ignored
    assert torch.equal(actor.actor.weight, learner.actor.weight) and torch.equal(actor.scales["b"],
                                                                                 learner.scales["b"])
    weights = learner.actor_state_dict()
    assert set(weights) == {"actor.weight", "actor.bias", "scales.a", "scales.b"}
    fresh = build(2, acting_only=True)
    fresh.load_actor_state_dict(weights)
    assert torch.equal(fresh.actor.weight, learner.actor.weight) and torch.equal(fresh.scales["b"],
                                                                                 learner.scales["b"])


def test_a_part_missing_from_the_state_is_named_and_a_part_without_state_is_refused():
    policy = build()
    state = policy.state_dict()
    del state["bias"]
    with pytest.raises(KeyError, match="the saved state has no 'bias'"):
        build(1).load_state_dict(state)
    with pytest.raises(TypeError, match="a state part of type object has no state_dict"):
        part_state(object())

    class Undeclared(Declared):
        learning_parts = (*Declared.learning_parts, "nowhere")

    with pytest.raises(AttributeError, match="declares state parts it has no attribute for: nowhere"):
        Undeclared(EasyDict(), OBS, ACT, CPU).state_dict()


def test_exported_networks_and_flat_views_come_from_the_declaration():
    policy = build()
    graph = ActingGraph(policy)
    assert set(graph.networks) == {"actor"}  # the acting parts' networks, not every module attribute
    flats = policy.learner_state.flat_networks()
    assert [(module, differentiated) for module, _, differentiated in flats] == [(policy.critic, True),
                                                                                 (policy.target, False)]
    assert flats[0][1] is policy.optimizer.flat and flats[1][1] is flat_parameters(policy.target)
    policy.target.weight.data = policy.target.weight.detach().clone()  # moved out of its buffer: no longer flat
    assert [module for module, *_ in policy.learner_state.flat_networks()] == [policy.critic]

    class Nothing(Policy):
        def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
            return obs

    with pytest.raises(ValueError, match="declares no acting networks"):
        ActingGraph(Nothing(EasyDict(), OBS, ACT, CPU))
    with pytest.raises(NotImplementedError, match="declares no state: set acting_parts and learning_parts"):
        Nothing(EasyDict(), OBS, ACT, CPU).state_dict()


def test_sacs_declaration_holds_every_tensor_its_step_writes():
    """Every tensor SAC's update writes in place is declared (the compiled step and a CUDA graph keep exactly those)."""
    torch.manual_seed(0)
    policy = SACPolicy(EasyDict({**SACPolicy.default_config, "hidden_sizes": [8], "batch_size": 4}), OBS, ACT, CPU)
    declared = {t.untyped_storage().data_ptr() for t in policy.learner_state.state_tensors()}
    written = [policy.actor_optimizer.flat, policy.critic_optimizer.flat, policy.alpha_optimizer.flat,
               policy.target_flat, policy.critic_optimizer.exp_avg, policy.alpha_optimizer.step_count]
    assert all(t.untyped_storage().data_ptr() in declared for t in written)
    assert isinstance(policy, OffPolicyPolicy) and set(policy.state_dict()) == {
        "updates", *SACPolicy.acting_parts, *SACPolicy.learning_parts}
