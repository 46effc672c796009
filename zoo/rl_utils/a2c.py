"""Advantage Actor-Critic losses (arXiv:1602.01783) for categorical and diagonal Gaussian policies.

Overview:
    The DI-engine 0.5.3 ``ding.rl_utils.a2c`` API: ``a2c_data(logit, action, value, adv, return_, weight)`` in,
    ``a2c_loss(policy_loss, value_loss, entropy_loss)`` out, all three 0-dim tensors. Per-sample shapes ``(B, ...)``;
    a multi-agent batch adds an agent dimension ``(B, A, ...)`` to every field. As in DI-engine the value loss is the
    plain weighted mean squared error (no 0.5 factor, unlike ``ppo_value_error``). Unlike DI-engine, ``adv``,
    ``return_`` and ``weight`` are treated as constants (detached), so a caller who forgot to detach them cannot
    push gradient into the advantage estimator.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Mapping

import torch

from ._checks import check_ndim, check_same_shape, check_shape
from .distributions import _categorical_log_prob_and_entropy, gaussian_entropy, gaussian_log_prob

a2c_data = namedtuple("a2c_data", ["logit", "action", "value", "adv", "return_", "weight"])
a2c_loss = namedtuple("a2c_loss", ["policy_loss", "value_loss", "entropy_loss"])


def _check_targets(value: torch.Tensor, adv: torch.Tensor, return_: torch.Tensor, leading: torch.Size) -> None:
    check_shape("value", value, tuple(leading), "(B,)" if len(leading) == 1 else "(B, A)")
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
        - logit: ``(B, N)`` or ``(B, A, N)``.
        - action (integer), value, adv, return_, weight: ``(B,)`` or ``(B, A)``.
    Examples:
        >>> data = a2c_data(torch.randn(4, 3, requires_grad=True), torch.randint(0, 3, (4,)),
        ...                 torch.randn(4, requires_grad=True), torch.randn(4), torch.randn(4), None)
        >>> loss = a2c_error(data)
        >>> (loss.policy_loss + 0.5 * loss.value_loss - 0.01 * loss.entropy_loss).backward()
    """
    logit, action, value, adv, return_, weight = data
    check_ndim("logit", logit, (2, 3), "(B, N) or (B, A, N)")
    leading = logit.shape[:-1]
    check_shape("action", action, tuple(leading), "(B,)" if len(leading) == 1 else "(B, A)")
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
        - logit['mu'], logit['sigma'], action: ``(B, D)`` or ``(B, A, D)``.
        - value, adv, return_, weight: ``(B,)`` or ``(B, A)``.
    Examples:
        >>> logit = {"mu": torch.zeros(4, 2, requires_grad=True), "sigma": torch.ones(4, 2)}
        >>> loss = a2c_error_continuous(a2c_data(logit, torch.randn(4, 2), torch.randn(4, requires_grad=True),
        ...                                      torch.randn(4), torch.randn(4), None))
    """
    logit, action, value, adv, return_, weight = data
    if not isinstance(logit, Mapping) or "mu" not in logit or "sigma" not in logit:
        raise ValueError(f"logit must be a dict with keys 'mu' and 'sigma', got {type(logit).__name__}")
    mu, sigma = logit["mu"], logit["sigma"]
    check_ndim("logit['mu']", mu, (2, 3), "(B, D) or (B, A, D)")
    check_same_shape("logit['sigma']", sigma, "logit['mu']", mu)
    check_same_shape("action", action, "logit['mu']", mu)
    _check_targets(value, adv, return_, mu.shape[:-1])
    return _losses(gaussian_log_prob(mu, sigma, action), gaussian_entropy(sigma), value, adv, return_, weight)
