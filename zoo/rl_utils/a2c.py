"""Advantage Actor-Critic losses (arXiv:1602.01783) for categorical and diagonal Gaussian policies.

Overview:
    The DI-engine 0.5.3 ``ding.rl_utils.a2c`` API: ``a2c_data(logit, action, value, adv, return_, weight)`` in,
    ``a2c_loss(policy_loss, value_loss, entropy_loss)`` out, all three 0-dim tensors. Per-sample shapes ``(B, ...)``;
    a multi-agent batch adds an agent dimension ``(B, A, ...)`` to every field, and as in DI-engine any further
    leading dimensions (``(T, B, A, ...)``) are accepted too. As in DI-engine the value loss is the plain weighted
    mean squared error (no 0.5 factor, unlike ``ppo_value_error``), ``weight=None`` means uniform, categorical
    actions may be of any integer dtype (or floats holding integers), a Gaussian ``sigma`` may broadcast to ``mu``
    (e.g. a ``(D,)`` state-independent standard deviation) and mixed float dtypes follow torch's type promotion.

    Where zoo differs from DI-engine 0.5.3, zoo is right and says so:

    - ``adv``, ``return_`` and ``weight`` are treated as constants (detached), so a caller who forgot to detach them
      cannot push gradient into the advantage estimator.
    - ``value``, ``adv``, ``return_`` and ``weight`` must have exactly the leading shape of the logits; DI-engine
      broadcasts a mismatched one (``(B, 1)`` against ``(B,)`` gives a ``(B, B)`` loss) with at most a warning.
    - A continuous ``mu`` must have an action dimension, ``(B, D)``: DI-engine takes a 1-D ``(B,)`` mean as a single
      sample with B action dimensions and returns a loss that sums log-probabilities over the batch.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Mapping

import torch

from ._checks import check_broadcasts_to, check_gaussian_action, check_same_shape
from .distributions import _categorical_log_prob_and_entropy, gaussian_entropy, gaussian_log_prob

a2c_data = namedtuple("a2c_data", ["logit", "action", "value", "adv", "return_", "weight"])
"""Input of the A2C losses: ``logit`` (logits, or ``{'mu', 'sigma'}`` for Gaussian actions), ``action``,
``value``, ``adv``, ``return_`` and ``weight`` (None: uniform)."""
a2c_loss = namedtuple("a2c_loss", ["policy_loss", "value_loss", "entropy_loss"])
"""Output of the A2C losses: ``policy_loss``, ``value_loss`` and ``entropy_loss``, 0-dim tensors."""


def _check_targets(value: torch.Tensor, adv: torch.Tensor, return_: torch.Tensor, leading: torch.Size) -> None:
    if value.shape != leading:
        raise ValueError(f"value has shape {tuple(value.shape)}, expected {tuple(leading)}")
    check_same_shape("adv", adv, "value", value)
    check_same_shape("return_", return_, "value", value)


def _losses(
    log_prob: torch.Tensor,
    entropy_per_sample: torch.Tensor,
    value: torch.Tensor,
    adv: torch.Tensor,
    return_: torch.Tensor,
    weight: torch.Tensor | None,
) -> a2c_loss:
    adv, return_ = adv.detach(), return_.detach()
    if weight is None:  # uniform: skip the multiplications by one (same values, a shorter autograd graph)
        return a2c_loss(-(log_prob * adv).mean(), (return_ - value).pow(2).mean(), entropy_per_sample.mean())
    check_same_shape("weight", weight, "value", value)
    weight = weight.detach()
    policy_loss = -(log_prob * adv * weight).mean()
    value_loss = ((return_ - value).pow(2) * weight).mean()
    entropy_loss = (entropy_per_sample * weight).mean()
    return a2c_loss(policy_loss, value_loss, entropy_loss)


def a2c_error(data: tuple) -> a2c_loss:
    """A2C loss for a categorical policy.

    Overview:
        ``policy_loss = -mean(log pi(a) * adv * weight)``, ``value_loss = mean((return_ - value)^2 * weight)``,
        ``entropy_loss = mean(entropy(pi) * weight)`` (positive; the caller subtracts it).
    Arguments:
        - data: ``a2c_data(logit, action, value, adv, return_, weight)``; ``weight=None`` means uniform.
          ``adv`` and ``return_`` are constants (no gradient flows into them).
    Returns:
        - a2c_loss(policy_loss, value_loss, entropy_loss): 0-dim tensors.
    Shapes:
        - logit: ``(B, N)``, ``(B, A, N)`` or any ``(..., N)``.
        - action (integer, or float holding integers), value, adv, return_, weight: the leading shape ``(...)`` of
          ``logit``, e.g. ``(B,)`` or ``(B, A)``.
    Examples:
        >>> data = a2c_data(torch.randn(4, 3, requires_grad=True), torch.randint(0, 3, (4,)),
        ...                 torch.randn(4, requires_grad=True), torch.randn(4), torch.randn(4), None)
        >>> loss = a2c_error(data)
        >>> (loss.policy_loss + 0.5 * loss.value_loss - 0.01 * loss.entropy_loss).backward()
    """
    logit, action, value, adv, return_, weight = data
    if logit.ndim != action.ndim + 1:  # one distribution broadcast over the batch: DI-engine takes it silently
        raise ValueError(
            f"logit has shape {tuple(logit.shape)}, expected the shape of action {tuple(action.shape)} followed by "
            "N: (B, N), (B, A, N), ..."
        )
    leading = logit.shape[:-1]
    if action.shape != leading:
        raise ValueError(f"action has shape {tuple(action.shape)}, expected {tuple(leading)}")
    _check_targets(value, adv, return_, leading)
    return _losses(*_categorical_log_prob_and_entropy(logit, action), value, adv, return_, weight)


def a2c_error_continuous(data: tuple) -> a2c_loss:
    """A2C loss for a diagonal Gaussian policy.

    Overview:
        As ``a2c_error`` with ``log pi(a) = sum_d log N(a_d; mu_d, sigma_d)`` and the Gaussian entropy summed over
        the action dimensions (DI-engine's ``Independent(Normal(mu, sigma), 1)``).
    Arguments:
        - data: ``a2c_data(logit, action, value, adv, return_, weight)`` where ``logit`` is a dict with ``'mu'`` and
          ``'sigma'`` (standard deviation, positive); ``weight=None`` means uniform.
    Returns:
        - a2c_loss(policy_loss, value_loss, entropy_loss): 0-dim tensors.
    Shapes:
        - logit['mu'], action: ``(B, D)``, ``(B, A, D)`` or any ``(..., D)`` with at least one leading dimension;
          ``action`` may also broadcast to ``mu`` keeping its last dimension ``D``.
        - logit['sigma']: the shape of ``mu`` or one that broadcasts to it, e.g. ``(D,)``.
        - value, adv, return_, weight: the leading shape ``(...)`` of ``mu``, e.g. ``(B,)`` or ``(B, A)``.
    Examples:
        >>> logit = {"mu": torch.zeros(4, 2, requires_grad=True), "sigma": torch.ones(4, 2)}
        >>> loss = a2c_error_continuous(a2c_data(logit, torch.randn(4, 2), torch.randn(4, requires_grad=True),
        ...                                      torch.randn(4), torch.randn(4), None))
    """
    logit, action, value, adv, return_, weight = data
    if not isinstance(logit, Mapping) or "mu" not in logit or "sigma" not in logit:
        raise ValueError(f"logit must be a dict with keys 'mu' and 'sigma', got {type(logit).__name__}")
    mu, sigma = logit["mu"], logit["sigma"]
    if mu.ndim < 2:  # DI-engine would read a (B,) mean as one sample with B action dimensions
        raise ValueError(f"logit['mu'] has shape {tuple(mu.shape)}, expected (B, D), (B, A, D), ...")
    check_broadcasts_to("logit['sigma']", sigma, "logit['mu']", mu)
    check_gaussian_action(action, mu, "logit['mu']")
    _check_targets(value, adv, return_, mu.shape[:-1])
    entropy_per_sample = gaussian_entropy(sigma.expand_as(mu))
    return _losses(gaussian_log_prob(mu, sigma, action), entropy_per_sample, value, adv, return_, weight)


def a2c_error_multi_discrete(data: tuple) -> a2c_loss:
    """A2C loss for a policy of K independent categoricals (MultiDiscrete and MultiBinary actions). zoo's own.

    Overview:
        As ``a2c_error`` with ``log pi(a) = sum_k log pi_k(a_k)`` and the entropy summed over the components.
    Arguments:
        - data: ``a2c_data(logit, action, value, adv, return_, weight)`` with padded logits ``(..., K, N)`` from
          ``multi_categorical_logits``; ``weight=None`` means uniform.
    Returns:
        - a2c_loss(policy_loss, value_loss, entropy_loss): 0-dim tensors.
    Shapes:
        - logit: ``(B, K, N)`` or any ``(..., K, N)``; action: ``(..., K)`` integers.
        - value, adv, return_, weight: ``(...)``, e.g. ``(B,)``.
    """
    logit, action, value, adv, return_, weight = data
    if logit.ndim < 3 or logit.ndim != action.ndim + 1 or action.shape != logit.shape[:-1]:
        raise ValueError(
            f"logit has shape {tuple(logit.shape)} and action {tuple(action.shape)}: expected (..., K, N) logits "
            "and (..., K) actions"
        )
    _check_targets(value, adv, return_, logit.shape[:-2])
    log_prob, entropy_per_component = _categorical_log_prob_and_entropy(logit, action)
    return _losses(log_prob.sum(-1), entropy_per_component.sum(-1), value, adv, return_, weight)
