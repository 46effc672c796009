"""Reduced-precision learning for the off-policy family: ``policy.precision`` = ``fp32``, ``bf16`` or ``auto``.

``bf16`` runs each gradient update under ``torch.autocast(dtype=torch.bfloat16)``: the matmuls of the networks'
forward and backward passes take bfloat16 inputs, while the parameters (the master weights), their gradients, the
optimiser state, the target networks, the temperature and every loss and target stay float32. The networks cast
their outputs to float32 (a no-op in fp32), so everything after the last matmul -- log-probabilities, TD targets,
losses -- is fp32 arithmetic. Acting and evaluation stay fp32 (one observation at a time gains nothing), and so does
``zoo export``; checkpoints hold the fp32 weights, so a run may resume in another precision (exactly only in its own).

Why bf16 and not fp16: bfloat16 keeps float32's exponent range, so no loss scaling is needed; on CPUs with
AVX-512 BF16 or AMX its matmuls run at two to three times the fp32 rate. Measured on this project's 2-core AMD EPYC
(AVX-512 BF16, one thread; ``benchmarks/precision_bench.py``): see ``AUTO_MIN_WIDTH``.

``auto`` picks bf16 only where it pays: the device multiplies bf16 natively (a CPU with AVX-512 BF16 or AMX, a CUDA
GPU of compute capability 8 or more) and the networks are wide enough that the matmuls dominate the casts
(the widest hidden layer at least ``AUTO_MIN_WIDTH``); else fp32. The choice is recorded in the run directory's
environment record (``environment.json``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Any

import torch

PRECISIONS = ("fp32", "bf16", "auto")

# The narrowest widest-hidden-layer at which bf16 updates beat fp32 ones end to end (measured, see the docstring):
# below it the casts around each matmul cost more than the bf16 matmuls save.
AUTO_MIN_WIDTH = 256


@functools.cache
def _cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 matrices natively (not by emulation): AVX-512 BF16 or AMX on a
    (Linux) CPU, compute capability 8.0 or more on a CUDA GPU."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.get_device_capability(device)[0] >= 8
    if device.type == "cpu":
        return bool({"avx512_bf16", "amx_bf16"} & _cpu_flags())
    return False


def resolve_precision(requested: str, device: torch.device, hidden_sizes: Sequence[int]) -> str:
    """``fp32`` or ``bf16`` for a ``policy.precision`` value: ``auto`` is bf16 where ``native_bf16(device)`` and the
    widest hidden layer is at least ``AUTO_MIN_WIDTH``, else fp32; the others are themselves."""
    if requested != "auto":
        return requested
    wide = max(hidden_sizes, default=0) >= AUTO_MIN_WIDTH
    return "bf16" if wide and native_bf16(device) else "fp32"


def learning_precision(precision: str, device: torch.device) -> Any:
    """The context one gradient update runs in: bf16 autocast on ``device``, or nothing for fp32."""
    if precision != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)
