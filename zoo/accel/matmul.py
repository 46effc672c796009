"""float32 matrix products through oneDNN where torch's default (MKL) runs them at half the CPU's speed.

torch multiplies float32 matrices on the CPU with MKL, which on some processors takes a path below what the CPU can
do (on AMD processors with AVX-512, MKL's AVX2 path), while oneDNN (shipped inside torch, choosing its kernels by
instruction set) uses the whole width: there it halves the off-policy learning step's largest cost (docs/speed.md has
the figures). ``linear(x, weight, bias)`` is ``F.linear`` with the product taken by oneDNN in float32 (the same
arithmetic as MKL's to float32 rounding), with its own backward (each gradient another oneDNN product), and it
traces into a compiled graph as one custom op, which ``lower_for_inductor`` turns into a direct oneDNN call there
(inductor's own lowering of oneDNN's linear wants constant weights). ``matmul`` is ``x @ weight`` in the same way,
``ensemble_linear`` the layers of an ensemble (SAC's and TD3's twin critics), ``ensemble_mlp`` its whole MLP.

Used where ``fp32_products() == "onednn"``: float32 tensors on the CPU, outside autocast (under bf16 autocast the
products already go to oneDNN in bf16), with at least ``MIN_ROWS`` rows (a batch-1 forward gains nothing). Which
path a process takes is the run's ``accel.fp32_products`` (``zoo.accel.settings``): ``onednn``, ``default``, or
``auto``, decided by what the CPU and MKL do, never by the CPU's vendor: oneDNN where the CPU has AVX-512 and MKL
does not use it (its verbose banner names the instruction set it runs: ``mkl_code_path``), torch's default
everywhere else (a CPU without AVX-512, where oneDNN has nothing wider to offer than MKL's AVX2; a CPU whose MKL runs
AVX-512 itself). No timing decides it, so every process on a machine takes the same path, and the same numbers. A
run's ``environment.json`` records the path it took.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import tempfile
from typing import Any

import torch
import torch.nn.functional as F

from . import torch_internals
from .precision import cpu_flags

MIN_ROWS = 16
PRODUCTS = ("onednn", "default")
def fp32_products() -> str:
    """``onednn`` or ``default``: how float32 products are taken in the networks' learning passes in this process,
    decided at the first call from what ``request_fp32_products`` asked (``auto`` where nothing was asked): the
    probe behind ``auto`` (``mkl_code_path``, most of a second) is paid by the processes that take such products
    only, never by an on-policy run's."""
    if _mode is None:
        set_fp32_products(_requested)
    assert _mode is not None
    return _mode


def request_fp32_products(requested: str) -> None:
    """Ask for ``accel.fp32_products`` (``auto``, ``onednn`` or ``default``), decided at the next ``fp32_products()``
    call (a value already decided is dropped)."""
    global _mode, _requested
    if requested not in (*PRODUCTS, "auto"):
        raise ValueError(f"fp32 products '{requested}' is unknown: use auto, onednn or default")
    _requested, _mode = requested, None


def set_fp32_products(requested: str) -> str:
    """Set this process's path from ``accel.fp32_products`` (``auto``, ``onednn`` or ``default``); returns it.
    ``auto``: oneDNN where it is in this torch, the CPU has AVX-512 and MKL does not use it (``mkl_code_path``: MKL
    takes its AVX2 path on some AVX-512 CPUs, AMD's), else torch's default."""
    global _mode
    if requested not in (*PRODUCTS, "auto"):
        raise ValueError(f"fp32 products '{requested}' is unknown: use auto, onednn or default")
    available = torch_internals.onednn_linear_available()
    if requested == "auto":
        wider = "avx512f" in cpu_flags() and "AVX-512" not in (mkl_code_path() or "AVX-512")
        _mode = "onednn" if available and wider else "default"
    else:
        _mode = requested if available or requested == "default" else "default"
    return _mode


