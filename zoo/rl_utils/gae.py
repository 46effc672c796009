"""Generalized Advantage Estimation (Schulman et al. 2016), DI-engine 0.5.3 compatible.

Shapes convention (all sequence estimators in zoo.rl_utils): time-major ``(T, B, ...)``; like DI-engine's ``gae``, a
single concatenated trajectory ``(T,)`` and any further dimensions ``(T, B, ...)`` are accepted too.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
import torch

from ._checks import check_same_shape
from ._scan import backward_linear_recurrence, compute_dtype, fused_gae, numpy_view, scan_numpy_inplace

gae_data = namedtuple("gae_data", ["value", "next_value", "reward", "done", "traj_flag"])
"""Input of ``gae``, time-major ``(T, B)``: ``value`` and ``next_value`` (the value of each step's next
observation), ``reward``, ``done`` (terminated: no bootstrap) and ``traj_flag`` (the trace ends: terminated or
truncated)."""


def _as_float_flag(flag: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    # Flags were checked against reward by gae().
    return torch.zeros_like(like) if flag is None else flag.to(like.dtype)


def _numpy_flag(flag: torch.Tensor | None, dtype: np.dtype) -> np.ndarray | None:
    # A flag as 0/1 floats for the CPU path (numpy converts bools at a fraction of torch's per-call cost).
    return None if flag is None else numpy_view(flag, flag.dtype).astype(dtype)


def _inner_shape(value: torch.Tensor, next_value: torch.Tensor, reward: torch.Tensor) -> tuple[int, ...]:
    """Check the shapes DI-engine accepts; return the shape ``value`` is solved in: ``(T, N)`` when ``reward`` has
    the shape of ``value``, ``(T, N, A)`` when ``value`` has one more (last) dimension, A agents sharing a reward
    (DI-engine's rule). ``N`` is the product of the dimensions between T and A (1 for a single trajectory)."""
    if value.ndim == 0:
        raise ValueError("value has shape (), expected (T, ...)")
    check_same_shape("next_value", next_value, "value", value)
    if reward.shape == value.shape:
        agents: tuple[int, ...] = ()
    elif value.ndim >= 2 and reward.shape == value.shape[:-1]:
        agents = (value.shape[-1],)
    else:
        raise ValueError(
            f"reward has shape {tuple(reward.shape)}, expected the shape of value {tuple(value.shape)}, or "
            f"{tuple(value.shape[:-1])} for agents sharing one reward"
        )
    return (reward.shape[0], math.prod(reward.shape[1:]), *agents)


def gae(data: gae_data, gamma: float = 0.99, lambda_: float = 0.97) -> torch.Tensor:
    """Generalized advantage estimates for a time-major rollout.

    Overview:
        ``delta[t] = reward[t] + gamma * (1 - done[t]) * next_value[t] - value[t]`` and
        ``adv[t] = delta[t] + gamma * lambda_ * (1 - traj_flag[t]) * adv[t + 1]`` with ``adv[T] = 0``,
        solved with a log-depth scan rather than a Python loop over T.

        The two flags do different things:

        - ``done[t] = 1``: the episode *terminated* at t; ``next_value[t]`` is ignored (no bootstrap).
        - ``traj_flag[t] = 1``: the trace ends at t (episode end, terminated or truncated, or a rollout seam);
          advantages do not flow back across it. For a *truncated* step set ``traj_flag = 1``, ``done = 0`` and
          ``next_value[t]`` to the value of the final observation: it is used.

        ``done=None`` means no termination; ``traj_flag=None`` means ``traj_flag = done`` (DI-engine's rule).
        Unlike DI-engine 0.5.3, which overwrites the caller's ``next_value`` in place, this never mutates its
        inputs. The result is a target: it carries no gradient.
    Arguments:
        - data: ``gae_data(value, next_value, reward, done, traj_flag)``.
        - gamma: discount factor.
        - lambda_: GAE's bias/variance trade-off in [0, 1].
    Returns:
        - adv: advantages with the shape and dtype of ``value``.
    Shapes:
        As in DI-engine 0.5.3, any time-major shape ``(T, ...)``:

        - value, next_value: ``(T,)`` (one concatenated trajectory), ``(T, B)``, ``(T, B, ...)``; or the shape of
          ``reward`` plus a last agent dimension, ``(T, ..., A)``, for A agents sharing one reward and one set of
          flags (e.g. value ``(T, B, A)`` with reward ``(T, B)``, or value ``(T, A)`` with reward ``(T,)``).
        - reward (float or integer), done, traj_flag (bool, integer or float): one shape, that of ``value`` or of
          ``value`` without its last dimension.
    Examples:
        >>> value, next_value = torch.zeros(4, 2), torch.zeros(4, 2)
        >>> reward = torch.ones(4, 2)
        >>> adv = gae(gae_data(value, next_value, reward, None, None), gamma=0.5, lambda_=1.0)
        >>> adv[:, 0]
        tensor([1.8750, 1.7500, 1.5000, 1.0000])
        >>> gae(gae_data(torch.zeros(3), torch.zeros(3), torch.ones(3), torch.tensor([False, True, False]), None),
        ...     gamma=0.5, lambda_=1.0)
        tensor([1.5000, 1.0000, 1.0000])
    """
    value, next_value, reward, done, traj_flag = data
    # Every accepted shape is solved as (T, N), or (T, N, A) with reward and flags (T, N): the compiled loop and
    # the scans need nothing else. reshape() is a view of contiguous inputs, and the result is reshaped back.
    inner = _inner_shape(value, next_value, reward)
    flat = inner[:2]
    if done is not None:
        check_same_shape("done", done, "reward", reward)
    if traj_flag is None:
        traj_flag = done
    elif traj_flag is not done:
        check_same_shape("traj_flag", traj_flag, "reward", reward)
    if len(inner) == value.ndim:  # already (T, B) or (T, B, A): no reshape (a few microseconds each)
        args = (value, next_value, reward, done, traj_flag)
    else:
        done_flat = None if done is None else done.reshape(flat)
        flag_flat = done_flat if traj_flag is done else traj_flag.reshape(flat)
        args = (value.reshape(inner), next_value.reshape(inner), reward.reshape(flat), done_flat, flag_flat)
    adv = _gae_cpu(*args, gamma, lambda_) if value.device.type == "cpu" else _gae_torch(*args, gamma, lambda_)
    return adv if adv.shape == value.shape else adv.reshape(value.shape)


def _gae_cpu(
    value: torch.Tensor,
    next_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor | None,
    traj_flag: torch.Tensor | None,
    gamma: float,
    lambda_: float,
) -> torch.Tensor:
    """GAE of checked ``(T, N)`` or ``(T, N, A)`` CPU tensors (reward and flags ``(T, N)``) through numpy.

    numpy's per-call overhead is a fraction of torch's, and at small sizes that overhead is the cost.
    ``traj_flag is done`` when the caller passed no traj_flag."""
    dtype = compute_dtype(value.dtype)
    v, nv, r = (numpy_view(x, dtype) for x in (value, next_value, reward))
    d = _numpy_flag(done, v.dtype)
    f = d if traj_flag is done else _numpy_flag(traj_flag, v.dtype)
    adv = fused_gae(v, nv, r, d, f, gamma, lambda_)
    if adv is None:
        if value.dim() == 3:  # several agents share one reward and one set of flags
            r = r[..., None]
            d = None if d is None else d[..., None]
            f = None if f is None else f[..., None]
        delta = r + gamma * nv - v if d is None else r + gamma * (1.0 - d) * nv - v
        carry = gamma * lambda_ if f is None else (gamma * lambda_) * (1.0 - f)
        adv = scan_numpy_inplace(np.broadcast_to(carry, delta.shape).copy(), delta)
    adv = torch.from_numpy(adv)
    return adv if adv.dtype == value.dtype else adv.to(value.dtype)


def _gae_torch(
    value: torch.Tensor,
    next_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor | None,
    traj_flag: torch.Tensor | None,
    gamma: float,
    lambda_: float,
) -> torch.Tensor:
    """GAE of checked ``(T, N)`` or ``(T, N, A)`` tensors (reward and flags ``(T, N)``) with torch operations on
    their device (the path for accelerators)."""
    reward = reward.to(value.dtype)
    done = _as_float_flag(done, reward)
    traj_flag = _as_float_flag(traj_flag, reward)
    if value.dim() == 3:
        reward, done, traj_flag = reward.unsqueeze(-1), done.unsqueeze(-1), traj_flag.unsqueeze(-1)
    with torch.no_grad():
        delta = reward + gamma * (1.0 - done) * next_value - value
        factor = (gamma * lambda_) * (1.0 - traj_flag)
        return backward_linear_recurrence(factor.expand_as(delta), delta)
