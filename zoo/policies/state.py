"""The learner state: what a policy declares it acts with and learns, and everything derived from that declaration.

A policy class names its state in two tuples of attribute names: ``acting_parts`` (what acting needs: kept by an
acting-only copy, published to IMPALA's actors) and ``learning_parts`` (what learning adds: critics, target networks,
optimisers, counters). A part may be

- an ``nn.Module`` (its ``state_dict``; its parameters, buffers and flat parameter buffer are state tensors),
- an optimiser (``FlatOptimizer``, whose ``tensors()`` are state tensors, or a ``torch.optim.Optimizer``),
- a ``torch.Tensor`` (saved as a copy, loaded in place: a compiled step and a CUDA graph keep its address),
- a ``dict``, ``list`` or ``tuple`` of parts (a tensor in a dict is state like any other),
- any object with ``state_dict``/``load_state_dict`` (and ``tensors()`` where a learning step reads tensors of it),
- a plain value (an int counter, a float, None), saved as it is and set again on load.

From the declaration, and from nothing else: ``Policy.state_dict``/``load_state_dict`` (checkpoints, model.pt),
``actor_state_dict`` (the acting parts' tensors), the tensors a compiled step and a CUDA graph keep
(``state_tensors``), the flat parameter views of the compiled step (``flat_networks``) and the networks an exported
policy holds (``networks``). No attribute is found by looking through the policy's ``vars``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from .optim import FlatOptimizer, flat_parameters

_PLAIN = (int, float, bool, str, type(None))


def part_state(value: Any) -> Any:
    """What ``state_dict`` saves of one part (see the module docstring); tensors are copied."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {key: part_state(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [part_state(item) for item in value]
    if isinstance(value, _PLAIN):
        return value
    if hasattr(value, "state_dict"):
        return value.state_dict()
    raise TypeError(f"a state part of type {type(value).__name__} has no state_dict: declare its tensors or values")


def load_part(value: Any, state: Any, name: str) -> Any:
    """Load ``state`` into the part ``value`` in place where it is mutable; returns the part's new value (a plain
    value, or a tuple, is replaced: the caller sets it)."""
    if isinstance(value, torch.Tensor):
        with torch.no_grad():
            value.copy_(torch.as_tensor(state))
        return value
    if isinstance(value, dict):
        if set(value) != set(state):
            raise ValueError(f"state part '{name}' has keys {sorted(state)}, expected {sorted(value)}")
        for key in value:
            value[key] = load_part(value[key], state[key], f"{name}.{key}")
        return value
    if isinstance(value, (list, tuple)):
        if len(value) != len(state):
            raise ValueError(f"state part '{name}' has {len(state)} items, expected {len(value)}")
        loaded = [load_part(item, saved, f"{name}[{index}]") for index, (item, saved) in enumerate(zip(value, state))]
        if isinstance(value, list):
            value[:] = loaded
            return value
        return tuple(loaded)
    if isinstance(value, _PLAIN):
        return state
    value.load_state_dict(state)
    return value


def leaves(value: Any) -> Iterator[Any]:
    """The parts inside ``value`` (containers opened), in declaration order."""
    if isinstance(value, dict):
        for item in value.values():
            yield from leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from leaves(item)
    elif not isinstance(value, _PLAIN):
        yield value


