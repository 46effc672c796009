"""Proximal Policy Optimization losses: clipped surrogate, value clipping and dual clip.

Overview:
    The DI-engine 0.5.3 ``ding.rl_utils.ppo`` API (names, field order, defaults, return arity), for discrete
    (categorical) and continuous (diagonal Gaussian) policies. Inputs are per-sample tensors of shape ``(B, ...)``;
    a multi-agent batch adds an agent dimension, ``(B, A, ...)``, to every field, and as in DI-engine any further
    leading dimensions (``(T, B, A, ...)``) are accepted too. Losses are 0-dim tensors and the ``ppo_info`` fields
    are Python floats. Also as in DI-engine: ``weight=None`` means uniform; actions may be any integer dtype (or
    floats holding integers) for categorical policies; a Gaussian ``sigma`` may broadcast to ``mu`` (a ``(D,)``
    state-independent standard deviation); an old ``mu``/``sigma`` of shape ``(B,)`` is read as ``(B, 1)``; mixed
    float dtypes follow torch's type promotion.

    Where zoo differs from DI-engine 0.5.3, zoo is right and says so:

    - The continuous dual clip is applied only where ``adv < 0``, as in the discrete case. DI-engine applies it to
      every sample, which for ``adv > 0`` and a small ratio raises the objective to ``dual_clip * adv``.
    - ``adv``, ``return_``, ``weight``, the old log-probability and ``value_old`` are constants of the loss (detached);
      DI-engine lets gradient flow into them if the caller forgot to detach.
    - Multi-agent ``adv`` must have the shape ``(B, A)`` of ``action``; DI-engine silently averages the ratio over
      agents when ``adv`` is ``(B,)``, which zoo rejects with a ValueError. Likewise every per-sample field
      (``adv``, ``weight``, values, returns) must have exactly the leading shape of the logits: DI-engine broadcasts
      a mismatched one (e.g. ``(B, 1)`` against ``(B,)`` gives a ``(B, B)`` loss) without a word.
    - The optional 9th field ``logit_pretrained`` (a KL-to-pretrained term in DI-engine releases after 0.5.3) exists
      so that such code constructs, but only ``None`` is accepted: anything else raises NotImplementedError.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Mapping

import torch

from ._checks import check_broadcasts_to, check_gaussian_action, check_same_shape
from .distributions import (
    categorical_log_prob,
    entropy,
    gaussian_entropy,
    gaussian_log_prob,
    multi_categorical_entropy,
    multi_categorical_log_prob,
)

ppo_data = namedtuple(
    "ppo_data",
    ["logit_new", "logit_old", "action", "value_new", "value_old", "adv", "return_", "weight", "logit_pretrained"],
    defaults=(None,),
)
"""Input of ``ppo_error`` and ``ppo_error_multi_discrete``: new and old logits, ``action``, new and old
values, ``adv``, ``return_``, ``weight`` (None: uniform) and ``logit_pretrained`` (only None is accepted)."""
ppo_data_continuous = namedtuple(
    "ppo_data_continuous",
    [
        "mu_sigma_new", "mu_sigma_old", "action", "value_new", "value_old", "adv", "return_", "weight",
        "logit_pretrained",
    ],
    defaults=(None,),
)
"""Input of ``ppo_error_continuous``: as ``ppo_data`` with ``mu_sigma_new`` and ``mu_sigma_old``
(mappings ``{'mu': ..., 'sigma': ...}``) in place of the logits."""
ppo_policy_data = namedtuple(
    "ppo_policy_data", ["logit_new", "logit_old", "action", "adv", "weight", "logit_pretrained"], defaults=(None,)
)
"""Input of ``ppo_policy_error``: new and old logits, ``action``, ``adv``, ``weight`` and
``logit_pretrained`` (only None is accepted)."""
ppo_policy_data_continuous = namedtuple(
    "ppo_policy_data_continuous",
    ["mu_sigma_new", "mu_sigma_old", "action", "adv", "weight", "logit_pretrained"],
    defaults=(None,),
)
"""Input of ``ppo_policy_error_continuous``: as ``ppo_policy_data`` with ``mu_sigma_new`` and
``mu_sigma_old`` in place of the logits."""
ppo_value_data = namedtuple("ppo_value_data", ["value_new", "value_old", "return_", "weight"])
"""Input of ``ppo_value_error``: ``value_new``, ``value_old``, ``return_`` and ``weight``."""
ppo_loss = namedtuple("ppo_loss", ["policy_loss", "value_loss", "entropy_loss"])
"""Output of the PPO losses: ``policy_loss``, ``value_loss`` and ``entropy_loss``, 0-dim tensors (the
entropy is positive: the caller subtracts it)."""
ppo_policy_loss = namedtuple("ppo_policy_loss", ["policy_loss", "entropy_loss"])
"""Output of the policy-only PPO losses: ``policy_loss`` and ``entropy_loss``, 0-dim tensors."""
ppo_info = namedtuple("ppo_info", ["approx_kl", "clipfrac"])
"""Diagnostics of the PPO losses, Python floats: ``approx_kl`` (the mean of ``old_logp - new_logp``) and
``clipfrac`` (the share of samples whose ratio was clipped)."""


def _check_clip(clip_ratio: float | torch.Tensor, dual_clip: float | None) -> None:
    # A tensor clip (a schedule inside a compiled learning step) is its caller's to check: reading it here would be
    # a host sync.
    if not isinstance(clip_ratio, torch.Tensor) and clip_ratio < 0:
        raise ValueError(f"clip_ratio must be >= 0, got {clip_ratio}")
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be None or greater than 1.0 (arXiv:1912.09729), got {dual_clip}")


def _fields(data: tuple, count: int) -> tuple:
    # Positional access so that both the discrete and the continuous namedtuples (and plain tuples) are accepted,
    # as DI-engine's own policies pass ``ppo_data`` holding mu/sigma dicts to the continuous functions.
    values = tuple(data)
    if len(values) < count:
        raise ValueError(f"data has {len(values)} fields, expected at least {count}")
    if len(values) > count and values[count] is not None:
        raise NotImplementedError(
            "logit_pretrained (a KL term towards a pretrained policy) is not part of the DI-engine 0.5.3 PPO loss "
            "that zoo implements; pass None"
        )
    return values[:count]


def _weight_or_ones(weight: torch.Tensor | None, like_field: str, like: torch.Tensor) -> torch.Tensor:
    if weight is None:
        return torch.ones_like(like)
    check_same_shape("weight", weight, like_field, like)
    return weight.detach()


def _check_leading(field: str, tensor: torch.Tensor, leading: torch.Size) -> None:
    if tensor.shape != leading:
        raise ValueError(f"{field} has shape {tuple(tensor.shape)}, expected {tuple(leading)}")


def _check_logits(field: str, logits: torch.Tensor, action: torch.Tensor) -> None:
    # Logits without their own sample dimensions would broadcast one distribution over the batch (DI-engine takes
    # them silently); the field to blame is the logits when they have the wrong number of dimensions.
    if logits.ndim != action.ndim + 1:
        raise ValueError(
            f"{field} has shape {tuple(logits.shape)}, expected the shape of action {tuple(action.shape)} followed "
            "by N: (B, N), (B, A, N), ..."
        )


def _mu_sigma(
    field: str, mu_sigma: Mapping, like_mu: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mu, sigma)`` of a Gaussian policy output, checked; ``sigma`` may broadcast to ``mu`` (e.g. a ``(D,)``
    state-independent standard deviation). ``like_mu``: the new policy's mean, which an old one must match; a 1-D
    old ``mu``/``sigma`` pair is read as ``(B, 1)`` (DI-engine 0.5.3's rule for one action dimension)."""
    if not isinstance(mu_sigma, Mapping) or "mu" not in mu_sigma or "sigma" not in mu_sigma:
        raise ValueError(f"{field} must be a dict with keys 'mu' and 'sigma', got {type(mu_sigma).__name__}")
    mu, sigma = mu_sigma["mu"], mu_sigma["sigma"]
    if like_mu is None:
        if mu.ndim < 2:
            raise ValueError(f"{field}['mu'] has shape {tuple(mu.shape)}, expected (B, D), (B, A, D), ...")
    else:
        if mu.ndim == 1:
            mu, sigma = mu.unsqueeze(-1), sigma.unsqueeze(-1)
        check_same_shape(f"{field}['mu']", mu, "mu_sigma_new['mu']", like_mu)
    check_broadcasts_to(f"{field}['sigma']", sigma, f"{field}['mu']", mu)
    return mu, sigma


