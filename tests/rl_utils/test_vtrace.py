"""V-trace against the paper's formula (float64 loops), DI-engine 0.5.3's algorithm step by step, and properties."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.rl_utils.gae import gae, gae_data
from zoo.rl_utils.returns import generalized_lambda_returns
from zoo.rl_utils.vtrace import (
    compute_importance_weights,
    vtrace_advantage,
    vtrace_data,
    vtrace_error_continuous_action,
    vtrace_error_discrete_action,
    vtrace_loss,
    vtrace_nstep_return,
)

# Every test here runs on both recurrence backends (compiled loops and the numpy scan).
pytestmark = pytest.mark.usefixtures("recurrence_backend")

# ---------------------------------------------------------------- plain-Python references (float64)


def _per_step(x, steps, batch) -> list[list[float]]:
    return torch.as_tensor(x, dtype=torch.float64).expand(steps, batch).tolist()


def _vtrace_reference(rhos, cs, reward, values, gamma, lambda_, done=None, traj_flag=None, next_value=None):
    """v[t] - V[t] = delta[t] + gamma[t] (1 - done[t]) lambda c[t] (1 - trace_end[t]) (v[t+1] - V[t+1]) per column,
    delta[t] = rho[t] (r[t] + gamma[t] (1 - done[t]) next_value[t] - V[t]); trace_end = traj_flag, else done."""
    steps, batch = reward.shape
    rho, c, r = rhos.double().tolist(), cs.double().tolist(), reward.double().tolist()
    v = values.double().tolist()
    g = _per_step(gamma, steps, batch)
    d = _per_step(0.0 if done is None else done.double(), steps, batch)
    end = d if traj_flag is None else _per_step(traj_flag.double(), steps, batch)
    nv = [v[t + 1] for t in range(steps)] if next_value is None else next_value.double().tolist()
    out = [[0.0] * batch for _ in range(steps)]
    for b in range(batch):
        following = 0.0
        for t in reversed(range(steps)):
            discount = g[t][b] * (1.0 - d[t][b])
            delta = rho[t][b] * (r[t][b] + discount * nv[t][b] - v[t][b])
            following = delta + discount * lambda_ * c[t][b] * (1.0 - end[t][b]) * following
            out[t][b] = v[t][b] + following
    return torch.tensor(out, dtype=torch.float64)


def _vtrace_paper_sum(rhos, cs, reward, values, gamma, lambda_):
    """Espeholt et al. eq. (1): v_s = V(x_s) + sum_{t>=s} gamma^{t-s} (prod_{i<t} lambda c_i) rho_t delta_t V."""
    steps, batch = reward.shape
    out = torch.zeros(steps, batch, dtype=torch.float64)
    for b in range(batch):
        for s in range(steps):
            total = values[s, b].item()
            for t in range(s, steps):
                trace = math.prod(lambda_ * cs[i, b].item() for i in range(s, t))
                target = reward[t, b].item() + gamma * values[t + 1, b].item()
                delta = rhos[t, b].item() * (target - values[t, b].item())
                total += gamma ** (t - s) * trace * delta
            out[s, b] = total
    return out


def _vtrace_nstep_return_dingo(clipped_rhos, clipped_cs, reward, bootstrap_values, gamma=0.99, lambda_=0.95):
    """DI-engine 0.5.3 vtrace_nstep_return, step by step."""
    deltas = clipped_rhos * (reward + gamma * bootstrap_values[1:] - bootstrap_values[:-1])
    factor = gamma * lambda_
    result = bootstrap_values[:-1].clone()
    vtrace_item = 0.0
    for t in reversed(range(reward.size()[0])):
        vtrace_item = deltas[t] + factor * clipped_cs[t] * vtrace_item
        result[t] += vtrace_item
    return result


def _vtrace_error_dingo(
    data, gamma=0.99, lambda_=0.95, rho_clip_ratio=1.0, c_clip_ratio=1.0, rho_pg_clip_ratio=1.0, continuous=False
):
    """DI-engine 0.5.3 vtrace_error_discrete_action / vtrace_error_continuous_action, step by step."""
    target_output, behaviour_output, action, value, reward, weight = data
    if continuous:

        def make(output):
            return torch.distributions.Independent(torch.distributions.Normal(output["mu"], output["sigma"]), 1)
    else:

        def make(output):
            return torch.distributions.Categorical(logits=output)

    with torch.no_grad():
        is_weight = torch.exp(make(target_output).log_prob(action) - make(behaviour_output).log_prob(action))
        rhos = torch.clamp(is_weight, max=rho_clip_ratio)
        cs = torch.clamp(is_weight, max=c_clip_ratio)
        return_ = _vtrace_nstep_return_dingo(rhos, cs, reward, value, gamma, lambda_)
        pg_rhos = torch.clamp(is_weight, max=rho_pg_clip_ratio)
        return_t_plus_1 = torch.cat([return_[1:], value[-1:]], 0)
        adv = pg_rhos * (reward + gamma * return_t_plus_1 - value[:-1])
    if weight is None:
        weight = torch.ones_like(reward)
    dist_target = make(target_output)
    pg_loss = -(dist_target.log_prob(action) * adv * weight).mean()
    value_loss = (F.mse_loss(value[:-1], return_, reduction="none") * weight).mean()
    entropy_loss = (dist_target.entropy() * weight).mean()
    return vtrace_loss(pg_loss, value_loss, entropy_loss)


def _log_softmax(row: list[float]) -> list[float]:
    top = max(row)
    log_sum = top + math.log(sum(math.exp(x - top) for x in row))
    return [x - log_sum for x in row]


def _categorical_terms(logits: torch.Tensor, action: torch.Tensor):
    """log pi(a) and H(pi) per (t, b), plain Python."""
    steps, batch = action.shape
    log_prob = torch.zeros(steps, batch, dtype=torch.float64)
    ent = torch.zeros(steps, batch, dtype=torch.float64)
    for t in range(steps):
        for b in range(batch):
            lp = _log_softmax(logits[t, b].tolist())
            log_prob[t, b] = lp[int(action[t, b])]
            ent[t, b] = -sum(math.exp(x) * x for x in lp)
    return log_prob, ent


def _gaussian_terms(mu: torch.Tensor, sigma: torch.Tensor, action: torch.Tensor):
    steps, batch, dims = mu.shape
    log_prob = torch.zeros(steps, batch, dtype=torch.float64)
    ent = torch.zeros(steps, batch, dtype=torch.float64)
    for t in range(steps):
        for b in range(batch):
            for k in range(dims):
                m, s, a = mu[t, b, k].item(), sigma[t, b, k].item(), action[t, b, k].item()
                log_prob[t, b] += -0.5 * ((a - m) / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi)
                ent[t, b] += 0.5 + 0.5 * math.log(2 * math.pi) + math.log(s)
    return log_prob, ent


def _loss_reference(
    target_logp,
    behaviour_logp,
    entropy_values,
    value,
    reward,
    weight,
    gamma,
    lambda_,
    rho_bar,
    c_bar,
    pg_bar,
    done=None,
    traj_flag=None,
    next_value=None,
):
    """Returns (policy, value, entropy) losses, vs and the advantage, all float64, from plain loops."""
    steps, batch = reward.shape
    importance = (target_logp - behaviour_logp).exp()
    rhos, cs, pg = importance.clamp(max=rho_bar), importance.clamp(max=c_bar), importance.clamp(max=pg_bar)
    vs = _vtrace_reference(rhos, cs, reward, value, gamma, lambda_, done, traj_flag, next_value)
    g = _per_step(gamma, steps, batch)
    d = _per_step(0.0 if done is None else done.double(), steps, batch)
    end = d if traj_flag is None else _per_step(traj_flag.double(), steps, batch)
    w = [[1.0] * batch for _ in range(steps)] if weight is None else weight.double().tolist()
    adv = torch.zeros(steps, batch, dtype=torch.float64)
    policy = value_term = entropy_term = 0.0
    for t in range(steps):
        for b in range(batch):
            if end[t][b]:
                following = value[t + 1, b].item() if next_value is None else next_value[t, b].item()
            else:
                following = vs[t + 1, b].item() if t + 1 < steps else value[steps, b].item()
            discount = g[t][b] * (1.0 - d[t][b])
            adv[t, b] = pg[t, b].item() * (reward[t, b].item() + discount * following - value[t, b].item())
            policy -= target_logp[t, b].item() * adv[t, b].item() * w[t][b]
            value_term += (value[t, b].item() - vs[t, b].item()) ** 2 * w[t][b]
            entropy_term += entropy_values[t, b].item() * w[t][b]
    n = steps * batch
    return (policy / n, value_term / n, entropy_term / n), vs, adv


def _rand(*shape, generator, dtype=torch.float64):
    return torch.randn(*shape, generator=generator, dtype=dtype)


def _weights(steps, batch, generator, low=0.2, high=2.0):
    return low + (high - low) * torch.rand(steps, batch, generator=generator, dtype=torch.float64)


def _discrete_batch(steps, batch, actions, seed, with_weight=True):
    generator = torch.Generator().manual_seed(seed)
    target = _rand(steps, batch, actions, generator=generator)
    behaviour = _rand(steps, batch, actions, generator=generator)
    action = torch.randint(actions, (steps, batch), generator=generator)
    value = _rand(steps + 1, batch, generator=generator)
    reward = _rand(steps, batch, generator=generator)
    weight = torch.rand(steps, batch, generator=generator, dtype=torch.float64) if with_weight else None
    return vtrace_data(target, behaviour, action, value, reward, weight)


def _continuous_batch(steps, batch, dims, seed, with_weight=True, spread=1.0):
    generator = torch.Generator().manual_seed(seed)
    mu = _rand(steps, batch, dims, generator=generator)
    sigma = 0.5 + torch.rand(steps, batch, dims, generator=generator, dtype=torch.float64)
    behaviour_mu = mu + spread * 0.3 * _rand(steps, batch, dims, generator=generator)
    behaviour_sigma = sigma * (
        1 + spread * 0.2 * torch.rand(steps, batch, dims, generator=generator, dtype=torch.float64)
    )
    action = behaviour_mu + behaviour_sigma * _rand(steps, batch, dims, generator=generator)
    value = _rand(steps + 1, batch, generator=generator)
    reward = _rand(steps, batch, generator=generator)
    weight = torch.rand(steps, batch, generator=generator, dtype=torch.float64) if with_weight else None
    return vtrace_data(
        {"mu": mu, "sigma": sigma}, {"mu": behaviour_mu, "sigma": behaviour_sigma}, action, value, reward, weight
    )


def _clone_tree(x):
    if isinstance(x, dict):
        return {k: _clone_tree(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(_clone_tree(v) for v in x) if not hasattr(x, "_fields") else type(x)(*map(_clone_tree, x))
    return None if x is None else x.detach().clone()


def _assert_same_tree(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same_tree(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        for x, y in zip(a, b):
            _assert_same_tree(x, y)
    elif a is None:
        assert b is None
    else:
        assert torch.equal(a, b.detach()), "an input was mutated"


def _episode_flags(steps, batch, generator, p_done=0.15, p_truncate=0.15):
    done = (torch.rand(steps, batch, generator=generator) < p_done).double()
    traj_flag = torch.maximum(done, (torch.rand(steps, batch, generator=generator) < p_truncate).double())
    next_value = _rand(steps, batch, generator=generator)
    return done, traj_flag, next_value


# ---------------------------------------------------------------- vtrace_nstep_return: hand cases and references


def test_docstring_example():
    ones = torch.ones(3, 1)
    vs = vtrace_nstep_return(ones, ones, ones, torch.zeros(4, 1), gamma=1.0, lambda_=1.0)
    assert torch.allclose(vs[:, 0], torch.tensor([3.0, 2.0, 1.0]))


def test_hand_case():
    # T = 2, B = 1, gamma = 0.5, lambda = 1. V = [1, 2, 4], r = [1, 1], rho = [0.5, 1], c = [0.5, 1].
    # delta0 = 0.5 (1 + 1 - 1) = 0.5, delta1 = 1 (1 + 2 - 2) = 1.
    # v1 = 2 + 1 = 3; v0 = 1 + 0.5 + 0.5 * 1 * 0.5 * 1 = 1.75
    col = lambda xs: torch.tensor(xs, dtype=torch.float64).unsqueeze(1)  # noqa: E731
    vs = vtrace_nstep_return(col([0.5, 1.0]), col([0.5, 1.0]), col([1.0, 1.0]), col([1.0, 2.0, 4.0]), 0.5, 1.0)
    assert torch.allclose(vs, col([1.75, 3.0]), rtol=0, atol=1e-12)
    # terminated at step 1: v1 = 2 + (1 - 2) = 1; v0 = 1 + 0.5 + 0.5 * 0.5 * (1 - 2) = 1.25
    vs = vtrace_nstep_return(
        col([0.5, 1.0]), col([0.5, 1.0]), col([1.0, 1.0]), col([1.0, 2.0, 4.0]), 0.5, 1.0, done=col([0.0, 1.0])
    )
    assert torch.allclose(vs, col([1.25, 1.0]), rtol=0, atol=1e-12)
    # truncated at step 0 with V(final obs) = 6: v0 = 1 + 0.5 (1 + 3 - 1) = 2.5, no trace from step 1
    vs = vtrace_nstep_return(
        col([0.5, 1.0]),
        col([0.5, 1.0]),
        col([1.0, 1.0]),
        col([1.0, 2.0, 4.0]),
        0.5,
        1.0,
        traj_flag=col([1.0, 0.0]),
        next_value=col([6.0, 4.0]),
    )
    assert torch.allclose(vs, col([2.5, 3.0]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("steps", [1, 2, 3, 7, 64, 257])
def test_random_against_paper_and_dingo(steps):
    generator = torch.Generator().manual_seed(steps)
    batch = 3
    importance = torch.exp(0.5 * _rand(steps, batch, generator=generator))
    rhos, cs = importance.clamp(max=1.0), importance.clamp(max=0.9)
    reward = _rand(steps, batch, generator=generator)
    values = _rand(steps + 1, batch, generator=generator)
    before = _clone_tree((rhos, cs, reward, values))
    vs = vtrace_nstep_return(rhos, cs, reward, values, 0.99, 0.95)
    _assert_same_tree(before, (rhos, cs, reward, values))
    assert vs.shape == (steps, batch) and vs.dtype == torch.float64
    assert torch.allclose(vs, _vtrace_reference(rhos, cs, reward, values, 0.99, 0.95), rtol=0, atol=1e-10)
    assert torch.allclose(vs, _vtrace_nstep_return_dingo(rhos, cs, reward, values, 0.99, 0.95), rtol=0, atol=1e-10)
    if steps <= 7:
        assert torch.allclose(vs, _vtrace_paper_sum(rhos, cs, reward, values, 0.99, 0.95), rtol=0, atol=1e-10)


def test_plain_call_equals_dingo_exactly():
    # Dyadic inputs make every operation exact, so the scan and DI-engine's loop must agree bit for bit.
    generator = torch.Generator().manual_seed(11)
    steps, batch = 19, 4
    rhos = torch.randint(0, 5, (steps, batch), generator=generator).double() / 4
    cs = torch.randint(0, 5, (steps, batch), generator=generator).double() / 4
    reward = torch.randint(-8, 9, (steps, batch), generator=generator).double() / 8
    values = torch.randint(-8, 9, (steps + 1, batch), generator=generator).double() / 8
    vs = vtrace_nstep_return(rhos, cs, reward, values, 0.5, 0.5, done=None, traj_flag=None, next_value=None)
    assert torch.equal(vs, _vtrace_nstep_return_dingo(rhos, cs, reward, values, 0.5, 0.5))


def test_float32_against_float64_reference():
    generator = torch.Generator().manual_seed(12)
    steps, batch = 64, 5
    importance = torch.exp(0.5 * _rand(steps, batch, generator=generator))
    reward, values = _rand(steps, batch, generator=generator), _rand(steps + 1, batch, generator=generator)
    done, traj_flag, next_value = _episode_flags(steps, batch, generator)
    expected = _vtrace_reference(
        importance.clamp(max=1), importance.clamp(max=1), reward, values, 0.99, 0.95, done, traj_flag, next_value
    )
    vs = vtrace_nstep_return(
        importance.clamp(max=1).float(),
        importance.clamp(max=1).float(),
        reward.float(),
        values.float(),
        0.99,
        0.95,
        done=done.bool(),
        traj_flag=traj_flag.bool(),
        next_value=next_value.float(),
    )
    assert vs.dtype == torch.float32
    assert torch.allclose(vs.double(), expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(
    steps=st.integers(1, 40),
    batch=st.integers(1, 3),
    gamma=st.floats(0.0, 1.0),
    lambda_=st.floats(0.0, 1.0),
    rho_bar=st.floats(0.1, 5.0),
    c_bar=st.floats(0.1, 5.0),
    episode_ends=st.sampled_from(["none", "done", "done+traj_flag", "traj_flag+next_value"]),
    per_step_gamma=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_property_against_loops(steps, batch, gamma, lambda_, rho_bar, c_bar, episode_ends, per_step_gamma, seed):
    generator = torch.Generator().manual_seed(seed)
    importance = torch.exp(_rand(steps, batch, generator=generator))
    rhos, cs = importance.clamp(max=rho_bar), importance.clamp(max=c_bar)
    reward, values = _rand(steps, batch, generator=generator), _rand(steps + 1, batch, generator=generator)
    done, traj_flag, next_value = _episode_flags(steps, batch, generator)
    if per_step_gamma:
        gamma = gamma * torch.rand(steps, batch, generator=generator, dtype=torch.float64)
    kwargs = {
        "none": {},
        "done": {"done": done},
        "done+traj_flag": {"done": done, "traj_flag": traj_flag},
        "traj_flag+next_value": {"traj_flag": traj_flag, "next_value": next_value},
    }[episode_ends]
    vs = vtrace_nstep_return(rhos, cs, reward, values, gamma, lambda_, **kwargs)
    assert torch.allclose(vs, _vtrace_reference(rhos, cs, reward, values, gamma, lambda_, **kwargs), rtol=0, atol=1e-10)
    if not kwargs and not per_step_gamma:
        assert torch.allclose(vs, _vtrace_nstep_return_dingo(rhos, cs, reward, values, gamma, lambda_), atol=1e-10)


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize("steps", [1, 5, 30])
def test_on_policy_unclipped_is_lambda_return(steps):
    generator = torch.Generator().manual_seed(20 + steps)
    ones = torch.ones(steps, 2, dtype=torch.float64)
    reward, values = _rand(steps, 2, generator=generator), _rand(steps + 1, 2, generator=generator)
    for gamma, lambda_ in ((0.9, 0.8), (0.99, 0.0), (0.5, 1.0)):
        vs = vtrace_nstep_return(ones, ones, reward, values, gamma, lambda_)
        assert torch.allclose(vs, generalized_lambda_returns(values, reward, gamma, lambda_), rtol=0, atol=1e-10)
        adv = gae(gae_data(values[:-1], values[1:], reward, None, None), gamma, lambda_)
        assert torch.allclose(vs, adv + values[:-1], rtol=0, atol=1e-10)


@pytest.mark.parametrize("steps", [1, 4, 25])
def test_lambda_one_unclipped_is_nstep_return(steps):
    generator = torch.Generator().manual_seed(40 + steps)
    ones = torch.ones(steps, 3, dtype=torch.float64)
    reward, values = _rand(steps, 3, generator=generator), _rand(steps + 1, 3, generator=generator)
    gamma = 0.95
    expected = torch.zeros(steps, 3, dtype=torch.float64)
    for b in range(3):
        for t in range(steps):
            expected[t, b] = sum(gamma ** (k - t) * reward[k, b].item() for k in range(t, steps))
            expected[t, b] += gamma ** (steps - t) * values[steps, b].item()
    assert torch.allclose(vtrace_nstep_return(ones, ones, reward, values, gamma, 1.0), expected, rtol=0, atol=1e-10)


def _unroll(steps, batch, seed):
    generator = torch.Generator().manual_seed(seed)
    importance = torch.exp(0.5 * _rand(steps, batch, generator=generator))
    return (
        importance.clamp(max=1.0),
        importance.clamp(max=1.0),
        _rand(steps, batch, generator=generator),
        _rand(steps + 1, batch, generator=generator),
    )


def test_termination_cuts_the_unroll():
    steps, batch, end = 12, 3, 5
    rhos, cs, reward, values = _unroll(steps, batch, seed=50)
    done = torch.zeros(steps, batch, dtype=torch.float64)
    done[end] = 1.0
    vs = vtrace_nstep_return(rhos, cs, reward, values, 0.9, 0.95, done=done)
    # the terminated step: rho (r - V) + V
    expected_end = rhos[end] * (reward[end] - values[end]) + values[end]
    assert torch.allclose(vs[end], expected_end, rtol=0, atol=1e-12)
    # nothing after the end leaks back: perturb rewards, values, weights of the next episode
    reward2, values2, rhos2, cs2 = reward.clone(), values.clone(), rhos.clone(), cs.clone()
    reward2[end + 1 :] += 100.0
    values2[end + 1 :] -= 50.0
    rhos2[end + 1 :] *= 0.5
    cs2[end + 1 :] *= 0.25
    vs2 = vtrace_nstep_return(rhos2, cs2, reward2, values2, 0.9, 0.95, done=done)
    assert torch.equal(vs[: end + 1], vs2[: end + 1])
    assert not torch.equal(vs[end + 1 :], vs2[end + 1 :])
    # the step before the end: v = V + rho (r + gamma V[end] - V) + gamma lambda c (v[end] - V[end])
    t = end - 1
    expected = (
        values[t] + rhos[t] * (reward[t] + 0.9 * values[end] - values[t]) + 0.9 * 0.95 * cs[t] * (vs[end] - values[end])
    )
    assert torch.allclose(vs[t], expected, rtol=0, atol=1e-12)
    assert torch.allclose(vs, _vtrace_reference(rhos, cs, reward, values, 0.9, 0.95, done), rtol=0, atol=1e-10)


def test_truncation_bootstraps_from_next_value():
    steps, batch, end = 10, 2, 3
    rhos, cs, reward, values = _unroll(steps, batch, seed=51)
    traj_flag = torch.zeros(steps, batch, dtype=torch.float64)
    traj_flag[end] = 1.0
    next_value = values[1:].clone()
    next_value[end] = torch.tensor([7.0, -3.0], dtype=torch.float64)  # V(final observation), not V[end + 1]
    vs = vtrace_nstep_return(rhos, cs, reward, values, 0.9, 0.95, traj_flag=traj_flag, next_value=next_value)
    expected_end = values[end] + rhos[end] * (reward[end] + 0.9 * next_value[end] - values[end])
    assert torch.allclose(vs[end], expected_end, rtol=0, atol=1e-12)
    # targets up to the end ignore the next episode's rewards and values (next_value held fixed)
    reward2, values2 = reward.clone(), values.clone()
    reward2[end + 1 :] += 10.0
    values2[end + 1 :] += 10.0
    vs2 = vtrace_nstep_return(rhos, cs, reward2, values2, 0.9, 0.95, traj_flag=traj_flag, next_value=next_value)
    assert torch.equal(vs[: end + 1], vs2[: end + 1])
    # ... and do depend on the final observation's value
    next_value3 = next_value.clone()
    next_value3[end] += 1.0
    vs3 = vtrace_nstep_return(rhos, cs, reward, values, 0.9, 0.95, traj_flag=traj_flag, next_value=next_value3)
    assert torch.allclose(vs3[end] - vs[end], 0.9 * rhos[end], rtol=0, atol=1e-12)
    # without next_value, truncation bootstraps from bootstrap_values[t + 1]
    default = vtrace_nstep_return(rhos, cs, reward, values, 0.9, 0.95, traj_flag=traj_flag)
    assert torch.allclose(default, _vtrace_reference(rhos, cs, reward, values, 0.9, 0.95, None, traj_flag), atol=1e-10)


def test_per_step_gamma_tensor():
    steps, batch = 9, 3
    rhos, cs, reward, values = _unroll(steps, batch, seed=52)
    gamma = torch.rand(steps, batch, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    vs = vtrace_nstep_return(rhos, cs, reward, values, gamma, 0.9)
    assert torch.allclose(vs, _vtrace_reference(rhos, cs, reward, values, gamma, 0.9), rtol=0, atol=1e-10)
    constant = torch.full((steps, batch), 0.97, dtype=torch.float64)
    assert torch.allclose(
        vtrace_nstep_return(rhos, cs, reward, values, constant, 0.9),
        vtrace_nstep_return(rhos, cs, reward, values, 0.97, 0.9),
        rtol=0,
        atol=1e-12,
    )
    # a zero discount is a termination for the value it bootstraps
    gamma[4] = 0.0
    done = torch.zeros(steps, batch, dtype=torch.float64)
    done[4] = 1.0
    assert torch.allclose(
        vtrace_nstep_return(rhos, cs, reward, values, gamma, 0.9),
        _vtrace_reference(rhos, cs, reward, values, gamma, 0.9, done),
        rtol=0,
        atol=1e-10,
    )


def test_vs_carries_no_gradient_and_no_mutation():
    steps, batch = 6, 2
    rhos, cs, reward, values = (x.clone().requires_grad_(True) for x in _unroll(steps, batch, seed=53))
    generator = torch.Generator().manual_seed(1)
    done, traj_flag, next_value = _episode_flags(steps, batch, generator)
    next_value.requires_grad_(True)
    inputs = (rhos, cs, reward, values, done, traj_flag, next_value)
    before = _clone_tree(inputs)
    vs = vtrace_nstep_return(rhos, cs, reward, values, 0.9, 0.9, done=done, traj_flag=traj_flag, next_value=next_value)
    assert not vs.requires_grad
    _assert_same_tree(before, inputs)
    adv = vtrace_advantage(rhos, reward, vs, values[:-1], 0.9)
    assert not adv.requires_grad


def test_vtrace_advantage_formula():
    generator = torch.Generator().manual_seed(54)
    pg, reward, ret, value = (_rand(5, 2, generator=generator) for _ in range(4))
    assert torch.allclose(vtrace_advantage(pg, reward, ret, value, 0.9), pg * (reward + 0.9 * ret - value), atol=1e-12)
    gamma = torch.rand(5, 2, generator=generator, dtype=torch.float64)
    assert torch.allclose(
        vtrace_advantage(pg, reward, ret, value, gamma), pg * (reward + gamma * ret - value), atol=1e-12
    )


# ---------------------------------------------------------------- importance weights


def test_compute_importance_weights():
    data = _discrete_batch(4, 3, 5, seed=60)
    target_logp, _ = _categorical_terms(data.target_output, data.action)
    behaviour_logp, _ = _categorical_terms(data.behaviour_output, data.action)
    expected = (target_logp - behaviour_logp).exp()
    target = data.target_output.clone().requires_grad_(True)
    detached = compute_importance_weights(target, data.behaviour_output, data.action)
    assert not detached.requires_grad
    assert torch.allclose(detached, expected, rtol=1e-12, atol=0)
    with_grad = compute_importance_weights(target, data.behaviour_output, data.action, "discrete", requires_grad=True)
    assert with_grad.requires_grad
    (grad,) = torch.autograd.grad(with_grad.sum(), target)
    # d ratio / d logits = ratio * (onehot(a) - softmax)
    expected_grad = expected.unsqueeze(-1) * (F.one_hot(data.action, 5).double() - target.detach().softmax(-1))
    assert torch.allclose(grad, expected_grad, rtol=1e-10, atol=1e-12)

    cont = _continuous_batch(4, 3, 2, seed=61)
    t_logp, _ = _gaussian_terms(cont.target_output["mu"], cont.target_output["sigma"], cont.action)
    b_logp, _ = _gaussian_terms(cont.behaviour_output["mu"], cont.behaviour_output["sigma"], cont.action)
    got = compute_importance_weights(cont.target_output, cont.behaviour_output, cont.action, "continuous")
    assert torch.allclose(got, (t_logp - b_logp).exp(), rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="action_space_type"):
        compute_importance_weights(data.target_output, data.behaviour_output, data.action, "box")


# ---------------------------------------------------------------- losses vs the loops and DI-engine


CLIPS = [(1.0, 1.0, 1.0), (1.5, 0.8, 0.5), (100.0, 100.0, 100.0)]


@pytest.mark.parametrize("clips", CLIPS)
@pytest.mark.parametrize("with_weight", [False, True])
def test_discrete_loss_against_loops_and_dingo(clips, with_weight):
    data = _discrete_batch(7, 3, 4, seed=70, with_weight=with_weight)
    target = data.target_output.clone().requires_grad_(True)
    value = data.value.clone().requires_grad_(True)
    data = data._replace(target_output=target, value=value)
    before = _clone_tree(data)
    loss = vtrace_error_discrete_action(data, 0.95, 0.9, *clips)
    _assert_same_tree(before, data)
    assert isinstance(loss, vtrace_loss) and all(x.dim() == 0 for x in loss)
    target_logp, ent = _categorical_terms(target.detach(), data.action)
    behaviour_logp, _ = _categorical_terms(data.behaviour_output, data.action)
    expected, vs, adv = _loss_reference(
        target_logp, behaviour_logp, ent, value.detach(), data.reward, data.weight, 0.95, 0.9, *clips
    )
    for got, want in zip(loss, expected):
        assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-12)
    dingo = _vtrace_error_dingo(_clone_tree(data)._replace(target_output=target, value=value), 0.95, 0.9, *clips)
    grads = torch.autograd.grad(sum(loss), (target, value))
    dingo_grads = torch.autograd.grad(sum(dingo), (target, value))
    for got, want in zip(loss, dingo):
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)
    for got, want in zip(grads, dingo_grads):
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)
    # value gradient by hand: only the value loss, with vs a constant
    w = torch.ones_like(data.reward) if data.weight is None else data.weight
    expected_value_grad = torch.zeros_like(value)
    expected_value_grad[:-1] = 2 * (value.detach()[:-1] - vs) * w / vs.numel()
    assert torch.allclose(grads[1], expected_value_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("clips", CLIPS)
def test_continuous_loss_against_loops_and_dingo(clips):
    data = _continuous_batch(6, 3, 2, seed=71, spread=3.0)
    mu = data.target_output["mu"].clone().requires_grad_(True)
    sigma = data.target_output["sigma"].clone().requires_grad_(True)
    value = data.value.clone().requires_grad_(True)
    data = data._replace(target_output={"mu": mu, "sigma": sigma}, value=value)
    before = _clone_tree(data)
    loss = vtrace_error_continuous_action(data, 0.9, 0.95, *clips)
    _assert_same_tree(before, data)
    t_logp, ent = _gaussian_terms(mu.detach(), sigma.detach(), data.action)
    b_logp, _ = _gaussian_terms(data.behaviour_output["mu"], data.behaviour_output["sigma"], data.action)
    expected, _, _ = _loss_reference(t_logp, b_logp, ent, value.detach(), data.reward, data.weight, 0.9, 0.95, *clips)
    for got, want in zip(loss, expected):
        assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-12)
    dingo = _vtrace_error_dingo(data, 0.9, 0.95, *clips, continuous=True)
    grads = torch.autograd.grad(sum(loss), (mu, sigma, value))
    dingo_grads = torch.autograd.grad(sum(dingo), (mu, sigma, value))
    for got, want in zip(loss, dingo):
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)
    for got, want in zip(grads, dingo_grads):
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)


def test_loss_with_episode_ends_against_loops():
    steps, batch = 9, 4
    data = _discrete_batch(steps, batch, 3, seed=72)
    generator = torch.Generator().manual_seed(2)
    done, traj_flag, next_value = _episode_flags(steps, batch, generator, 0.2, 0.2)
    done[-1, 0], traj_flag[-1, 1], done[0, 2], traj_flag[0, 3] = 1.0, 1.0, 1.0, 1.0  # ends at first and last step
    traj_flag = torch.maximum(traj_flag, done)
    target_logp, ent = _categorical_terms(data.target_output, data.action)
    behaviour_logp, _ = _categorical_terms(data.behaviour_output, data.action)
    gamma = 0.8 + 0.2 * torch.rand(steps, batch, generator=generator, dtype=torch.float64)
    for kwargs in (
        {"done": done},
        {"done": done, "traj_flag": traj_flag, "next_value": next_value},
        {"traj_flag": traj_flag, "next_value": next_value},
        {"traj_flag": traj_flag},
    ):
        for discount in (0.9, gamma):
            loss = vtrace_error_discrete_action(data, discount, 0.9, 1.2, 1.0, 0.9, **kwargs)
            expected, _, _ = _loss_reference(
                target_logp,
                behaviour_logp,
                ent,
                data.value,
                data.reward,
                data.weight,
                discount,
                0.9,
                1.2,
                1.0,
                0.9,
                **kwargs,
            )
            for got, want in zip(loss, expected):
                assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-12), kwargs


def test_terminated_step_advantage_by_hand():
    # T = 1: terminated -> adv = rho_pg (r - V), policy_loss = -log pi(a) adv; truncated -> r + gamma V(final obs).
    logits = torch.tensor([[[0.0, math.log(3.0)]]], dtype=torch.float64)  # pi = [0.25, 0.75]
    behaviour = torch.zeros(1, 1, 2, dtype=torch.float64)  # mu = [0.5, 0.5] -> ratio(a=1) = 1.5
    action = torch.tensor([[1]])
    value = torch.tensor([[2.0], [5.0]], dtype=torch.float64)
    reward = torch.tensor([[1.0]], dtype=torch.float64)
    data = vtrace_data(logits, behaviour, action, value, reward, None)
    one = torch.ones(1, 1, dtype=torch.float64)
    terminated = vtrace_error_discrete_action(data, 0.5, 1.0, 1.0, 1.0, 1.0, done=one)
    # rho = 1 (clipped): vs = 2 + (1 - 2) = 1, adv = 1 * (1 - 2) = -1
    assert terminated.policy_loss.item() == pytest.approx(math.log(0.75), abs=1e-12)
    assert terminated.value_loss.item() == pytest.approx(1.0, abs=1e-12)
    truncated = vtrace_error_discrete_action(data, 0.5, 1.0, 1.0, 1.0, 1.0, traj_flag=one, next_value=8 * one)
    # vs = 2 + (1 + 4 - 2) = 5, adv = 3
    assert truncated.policy_loss.item() == pytest.approx(-3 * math.log(0.75), abs=1e-12)
    assert truncated.value_loss.item() == pytest.approx(9.0, abs=1e-12)
    plain = vtrace_error_discrete_action(data, 0.5, 1.0, 1.0, 1.0, 1.0)
    # bootstraps from V[1] = 5: vs = 2 + (1 + 2.5 - 2) = 3.5, adv = 1.5
    assert plain.policy_loss.item() == pytest.approx(-1.5 * math.log(0.75), abs=1e-12)
    assert plain.value_loss.item() == pytest.approx(2.25, abs=1e-12)
    assert plain.entropy_loss.item() == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), abs=1e-12)


# ---------------------------------------------------------------- gradcheck


def test_gradcheck_discrete_target_logits():
    # With every importance weight above the clip levels the truncated weights are constants, so the V-trace
    # targets and advantages do not move with the logits and the loss is an ordinary differentiable function.
    data = _discrete_batch(4, 2, 3, seed=80)
    clip = 1e-3
    assert compute_importance_weights(data.target_output, data.behaviour_output, data.action).min() > 10 * clip

    def losses(logits):
        loss = vtrace_error_discrete_action(data._replace(target_output=logits), 0.9, 0.9, clip, clip, clip)
        assert not loss.value_loss.requires_grad  # the value does not require grad here
        return loss.policy_loss, loss.entropy_loss

    assert torch.autograd.gradcheck(losses, (data.target_output.clone().requires_grad_(True),), fast_mode=True)


def test_gradcheck_continuous_mu_sigma():
    data = _continuous_batch(3, 2, 2, seed=81, spread=0.3)
    clip = 1e-2
    assert compute_importance_weights(data.target_output, data.behaviour_output, data.action, "continuous").min() > (
        10 * clip
    )

    def losses(mu, sigma):
        target = {"mu": mu, "sigma": sigma}
        loss = vtrace_error_continuous_action(data._replace(target_output=target), 0.9, 0.9, clip, clip, clip)
        assert not loss.value_loss.requires_grad
        return loss.policy_loss, loss.entropy_loss

    inputs = (
        data.target_output["mu"].clone().requires_grad_(True),
        data.target_output["sigma"].clone().requires_grad_(True),
    )
    assert torch.autograd.gradcheck(losses, inputs, fast_mode=True)


@pytest.mark.parametrize("continuous", [False, True])
def test_gradcheck_value(continuous):
    # target = behaviour (ratios exactly 1) and gamma = 0: vs = V + (r - V) = r does not move with the value,
    # so the value loss is an ordinary function of it.
    if continuous:
        data = _continuous_batch(4, 3, 2, seed=82)
        data = data._replace(behaviour_output=dict(data.target_output))
        error = vtrace_error_continuous_action
    else:
        data = _discrete_batch(4, 3, 3, seed=82)
        data = data._replace(behaviour_output=data.target_output.clone())
        error = vtrace_error_discrete_action

    def value_loss(value):
        return error(data._replace(value=value), 0.0, 0.9).value_loss

    assert torch.autograd.gradcheck(value_loss, (data.value.clone().requires_grad_(True),), fast_mode=True)


# ---------------------------------------------------------------- shape errors


def test_nstep_return_shape_errors():
    ones, values = torch.ones(4, 2), torch.zeros(5, 2)
    with pytest.raises(ValueError, match="bootstrap_values"):
        vtrace_nstep_return(ones, ones, ones, torch.zeros(4, 2))
    with pytest.raises(ValueError, match="bootstrap_values"):
        vtrace_nstep_return(ones, ones, ones, torch.zeros(5, 3))
    with pytest.raises(ValueError, match="clipped_rhos"):
        vtrace_nstep_return(torch.ones(3, 2), ones, ones, values)
    with pytest.raises(ValueError, match="clipped_cs"):
        vtrace_nstep_return(ones, torch.ones(4, 1), ones, values)
    with pytest.raises(ValueError, match="reward"):
        vtrace_nstep_return(ones, ones, torch.ones(4), values)
    for field in ("done", "traj_flag", "next_value"):
        with pytest.raises(ValueError, match=field):
            vtrace_nstep_return(ones, ones, ones, values, **{field: torch.zeros(5, 2)})
    with pytest.raises(ValueError, match="return_"):
        vtrace_advantage(ones, ones, torch.ones(5, 2), ones, 0.9)
    with pytest.raises(ValueError, match="bootstrap_values"):
        vtrace_advantage(ones, ones, ones, values, 0.9)


def test_loss_shape_errors():
    data = _discrete_batch(4, 2, 3, seed=90)
    with pytest.raises(ValueError, match="value"):
        vtrace_error_discrete_action(data._replace(value=torch.zeros(4, 2, dtype=torch.float64)))
    with pytest.raises(ValueError, match="weight"):
        vtrace_error_discrete_action(data._replace(weight=torch.ones(3, 2, dtype=torch.float64)))
    with pytest.raises(ValueError, match="behaviour_output"):
        vtrace_error_discrete_action(data._replace(behaviour_output=torch.zeros(4, 2, 4, dtype=torch.float64)))
    with pytest.raises(ValueError, match="action"):
        vtrace_error_discrete_action(data._replace(action=torch.zeros(4, 3, dtype=torch.long)))
    with pytest.raises(ValueError, match="target_output"):
        vtrace_error_discrete_action(data._replace(target_output=torch.zeros(4, 2, dtype=torch.float64)))
    with pytest.raises(ValueError, match="next_value"):
        vtrace_error_discrete_action(data, traj_flag=torch.zeros(4, 2), next_value=torch.zeros(5, 2))
    cont = _continuous_batch(4, 2, 2, seed=91)
    with pytest.raises(ValueError, match="behaviour_output"):
        vtrace_error_continuous_action(cont._replace(behaviour_output=cont.behaviour_output["mu"]))
    with pytest.raises(ValueError, match="action"):
        vtrace_error_continuous_action(cont._replace(action=torch.zeros(4, 2, 3, dtype=torch.float64)))
    with pytest.raises(ValueError, match="value"):
        vtrace_error_continuous_action(cont._replace(value=torch.zeros(4, 2, dtype=torch.float64)))


# ---------------------------------------------------------------- shapes DI-engine 0.5.3 accepts beyond (T, B)
# The float64 references above run column by column on (T, B); a (T,) or (T, B, A) input is checked against them on
# its columns, i.e. reshaped to (T, -1).


def _columns(x: torch.Tensor, trailing: int = 0) -> torch.Tensor:
    return x.reshape(x.shape[0], -1, *x.shape[x.ndim - trailing :]) if trailing else x.reshape(x.shape[0], -1)


@pytest.mark.parametrize("shape", [(7,), (7, 3, 2), (1,)])
def test_nstep_return_single_trajectory_and_extra_dimensions(shape):
    generator = torch.Generator().manual_seed(len(shape))
    steps = shape[0]
    rhos = 2.0 * torch.rand(shape, generator=generator, dtype=torch.float64)
    cs = torch.rand(shape, generator=generator, dtype=torch.float64)
    reward = torch.randn(shape, generator=generator, dtype=torch.float64)
    values = torch.randn((steps + 1, *shape[1:]), generator=generator, dtype=torch.float64)
    before = _clone_tree((rhos, cs, reward, values))
    vs = vtrace_nstep_return(rhos, cs, reward, values, 0.9, 0.8)
    _assert_same_tree(before, (rhos, cs, reward, values))
    assert vs.shape == shape and not vs.requires_grad
    expected = _vtrace_reference(_columns(rhos), _columns(cs), _columns(reward), _columns(values), 0.9, 0.8)
    assert torch.allclose(_columns(vs), expected, rtol=0, atol=1e-10)
    # episode ends: bool done, float traj_flag, next_value, all of reward's shape
    done = torch.rand(shape, generator=generator) < 0.3
    traj_flag = (done | (torch.rand(shape, generator=generator) < 0.3)).double()
    next_value = torch.randn(shape, generator=generator, dtype=torch.float64)
    ends = vtrace_nstep_return(
        rhos, cs, reward, values, 0.9, 0.8, done=done, traj_flag=traj_flag, next_value=next_value
    )
    expected = _vtrace_reference(
        _columns(rhos), _columns(cs), _columns(reward), _columns(values), 0.9, 0.8,
        _columns(done), _columns(traj_flag), _columns(next_value),
    )
    assert ends.shape == shape and torch.allclose(_columns(ends), expected, rtol=0, atol=1e-10)


def test_nstep_return_integer_rewards_of_a_single_trajectory():
    rhos = cs = torch.ones(3)
    vs = vtrace_nstep_return(rhos, cs, torch.tensor([1, 2, 3]), torch.zeros(4), gamma=0.5, lambda_=1.0)
    assert torch.allclose(vs, torch.tensor([1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3.0]))  # DI-engine's LongTensor reward


def _discrete_of_shape(lead: tuple, actions: int, seed: int) -> vtrace_data:
    generator = torch.Generator().manual_seed(seed)
    steps = lead[0]
    return vtrace_data(
        torch.randn((*lead, actions), generator=generator, dtype=torch.float64),
        torch.randn((*lead, actions), generator=generator, dtype=torch.float64),
        torch.randint(actions, lead, generator=generator),
        torch.randn((steps + 1, *lead[1:]), generator=generator, dtype=torch.float64),
        torch.randn(lead, generator=generator, dtype=torch.float64),
        torch.rand(lead, generator=generator, dtype=torch.float64),
    )


@pytest.mark.parametrize("lead", [(6,), (5, 2, 3)])  # (T,) one trajectory; (T, B, A) agents
def test_discrete_loss_single_trajectory_and_extra_dimensions(lead):
    data = _discrete_of_shape(lead, 3, seed=80 + len(lead))
    before = _clone_tree(data)
    loss = vtrace_error_discrete_action(data, 0.95, 0.9, 1.0, 1.0, 1.0)
    _assert_same_tree(before, data)
    action = _columns(data.action)
    target_logp, ent = _categorical_terms(_columns(data.target_output, 1), action)
    behaviour_logp, _ = _categorical_terms(_columns(data.behaviour_output, 1), action)
    expected, _, _ = _loss_reference(
        target_logp, behaviour_logp, ent, _columns(data.value), _columns(data.reward), _columns(data.weight),
        0.95, 0.9, 1.0, 1.0, 1.0,
    )
    for got, want in zip(loss, expected):
        assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("lead", [(6,), (5, 2, 3)])
@pytest.mark.parametrize("shared_sigma", [False, True])
def test_continuous_loss_single_trajectory_extra_dimensions_and_shared_sigma(lead, shared_sigma):
    generator = torch.Generator().manual_seed(90 + len(lead))
    steps, dims = lead[0], 2
    mu = torch.randn((*lead, dims), generator=generator, dtype=torch.float64)
    sigma = 0.5 + torch.rand((*lead, dims), generator=generator, dtype=torch.float64)
    behaviour_mu = mu + 0.3 * torch.randn((*lead, dims), generator=generator, dtype=torch.float64)
    behaviour_sigma = 1.2 * sigma
    if shared_sigma:  # a (D,) state-independent standard deviation, which torch's Normal (DI-engine) broadcasts
        sigma, behaviour_sigma = torch.tensor([0.7, 1.4], dtype=torch.float64), torch.tensor([0.9, 1.1]).double()
    action = behaviour_mu + torch.randn((*lead, dims), generator=generator, dtype=torch.float64)
    value = torch.randn((steps + 1, *lead[1:]), generator=generator, dtype=torch.float64)
    reward = torch.randn(lead, generator=generator, dtype=torch.float64)
    data = vtrace_data({"mu": mu, "sigma": sigma}, {"mu": behaviour_mu, "sigma": behaviour_sigma}, action, value,
                       reward, None)
    loss = vtrace_error_continuous_action(data, 0.9, 0.95, 1.0, 1.0, 1.0)
    full = (*lead, dims)
    t_logp, ent = _gaussian_terms(_columns(mu, 1), _columns(sigma.expand(full), 1), _columns(action, 1))
    b_logp, _ = _gaussian_terms(_columns(behaviour_mu, 1), _columns(behaviour_sigma.expand(full), 1),
                                _columns(action, 1))
    expected, _, _ = _loss_reference(t_logp, b_logp, ent, _columns(value), _columns(reward), None,
                                     0.9, 0.95, 1.0, 1.0, 1.0)
    for got, want in zip(loss, expected):
        assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-12)


def test_loss_per_sample_weight_applies_to_every_step():
    # DI-engine multiplies by weight and broadcasts: a (B,) weight weighs every step of its column.
    data = _discrete_batch(5, 3, 4, seed=95)
    per_sample = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    loss = vtrace_error_discrete_action(data._replace(weight=per_sample), 0.9, 0.9)
    target_logp, ent = _categorical_terms(data.target_output, data.action)
    behaviour_logp, _ = _categorical_terms(data.behaviour_output, data.action)
    expected, _, _ = _loss_reference(target_logp, behaviour_logp, ent, data.value, data.reward,
                                     per_sample.expand(5, 3), 0.9, 0.9, 1.0, 1.0, 1.0)
    for got, want in zip(loss, expected):
        assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-12)
