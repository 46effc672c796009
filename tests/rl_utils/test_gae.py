"""gae against plain float64 loops (the formula, and DI-engine 0.5.3's algorithm step by step) and hand cases."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.rl_utils.gae import gae, gae_data

# The module, not the function ``zoo.rl_utils.gae`` that the package exports under the same name.
gae_module = importlib.import_module("zoo.rl_utils.gae")

# Every test here runs on both recurrence backends (compiled loops and the numpy scan).
pytestmark = pytest.mark.usefixtures("recurrence_backend")

# ---------------------------------------------------------------- plain-Python references (float64)


def _gae_column(values, next_values, rewards, dones, traj_flags, gamma, lambda_) -> list[float]:
    """One trajectory column, straight from the formula: delta, then the backward sum cut at traj_flag."""
    steps = len(rewards)
    advantages = [0.0] * steps
    following = 0.0
    for t in reversed(range(steps)):
        delta = rewards[t] + gamma * (1.0 - dones[t]) * next_values[t] - values[t]
        following = delta + gamma * lambda_ * (1.0 - traj_flags[t]) * following
        advantages[t] = following
    return advantages


def _gae_reference(data: gae_data, gamma: float, lambda_: float) -> torch.Tensor:
    value, next_value, reward, done, traj_flag = data
    steps, batch = reward.shape
    dones = [[0.0] * batch for _ in range(steps)] if done is None else done.double().tolist()
    flags = dones if traj_flag is None else traj_flag.double().tolist()
    rewards = reward.double().tolist()
    value64 = value.detach().double()
    next64 = next_value.detach().double()
    agents = value.shape[2:] or (None,)
    out = torch.zeros(value.shape, dtype=torch.float64)
    for b in range(batch):
        for agent in range(agents[0] or 1):
            index = (slice(None), b) if agents[0] is None else (slice(None), b, agent)
            column = _gae_column(
                value64[index].tolist(),
                next64[index].tolist(),
                [rewards[t][b] for t in range(steps)],
                [dones[t][b] for t in range(steps)],
                [flags[t][b] for t in range(steps)],
                gamma,
                lambda_,
            )
            out[index] = torch.tensor(column, dtype=torch.float64)
    return out


def _gae_dingo(data: gae_data, gamma: float, lambda_: float) -> torch.Tensor:
    """DI-engine 0.5.3 ``gae`` step by step (with ``.float()`` replaced by value's dtype, to compare in float64).

    Like DI-engine, this overwrites ``next_value`` in place (``next_value *= (1 - done)``).
    """
    value, next_value, reward, done, traj_flag = data
    if done is None:
        done = torch.zeros_like(reward, device=reward.device)
    if traj_flag is None:
        traj_flag = done
    done = done.to(value.dtype)
    traj_flag = traj_flag.to(value.dtype)
    if len(value.shape) == len(reward.shape) + 1:
        reward = reward.unsqueeze(-1)
        done = done.unsqueeze(-1)
        traj_flag = traj_flag.unsqueeze(-1)
    next_value *= 1 - done
    delta = reward + gamma * next_value - value
    factor = gamma * lambda_ * (1 - traj_flag)
    adv = torch.zeros_like(value)
    gae_item = torch.zeros_like(value[0])
    for t in reversed(range(reward.shape[0])):
        gae_item = delta[t] + factor[t] * gae_item
        adv[t] = gae_item
    return adv


def _random_rollout(steps, batch, seed, dtype=torch.float64, agents=None, p_done=0.1, p_truncate=0.1):
    generator = torch.Generator().manual_seed(seed)
    value_shape = (steps, batch) if agents is None else (steps, batch, agents)
    value = torch.randn(value_shape, generator=generator, dtype=torch.float64)
    next_value = torch.randn(value_shape, generator=generator, dtype=torch.float64)
    reward = torch.randn(steps, batch, generator=generator, dtype=torch.float64)
    done = torch.rand(steps, batch, generator=generator, dtype=torch.float64) < p_done
    truncated = torch.rand(steps, batch, generator=generator, dtype=torch.float64) < p_truncate
    traj_flag = done | truncated
    return gae_data(value.to(dtype), next_value.to(dtype), reward.to(dtype), done.to(dtype), traj_flag.to(dtype))


def _clone(data: gae_data) -> gae_data:
    return gae_data(*(None if x is None else x.clone() for x in data))


def _assert_unchanged(before: gae_data, after: gae_data) -> None:
    for name, old, new in zip(gae_data._fields, before, after):
        assert (old is None) == (new is None), name
        if old is not None:
            assert torch.equal(old, new), f"gae mutated {name}"


def _col(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).unsqueeze(1)


# ---------------------------------------------------------------- hand-computed cases (gamma = lambda = 0.5)
# value = [1, 2, 3], reward = [1, 1, 1]; gamma * lambda = 0.25.

VALUE = [1.0, 2.0, 3.0]
REWARD = [1.0, 1.0, 1.0]


def test_docstring_example():
    adv = gae(gae_data(torch.zeros(4, 2), torch.zeros(4, 2), torch.ones(4, 2), None, None), gamma=0.5, lambda_=1.0)
    assert torch.allclose(adv[:, 0], torch.tensor([1.875, 1.75, 1.5, 1.0]), rtol=0, atol=1e-7)


def test_hand_no_episode_end():
    # next_value = [2, 3, 10]: delta = [1 + 1 - 1, 1 + 1.5 - 2, 1 + 5 - 3] = [1, 0.5, 3]
    # adv2 = 3, adv1 = 0.5 + 0.25 * 3 = 1.25, adv0 = 1 + 0.25 * 1.25 = 1.3125
    data = gae_data(_col(VALUE), _col([2.0, 3.0, 10.0]), _col(REWARD), None, None)
    assert torch.allclose(gae(data, 0.5, 0.5), _col([1.3125, 1.25, 3.0]), rtol=0, atol=1e-12)


def test_hand_terminated_at_last_step_ignores_next_value():
    # delta2 = 1 - 3 = -2 (no bootstrap), adv1 = 0.5 + 0.25 * -2 = 0, adv0 = 1 + 0 = 1
    expected = _col([1.0, 0.0, -2.0])
    for final_value in (10.0, -1e6):
        data = gae_data(_col(VALUE), _col([2.0, 3.0, final_value]), _col(REWARD), _col([0.0, 0.0, 1.0]), None)
        assert torch.allclose(gae(data, 0.5, 0.5), expected, rtol=0, atol=1e-12)


def test_hand_truncated_at_last_step_bootstraps_from_next_value():
    # traj_flag = 1, done = 0: delta2 = 1 + 0.5 * final_value - 3 is used; nothing follows the last step anyway.
    for final_value, expected in ((10.0, [1.3125, 1.25, 3.0]), (2.0, [1.0625, 0.25, -1.0])):
        # final_value = 2: delta2 = -1, adv1 = 0.5 - 0.25 = 0.25, adv0 = 1 + 0.0625
        data = gae_data(_col(VALUE), _col([2.0, 3.0, final_value]), _col(REWARD), _col([0.0] * 3), _col([0, 0, 1.0]))
        assert torch.allclose(gae(data, 0.5, 0.5), _col(expected), rtol=0, atol=1e-12)


def test_hand_terminated_at_first_step():
    # The episode ends at step 0 and a new one starts at step 1 (value[1] = 2 belongs to the reset observation).
    # delta = [1 - 1, 1 + 1.5 - 2, 1 + 2 - 3] = [0, 0.5, 0]; adv = [0, 0.5, 0]
    expected = _col([0.0, 0.5, 0.0])
    for traj_flag in (None, _col([1.0, 0.0, 0.0])):
        data = gae_data(_col(VALUE), _col([8.0, 3.0, 4.0]), _col(REWARD), _col([1.0, 0.0, 0.0]), traj_flag)
        assert torch.allclose(gae(data, 0.5, 0.5), expected, rtol=0, atol=1e-12)


def test_hand_truncated_at_first_step():
    # next_value[0] = 8 is V(final observation): delta0 = 1 + 4 - 1 = 4, and step 1's advantage does not flow back.
    truncated = gae_data(_col(VALUE), _col([8.0, 3.0, 4.0]), _col(REWARD), _col([0.0] * 3), _col([1.0, 0.0, 0.0]))
    assert torch.allclose(gae(truncated, 0.5, 0.5), _col([4.0, 0.5, 0.0]), rtol=0, atol=1e-12)
    # Without the flag the trace flows on: adv0 = 4 + 0.25 * 0.5.
    continuing = truncated._replace(traj_flag=None)
    assert torch.allclose(gae(continuing, 0.5, 0.5), _col([4.125, 0.5, 0.0]), rtol=0, atol=1e-12)


def test_hand_single_step():
    # T = 1, B = 1: delta = 1 + 0.5 * 4 - 2 = 1; terminated: 1 - 2 = -1.
    one = gae_data(_col([2.0]), _col([4.0]), _col([1.0]), None, None)
    assert gae(one, 0.5, 0.5).shape == (1, 1)
    assert gae(one, 0.5, 0.5).item() == pytest.approx(1.0, abs=1e-12)
    assert gae(one._replace(done=_col([1.0])), 0.5, 0.5).item() == pytest.approx(-1.0, abs=1e-12)
    assert gae(one._replace(traj_flag=_col([1.0])), 0.5, 0.5).item() == pytest.approx(1.0, abs=1e-12)


def test_hand_multi_agent_shares_reward_and_flags():
    # value (T=2, B=1, A=2), reward (2, 1), done at step 1. Agent 0: value [1, 2], next [2, 9];
    # agent 1: value [0, 1], next [1, 9]. gamma = lambda = 0.5.
    value = torch.tensor([[[1.0, 0.0]], [[2.0, 1.0]]], dtype=torch.float64)
    next_value = torch.tensor([[[2.0, 1.0]], [[9.0, 9.0]]], dtype=torch.float64)
    reward = _col([1.0, 1.0])
    done = _col([0.0, 1.0])
    # agent 0: delta = [1 + 1 - 1, 1 - 2] = [1, -1] -> adv = [1 - 0.25, -1] = [0.75, -1]
    # agent 1: delta = [1 + 0.5 - 0, 1 - 1] = [1.5, 0] -> adv = [1.5, 0]
    expected = torch.tensor([[[0.75, 1.5]], [[-1.0, 0.0]]], dtype=torch.float64)
    adv = gae(gae_data(value, next_value, reward, done, None), 0.5, 0.5)
    assert adv.shape == (2, 1, 2)
    assert torch.allclose(adv, expected, rtol=0, atol=1e-12)


def test_bool_and_float_flags_agree():
    data = _random_rollout(9, 3, seed=1)
    as_bool = data._replace(done=data.done.bool(), traj_flag=data.traj_flag.bool())
    expected = _gae_reference(data, 0.9, 0.8)
    assert torch.allclose(gae(data, 0.9, 0.8), expected, rtol=0, atol=1e-10)
    assert torch.allclose(gae(as_bool, 0.9, 0.8), expected, rtol=0, atol=1e-10)
    # bool done with traj_flag=None takes traj_flag = done
    only_done = as_bool._replace(traj_flag=None)
    assert torch.allclose(gae(only_done, 0.9, 0.8), _gae_reference(data._replace(traj_flag=None), 0.9, 0.8), atol=1e-10)


def test_none_flags():
    data = _random_rollout(11, 2, seed=2)
    no_flags = data._replace(done=None, traj_flag=None)
    zeros = torch.zeros_like(data.reward)
    assert torch.allclose(
        gae(no_flags, 0.95, 0.9),
        _gae_reference(data._replace(done=zeros, traj_flag=zeros), 0.95, 0.9),
        rtol=0,
        atol=1e-10,
    )
    # traj_flag=None means traj_flag = done
    done_only = data._replace(traj_flag=None)
    assert torch.allclose(gae(done_only, 0.95, 0.9), gae(data._replace(traj_flag=data.done), 0.95, 0.9), atol=1e-12)
    # done=None with a traj_flag: truncations only, every step bootstraps
    flags_only = data._replace(done=None)
    assert torch.allclose(gae(flags_only, 0.95, 0.9), _gae_reference(data._replace(done=zeros), 0.95, 0.9), atol=1e-10)


def test_float32_against_float64_reference():
    data = _random_rollout(64, 5, seed=3, dtype=torch.float32)
    adv = gae(data, 0.99, 0.95)
    assert adv.dtype == torch.float32
    expected = _gae_reference(data, 0.99, 0.95)
    assert torch.allclose(adv.double(), expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- random rollouts vs the loops


@pytest.mark.parametrize("steps", [1, 2, 3, 7, 64, 257])
@pytest.mark.parametrize("batch", [1, 4])
def test_random_against_loop(steps, batch):
    data = _random_rollout(steps, batch, seed=steps * 10 + batch)
    adv = gae(data, 0.99, 0.95)
    assert adv.dtype == torch.float64 and adv.shape == (steps, batch)
    assert torch.allclose(adv, _gae_reference(data, 0.99, 0.95), rtol=0, atol=1e-10)


@pytest.mark.parametrize("steps", [1, 5, 33])
def test_multi_agent_random_against_loop(steps):
    data = _random_rollout(steps, 3, seed=steps, agents=4)
    assert torch.allclose(gae(data, 0.97, 0.9), _gae_reference(data, 0.97, 0.9), rtol=0, atol=1e-10)


@pytest.mark.parametrize("steps, agents", [(1, None), (7, None), (64, None), (13, 3)])
def test_matches_dingo_and_does_not_mutate(steps, agents):
    data = _random_rollout(steps, 4, seed=99 + steps, agents=agents)
    before = _clone(data)
    adv = gae(data, 0.99, 0.97)
    _assert_unchanged(before, data)
    dingo_input = _clone(data)
    expected = _gae_dingo(dingo_input, 0.99, 0.97)
    assert torch.allclose(adv, expected, rtol=0, atol=1e-10)
    # DI-engine overwrites its caller's next_value at terminated steps; zoo must not (checked above).
    if bool(data.done.any()):
        assert not torch.equal(dingo_input.next_value, data.next_value)


def test_no_mutation_with_bool_flags_and_none():
    data = _random_rollout(17, 3, seed=5)
    for variant in (data, data._replace(done=data.done.bool(), traj_flag=None), data._replace(done=None)):
        before = _clone(variant)
        gae(variant, 0.9, 0.9)
        _assert_unchanged(before, variant)


@settings(max_examples=30, deadline=None)
@given(
    steps=st.integers(1, 40),
    batch=st.integers(1, 4),
    agents=st.sampled_from([None, 2]),
    gamma=st.floats(0.0, 1.0),
    lambda_=st.floats(0.0, 1.0),
    p_done=st.sampled_from([0.0, 0.2, 1.0]),
    p_truncate=st.sampled_from([0.0, 0.3]),
    seed=st.integers(0, 2**31 - 1),
)
def test_property_against_loops(steps, batch, agents, gamma, lambda_, p_done, p_truncate, seed):
    data = _random_rollout(steps, batch, seed, agents=agents, p_done=p_done, p_truncate=p_truncate)
    adv = gae(data, gamma, lambda_)
    assert torch.allclose(adv, _gae_reference(data, gamma, lambda_), rtol=0, atol=1e-10)
    assert torch.allclose(adv, _gae_dingo(_clone(data), gamma, lambda_), rtol=0, atol=1e-10)


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize("steps", [1, 6, 40])
def test_lambda_one_is_discounted_return_minus_value(steps):
    generator = torch.Generator().manual_seed(steps)
    value = torch.randn(steps, 3, generator=generator, dtype=torch.float64)
    bootstrap = torch.randn(3, generator=generator, dtype=torch.float64)
    reward = torch.randn(steps, 3, generator=generator, dtype=torch.float64)
    next_value = torch.cat([value[1:], bootstrap[None]])
    gamma = 0.9
    expected = torch.zeros(steps, 3, dtype=torch.float64)
    for b in range(3):
        for t in range(steps):
            ret = sum(gamma ** (k - t) * reward[k, b].item() for k in range(t, steps))
            ret += gamma ** (steps - t) * bootstrap[b].item()
            expected[t, b] = ret - value[t, b].item()
    adv = gae(gae_data(value, next_value, reward, None, None), gamma, 1.0)
    assert torch.allclose(adv, expected, rtol=0, atol=1e-10)


def test_lambda_zero_is_td_error():
    data = _random_rollout(23, 4, seed=7)
    gamma = 0.93
    td_error = data.reward + gamma * (1 - data.done) * data.next_value - data.value
    assert torch.allclose(gae(data, gamma, 0.0), td_error, rtol=0, atol=1e-12)


def test_result_carries_no_gradient():
    data = _random_rollout(8, 2, seed=8)
    value = data.value.clone().requires_grad_(True)
    next_value = data.next_value.clone().requires_grad_(True)
    reward = data.reward.clone().requires_grad_(True)
    adv = gae(data._replace(value=value, next_value=next_value, reward=reward), 0.99, 0.95)
    assert not adv.requires_grad
    assert adv.grad_fn is None
    assert torch.allclose(adv, _gae_reference(data, 0.99, 0.95), atol=1e-10)


# ---------------------------------------------------------------- shape errors


@pytest.mark.parametrize(
    "field, bad",
    [
        ("value", torch.zeros(5)),
        ("next_value", torch.zeros(5, 2)),
        ("next_value", torch.zeros(4, 3, 1)),
        ("reward", torch.zeros(4, 3)),
        ("reward", torch.zeros(4, 3, 1)),
        ("done", torch.zeros(4, 2)),
        ("traj_flag", torch.zeros(5, 3)),
    ],
)
def test_shape_errors_name_the_field(field, bad):
    data = gae_data(torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(4, 3))
    data = data._replace(**{field: bad})
    if field == "reward" and bad.shape == (4, 3):  # a reward of (T, B) that disagrees with value
        data = data._replace(value=torch.zeros(4, 2), next_value=torch.zeros(4, 2), done=None, traj_flag=None)
    with pytest.raises(ValueError, match=field):
        gae(data)


def test_flags_must_have_the_shape_of_reward():
    value = torch.zeros(4, 3, 2)
    with pytest.raises(ValueError, match="reward"):  # neither value's shape nor value's without its last dimension
        gae(gae_data(value, value, torch.zeros(4, 3, 3), None, None))
    with pytest.raises(ValueError, match="reward"):
        gae(gae_data(value, value, torch.zeros(4, 2), None, None))
    with pytest.raises(ValueError, match="done"):
        gae(gae_data(value, value, torch.zeros(4, 3), torch.zeros(4, 3, 2), None))
    with pytest.raises(ValueError, match="traj_flag"):  # DI-engine would broadcast (T, B) against (T, B, A)
        gae(gae_data(value, value, value, None, torch.zeros(4, 3)))
    with pytest.raises(ValueError, match="done"):
        gae(gae_data(torch.zeros(5), torch.zeros(5), torch.zeros(5), torch.zeros(5, 1), None))
    with pytest.raises(ValueError, match="value"):
        gae(gae_data(torch.tensor(1.0), torch.tensor(1.0), torch.tensor(1.0), None, None))


# ---------------------------------------------------------------- every shape DI-engine 0.5.3 accepts


def _gae_any_shape_reference(data: gae_data, gamma: float, lambda_: float) -> torch.Tensor:
    """Plain loop over every trajectory of a (T, ...) rollout; when value has one more (last) dimension than reward,
    that dimension holds agents sharing the reward and flags of their position."""
    value, next_value, reward, done, traj_flag = data
    shared = value.ndim == reward.ndim + 1
    zeros = torch.zeros(reward.shape, dtype=torch.float64)
    dones = zeros if done is None else done.double()
    flags = dones if traj_flag is None else traj_flag.double()
    out = torch.zeros(value.shape, dtype=torch.float64)
    for position in np.ndindex(*value.shape[1:]):
        outer = position[:-1] if shared else position
        column = _gae_column(
            [value[(t, *position)].item() for t in range(value.shape[0])],
            [next_value[(t, *position)].item() for t in range(value.shape[0])],
            [float(reward[(t, *outer)]) for t in range(value.shape[0])],
            [dones[(t, *outer)].item() for t in range(value.shape[0])],
            [flags[(t, *outer)].item() for t in range(value.shape[0])],
            gamma,
            lambda_,
        )
        for t, x in enumerate(column):
            out[(t, *position)] = x
    return out


def _rollout_of_shape(value_shape, reward_shape, seed, flag_dtype=torch.float64, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    value = torch.randn(value_shape, generator=generator, dtype=dtype)
    next_value = torch.randn(value_shape, generator=generator, dtype=dtype)
    reward = torch.randn(reward_shape, generator=generator, dtype=dtype)
    done = torch.rand(reward_shape, generator=generator) < 0.2
    traj_flag = done | (torch.rand(reward_shape, generator=generator) < 0.2)
    return gae_data(value, next_value, reward, done.to(flag_dtype), traj_flag.to(flag_dtype))


def test_hand_single_trajectory():
    # DI-engine's users pass one concatenated trajectory (T,): value = [1, 2, 3], reward = [1, 1, 1],
    # gamma = lambda = 0.5, terminated at t = 1 (bool done, as a collector stores it), next_value = [2, 3, 4]:
    # delta = [1 + 1 - 1, 1 + 0 - 2, 1 + 2 - 3] = [1, -1, 0]; adv[2] = 0, adv[1] = -1 (cut), adv[0] = 1 - 0.25.
    value, next_value = torch.tensor(VALUE), torch.tensor([2.0, 3.0, 4.0])
    done = torch.tensor([False, True, False])
    adv = gae(gae_data(value, next_value, torch.tensor(REWARD), done, None), 0.5, 0.5)
    assert adv.shape == (3,) and adv.dtype == torch.float32
    assert torch.allclose(adv, torch.tensor([0.75, -1.0, 0.0]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("steps", [1, 2, 9, 70])
@pytest.mark.parametrize("flag_dtype", [torch.bool, torch.long, torch.float32, torch.float64])
def test_single_trajectory_against_loop(steps, flag_dtype):
    data = _rollout_of_shape((steps,), (steps,), seed=steps, flag_dtype=flag_dtype)
    before = _clone(data)
    adv = gae(data, 0.99, 0.9)
    _assert_unchanged(before, data)
    assert adv.shape == (steps,) and adv.dtype == torch.float64
    assert torch.allclose(adv, _gae_any_shape_reference(data, 0.99, 0.9), rtol=0, atol=1e-10)
    # traj_flag=None (= done) and done=None
    for variant in (data._replace(traj_flag=None), data._replace(done=None), data._replace(done=None, traj_flag=None)):
        assert torch.allclose(gae(variant, 0.99, 0.9), _gae_any_shape_reference(variant, 0.99, 0.9), atol=1e-10)


@pytest.mark.parametrize(
    "value_shape, reward_shape",
    [
        ((6, 3), (6,)),  # one trajectory, 3 agents sharing its reward
        ((6, 3, 2), (6, 3, 2)),  # a reward per agent
        ((6, 2, 3, 2), (6, 2, 3)),  # (T, B, C, A): agents share the reward of their (b, c)
        ((6, 2, 3, 2), (6, 2, 3, 2)),
        ((0,), (0,)),
    ],
)
def test_any_time_major_shape_against_loop(value_shape, reward_shape):
    data = _rollout_of_shape(value_shape, reward_shape, seed=len(value_shape), flag_dtype=torch.bool)
    before = _clone(data)
    adv = gae(data, 0.9, 0.8)
    _assert_unchanged(before, data)
    assert adv.shape == value_shape
    assert torch.allclose(adv, _gae_any_shape_reference(data, 0.9, 0.8), rtol=0, atol=1e-10)


def test_integer_rewards_and_float32():
    data = _rollout_of_shape((12,), (12,), seed=4, dtype=torch.float32)
    data = data._replace(reward=torch.arange(12) % 3 - 1)
    adv = gae(data, 0.95, 0.9)
    assert adv.dtype == torch.float32
    assert torch.allclose(adv.double(), _gae_any_shape_reference(data, 0.95, 0.9), rtol=1e-5, atol=1e-5)


def test_single_trajectory_on_the_accelerator_path(monkeypatch):
    # Off the CPU gae runs on torch operations (_gae_torch); route CPU tensors there to check its shape handling.
    monkeypatch.setattr(gae_module, "_gae_cpu", gae_module._gae_torch)
    for value_shape, reward_shape in (((9,), (9,)), ((9, 3), (9,)), ((9, 2, 3, 2), (9, 2, 3)), ((9, 2), (9, 2))):
        data = _rollout_of_shape(value_shape, reward_shape, seed=7, flag_dtype=torch.bool)
        before = _clone(data)
        adv = gae(data, 0.9, 0.8)
        _assert_unchanged(before, data)
        assert adv.shape == value_shape and not adv.requires_grad
        assert torch.allclose(adv, _gae_any_shape_reference(data, 0.9, 0.8), rtol=0, atol=1e-10)


def test_single_trajectory_carries_no_gradient():
    data = _rollout_of_shape((8,), (8,), seed=8)
    value = data.value.clone().requires_grad_(True)
    adv = gae(data._replace(value=value), 0.9, 0.8)
    assert not adv.requires_grad and adv.grad_fn is None
