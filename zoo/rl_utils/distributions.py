"""Entropy, one-hot and log-probability helpers for categorical and (tanh-)Gaussian policies.

Overview:
    Small, numerically stable building blocks shared by the policy losses. Categorical helpers take
    unnormalised ``logits`` of shape ``(..., N)``; Gaussian helpers take ``mu`` and ``sigma`` (standard
    deviation, not log) of shape ``(..., D)``. ``reduce=True`` sums over the last (action) dimension,
    ``reduce=False`` keeps one value per action dimension (SAC-ACE weights them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


def _finite_log_softmax(logits: torch.Tensor, dim: int) -> torch.Tensor:
    # Masked actions (logit -inf) have log-prob -inf; clamping keeps p * log p = 0 and its gradient finite.
    return F.log_softmax(logits, dim=dim).clamp(min=torch.finfo(logits.dtype).min)


def entropy(logits: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Entropy of the categorical distribution ``softmax(logits)``.

    Overview:
        Computed from ``log_softmax`` so it is stable for large logits, and finite (with finite
        gradients) when some logits are ``-inf`` (masked actions).
    Arguments:
        - logits: unnormalised log-probabilities, shape ``(..., N)``.
        - dim: the category dimension.
    Returns:
        - entropy: shape ``(...)``, in nats.
    Examples:
        >>> entropy(torch.zeros(2, 4))  # uniform over 4: log(4)
        tensor([1.3863, 1.3863])
    """
    return _entropy_of(_finite_log_softmax(logits, dim), dim)


def _entropy_of(log_probs: torch.Tensor, dim: int) -> torch.Tensor:
    return -(log_probs.exp() * log_probs).sum(dim)


