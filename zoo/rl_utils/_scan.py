"""The backward first-order linear recurrence behind gae, lambda-returns and V-trace (private).

    x[t] = inputs[t] + coeff[t] * x[t + 1],   x[T] = last   (time-major, t = T-1 .. 0)

A Python loop over T costs a few microseconds a step whatever the batch size. Instead we use the doubling
(Hillis-Steele) scan: after the pass with stride s, x[t] holds the sum of the next 2s terms and coeff[t] the
product of the next 2s coefficients, so ceil(log2 T) vectorised passes finish it. On CPU the passes run in numpy
(a third of torch's per-call overhead, which dominates at small sizes); on other devices they run in torch.
Zeros in ``coeff`` (episode ends) are handled exactly: the product through them is zero.
"""

from __future__ import annotations

import numpy as np
import torch


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
    return tensor.detach().to(dtype).numpy()


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; everything else is computed in float32."""
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def scan_numpy_inplace(coeff: np.ndarray, inputs: np.ndarray) -> np.ndarray:
    """Solve the recurrence on numpy arrays that the caller owns (both are overwritten)."""
    if inputs.shape[0] == 0:
        return inputs
    return _scan_numpy(coeff, inputs)


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
    if inputs.device.type == "cpu":
        x = inputs.to(dtype).numpy().copy()
        c = np.broadcast_to(coeff.to(dtype).numpy(), x.shape).copy()
        result = torch.from_numpy(scan_numpy_inplace(c, x))
    else:
        result = _scan_torch(coeff.to(dtype), inputs.to(dtype))
    return result.to(inputs.dtype) if inputs.dtype != dtype else result