def _clipped_surrogate(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    adv: torch.Tensor,
    weight: torch.Tensor,
    clip_ratio: float | torch.Tensor,
    dual_clip: float | None,
) -> tuple[torch.Tensor, ppo_info]:
    """The policy loss and ``ppo_info`` as detached 0-dim tensors (no host sync: what a compiled step can trace)."""
    logp_old, adv = logp_old.detach(), adv.detach()
    ratio = torch.exp(logp_new - logp_old)
    surrogate = torch.min(ratio * adv, ratio.clamp(1 - clip_ratio, 1 + clip_ratio) * adv)
    if dual_clip is not None:
        # The lower bound c * adv only limits how far a bad action's probability may be pushed up (adv < 0);
        # for adv >= 0 it would replace a small clipped objective by c * adv, which no longer depends on the policy.
        surrogate = torch.where(adv < 0, torch.max(surrogate, dual_clip * adv), surrogate)
    policy_loss = -(surrogate * weight).mean()
    with torch.no_grad():
        approx_kl = (logp_old - logp_new).mean()
        clipfrac = ((ratio > 1 + clip_ratio) | (ratio < 1 - clip_ratio)).float().mean()
    return policy_loss, ppo_info(approx_kl, clipfrac)


def _host_info(info: ppo_info) -> ppo_info:
    """``ppo_info`` of tensors -> of Python floats (the public functions' return, as DI-engine's)."""
    return ppo_info(info.approx_kl.item(), info.clipfrac.item())