def _categorical_log_prob_and_entropy(logits: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``log pi(action)`` and the entropy from one log-softmax (the caller has checked the shapes).

    Equal to ``categorical_log_prob`` and ``entropy`` except for a chosen action whose logit is ``-inf``, whose
    log-prob is the dtype's lowest finite value instead of ``-inf``.
    """
    log_probs = _finite_log_softmax(logits, -1)
    return log_probs.gather(-1, action.long().unsqueeze(-1)).squeeze(-1), _entropy_of(log_probs, -1)


MASKED_LOGIT = -1e8
"""The logit an invalid action gets under an action mask (``mask_logits``): far below any real logit, so its softmax
weight is exactly 0 in float32, yet finite, so that log-softmax and entropy stay finite (``0 * -inf`` is NaN)."""


def mask_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Categorical logits ``(..., N)`` under an action mask ``(..., N)`` (True: valid): the invalid entries set to
    ``MASKED_LOGIT`` (a new tensor). The masked distribution gives them probability 0 and their logits no gradient
    (``torch.where`` passes none to the branch it does not take): never a renormalised probability that leaks
    gradient to invalid actions. For MultiDiscrete logits side by side, the components' masks side by side.
    ``mask=None``: the logits as they are.

    Examples:
        >>> logits = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> masked = mask_logits(logits, torch.tensor([True, False, True]))
        >>> masked.softmax(-1)[1].item(), categorical_log_prob(masked, torch.tensor(2)).exp().item() > 0.88
        (0.0, True)
    """
    if mask is None:
        return logits
    return torch.where(mask.to(device=logits.device, dtype=torch.bool), logits, torch.full_like(logits, MASKED_LOGIT))


def one_hot(index: torch.Tensor, num: int, num_first: bool = False) -> torch.Tensor:
    """One-hot float encoding of integer ``index`` (DI-engine ``one_hot`` semantics).

    Arguments:
        - index: integer tensor of any shape ``S``; every index lies in ``[0, num)``, or is ``-1``, which encodes
          as all zeros (DI-engine's padding convention).
        - num: number of classes.
        - num_first: put the class dimension first (``(num, *S)``) instead of last (``(*S, num)``).
    Returns:
        - float32 tensor of shape ``(*S, num)`` or ``(num, *S)``, on the device of ``index``.
    Examples:
        >>> one_hot(torch.tensor([2, -1]), 3)
        tensor([[0., 0., 1.],
                [0., 0., 0.]])
    """
    if index.dtype.is_floating_point or index.dtype == torch.bool:
        raise ValueError(f"index has dtype {index.dtype}, expected an integer tensor")
    if index.numel() and (int(index.min()) < -1 or int(index.max()) >= num):
        raise ValueError(
            f"index has values outside [0, {num}) and -1 (no class): min {int(index.min())}, max {int(index.max())}"
        )
    index = index.long()
    padding = index == -1
    encoded = F.one_hot(index.clamp(min=0), num).float()
    encoded = encoded.masked_fill(padding.unsqueeze(-1), 0.0)
    if num_first:
        encoded = encoded.permute(-1, *range(encoded.dim() - 1))
    return encoded


def categorical_log_prob(logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Log-probability of integer ``action`` under ``softmax(logits)``.

    Shapes: logits ``(..., N)``, action ``(...)`` -> ``(...)``.
    """
    if logits.shape[:-1] != action.shape:
        raise ValueError(
            f"action has shape {tuple(action.shape)}, expected the leading shape of logits {tuple(logits.shape[:-1])}"
        )
    log_probs = F.log_softmax(logits, dim=-1)
    return log_probs.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)


def gaussian_log_prob(
    mu: torch.Tensor, sigma: torch.Tensor, action: torch.Tensor, reduce: bool = True
) -> torch.Tensor:
    """Log-density of ``action`` under the diagonal Gaussian ``N(mu, sigma^2)``.

    Shapes: mu, sigma, action ``(..., D)`` (broadcastable) -> ``(...)`` when ``reduce`` else ``(..., D)``.
    """
    z = (action - mu) / sigma
    per_dim = -0.5 * z.pow(2) - torch.log(sigma) - _LOG_SQRT_2PI
    return per_dim.sum(-1) if reduce else per_dim


def gaussian_entropy(sigma: torch.Tensor, reduce: bool = True) -> torch.Tensor:
    """Entropy of the diagonal Gaussian with standard deviation ``sigma``: ``0.5 + log(sqrt(2 pi) sigma)``."""
    per_dim = 0.5 + _LOG_SQRT_2PI + torch.log(sigma)
    return per_dim.sum(-1) if reduce else per_dim


def tanh_log_det_jacobian(pre_tanh: torch.Tensor) -> torch.Tensor:
    """Per-dimension ``log(1 - tanh(u)^2)``, computed as ``2 (log 2 - u - softplus(-2u))`` (stable for large |u|)."""
    return 2.0 * (_LOG_2 - pre_tanh - F.softplus(-2.0 * pre_tanh))


def tanh_gaussian_log_prob(
    mu: torch.Tensor, sigma: torch.Tensor, pre_tanh: torch.Tensor, reduce: bool = True
) -> torch.Tensor:
    """Log-density of ``tanh(pre_tanh)`` where ``pre_tanh ~ N(mu, sigma^2)`` (SAC's squashed Gaussian).

    Overview:
        Takes the pre-squash sample ``u`` (not the action) to avoid ``atanh`` at the bounds:
        ``log p(a) = log N(u; mu, sigma) - log(1 - tanh(u)^2)`` per dimension.
    Shapes: ``(..., D)`` -> ``(...)`` when ``reduce`` else ``(..., D)``.
    """
    per_dim = gaussian_log_prob(mu, sigma, pre_tanh, reduce=False) - tanh_log_det_jacobian(pre_tanh)
    return per_dim.sum(-1) if reduce else per_dim


def sample_tanh_gaussian(
    mu: torch.Tensor,
    sigma: torch.Tensor,
    deterministic: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reparameterised sample from the squashed Gaussian.

    Returns:
        - action: ``tanh(u)`` in ``(-1, 1)``, shape ``(..., D)``.
        - pre_tanh: ``u = mu + sigma * eps`` (``mu`` when deterministic), shape ``(..., D)``.
        - log_prob_per_dim: ``tanh_gaussian_log_prob(mu, sigma, u, reduce=False)``, shape ``(..., D)``.
    """
    if deterministic:
        pre_tanh = mu
    else:
        noise = torch.randn(mu.shape, dtype=mu.dtype, device=mu.device, generator=generator)
        pre_tanh = mu + sigma * noise
    return torch.tanh(pre_tanh), pre_tanh, tanh_gaussian_log_prob(mu, sigma, pre_tanh, reduce=False)


def multi_categorical_logits(logits: torch.Tensor, nvec: Sequence[int]) -> torch.Tensor:
    """Split the flat logits of K independent categoricals into a padded ``(..., K, max(nvec))`` tensor.

    Overview:
        A MultiDiscrete action with ``nvec = (n_1, ..., n_K)`` (MultiBinary(K) is ``(2,) * K``) has one categorical
        per component; a network gives their logits side by side, ``sum(nvec)`` values. Component ``k`` takes the
        next ``n_k`` of them; the positions beyond ``n_k`` are ``-inf`` (probability 0), so that the usual
        categorical helpers (``categorical_log_prob``, ``entropy``) work on every component at once.
    Arguments:
        - logits: ``(..., sum(nvec))``.
        - nvec: the number of choices of each component, each >= 1.
    Returns:
        - ``(..., K, max(nvec))``, a view when every ``n_k`` is equal.
    Examples:
        >>> multi_categorical_logits(torch.arange(5.0), (3, 2))
        tensor([[0., 1., 2.],
                [3., 4., -inf]])
    """
    sizes = [int(n) for n in nvec]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"nvec must hold at least one size, each >= 1, got {list(nvec)}")
    if logits.shape[-1] != sum(sizes):
        raise ValueError(
            f"logits have {logits.shape[-1]} values in the last dimension, expected sum(nvec) = {sum(sizes)}"
        )
    widest = max(sizes)
    if min(sizes) == widest:
        return logits.unflatten(-1, (len(sizes), widest))
    padded = torch.cat([logits, logits.new_full((*logits.shape[:-1], 1), float("-inf"))], -1)
    index, start = [], 0
    for n in sizes:  # component k's logits, then the -inf column (last) for the missing choices
        index += list(range(start, start + n)) + [sum(sizes)] * (widest - n)
        start += n
    gather = torch.tensor(index, device=logits.device)
    return padded.index_select(-1, gather).unflatten(-1, (len(sizes), widest))


def multi_categorical_log_prob(logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Joint log-probability of independent categorical components: ``sum_k log pi_k(action_k)``.

    Shapes: logits ``(..., K, N)`` (see ``multi_categorical_logits``), action ``(..., K)`` -> ``(...)``.
    """
    return categorical_log_prob(logits, action).sum(-1)


def multi_categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of independent categorical components: the sum of their entropies.

    Shapes: logits ``(..., K, N)`` (``-inf`` padding allowed) -> ``(...)``.
    """
    return entropy(logits).sum(-1)