def tensors_of(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor a learning step may read or write in place inside a part."""
    for leaf in leaves(value):
        if isinstance(leaf, torch.Tensor):
            yield leaf
        elif isinstance(leaf, nn.Module):
            yield from leaf.parameters()
            yield from leaf.buffers()
            flat = flat_parameters(leaf)
            if flat is not None:
                yield flat
        elif isinstance(leaf, torch.optim.Optimizer):
            for group in leaf.param_groups:
                yield from group["params"]
            for per_parameter in leaf.state.values():
                yield from (item for item in per_parameter.values() if isinstance(item, torch.Tensor))
        elif hasattr(leaf, "tensors"):
            yield from leaf.tensors()


class LearnerState:
    """The declared state of one policy (``acting_parts`` and, unless acting only, ``learning_parts``).

    Examples:
        >>> import gymnasium as gym; from zoo.policies import Policy
        >>> class Tiny(Policy):
        ...     acting_parts, learning_parts = ("net",), ("updates",)
        >>> policy = Tiny({}, gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), "cpu")
        >>> policy.net, policy.updates = nn.Linear(2, 1), 7
        >>> state = LearnerState(policy)  # also policy.learner_state
        >>> sorted(state.state_dict()), sorted(state.actor_state_dict()), list(state.networks())
        (['net', 'updates'], ['bias', 'weight'], ['net'])
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def names(self, acting_only: bool | None = None) -> tuple[str, ...]:
        """The declared part names this policy holds (acting only: the acting parts alone)."""
        policy = self.policy
        acting_only = policy.acting_only if acting_only is None else acting_only
        return tuple(policy.acting_parts) if acting_only else (*policy.acting_parts, *policy.learning_parts)

    def parts(self, names: tuple[str, ...] | None = None) -> dict[str, Any]:
        """Each declared part's current value by name."""
        missing = [name for name in (names or self.names()) if not hasattr(self.policy, name)]
        if missing:
            raise AttributeError(f"{type(self.policy).__name__} declares state parts it has no attribute for: "
                                 f"{', '.join(missing)}")
        return {name: getattr(self.policy, name) for name in (names or self.names())}

    def state_dict(self) -> dict[str, Any]:
        """Every declared part's state by name."""
        return {name: part_state(value) for name, value in self.parts().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load ``state_dict`` output: each part in place (plain values set again). An acting-only policy reads its
        acting parts and ignores the rest; a part missing from ``state`` is an error unless it is None here."""
        policy = self.policy
        for name, value in self.parts().items():
            if name not in state:
                if value is None:
                    continue
                raise KeyError(f"the saved state has no '{name}' (it holds {', '.join(sorted(state))}): was it "
                               f"saved by another policy or version?")
            if state[name] is None or value is None:
                setattr(policy, name, state[name] if value is None or isinstance(value, _PLAIN) else value)
                continue
            loaded = load_part(value, state[name], name)
            if loaded is not value:
                setattr(policy, name, loaded)

    def actor_state_dict(self) -> dict[str, torch.Tensor]:
        """Copies of the acting parts' tensors: the one part's own keys, or ``part.key`` when there are several."""
        parts = self.parts(tuple(self.policy.acting_parts))
        single = len(parts) == 1
        return {key if single else f"{name}.{key}": tensor.detach().clone()
                for name, value in parts.items() for key, tensor in _named_tensors(value)}

    def load_actor_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load what ``actor_state_dict`` returned."""
        parts = self.parts(tuple(self.policy.acting_parts))
        if len(parts) == 1:
            name, value = next(iter(parts.items()))
            load_part(value, state, name)
            return
        for name, value in parts.items():
            own = {key.split(".", 1)[1]: tensor for key, tensor in state.items() if key.startswith(f"{name}.")}
            load_part(value, own, name)

    def state_tensors(self) -> list[torch.Tensor]:
        """Every tensor of the declared parts, each once (what a compiled step reads and writes in place)."""
        seen: set[int] = set()
        found = []
        for value in self.parts().values():
            for tensor in tensors_of(value):
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    found.append(tensor)
        return found

    def networks(self, acting: bool = True) -> dict[str, nn.Module]:
        """The declared modules (of the acting parts alone, by default) by part name (``name.k`` inside containers)."""
        names = tuple(self.policy.acting_parts) if acting else self.names()
        found: dict[str, nn.Module] = {}
        for name, value in self.parts(names).items():
            modules = [leaf for leaf in leaves(value) if isinstance(leaf, nn.Module)]
            for index, module in enumerate(modules):
                found[name if len(modules) == 1 and module is value else f"{name}.{index}"] = module
        return found

    def flat_networks(self) -> list[tuple[nn.Module, torch.Tensor, bool]]:
        """The declared networks whose parameters lie in one flat buffer: (module, buffer, whether an optimiser
        differentiates it), in declaration order (a network an optimiser steps, declared only through that
        optimiser, where the optimiser stands), each once (``zoo.accel.flat_views``)."""
        leaves_ = [leaf for value in self.parts().values() for leaf in leaves(value)]
        stepped = {id(leaf.module): leaf.flat for leaf in leaves_ if isinstance(leaf, FlatOptimizer)}
        found: list[tuple[nn.Module, torch.Tensor, bool]] = []
        covered: set[int] = set()
        for leaf in leaves_:
            module = leaf.module if isinstance(leaf, FlatOptimizer) else leaf
            if not isinstance(module, nn.Module) or id(module) in covered:
                continue
            flat = stepped.get(id(module))
            flat = flat if flat is not None else flat_parameters(module)
            if flat is not None:
                found.append((module, flat, id(module) in stepped))
                covered.add(id(module))
        return found


def _named_tensors(value: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors of a part by their ``state_dict`` names (a module's state dict, a tensor as '')."""
    if isinstance(value, nn.Module):
        yield from value.state_dict().items()
    elif isinstance(value, torch.Tensor):
        yield "", value
    elif isinstance(value, dict):
        for key, item in value.items():
            for name, tensor in _named_tensors(item):
                yield (f"{key}.{name}" if name else str(key)), tensor
    elif hasattr(value, "state_dict"):
        yield from ((key, tensor) for key, tensor in value.state_dict().items() if isinstance(tensor, torch.Tensor))