def ppo_policy_error(
    data: tuple, clip_ratio: float = 0.2, dual_clip: float | None = None
) -> tuple[ppo_policy_loss, ppo_info]:
    """PPO clipped-surrogate policy loss and entropy for a categorical policy.

    Overview:
        ``ratio = exp(log pi_new(a) - log pi_old(a))``; per sample the objective is
        ``min(ratio * adv, clip(ratio, 1 - eps, 1 + eps) * adv)``, and with ``dual_clip = c`` it is further bounded
        below by ``c * adv`` where ``adv < 0`` (arXiv:1912.09729). ``policy_loss = -mean(objective * weight)``,
        ``entropy_loss = mean(entropy(pi_new) * weight)`` (positive; the caller subtracts it).
    Arguments:
        - data: ``ppo_policy_data(logit_new, logit_old, action, adv, weight, logit_pretrained=None)``; ``weight=None``
          means uniform. ``logit_old`` and ``adv`` are constants (no gradient flows into them).
        - clip_ratio: the ratio clip ``eps``.
        - dual_clip: ``None`` or a bound ``c > 1.0``.
    Returns:
        - ppo_policy_loss(policy_loss, entropy_loss): 0-dim tensors.
        - ppo_info(approx_kl, clipfrac): Python floats, ``mean(logp_old - logp_new)`` and the unweighted fraction of
          samples whose ratio lies outside ``[1 - eps, 1 + eps]``.
    Shapes:
        - logit_new, logit_old: ``(B, N)``, ``(B, A, N)`` for ``A`` agents, or any ``(..., N)``.
        - action (integer, or float holding integers), adv, weight: the leading shape ``(...)`` of the logits,
          e.g. ``(B,)`` or ``(B, A)``.
    Examples:
        >>> data = ppo_policy_data(torch.randn(4, 3, requires_grad=True), torch.randn(4, 3),
        ...                        torch.randint(0, 3, (4,)), torch.randn(4), None)
        >>> loss, info = ppo_policy_error(data, clip_ratio=0.2, dual_clip=3.0)
        >>> loss.policy_loss.backward()
    """
    _check_clip(clip_ratio, dual_clip)
    policy_loss, entropy_loss, info = _categorical_policy_terms(*_fields(data, 5), clip_ratio, dual_clip, joint=False)
    return ppo_policy_loss(policy_loss, entropy_loss), _host_info(info)


