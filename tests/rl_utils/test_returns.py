"""The backward scan and the discounted-return helpers against plain float64 loops and DI-engine 0.5.3's loops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from zoo.rl_utils._scan import backward_linear_recurrence
from zoo.rl_utils.returns import (
    discount_cumsum,
    discount_with_dones,
    generalized_lambda_returns,
    multistep_forward_view,
    nstep_return,
    nstep_return_data,
    td_lambda_data,
    td_lambda_error,
)

# Every test here runs on both recurrence backends (compiled loops and the numpy scan).
pytestmark = pytest.mark.usefixtures("recurrence_backend")

# ---------------------------------------------------------------- plain-Python references (float64)


def _recurrence_loop(coeff: torch.Tensor, inputs: torch.Tensor, last: torch.Tensor | None) -> torch.Tensor:
    steps = inputs.shape[0]
    width = int(np.prod(inputs.shape[1:]))
    flat_coeff = coeff.double().reshape(steps, width).tolist()
    flat_inputs = inputs.double().reshape(steps, width).tolist()
    following = [0.0] * width if last is None else last.double().reshape(-1).tolist()
    out = [[0.0] * width for _ in range(steps)]
    for t in reversed(range(steps)):
        following = [flat_inputs[t][i] + flat_coeff[t][i] * following[i] for i in range(width)]
        out[t] = following
    return torch.tensor(out, dtype=torch.float64).reshape(inputs.shape)


def _baselines_discount_with_dones(rewards: list[float], dones: list[float], gamma: float) -> list[float]:
    """OpenAI baselines a2c/utils.py discount_with_dones."""
    discounted = []
    r = 0.0
    for reward, done in zip(rewards[::-1], dones[::-1]):
        r = reward + gamma * r * (1.0 - done)
        discounted.append(r)
    return discounted[::-1]


def _lambda_return_loop(values, rewards, gamma, lambda_, done=None) -> torch.Tensor:
    """G[t] = r[t] + (1 - d[t]) gamma[t] ((1 - lambda) V[t+1] + lambda G[t+1]), G[T] = V[T]; values is (T+1, B)."""
    steps, batch = rewards.shape
    gammas = torch.as_tensor(gamma, dtype=torch.float64).expand(steps, batch).tolist()
    lambdas = torch.as_tensor(lambda_, dtype=torch.float64).expand(steps, batch).tolist()
    dones = [[0.0] * batch for _ in range(steps)] if done is None else done.double().tolist()
    v = values.double().tolist()
    r = rewards.double().tolist()
    out = [[0.0] * batch for _ in range(steps)]
    for b in range(batch):
        following = v[steps][b]
        for t in reversed(range(steps)):
            g, lam, nd = gammas[t][b], lambdas[t][b], 1.0 - dones[t][b]
            following = r[t][b] + nd * g * ((1.0 - lam) * v[t + 1][b] + lam * following)
            out[t][b] = following
    return torch.tensor(out, dtype=torch.float64)


def _multistep_forward_view_dingo(bootstrap_values, rewards, gammas, lambda_, done=None):
    """DI-engine 0.5.3 multistep_forward_view, step by step (tensor gammas / lambda_)."""
    result = torch.empty_like(rewards)
    if done is None:
        done = torch.zeros_like(rewards)
    result[-1, :] = rewards[-1, :] + (1 - done[-1, :]) * gammas[-1, :] * bootstrap_values[-1, :]
    discounts = gammas * lambda_
    for t in reversed(range(rewards.size()[0] - 1)):
        result[t, :] = rewards[t, :] + (1 - done[t, :]) * (
            discounts[t, :] * result[t + 1, :] + (gammas[t, :] - discounts[t, :]) * bootstrap_values[t, :]
        )
    return result


def _rand(*shape, generator):
    return torch.randn(*shape, generator=generator, dtype=torch.float64)


# ---------------------------------------------------------------- backward_linear_recurrence


@pytest.mark.parametrize("steps", list(range(34)))
@pytest.mark.parametrize("with_last", [False, True])
def test_scan_against_loop(steps, with_last):
    generator = torch.Generator().manual_seed(1000 + steps)
    coeff = torch.rand(steps, 3, 2, generator=generator, dtype=torch.float64) * 1.5
    coeff[torch.rand(steps, 3, 2, generator=generator) < 0.2] = 0.0  # episode ends
    inputs = _rand(steps, 3, 2, generator=generator)
    last = _rand(3, 2, generator=generator) if with_last else None
    before = (coeff.clone(), inputs.clone(), None if last is None else last.clone())
    try:
        result = backward_linear_recurrence(coeff, inputs, last)
    except IndexError as error:  # T = 0 has nothing to add `last` to: the answer is the empty (0, ...) tensor
        result = error
    assert isinstance(result, torch.Tensor), f"BUG: T={steps}, last given: raised {result!r}, expected shape (0, 3, 2)"
    assert result.shape == inputs.shape and result.dtype == torch.float64
    assert torch.allclose(result, _recurrence_loop(coeff, inputs, last), rtol=1e-12, atol=1e-12)
    assert torch.equal(coeff, before[0]) and torch.equal(inputs, before[1])
    if last is not None:
        assert torch.equal(last, before[2])


def test_scan_zero_coefficients_cut_exactly():
    # A zero coefficient at t=2 makes x[:3] independent of everything after it, bit for bit.
    generator = torch.Generator().manual_seed(0)
    coeff = torch.rand(9, 4, generator=generator, dtype=torch.float64)
    coeff[2] = 0.0
    inputs = _rand(9, 4, generator=generator)
    perturbed = inputs.clone()
    perturbed[3:] += 1e3
    a = backward_linear_recurrence(coeff, inputs, _rand(4, generator=generator))
    b = backward_linear_recurrence(coeff, perturbed, _rand(4, generator=generator) * 7)
    assert torch.equal(a[:3], b[:3])
    assert not torch.equal(a[3:], b[3:])


def test_scan_float32_and_no_gradient():
    generator = torch.Generator().manual_seed(1)
    coeff = torch.rand(50, 2, generator=generator, dtype=torch.float64) * 0.99
    inputs = _rand(50, 2, generator=generator)
    last = _rand(2, generator=generator)
    expected = _recurrence_loop(coeff, inputs, last)
    result = backward_linear_recurrence(
        coeff.float().requires_grad_(True), inputs.float().requires_grad_(True), last.float().requires_grad_(True)
    )
    assert result.dtype == torch.float32 and not result.requires_grad
    assert torch.allclose(result.double(), expected, rtol=1e-5, atol=1e-5)


def test_scan_broadcast_coefficient_view():
    # gae passes an expanded (stride-0) coefficient view.
    coeff = torch.full((1, 1), 0.5, dtype=torch.float64).expand(6, 3)
    inputs = torch.ones(6, 3, dtype=torch.float64)
    expected = _recurrence_loop(coeff.contiguous(), inputs, None)
    assert torch.allclose(backward_linear_recurrence(coeff, inputs), expected, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- discount_cumsum


def test_discount_cumsum_hand_numpy_and_torch():
    x = np.array([1.0, 2.0, 4.0])
    # y = [1 + 0.5 * 2 + 0.25 * 4, 2 + 0.5 * 4, 4] = [3, 4, 4]
    np.testing.assert_allclose(discount_cumsum(x, 0.5), [3.0, 4.0, 4.0], rtol=0, atol=1e-12)
    y = discount_cumsum(torch.tensor(x, dtype=torch.float32), 0.5)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    assert torch.allclose(y, torch.tensor([3.0, 4.0, 4.0]), rtol=0, atol=1e-6)


def test_discount_cumsum_lengths_zero_and_one():
    empty = discount_cumsum(np.zeros(0), 0.9)
    assert isinstance(empty, np.ndarray) and empty.shape == (0,)
    empty_t = discount_cumsum(torch.zeros(0, 3), 0.9)
    assert isinstance(empty_t, torch.Tensor) and empty_t.shape == (0, 3)
    np.testing.assert_allclose(discount_cumsum(np.array([2.5]), 0.9), [2.5])
    np.testing.assert_allclose(discount_cumsum(np.array([[2.5, -1.0]]), 0.9), [[2.5, -1.0]])
    assert torch.equal(discount_cumsum(torch.tensor([[2.5, -1.0]]), 0.9), torch.tensor([[2.5, -1.0]]))


@pytest.mark.parametrize("shape", [(1,), (1, 2)])
def test_discount_cumsum_float64_tensor_of_length_one(shape):
    x = torch.full(shape, 2.5, dtype=torch.float64)
    try:
        got = discount_cumsum(x, 0.9)
    except ValueError as error:  # the reversed lfilter output keeps a negative stride that torch.from_numpy refuses
        got = error
    assert isinstance(got, torch.Tensor) and torch.equal(got, x), (
        f"BUG: discount_cumsum(float64 tensor of shape {shape}) raised {got!r}, expected {x}"
    )


@pytest.mark.parametrize("steps", [2, 5, 40])
def test_discount_cumsum_two_dimensional_against_loop(steps):
    rng = np.random.default_rng(steps)
    x = rng.standard_normal((steps, 3))
    gamma = 0.97
    expected = np.array(
        [[sum(gamma ** (k - t) * x[k, j] for k in range(t, steps)) for j in range(3)] for t in range(steps)]
    )
    np.testing.assert_allclose(discount_cumsum(x, gamma), expected, rtol=1e-12, atol=1e-12)
    as_tensor = discount_cumsum(torch.from_numpy(x.copy()).requires_grad_(True), gamma)
    assert as_tensor.dtype == torch.float64 and not as_tensor.requires_grad
    np.testing.assert_allclose(as_tensor.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_discount_cumsum_does_not_mutate_and_integer_input():
    x = np.array([1.0, 1.0, 1.0])
    before = x.copy()
    discount_cumsum(x, 0.5)
    np.testing.assert_array_equal(x, before)
    out = discount_cumsum(np.array([1, 1, 1]), 0.5)
    assert np.issubdtype(out.dtype, np.floating)
    np.testing.assert_allclose(out, [1.75, 1.5, 1.0])


# ---------------------------------------------------------------- discount_with_dones


def test_discount_with_dones_docstring_case():
    done = torch.tensor([[0.0], [1.0], [0.0]])
    assert torch.allclose(discount_with_dones(torch.ones(3, 1), done, 0.5)[:, 0], torch.tensor([1.5, 1.0, 1.0]))


@pytest.mark.parametrize("steps", [1, 2, 5, 31])
@pytest.mark.parametrize("bootstrap", [False, True])
def test_discount_with_dones_against_baselines(steps, bootstrap):
    generator = torch.Generator().manual_seed(steps)
    reward = _rand(steps, 4, generator=generator)
    done = (torch.rand(steps, 4, generator=generator) < 0.3).double()
    value = _rand(4, generator=generator) if bootstrap else None
    before = (reward.clone(), done.clone())
    gamma = 0.9
    result = discount_with_dones(reward, done, gamma, value)
    assert torch.equal(reward, before[0]) and torch.equal(done, before[1])
    expected = torch.zeros(steps, 4, dtype=torch.float64)
    for b in range(4):
        rewards, dones = reward[:, b].tolist(), done[:, b].tolist()
        if bootstrap:  # baselines' A2C runner: rewards + [value], dones + [0], drop the last entry
            column = _baselines_discount_with_dones(rewards + [value[b].item()], dones + [0.0], gamma)[:-1]
        else:
            column = _baselines_discount_with_dones(rewards, dones, gamma)
        expected[:, b] = torch.tensor(column, dtype=torch.float64)
    assert torch.allclose(result, expected, rtol=0, atol=1e-10)
    # bool dones and done=None
    assert torch.allclose(discount_with_dones(reward, done.bool(), gamma, value), expected, rtol=0, atol=1e-10)
    no_done = discount_with_dones(reward, None, gamma, value)
    assert torch.allclose(no_done, discount_with_dones(reward, torch.zeros_like(done), gamma, value), atol=1e-12)


def test_discount_with_dones_shape_errors():
    with pytest.raises(ValueError, match="done"):
        discount_with_dones(torch.zeros(3, 2), torch.zeros(3, 3), 0.9)
    with pytest.raises(ValueError, match="bootstrap_value"):
        discount_with_dones(torch.zeros(3, 2), None, 0.9, torch.zeros(3))
    with pytest.raises(ValueError, match="reward"):
        discount_with_dones(torch.zeros(3), None, 0.9)


# ---------------------------------------------------------------- nstep_return


def _nstep_float_reference(reward, next_value, done, gamma, nstep, value_gamma=None):
    out = torch.zeros_like(next_value, dtype=torch.float64)
    for index in np.ndindex(*next_value.shape):
        total = sum(gamma**k * reward[(k, *index)].item() for k in range(nstep))
        factor = gamma**nstep if value_gamma is None else value_gamma[index].item()
        total += factor * next_value[index].item() * (1.0 - float(done[index]))
        out[index] = total
    return out


@pytest.mark.parametrize("nstep", [1, 3, 5])
def test_nstep_return_float_gamma(nstep):
    generator = torch.Generator().manual_seed(nstep)
    reward = _rand(nstep, 6, generator=generator)
    next_value = _rand(6, generator=generator)
    done = torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    data = nstep_return_data(reward, next_value, done)
    before = tuple(x.clone() for x in data)
    expected = _nstep_float_reference(reward, next_value, done, 0.9, nstep)
    assert torch.allclose(nstep_return(data, 0.9, nstep), expected, rtol=0, atol=1e-12)
    assert all(torch.equal(old, new) for old, new in zip(before, data))
    value_gamma = torch.rand(6, generator=generator, dtype=torch.float64)
    expected_vg = _nstep_float_reference(reward, next_value, done, 0.9, nstep, value_gamma)
    assert torch.allclose(nstep_return(data, 0.9, nstep, value_gamma), expected_vg, rtol=0, atol=1e-12)
    assert torch.allclose(nstep_return(data._replace(done=done.bool()), 0.9, nstep), expected, rtol=0, atol=1e-12)


def test_nstep_return_hand_case_and_trailing_dims():
    # r = [1, 1, 1], gamma = 0.5: 1 + 0.5 + 0.25 + 0.125 * V(=8) = 2.75; done: 1.75
    reward = torch.ones(3, 2, 2, dtype=torch.float64)
    next_value = torch.full((2, 2), 8.0, dtype=torch.float64)
    done = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    out = nstep_return(nstep_return_data(reward, next_value, done), 0.5, 3)
    assert torch.allclose(out, torch.tensor([[2.75, 1.75], [1.75, 2.75]], dtype=torch.float64), rtol=0, atol=1e-12)


def test_nstep_return_list_gamma_is_per_sample_like_dingo():
    # DI-engine 0.5.3 (NGU): a *list* gamma holds one discount per batch entry (len B, one 0-dim tensor each):
    # return[b] = sum_k gamma_b**k r[k, b] + gamma_b**nstep next_value[b] (1 - done[b]); value_gamma is not used.
    nstep, batch = 3, 4
    generator = torch.Generator().manual_seed(3)
    reward = _rand(nstep, batch, generator=generator)
    next_value = _rand(batch, generator=generator)
    done = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    gammas = [0.9, 0.5, 0.99, 0.0]
    expected = torch.tensor(
        [
            sum(g**k * reward[k, b].item() for k in range(nstep))
            + g**nstep * next_value[b].item() * (1 - done[b].item())
            for b, g in enumerate(gammas)
        ],
        dtype=torch.float64,
    )
    data = nstep_return_data(reward, next_value, done)
    try:
        got = nstep_return(data, [torch.tensor(g) for g in gammas], nstep)
    except ValueError as error:  # zoo reads the list as nstep per-step discounts
        got = error
    assert isinstance(got, torch.Tensor) and torch.allclose(got.double(), expected, atol=1e-6), (
        f"BUG: list gamma (DI-engine: one discount per batch entry, len B={batch}) gave {got!r}, expected {expected}"
    )


def test_nstep_return_shape_errors():
    data = nstep_return_data(torch.zeros(3, 2), torch.zeros(2), torch.zeros(2))
    with pytest.raises(ValueError, match="reward"):
        nstep_return(data, 0.9, 4)
    with pytest.raises(ValueError, match="next_value"):
        nstep_return(data._replace(next_value=torch.zeros(3)), 0.9, 3)


# ---------------------------------------------------------------- lambda returns


@pytest.mark.parametrize("steps", [1, 2, 9, 64])
def test_generalized_lambda_returns_against_loop_and_dingo(steps):
    generator = torch.Generator().manual_seed(steps)
    values = _rand(steps + 1, 3, generator=generator)
    rewards = _rand(steps, 3, generator=generator)
    done = (torch.rand(steps, 3, generator=generator) < 0.2).double()
    for gamma, lambda_, flags in ((0.9, 0.8, None), (0.99, 0.95, done), (1.0, 1.0, done), (0.7, 0.0, None)):
        result = generalized_lambda_returns(values, rewards, gamma, lambda_, flags)
        expected = _lambda_return_loop(values, rewards, gamma, lambda_, flags)
        assert torch.allclose(result, expected, rtol=0, atol=1e-10)
        ones = torch.ones(steps, 3, dtype=torch.float64)
        dingo = _multistep_forward_view_dingo(values[1:], rewards, gamma * ones, lambda_ * ones, flags)
        assert torch.allclose(result, dingo, rtol=0, atol=1e-10)


def test_generalized_lambda_returns_special_lambdas():
    generator = torch.Generator().manual_seed(5)
    steps, gamma = 12, 0.9
    values = _rand(steps + 1, 2, generator=generator)
    rewards = _rand(steps, 2, generator=generator)
    # lambda = 0: one-step TD target
    assert torch.allclose(
        generalized_lambda_returns(values, rewards, gamma, 0.0), rewards + gamma * values[1:], rtol=0, atol=1e-12
    )
    # lambda = 1: discounted return bootstrapped from V(s_T)
    mc = torch.zeros(steps, 2, dtype=torch.float64)
    for b in range(2):
        for t in range(steps):
            mc[t, b] = (
                sum(gamma ** (k - t) * rewards[k, b].item() for k in range(t, steps))
                + gamma ** (steps - t) * values[steps, b].item()
            )
    assert torch.allclose(generalized_lambda_returns(values, rewards, gamma, 1.0), mc, rtol=0, atol=1e-10)


def test_multistep_forward_view_tensor_gammas_and_lambdas():
    generator = torch.Generator().manual_seed(6)
    steps = 17
    next_values = _rand(steps, 3, generator=generator)
    rewards = _rand(steps, 3, generator=generator)
    gammas = torch.rand(steps, 3, generator=generator, dtype=torch.float64)
    lambdas = torch.rand(steps, 3, generator=generator, dtype=torch.float64)
    done = (torch.rand(steps, 3, generator=generator) < 0.2).double()
    before = [x.clone() for x in (next_values, rewards, gammas, lambdas, done)]
    result = multistep_forward_view(next_values, rewards, gammas, lambdas, done)
    for old, new in zip(before, (next_values, rewards, gammas, lambdas, done)):
        assert torch.equal(old, new)
    expected = _multistep_forward_view_dingo(next_values, rewards, gammas, lambdas, done)
    assert torch.allclose(result, expected, rtol=0, atol=1e-10)
    # the same through generalized_lambda_returns (values of s_0 are not used)
    values = torch.cat([torch.zeros(1, 3, dtype=torch.float64), next_values])
    assert torch.allclose(generalized_lambda_returns(values, rewards, gammas, lambdas, done), expected, atol=1e-10)


def test_lambda_returns_shape_errors():
    with pytest.raises(ValueError, match="bootstrap_values"):
        generalized_lambda_returns(torch.zeros(4, 2), torch.zeros(4, 2), 0.9, 0.9)
    with pytest.raises(ValueError, match="bootstrap_values"):
        generalized_lambda_returns(torch.zeros(5), torch.zeros(4, 2), 0.9, 0.9)
    with pytest.raises(ValueError, match="bootstrap_values"):
        multistep_forward_view(torch.zeros(5, 2), torch.zeros(4, 2), 0.9, 0.9)


# ---------------------------------------------------------------- td_lambda_error


@pytest.mark.parametrize("with_weight", [False, True])
def test_td_lambda_error_value_and_gradient(with_weight):
    generator = torch.Generator().manual_seed(7)
    steps, batch, gamma, lambda_ = 8, 4, 0.9, 0.8
    value = _rand(steps + 1, batch, generator=generator).requires_grad_(True)
    reward = _rand(steps, batch, generator=generator)
    weight = torch.rand(steps, batch, generator=generator, dtype=torch.float64) if with_weight else None
    before = (value.detach().clone(), reward.clone())
    loss = td_lambda_error(td_lambda_data(value, reward, weight), gamma, lambda_)
    assert torch.equal(value.detach(), before[0]) and torch.equal(reward, before[1])
    assert loss.dim() == 0
    returns = _lambda_return_loop(value.detach(), reward, gamma, lambda_)
    w = torch.ones(steps, batch, dtype=torch.float64) if weight is None else weight
    error = returns - value.detach()[:-1]
    expected_loss = sum(0.5 * error[t, b].item() ** 2 * w[t, b].item() for t in range(steps) for b in range(batch))
    expected_loss /= steps * batch
    assert loss.item() == pytest.approx(expected_loss, rel=1e-12, abs=1e-12)
    (grad,) = torch.autograd.grad(loss, value)
    # The return is a target: d loss / d V[t] = -(G[t] - V[t]) w[t] / (T B) for t < T, and 0 for V[T].
    expected_grad = torch.zeros(steps + 1, batch, dtype=torch.float64)
    expected_grad[:-1] = -error * w / (steps * batch)
    assert torch.allclose(grad, expected_grad, rtol=0, atol=1e-12)


def test_td_lambda_error_weight_per_sample_like_dingo():
    # DI-engine 0.5.3 documents td_lambda_error's weight as (B,), "the training sample weight", and broadcasts it.
    generator = torch.Generator().manual_seed(8)
    value = _rand(6, 3, generator=generator)
    reward = _rand(5, 3, generator=generator)
    weight = torch.rand(3, generator=generator, dtype=torch.float64)
    expected = td_lambda_error(td_lambda_data(value, reward, weight.expand(5, 3)))
    try:
        got = td_lambda_error(td_lambda_data(value, reward, weight))
    except ValueError as error:
        got = error
    assert isinstance(got, torch.Tensor) and torch.allclose(got, expected, rtol=0, atol=1e-12), (
        f"BUG: a (B,) weight (DI-engine's documented shape) gave {got!r}, expected {expected}"
    )


def test_td_lambda_error_weight_shape_error():
    with pytest.raises(ValueError, match="weight"):
        td_lambda_error(td_lambda_data(torch.zeros(6, 3), torch.zeros(5, 3), torch.zeros(4, 3)))


# ---------------------------------------------------------------- inputs DI-engine 0.5.3 accepts beyond (T, B)


def _columns(x: torch.Tensor) -> torch.Tensor:
    """(T, ...) -> (T, prod(...)): the (T, B) loops above then run over every trajectory."""
    return x.reshape(x.shape[0], -1)


@pytest.mark.parametrize("shape", [(6, 3, 2), (6, 2, 2, 2), (6,), (1, 2, 2)])
def test_lambda_returns_extra_dimensions_and_single_trajectory(shape):
    generator = torch.Generator().manual_seed(len(shape))
    values = _rand(shape[0] + 1, *shape[1:], generator=generator)
    rewards = _rand(*shape, generator=generator)
    done = torch.rand(shape, generator=generator) < 0.25
    for flags in (None, done, done.long(), done.double()):
        result = generalized_lambda_returns(values, rewards, 0.9, 0.8, flags)
        assert result.shape == shape
        expected = _lambda_return_loop(_columns(values), _columns(rewards), 0.9, 0.8,
                                       None if flags is None else _columns(flags))
        assert torch.allclose(_columns(result), expected, rtol=0, atol=1e-10)
    gammas = torch.rand(shape, generator=generator, dtype=torch.float64)
    lambdas = torch.rand(shape, generator=generator, dtype=torch.float64)
    forward = multistep_forward_view(values[1:], rewards, gammas, lambdas, done.double())
    expected = _lambda_return_loop(_columns(values), _columns(rewards), _columns(gammas), _columns(lambdas),
                                   _columns(done))
    assert forward.shape == shape and torch.allclose(_columns(forward), expected, rtol=0, atol=1e-10)


def test_lambda_returns_of_integer_rewards_are_not_truncated():
    # DI-engine 0.5.3 writes the returns into torch.empty_like(rewards): integer rewards give truncated returns.
    values = torch.tensor([[0.0], [1.0], [2.0]])
    rewards = torch.tensor([[1], [1]])
    # G[1] = 1 + 0.5 * 2 = 2; G[0] = 1 + 0.5 * (0.5 * 1 + 0.5 * 2) = 1.75
    result = generalized_lambda_returns(values, rewards, 0.5, 0.5)
    assert result.dtype == torch.float32
    assert torch.allclose(result, torch.tensor([[1.75], [2.0]]), rtol=0, atol=1e-6)
    forward = multistep_forward_view(values[1:].double(), rewards, 0.5, 0.5)
    assert forward.dtype == torch.float64 and torch.allclose(forward, torch.tensor([[1.75], [2.0]]).double())


@pytest.mark.parametrize("weight_shape", [None, (3, 2), (5, 3, 2)])
def test_td_lambda_error_extra_dimensions(weight_shape):
    generator = torch.Generator().manual_seed(17)
    value = _rand(6, 3, 2, generator=generator).requires_grad_(True)
    reward = _rand(5, 3, 2, generator=generator)
    weight = None if weight_shape is None else torch.rand(weight_shape, generator=generator, dtype=torch.float64)
    loss = td_lambda_error(td_lambda_data(value, reward, weight), 0.9, 0.8)
    returns = _lambda_return_loop(_columns(value.detach()), _columns(reward), 0.9, 0.8)
    w = torch.ones(5, 3, 2, dtype=torch.float64) if weight is None else weight.expand(5, 3, 2)
    error = (returns - _columns(value.detach())[:-1]).tolist()
    flat_w = _columns(w).tolist()
    expected = sum(0.5 * error[t][i] ** 2 * flat_w[t][i] for t in range(5) for i in range(6)) / 30
    assert loss.item() == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_td_lambda_error_single_trajectory():
    value = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    reward = torch.tensor([1.0, 1.0], dtype=torch.float64)
    # returns [1.75, 2.0] (as above); loss = 0.5 * ((1.75 - 0)^2 + (2 - 1)^2) / 2
    loss = td_lambda_error(td_lambda_data(value, reward, None), 0.5, 0.5)
    assert loss.item() == pytest.approx(0.25 * (1.75**2 + 1.0))


def _nstep_leading_reference(reward, next_value, done, gammas, nstep, value_gamma=None):
    """One loop per (b, a): done, the list gamma and value_gamma are per sample b (the leading dimension)."""
    out = torch.zeros(next_value.shape, dtype=torch.float64)
    for index in np.ndindex(*next_value.shape):
        g = gammas[index[0]]
        total = sum(g**k * float(reward[(k, *index)]) for k in range(nstep))
        factor = g**nstep if value_gamma is None else float(value_gamma[index[0]])
        out[index] = total + factor * next_value[index].item() * (1.0 - float(done[index[0]]))
    return out


def test_nstep_return_per_sample_flags_for_agents():
    # reward (nstep, B, A), next_value (B, A), done (B,): DI-engine's view_similar aligns done with B.
    nstep, batch, agents = 3, 4, 4  # A == B: broadcasting done against the last dimension would go unnoticed
    generator = torch.Generator().manual_seed(21)
    reward = _rand(nstep, batch, agents, generator=generator)
    next_value = _rand(batch, agents, generator=generator)
    done = torch.tensor([True, False, False, True])
    value_gamma = torch.rand(batch, generator=generator, dtype=torch.float64)
    data = nstep_return_data(reward, next_value, done)
    expected = _nstep_leading_reference(reward, next_value, done, [0.9] * batch, nstep)
    assert torch.allclose(nstep_return(data, 0.9, nstep), expected, rtol=0, atol=1e-12)
    expected = _nstep_leading_reference(reward, next_value, done, [0.9] * batch, nstep, value_gamma)
    assert torch.allclose(nstep_return(data, 0.9, nstep, value_gamma), expected, rtol=0, atol=1e-12)
    gammas = [0.9, 0.5, 0.99, 0.3]
    expected = _nstep_leading_reference(reward, next_value, done, gammas, nstep)
    got = nstep_return(data, [torch.tensor(g) for g in gammas], nstep)
    assert torch.allclose(got.double(), expected, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="done"):
        nstep_return(data._replace(done=torch.zeros(agents + 1)), 0.9, nstep)


def test_nstep_return_integer_rewards_with_per_sample_gammas():
    reward = torch.tensor([[1, 2], [1, 2]])
    next_value = torch.tensor([4.0, 4.0])
    done = torch.tensor([0, 1])
    # b = 0: 1 + 0.5 * 1 + 0.25 * 4 = 2.5; b = 1 (done): 2 + 0.25 * 2 = 2.5
    got = nstep_return(nstep_return_data(reward, next_value, done), [torch.tensor(0.5), torch.tensor(0.25)], 2)
    assert torch.allclose(got, torch.tensor([2.5, 2.5]))


def test_nstep_return_single_sample_and_scalar_value_gamma():
    reward, next_value = torch.tensor([1.0, 1.0, 1.0]), torch.tensor(8.0)
    # 1 + 0.5 + 0.25 + 0.125 * 8
    assert nstep_return(nstep_return_data(reward, next_value, torch.tensor(0)), 0.5, 3).item() == pytest.approx(2.75)
    data = nstep_return_data(torch.ones(3, 2), torch.full((2,), 8.0), torch.zeros(2))
    assert torch.allclose(nstep_return(data, 0.5, 3, 0.25), torch.full((2,), 1.75 + 2.0))
    assert torch.allclose(nstep_return(data, 0.5, 3, torch.tensor(0.25)), torch.full((2,), 1.75 + 2.0))


def test_discount_cumsum_default_gamma_is_one():
    # DI-engine 0.5.3's discount_cumsum(x, gamma=1.0): returns-to-go of decision transformers.
    np.testing.assert_allclose(discount_cumsum(np.array([1.0, 2.0, 4.0])), [7.0, 6.0, 4.0], rtol=0, atol=1e-12)
    assert torch.equal(discount_cumsum(torch.tensor([1.0, 2.0, 4.0])), torch.tensor([7.0, 6.0, 4.0]))
