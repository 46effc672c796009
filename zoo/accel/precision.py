"""Reduced-precision learning for the off-policy family: ``policy.precision`` = ``fp32``, ``bf16`` or ``auto``.

``bf16`` runs each gradient update under ``torch.autocast(dtype=torch.bfloat16)``: the matmuls of the networks'
forward and backward passes take bfloat16 inputs, while the parameters (the master weights), their gradients, the
optimiser state, the target networks, the temperature and every loss and target stay float32. The networks cast
their outputs to float32 (a no-op in fp32), so everything after the last matmul -- log-probabilities, TD targets,
losses -- is fp32 arithmetic. Acting and evaluation stay fp32 (one observation at a time gains nothing), and so does
``zoo export``; checkpoints hold the fp32 weights, so a run may resume in another precision (exactly only in its own).

Why bf16 and not fp16: bfloat16 keeps float32's exponent range, so no loss scaling is needed; on CPUs with
AVX-512 BF16 or AMX its matmuls run at two to three times the fp32 rate.

``auto`` picks bf16 only where it pays: the device multiplies bf16 natively (a CPU with AVX-512 BF16 or AMX, a CUDA
GPU of compute capability 8 or more) and each update's matmuls are big enough to outweigh the casts and the fixed
cost around them: a batch of at least ``AUTO_MIN_BATCH`` rows through a hidden layer at least ``AUTO_MIN_WIDTH``
wide, or an image encoder (convolutions). Else fp32. The choice is recorded in the run directory's environment
record (``environment.json``).

The sizes from which ``auto`` takes bf16 come from ``benchmarks/precision_bench.py`` (docs/speed.md has the
figures): every case measured with a batch of at least 256 and a width of at least 256, and the CNN, gained; every case
that lost was outside them (``auto`` never loses; it may leave a little on the table).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Any

import torch

PRECISIONS = ("fp32", "bf16", "auto")

# From these sizes on, bf16 updates beat fp32 ones in every case measured (see the docstring); below them the casts
# and the fixed cost around each matmul can outweigh what the bf16 matmuls save.
AUTO_MIN_BATCH = 256
AUTO_MIN_WIDTH = 256


@functools.cache
def _cpuinfo(field: str) -> str:
    """The first value of ``field`` in /proc/cpuinfo ("" where there is none: another OS)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.split(":", 1)[0].strip() == field:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_flags() -> frozenset[str]:
    """The CPU's instruction-set flags (Linux; empty elsewhere): what the fast paths are chosen by."""
    return frozenset(_cpuinfo("flags").split())


def cpu_model() -> str:
    """The CPU's model name (Linux; "" elsewhere)."""
    return _cpuinfo("model name")


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 matrices natively (not by emulation): AVX-512 BF16 or AMX on a
    (Linux) CPU, compute capability 8.0 or more on a CUDA GPU."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.get_device_capability(device)[0] >= 8
    if device.type == "cpu":
        return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())
    return False


def resolve_precision(requested: str, device: torch.device, widths: Sequence[int], batch_size: int,
                      convolutional: bool = False) -> str:
    """``fp32`` or ``bf16`` for a ``policy.precision`` value: ``auto`` is bf16 where ``native_bf16(device)`` and the
    update is big enough (``batch_size >= AUTO_MIN_BATCH`` and ``max(widths) >= AUTO_MIN_WIDTH``, or
    ``convolutional``: an image encoder), else fp32; the others are themselves."""
    if requested != "auto":
        return requested
    big = convolutional or (batch_size >= AUTO_MIN_BATCH and max(widths, default=0) >= AUTO_MIN_WIDTH)
    return "bf16" if big and native_bf16(device) else "fp32"


def learning_precision(precision: str, device: torch.device) -> Any:
    """The context one gradient update runs in: bf16 autocast on ``device``, or nothing for fp32."""
    if precision != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)
