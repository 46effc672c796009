"""HL-Gauss and two-hot: regress a scalar value by classifying it over a fixed support.

Overview:
    A value head outputs ``num_bins`` logits over the support ``[min_value, max_value]``, split into
    ``num_bins`` equal bins (edges ``linspace(min_value, max_value, num_bins + 1)``, centers at the
    midpoints). A scalar target becomes a categorical target distribution and the head is trained with
    cross-entropy; the predicted scalar is the expectation of the bin centers under ``softmax(logits)``.

    - HL-Gauss (Farebrother et al. 2024, "Stop Regressing"): the target distribution is the mass that
      ``N(target, sigma^2)`` puts in each bin, renormalised by the mass inside the support. Targets are
      first clamped to the support. ``sigma`` defaults to ``0.75 * bin_width``, the paper's choice.
    - Two-hot: the target is split between the two neighbouring bin centers with linear weights, so the
      expectation recovers any target in ``[first center, last center]`` exactly (up to rounding).

    Shapes: targets of any shape ``S`` map to probabilities ``(*S, num_bins)``; logits are ``(*S, num_bins)``.
    Losses are 0-dim tensors, the mean over all elements of ``S``. Target distributions are computed from
    ``target.detach()``: no gradient ever flows into the target. No function mutates its inputs.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._checks import check_shape

DEFAULT_SIGMA_RATIO = 0.75
_SQRT_HALF = math.sqrt(0.5)


def _validate_support(min_value: float, max_value: float, num_bins: int) -> tuple[float, float, int]:
    if isinstance(num_bins, bool):
        raise ValueError(f"num_bins must be an integer >= 2, got {num_bins!r}")
    try:
        num_bins = operator.index(num_bins)
    except TypeError:
        raise ValueError(f"num_bins must be an integer >= 2, got {num_bins!r}") from None
    if num_bins < 2:
        raise ValueError(f"num_bins must be an integer >= 2, got {num_bins}")
    min_value, max_value = float(min_value), float(max_value)
    if not (math.isfinite(min_value) and math.isfinite(max_value) and min_value < max_value):
        raise ValueError(f"the support needs finite min_value < max_value, got [{min_value}, {max_value}]")
    return min_value, max_value, num_bins


def _resolve_sigma(sigma: float | None, min_value: float, max_value: float, num_bins: int) -> float:
    if sigma is None:
        return DEFAULT_SIGMA_RATIO * (max_value - min_value) / num_bins
    sigma = float(sigma)
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a finite number > 0, got {sigma}")
    return sigma


def _compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    # Integer targets become the default float; half precisions are widened because ndtr/erf and the
    # CDF differences lose too many digits in 16 bits.
    if not tensor.dtype.is_floating_point:
        return torch.get_default_dtype()
    return torch.promote_types(tensor.dtype, torch.float32)


def _edges(min_value: float, max_value: float, num_bins: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.linspace(min_value, max_value, num_bins + 1, dtype=dtype, device=device)


def _centers(
    min_value: float, max_value: float, num_bins: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    edges = _edges(min_value, max_value, num_bins, dtype, device)
    return (edges[:-1] + edges[1:]) / 2


def _check_logits(logits: torch.Tensor, target: torch.Tensor, num_bins: int) -> None:
    expected = (*target.shape, num_bins)
    check_shape("logits", logits, expected, f"(*target.shape, num_bins) = {expected}")


def _cross_entropy(logits: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    return -(target_probs * F.log_softmax(logits, dim=-1)).sum(-1).mean()


def hl_gauss_probs(
    target: torch.Tensor, min_value: float, max_value: float, num_bins: int, sigma: float | None = None
) -> torch.Tensor:
    """HL-Gauss target distribution: the mass of ``N(target, sigma^2)`` in each bin of the support.

    Overview:
        ``probs[..., k] = (Phi((e[k+1] - t) / sigma) - Phi((e[k] - t) / sigma)) / (Phi((max - t) / sigma) -
        Phi((min - t) / sigma))`` with ``t = clamp(target, min_value, max_value)``, edges ``e`` and the standard
        normal CDF ``Phi``. The normaliser is computed as the sum of the bin masses, which telescopes to the
        in-support mass and makes the result sum to 1 up to rounding. Near the support edges the truncation
        biases the expectation toward the inside (it stays within the support). Runs on the target's device;
        float64 targets are computed in float64, other targets in at least float32.
    Arguments:
        - target: scalar targets of any shape ``S``; no gradient flows into it.
        - min_value, max_value: the support, ``min_value < max_value``.
        - num_bins: number of equal bins, ``>= 2``.
        - sigma: standard deviation of the Gaussian, ``> 0``; ``None`` means ``0.75 * bin_width``.
    Returns:
        - probs: shape ``(*S, num_bins)``, non-negative, summing to 1 over the last dimension.
    Examples:
        >>> hl_gauss_probs(torch.tensor([0.0]), -1.0, 1.0, 4, sigma=1e-3)  # target on an edge: split
        tensor([[0.0000, 0.5000, 0.5000, 0.0000]])
    """
    min_value, max_value, num_bins = _validate_support(min_value, max_value, num_bins)
    sigma = _resolve_sigma(sigma, min_value, max_value, num_bins)
    dtype = _compute_dtype(target)
    clamped = target.detach().to(dtype).clamp(min_value, max_value)
    edges = _edges(min_value, max_value, num_bins, dtype, target.device)
    z = (edges - clamped.unsqueeze(-1)) / sigma
    # Phi(z) rounds to 1 for edges well above the target, so differences of Phi there lose all relative
    # precision; differences of the upper tail 1 - Phi(z) keep it. Both sides come from erfc of a
    # non-negative argument where it matters, because torch's ndtr is 0.5 * (1 + erf) and has only
    # absolute precision in the lower tail (float32 ndtr(-6) is 0).
    cdf = 0.5 * torch.special.erfc(-z * _SQRT_HALF)
    upper_tail = 0.5 * torch.special.erfc(z * _SQRT_HALF)
    below = cdf[..., 1:] - cdf[..., :-1]
    above = upper_tail[..., :-1] - upper_tail[..., 1:]
    bin_mass = torch.where(z[..., :-1] >= 0, above, below)
    return bin_mass / bin_mass.sum(-1, keepdim=True)


def categorical_to_scalar(logits: torch.Tensor, min_value: float, max_value: float, num_bins: int) -> torch.Tensor:
    """Scalar prediction of a categorical value head: the expected bin center under ``softmax(logits)``.

    Arguments:
        - logits: shape ``(*S, num_bins)``.
        - min_value, max_value, num_bins: the support (see ``hl_gauss_probs``).
    Returns:
        - value: shape ``S``, in ``[first center, last center]``; differentiable w.r.t. ``logits``.
    Examples:
        >>> categorical_to_scalar(torch.zeros(2, 4), -1.0, 1.0, 4)  # uniform: midpoint of the support
        tensor([0., 0.])
    """
    min_value, max_value, num_bins = _validate_support(min_value, max_value, num_bins)
    if logits.ndim == 0 or logits.shape[-1] != num_bins:
        raise ValueError(f"logits has shape {tuple(logits.shape)}, expected (*S, num_bins) with num_bins = {num_bins}")
    centers = _centers(min_value, max_value, num_bins, logits.dtype, logits.device)
    return (F.softmax(logits, dim=-1) * centers).sum(-1)


def hl_gauss_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    min_value: float,
    max_value: float,
    num_bins: int,
    sigma: float | None = None,
) -> torch.Tensor:
    """Cross-entropy between the HL-Gauss target distribution of ``target`` and ``softmax(logits)``.

    Overview:
        ``mean over S of -sum_k p_k log softmax(logits)_k`` with ``p = hl_gauss_probs(target, ...)``. The
        gradient w.r.t. ``logits`` is ``(softmax(logits) - p) / numel(S)``; ``target`` gets no gradient.
    Arguments:
        - logits: shape ``(*S, num_bins)``.
        - target: shape ``S``; computed in ``logits``' dtype and device.
        - min_value, max_value, num_bins, sigma: see ``hl_gauss_probs``.
    Returns:
        - loss: 0-dim tensor.
    Examples:
        >>> hl_gauss_loss(torch.zeros(8, 51), torch.zeros(8), -10.0, 10.0, 51).shape
        torch.Size([])
    """
    _check_logits(logits, target, num_bins)
    target_probs = hl_gauss_probs(target.to(device=logits.device, dtype=logits.dtype), min_value, max_value,
                                  num_bins, sigma)
    return _cross_entropy(logits, target_probs.to(logits.dtype))


def two_hot(target: torch.Tensor, min_value: float, max_value: float, num_bins: int) -> torch.Tensor:
    """Two-hot target distribution: linear weights on the two bin centers around ``target``.

    Overview:
        With centers ``c`` and ``c[i] <= t <= c[i+1]``, puts ``(c[i+1] - t) / (c[i+1] - c[i])`` on ``i`` and the
        rest on ``i + 1``, so ``sum_k probs[..., k] * c[k] == t``. Targets outside ``[c[0], c[-1]]`` (the outer
        half bins of the support included) are clamped there and become one-hot. A target exactly on a center
        is exactly one-hot.
    Arguments:
        - target: shape ``S``; no gradient flows into it.
        - min_value, max_value, num_bins: the support (see ``hl_gauss_probs``).
    Returns:
        - probs: shape ``(*S, num_bins)``, at most two non-zero entries per target, summing to 1.
    Examples:
        >>> two_hot(torch.tensor([0.5]), -1.0, 1.0, 4)  # centers -0.75, -0.25, 0.25, 0.75
        tensor([[0.0000, 0.0000, 0.5000, 0.5000]])
    """
    min_value, max_value, num_bins = _validate_support(min_value, max_value, num_bins)
    dtype = _compute_dtype(target)
    centers = _centers(min_value, max_value, num_bins, dtype, target.device)
    clamped = torch.clamp(target.detach().to(dtype), centers[0], centers[-1])
    # Searching the stored centers (rather than dividing by the bin width) makes a target equal to a
    # center land on exactly that index with weight exactly 1.
    lower = (torch.bucketize(clamped, centers, right=True) - 1).clamp(0, num_bins - 2)
    lower_center = centers[lower]
    upper_weight = (clamped - lower_center) / (centers[lower + 1] - lower_center)
    indices = torch.stack([lower, lower + 1], dim=-1)
    weights = torch.stack([1 - upper_weight, upper_weight], dim=-1)
    return torch.zeros(*target.shape, num_bins, dtype=dtype, device=target.device).scatter(-1, indices, weights)


def two_hot_loss(
    logits: torch.Tensor, target: torch.Tensor, min_value: float, max_value: float, num_bins: int
) -> torch.Tensor:
    """Cross-entropy between the two-hot target distribution of ``target`` and ``softmax(logits)``.

    Arguments:
        - logits: shape ``(*S, num_bins)``.
        - target: shape ``S``; no gradient flows into it.
        - min_value, max_value, num_bins: the support.
    Returns:
        - loss: 0-dim tensor, the mean over ``S``.
    Examples:
        >>> two_hot_loss(torch.zeros(3, 4), torch.tensor([0.5, -2.0, 0.0]), -1.0, 1.0, 4)  # log(4)
        tensor(1.3863)
    """
    _check_logits(logits, target, num_bins)
    target_probs = two_hot(target.to(device=logits.device, dtype=logits.dtype), min_value, max_value, num_bins)
    return _cross_entropy(logits, target_probs.to(logits.dtype))


@dataclass(frozen=True)
class HLGauss:
    """A fixed HL-Gauss support, bundling the functions of this module with their arguments.

    Overview:
        Validates once on construction; ``sigma = sigma_ratio * bin_width``. ``edges`` and ``centers`` are
        built in the default float dtype on the CPU; the methods work on their inputs' dtype and device.
    Arguments:
        - min_value, max_value: the support, ``min_value < max_value``.
        - num_bins: number of equal bins, ``>= 2``.
        - sigma_ratio: Gaussian standard deviation in bin widths, ``> 0`` (paper: 0.75).
    Examples:
        >>> support = HLGauss(-10.0, 10.0, 51)
        >>> logits = torch.zeros(8, 51, requires_grad=True)
        >>> loss = support.loss(logits, torch.randn(8))
        >>> support.to_scalar(logits).shape
        torch.Size([8])
    """

    min_value: float
    max_value: float
    num_bins: int
    sigma_ratio: float = DEFAULT_SIGMA_RATIO

    def __post_init__(self) -> None:
        _validate_support(self.min_value, self.max_value, self.num_bins)
        ratio = float(self.sigma_ratio)
        if not (math.isfinite(ratio) and ratio > 0):
            raise ValueError(f"sigma_ratio must be a finite number > 0, got {self.sigma_ratio}")

    @property
    def bin_width(self) -> float:
        return (float(self.max_value) - float(self.min_value)) / self.num_bins

    @property
    def sigma(self) -> float:
        return float(self.sigma_ratio) * self.bin_width

    @property
    def edges(self) -> torch.Tensor:
        """Bin edges, shape ``(num_bins + 1,)``."""
        return _edges(float(self.min_value), float(self.max_value), self.num_bins, torch.get_default_dtype(),
                      torch.device("cpu"))

    @property
    def centers(self) -> torch.Tensor:
        """Bin centers, shape ``(num_bins,)``."""
        return _centers(float(self.min_value), float(self.max_value), self.num_bins, torch.get_default_dtype(),
                        torch.device("cpu"))

    def to_probs(self, target: torch.Tensor) -> torch.Tensor:
        """``hl_gauss_probs`` on this support: ``S -> (*S, num_bins)``."""
        return hl_gauss_probs(target, self.min_value, self.max_value, self.num_bins, self.sigma)

    def to_scalar(self, logits: torch.Tensor) -> torch.Tensor:
        """``categorical_to_scalar`` on this support: ``(*S, num_bins) -> S``."""
        return categorical_to_scalar(logits, self.min_value, self.max_value, self.num_bins)

    def loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``hl_gauss_loss`` on this support: 0-dim cross-entropy, mean over ``S``."""
        return hl_gauss_loss(logits, target, self.min_value, self.max_value, self.num_bins, self.sigma)