@functools.cache
def mkl_code_path() -> str | None:
    """The instruction set MKL multiplies float32 matrices with on this CPU, as its verbose banner names it (e.g.
    ``Intel(R) Advanced Vector Extensions 2 (Intel(R) AVX2)``), or None where this torch has no MKL or the banner
    cannot be read. Read once per process from one small product, with MKL's verbose mode on and the process's
    standard output sent to a temporary file meanwhile (MKL writes the banner there, from C)."""
    if not torch.backends.mkl.is_available():
        return None
    matrix = torch.zeros(8, 8)
    try:
        sys.stdout.flush()
        with tempfile.TemporaryFile() as captured:
            saved = os.dup(1)
            os.dup2(captured.fileno(), 1)
            try:
                with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):
                    torch.mm(matrix, matrix)
            finally:
                os.dup2(saved, 1)
                os.close(saved)
            captured.seek(0)
            banner = captured.read(4096).decode("ascii", "replace")
    except (OSError, RuntimeError, ValueError):  # no file descriptor 1, a torch without the switch
        return None
    found = re.search(r"Intel\(R\) 64 architecture (.*?)(?: with support|, Lnx|, Win|$)", banner, re.MULTILINE)
    return found.group(1).strip() if found else None


@torch.library.custom_op("zoo::onednn_linear", mutates_args=(), device_types="cpu")
def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight.T + bias`` for 2-D float32 ``x`` and ``weight`` (any strides), by oneDNN."""
    return torch_internals.onednn_linear(x, weight, bias)


@_onednn_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty((x.shape[0], weight.shape[0]))


def _setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, weight, bias = inputs
    ctx.save_for_backward(x, weight)
    ctx.has_bias = bias is not None


def column_major(weight: torch.Tensor) -> bool:
    """Whether a 2-D ``weight`` is the transpose of a row-major matrix (``ensemble_linear``'s ``weight[e].t()``).

    Its gradient is then taken as ``(x.T @ grad).T``, which comes out in that same layout, instead of ``grad.T @ x``
    in the other one: the (in, out) parameter it is a view of then receives its gradient without a transposing copy
    (in a compiled SAC update those copies were scalar loops over every critic weight, two per layer)."""
    return weight.ndim == 2 and weight.stride(0) == 1 and weight.stride(1) != 1 and weight.shape[0] > 1


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    x, weight = ctx.saved_tensors
    grad_x = _onednn_linear(grad, weight.t(), None) if ctx.needs_input_grad[0] else None  # grad @ weight
    grad_weight = None
    if ctx.needs_input_grad[1]:
        grad_weight = (_onednn_linear(x.t(), grad.t(), None).t() if column_major(weight)  # (x.T @ grad).T
                       else _onednn_linear(grad.t(), x.t(), None))  # grad.T @ x
    grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
    return grad_x, grad_weight, grad_bias


_onednn_linear.register_autograd(_backward, setup_context=_setup)

_mode: str | None = None  # this process's path: set_fp32_products
_requested = "auto"  # what the run asked for (request_fp32_products), decided at the first fp32_products()
_LOWERED: bool | None = None
# In inductor's cache key where the lowering is registered: change it with the lowering's code or the op's backward
# (a cached graph holds the code the lowering generated, and the backward traced when it was compiled: AOT autograd's
# cache keys on the forward graph, which names the op only).
LOWERING_TAG = "zoo-onednn-lowering-3"


def dense_layout(size: tuple[int, int], strides: tuple[int, int]) -> bool:
    """Whether a matrix of ``size`` with ``strides`` is row- or column-major without gaps, the layouts oneDNN
    multiplies at full speed. Other views (a column slice of a concatenation that a compiled graph reuses, say)
    send it to a reference kernel, a hundred times slower (docs/speed.md); the lowering
    copies them first."""
    rows, cols = size
    if rows == 1 and cols == 1:
        return True
    if rows == 1:
        return strides[1] == 1
    if cols == 1:
        return strides[0] == 1
    return tuple(strides) in ((cols, 1), (1, rows))


def lower_for_inductor() -> bool:
    """Let compiled graphs call oneDNN's product directly (True), instead of through this module's custom op.

    A graph calls a custom op through Python (dispatch, the autograd wrapper, the function), tens of microseconds for
    each of a compiled SAC update's 45 products (docs/speed.md). This registers an inductor lowering of
    ``zoo::onednn_linear`` to a plain call of oneDNN's linear (the same kernel, the same numbers; views oneDNN would
    multiply slowly copied first, see ``dense_layout``) and tags inductor's cache key, so that graphs cached without the
    lowering are not reused. Idempotent; False, and graphs keep calling the custom op, where this torch's inductor lacks
    what it needs (``torch_internals.register_onednn_lowering``).
    """
    global _LOWERED
    if _LOWERED is None:
        problem = torch_internals.register_onednn_lowering(torch.ops.zoo.onednn_linear.default, dense_layout)
        if problem is None:
            torch_internals.tag_cache_key(LOWERING_TAG)
        _LOWERED = problem is None
    return _LOWERED


def _onednn(x: torch.Tensor) -> bool:
    if fp32_products() != "onednn" or x.dtype != torch.float32 or x.device.type != "cpu" or x.ndim < 2:
        return False
    if not torch.compiler.is_compiling() and (torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()):
        return False  # an exported module holds standard operators only
    return not torch.is_autocast_enabled("cpu") and x.numel() // x.shape[-1] >= MIN_ROWS


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, its product taken by oneDNN where ``fp32_products()`` says so."""
    if not _onednn(x):
        return F.linear(x, weight, bias)
    flat = x.reshape(-1, x.shape[-1])
    if weight.ndim != 2 or weight.shape[1] != flat.shape[1]:  # torch's own message (oneDNN's names no shapes)
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({flat.shape[0]}x{flat.shape[1]} and "
                           f"{'x'.join(map(str, weight.t().shape if weight.ndim == 2 else weight.shape))})")
    return _onednn_linear(flat, weight, bias).reshape(*x.shape[:-1], weight.shape[0])


def matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight`` for ``x`` (..., in) and a 2-D ``weight`` (in, out), by oneDNN where ``linear`` would be."""
    return linear(x, weight.t()) if _onednn(x) else x @ weight


def ensemble_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``E`` linear layers at once: ``x`` (B, in) shared by all or (E, B, in) one per member, ``weight`` (E, in,
    out), ``bias`` (E, 1, out) -> (E, B, out); one batched product by default (a broadcasting ``matmul`` for a shared
    input, ``baddbmm`` otherwise), one oneDNN product per member where ``linear`` would take that path."""
    if not _onednn(x):
        return torch.matmul(x, weight) + bias if x.ndim == 2 else torch.baddbmm(bias, x, weight)
    members = range(weight.shape[0])
    return torch.stack([_onednn_linear(x if x.ndim == 2 else x[e], weight[e].t(), bias[e, 0]) for e in members])


def ensemble_mlp(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor],
                 activations: list[Any]) -> torch.Tensor:
    """An ensemble's MLP: ``ensemble_linear`` layer by layer, ``activations[i]`` after layer ``i`` (one fewer than
    the layers), ``x`` (B, in) shared by all members -> (E, B, out). Where ``linear`` takes oneDNN, each member runs
    on its own and only the outputs are stacked: stacking every hidden layer (and splitting its gradient back) cost
    two copies of each (E, B, width) activation per pass, the same numbers either way."""
    if x.ndim != 2 or not _onednn(x):
        for index, (weight, bias) in enumerate(zip(weights, biases)):
            x = ensemble_linear(x, weight, bias)
            if index < len(activations):
                x = activations[index](x)
        return x
    outputs = []
    for e in range(weights[0].shape[0]):
        h = x
        for index, (weight, bias) in enumerate(zip(weights, biases)):
            h = _onednn_linear(h, weight[e].t(), bias[e, 0])
            if index < len(activations):
                h = activations[index](h)
        outputs.append(h)
    return torch.stack(outputs)
