"""A2C losses against plain float64 per-sample loops, hand-computed cases and gradcheck."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.rl_utils.a2c import a2c_data, a2c_error, a2c_error_continuous, a2c_loss


def _flat(tensor: torch.Tensor, trailing: int = 0) -> list:
    shape = (-1, *tensor.shape[tensor.ndim - trailing :]) if trailing else (-1,)
    return tensor.detach().double().reshape(shape).tolist()


def _categorical(logits: list[float], action: int) -> tuple[float, float]:
    top = max(logits)
    log_sum = top + math.log(sum(math.exp(x - top) for x in logits))
    log_probs = [x - log_sum for x in logits]
    return log_probs[action], -sum(math.exp(lp) * lp for lp in log_probs)


def _gaussian(mu: list[float], sigma: list[float], action: list[float]) -> tuple[float, float]:
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    log_prob = sum(-0.5 * ((a - m) / s) ** 2 - math.log(s) - half_log_2pi for m, s, a in zip(mu, sigma, action))
    return log_prob, sum(0.5 + half_log_2pi + math.log(s) for s in sigma)


def _reference(data: a2c_data) -> tuple[float, float, float]:
    if isinstance(data.logit, dict):
        rows = zip(_flat(data.logit["mu"], 1), _flat(data.logit["sigma"], 1), _flat(data.action, 1))
        per_sample = [_gaussian(*row) for row in rows]
    else:
        per_sample = [_categorical(row, a) for row, a in zip(_flat(data.logit, 1), data.action.reshape(-1).tolist())]
    weight = [1.0] * data.adv.numel() if data.weight is None else _flat(data.weight)
    policy = value = ent = 0.0
    columns = zip(per_sample, _flat(data.value), _flat(data.adv), _flat(data.return_), weight)
    for (log_prob, entropy), v, a, r, w in columns:
        policy -= log_prob * a * w
        value += (r - v) ** 2 * w
        ent += entropy * w
    n = len(weight)
    return policy / n, value / n, ent / n


def _make(seed: int, batch: int, size: int, agents: int | None, weighted: bool, continuous: bool) -> a2c_data:
    gen = torch.Generator().manual_seed(seed)
    lead = (batch,) if agents is None else (batch, agents)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    if continuous:
        mu, sigma = randn(*lead, size), 0.5 + torch.rand(*lead, size, generator=gen, dtype=torch.float64)
        logit, action = {"mu": mu, "sigma": sigma}, mu + sigma * randn(*lead, size)
    else:
        logit, action = randn(*lead, size), torch.randint(0, size, lead, generator=gen)
    weight = torch.rand(*lead, generator=gen, dtype=torch.float64) if weighted else None
    return a2c_data(logit, action, randn(*lead), randn(*lead), randn(*lead), weight)


def _error(data: a2c_data) -> a2c_loss:
    return a2c_error_continuous(data) if isinstance(data.logit, dict) else a2c_error(data)


def _tensors(x) -> list[torch.Tensor]:
    return list(x.values()) if isinstance(x, dict) else [x]


def _leaf(x):
    return {k: v.clone().requires_grad_() for k, v in x.items()} if isinstance(x, dict) else x.clone().requires_grad_()


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    batch=st.integers(1, 7),
    size=st.integers(1, 4),
    agents=st.sampled_from([None, 2, 3]),
    weighted=st.booleans(),
    continuous=st.booleans(),
)
def test_matches_loop(seed, batch, size, agents, weighted, continuous):
    data = _make(seed, batch, size + (0 if continuous else 1), agents, weighted, continuous)
    loss = _error(data)
    expected = _reference(data)
    for got, want in zip(loss, expected):
        assert got.item() == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_hand_computed_discrete():
    # p(a=0) = 0.25 and 0.5; adv 2 and -1; value 0 and 1 against returns 1 and -1; weights 1 and 0.5.
    probs = torch.tensor([0.25, 0.5], dtype=torch.float64)
    logit = torch.stack([probs.log(), (1 - probs).log()], dim=-1)
    f64 = dict(dtype=torch.float64)
    data = a2c_data(logit, torch.zeros(2, dtype=torch.long), torch.tensor([0.0, 1.0], **f64),
                    torch.tensor([2.0, -1.0], **f64), torch.tensor([1.0, -1.0], **f64), torch.tensor([1.0, 0.5], **f64))
    loss = a2c_error(data)
    assert loss.policy_loss.item() == pytest.approx(-(math.log(0.25) * 2 + math.log(0.5) * -1 * 0.5) / 2)
    # No 0.5 factor on the value loss (DI-engine's A2C uses a plain weighted MSE).
    assert loss.value_loss.item() == pytest.approx((1.0 + 4.0 * 0.5) / 2)
    entropy_quarter = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert loss.entropy_loss.item() == pytest.approx((entropy_quarter + math.log(2) * 0.5) / 2)


def test_hand_computed_continuous_sums_over_action_dimensions():
    # action == mu, sigma 1 and 2: log-prob -(log 1 + log 2) - 2 * 0.5 log(2 pi), entropy summed over both dims.
    logit = {"mu": torch.zeros(1, 2, dtype=torch.float64), "sigma": torch.tensor([[1.0, 2.0]], dtype=torch.float64)}
    ones = torch.ones(1, dtype=torch.float64)
    loss = a2c_error_continuous(a2c_data(logit, torch.zeros(1, 2, dtype=torch.float64), 0 * ones, ones, ones, None))
    log_prob = -math.log(2.0) - math.log(2 * math.pi)
    assert loss.policy_loss.item() == pytest.approx(-log_prob)
    assert loss.entropy_loss.item() == pytest.approx(1.0 + math.log(2 * math.pi) + math.log(2.0))
    assert loss.value_loss.item() == pytest.approx(1.0)


@pytest.mark.parametrize("continuous", [False, True])
def test_gradcheck(continuous):
    data = _make(3, 5, 3, None, True, continuous)
    keys = ["mu", "sigma"] if continuous else []

    def losses(*inputs):
        logit = dict(zip(keys, inputs[:-1])) if continuous else inputs[0]
        return tuple(_error(data._replace(logit=logit, value=inputs[-1])))

    inputs = tuple(t.clone().requires_grad_() for t in [*_tensors(data.logit), data.value])
    assert torch.autograd.gradcheck(losses, inputs)


@pytest.mark.parametrize("continuous", [False, True])
def test_targets_get_no_gradient_and_inputs_are_not_mutated(continuous):
    data = _make(4, 6, 3, 2, True, continuous)
    data = data._replace(logit=_leaf(data.logit), value=_leaf(data.value), adv=_leaf(data.adv),
                         return_=_leaf(data.return_), weight=_leaf(data.weight))
    before = [t.detach().clone() for x in data for t in _tensors(x)]
    loss = _error(data)
    sum(loss).backward()
    assert all(torch.equal(old, now) for old, now in zip(before, [t for x in data for t in _tensors(x)]))
    assert data.adv.grad is None and data.return_.grad is None and data.weight.grad is None
    assert all(t.grad.abs().sum() > 0 for t in [*_tensors(data.logit), data.value])
    assert isinstance(loss, a2c_loss) and all(x.ndim == 0 and x.dtype == torch.float64 for x in loss)


@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize("batch", [1, 5])
def test_weight_none_equals_ones(continuous, batch):
    data = _make(5, batch, 3, None, False, continuous)
    uniform, ones = _error(data), _error(data._replace(weight=torch.ones(batch, dtype=torch.float64)))
    assert all(torch.allclose(a, b, rtol=0, atol=1e-14) for a, b in zip(uniform, ones))


def test_multi_agent_equals_flattened_batch():
    data = _make(6, 4, 5, 3, True, False)
    flat = a2c_data(data.logit.reshape(12, 5), *(t.reshape(12) for t in data[1:]))
    assert all(torch.allclose(a, b, rtol=1e-12) for a, b in zip(a2c_error(data), a2c_error(flat)))


def test_data_tuples_follow_di_engine_field_order():
    assert a2c_data._fields == ("logit", "action", "value", "adv", "return_", "weight")
    assert a2c_loss._fields == ("policy_loss", "value_loss", "entropy_loss")


_BAD_DISCRETE = {
    "logit": lambda d: d._replace(logit=d.logit[:, 0]),
    "action": lambda d: d._replace(action=d.action[:2]),
    "value": lambda d: d._replace(value=d.value[:, None]),
    "adv": lambda d: d._replace(adv=d.adv[:2]),
    "return_": lambda d: d._replace(return_=d.return_[None]),
    "weight": lambda d: d._replace(weight=torch.ones(4)),
}


@pytest.mark.parametrize("field", sorted(_BAD_DISCRETE))
def test_wrong_discrete_shape_names_the_field(field):
    with pytest.raises(ValueError, match=f"^{field} has shape"):
        a2c_error(_BAD_DISCRETE[field](_make(0, 3, 2, None, True, False)))


_BAD_CONTINUOUS = {
    "logit['mu']": lambda d: d._replace(logit={**d.logit, "mu": d.logit["mu"][:, 0]}),
    "logit['sigma']": lambda d: d._replace(logit={**d.logit, "sigma": d.logit["sigma"][:2]}),
    "action": lambda d: d._replace(action=d.action[:, 0]),
    "value": lambda d: d._replace(value=d.value[:2]),
    "adv": lambda d: d._replace(adv=d.adv[:, None]),
}


@pytest.mark.parametrize("field", sorted(_BAD_CONTINUOUS))
def test_wrong_continuous_shape_names_the_field(field):
    pattern = "^" + field.replace("[", r"\[").replace("]", r"\]") + " has shape"
    with pytest.raises(ValueError, match=pattern):
        a2c_error_continuous(_BAD_CONTINUOUS[field](_make(0, 3, 2, None, True, True)))


def test_continuous_needs_a_mu_sigma_dict():
    data = _make(0, 3, 2, None, False, True)
    with pytest.raises(ValueError, match="logit must be a dict"):
        a2c_error_continuous(data._replace(logit=data.logit["mu"]))


# ---------------------------------------------------------------- inputs DI-engine 0.5.3 accepts beyond (B,) / (B, A)


def _make_of(lead: tuple, size: int, seed: int, continuous: bool) -> a2c_data:
    gen = torch.Generator().manual_seed(seed)

    def randn(shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64)

    if continuous:
        mu, sigma = randn((*lead, size)), 0.5 + torch.rand((*lead, size), generator=gen, dtype=torch.float64)
        logit, action = {"mu": mu, "sigma": sigma}, mu + sigma * randn((*lead, size))
    else:
        logit, action = randn((*lead, size)), torch.randint(0, size, lead, generator=gen)
    weight = torch.rand(lead, generator=gen, dtype=torch.float64)
    return a2c_data(logit, action, randn(lead), randn(lead), randn(lead), weight)


def _assert_loss(loss: a2c_loss, expected: tuple[float, float, float]) -> None:
    for got, want in zip(loss, expected):
        assert got.item() == pytest.approx(want, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("lead", [(4, 3, 2), (2, 3, 2, 2)])  # (T, B, A), (T, B, A, C)
@pytest.mark.parametrize("continuous", [False, True])
def test_any_leading_dimensions_match_loop(lead, continuous):
    data = _make_of(lead, 3, seed=len(lead), continuous=continuous)
    _assert_loss(_error(data), _reference(data))


def test_discrete_single_sample_and_integer_valued_actions():
    data = _make_of((), 4, seed=3, continuous=False)  # logits (N,), a 0-dim action: one sample
    _assert_loss(a2c_error(data), _reference(data))
    batch = _make_of((5,), 4, seed=4, continuous=False)
    for action in (batch.action.int(), batch.action.double()):  # torch's Categorical (DI-engine) takes these too
        _assert_loss(a2c_error(batch._replace(action=action)), _reference(batch))


@pytest.mark.parametrize("sigma_shape", [(3,), (1, 3)])
def test_continuous_state_independent_sigma_and_shared_action_broadcast(sigma_shape):
    data = _make_of((5,), 3, seed=5, continuous=True)
    sigma = torch.tensor([0.6, 1.0, 1.7], dtype=torch.float64)
    broadcast = data._replace(logit={**data.logit, "sigma": sigma.reshape(sigma_shape)})
    expanded = data._replace(logit={**data.logit, "sigma": sigma.expand(5, 3)})  # one sigma row per sample
    _assert_loss(a2c_error_continuous(broadcast), _reference(expanded))
    action = torch.tensor([0.1, -0.4, 0.9], dtype=torch.float64)
    shared = _reference(data._replace(action=action.expand(5, 3)))
    _assert_loss(a2c_error_continuous(data._replace(action=action)), shared)


def test_continuous_mean_without_action_dimension_stays_rejected():
    # DI-engine reads a (B,) mean as one sample with B action dimensions: its "log-probability" is a sum over the
    # batch. zoo asks for (B, 1).
    data = _make_of((5,), 1, seed=6, continuous=True)
    squeezed = {"mu": data.logit["mu"][:, 0], "sigma": data.logit["sigma"][:, 0]}
    with pytest.raises(ValueError, match=r"^logit\['mu'\] has shape"):
        a2c_error_continuous(data._replace(logit=squeezed, action=data.action[:, 0]))
