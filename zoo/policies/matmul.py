"""float32 matrix products through oneDNN where torch's default (MKL) runs them at half the CPU's speed.

torch multiplies float32 matrices on the CPU with MKL, which on AMD processors takes its AVX2 path: on the 2-core
AMD EPYC (Zen 5, full-width AVX-512) this project develops on, one thread multiplies 256x256 by 256x256 at about
109 GFLOP/s, while oneDNN (shipped inside torch, choosing its kernels by instruction set, not vendor) reaches
187-239 GFLOP/s on the same product, and JAX (XLA) about 230. That halves the off-policy learning step's largest
cost on such a machine. ``linear(x, weight, bias)`` is ``F.linear`` with the product taken by oneDNN in float32 (the
same arithmetic as MKL's to float32 rounding: both about 2e-7 from a float64 reference), with its own backward
(each gradient another oneDNN product), and it traces into a compiled graph as one custom op, which
``lower_for_inductor`` turns into a direct oneDNN call there (inductor's own lowering of oneDNN's linear wants
constant weights). ``matmul`` is ``x @ weight`` in the same way,
``ensemble_linear`` the layers of an ensemble (SAC's and TD3's twin critics), ``ensemble_mlp`` its whole MLP.

Used where ``fp32_products() == "onednn"``: float32 tensors on the CPU, outside autocast (under bf16 autocast the
products already go to oneDNN in bf16), with at least ``MIN_ROWS`` rows (a batch-1 forward gains nothing). Where
that is depends on the processor, decided once per process (an AMD CPU with oneDNN available), or set by
``ZOO_FP32_PRODUCTS=onednn`` or ``=default``; a run's ``environment.json`` records it.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F

MIN_ROWS = 16
PRODUCTS = ("onednn", "default")


def fp32_products() -> str:
    """``onednn`` or ``default``: how float32 products are taken in the networks' learning passes here."""
    return FP32_PRODUCTS


def _decide() -> str:
    wanted = os.environ.get("ZOO_FP32_PRODUCTS", "auto")
    available = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    if wanted in PRODUCTS:
        return wanted if available or wanted == "default" else "default"
    return "onednn" if available and _cpu_vendor() == "AuthenticAMD" else "default"


def _cpu_vendor() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


@torch.library.custom_op("zoo::onednn_linear", mutates_args=(), device_types="cpu")
def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight.T + bias`` for 2-D float32 ``x`` and ``weight`` (any strides), by oneDNN."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


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

# Decided once, at import (reading it inside a traced graph is a constant): see the module docstring.
FP32_PRODUCTS = _decide()
_LOWERED: bool | None = None
# In inductor's cache key where the lowering is registered: change it with the lowering's code or the op's backward
# (a cached graph holds the code the lowering generated, and the backward traced when it was compiled: AOT autograd's
# cache keys on the forward graph, which names the op only).
LOWERING_TAG = "zoo-onednn-lowering-3"


def dense_layout(size: tuple[int, int], strides: tuple[int, int]) -> bool:
    """Whether a matrix of ``size`` with ``strides`` is row- or column-major without gaps, the layouts oneDNN
    multiplies at full speed. Other views (a column slice of a concatenation that a compiled graph reuses, say)
    send it to a reference kernel: measured 14.9 ms against 0.15 for a 256x256 by 256x11 product; the lowering
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

    A graph calls a custom op through Python (dispatch, the autograd wrapper, the function): about 15 us each, 0.5-0.7
    ms of the 45 products of a compiled SAC Hopper update (4.8-5.0 ms against 5.3-5.6 in one process, AMD EPYC).
    This registers an inductor lowering of ``zoo::onednn_linear`` to a plain call of ``mkldnn._linear_pointwise``
    (the same kernel, the same numbers; views oneDNN would multiply slowly copied first, see ``dense_layout``) and
    tags inductor's cache key, so that graphs cached without the lowering are not reused. Idempotent; False, and
    graphs keep calling the custom op, where this torch's inductor lacks what it needs (its lowering API is private).
    """
    global _LOWERED
    if _LOWERED is None:
        _LOWERED = False
        try:
            from torch._inductor.ir import ExternKernel
            from torch._inductor.lowering import fallback_handler, register_lowering

            onednn = fallback_handler(torch.ops.mkldnn._linear_pointwise.default, add_to_fallback_set=False)

            def dense(matrix: Any) -> Any:
                matrix = ExternKernel.realize_input(matrix)
                try:
                    ok = dense_layout(tuple(matrix.get_size()), tuple(matrix.get_stride()))
                except Exception:  # no fixed layout yet
                    ok = False
                return matrix if ok else ExternKernel.require_contiguous(matrix)

            def lowering(x: Any, weight: Any, bias: Any = None) -> Any:
                return onednn(dense(x), dense(weight), bias, "none", [], "")

            register_lowering(torch.ops.zoo.onednn_linear.default, type_promotion_kind=None)(lowering)
            tag = torch.compiler.config.cache_key_tag
            torch.compiler.config.cache_key_tag = f"{tag}+{LOWERING_TAG}" if tag else LOWERING_TAG
            _LOWERED = True
        except Exception:  # pragma: no cover - another torch's private inductor API: the custom op still works
            pass
    return _LOWERED


def _onednn(x: torch.Tensor) -> bool:
    if FP32_PRODUCTS != "onednn" or x.dtype != torch.float32 or x.device.type != "cpu" or x.ndim < 2:
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
