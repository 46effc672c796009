"""zoo's recurrent loops as ``torch.library`` custom ops, for a compiled learning step (``policy.compile``).

``torch.compile`` cannot trace into an ``autograd.Function`` that hands addresses to C: a compiled recurrent update
reaches the loops through two custom ops instead, ``zoo::recurrent_layers`` (one layer of one or more cores, forward:
``zoo.accel.recurrent_kernels``' ``lstm_forward`` / ``gru_forward``) and ``zoo::recurrent_layers_backward`` (their
backward), each with a fake (meta) form giving the shapes, and an autograd formula joining the two. The graph then
holds the loops as two opaque calls and everything around them (the heads, the loss, the optimiser) as inductor's
code. Eager learning keeps the ``autograd.Function`` nodes of ``zoo.accel.recurrent_scan``: the same kernels, without
a custom op's dispatch (run eagerly, the ops took 0.46-0.51 ms more per layer's forward and backward here).
``register()`` makes the ops, once per process, before anything is traced (``zoo.accel.settings.prepare_compiler``
calls it): a process that never compiles does not pay for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from . import recurrent_kernels as kernels

__all__ = ["layers", "register"]

def layers(kind: str, x: Tensor, keep: Tensor, n: int, final: bool, tensors: Sequence[Tensor]) -> list[Tensor]:
    """One ``kind`` layer of ``n`` cores through the custom op: what ``recurrent_scan``'s layer node returns (per
    core ``out``, then its final state(s) where ``final``)."""
    if _forward is None:
        raise RuntimeError("zoo's recurrent custom ops are not registered: call zoo.accel.recurrent_ops.register() "
                           "before compiling")
    return _forward(kind, x, keep, n, final, list(tensors))[: n * kernels.outputs_per_core(kind, final)]


_forward: Any = None  # the forward op, once registered


def register() -> None:
    """Register the two ops (once per process; later calls do nothing)."""
    global _forward
    if _forward is None:
        _forward = _ops()


def _ops() -> Any:

    @torch.library.custom_op("zoo::recurrent_layers", mutates_args=())
    def forward(kind: str, x: Tensor, keep: Tensor, n: int, final: bool, tensors: list[Tensor]) -> list[Tensor]:
        kernels.check(x, keep, *tensors)
        run = kernels.lstm_forward if kind == "lstm" else kernels.gru_forward
        outputs, records = run(x, keep, final, kernels.cores_of(kind, n, tensors))
        return outputs + records

    @forward.register_fake
    def _(kind: str, x: Tensor, keep: Tensor, n: int, final: bool, tensors: list[Tensor]) -> list[Tensor]:
        steps, batch = x.shape[:2]
        hidden = kernels.weights_of(kind, kernels.cores_of(kind, n, tensors))[1][0].shape[1]  # W_hh (G, H)
        finals = (2 if kind == "lstm" else 1) if final else 0
        outputs = []
        for _ in range(n):
            outputs += [x.new_empty(steps, batch, hidden), *(x.new_empty(batch, hidden) for _ in range(finals))]
        for _ in range(n):
            outputs += [x.new_empty(steps, batch, 4 * hidden if name in ("gates", "parts") else hidden)
                        for name in kernels.RECORDS[kind]]
        return outputs

    @torch.library.custom_op("zoo::recurrent_layers_backward", mutates_args=())
    def backward(kind: str, grads: list[Tensor | None], x: Tensor, keep: Tensor, final: bool, need_x: bool,
                 w_ihs: list[Tensor], w_hhs: list[Tensor], records: list[Tensor]) -> list[Tensor]:
        run = kernels.lstm_backward if kind == "lstm" else kernels.gru_backward
        result = run(list(grads), x, keep, list(w_ihs), list(w_hhs), list(records), final, need_x)
        d_x = result.x if result.x is not None else x.new_empty(0)
        return [d_x, result.w_ih, result.bias, *(grad for own in result.cores for grad in own)]

    @backward.register_fake
    def _(kind: str, grads: list[Tensor | None], x: Tensor, keep: Tensor, final: bool, need_x: bool,
          w_ihs: list[Tensor], w_hhs: list[Tensor], records: list[Tensor]) -> list[Tensor]:
        n, batch = len(w_hhs), x.shape[1]
        width, hidden = w_hhs[0].shape
        # W_ih's gradient is (x^T d)^T: a transposed product, as the real one
        result = [torch.empty_like(x) if need_x else x.new_empty(0), x.new_empty(x.shape[-1], n * width).t(),
                  x.new_empty(n * width)]
        for _ in range(n):
            own = [x.new_empty(batch, hidden), x.new_empty(width, hidden)]
            result += [own[0], x.new_empty(batch, hidden), own[1]] if kind == "lstm" else [*own, x.new_empty(width)]
        return result

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: list[Tensor]) -> None:
        kind, x, keep, n, final, tensors = inputs
        w_ihs, w_hhs = kernels.weights_of(kind, kernels.cores_of(kind, n, tensors))
        ctx.kind, ctx.n, ctx.final = kind, n, final
        ctx.save_for_backward(x, keep, *w_ihs, *w_hhs, *output[n * kernels.outputs_per_core(kind, final):])

    def grads_of(ctx: Any, grads: list[Tensor | None]) -> tuple[Any, ...]:
        kind, n, final = ctx.kind, ctx.n, ctx.final
        x, keep, *rest = ctx.saved_tensors
        need_x = bool(ctx.needs_input_grad[1])
        outputs = n * kernels.outputs_per_core(kind, final)
        result = backward(kind, list(grads[:outputs]), x, keep, final, need_x, rest[:n], rest[n: 2 * n],
                          rest[2 * n:])
        own = 3  # a core's own gradients: an LSTM's h0, c0 and W_hh, a GRU's h0, W_hh and b_hh
        laid_out = kernels.LayerGrads(result[0] if need_x else None, result[1], result[2],
                                      [result[3 + own * k: 3 + own * (k + 1)] for k in range(n)])
        return None, laid_out.x, None, None, None, kernels.layer_grads(kind, laid_out)

    forward.register_autograd(grads_of, setup_context=setup_context)
    return forward
