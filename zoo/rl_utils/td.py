"""Q-learning TD errors: ``q_nstep_td_data`` and ``q_nstep_td_error`` (DI-engine 0.5.3 compatible).

Per-sample tensors are ``(B, ...)``; the n rewards of each sample are ``(nstep, B)`` as in DI-engine (the step
first, like the other sequence estimators). The target carries no gradient: the loss differentiates through ``q``
only. ``done`` means terminated (no bootstrap). DI-engine has no truncation flag; zoo adds the keyword
``truncated`` (see ``q_nstep_td_error``), with which a window that an episode end cuts short is handled exactly.

Where zoo differs from DI-engine 0.5.3, zoo is right and says so:

- ``cum_reward=True`` takes the already summed reward ``(B,)``. DI-engine also accepts an ``(nstep, B)`` reward
  there and silently broadcasts the per-sample error to ``(nstep, B)``; zoo raises a ValueError.
- Shapes are checked (DI-engine broadcasts mismatched ones); integer rewards give float targets.
"""

from __future__ import annotations

from collections import namedtuple

import torch
import torch.nn as nn

from ._checks import check_same_shape, check_shape
from .returns import nstep_return, nstep_return_data

q_nstep_td_data = namedtuple(
    "q_nstep_td_data", ["q", "next_n_q", "action", "next_n_action", "reward", "done", "weight"]
)
"""Input of ``q_nstep_td_error``: ``q`` ``(B, N)``, ``next_n_q`` ``(B, N)`` (Q-values after the n-th step),
``action`` ``(B,)``, ``next_n_action`` ``(B,)`` (the action the bootstrap evaluates), ``reward`` ``(nstep, B)``,
``done`` (terminated) and ``weight`` (``(B,)`` or None)."""


