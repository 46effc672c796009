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

Measured here in one run (2-core AMD EPYC with AVX-512 BF16, one thread, torch 2.13, the two precisions
interleaved; bf16 matmuls at 164 GFLOP/s against 84 for fp32), ms per update fp32 -> bf16
(``benchmarks/precision_bench.py``):

- SAC, Hopper's spaces, batch 256, two hidden layers: width 64 3.46 -> 3.55 (0.97x), 128 5.80 -> 4.87 (1.19x),
  256 12.87 -> 10.10 (1.27x)
- TD3, the same: 64 1.72 -> 2.17 (0.79x), 128 3.80 -> 3.65 (1.04x), 256 9.42 -> 6.46 (1.46x)
- DQN, CartPole's spaces: batch 64 width 256 1.45 -> 1.67 (0.87x), batch 64 width 512 4.25 -> 4.25 (1.00x; 1.12x
  in another run), batch 256 width 256 3.30 -> 2.53 (1.30x), batch 256 width 512 9.75 -> 5.69 (1.71x); NatureCNN
  on 4x84x84 frames, batch 32: 42.8 -> 31.5 (1.36x; 1.61x in another run)

Every case with batch >= 256 and width >= 256, and the CNN, gained; every case that lost is outside them (some
that gained a little, SAC at width 128, are outside too: auto never loses, it may leave a little on the table).
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