def _categorical_policy_terms(
    logit_new: torch.Tensor,
    logit_old: torch.Tensor,
    action: torch.Tensor,
    adv: torch.Tensor,
    weight: torch.Tensor | None,
    clip_ratio: float | torch.Tensor,
    dual_clip: float | None,
    joint: bool,
) -> tuple[torch.Tensor, torch.Tensor, ppo_info]:
    """Policy loss, entropy and info (tensors) of a categorical policy (``joint=False``: logits ``(..., N)``, one
    sample per leading index) or of K independent categoricals (``joint=True``: padded logits ``(..., K, N)``, one
    joint probability per sample), after checking the shapes."""
    _check_logits("logit_new", logit_new, action)
    check_same_shape("logit_old", logit_old, "logit_new", logit_new)
    _check_leading("action", action, logit_new.shape[:-1])
    _check_leading("adv", adv, logit_new.shape[:-2] if joint else logit_new.shape[:-1])
    weight = _weight_or_ones(weight, "adv", adv)
    log_prob, entropy_of = (multi_categorical_log_prob, multi_categorical_entropy) if joint else (
        categorical_log_prob, entropy)
    entropy_loss = (entropy_of(logit_new) * weight).mean()
    policy_loss, info = _clipped_surrogate(log_prob(logit_new, action), log_prob(logit_old, action), adv, weight,
                                           clip_ratio, dual_clip)
    return policy_loss, entropy_loss, info


def ppo_value_error(data: tuple, clip_ratio: float = 0.2, use_value_clip: bool = True) -> torch.Tensor:
    """PPO value loss, optionally with the value clipping of the PPO2 baselines.

    Overview:
        Without clipping: ``0.5 * mean((return_ - value_new)^2 * weight)``. With clipping,
        ``value_clip = value_old + clip(value_new - value_old, -eps, eps)`` and the loss is
        ``0.5 * mean(max((return_ - value_new)^2, (return_ - value_clip)^2) * weight)`` (the pessimistic of the two).
    Arguments:
        - data: ``ppo_value_data(value_new, value_old, return_, weight)``; ``weight=None`` means uniform.
          ``value_old`` and ``return_`` are constants.
        - clip_ratio: the value clip ``eps`` (the same number as the policy ratio clip, as in DI-engine).
        - use_value_clip: whether to clip.
    Returns:
        - value_loss: 0-dim tensor.
    Shapes:
        - value_new, value_old, return_, weight: one shape, any: ``(B,)``, ``(B, A)``, ``(T, B, A)``, ...
    Examples:
        >>> ppo_value_error(ppo_value_data(torch.zeros(2), torch.zeros(2), torch.ones(2), None), 0.2, False)
        tensor(0.5000)
    """
    _check_clip(clip_ratio, None)
    return _value_loss(*_fields(data, 4), clip_ratio, use_value_clip)


def _value_loss(value_new: torch.Tensor, value_old: torch.Tensor, return_: torch.Tensor, weight: torch.Tensor | None,
                clip_ratio: float | torch.Tensor, use_value_clip: bool) -> torch.Tensor:
    """``ppo_value_error`` after its clip check (a tensor ``clip_ratio`` is not read on the host)."""
    check_same_shape("value_old", value_old, "value_new", value_new)
    check_same_shape("return_", return_, "value_new", value_new)
    weight = _weight_or_ones(weight, "value_new", value_new)
    value_old, return_ = value_old.detach(), return_.detach()
    squared_error = (return_ - value_new).pow(2)
    if use_value_clip:
        value_clip = value_old + (value_new - value_old).clamp(-clip_ratio, clip_ratio)
        squared_error = torch.max(squared_error, (return_ - value_clip).pow(2))
    return 0.5 * (squared_error * weight).mean()


