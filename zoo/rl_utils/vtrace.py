"""V-trace off-policy targets and the IMPALA loss (Espeholt et al. 2018), DI-engine 0.5.3 compatible.

DI-engine's functions assume no episode ends inside an unroll. zoo keeps their plain calls unchanged and adds
keyword-only ``done`` / ``traj_flag`` / ``next_value`` arguments with the same meaning as in ``gae``:

- ``done[t] = 1``: terminated at t, no bootstrap from ``next_value[t]`` and the trace stops;
- ``traj_flag[t] = 1``: the trace stops at t (terminated or truncated); a truncated step bootstraps from
  ``next_value[t]``, the value of the final observation (defaults to ``bootstrap_values[t + 1]``).
``gamma`` may also be a ``(T, B)`` tensor of per-step discounts (scalable_agent's ``discounts``).

Shapes: time-major ``(T, B)`` as in DI-engine's documentation, and, as DI-engine's code accepts, a single trajectory
``(T,)`` or further dimensions ``(T, B, A, ...)`` (with values ``(T+1, ...)`` and logits ``(T, ..., N)``). Rewards
and weights may be integer tensors (DI-engine documents LongTensors); a ``weight`` of shape ``(B, ...)`` (without
T) applies to every step. Gaussian ``sigma`` may broadcast to ``mu``.

Where zoo differs from DI-engine 0.5.3: targets and advantages never carry gradient, and
``compute_importance_weights(..., requires_grad=True)`` differentiates through the target policy only (the behaviour
policy that collected the data is a constant; DI-engine would also push gradient into it).
"""

from __future__ import annotations

from collections import namedtuple

import torch
import torch.nn.functional as F

from ._checks import check_broadcasts_to, check_gaussian_action, check_same_shape
from ._scan import backward_linear_recurrence, compute_dtype, fused_vtrace, numpy_view, scan_numpy_inplace
from .distributions import categorical_log_prob, entropy, gaussian_entropy, gaussian_log_prob

vtrace_data = namedtuple("vtrace_data", ["target_output", "behaviour_output", "action", "value", "reward", "weight"])
"""Input of the V-trace losses: ``target_output`` and ``behaviour_output`` (logits, or ``{'mu', 'sigma'}``)
``(T, B, ...)``, ``action`` and ``reward`` ``(T, B)``, ``value`` ``(T+1, B)`` and ``weight``."""
vtrace_loss = namedtuple("vtrace_loss", ["policy_loss", "value_loss", "entropy_loss"])
"""Output of the V-trace losses: ``policy_loss``, ``value_loss`` and ``entropy_loss``, 0-dim tensors."""

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


