"""A recurrent core's unroll with its resets inside one compiled loop (the CPU's float32 path).

torch's fused LSTM and GRU kernels run a whole sequence from one state, but take no reset inside it: an unroll whose
episodes start inside its sequences then runs as zero-padded segments (``zoo.policies.recurrent.Segments``, on
average 1.4x the steps on CartPole without velocities) or step by step. Here each layer is one node of the autograd
graph (an ``autograd.Function``) whose forward and backward run the optional C extension ``zoo.accel._crecurrent``
through ``zoo.accel.recurrent_kernels``: per step the state zeroed where ``keep[t]`` is 0 (an episode starts), the
recurrent product and the gates (torch's equations and gate order); the input projection inside the loops for a few
input features, else one product before them; the weights' gradients one product each after the backward. Inside a
compiled learning step (``torch.compile``, ``policy.compile``) the same kernels run as the custom ops of
``zoo.accel.recurrent_ops``.

``unroll(rnn, kind, x, state, keep)`` runs a ``torch.nn.LSTM`` / ``torch.nn.GRU``'s layers so, with its parameters:
outputs and gradients equal torch's modules on the same segments up to float rounding (tests/test_recurrent_scan.py).
``applies(x)`` says where it can be used: a float32 CPU tensor outside autocast, the extension built,
``accel.recurrent_kernel`` on, no tracing (``zoo export``); ``fits`` whether the core's size is one where
the loops were measured faster (``LOOP_LIMITS``). ``RecurrentCore.uses_loops`` runs them where both hold, or where
torch's module would step one step at a time; elsewhere the core keeps torch's modules. ``step_buffers`` gives
acting in numpy (``zoo.accel.numpy_memory``) the same loop for one step. Figures: docs/speed.md.
"""

from __future__ import annotations

from typing import Any

import torch

from . import recurrent_kernels as kernels
from . import recurrent_ops
from .recurrent_kernels import StepBuffers, available, step_buffers
from .settings import settings

__all__ = ["LOOP_LIMITS", "StepBuffers", "applies", "available", "fits", "step_buffers", "unroll", "unroll_cores"]

# The largest hidden units x sequences per unroll where the loops were measured at least level with torch's fused kernel
# on a sequence without resets (no padding for torch), T=32, one and two threads (docs/speed.md): beyond it torch's
# blocked, threaded products win. An unroll torch would step one step at a time takes the loops at any size.
LOOP_LIMITS = {"lstm": 4096, "gru": 16384}


def fits(kind: str, hidden: int, batch: int) -> bool:
    """Whether a ``kind`` core of ``hidden`` units over ``batch`` sequences is within ``LOOP_LIMITS`` (where the
    loops were measured faster than torch's fused kernel)."""
    return hidden * batch <= LOOP_LIMITS[kind]


def applies(x: torch.Tensor) -> bool:
    """Whether an unroll of ``x`` ``(T, B, ...)`` can run the compiled loops (module docstring; whether it should is
    ``fits``, or torch's module stepping one step at a time)."""
    return (available() and settings().recurrent_kernel and x.device.type == "cpu"
            and x.dtype == torch.float32 and not torch.is_autocast_enabled("cpu") and not torch.jit.is_tracing()
            and not torch.onnx.is_in_onnx_export())


class _Layers(torch.autograd.Function):
    """One layer of ``n`` cores of ``kind`` (each its own weights and state) over the same inputs, one node of the
    graph: ``(kind, x (T, B, in), keep (T, B), n, final, then per core its state(s) (B, H), W_ih, W_hh, b_ih, b_hh)``
    -> per core ``out (T, B, H)``, then its final state(s) ``(B, H)`` where ``final`` (an LSTM's ``h, c``). The
    cores' input projections are one product (their ``W_ih`` stacked) or made inside the loops step by step; the
    gradients of ``x`` and of the ``W_ih`` are one product each; each core's sequential part runs in C on its
    columns (``zoo.accel.recurrent_kernels``)."""

    @staticmethod
    def forward(ctx: Any, kind: str, x: torch.Tensor, keep: torch.Tensor, n: int, final: bool,
                *tensors: torch.Tensor) -> tuple[Any, ...]:
        kernels.check(x, keep, *tensors)
        cores = kernels.cores_of(kind, n, tensors)
        run = kernels.lstm_forward if kind == "lstm" else kernels.gru_forward
        outputs, records = run(x, keep, final, cores)
        w_ihs, w_hhs = kernels.weights_of(kind, cores)
        ctx.kind, ctx.n, ctx.final = kind, n, final
        ctx.save_for_backward(x, keep, *w_ihs, *w_hhs, *records)
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        kind, n = ctx.kind, ctx.n
        x, keep, *rest = ctx.saved_tensors
        run = kernels.lstm_backward if kind == "lstm" else kernels.gru_backward
        result = run(list(grads), x, keep, rest[:n], rest[n: 2 * n], rest[2 * n:], ctx.final,
                     bool(ctx.needs_input_grad[1]))
        return (None, result.x, None, None, None, *kernels.layer_grads(kind, result))


