"""Networks whose parameters live in flat buffers, seen by the compiled learning step as views of those buffers.

``FlatOptimizer`` (and ``flatten_parameters`` for target networks) store a module's parameters as slices of one
flat tensor, which the optimiser step, Polyak averaging and resets update in place. Traced as they are, the
step's inputs would be the flat buffers and, separately, every parameter: tensors that alias each other, one of
them mutated. torch's AOT autograd then merges them into a synthetic base on every call (about a millisecond of
Python per learning step on a GPU's host; docs/speed.md), and inductor does not capture a graph with such inputs as a
CUDA graph (every kernel launched one by one). ``FlatModules.call(fn, ...)``, used inside the compiled step, swaps each
such module's parameters for views of its flat buffer made inside the graph (a reparametrisation), so that the
buffers alone are inputs. A buffer an optimiser steps is marked as requiring gradients, once, outside the graph
(dynamo cannot trace ``requires_grad_`` inside one; the buffer is only ever changed in place under ``no_grad``):
``FlatOptimizer.minimize`` differentiates with respect to the module's parameters as they are at the time, these
views. The arithmetic is the same operations on the same memory as eager's; the eager step does not use this.

Which modules and buffers: what the policy declares (``zoo.policies.state``: the flat buffers of its declared
networks and optimisers), never found by looking through its attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .torch_internals import reparametrized

# (module, flat buffer, whether an optimiser differentiates it): what a policy declares
Declared = tuple[nn.Module, torch.Tensor, bool]
# (module, flat buffer, [(parameter name, shape, stride, offset into the buffer)])
Spec = tuple[nn.Module, torch.Tensor, list[tuple[str, torch.Size, tuple[int, ...], int]]]


class FlatModules:
    """The modules among ``declared()`` whose parameters all lie in their flat buffer, as views to swap in."""

    def __init__(self, declared: Callable[[], list[Declared]]) -> None:
        self._declared = declared
        self.specs: list[Spec] = []
        self._key: list[tuple[int, ...]] | None = None  # what the specs were read from

    def refresh(self) -> None:
        """Read the specs again where a declared network or buffer was replaced or a parameter or buffer moved
        (``.data`` set) since they were read. Outside the graph: it reads data pointers, about a microsecond per
        tensor."""
        declared = self._declared()
        key = [(id(module), id(flat), flat.data_ptr(), *(p.data_ptr() for p in module.parameters()))
               for module, flat, _ in declared]
        if key == self._key:
            return
        self.specs = self._read(declared)
        self._key = key

    @staticmethod
    def _read(declared: list[Declared]) -> list[Spec]:
        specs: list[Spec] = []
        seen: set[int] = set()
        for module, flat, differentiated in declared:
            params = list(module.named_parameters())
            if not params or any(id(p) in seen for _, p in params):
                continue  # no parameters, or a part of a module already swapped
            storages = {p.untyped_storage().data_ptr() for _, p in params}
            if storages != {flat.untyped_storage().data_ptr()} or flat.dtype != params[0][1].dtype:
                continue
            if differentiated:
                flat.requires_grad_(True)  # its views are what the step differentiates (see the module docstring)
            layout = [(key, p.shape, p.stride(), p.storage_offset() - flat.storage_offset()) for key, p in params]
            specs.append((module, flat, layout))
            seen.update(id(p) for _, p in params)
        return specs

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` with each module's parameters as views of its flat buffer (inside the traced step; see
        the module docstring). One reparametrisation per module, nested (what dynamo traces)."""
        return self._call(0, fn, args)

    def _call(self, index: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        if index == len(self.specs):
            return fn(*args)
        module, flat, layout = self.specs[index]
        tensors = {key: flat.as_strided(shape, stride, offset) for key, shape, stride, offset in layout}
        with reparametrized(module, tensors):
            return self._call(index + 1, fn, args)
