"""A recurrent core's unroll with its resets inside one compiled loop (the CPU's float32 path).

torch's fused LSTM and GRU kernels run a whole sequence from one state, but take no reset inside it: an unroll whose
episodes start inside its sequences then runs as zero-padded segments (``zoo.policies.recurrent.Segments``, on
average 1.4x the steps on CartPole without velocities) or step by step. Here each layer is three parts:

- the input projection ``x @ W_ih^T`` plus biases, one product over all steps (torch, autograd);
- the sequential part, an ``autograd.Function`` over the optional C extension ``zoo.accel._crecurrent``: per step
  the state zeroed where ``keep[t]`` is 0 (an episode starts), the recurrent product and the gates (torch's
  equations and gate order), forward and backward;
- the weight gradients, one product each after the backward (torch).

``unroll(rnn, kind, x, state, keep)`` runs a ``torch.nn.LSTM`` / ``torch.nn.GRU``'s layers so, with its parameters:
outputs and gradients equal torch's modules on the same segments up to float rounding (tests/test_recurrent_scan.py).
``applies(x)`` says where it can be used: a float32 CPU tensor outside autocast, the extension built,
``accel.recurrent_kernel`` on, no tracing (``zoo export``) or compiling; ``fits`` whether the core's size is one where
the loops were measured faster (``LOOP_LIMITS``). ``RecurrentCore.uses_loops`` runs them where both hold, or where
torch's module would step one step at a time; elsewhere the core keeps torch's modules. Figures: docs/speed.md.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from .settings import settings

_VERSION = 1  # must equal ZOO_CRECURRENT_VERSION in _crecurrent.c

try:
    from . import _crecurrent
except ImportError:  # built without a C compiler, or a plain source checkout
    _crecurrent = None
if _crecurrent is not None and getattr(_crecurrent, "VERSION", None) != _VERSION:
    warnings.warn("zoo.accel._crecurrent is a stale build of older sources: re-run `pip install -e .` to rebuild it "
                  "(using torch's recurrent modules meanwhile)", RuntimeWarning, stacklevel=2)
    _crecurrent = None

__all__ = ["LOOP_LIMITS", "applies", "available", "fits", "unroll"]

# The largest hidden units x sequences per unroll where the loops were measured faster than torch's fused kernel on a
# sequence without resets, T=32, one and two threads (docs/speed.md): beyond it torch's blocked products win (its LSTM
# 2-4x at 256 units x 32 sequences). An unroll torch would step one step at a time takes the loops at any size.
LOOP_LIMITS = {"lstm": 1024, "gru": 3072}


def available() -> bool:
    """Whether the compiled loops (``zoo.accel._crecurrent``) were built."""
    return _crecurrent is not None


def fits(kind: str, hidden: int, batch: int) -> bool:
    """Whether a ``kind`` core of ``hidden`` units over ``batch`` sequences is within ``LOOP_LIMITS`` (where the
    loops were measured faster than torch's fused kernel)."""
    return hidden * batch <= LOOP_LIMITS[kind]


def applies(x: torch.Tensor) -> bool:
    """Whether an unroll of ``x`` ``(T, B, ...)`` can run the compiled loops (module docstring; whether it should is
    ``fits``, or torch's module stepping one step at a time)."""
    return (_crecurrent is not None and settings().recurrent_kernel and x.device.type == "cpu"
            and x.dtype == torch.float32 and not torch.is_autocast_enabled("cpu") and not torch.jit.is_tracing()
            and not torch.compiler.is_compiling() and not torch.onnx.is_in_onnx_export())


def _check(*tensors: torch.Tensor) -> None:
    """The loops read float32 CPU memory at the tensors' addresses: anything else is refused before they run."""
    for tensor in tensors:
        if tensor.dtype != torch.float32 or tensor.device.type != "cpu":
            raise TypeError(f"zoo.accel.recurrent_scan takes float32 CPU tensors, got {tensor.dtype} on "
                            f"{tensor.device}: check applies(x) first")


def _empty(*shape: int) -> torch.Tensor:
    # Every tensor whose address goes to the C loops is held by a name until the call returns (a temporary's memory
    # would be freed before the loop writes it).
    return torch.empty(shape, dtype=torch.float32)


class _LSTMLoop(torch.autograd.Function):
    """One LSTM layer's sequential part: ``(xproj (T, B, 4H), w_hh (4H, H), h0, c0 (B, H), keep (T, B)) -> (out
    (T, B, H), h, c (B, H))``."""

    @staticmethod
    def forward(ctx: Any, xproj: torch.Tensor, w_hh: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor,
                keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        steps, batch, width = xproj.shape
        hidden = width // 4
        _check(xproj, w_hh, h0, c0, keep)
        xproj, keep = xproj.contiguous(), keep.contiguous()
        h, c = h0.detach().clone().contiguous(), c0.detach().clone().contiguous()
        out, hprev, cprev, tanhc = (_empty(steps, batch, hidden) for _ in range(4))
        gates = _empty(steps, batch, width)
        w_t = w_hh.detach().t().contiguous()
        _crecurrent.lstm_forward(xproj.data_ptr(), w_t.data_ptr(), keep.data_ptr(), h.data_ptr(), c.data_ptr(),
                                 out.data_ptr(), hprev.data_ptr(), cprev.data_ptr(), gates.data_ptr(),
                                 tanhc.data_ptr(), steps, batch, hidden)
        ctx.save_for_backward(w_hh, keep, hprev, cprev, gates, tanhc)
        return out, h, c

    @staticmethod
    def backward(ctx: Any, d_out: torch.Tensor | None, d_h: torch.Tensor | None,
                 d_c: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        w_hh, keep, hprev, cprev, gates, tanhc = ctx.saved_tensors
        steps, batch, hidden = hprev.shape
        d_out = torch.zeros_like(hprev) if d_out is None else d_out.contiguous()
        dh = torch.zeros(batch, hidden) if d_h is None else d_h.clone().contiguous()
        dc = torch.zeros(batch, hidden) if d_c is None else d_c.clone().contiguous()
        dgates, scratch = _empty(steps, batch, 4 * hidden), _empty(batch, hidden)
        w = w_hh.detach().contiguous()
        _crecurrent.lstm_backward(d_out.data_ptr(), w.data_ptr(), keep.data_ptr(), cprev.data_ptr(),
                                  gates.data_ptr(), tanhc.data_ptr(), dh.data_ptr(), dc.data_ptr(), dgates.data_ptr(),
                                  scratch.data_ptr(), steps, batch, hidden)
        d_w = dgates.reshape(-1, 4 * hidden).t() @ hprev.reshape(-1, hidden) if ctx.needs_input_grad[1] else None
        return dgates, d_w, dh, dc, None


class _GRULoop(torch.autograd.Function):
    """One GRU layer's sequential part: ``(xproj (T, B, 3H), w_hh (3H, H), b_hn (H), h0 (B, H), keep (T, B)) ->
    (out (T, B, H), h (B, H))``; ``xproj`` holds the input projection, ``b_ih`` and ``b_hh``'s r and z parts."""

    @staticmethod
    def forward(ctx: Any, xproj: torch.Tensor, w_hh: torch.Tensor, b_hn: torch.Tensor, h0: torch.Tensor,
                keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        steps, batch, width = xproj.shape
        hidden = width // 3
        _check(xproj, w_hh, b_hn, h0, keep)
        xproj, keep, b_hn = xproj.contiguous(), keep.contiguous(), b_hn.detach().contiguous()
        h = h0.detach().clone().contiguous()
        out, hprev = _empty(steps, batch, hidden), _empty(steps, batch, hidden)
        parts, scratch = _empty(steps, batch, 4 * hidden), _empty(batch, width)
        w_t = w_hh.detach().t().contiguous()
        _crecurrent.gru_forward(xproj.data_ptr(), w_t.data_ptr(), b_hn.data_ptr(), keep.data_ptr(), h.data_ptr(),
                                out.data_ptr(), hprev.data_ptr(), parts.data_ptr(),
                                scratch.data_ptr(), steps, batch, hidden)
        ctx.save_for_backward(w_hh, keep, hprev, parts)
        return out, h

    @staticmethod
    def backward(ctx: Any, d_out: torch.Tensor | None,
                 d_h: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        w_hh, keep, hprev, parts = ctx.saved_tensors
        steps, batch, hidden = hprev.shape
        d_out = torch.zeros_like(hprev) if d_out is None else d_out.contiguous()
        dh = torch.zeros(batch, hidden) if d_h is None else d_h.clone().contiguous()
        dx, drec, scratch = _empty(steps, batch, 3 * hidden), _empty(steps, batch, 3 * hidden), _empty(batch, hidden)
        w = w_hh.detach().contiguous()
        _crecurrent.gru_backward(d_out.data_ptr(), w.data_ptr(), keep.data_ptr(), hprev.data_ptr(),
                                 parts.data_ptr(), dh.data_ptr(), dx.data_ptr(), drec.data_ptr(),
                                 scratch.data_ptr(), steps, batch, hidden)
        drec = drec.reshape(-1, 3 * hidden)
        d_w = drec.t() @ hprev.reshape(-1, hidden) if ctx.needs_input_grad[1] else None
        d_b = drec[:, 2 * hidden:].sum(0) if ctx.needs_input_grad[2] else None
        return dx, d_w, d_b, dh, None


def unroll(rnn: torch.nn.Module, kind: str, x: torch.Tensor, state: Any,
           keep: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """``rnn`` (a ``torch.nn.LSTM`` or ``GRU``, one direction, no dropout, time-major) over ``x`` ``(T, B, in)`` from
    ``state`` (``(h, c)`` or ``h``, each ``(layers, B, H)``), every layer's state zeroed before step ``t`` where
    ``keep[t]`` ``(T, B)`` is 0: the last layer's outputs ``(T, B, H)`` and the state after the last step, as the
    module returns them."""
    if (rnn.bidirectional or rnn.batch_first or not rnn.bias or getattr(rnn, "proj_size", 0)
            or (rnn.dropout and rnn.num_layers > 1)):
        raise ValueError("zoo.accel.recurrent_scan runs one-directional, time-major rnns with biases, no projection "
                         "and no dropout (as RecurrentCore builds them): use the module itself for others")
    keep = keep.to(torch.float32)
    finals: list[list[torch.Tensor]] = [[], []]
    for layer in range(rnn.num_layers):
        w_ih, w_hh = getattr(rnn, f"weight_ih_l{layer}"), getattr(rnn, f"weight_hh_l{layer}")
        b_ih, b_hh = getattr(rnn, f"bias_ih_l{layer}"), getattr(rnn, f"bias_hh_l{layer}")
        if kind == "lstm":
            xproj = torch.addmm(b_ih + b_hh, x.reshape(-1, x.shape[-1]), w_ih.t()).unflatten(0, x.shape[:2])
            x, h, c = _LSTMLoop.apply(xproj, w_hh, state[0][layer], state[1][layer], keep)
            finals[0].append(h)
            finals[1].append(c)
        else:
            hidden = w_hh.shape[1]
            bias = b_ih + torch.cat([b_hh[: 2 * hidden], b_hh.new_zeros(hidden)])
            xproj = torch.addmm(bias, x.reshape(-1, x.shape[-1]), w_ih.t()).unflatten(0, x.shape[:2])
            x, h = _GRULoop.apply(xproj, w_hh, b_hh[2 * hidden:], state[layer], keep)
            finals[0].append(h)
    if kind == "lstm":
        return x, (torch.stack(finals[0]), torch.stack(finals[1]))
    return x, torch.stack(finals[0])
