"""q_nstep_td_error against a plain float64 loop, hand-computed cases, DI-engine 0.5.3's own test cases rewritten,
and zoo's per-step terminated / truncated flags."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from zoo.rl_utils import q_nstep_td_data, q_nstep_td_error

# ---------------------------------------------------------------- plain-Python reference (float64)


def _reference(q, next_q, action, next_action, reward, done, gamma, nstep, truncated=None, value_gamma=None):
    """Per-sample squared TD errors by loops over Python floats. With ``truncated``, done/truncated are per step."""
    errors = []
    for b in range(q.shape[0]):
        target, discount, bootstrap = 0.0, 1.0, True
        for k in range(nstep):
            target += discount * float(reward[k, b])
            discount *= gamma
            if truncated is not None and (bool(done[k, b]) or bool(truncated[k, b])):
                bootstrap = not bool(done[k, b])
                break
        if truncated is None:
            bootstrap = True
            discount = discount if value_gamma is None else float(value_gamma[b])
            target += discount * (1.0 - float(done[b])) * float(next_q[b, int(next_action[b])])
        elif bootstrap:
            target += discount * float(next_q[b, int(next_action[b])])
        errors.append((float(q[b, int(action[b])]) - target) ** 2)
    return torch.tensor(errors, dtype=torch.float64)


def _random_case(batch: int, actions: int, nstep: int, seed: int, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, actions, generator=gen, dtype=dtype).requires_grad_(True)
    next_q = torch.randn(batch, actions, generator=gen, dtype=dtype)
    action = torch.randint(0, actions, (batch,), generator=gen)
    next_action = torch.randint(0, actions, (batch,), generator=gen)
    reward = torch.randn(nstep, batch, generator=gen, dtype=dtype)
    return q, next_q, action, next_action, reward


# ---------------------------------------------------------------- hand-computed


def test_one_step_by_hand():
    q = torch.tensor([[1.0, 2.0], [0.0, -1.0]], requires_grad=True)
    next_q = torch.tensor([[3.0, 4.0], [5.0, 6.0]])
    data = q_nstep_td_data(q, next_q, torch.tensor([1, 0]), torch.tensor([0, 1]), torch.tensor([[1.0, 2.0]]),
                           torch.tensor([0.0, 1.0]), None)
    loss, per_sample = q_nstep_td_error(data, 0.5)
    # sample 0: target 1 + 0.5 * 3 = 2.5, q 2 -> 0.25; sample 1: terminated, target 2, q 0 -> 4
    assert per_sample.tolist() == [0.25, 4.0]
    assert loss.item() == pytest.approx(2.125, abs=1e-7)


def test_three_steps_by_hand_with_weight_and_value_gamma():
    q = torch.tensor([[0.0, 1.0]], requires_grad=True)
    next_q = torch.tensor([[10.0, 2.0]])
    reward = torch.tensor([[1.0], [2.0], [4.0]])
    data = q_nstep_td_data(q, next_q, torch.tensor([0]), torch.tensor([0]), reward, torch.tensor([0]),
                           torch.tensor([3.0]))
    loss, per_sample = q_nstep_td_error(data, 0.5, nstep=3)
    # 1 + 0.5 * 2 + 0.25 * 4 + 0.125 * 10 = 4.25
    assert per_sample.item() == pytest.approx(4.25**2)
    assert loss.item() == pytest.approx(3 * 4.25**2)
    _, per_sample = q_nstep_td_error(data, 0.5, nstep=3, value_gamma=torch.tensor([0.1]))
    assert per_sample.item() == pytest.approx((3.0 + 1.0) ** 2)
    _, per_sample = q_nstep_td_error(data, 0.5, nstep=3, value_gamma=0.0)
    assert per_sample.item() == pytest.approx(9.0)


def test_cum_reward_adds_only_the_bootstrap():
    q = torch.tensor([[0.0, 0.0]], requires_grad=True)
    data = q_nstep_td_data(q, torch.tensor([[8.0, 0.0]]), torch.tensor([1]), torch.tensor([0]), torch.tensor([3.0]),
                           torch.tensor([False]), None)
    _, per_sample = q_nstep_td_error(data, 0.5, nstep=3, cum_reward=True)
    assert per_sample.item() == pytest.approx(4.0**2)  # 3 + 0.125 * 8
    _, per_sample = q_nstep_td_error(data, 0.5, nstep=3, cum_reward=True, value_gamma=torch.tensor(0.25))
    assert per_sample.item() == pytest.approx(5.0**2)


def test_huber_criterion():
    q = torch.tensor([[0.0], [0.0]], requires_grad=True)
    data = q_nstep_td_data(q, torch.zeros(2, 1), torch.tensor([0, 0]), torch.tensor([0, 0]),
                           torch.tensor([[0.5, 3.0]]), torch.tensor([1, 1]), None)
    _, per_sample = q_nstep_td_error(data, 0.99, criterion=nn.SmoothL1Loss(reduction="none"))
    assert per_sample.tolist() == [0.125, 2.5]


# ---------------------------------------------------------------- against the loop


@pytest.mark.parametrize("nstep", [1, 2, 5])
@pytest.mark.parametrize("batch", [1, 7])
def test_matches_the_loop(nstep, batch):
    q, next_q, action, next_action, reward = _random_case(batch, 4, nstep, seed=nstep * 10 + batch)
    done = torch.arange(batch) % 3 == 0
    loss, per_sample = q_nstep_td_error(q_nstep_td_data(q, next_q, action, next_action, reward, done, None),
                                        0.9, nstep=nstep)
    expected = _reference(q.detach(), next_q, action, next_action, reward, done, 0.9, nstep)
    assert per_sample.dtype == torch.float64
    torch.testing.assert_close(per_sample.detach(), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(loss.detach(), expected.mean(), rtol=1e-12, atol=1e-12)
    value_gamma = torch.linspace(0.1, 0.7, batch, dtype=torch.float64)
    _, per_sample = q_nstep_td_error(q_nstep_td_data(q, next_q, action, next_action, reward, done, None),
                                     0.9, nstep=nstep, value_gamma=value_gamma)
    expected = _reference(q.detach(), next_q, action, next_action, reward, done, 0.9, nstep, value_gamma=value_gamma)
    torch.testing.assert_close(per_sample.detach(), expected, rtol=1e-12, atol=1e-12)


def test_gradient_only_through_q():
    q, next_q, action, next_action, reward = _random_case(5, 3, 3, seed=1)
    next_q.requires_grad_(True)
    weight = torch.tensor([1.0, 2.0, 0.0, 1.0, 0.5], dtype=torch.float64)
    loss, _ = q_nstep_td_error(q_nstep_td_data(q, next_q, action, next_action, reward, torch.zeros(5), weight),
                               0.9, nstep=3)
    loss.backward()
    assert next_q.grad is None
    with torch.no_grad():
        target = (reward * 0.9 ** torch.arange(3.0, dtype=torch.float64)[:, None]).sum(0)
        target += 0.9**3 * next_q[torch.arange(5), next_action]
        q_s_a = q[torch.arange(5), action]
        grad = torch.zeros_like(q)
        grad[torch.arange(5), action] = 2 * (q_s_a - target) * weight / 5
    torch.testing.assert_close(q.grad, grad, rtol=1e-12, atol=1e-12)
    assert q.grad[2].abs().sum() == 0  # weight 0: no gradient for that sample


def test_inputs_are_not_mutated():
    q, next_q, action, next_action, reward = _random_case(3, 2, 2, seed=2)
    done = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    before = [t.detach().clone() for t in (q, next_q, action, next_action, reward, done)]
    q_nstep_td_error(q_nstep_td_data(q, next_q, action, next_action, reward, done, None), 0.9, nstep=2)
    for old, new in zip(before, (q, next_q, action, next_action, reward, done)):
        assert torch.equal(old, new.detach())


# ---------------------------------------------------------------- zoo's per-step terminated / truncated flags


def _flags(nstep, batch, where):
    flags = torch.zeros(nstep, batch, dtype=torch.bool)
    for step, sample in where:
        flags[step, sample] = True
    return flags


def test_terminated_vs_truncated_by_hand():
    q = torch.zeros(2, 1, requires_grad=True)
    next_q = torch.tensor([[10.0], [10.0]])
    reward = torch.tensor([[1.0, 1.0], [2.0, 2.0], [4.0, 4.0]])
    zero = torch.zeros(2, dtype=torch.long)
    done = _flags(3, 2, [(1, 0)])  # sample 0 terminated at step 1
    truncated = _flags(3, 2, [(1, 1)])  # sample 1 truncated at step 1
    _, per_sample = q_nstep_td_error(q_nstep_td_data(q, next_q, zero, zero, reward, done, None), 0.5, nstep=3,
                                     truncated=truncated)
    # terminated: 1 + 0.5 * 2 = 2, no bootstrap; truncated: 2 + 0.25 * 10 = 4.5, the step-2 reward ignored
    assert per_sample.tolist() == [4.0, 4.5**2]


def test_terminated_and_truncated_at_once_is_a_termination():
    q = torch.zeros(1, 1, requires_grad=True)
    flags = torch.ones(1, 1, dtype=torch.bool)
    data = q_nstep_td_data(q, torch.tensor([[10.0]]), torch.tensor([0]), torch.tensor([0]), torch.tensor([[1.0]]),
                           flags, None)
    assert q_nstep_td_error(data, 0.5, truncated=flags)[1].item() == 1.0


@pytest.mark.parametrize("where", ["first", "last", "none", "random"])
def test_flags_match_the_loop(where):
    nstep, batch = 4, 6
    q, next_q, action, next_action, reward = _random_case(batch, 3, nstep, seed=7)
    if where == "first":
        done, truncated = _flags(nstep, batch, [(0, 0), (0, 1)]), _flags(nstep, batch, [(0, 2), (0, 3)])
    elif where == "last":
        done, truncated = _flags(nstep, batch, [(3, 0), (3, 1)]), _flags(nstep, batch, [(3, 2), (3, 3)])
    elif where == "none":
        done, truncated = _flags(nstep, batch, []), _flags(nstep, batch, [])
    else:
        gen = torch.Generator().manual_seed(3)
        done, truncated = torch.rand(nstep, batch, generator=gen) < 0.2, torch.rand(nstep, batch, generator=gen) < 0.2
    data = q_nstep_td_data(q, next_q, action, next_action, reward, done, None)
    _, per_sample = q_nstep_td_error(data, 0.9, nstep=nstep, truncated=truncated)
    expected = _reference(q.detach(), next_q, action, next_action, reward, done, 0.9, nstep, truncated=truncated)
    torch.testing.assert_close(per_sample.detach(), expected, rtol=1e-12, atol=1e-12)


def test_no_end_in_the_window_equals_the_di_engine_path():
    q, next_q, action, next_action, reward = _random_case(4, 3, 3, seed=5)
    none = torch.zeros(3, 4, dtype=torch.bool)
    data = q_nstep_td_data(q, next_q, action, next_action, reward, none, None)
    flagged = q_nstep_td_error(data, 0.9, nstep=3, truncated=none)[1]
    plain = q_nstep_td_error(data._replace(done=torch.zeros(4)), 0.9, nstep=3)[1]
    torch.testing.assert_close(flagged, plain, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- DI-engine 0.5.3's test_td.py cases, rewritten


def test_di_engine_q_nstep_td_cases():
    batch, actions = 4, 3
    torch.manual_seed(0)
    next_q = torch.randn(batch, actions)
    done = torch.randn(batch)  # DI-engine feeds float noise as done: (1 - done) scales the bootstrap
    action = torch.randint(0, actions, (batch,))
    next_action = torch.randint(0, actions, (batch,))
    for nstep in range(1, 10):
        q = torch.randn(batch, actions).requires_grad_(True)
        reward = torch.rand(nstep, batch)
        loss, per_sample = q_nstep_td_error(q_nstep_td_data(q, next_q, action, next_action, reward, done, None),
                                            0.95, nstep=nstep)
        assert per_sample.shape == (batch,) and loss.shape == ()
        target = (reward * 0.95 ** torch.arange(nstep, dtype=torch.float32)[:, None]).sum(0)
        target = target + 0.95**nstep * next_q[torch.arange(batch), next_action] * (1 - done)
        torch.testing.assert_close(per_sample, (q[torch.arange(batch), action] - target) ** 2)
        assert q.grad is None
        loss.backward()
        assert q.grad is not None and q.grad.abs().sum() > 0
        # cum_reward: DI-engine's test passes the (nstep, B) reward here; the summed reward is (B,)
        summed = reward.sum(0)
        _, per_sample = q_nstep_td_error(q_nstep_td_data(q, next_q, action, next_action, summed, done, None),
                                         0.95, nstep=nstep, cum_reward=True, value_gamma=torch.tensor(0.9))
        target = summed + 0.9 * next_q[torch.arange(batch), next_action] * (1 - done)
        torch.testing.assert_close(per_sample, (q[torch.arange(batch), action] - target) ** 2)
        with pytest.raises(ValueError, match="cum_reward"):
            q_nstep_td_error(q_nstep_td_data(q, next_q, action, next_action, reward, done, None), 0.95,
                             nstep=nstep, cum_reward=True)


def test_di_engine_ngu_per_sample_gamma():
    batch, actions, nstep = 4, 3, 3
    q, next_q, action, next_action, reward = _random_case(batch, actions, nstep, seed=11)
    done = torch.zeros(batch)
    gammas = [torch.tensor(g, dtype=torch.float64) for g in (0.9, 0.5, 0.99, 0.0)]
    data = q_nstep_td_data(q, next_q, action, next_action, reward, done, None)
    _, per_sample = q_nstep_td_error(data, gammas, nstep=nstep)
    for b, gamma in enumerate(gammas):
        one = q_nstep_td_error(q_nstep_td_data(q[b:b + 1], next_q[b:b + 1], action[b:b + 1], next_action[b:b + 1],
                                               reward[:, b:b + 1], done[b:b + 1], None), float(gamma), nstep=nstep)[1]
        torch.testing.assert_close(per_sample[b:b + 1], one, rtol=1e-12, atol=1e-12)


def test_di_engine_q_1step_compatible():
    # DI-engine checks q_nstep_td_error(nstep=1) against q_1step_td_error: r + gamma * (1 - done) * Q'
    q, next_q, action, next_action, reward = _random_case(4, 3, 1, seed=4)
    done = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    loss, _ = q_nstep_td_error(q_nstep_td_data(q, next_q, action, next_action, reward, done, None), 0.99)
    target = reward[0] + 0.99 * (1 - done) * next_q[torch.arange(4), next_action]
    expected = ((q[torch.arange(4), action] - target) ** 2).mean()
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)


def test_agents_share_reward_and_done():
    batch, agents, actions, nstep = 3, 2, 4, 2
    gen = torch.Generator().manual_seed(9)
    q = torch.randn(batch, agents, actions, generator=gen, dtype=torch.float64, requires_grad=True)
    next_q = torch.randn(batch, agents, actions, generator=gen, dtype=torch.float64)
    action = torch.randint(0, actions, (batch, agents), generator=gen)
    next_action = torch.randint(0, actions, (batch, agents), generator=gen)
    reward = torch.randn(nstep, batch, generator=gen, dtype=torch.float64)
    done = torch.tensor([0, 1, 0])
    loss, per_sample = q_nstep_td_error(q_nstep_td_data(q, next_q, action, next_action, reward, done, None),
                                        0.9, nstep=nstep)
    assert per_sample.shape == (batch, agents)
    for a in range(agents):
        one = q_nstep_td_error(q_nstep_td_data(q[:, a], next_q[:, a], action[:, a], next_action[:, a], reward,
                                               done, None), 0.9, nstep=nstep)[1]
        torch.testing.assert_close(per_sample[:, a], one, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"reward": torch.zeros(2, 3)}, "reward has shape"),
        ({"done": torch.zeros(4)}, "done has shape"),
        ({"next_n_q": torch.zeros(3, 5)}, "next_n_q has shape"),
        ({"action": torch.zeros(3, 1, dtype=torch.long)}, "action has shape"),
        ({"weight": torch.ones(2)}, "weight has shape"),
    ],
)
def test_bad_shapes_name_the_field(change, message):
    data = q_nstep_td_data(torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, dtype=torch.long),
                           torch.zeros(3, dtype=torch.long), torch.zeros(1, 3), torch.zeros(3), None)
    with pytest.raises(ValueError, match=message):
        q_nstep_td_error(data._replace(**change), 0.9)
