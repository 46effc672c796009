"""The calls into zoo's compiled recurrent loops (``zoo.accel._crecurrent``): a layer's forward and backward over
several cores, and one acting step, on tensors and arrays this module allocates and checks.

Two callers drive the same functions: the autograd nodes of eager learning (``zoo.accel.recurrent_scan``) and the
``torch.library`` custom ops a compiled learning step traces (``zoo.accel.recurrent_ops``). A layer's forward
(``lstm_forward``, ``gru_forward``) returns each core's outputs and the records its backward reads; its backward
(``lstm_backward``, ``gru_backward``) returns the gradients in ``LayerGrads``' shape, which ``layer_grads`` lays out
as the node's inputs are. What runs where:

- the input projection ``x @ W_ih^T`` plus biases: for inputs of at most ``STEP_INPUTS`` features inside the loop,
  step by step; for wider ones one product over all steps before it (torch);
- the sequential part in C: per step the state zeroed where ``keep[t]`` is 0 (an episode starts), the recurrent
  product and the gates (torch's equations and gate order), forward and backward;
- the gradients of the input and the weights, one product each after the backward (torch).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

_VERSION = 3  # must equal ZOO_CRECURRENT_VERSION in _crecurrent.c

try:
    from . import _crecurrent
except ImportError:  # built without a C compiler, or a plain source checkout
    _crecurrent = None
if _crecurrent is not None and getattr(_crecurrent, "VERSION", None) != _VERSION:
    warnings.warn("zoo.accel._crecurrent is a stale build of older sources: re-run `pip install -e .` to rebuild it "
                  "(using torch's recurrent modules meanwhile)", RuntimeWarning, stacklevel=2)
    _crecurrent = None

# Inputs of at most this many features are projected inside the loops, step by step (bias + x_t @ W_ih^T): no
# (T, B, gates) projection is made first and read back (docs/speed.md); wider inputs are projected by torch first.
STEP_INPUTS = 256
# Per core: what its forward records for the backward (``gates`` and ``parts`` (T, B, 4H), the rest (T, B, H)).
RECORDS = {"lstm": ("hprev", "cprev", "gates", "tanhc"), "gru": ("hprev", "parts")}
# Per core, the tensors a layer node takes: its state(s) (an LSTM's h and c, a GRU's h), W_ih, W_hh, b_ih, b_hh.
CORE_TENSORS = {"lstm": 6, "gru": 5}


def outputs_per_core(kind: str, final: bool) -> int:
    """What a layer node returns per core: ``out``, then its final state(s) where ``final`` (an LSTM's ``h, c``)."""
    return (3 if kind == "lstm" else 2) if final else 1


def cores_of(kind: str, n: int, tensors: Sequence[torch.Tensor]) -> list[tuple[torch.Tensor, ...]]:
    """A layer node's tensors after ``x``, ``keep``, ``n`` and ``final``, per core (``CORE_TENSORS``)."""
    per = CORE_TENSORS[kind]
    return [tuple(tensors[per * k: per * (k + 1)]) for k in range(n)]


def weights_of(kind: str, cores: list[tuple[torch.Tensor, ...]]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The cores' ``W_ih`` and ``W_hh`` (after their state(s))."""
    first = CORE_TENSORS[kind] - 4
    return [core[first] for core in cores], [core[first + 1] for core in cores]


def available() -> bool:
    """Whether the compiled loops (``zoo.accel._crecurrent``) were built."""
    return _crecurrent is not None


def check(*tensors: torch.Tensor) -> None:
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


def inputs(x: torch.Tensor, w_ihs: list[torch.Tensor], biases: list[torch.Tensor]) -> tuple[Any, list[Any]]:
    """The gates' input part for the loops: where ``x`` has at most ``STEP_INPUTS`` features, nothing made here and
    per core ``(x, W_ih^T, bias)`` for the loops to project step by step (the projection tensor None); else the
    cores' projections as one product ``(T, B, n * G)`` and per core None."""
    if x.shape[-1] > STEP_INPUTS:
        return _project(x, _stacked(w_ihs), _stacked(biases)), [None] * len(w_ihs)
    x = x.contiguous()
    return None, [(x, _transposed(w_ih), bias.contiguous()) for w_ih, bias in zip(w_ihs, biases, strict=True)]


def _addresses(xproj: torch.Tensor | None, offset: int, stepwise: Any) -> tuple[int, ...]:
    """The loops' first five arguments (``xproj`` at a core's ``offset`` floats, ``x``, ``w_in``, ``bias``, ``K``)
    for one core, from ``inputs``."""
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


def _input_grads(d_xproj: torch.Tensor, x: torch.Tensor, w_ihs: list[torch.Tensor],
                 need_x: bool) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """From the gradient of the cores' stacked projections ``(T * B, n * G)``: the gradients of ``x`` (None where not
    ``need_x``), of the stacked ``W_ih`` (taken as ``(x^T d)^T``: the product's long side inside, several times faster
    for a few input features) and of the stacked projection bias."""
    d_x = (d_xproj @ _stacked(w_ihs)).view(x.shape) if need_x else None
    return d_x, (x.reshape(-1, x.shape[-1]).t() @ d_xproj).t(), d_xproj.sum(0)


def _state_grads(grads: list[torch.Tensor | None], k: int, per: int, final: bool, like: torch.Tensor) -> list[Any]:
    """Core ``k``'s output gradient (contiguous; zeros where None) and its final states' as buffers the C backward
    overwrites (zeros where the node returned no final state or the gradient is None)."""
    first = per * k if final else k
    d_out = grads[first]
    d_out = torch.zeros_like(like) if d_out is None else d_out.contiguous()
    state = like[0]  # a state's shape (B, H)
    if not final:
        return [d_out, *(torch.zeros_like(state) for _ in range(per - 1))]
    return [d_out, *(torch.zeros_like(state) if g is None else _fresh(g) for g in grads[first + 1: first + per])]


class LayerGrads(NamedTuple):
    """A layer node's backward over ``n`` cores: ``x``'s gradient (None where not wanted), the stacked ``W_ih``'s
    ``(n * G, in)`` and projection bias's ``(n * G)``, and per core its own: the initial state(s)' and ``W_hh``'s
    (and, GRU, ``b_hh``'s), as a list per core. No two share memory (a custom op's outputs may not)."""

    x: torch.Tensor | None
    w_ih: torch.Tensor
    bias: torch.Tensor
    cores: list[list[torch.Tensor]]


def layer_grads(kind: str, grads: LayerGrads) -> list[torch.Tensor | None]:
    """The gradients of a layer node's inputs after ``x``, ``keep``, ``n`` and ``final`` (per core ``h0, c0, W_ih,
    W_hh, b_ih, b_hh`` for an LSTM, ``h0, W_ih, W_hh, b_ih, b_hh`` for a GRU) from its backward's ``LayerGrads``."""
    width = grads.w_ih.shape[0] // len(grads.cores)
    result: list[torch.Tensor | None] = []
    for k, own in enumerate(grads.cores):
        columns = slice(k * width, (k + 1) * width)
        d_w_ih, d_b = grads.w_ih[columns], grads.bias[columns]
        if kind == "lstm":
            dh, dc, d_w_hh = own
            result += [dh, dc, d_w_ih, d_w_hh, d_b, d_b]
        else:
            dh, d_w_hh, d_b_hh = own
            result += [dh, d_w_ih, d_w_hh, d_b, d_b_hh]
    return result


def lstm_forward(x: torch.Tensor, keep: torch.Tensor, final: bool,
                 cores: list[tuple[torch.Tensor, ...]]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """One LSTM layer of the cores (each ``(h0, c0, W_ih, W_hh, b_ih, b_hh)``) over the same ``x`` ``(T, B, in)``,
    resets where ``keep`` ``(T, B)`` is 0: per core ``out (T, B, H)`` (and ``h, c (B, H)`` where ``final``), and per
    core its ``RECORDS`` for ``lstm_backward``."""
    steps, batch = x.shape[:2]
    hidden = cores[0][3].shape[1]
    width, n = 4 * hidden, len(cores)
    xproj, stepwise = inputs(x, [core[2] for core in cores], [core[4] + core[5] for core in cores])
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
        records += [hprev, cprev, gates, tanhc]
    return outputs, records


def lstm_backward(grads: list[torch.Tensor | None], x: torch.Tensor, keep: torch.Tensor, w_ihs: list[torch.Tensor],
                  w_hhs: list[torch.Tensor], records: list[torch.Tensor], final: bool, need_x: bool) -> LayerGrads:
    """``lstm_forward``'s backward from the gradients of its outputs (None: zeros)."""
    n = len(w_hhs)
    steps, batch, hidden = records[0].shape
    width = 4 * hidden
    keep = keep.contiguous()
    dgates, scratch = _empty(steps * batch, n * width), _empty(batch, hidden)
    states = []
    for k in range(n):
        hprev, cprev, gates, tanhc = records[4 * k: 4 * k + 4]
        d_out, dh, dc = _state_grads(grads, k, 3, final, hprev)
        _crecurrent.lstm_backward(d_out.data_ptr(), w_hhs[k].contiguous().data_ptr(), keep.data_ptr(),
                                  cprev.data_ptr(), gates.data_ptr(), tanhc.data_ptr(), dh.data_ptr(),
                                  dc.data_ptr(), dgates.data_ptr() + 4 * k * width, scratch.data_ptr(), steps,
                                  batch, hidden, n * width)
        states.append([dh, dc])
    grads_in = LayerGrads(*_input_grads(dgates, x, w_ihs, need_x), states)
    for k in range(n):  # W_hh's after the inputs' (measured 1-2% faster for the node than before them)
        states[k].append(dgates[:, k * width: (k + 1) * width].t() @ records[4 * k].view(-1, hidden))
    return grads_in


def gru_forward(x: torch.Tensor, keep: torch.Tensor, final: bool,
                cores: list[tuple[torch.Tensor, ...]]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """One GRU layer of the cores (each ``(h0, W_ih, W_hh, b_ih, b_hh)``), as ``lstm_forward``: per core ``out`` (and
    ``h`` where ``final``), and per core its ``RECORDS``. The projection holds ``b_ih`` and ``b_hh``'s r
    and z parts; ``b_hh``'s n part goes to the loop."""
    steps, batch = x.shape[:2]
    hidden = cores[0][2].shape[1]
    width, n = 3 * hidden, len(cores)
    biases = []
    for _, _, _, b_ih, b_hh in cores:
        bias = b_ih.clone()
        bias[: 2 * hidden] += b_hh[: 2 * hidden]
        biases.append(bias)
    xproj, stepwise = inputs(x, [core[1] for core in cores], biases)
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
        records += [hprev, parts]
    return outputs, records


def gru_backward(grads: list[torch.Tensor | None], x: torch.Tensor, keep: torch.Tensor, w_ihs: list[torch.Tensor],
                 w_hhs: list[torch.Tensor], records: list[torch.Tensor], final: bool, need_x: bool) -> LayerGrads:
    """``gru_forward``'s backward from the gradients of its outputs (None: zeros)."""
    n = len(w_hhs)
    steps, batch, hidden = records[0].shape
    width = 3 * hidden
    keep = keep.contiguous()
    dx, scratch = _empty(steps * batch, n * width), _empty(batch, hidden)
    drecs, states = [], []
    for k in range(n):
        hprev, parts = records[2 * k: 2 * k + 2]
        d_out, dh = _state_grads(grads, k, 2, final, hprev)
        drec = _empty(steps * batch, width)
        _crecurrent.gru_backward(d_out.data_ptr(), w_hhs[k].contiguous().data_ptr(), keep.data_ptr(),
                                 hprev.data_ptr(), parts.data_ptr(), dh.data_ptr(), dx.data_ptr() + 4 * k * width,
                                 drec.data_ptr(), scratch.data_ptr(), steps, batch, hidden, n * width)
        drecs.append(drec)
        states.append([dh])
    grads_in = LayerGrads(*_input_grads(dx, x, w_ihs, need_x), states)
    for k, drec in enumerate(drecs):  # b_hh's r and z parts are the projection's; its n part the loop's own
        states[k] += [drec.t() @ records[2 * k].view(-1, hidden),
                      torch.cat([grads_in.bias[k * width: k * width + 2 * hidden], drec[:, 2 * hidden:].sum(0)])]
    return grads_in


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