def _check_rnn(rnn: torch.nn.Module) -> None:
    if (rnn.bidirectional or rnn.batch_first or not rnn.bias or getattr(rnn, "proj_size", 0)
            or (rnn.dropout and rnn.num_layers > 1)):
        raise ValueError("zoo.accel.recurrent_scan runs one-directional, time-major rnns with biases, no projection "
                         "and no dropout (as RecurrentCore builds them): use the module itself for others")


def _layer(rnns: list[torch.nn.Module], kind: str, x: torch.Tensor, states: list[Any], keep: torch.Tensor,
           layer: int, final: bool) -> list[tuple[torch.Tensor, ...]]:
    """Layer ``layer`` of every rnn in ``rnns`` over the same ``x``: per rnn ``(out, h, c)`` or ``(out, h)``, or
    ``(out,)`` where not ``final``."""
    tensors: list[torch.Tensor] = []
    for rnn, state in zip(rnns, states, strict=True):
        weights = [getattr(rnn, f"{name}_l{layer}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        tensors += [state[0][layer], state[1][layer], *weights] if kind == "lstm" else [state[layer], *weights]
    per = kernels.outputs_per_core(kind, final)
    if torch.compiler.is_compiling():  # a compiled learning step traces the loops as custom ops
        outputs = recurrent_ops.layers(kind, x, keep, len(rnns), final, tensors)
    else:
        outputs = _Layers.apply(kind, x, keep, len(rnns), final, *tensors)
    return [tuple(outputs[per * k: per * (k + 1)]) for k in range(len(rnns))]


def unroll_cores(rnns: list[torch.nn.Module], kind: str, x: torch.Tensor, states: list[Any], keep: torch.Tensor,
                 final: bool = True) -> list[tuple[torch.Tensor, Any]]:
    """``unroll`` of several rnns of one kind and size over the same ``x`` (an actor's and a critic's core): their
    first layers as one node with one input projection; per rnn its outputs and final state."""
    for rnn in rnns:
        _check_rnn(rnn)
    if len({(rnn.input_size, rnn.hidden_size, rnn.num_layers) for rnn in rnns}) > 1:
        raise ValueError("unroll_cores takes rnns of one size (inputs, hidden units, layers): unroll others apart")
    keep = keep.to(torch.float32)
    layers = rnns[0].num_layers
    first = _layer(rnns, kind, x, states, keep, 0, final)
    results = []
    for rnn, state, (out, *final_state) in zip(rnns, states, first, strict=True):
        finals = [final_state]
        for layer in range(1, layers):
            out, *final_state = _layer([rnn], kind, out, [state], keep, layer, final)[0]
            finals.append(final_state)
        if not final:
            results.append((out, None))
        elif kind == "lstm":
            results.append((out, (torch.stack([f[0] for f in finals]), torch.stack([f[1] for f in finals]))))
        else:
            results.append((out, torch.stack([f[0] for f in finals])))
    return results


def unroll(rnn: torch.nn.Module, kind: str, x: torch.Tensor, state: Any, keep: torch.Tensor,
           final: bool = True) -> tuple[torch.Tensor, Any]:
    """``rnn`` (a ``torch.nn.LSTM`` or ``GRU``, one direction, no dropout, time-major) over ``x`` ``(T, B, in)`` from
    ``state`` (``(h, c)`` or ``h``, each ``(layers, B, H)`` or a list of ``(B, H)`` per layer), every layer's state
    zeroed before step ``t`` where ``keep[t]`` ``(T, B)`` is 0: the last layer's outputs ``(T, B, H)`` and the state
    after the last step, as the module returns them (None where ``final`` is False)."""
    return unroll_cores([rnn], kind, x, [state], keep, final)[0]


