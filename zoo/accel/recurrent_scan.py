"""A recurrent core's unroll with its resets inside one compiled loop (the CPU's float32 path).

torch's fused LSTM and GRU kernels run a whole sequence from one state, but take no reset inside it: an unroll whose
episodes start inside its sequences then runs as zero-padded segments (``zoo.policies.recurrent.Segments``, on
average 1.4x the steps on CartPole without velocities) or step by step. Here each layer is one node of the autograd
graph (an ``autograd.Function``) in three parts:

- the input projection ``x @ W_ih^T`` plus biases: for inputs of at most ``STEP_INPUTS`` features inside the loop,
  step by step; for wider ones one product over all steps before it (torch);
- the sequential part in the optional C extension ``zoo.accel._crecurrent``: per step the state zeroed where
  ``keep[t]`` is 0 (an episode starts), the recurrent product and the gates (torch's equations and gate order),
  forward and backward;
- the gradients of the input and the weights, one product each after the backward (torch).

``unroll(rnn, kind, x, state, keep)`` runs a ``torch.nn.LSTM`` / ``torch.nn.GRU``'s layers so, with its parameters:
outputs and gradients equal torch's modules on the same segments up to float rounding (tests/test_recurrent_scan.py).
``applies(x)`` says where it can be used: a float32 CPU tensor outside autocast, the extension built,
``accel.recurrent_kernel`` on, no tracing (``zoo export``) or compiling; ``fits`` whether the core's size is one where
the loops were measured faster (``LOOP_LIMITS``). ``RecurrentCore.uses_loops`` runs them where both hold, or where
torch's module would step one step at a time; elsewhere the core keeps torch's modules. ``step_buffers`` gives
acting in numpy (``zoo.accel.numpy_memory``) the same loop for one step. Figures: docs/speed.md.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import torch

from .settings import settings

_VERSION = 3  # must equal ZOO_CRECURRENT_VERSION in _crecurrent.c

try:
    from . import _crecurrent
except ImportError:  # built without a C compiler, or a plain source checkout
    _crecurrent = None
if _crecurrent is not None and getattr(_crecurrent, "VERSION", None) != _VERSION:
    warnings.warn("zoo.accel._crecurrent is a stale build of older sources: re-run `pip install -e .` to rebuild it "
                  "(using torch's recurrent modules meanwhile)", RuntimeWarning, stacklevel=2)
    _crecurrent = None

__all__ = ["LOOP_LIMITS", "StepBuffers", "applies", "available", "fits", "step_buffers", "unroll", "unroll_cores"]

# The largest hidden units x sequences per unroll where the loops were measured at least level with torch's fused kernel
# on a sequence without resets (no padding for torch), T=32, one and two threads (docs/speed.md): beyond it torch's
# blocked, threaded products win. An unroll torch would step one step at a time takes the loops at any size.
LOOP_LIMITS = {"lstm": 4096, "gru": 16384}
# Inputs of at most this many features are projected inside the loops, step by step (bias + x_t @ W_ih^T): no
# (T, B, gates) projection is made first and read back (docs/speed.md); wider inputs are projected by torch first.
STEP_INPUTS = 256


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


def _project(x: torch.Tensor, w_ih: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The input projection ``x @ W_ih^T + bias`` of every step at once, ``(T, B, G)`` contiguous."""
    return torch.addmm(bias, x.reshape(-1, x.shape[-1]), w_ih.t()).view(*x.shape[:2], -1)