def _check_time_major(values_field: str, values: torch.Tensor, reward: torch.Tensor) -> None:
    """``reward`` is ``(T, ...)`` (at least 1-D) and ``values`` is ``(T+1, ...)``."""
    if reward.ndim == 0:
        raise ValueError("reward has shape (), expected (T, ...): (T,), (T, B), ...")
    expected = (reward.shape[0] + 1, *reward.shape[1:])
    if tuple(values.shape) != expected:
        raise ValueError(
            f"{values_field} has shape {tuple(values.shape)}, expected (T+1, ...) = {expected} for reward "
            f"{tuple(reward.shape)}"
        )


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
        - vs: targets of the shape of ``reward``, without gradient.
    Shapes:
        - clipped_rhos, clipped_cs, reward (float or integer): ``(T, B)``, or ``(T,)``, or ``(T, B, ...)``;
          bootstrap_values: ``(T+1, ...)``, e.g. ``(T+1, B)``.
        - done, traj_flag (bool, integer or float), next_value, a tensor gamma: the shape of ``reward``.
    Examples:
        >>> T, B = 3, 1
        >>> ones = torch.ones(T, B)
        >>> vtrace_nstep_return(ones, ones, ones, torch.zeros(T + 1, B), gamma=1.0, lambda_=1.0)[:, 0]
        tensor([3., 2., 1.])
    """
    _check_time_major("bootstrap_values", bootstrap_values, reward)
    check_same_shape("clipped_rhos", clipped_rhos, "reward", reward)
    check_same_shape("clipped_cs", clipped_cs, "reward", reward)
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

    Shapes: all one shape, ``(T, B)`` (or ``(T,)``, ``(T, B, ...)``): ``return_`` is ``v[t+1]`` and
    ``bootstrap_values`` is ``V[t]`` (DI-engine's convention). Returns that shape without gradient.
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
    """``pi(a|x) / mu(a|x)`` from logits (discrete) or ``{'mu', 'sigma'}`` dicts (continuous, summed over D).

    Shapes: logits ``(..., N)`` with an integer action ``(...)`` (or floats holding integers); or ``mu``, ``sigma``
    and ``action`` ``(..., D)``, broadcasting. Returns ``(...)``. With ``requires_grad=True`` the gradient flows into
    ``target_output`` only: the behaviour policy is a constant (DI-engine 0.5.3 differentiates both).
    """
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
    _check_time_major("value", value, reward)
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
    elif weight.shape != reward.shape and weight.shape != reward.shape[1:]:  # (B, ...): the same at every step
        raise ValueError(
            f"weight has shape {tuple(weight.shape)}, expected the shape of reward {tuple(reward.shape)} or "
            f"{tuple(reward.shape[1:])}"
        )
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
        - target_output, behaviour_output: ``(T, B, N)`` logits; action (integer, or float holding integers),
          reward (float or integer), weight: ``(T, B)``; value: ``(T+1, B)``. Also, as in DI-engine, a single
          trajectory (logits ``(T, N)``, action and reward ``(T,)``, value ``(T+1,)``) or further dimensions
          (``(T, B, A, N)`` with ``(T, B, A)`` and ``(T+1, B, A)``); weight may be ``(B, ...)``, the same at every
          step.
    """
    target_output, behaviour_output, action, value, reward, weight = data
    if target_output.ndim < 2 or target_output.shape[:-1] != reward.shape:
        raise ValueError(
            f"target_output has shape {tuple(target_output.shape)}, expected the shape of reward "
            f"{tuple(reward.shape)} followed by N logits"
        )
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
          action: ``(T, B, D)``; value: ``(T+1, B)``; reward, weight: ``(T, B)``. Also, as in DI-engine, a single
          trajectory (``mu`` ``(T, D)``, reward ``(T,)``, value ``(T+1,)``) or further dimensions
          (``(T, B, A, D)``, reward ``(T, B, A)``); ``sigma`` (and ``action``, keeping its last dimension D) may
          broadcast to ``mu``, e.g. a ``(D,)`` state-independent standard deviation; weight may be ``(B, ...)``.
    """
    target_output, behaviour_output, action, value, reward, weight = data
    for name, output in (("target_output", target_output), ("behaviour_output", behaviour_output)):
        if not isinstance(output, dict) or "mu" not in output or "sigma" not in output:
            raise ValueError(f"{name} must be a dict with 'mu' and 'sigma' of shape (T, B, D)")
    mu = target_output["mu"]
    if mu.ndim < 2 or mu.shape[:-1] != reward.shape:
        raise ValueError(
            f"target_output['mu'] has shape {tuple(mu.shape)}, expected the shape of reward {tuple(reward.shape)} "
            "followed by D"
        )
    check_broadcasts_to("target_output['sigma']", target_output["sigma"], "target_output['mu']", mu)
    check_broadcasts_to("behaviour_output['mu']", behaviour_output["mu"], "target_output['mu']", mu)
    check_broadcasts_to("behaviour_output['sigma']", behaviour_output["sigma"], "target_output['mu']", mu)
    check_gaussian_action(action, mu, "target_output['mu']")
    importance = compute_importance_weights(target_output, behaviour_output, action, "continuous")
    log_prob = gaussian_log_prob(target_output["mu"], target_output["sigma"], action)
    entropy_values = gaussian_entropy(target_output["sigma"].expand_as(target_output["mu"]))
    return _vtrace_error(
        log_prob, entropy_values, importance, value, reward, weight,
        gamma, lambda_, rho_clip_ratio, c_clip_ratio, rho_pg_clip_ratio, done, traj_flag, next_value,
    )
