"""V-trace off-policy targets and the IMPALA loss (Espeholt et al. 2018), DI-engine 0.5.3 compatible.

DI-engine's functions assume no episode ends inside an unroll. zoo keeps their plain calls unchanged and adds
keyword-only ``done`` / ``traj_flag`` / ``next_value`` arguments with the same meaning as in ``gae``:

- ``done[t] = 1``: terminated at t, no bootstrap from ``next_value[t]`` and the trace stops;
- ``traj_flag[t] = 1``: the trace stops at t (terminated or truncated); a truncated step bootstraps from
  ``next_value[t]``, the value of the final observation (defaults to ``bootstrap_values[t + 1]``).
``gamma`` may also be a ``(T, B)`` tensor of per-step discounts (scalable_agent's ``discounts``).
"""

from __future__ import annotations

from collections import namedtuple

import torch
import torch.nn.functional as F

from ._checks import check_ndim, check_same_shape
from ._scan import backward_linear_recurrence, compute_dtype, fused_vtrace, numpy_view, scan_numpy_inplace
from .distributions import categorical_log_prob, entropy, gaussian_entropy, gaussian_log_prob

vtrace_data = namedtuple("vtrace_data", ["target_output", "behaviour_output", "action", "value", "reward", "weight"])
vtrace_loss = namedtuple("vtrace_loss", ["policy_loss", "value_loss", "entropy_loss"])

Discount = float | torch.Tensor