def ppo_error(
    data: tuple, clip_ratio: float = 0.2, use_value_clip: bool = True, dual_clip: float | None = None
) -> tuple[ppo_loss, ppo_info]:
    """PPO loss for a categorical policy with a value head (arXiv:1707.06347), with value clip and dual clip.

    Overview:
        ``ppo_policy_error`` on the policy fields plus ``ppo_value_error`` on the value fields; see those for the
        formulas. ``adv`` is used as given: normalise it beforehand if wanted.
    Arguments:
        - data: ``ppo_data(logit_new, logit_old, action, value_new, value_old, adv, return_, weight,
          logit_pretrained=None)``; ``weight=None`` means uniform.
        - clip_ratio: ratio clip ``eps``, also the value clip.
        - use_value_clip: whether to clip the value update.
        - dual_clip: ``None`` or a bound ``c > 1.0``, applied where ``adv < 0``.
    Returns:
        - ppo_loss(policy_loss, value_loss, entropy_loss): 0-dim tensors; a typical total is
          ``policy_loss + value_weight * value_loss - entropy_weight * entropy_loss``.
        - ppo_info(approx_kl, clipfrac): Python floats.
    Shapes:
        - logit_new, logit_old: ``(B, N)``, ``(B, A, N)`` or any ``(..., N)``.
        - action, value_new, value_old, adv, return_, weight: the leading shape ``(...)`` of the logits.
    Examples:
        >>> B, N = 4, 3
        >>> data = ppo_data(torch.randn(B, N, requires_grad=True), torch.randn(B, N), torch.randint(0, N, (B,)),
        ...                 torch.randn(B, requires_grad=True), torch.randn(B), torch.randn(B), torch.randn(B), None)
        >>> loss, info = ppo_error(data)
        >>> (loss.policy_loss + 0.5 * loss.value_loss - 0.01 * loss.entropy_loss).backward()
    """
    loss, info = _ppo_terms(data, clip_ratio, use_value_clip, dual_clip, "discrete")
    return loss, _host_info(info)


def _ppo_terms(
    data: tuple, clip_ratio: float | torch.Tensor, use_value_clip: bool, dual_clip: float | None, kind: str
) -> tuple[ppo_loss, ppo_info]:
    """The body of ``ppo_error`` (``kind`` "discrete"), ``ppo_error_continuous`` ("continuous") and
    ``ppo_error_multi_discrete`` ("multi_discrete"), with ``ppo_info``'s fields as detached 0-dim tensors: no host
    sync, so that a compiled learning step can trace it (``zoo.policies.ppo``); ``clip_ratio`` may be a 0-dim tensor
    (an annealed clip, not read on the host)."""
    _check_clip(clip_ratio, dual_clip)
    new, old, action, value_new, value_old, adv, return_, weight = _fields(data, 8)
    if kind == "continuous":
        policy_loss, entropy_loss, info = _gaussian_policy_terms(new, old, action, adv, weight, clip_ratio, dual_clip)
    else:
        policy_loss, entropy_loss, info = _categorical_policy_terms(new, old, action, adv, weight, clip_ratio,
                                                                    dual_clip, joint=kind == "multi_discrete")
    check_same_shape("value_new", value_new, "adv", adv)
    value_loss = _value_loss(value_new, value_old, return_, weight, clip_ratio, use_value_clip)
    return ppo_loss(policy_loss, value_loss, entropy_loss), info


