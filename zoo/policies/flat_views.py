"""Networks whose parameters live in flat buffers, seen by the compiled learning step as views of those buffers.

``FlatOptimizer`` (and ``flatten_parameters`` for target networks) store a module's parameters as slices of one
flat tensor, which the optimiser step, Polyak averaging and resets update in place. Traced as they are, the
step's inputs would be the flat buffers and, separately, every parameter: tensors that alias each other, one of
them mutated. torch's AOT autograd then merges them into a synthetic base on every call (found on an H100's host,
torch 2.11: about 1 ms of Python per learning step), and inductor does not capture a graph with such inputs as a
CUDA graph (every kernel launched one by one). ``FlatModules.call(fn, ...)``, used inside the compiled step, swaps each
such module's parameters for views of its flat buffer made inside the graph (``torch.func``'s reparametrisation),
so that the buffers alone are inputs. A buffer an optimiser steps is marked as requiring gradients, once, outside
the graph (torch 2.11's dynamo cannot trace ``requires_grad_`` inside one; the buffer is only ever changed in
place under ``no_grad``): ``FlatOptimizer.minimize`` differentiates with respect to the module's parameters as
they are at the time, these views. The arithmetic is the same operations on the same memory as eager's; the eager
step does not use this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.utils.stateless import _reparametrize_module

from .optim import FlatOptimizer

# (module, flat buffer, [(parameter name, shape, stride, offset into the buffer)])
Spec = tuple[nn.Module, torch.Tensor, list[tuple[str, torch.Size, tuple[int, ...], int]]]


class FlatModules:
    """The modules among ``owner``'s attributes whose parameters all lie in one flat buffer that is itself an
    attribute of ``owner`` (a ``FlatOptimizer``'s ``flat``, or a tensor such as a target network's buffer)."""

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.specs: list[Spec] = []
        # what the specs were read from: the owner's attributes (name, value) and the tensors' data pointers
        self._attributes: list[tuple[str, Any]] = []
        self._pointers: list[tuple[torch.Tensor, int]] = []

    def refresh(self) -> None:
        """Read the specs again where an attribute of the owner (a network, an optimiser, a buffer) was replaced or
        a parameter or buffer moved (``.data`` set) since they were read. Outside the graph: it reads data
        pointers, about a microsecond per tensor. (A parameter object replaced inside a network is not looked for:
        the network's optimiser would not step it either.)"""
        owner = self.owner
        attributes = vars(owner)
        if (self._attributes and all(attributes.get(name) is value for name, value in self._attributes)
                and all(tensor.data_ptr() == pointer for tensor, pointer in self._pointers)):
            return
        self.specs = self._read()
        self._attributes = [(name, value) for name, value in attributes.items()
                            if isinstance(value, (nn.Module, FlatOptimizer, torch.Tensor))]
        tensors = [value.flat if isinstance(value, FlatOptimizer) else value for _, value in self._attributes]
        tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
        tensors += [p for module, *_ in self.specs for p in module.parameters()]
        self._pointers = [(tensor, tensor.data_ptr()) for tensor in tensors]

    def _read(self) -> list[Spec]:
        flats: dict[int, tuple[torch.Tensor, bool]] = {}
        for value in vars(self.owner).values():
            if isinstance(value, FlatOptimizer):
                flats[value.flat.untyped_storage().data_ptr()] = (value.flat, True)
            elif isinstance(value, torch.Tensor) and value.ndim == 1 and value.is_floating_point():
                flats.setdefault(value.untyped_storage().data_ptr(), (value, False))
        specs: list[Spec] = []
        seen: set[int] = set()
        for value in vars(self.owner).values():
            if not isinstance(value, nn.Module):
                continue
            params = list(value.named_parameters())
            if not params or any(id(p) in seen for _, p in params):
                continue  # no parameters, or a part of a module already swapped
            storages = {p.untyped_storage().data_ptr() for _, p in params}
            if len(storages) != 1 or next(iter(storages)) not in flats:
                continue
            flat, differentiated = flats[next(iter(storages))]
            if flat.dtype != params[0][1].dtype:
                continue
            if differentiated:
                flat.requires_grad_(True)  # its views are what the step differentiates (see the module docstring)
            layout = [(key, p.shape, p.stride(), p.storage_offset() - flat.storage_offset()) for key, p in params]
            specs.append((value, flat, layout))
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
        with _reparametrize_module(module, tensors):
            return self._call(index + 1, fn, args)
