"""Generalized Advantage Estimation (Schulman et al. 2016), DI-engine 0.5.3 compatible.

Shapes convention (all sequence estimators in zoo.rl_utils): time-major ``(T, B, ...)``.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import torch

from ._checks import check_ndim, check_same_shape
from ._scan import backward_linear_recurrence, compute_dtype, fused_gae, numpy_view, scan_numpy_inplace

gae_data = namedtuple("gae_data", ["value", "next_value", "reward", "done", "traj_flag"])


def _as_float_flag(flag: torch.Tensor | None, like: torch.Tensor, field: str) -> torch.Tensor:
    if flag is None:
        return torch.zeros_like(like)
    check_same_shape(field, flag, "reward", like)
    return flag.to(like.dtype)


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
        - value, next_value: ``(T, B)``, or ``(T, B, A)`` for A agents sharing ``reward``.
        - reward, done, traj_flag: ``(T, B)``; flags may be bool or float.
    Examples:
        >>> value, next_value = torch.zeros(4, 2), torch.zeros(4, 2)
        >>> reward = torch.ones(4, 2)
        >>> adv = gae(gae_data(value, next_value, reward, None, None), gamma=0.5, lambda_=1.0)
        >>> adv[:, 0]
        tensor([1.8750, 1.7500, 1.5000, 1.0000])
    """
    value, next_value, reward, done, traj_flag = data
    check_ndim("value", value, (2, 3), "(T, B) or (T, B, A)")
    check_same_shape("next_value", next_value, "value", value)
    check_ndim("reward", reward, (2,), "(T, B)")
    if reward.shape != value.shape[:2]:
        raise ValueError(f"reward has shape {tuple(reward.shape)}, expected (T, B) = {tuple(value.shape[:2])}")
    if traj_flag is None:
        traj_flag = done
    if value.device.type == "cpu":
        # numpy's per-call overhead is a fraction of torch's, and at small sizes that overhead is the cost.
        dtype = compute_dtype(value.dtype)
        v, nv, r = (numpy_view(x, dtype) for x in (value, next_value, reward))
        d = None if done is None else numpy_view(_as_float_flag(done, reward, "done"), dtype)
        f = d if traj_flag is done else numpy_view(_as_float_flag(traj_flag, reward, "traj_flag"), dtype)
        adv = fused_gae(v, nv, r, d, f, gamma, lambda_)
        if adv is None:
            if value.dim() == 3:  # several agents share one reward and one set of flags
                r = r[..., None]
                d = None if d is None else d[..., None]
                f = None if f is None else f[..., None]
            delta = r + gamma * nv - v if d is None else r + gamma * (1.0 - d) * nv - v
            carry = gamma * lambda_ if f is None else (gamma * lambda_) * (1.0 - f)
            adv = scan_numpy_inplace(np.broadcast_to(carry, delta.shape).copy(), delta)
        return torch.from_numpy(adv).to(value.dtype)
    reward = reward.to(value.dtype)
    done = _as_float_flag(done, reward, "done")
    traj_flag = _as_float_flag(traj_flag, reward, "traj_flag")
    if value.dim() == 3:
        reward, done, traj_flag = reward.unsqueeze(-1), done.unsqueeze(-1), traj_flag.unsqueeze(-1)
    with torch.no_grad():
        delta = reward + gamma * (1.0 - done) * next_value - value
        factor = (gamma * lambda_) * (1.0 - traj_flag)
        return backward_linear_recurrence(factor.expand_as(delta), delta)
