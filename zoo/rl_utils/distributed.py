"""Gradient averaging and parameter broadcast over torch.distributed, with one flat buffer per dtype and device.

Overview:
    Synchronous data-parallel training (DPPO) averages gradients across workers after every backward pass and starts
    every worker from the same weights. One collective call per parameter pays the per-call latency once per tensor
    (tens of tensors for an MLP policy); copying the tensors into one contiguous buffer per ``(dtype, device)`` pays it
    once per group, which matters most on CPU/gloo and for small networks (see ``benchmarks/allreduce_bench.py``,
    retired at commit 720345a, and docs/speed.md). Every function is a no-op outside an initialised process group, so
    single-process code calls them unconditionally.

    All ranks must pass the same parameters in the same order (the same model built the same way), as for
    ``torch.nn.parallel.DistributedDataParallel``; the flat layout is derived from that order alone, so no extra
    communication is spent agreeing on it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from .normalisation import RunningMeanStd

ModuleOrTensors = nn.Module | Iterable[torch.Tensor]


def _is_active(group: dist.ProcessGroup | None) -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def under_torchrun(environ: Mapping[str, str] | None = None) -> bool:
    """True in a process started by torchrun (or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR/PORT);
    ``environ`` defaults to ``os.environ``."""
    environ = os.environ if environ is None else environ
    return all(name in environ for name in TORCHRUN_VARIABLES)


def world_info(group: dist.ProcessGroup | None = None) -> tuple[int, int]:
    """This process's rank and the world size, or ``(0, 1)`` outside an initialised process group.

    Arguments:
        - group: the process group (default: the global one).
    Returns:
        - (rank, world_size): python ints.
    Examples:
        >>> world_info()  # in a plain single process
        (0, 1)
    """
    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def _group_by_dtype_and_device(tensors: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    # Dicts keep insertion order, so every rank builds the same groups in the same order.
    groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault((tensor.dtype, tensor.device), []).append(tensor)
    return list(groups.values())


def _flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([tensor.reshape(-1) for tensor in tensors])


def _copy_back(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    for tensor, chunk in zip(tensors, flat.split([tensor.numel() for tensor in tensors])):
        tensor.copy_(chunk.view_as(tensor))


def allreduce_grads(module_or_params: ModuleOrTensors, group: dist.ProcessGroup | None = None) -> None:
    """Replace each parameter's ``.grad`` by its mean over the ranks of ``group`` (in place: the purpose).

    Overview:
        Gradients are grouped by ``(dtype, device)``, each group is concatenated into one flat buffer, summed
        with a single ``all_reduce`` and divided by the world size (gloo has no ``ReduceOp.AVG``), and copied
        back into the existing ``.grad`` tensors. Parameters with ``requires_grad=False`` are skipped.
        A parameter whose ``.grad`` is ``None`` on this rank (e.g. a head not used by this rank's batch) counts
        as a zero gradient, and is given a ``.grad`` holding the average. Ranks cannot know without another
        collective whether the others had a gradient, so to keep every rank's buffer layout and result
        identical this happens on every rank, even when no rank had one: after the call every trainable
        parameter has a gradient. Optimisers with momentum (Adam) therefore still move such parameters; freeze
        them with ``requires_grad=False`` if that matters.
        Returns immediately, changing nothing, when torch.distributed is unavailable or not initialised or the
        group has a single rank.
    Arguments:
        - module_or_params: an ``nn.Module`` (its ``parameters()``) or an iterable of parameters; the same
          parameters in the same order on every rank.
        - group: the process group (default: the global one).
    Examples:
        >>> loss.backward()
        >>> allreduce_grads(model)
        >>> optimizer.step()
    """
    if not _is_active(group):
        return
    params = list(module_or_params.parameters() if isinstance(module_or_params, nn.Module) else module_or_params)
    grads = []
    for param in params:
        if not param.requires_grad:
            continue
        if param.grad is None:
            param.grad = torch.zeros_like(param, memory_format=torch.contiguous_format)
        elif param.grad.is_sparse:
            raise ValueError("allreduce_grads supports dense gradients only; a parameter has a sparse .grad")
        grads.append(param.grad)
    world_size = dist.get_world_size(group)
    with torch.no_grad():
        for tensors in _group_by_dtype_and_device(grads):
            flat = _flatten(tensors)
            dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
            flat.div_(world_size)
            _copy_back(flat, tensors)


def broadcast_params(module_or_params: ModuleOrTensors, src: int = 0, group: dist.ProcessGroup | None = None) -> None:
    """Overwrite parameters (and a module's buffers) on every rank with those of rank ``src`` (in place).

    Overview:
        Used once after building the model so that every worker starts from the same weights, and by learners
        publishing weights. Tensors are grouped by ``(dtype, device)`` and sent as one flat buffer per group;
        boolean buffers travel as uint8 because not every backend reduces booleans. Given a module, its buffers
        (e.g. running statistics, observation normalisers registered as buffers) are broadcast too. A no-op when
        torch.distributed is unavailable or not initialised, or the group has a single rank.
    Arguments:
        - module_or_params: an ``nn.Module`` (parameters and buffers) or an iterable of tensors/parameters;
          the same tensors in the same order on every rank.
        - src: global rank that holds the reference values.
        - group: the process group (default: the global one).
    Examples:
        >>> model = build_model()  # possibly different random initialisation on each rank
        >>> broadcast_params(model, src=0)
    """
    if not _is_active(group):
        return
    if isinstance(module_or_params, nn.Module):
        tensors = [*module_or_params.parameters(), *module_or_params.buffers()]
    else:
        tensors = list(module_or_params)
    with torch.no_grad():
        for group_tensors in _group_by_dtype_and_device([tensor.detach() for tensor in tensors]):
            flat = _flatten(group_tensors)
            is_bool = flat.dtype == torch.bool
            if is_bool:
                flat = flat.to(torch.uint8)
            dist.broadcast(flat, src=src, group=group)
            _copy_back(flat.to(torch.bool) if is_bool else flat, group_tensors)


def sync_running_mean_std(
    rms: RunningMeanStd | Sequence[RunningMeanStd], since: dict[str, Any] | Sequence[dict[str, Any]],
    group: dist.ProcessGroup | None = None, device: torch.device | str = "cpu",
) -> dict[str, Any] | list[dict[str, Any]]:
    """Fold every rank's data since ``since`` into ``rms`` on every rank; return the new common state (in place).

    Overview:
        Classic DPPO normalisation: each worker updates its own running statistics while it collects, and at
        each synchronisation the workers exchange what they added since the last one (count, mean and sum of
        squares, one ``all_gather`` of a float64 vector), and every rank merges the parts into the common
        ``since`` state in rank order. All ranks then hold bit-identical statistics, equal to those of one
        instance that saw every worker's data. Several instances (observations and rewards) can be passed as
        sequences: they travel in the same ``all_gather``. Outside an initialised group of several ranks this
        returns ``rms.state_dict()`` (a list for sequences) and changes nothing.
    Arguments:
        - rms: this rank's statistics, ``since`` plus its own new data (or a sequence of them).
        - since: the common state at the last synchronisation (``rms.state_dict()`` returned by the last call,
          or taken when every rank held the same statistics), or a sequence matching ``rms``.
        - group: the process group (default: the global one).
        - device: where the exchanged tensor lives (``cuda`` for the nccl backend).
    Returns:
        - the new common state(s): pass them as ``since`` next time.
    Examples:
        >>> common = rms.state_dict()
        >>> ...  # collect, updating rms
        >>> common = sync_running_mean_std(rms, common)
    """
    single = isinstance(rms, RunningMeanStd)
    instances = [rms] if single else list(rms)
    earlier = [since] if single else list(since)
    if len(instances) != len(earlier):
        raise ValueError(f"got {len(instances)} statistics but {len(earlier)} earlier states")
    if not _is_active(group):
        states = [instance.state_dict() for instance in instances]
        return states[0] if single else states
    sizes = [int(np.prod(instance.shape)) if instance.shape else 1 for instance in instances]
    pieces = []
    for instance, state in zip(instances, earlier):
        own = instance.since(state)
        pieces += [torch.tensor([float(own.data_count)], dtype=torch.float64),
                   torch.from_numpy(np.ascontiguousarray(own._data_mean, dtype=np.float64).reshape(-1)),
                   torch.from_numpy(np.ascontiguousarray(own._data_var, dtype=np.float64).reshape(-1))]
    payload = torch.cat(pieces).to(device)
    gathered = [torch.empty_like(payload) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, payload, group=group)
    values = [tensor.cpu().numpy() for tensor in gathered]
    states = []
    offset = 0
    for instance, state, size in zip(instances, earlier, sizes):
        merged = RunningMeanStd(instance.shape, epsilon=float(state["epsilon"]))
        merged.load_state_dict(state)
        for rank_values in values:  # rank order: every rank merges alike
            part = rank_values[offset:offset + 1 + 2 * size]
            piece = RunningMeanStd(instance.shape, epsilon=0.0)
            piece.load_state_dict({"shape": instance.shape, "epsilon": 0.0, "data_count": int(round(part[0])),
                                   "data_mean": part[1:1 + size], "data_var": part[1 + size:]})
            merged.merge(piece)
        offset += 1 + 2 * size
        common = merged.state_dict()
        instance.load_state_dict(common)
        states.append(common)
    return states[0] if single else states