def ppo_policy_error_continuous(
    data: tuple, clip_ratio: float = 0.2, dual_clip: float | None = None
) -> tuple[ppo_policy_loss, ppo_info]:
    """PPO clipped-surrogate policy loss and entropy for a diagonal Gaussian policy.

    Overview:
        As ``ppo_policy_error``, with ``log pi(a) = sum_d log N(a_d; mu_d, sigma_d)`` and the entropy summed over
        the action dimensions (DI-engine's ``Independent(Normal(mu, sigma), 1)``). The dual clip bounds the objective
        below by ``c * adv`` only where ``adv < 0``; DI-engine 0.5.3 applies it to every sample in the continuous
        case, which is wrong for ``adv > 0`` (it would turn ``min(ratio, 1 + eps) * adv`` into ``c * adv``).
    Arguments:
        - data: ``ppo_policy_data_continuous(mu_sigma_new, mu_sigma_old, action, adv, weight, logit_pretrained=None)``
          where ``mu_sigma_*`` are dicts with ``'mu'`` and ``'sigma'`` (standard deviation, positive).
          ``mu_sigma_old`` and ``adv`` are constants.
        - clip_ratio: the ratio clip ``eps``.
        - dual_clip: ``None`` or a bound ``c > 1.0``.
    Returns:
        - ppo_policy_loss(policy_loss, entropy_loss): 0-dim tensors.
        - ppo_info(approx_kl, clipfrac): Python floats.
    Shapes:
        - mu (new and old), action: ``(B, D)``, ``(B, A, D)`` or any ``(..., D)`` with at least one leading
          dimension; an old ``mu`` and ``sigma`` of shape ``(B,)`` stand for ``(B, 1)`` (DI-engine's rule).
        - sigma: the shape of its ``mu`` or one that broadcasts to it, e.g. ``(D,)``; action may broadcast to
          ``mu`` too, keeping its last dimension ``D``.
        - adv, weight: the leading shape ``(...)`` of ``mu``, e.g. ``(B,)`` or ``(B, A)``.
    Examples:
        >>> mu = torch.zeros(4, 2, requires_grad=True)
        >>> data = ppo_policy_data_continuous({"mu": mu, "sigma": torch.ones(4, 2)},
        ...                                   {"mu": torch.zeros(4, 2), "sigma": torch.ones(4, 2)},
        ...                                   torch.randn(4, 2), torch.randn(4), None)
        >>> loss, info = ppo_policy_error_continuous(data, dual_clip=3.0)
    """
    _check_clip(clip_ratio, dual_clip)
    policy_loss, entropy_loss, info = _gaussian_policy_terms(*_fields(data, 5), clip_ratio, dual_clip)
    return ppo_policy_loss(policy_loss, entropy_loss), _host_info(info)


def _gaussian_policy_terms(
    mu_sigma_new: Mapping,
    mu_sigma_old: Mapping,
    action: torch.Tensor,
    adv: torch.Tensor,
    weight: torch.Tensor | None,
    clip_ratio: float | torch.Tensor,
    dual_clip: float | None,
) -> tuple[torch.Tensor, torch.Tensor, ppo_info]:
    """Policy loss, entropy and info (tensors) of a diagonal Gaussian policy, after checking the shapes."""
    mu_new, sigma_new = _mu_sigma("mu_sigma_new", mu_sigma_new)
    mu_old, sigma_old = _mu_sigma("mu_sigma_old", mu_sigma_old, like_mu=mu_new)
    check_gaussian_action(action, mu_new, "mu_sigma_new['mu']")
    _check_leading("adv", adv, mu_new.shape[:-1])
    weight = _weight_or_ones(weight, "adv", adv)
    logp_new = gaussian_log_prob(mu_new, sigma_new, action)
    logp_old = gaussian_log_prob(mu_old, sigma_old, action)
    entropy_loss = (gaussian_entropy(sigma_new.expand_as(mu_new)) * weight).mean()
    policy_loss, info = _clipped_surrogate(logp_new, logp_old, adv, weight, clip_ratio, dual_clip)
    return policy_loss, entropy_loss, info


