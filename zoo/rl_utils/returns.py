"""Discounted returns: discount_cumsum, returns with dones and a bootstrap, n-step and TD(lambda) returns.

Time-major ``(T, B)`` throughout, like the other sequence estimators; the DI-engine functions also take the
further dimensions DI-engine 0.5.3 accepts (``(T, B, A, ...)``) and a single trajectory ``(T,)``. Every recurrence
runs as a log-depth scan (see ``_scan.py``), never as a Python loop over T. Results are targets and carry no
gradient, except the losses of ``td_lambda_error``, which differentiate through ``value``.

Where zoo differs from DI-engine 0.5.3, zoo is right and says so:

- Integer rewards give float returns. DI-engine's ``multistep_forward_view`` (and so ``generalized_lambda_returns``
  and ``td_lambda_error``) writes the returns into a tensor of the rewards' dtype, truncating them to integers.
- ``nstep_return`` aligns a ``(B,)`` ``done``, ``value_gamma`` or list ``gamma`` with the *leading* dimension of a
  multi-agent ``next_value`` ``(B, A)``, as DI-engine does on its ``value_gamma`` path; on its other paths DI-engine
  broadcasts them against the last dimension, which fails, or when ``A == B`` silently mixes up the samples.
- ``discount_cumsum`` accepts any ``gamma`` (DI-engine asserts ``gamma == 1``) and returns a tensor for a tensor
  (DI-engine returns a numpy array).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import torch
import torch.nn.functional as F

from ._checks import check_ndim, check_same_shape
from ._scan import backward_linear_recurrence

nstep_return_data = namedtuple("nstep_return_data", ["reward", "next_value", "done"])
"""Input of ``nstep_return``: ``reward`` ``(nstep, B)``, ``next_value`` ``(B,)`` (the value after the n-th
step) and ``done`` ``(B,)`` (terminated within the window: no bootstrap)."""
td_lambda_data = namedtuple("td_lambda_data", ["value", "reward", "weight"])
"""Input of ``td_lambda_error``: ``value`` ``(T+1, B)``, ``reward`` ``(T, B)`` and ``weight`` (``(B,)``,
``(T, B)`` or None)."""


def discount_cumsum(x: np.ndarray | torch.Tensor, gamma: float = 1.0) -> np.ndarray | torch.Tensor:
    """Discounted cumulative sums along the first axis: ``y[t] = sum_k gamma**k * x[t + k]``.

    Overview:
        The rllab / Spinning Up helper, computed by ``scipy.signal.lfilter`` on the reversed sequence, for any
        length (including 0) and any trailing shape. No episode boundaries: see ``discount_with_dones``.
        ``gamma`` defaults to 1.0 as in DI-engine 0.5.3 (whose decision-transformer helper allows nothing else).
    Arguments:
        - x: numpy array or tensor ``(T, ...)``.
        - gamma: discount factor.
    Returns:
        - y: same kind and shape as ``x``, and its dtype if floating (integer input gives float64, where
          DI-engine keeps the integer dtype: the values are the same); a tensor comes back on its device, without
          gradient.
    Examples:
        >>> discount_cumsum(np.array([1.0, 1.0, 1.0]), 0.5)
        array([1.75, 1.5 , 1.  ])
        >>> discount_cumsum(np.array([1.0, 2.0, 3.0]))
        array([6., 5., 3.])
    """
    if isinstance(x, torch.Tensor):
        values = x.detach().cpu().numpy()
        return torch.from_numpy(np.ascontiguousarray(discount_cumsum(values, gamma))).to(x.device, x.dtype)
    x = np.asarray(x)
    if x.shape[0] == 0:
        return x.copy()
    out_dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64
    import scipy.signal  # here, not at import time: importing scipy.signal costs most of a second

    filtered = scipy.signal.lfilter([1.0], [1.0, -float(gamma)], x[::-1].astype(np.float64), axis=0)[::-1]
    # copy(): a reversed single-row view keeps its negative stride through ascontiguousarray.
    return filtered.astype(out_dtype, copy=True, order="C")


def discount_with_dones(
    reward: torch.Tensor,
    done: torch.Tensor | None,
    gamma: float,
    bootstrap_value: torch.Tensor | None = None,
) -> torch.Tensor:
    """Discounted returns that restart at episode ends, bootstrapped at the end of the rollout.

    Overview:
        ``ret[t] = reward[t] + gamma * (1 - done[t]) * ret[t + 1]`` with ``ret[T] = bootstrap_value`` (0 when
        None): OpenAI baselines' ``discount_with_dones`` over a ``(T, B)`` batch, i.e. A2C's n-step returns.
        ``done[t] = 1`` means the episode ended at t and nothing after t is added (terminated; for truncation,
        add ``gamma * V(final obs)`` to that step's reward yourself, or use ``gae`` with ``lambda_=1``).
    Shapes:
        - reward, done: ``(T, B)``; bootstrap_value: ``(B,)``. Returns ``(T, B)`` in reward's dtype.
    Examples:
        >>> discount_with_dones(torch.ones(3, 1), torch.tensor([[0.], [1.], [0.]]), 0.5)[:, 0]
        tensor([1.5000, 1.0000, 1.0000])
    """
    check_ndim("reward", reward, (2,), "(T, B)")
    dtype = reward.dtype if reward.dtype.is_floating_point else torch.float32
    reward = reward.to(dtype)
    not_done = torch.ones_like(reward)
    if done is not None:
        check_same_shape("done", done, "reward", reward)
        not_done = 1.0 - done.to(dtype)
    if bootstrap_value is not None:
        check_same_shape("bootstrap_value", bootstrap_value, "reward[0]", reward[0])
        bootstrap_value = bootstrap_value.to(dtype)
    return backward_linear_recurrence(gamma * not_done, reward, bootstrap_value)


def _leading_view(field: str, tensor: torch.Tensor, like_field: str, like: torch.Tensor) -> torch.Tensor:
    """``tensor`` of shape ``like.shape[:k]`` viewed as ``(*like.shape[:k], 1, ..., 1)``, so that it broadcasts
    along the leading dimensions of ``like`` (DI-engine's ``view_similar``): a ``(B,)`` flag for ``(B, A)`` values."""
    if tensor.shape != like.shape[: tensor.ndim]:
        raise ValueError(
            f"{field} has shape {tuple(tensor.shape)}, expected the shape of {like_field} {tuple(like.shape)} or a "
            "leading part of it"
        )
    return tensor.reshape(tuple(tensor.shape) + (1,) * (like.ndim - tensor.ndim))


def nstep_return(
    data: nstep_return_data,
    gamma: float | list[float] | list[torch.Tensor],
    nstep: int,
    value_gamma: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """DI-engine's per-sample n-step return: ``sum_k gamma**k reward[k] + gamma**nstep * (1 - done) * next_value``.

    Arguments:
        - data: ``nstep_return_data(reward, next_value, done)``.
        - gamma: discount, or (as in DI-engine, e.g. NGU) a list of B per-sample discounts, one per batch entry
          (floats or 0-dim tensors).
        - nstep: horizon; must equal ``reward.shape[0]``.
        - value_gamma: optional factor replacing ``gamma**nstep`` on the bootstrap (for episodes cut short of n
          steps): a number, or a tensor of the shape of ``next_value`` or a leading part of it (``(B,)``).
    Returns:
        - the n-step return, of the shape of ``next_value``, without gradient; float even for integer rewards.
    Shapes:
        - reward (float or integer): ``(nstep, B)``, ``(nstep, B, ...)`` (e.g. ``(nstep, B, A)`` for agents), or
          ``(nstep,)`` for a single sample.
        - next_value: ``reward.shape[1:]``, e.g. ``(B,)`` or ``(B, A)``.
        - done (bool, integer or float): the shape of ``next_value`` or a leading part of it, e.g. ``(B,)`` for
          ``(B, A)`` values (one flag per sample, aligned with the leading dimension as in DI-engine's
          ``view_similar``).
    """
    reward, next_value, done = data
    if reward.ndim == 0 or reward.shape[0] != nstep:
        raise ValueError(f"reward has shape {tuple(reward.shape)}, expected (nstep={nstep}, B, ...)")
    check_same_shape("next_value", next_value, "reward[0]", reward[0])
    done = _leading_view("done", done, "next_value", next_value)
    dtype = reward.dtype if reward.dtype.is_floating_point else torch.get_default_dtype()
    steps = torch.arange(nstep, dtype=dtype, device=reward.device)
    if isinstance(gamma, (list, tuple)):
        if reward.ndim < 2 or len(gamma) != reward.shape[1]:
            raise ValueError(
                f"gamma has {len(gamma)} entries, expected one per batch entry (reward {tuple(reward.shape)})"
            )
        per_sample = torch.stack([torch.as_tensor(g, dtype=dtype) for g in gamma]).to(reward.device)
        factors = per_sample.unsqueeze(0) ** steps.unsqueeze(1)  # (nstep, B)
        factors = factors.view(*factors.shape, *([1] * (reward.dim() - 2)))
        tail = _leading_view("gamma", per_sample**nstep, "next_value", next_value)
    else:
        factors = (float(gamma) ** steps).view(-1, *([1] * (reward.dim() - 1)))
        tail = float(gamma) ** nstep
    if value_gamma is None:
        bootstrap_factor = tail
    elif isinstance(value_gamma, torch.Tensor):
        bootstrap_factor = _leading_view("value_gamma", value_gamma, "next_value", next_value)
    else:
        bootstrap_factor = float(value_gamma)
    with torch.no_grad():
        not_done = 1.0 - done.to(dtype)
        return (reward.to(dtype) * factors).sum(0) + bootstrap_factor * next_value * not_done


def _float_dtype(rewards: torch.Tensor, values: torch.Tensor) -> torch.dtype:
    """The dtype returns are computed in: the rewards', or for integer rewards the values' (if floating)."""
    for tensor in (rewards, values):
        if tensor.dtype.is_floating_point:
            return tensor.dtype
    return torch.get_default_dtype()


def multistep_forward_view(
    bootstrap_values: torch.Tensor,
    rewards: torch.Tensor,
    gammas: torch.Tensor,
    lambda_: torch.Tensor,
    done: torch.Tensor | None = None,
) -> torch.Tensor:
    """Lambda returns from per-step values of the *next* state (DI-engine's ``multistep_forward_view``).

    Overview:
        ``G[t] = r[t] + (1 - done[t]) * (gamma[t] * lambda[t] * G[t+1] + gamma[t] * (1 - lambda[t]) * V[t])``
        with ``G[T] = V[T-1]``, where ``V[t] = bootstrap_values[t]`` is the value of the state after step t.
        ``done[t] = 1`` (terminated) stops both the bootstrap and the trace at t.
    Shapes:
        - all ``(T, B)``, or as DI-engine accepts ``(T, B, ...)``, or ``(T,)``; gammas and lambda_ may also be
          Python floats (or tensors that broadcast to rewards). rewards may be integers, done bool, integer or
          float. Returns the shape of rewards, in rewards' dtype if floating (DI-engine's), else in the values'
          float dtype: DI-engine truncates the returns of integer rewards to integers.
    """
    if rewards.ndim == 0:
        raise ValueError("rewards has shape (), expected (T, ...): (T, B), (T,), ...")
    check_same_shape("bootstrap_values", bootstrap_values, "rewards", rewards)
    dtype = _float_dtype(rewards, bootstrap_values)
    rewards, bootstrap_values = rewards.to(dtype), bootstrap_values.to(dtype)
    gammas = torch.as_tensor(gammas, dtype=dtype, device=rewards.device).expand_as(rewards)
    lambda_ = torch.as_tensor(lambda_, dtype=dtype, device=rewards.device).expand_as(rewards)
    not_done = torch.ones_like(rewards) if done is None else 1.0 - done.to(dtype)
    with torch.no_grad():
        coeff = not_done * gammas * lambda_
        inputs = rewards + not_done * gammas * (1.0 - lambda_) * bootstrap_values
        # G[T-1] = r + (1-d) gamma V[T-1]: the trace continues into x[T] = V[T-1] with weight gamma * lambda.
        return backward_linear_recurrence(coeff, inputs, bootstrap_values[-1])


def generalized_lambda_returns(
    bootstrap_values: torch.Tensor,
    rewards: torch.Tensor,
    gammas: float | torch.Tensor,
    lambda_: float | torch.Tensor,
    done: torch.Tensor | None = None,
) -> torch.Tensor:
    """TD(lambda) returns with values ``V(s_0..s_T)`` of shape ``(T+1, B)`` (DI-engine compatible).

    Overview:
        ``G[t] = r[t] + (1 - done[t]) * gamma * ((1 - lambda) V(s_{t+1}) + lambda G[t+1])``, ``G[T] = V(s_T)``.
        With ``lambda_=1`` this is the discounted return bootstrapped from ``V(s_T)``; with ``lambda_=0`` the
        one-step TD target.
    Shapes:
        - bootstrap_values: ``(T+1, B)``; rewards, done: ``(T, B)``. Returns ``(T, B)``. As DI-engine accepts, also
          ``(T+1, B, ...)`` with ``(T, B, ...)``; and ``(T+1,)`` with ``(T,)``. rewards may be integers (the
          returns are float: see ``multistep_forward_view``), done bool, integer or float; gammas and lambda_
          floats or tensors of the rewards' shape.
    """
    if rewards.ndim == 0 or tuple(bootstrap_values.shape) != (rewards.shape[0] + 1, *rewards.shape[1:]):
        raise ValueError(
            f"bootstrap_values has shape {tuple(bootstrap_values.shape)}, expected (T+1, ...) for rewards "
            f"{tuple(rewards.shape)}"
        )
    return multistep_forward_view(bootstrap_values[1:], rewards, gammas, lambda_, done)


def td_lambda_error(data: td_lambda_data, gamma: float = 0.9, lambda_: float = 0.8) -> torch.Tensor:
    """Mean squared error between ``value[:-1]`` and its (detached) TD(lambda) return (DI-engine compatible).

    Overview:
        ``loss = mean(0.5 * (G - value[:-1])**2 * weight)`` where ``G`` comes from ``generalized_lambda_returns``.
    Shapes:
        - value: ``(T+1, B)``; reward: ``(T, B)``; weight: ``(B,)`` per sample (DI-engine's documented shape,
          broadcast over T), ``(T, B)``, or None. Returns a 0-dim loss.
        - As DI-engine accepts, also value ``(T+1, B, ...)`` with reward ``(T, B, ...)`` and weight ``(B, ...)`` or
          ``(T, B, ...)``; zoo also takes a single trajectory, value ``(T+1,)`` and reward ``(T,)``. Integer
          rewards give float returns (DI-engine truncates them to integers).
    """
    value, reward, weight = data
    if weight is None:
        weight = torch.ones_like(reward)
    if weight.shape != reward.shape and tuple(weight.shape) != tuple(reward.shape[1:]):
        raise ValueError(
            f"weight has shape {tuple(weight.shape)}, expected {tuple(reward.shape[1:])} or {tuple(reward.shape)}"
        )
    returns = generalized_lambda_returns(value.detach(), reward, gamma, lambda_)
    return (0.5 * F.mse_loss(returns, value[:-1], reduction="none") * weight).mean()
