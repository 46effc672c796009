"""The backward first-order linear recurrence behind gae, lambda-returns and V-trace (private).

    x[t] = inputs[t] + coeff[t] * x[t + 1],   x[T] = last   (time-major, t = T-1 .. 0)

A Python loop over T costs a few microseconds a step whatever the batch size. Instead we use the doubling
(Hillis-Steele) scan: after the pass with stride s, x[t] holds the sum of the next 2s terms and coeff[t] the
product of the next 2s coefficients, so ceil(log2 T) vectorised passes finish it. On CPU the passes run in numpy
(a third of torch's per-call overhead, which dominates at small sizes); on other devices they run in torch.
Zeros in ``coeff`` (episode ends) are handled exactly: the product through them is zero.

When the optional C extension ``_ckernels`` was built at install time, CPU arrays skip the scan: a compiled
loop over T (batch innermost) reads each array once, which is several times faster than ~2 log2(T) numpy
passes when T is small and B large. ``fused_gae`` and ``fused_vtrace`` also fold the TD-error arithmetic into
that loop. They return None when the extension is missing, and callers then use the numpy path.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

_CKERNELS_VERSION = 1  # must equal ZOO_CKERNELS_VERSION in _ckernels.c

try:
    from . import _ckernels
except ImportError:  # built without a C compiler, or imported from a plain source checkout
    _ckernels = None
if _ckernels is not None and getattr(_ckernels, "VERSION", None) != _CKERNELS_VERSION:
    warnings.warn(
        "zoo.rl_utils._ckernels is a stale build of older sources: re-run `pip install -e .` to rebuild it "
        "(using the numpy scan meanwhile)",
        RuntimeWarning,
        stacklevel=2,
    )
    _ckernels = None

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def kernels_available() -> bool:
    """Whether the compiled loops (``zoo.rl_utils._ckernels``) are in use."""
    return _ckernels is not None


def _scan_numpy(coeff: np.ndarray, x: np.ndarray) -> np.ndarray:
    # Both arrays are private copies; updated in place.
    steps = x.shape[0]
    buffer = np.empty_like(x)
    stride = 1
    while stride < steps:
        np.multiply(coeff[:-stride], x[stride:], out=buffer[:-stride])
        x[:-stride] += buffer[:-stride]
        if 2 * stride < steps:
            # numpy buffers the overlapping operands, so this reads the old coeff[stride:].
            np.multiply(coeff[:-stride], coeff[stride:], out=coeff[:-stride])
        stride *= 2
    return x


def _scan_torch(coeff: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    steps = x.shape[0]
    stride = 1
    while stride < steps:
        # torch refuses partially overlapping in-place operands: build the shifted products out of place.
        x = torch.cat([torch.addcmul(x[:-stride], coeff[:-stride], x[stride:]), x[-stride:]])
        if 2 * stride < steps:
            coeff = torch.cat([coeff[:-stride] * coeff[stride:], coeff[-stride:]])
        stride *= 2
    return x


def numpy_view(tensor: torch.Tensor, dtype: torch.dtype) -> np.ndarray:
    """A read-only numpy view (or converted copy) of a CPU tensor, without gradient tracking."""
    if tensor.requires_grad:
        tensor = tensor.detach()
    return (tensor if tensor.dtype == dtype else tensor.to(dtype)).numpy()


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; everything else is computed in float32."""
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def scan_numpy_inplace(coeff: np.ndarray, inputs: np.ndarray) -> np.ndarray:
    """Solve the recurrence on numpy arrays that the caller owns (both are overwritten)."""
    if inputs.shape[0] == 0:
        return inputs
    if (
        _ckernels is not None
        and inputs.dtype in _FLOATS
        and coeff.dtype == inputs.dtype
        and coeff.shape == inputs.shape
        and inputs.flags.c_contiguous
        and coeff.flags.c_contiguous
        and inputs.flags.writeable
    ):
        steps = inputs.shape[0]
        _ckernels.recurrence(coeff, inputs, steps, inputs.size // steps, inputs.dtype == np.float64)
        return inputs
    return _scan_numpy(coeff, inputs)


def fused_gae(
    value: np.ndarray,
    next_value: np.ndarray,
    reward: np.ndarray,
    done: np.ndarray | None,
    traj_flag: np.ndarray | None,
    gamma: float,
    lambda_: float,
) -> np.ndarray | None:
    """GAE in one compiled pass, or None without the extension. Arrays share one float dtype; value and
    next_value are ``(T, B)`` or ``(T, B, A)``, reward and the flags ``(T, B)`` (None: all zeros)."""
    if _ckernels is None or value.dtype not in _FLOATS:
        return None
    steps, batch = reward.shape
    agents = value.shape[2] if value.ndim == 3 else 1
    arrays = [np.ascontiguousarray(x) if x is not None else None for x in (value, next_value, reward, done, traj_flag)]
    out = np.empty(value.shape, dtype=value.dtype)
    _ckernels.gae(*arrays, out, steps, batch, agents, gamma, gamma * lambda_, value.dtype == np.float64)
    return out


def fused_vtrace(
    rho: np.ndarray, c: np.ndarray, reward: np.ndarray, values: np.ndarray, gamma: float, lambda_: float
) -> np.ndarray | None:
    """Plain V-trace targets ``(T, B)`` in one compiled pass, or None without the extension. ``values`` is
    ``V(x_0..x_T)``, ``(T+1, B)``; all arrays share one float dtype."""
    if _ckernels is None or values.dtype not in _FLOATS:
        return None
    steps = reward.shape[0]
    width = reward.size // steps if steps else 0
    arrays = [np.ascontiguousarray(x) for x in (rho, c, reward, values)]
    out = np.empty(reward.shape, dtype=values.dtype)
    _ckernels.vtrace(*arrays, out, steps, width, gamma, gamma * lambda_, values.dtype == np.float64)
    return out


def backward_linear_recurrence(
    coeff: torch.Tensor, inputs: torch.Tensor, last: torch.Tensor | None = None
) -> torch.Tensor:
    """Solve ``x[t] = inputs[t] + coeff[t] * x[t+1]`` backwards from ``x[T] = last`` (default 0).

    Arguments:
        - coeff, inputs: tensors of the same shape ``(T, ...)``.
        - last: optional ``(...)`` value of ``x[T]``.
    Returns:
        - x: ``(T, ...)``, same dtype and device as ``inputs``, detached (a target, never differentiated).
    """
    coeff = coeff.detach()
    inputs = inputs.detach()
    if last is not None and inputs.shape[0] > 0:
        inputs = inputs.clone()
        inputs[-1] += coeff[-1] * last.detach()
    dtype = compute_dtype(inputs.dtype)
    if inputs.shape[0] == 0:
        return inputs.to(dtype).clone()
    if inputs.device.type == "cpu" and not torch.compiler.is_compiling():  # traced: torch operations only
        x = inputs.to(dtype).numpy().copy()
        c = np.broadcast_to(coeff.to(dtype).numpy(), x.shape).copy()
        result = torch.from_numpy(scan_numpy_inplace(c, x))
    else:
        result = _scan_torch(coeff.to(dtype), inputs.to(dtype))
    return result.to(inputs.dtype) if inputs.dtype != dtype else result