def _transposed(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` ``(R, C)`` transposed into a new contiguous ``(C, R)`` by the C extension (the copy alone about half
    of torch's strided one at 256 x 64: 8 against 17 us)."""
    weight = weight.contiguous()
    out = _empty(weight.shape[1], weight.shape[0])
    _crecurrent.transpose(weight.data_ptr(), out.data_ptr(), weight.shape[0], weight.shape[1])
    return out


def _inputs(x: torch.Tensor, w_ihs: list[torch.Tensor], biases: list[torch.Tensor]) -> tuple[Any, list[Any]]:
    """The gates' input part for the loops: where ``x`` has at most ``STEP_INPUTS`` features, nothing made here and
    per core ``(x, W_ih^T, bias)`` for the loops to project step by step (the projection tensor None); else the
    cores' projections as one product ``(T, B, n * G)`` and per core None."""
    if x.shape[-1] > STEP_INPUTS:
        return _project(x, _stacked(w_ihs), _stacked(biases)), [None] * len(w_ihs)
    x = x.contiguous()
    return None, [(x, _transposed(w_ih), bias.contiguous()) for w_ih, bias in zip(w_ihs, biases, strict=True)]


def _addresses(xproj: torch.Tensor | None, offset: int, stepwise: Any) -> tuple[int, ...]:
    """The loops' first five arguments (``xproj`` at a core's ``offset`` floats, ``x``, ``w_in``, ``bias``, ``K``)
    for one core, from ``_inputs``."""
    if stepwise is None:
        assert xproj is not None
        return xproj.data_ptr() + 4 * offset, 0, 0, 0, 0
    x, w_in, bias = stepwise
    return 0, x.data_ptr(), w_in.data_ptr(), bias.data_ptr(), x.shape[-1]


def _stacked(tensors: list[torch.Tensor]) -> torch.Tensor:
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


def _fresh(state: torch.Tensor) -> torch.Tensor:
    """A contiguous copy the C loops may overwrite."""
    return state.clone(memory_format=torch.contiguous_format)


def _saved(ctx: Any) -> tuple[int, torch.Tensor, torch.Tensor, list[torch.Tensor], list[torch.Tensor], int, int, int]:
    """What a layers node saved: ``n``, ``x``, ``keep``, the cores' ``W_ih``, their records (the first is a core's
    ``W_hh``, the second its states before each step, ``(T, B, H)``), and ``T``, ``B``, ``H``."""
    n = ctx.n
    x, keep, *rest = ctx.saved_tensors
    records = rest[n:]
    return (n, x, keep, rest[:n], records, *records[1].shape)


def _input_grads(ctx: Any, d_xproj: torch.Tensor, x: torch.Tensor,
                 w_ihs: list[torch.Tensor]) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """From the gradient of the cores' stacked projections ``(T * B, n * G)``: the gradients of ``x`` (None where not
    wanted), of the stacked ``W_ih`` (taken as ``(x^T d)^T``: the product's long side inside, several times faster
    for a few input features) and of the stacked projection bias."""
    d_x = (d_xproj @ _stacked(w_ihs)).view(x.shape) if ctx.needs_input_grad[0] else None
    return d_x, (x.reshape(-1, x.shape[-1]).t() @ d_xproj).t(), d_xproj.sum(0)


def _state_grads(grads: tuple[torch.Tensor, ...], k: int, per: int, final: bool, like: torch.Tensor) -> list[Any]:
    """Core ``k``'s output gradient (contiguous) and its final states' as buffers the C backward overwrites (zeros
    where the node returned no final state)."""
    d_out = grads[per * k].contiguous() if final else grads[k].contiguous()
    if final:
        return [d_out, *(_fresh(g) for g in grads[per * k + 1: per * (k + 1)])]
    return [d_out, *(torch.zeros_like(like) for _ in range(per - 1))]


class _LSTMLayers(torch.autograd.Function):
    """One LSTM layer of ``n`` cores (each its own weights and state) over the same inputs, one node of the graph:
    ``(x (T, B, in), keep (T, B), n, final, then per core h0, c0 (B, H), W_ih, W_hh, b_ih, b_hh)`` -> per core ``out
    (T, B, H)``, then ``h, c (B, H)`` where ``final``. The cores' input projections are one product (their ``W_ih``
    stacked) or made inside the loops step by step (``_inputs``); the gradients of ``x`` and of the ``W_ih`` are one
    product each; each core's sequential part runs in C on its columns."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, keep: torch.Tensor, n: int, final: bool,
                *tensors: torch.Tensor) -> tuple[Any, ...]:
        _check(x, keep, *tensors)
        cores = [tensors[6 * k: 6 * k + 6] for k in range(n)]
        steps, batch = x.shape[:2]
        hidden = cores[0][3].shape[1]
        width = 4 * hidden
        xproj, stepwise = _inputs(x, [core[2] for core in cores], [core[4] + core[5] for core in cores])
        keep = keep.contiguous()
        outputs, records = [], []
        for k, (h0, c0, _, w_hh, _, _) in enumerate(cores):
            h, c = _fresh(h0), _fresh(c0)
            out, hprev, cprev, tanhc = (_empty(steps, batch, hidden) for _ in range(4))
            gates = _empty(steps, batch, width)
            w_t = _transposed(w_hh)
            _crecurrent.lstm_forward(*_addresses(xproj, k * width, stepwise[k]), w_t.data_ptr(), keep.data_ptr(),
                                     h.data_ptr(), c.data_ptr(), out.data_ptr(), hprev.data_ptr(), cprev.data_ptr(),
                                     gates.data_ptr(), tanhc.data_ptr(), steps, batch, hidden, n * width)
            outputs += [out, h, c] if final else [out]
            records += [w_hh, hprev, cprev, gates, tanhc]
        ctx.n, ctx.final = n, final
        ctx.save_for_backward(x, keep, *(core[2] for core in cores), *records)
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        n, x, keep, w_ihs, records, steps, batch, hidden = _saved(ctx)
        width = 4 * hidden
        dgates, scratch = _empty(steps * batch, n * width), _empty(batch, hidden)
        states = []
        for k in range(n):
            w_hh, hprev, cprev, gates, tanhc = records[5 * k: 5 * k + 5]
            d_out, dh, dc = _state_grads(grads, k, 3, ctx.final, hprev[0])
            _crecurrent.lstm_backward(d_out.data_ptr(), w_hh.contiguous().data_ptr(), keep.data_ptr(),
                                      cprev.data_ptr(), gates.data_ptr(), tanhc.data_ptr(), dh.data_ptr(),
                                      dc.data_ptr(), dgates.data_ptr() + 4 * k * width, scratch.data_ptr(), steps,
                                      batch, hidden, n * width)
            states.append((dh, dc))
        d_x, d_w_ih, d_b = _input_grads(ctx, dgates, x, w_ihs)
        result: list[torch.Tensor | None] = [d_x, None, None, None]
        for k, (dh, dc) in enumerate(states):
            columns = slice(k * width, (k + 1) * width)
            d_w_hh = dgates[:, columns].t() @ records[5 * k + 1].view(-1, hidden)
            result += [dh, dc, d_w_ih[columns], d_w_hh, d_b[columns], d_b[columns]]
        return tuple(result)


class _GRULayers(torch.autograd.Function):
    """One GRU layer of ``n`` cores over the same inputs, one node: ``(x (T, B, in), keep (T, B), n, final, then per
    core h0 (B, H), W_ih, W_hh, b_ih, b_hh)`` -> per core ``out (T, B, H)``, then ``h (B, H)`` where ``final``; the
    projection holds ``b_ih`` and ``b_hh``'s r and z parts, ``b_hh``'s n part goes to the loop (as ``_LSTMLayers``
    otherwise)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, keep: torch.Tensor, n: int, final: bool,
                *tensors: torch.Tensor) -> tuple[Any, ...]:
        _check(x, keep, *tensors)
        cores = [tensors[5 * k: 5 * k + 5] for k in range(n)]
        steps, batch = x.shape[:2]
        hidden = cores[0][2].shape[1]
        width = 3 * hidden
        biases = []
        for _, _, _, b_ih, b_hh in cores:
            bias = b_ih.clone()
            bias[: 2 * hidden] += b_hh[: 2 * hidden]
            biases.append(bias)
        xproj, stepwise = _inputs(x, [core[1] for core in cores], biases)
        keep = keep.contiguous()
        outputs, records = [], []
        for k, (h0, _, w_hh, _, b_hh) in enumerate(cores):
            h, b_hn = _fresh(h0), b_hh[2 * hidden:].contiguous()
            out, hprev = _empty(steps, batch, hidden), _empty(steps, batch, hidden)
            parts, scratch = _empty(steps, batch, 4 * hidden), _empty(2, batch, width)
            w_t = _transposed(w_hh)
            _crecurrent.gru_forward(*_addresses(xproj, k * width, stepwise[k]), w_t.data_ptr(), b_hn.data_ptr(),
                                    keep.data_ptr(), h.data_ptr(), out.data_ptr(), hprev.data_ptr(),
                                    parts.data_ptr(), scratch.data_ptr(), steps, batch, hidden, n * width)
            outputs += [out, h] if final else [out]
            records += [w_hh, hprev, parts]
        ctx.n, ctx.final = n, final
        ctx.save_for_backward(x, keep, *(core[1] for core in cores), *records)
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        n, x, keep, w_ihs, records, steps, batch, hidden = _saved(ctx)
        width = 3 * hidden
        dx, scratch = _empty(steps * batch, n * width), _empty(batch, hidden)
        states = []
        for k in range(n):
            w_hh, hprev, parts = records[3 * k: 3 * k + 3]
            d_out, dh = _state_grads(grads, k, 2, ctx.final, hprev[0])
            drec = _empty(steps * batch, width)
            _crecurrent.gru_backward(d_out.data_ptr(), w_hh.contiguous().data_ptr(), keep.data_ptr(),
                                     hprev.data_ptr(), parts.data_ptr(), dh.data_ptr(), dx.data_ptr() + 4 * k * width,
                                     drec.data_ptr(), scratch.data_ptr(), steps, batch, hidden, n * width)
            states.append((dh, drec))
        d_x, d_w_ih, d_b_ih = _input_grads(ctx, dx, x, w_ihs)
        result: list[torch.Tensor | None] = [d_x, None, None, None]
        for k, (dh, drec) in enumerate(states):
            columns = slice(k * width, (k + 1) * width)
            d_w_hh = drec.t() @ records[3 * k + 1].view(-1, hidden)
            d_b_hh = torch.cat([d_b_ih[k * width: k * width + 2 * hidden], drec[:, 2 * hidden:].sum(0)])
            result += [dh, d_w_ih[columns], d_w_hh, d_b_ih[columns], d_b_hh]
        return tuple(result)


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
    per = (3 if kind == "lstm" else 2) if final else 1
    outputs = (_LSTMLayers if kind == "lstm" else _GRULayers).apply(x, keep, len(rnns), final, *tensors)
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


class StepBuffers:
    """One layer's single step (T = 1, no reset) through the compiled loops, for acting in numpy: fill ``xproj``
    ``(B, G)`` (the input projection with ``step_buffers``' biases), ``h`` (and ``c``) ``(B, H)``, call ``run()``;
    the new state is then in ``h`` (and ``c``), the output in ``out``. The buffers' addresses are taken once."""

    def __init__(self, kind: str, w_hh: np.ndarray, b_hn: np.ndarray, batch: int) -> None:
        hidden = w_hh.shape[0]
        width = (4 if kind == "lstm" else 3) * hidden
        buffer = functools.partial(np.zeros, dtype=np.float32)
        self.w_t = np.ascontiguousarray(w_hh, dtype=np.float32)  # (H, G): W_hh transposed
        self.b_hn = np.ascontiguousarray(b_hn, dtype=np.float32)
        self.xproj, self.keep = buffer((batch, width)), np.ones(batch, np.float32)
        self.h, self.c, self.out = buffer((batch, hidden)), buffer((batch, hidden)), buffer((batch, hidden))
        self._records = [buffer((batch, hidden)) for _ in range(3)] + [buffer((batch, 4 * hidden))]
        self._scratch = buffer((batch, width))
        address = _address
        if kind == "lstm":
            hprev, cprev, tanhc, gates = self._records
            self._call = functools.partial(
                _crecurrent.lstm_forward, address(self.xproj), 0, 0, 0, 0, address(self.w_t), address(self.keep),
                address(self.h), address(self.c), address(self.out), address(hprev), address(cprev), address(gates),
                address(tanhc), 1, batch, hidden, width)
        else:
            hprev, parts = self._records[0], self._records[3]
            self._call = functools.partial(
                _crecurrent.gru_forward, address(self.xproj), 0, 0, 0, 0, address(self.w_t), address(self.b_hn),
                address(self.keep), address(self.h), address(self.out), address(hprev), address(parts),
                address(self._scratch), 1, batch, hidden, width)

    def run(self) -> None:
        """The step: reads ``xproj`` and the state, writes the state and ``out``."""
        self._call()


def _address(array: np.ndarray) -> int:
    if array.dtype != np.float32 or not array.flags.c_contiguous:
        raise TypeError("zoo.accel.recurrent_scan's step takes C-contiguous float32 arrays")
    return int(array.ctypes.data)


def step_buffers(kind: str, w_hh_t: np.ndarray, b_hn: np.ndarray, batch: int) -> StepBuffers:
    """The buffers of one ``kind`` layer's acting step for ``batch`` rows, from ``W_hh`` transposed ``(H, G)`` and
    (GRU) ``b_hh``'s n part ``(H,)`` (``StepBuffers``). Only where ``available()``."""
    if _crecurrent is None:
        raise RuntimeError("zoo.accel._crecurrent is not built: check recurrent_scan.available() first")
    return StepBuffers(kind, w_hh_t, b_hn, batch)