def _first_end(done: torch.Tensor, truncated: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For per-step flags ``(nstep, B)``: a ``(nstep, B)`` mask of the steps up to and including the first episode
    end (or all of them), the number of those steps ``(B,)``, and whether that end is a termination ``(B,)``."""
    ended = done.bool() | truncated.bool()
    # A step is inside the window while no episode end happened at an earlier step.
    earlier_end = torch.cumsum(ended.long(), dim=0) - ended.long()
    inside = earlier_end == 0
    steps = inside.sum(0)
    terminated = (done.bool() & inside).any(0)
    return inside, steps, terminated


def _truncation_target(
    reward: torch.Tensor, target_q: torch.Tensor, done: torch.Tensor, truncated: torch.Tensor,
    gamma: float | list, nstep: int, dtype: torch.dtype,
) -> torch.Tensor:
    """The exact n-step target from per-step termination and truncation flags (see ``q_nstep_td_error``)."""
    check_shape("reward", reward, (nstep, None), f"(nstep={nstep}, B)")
    check_same_shape("done", done, "reward", reward)
    check_same_shape("truncated", truncated, "reward", reward)
    inside, steps, terminated = _first_end(done, truncated)
    if isinstance(gamma, (list, tuple)):
        if len(gamma) != reward.shape[1]:
            raise ValueError(f"gamma has {len(gamma)} entries, expected one per batch entry (B={reward.shape[1]})")
        gammas = torch.stack([torch.as_tensor(g, dtype=dtype) for g in gamma]).to(reward.device)
    else:
        gammas = torch.full((reward.shape[1],), float(gamma), dtype=dtype, device=reward.device)
    powers = torch.arange(nstep, dtype=dtype, device=reward.device).unsqueeze(1)
    discounted = reward.to(dtype) * gammas.unsqueeze(0) ** powers * inside.to(dtype)
    bootstrap = gammas ** steps.to(dtype) * target_q.to(dtype) * (~terminated).to(dtype)
    return discounted.sum(0) + bootstrap


def q_nstep_td_error(
    data: q_nstep_td_data,
    gamma: float | list,
    nstep: int = 1,
    cum_reward: bool = False,
    value_gamma: torch.Tensor | float | None = None,
    criterion: nn.Module = nn.MSELoss(reduction="none"),  # noqa: B008 -- DI-engine's default, never mutated
    *,
    truncated: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-step (1-step or n-step) TD error for Q-learning (DQN and its variants), DI-engine compatible.

    Overview:
        ``target = sum_k gamma**k * reward[k] + gamma**nstep * (1 - done) * next_n_q[next_n_action]`` (detached),
        ``td_error_per_sample = criterion(q[action], target)``, ``loss = mean(td_error_per_sample * weight)``.
        Double DQN: ``next_n_q`` from the target network, ``next_n_action`` the online network's argmax; plain
        DQN: both from the target network.
    Arguments:
        - data: ``q_nstep_td_data(q, next_n_q, action, next_n_action, reward, done, weight)``.
        - gamma: discount, or (as in DI-engine, NGU) a list of B per-sample discounts.
        - nstep: how many rewards each sample has; must equal ``reward.shape[0]`` (unless ``cum_reward``).
        - cum_reward: ``reward`` is already the discounted sum ``(B,)``: only the bootstrap is added.
        - value_gamma: replaces ``gamma**nstep`` on the bootstrap (a number or a ``(B,)`` tensor), e.g. for
          windows an episode end made shorter than n steps.
        - criterion: an element-wise loss (``reduction='none'``), e.g. ``nn.SmoothL1Loss(reduction='none')``
          for the Huber loss of Mnih et al. (2015).
        - truncated: zoo's addition, keyword only. When given, ``done`` and ``truncated`` are per-step flags
          ``(nstep, B)``: ``done[k]`` the episode terminated at step k, ``truncated[k]`` it was cut (time limit)
          at step k. Only the rewards up to the first end K in the window count, and the bootstrap is
          ``gamma**(K+1) * next_n_q[next_n_action]``, or nothing when that end is a termination (a step both
          terminated and truncated is a termination). ``next_n_q`` must then be the Q-values of the observation
          after step K (for a truncation, the episode's final observation). Not combined with ``cum_reward`` or
          ``value_gamma``.
    Returns:
        - loss: 0-dim tensor, differentiable through ``q`` only.
        - td_error_per_sample: ``(B,)`` (or ``(B, A)`` for agents), the criterion per sample, unweighted.
    Shapes:
        - q, next_n_q: ``(B, N)`` (N actions), or ``(B, A, N)`` for A agents sharing the reward and done.
        - action, next_n_action: ``(B,)`` integer indices (``(B, A)`` for agents).
        - reward: ``(nstep, B)``; ``(B,)`` when ``cum_reward``. done: ``(B,)`` (bool, integer or float).
        - weight: ``(B,)`` (e.g. importance-sampling weights of prioritised replay) or None (ones).
    Examples:
        >>> q = torch.tensor([[1.0, 2.0]], requires_grad=True)
        >>> data = q_nstep_td_data(q, torch.tensor([[3.0, 4.0]]), torch.tensor([1]), torch.tensor([0]),
        ...                        torch.tensor([[1.0]]), torch.tensor([0.0]), None)
        >>> q_nstep_td_error(data, 0.5)[1]  # target 1 + 0.5 * 3 = 2.5, error (2 - 2.5)**2
        tensor([0.2500], grad_fn=<MseLossBackward0>)
    """
    q, next_n_q, action, next_n_action, reward, done, weight = data
    if q.ndim < 2:
        raise ValueError(f"q has shape {tuple(q.shape)}, expected (B, N) or (B, A, N)")
    check_same_shape("next_n_q", next_n_q, "q", q)
    check_shape("action", action, q.shape[:-1], f"q's leading shape {tuple(q.shape[:-1])}")
    check_same_shape("next_n_action", next_n_action, "action", action)
    batch = q.shape[0]
    dtype = q.dtype if q.dtype.is_floating_point else torch.get_default_dtype()
    q_s_a = q.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        target_q = next_n_q.gather(-1, next_n_action.long().unsqueeze(-1)).squeeze(-1).to(dtype)
        agents = q.shape[1:-1]  # () for one agent, (A,) for agents sharing reward and done
        if truncated is not None:
            if cum_reward or value_gamma is not None:
                raise ValueError("truncated cannot be combined with cum_reward or value_gamma")
            if agents:
                raise ValueError("truncated supports single-agent q (B, N) only")
            target = _truncation_target(reward, target_q, done, truncated, gamma, nstep, dtype)
        elif cum_reward:
            check_shape("reward", reward, (batch,), f"({batch},): the summed n-step reward when cum_reward")
            check_shape("done", done, (batch,), f"({batch},)")
            factor = float(gamma) ** nstep if value_gamma is None else value_gamma
            if isinstance(factor, torch.Tensor) and factor.ndim == 1:
                factor = factor.view(-1, *([1] * len(agents)))
            not_done = (1.0 - done.to(dtype)).view(-1, *([1] * len(agents)))
            target = reward.to(dtype).view(-1, *([1] * len(agents))) + factor * target_q * not_done
        else:
            check_shape("reward", reward, (nstep, batch), f"(nstep={nstep}, B={batch})")
            check_shape("done", done, (batch,), f"({batch},)")
            if agents:  # every agent gets the sample's reward
                reward = reward.view(nstep, batch, *([1] * len(agents))).expand(nstep, *target_q.shape)
            target = nstep_return(nstep_return_data(reward, target_q, done), gamma, nstep, value_gamma)
    td_error_per_sample = criterion(q_s_a, target.to(q_s_a.dtype))
    if weight is None:
        return td_error_per_sample.mean(), td_error_per_sample
    check_shape("weight", weight, (batch,), f"({batch},)")
    weight = weight.to(td_error_per_sample.dtype).view(-1, *([1] * (td_error_per_sample.ndim - 1)))
    return (td_error_per_sample * weight).mean(), td_error_per_sample