def _episode_terms(
    reward: torch.Tensor,
    bootstrap_values: torch.Tensor,
    gamma: Discount,
    done: torch.Tensor | None,
    traj_flag: torch.Tensor | None,
    next_value: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-step discount (0 after termination), trace mask, and the value bootstrapped at each step."""
    dtype = bootstrap_values.dtype
    discount = torch.as_tensor(gamma, dtype=dtype, device=reward.device).expand_as(reward)
    if done is not None:
        check_same_shape("done", done, "reward", reward)
        discount = discount * (1.0 - done.to(dtype))
    if traj_flag is None:
        trace = torch.ones_like(reward, dtype=dtype) if done is None else 1.0 - done.to(dtype)
    else:
        check_same_shape("traj_flag", traj_flag, "reward", reward)
        trace = 1.0 - traj_flag.to(dtype)
    if next_value is None:
        next_value = bootstrap_values[1:]
    else:
        check_same_shape("next_value", next_value, "reward", reward)
    return discount, trace, next_value


def vtrace_nstep_return(
    clipped_rhos: torch.Tensor,
    clipped_cs: torch.Tensor,
    reward: torch.Tensor,
    bootstrap_values: torch.Tensor,
    gamma: Discount = 0.99,
    lambda_: float = 0.95,
    *,
    done: torch.Tensor | None = None,
    traj_flag: torch.Tensor | None = None,
    next_value: torch.Tensor | None = None,
) -> torch.Tensor:
    """V-trace value targets ``v_s``.

    Overview:
        ``delta[t] = rho[t] * (reward[t] + gamma[t] * next_value[t] - V[t])`` and
        ``v[t] - V[t] = delta[t] + gamma[t] * lambda_ * c[t] * trace[t] * (v[t+1] - V[t+1])``, ``v[T] = V[T]``;
        solved by a log-depth scan. With ``rho = c = 1`` this is the lambda-return; with ``lambda_ = 1`` and no
        clipping on-policy, the n-step return. See the module docstring for ``done``/``traj_flag``/``next_value``.
    Arguments:
        - clipped_rhos, clipped_cs: truncated importance weights ``min(rho_bar, pi/mu)``, ``min(c_bar, pi/mu)``.
        - reward: rewards; bootstrap_values: ``V(x_0..x_T)``.
        - gamma: discount (float or per-step tensor); lambda_: trace-cutting factor of the V-trace paper.
    Returns:
        - vs: ``(T, B)`` targets, without gradient.
    Shapes:
        - clipped_rhos, clipped_cs, reward: ``(T, B)``; bootstrap_values: ``(T+1, B)``.
    Examples:
        >>> T, B = 3, 1
        >>> ones = torch.ones(T, B)
        >>> vtrace_nstep_return(ones, ones, ones, torch.zeros(T + 1, B), gamma=1.0, lambda_=1.0)[:, 0]
        tensor([3., 2., 1.])
    """
    check_ndim("reward", reward, (2,), "(T, B)")
    check_same_shape("clipped_rhos", clipped_rhos, "reward", reward)
    check_same_shape("clipped_cs", clipped_cs, "reward", reward)
    expected = (reward.shape[0] + 1, *reward.shape[1:])
    if tuple(bootstrap_values.shape) != expected:
        raise ValueError(f"bootstrap_values has shape {tuple(bootstrap_values.shape)}, expected (T+1, B) = {expected}")
    with torch.no_grad():
        values = bootstrap_values.detach()
        plain = done is None and traj_flag is None and next_value is None and not torch.is_tensor(gamma)
        # The fast path needs no per-step terms; build them only for the general case.
        fast = plain and values.device.type == "cpu"
        terms = None if fast else _episode_terms(reward, values, gamma, done, traj_flag, next_value)
        return _vtrace_targets(clipped_rhos, clipped_cs, reward, values, gamma, lambda_, terms, plain)


def _vtrace_targets(
    clipped_rhos: torch.Tensor,
    clipped_cs: torch.Tensor,
    reward: torch.Tensor,
    values: torch.Tensor,
    gamma: Discount,
    lambda_: float,
    terms: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
    plain: bool,
) -> torch.Tensor:
    """V-trace targets from checked inputs and ``_episode_terms`` (which may be None on the CPU fast path).

    ``plain``: no episode ends, a scalar gamma and ``next_value = V[1:]`` (DI-engine's call).
    """
    if values.device.type == "cpu" and plain:
        # Plain DI-engine call on CPU: numpy has a fraction of torch's per-call overhead.
        dtype = compute_dtype(values.dtype)
        rho, c, r, v = (numpy_view(x, dtype) for x in (clipped_rhos, clipped_cs, reward, values))
        targets = fused_vtrace(rho, c, r, v, gamma, lambda_)
        if targets is None:
            deltas = rho * (r + gamma * v[1:] - v[:-1])
            targets = v[:-1] + scan_numpy_inplace((gamma * lambda_) * c, deltas)
        return torch.from_numpy(targets).to(values.dtype)
    assert terms is not None
    discount, trace, next_value = terms
    deltas = clipped_rhos * (reward + discount * next_value - values[:-1])
    correction = backward_linear_recurrence(discount * lambda_ * clipped_cs * trace, deltas)
    return values[:-1] + correction


def vtrace_advantage(
    clipped_pg_rhos: torch.Tensor,
    reward: torch.Tensor,
    return_: torch.Tensor,
    bootstrap_values: torch.Tensor,
    gamma: Discount,
) -> torch.Tensor:
    """Policy-gradient advantage ``rho_pg[t] * (reward[t] + gamma * return_[t] - bootstrap_values[t])``.

    Shapes: all ``(T, B)``: ``return_`` is ``v[t+1]`` and ``bootstrap_values`` is ``V[t]`` (DI-engine's
    convention). Returns ``(T, B)`` without gradient.
    """
    check_same_shape("return_", return_, "reward", reward)
    check_same_shape("bootstrap_values", bootstrap_values, "reward", reward)
    with torch.no_grad():
        return clipped_pg_rhos * (reward + gamma * return_ - bootstrap_values)


def compute_importance_weights(
    target_output: torch.Tensor | dict,
    behaviour_output: torch.Tensor | dict,
    action: torch.Tensor,
    action_space_type: str = "discrete",
    requires_grad: bool = False,
) -> torch.Tensor:
    """``pi(a|x) / mu(a|x)`` from logits (discrete) or ``{'mu', 'sigma'}`` dicts (continuous, summed over D)."""
    if action_space_type == "discrete":
        log_target = categorical_log_prob(target_output, action)
        log_behaviour = categorical_log_prob(behaviour_output, action)
    elif action_space_type == "continuous":
        log_target = gaussian_log_prob(target_output["mu"], target_output["sigma"], action)
        log_behaviour = gaussian_log_prob(behaviour_output["mu"], behaviour_output["sigma"], action)
    else:
        raise ValueError(f"action_space_type is {action_space_type!r}, expected 'discrete' or 'continuous'")
    ratio = torch.exp(log_target - log_behaviour.detach())
    return ratio if requires_grad else ratio.detach()


def _vtrace_error(
    log_prob: torch.Tensor,
    entropy_values: torch.Tensor,
    importance: torch.Tensor,
    value: torch.Tensor,
    reward: torch.Tensor,
    weight: torch.Tensor | None,
    gamma: Discount,
    lambda_: float,
    rho_clip_ratio: float,
    c_clip_ratio: float,
    rho_pg_clip_ratio: float,
    done: torch.Tensor | None,
    traj_flag: torch.Tensor | None,
    next_value: torch.Tensor | None,
) -> vtrace_loss:
    check_ndim("reward", reward, (2,), "(T, B)")
    expected = (reward.shape[0] + 1, *reward.shape[1:])
    if tuple(value.shape) != expected:
        raise ValueError(f"value has shape {tuple(value.shape)}, expected (T+1, B) = {expected}")
    with torch.no_grad():
        values = value.detach()
        check_same_shape("clipped_rhos", importance, "reward", reward)
        terms = _episode_terms(reward, values, gamma, done, traj_flag, next_value)
        plain = done is None and traj_flag is None and next_value is None and not torch.is_tensor(gamma)
        vs = _vtrace_targets(
            importance.clamp(max=rho_clip_ratio), importance.clamp(max=c_clip_ratio), reward, values, gamma, lambda_,
            terms, plain,
        )
        discount, trace, bootstrap = terms
        # v[t+1] inside an episode; the bootstrapped value where the trace ends (0 once terminated via discount).
        vs_next = torch.cat([vs[1:], values[-1:]], 0)
        vs_next = trace * vs_next + (1.0 - trace) * bootstrap
        adv = importance.clamp(max=rho_pg_clip_ratio) * (reward + discount * vs_next - values[:-1])
    if weight is None:
        weight = torch.ones_like(reward)
    check_same_shape("weight", weight, "reward", reward)
    policy_loss = -(log_prob * adv * weight).mean()
    value_loss = (F.mse_loss(value[:-1], vs, reduction="none") * weight).mean()
    entropy_loss = (entropy_values * weight).mean()
    return vtrace_loss(policy_loss, value_loss, entropy_loss)


def vtrace_error_discrete_action(
    data: vtrace_data,
    gamma: Discount = 0.99,
    lambda_: float = 0.95,
    rho_clip_ratio: float = 1.0,
    c_clip_ratio: float = 1.0,
    rho_pg_clip_ratio: float = 1.0,
    *,
    done: torch.Tensor | None = None,
    traj_flag: torch.Tensor | None = None,
    next_value: torch.Tensor | None = None,
) -> vtrace_loss:
    """IMPALA loss for discrete actions.

    Overview:
        ``policy_loss = -mean(log pi(a|x) * rho_pg * (r + gamma v[t+1] - V[t]) * weight)``,
        ``value_loss = mean((V[t] - v[t])**2 * weight)``, ``entropy_loss = mean(H(pi) * weight)`` (positive: the
        caller subtracts it), with V-trace targets ``v`` (no gradient) from truncated importance weights.
    Arguments:
        - data: ``vtrace_data(target_output, behaviour_output, action, value, reward, weight)``.
        - rho_clip_ratio, c_clip_ratio, rho_pg_clip_ratio: the truncation levels rho_bar, c_bar, rho_bar_pg.
        - done, traj_flag, next_value: episode ends inside the unroll (see the module docstring).
    Returns:
        - ``vtrace_loss(policy_loss, value_loss, entropy_loss)``, 0-dim tensors.
    Shapes:
        - target_output, behaviour_output: ``(T, B, N)`` logits; action, reward, weight: ``(T, B)``;
          value: ``(T+1, B)``.
    """
    target_output, behaviour_output, action, value, reward, weight = data
    check_ndim("target_output", target_output, (3,), "(T, B, N)")
    check_same_shape("behaviour_output", behaviour_output, "target_output", target_output)
    check_same_shape("action", action, "reward", reward)
    importance = compute_importance_weights(target_output, behaviour_output, action, "discrete")
    return _vtrace_error(
        categorical_log_prob(target_output, action), entropy(target_output), importance, value, reward, weight,
        gamma, lambda_, rho_clip_ratio, c_clip_ratio, rho_pg_clip_ratio, done, traj_flag, next_value,
    )


def vtrace_error_continuous_action(
    data: vtrace_data,
    gamma: Discount = 0.99,
    lambda_: float = 0.95,
    rho_clip_ratio: float = 1.0,
    c_clip_ratio: float = 1.0,
    rho_pg_clip_ratio: float = 1.0,
    *,
    done: torch.Tensor | None = None,
    traj_flag: torch.Tensor | None = None,
    next_value: torch.Tensor | None = None,
) -> vtrace_loss:
    """IMPALA loss for diagonal-Gaussian actions; as ``vtrace_error_discrete_action`` otherwise.

    Shapes:
        - target_output, behaviour_output: dicts with ``mu`` and ``sigma`` of shape ``(T, B, D)``;
          action: ``(T, B, D)``; value: ``(T+1, B)``; reward, weight: ``(T, B)``.
    """
    target_output, behaviour_output, action, value, reward, weight = data
    for name, output in (("target_output", target_output), ("behaviour_output", behaviour_output)):
        if not isinstance(output, dict) or "mu" not in output or "sigma" not in output:
            raise ValueError(f"{name} must be a dict with 'mu' and 'sigma' of shape (T, B, D)")
    check_ndim("target_output['mu']", target_output["mu"], (3,), "(T, B, D)")
    check_same_shape("action", action, "target_output['mu']", target_output["mu"])
    importance = compute_importance_weights(target_output, behaviour_output, action, "continuous")
    log_prob = gaussian_log_prob(target_output["mu"], target_output["sigma"], action)
    entropy_values = gaussian_entropy(target_output["sigma"].expand_as(target_output["mu"]))
    return _vtrace_error(
        log_prob, entropy_values, importance, value, reward, weight,
        gamma, lambda_, rho_clip_ratio, c_clip_ratio, rho_pg_clip_ratio, done, traj_flag, next_value,
    )