def ppo_error_continuous(
    data: tuple, clip_ratio: float = 0.2, use_value_clip: bool = True, dual_clip: float | None = None
) -> tuple[ppo_loss, ppo_info]:
    """PPO loss for a diagonal Gaussian policy with a value head, with value clip and dual clip.

    Overview:
        ``ppo_policy_error_continuous`` plus ``ppo_value_error``. The dual clip applies only where ``adv < 0``
        (DI-engine 0.5.3 applies it everywhere in the continuous case; zoo is right and says so).
    Arguments:
        - data: ``ppo_data_continuous(mu_sigma_new, mu_sigma_old, action, value_new, value_old, adv, return_, weight,
          logit_pretrained=None)``; a ``ppo_data`` whose logits are mu/sigma dicts is accepted too.
        - clip_ratio: ratio clip ``eps``, also the value clip.
        - use_value_clip: whether to clip the value update.
        - dual_clip: ``None`` or a bound ``c > 1.0``.
    Returns:
        - ppo_loss(policy_loss, value_loss, entropy_loss): 0-dim tensors.
        - ppo_info(approx_kl, clipfrac): Python floats.
    Shapes:
        - mu, sigma (new and old), action: as in ``ppo_policy_error_continuous``: ``(B, D)``, ``(B, A, D)``, ...
        - value_new, value_old, adv, return_, weight: the leading shape ``(...)`` of ``mu``.
    Examples:
        >>> B, D = 4, 2
        >>> new = {"mu": torch.zeros(B, D, requires_grad=True), "sigma": torch.ones(B, D)}
        >>> old = {"mu": torch.zeros(B, D), "sigma": torch.ones(B, D)}
        >>> data = ppo_data_continuous(new, old, torch.randn(B, D), torch.randn(B, requires_grad=True),
        ...                            torch.randn(B), torch.randn(B), torch.randn(B), None)
        >>> loss, info = ppo_error_continuous(data)
    """
    loss, info = _ppo_terms(data, clip_ratio, use_value_clip, dual_clip, "continuous")
    return loss, _host_info(info)


def ppo_error_multi_discrete(
    data: tuple, clip_ratio: float = 0.2, use_value_clip: bool = True, dual_clip: float | None = None
) -> tuple[ppo_loss, ppo_info]:
    """PPO loss for a policy of K independent categoricals (MultiDiscrete and MultiBinary actions). zoo's own.

    Overview:
        As ``ppo_error`` with the joint probability of the K components: ``log pi(a) = sum_k log pi_k(a_k)``, one
        ratio per sample (clipped once), and the entropy summed over the components. DI-engine 0.5.3 has no such
        function (its multi-discrete PPO averages K separate losses, one ratio per component).
    Arguments:
        - data: ``ppo_data(logit_new, logit_old, action, value_new, value_old, adv, return_, weight)`` with padded
          logits from ``multi_categorical_logits``; ``weight=None`` means uniform.
        - clip_ratio, use_value_clip, dual_clip: as in ``ppo_error``.
    Returns:
        - ppo_loss(policy_loss, value_loss, entropy_loss): 0-dim tensors.
        - ppo_info(approx_kl, clipfrac): Python floats.
    Shapes:
        - logit_new, logit_old: ``(B, K, N)`` or any ``(..., K, N)``; action: ``(..., K)`` integers.
        - value_new, value_old, adv, return_, weight: ``(...)``, e.g. ``(B,)``.
    Examples:
        >>> logit = multi_categorical_logits(torch.randn(4, 5, requires_grad=True), (3, 2))
        >>> data = ppo_data(logit, logit.detach(), torch.tensor([[0, 1]] * 4), torch.randn(4, requires_grad=True),
        ...                 torch.randn(4), torch.randn(4), torch.randn(4), None)
        >>> loss, info = ppo_error_multi_discrete(data)
    """
    loss, info = _ppo_terms(data, clip_ratio, use_value_clip, dual_clip, "multi_discrete")
    return loss, _host_info(info)
