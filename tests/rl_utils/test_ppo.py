"""PPO losses against plain float64 per-sample loops, hand-computed cases and gradcheck."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.rl_utils.ppo import (
    ppo_data,
    ppo_data_continuous,
    ppo_error,
    ppo_error_continuous,
    ppo_info,
    ppo_loss,
    ppo_policy_data,
    ppo_policy_data_continuous,
    ppo_policy_error,
    ppo_policy_error_continuous,
    ppo_policy_loss,
    ppo_value_data,
    ppo_value_error,
)

# ---------------------------------------------------------------- plain-Python references (float64, per sample)


def _flat(tensor: torch.Tensor, trailing: int = 0) -> list:
    shape = (-1, *tensor.shape[tensor.ndim - trailing :]) if trailing else (-1,)
    return tensor.detach().double().reshape(shape).tolist()


def _categorical(logits: list[float], action: int) -> tuple[float, float]:
    top = max(logits)
    log_probs = [x - top - math.log(sum(math.exp(y - top) for y in logits)) for x in logits]
    return log_probs[action], -sum(math.exp(lp) * lp for lp in log_probs)


def _gaussian(mu: list[float], sigma: list[float], action: list[float]) -> tuple[float, float]:
    log_prob = sum(
        -0.5 * ((a - m) / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi) for m, s, a in zip(mu, sigma, action)
    )
    return log_prob, sum(0.5 + 0.5 * math.log(2 * math.pi) + math.log(s) for s in sigma)


def _reference_policy(logp_new, logp_old, entropies, adv, weight, clip_ratio, dual_clip):
    objective_sum = entropy_sum = kl_sum = 0.0
    clipped = 0
    for ln, lo, ent, a, w in zip(logp_new, logp_old, entropies, adv, weight):
        ratio = math.exp(ln - lo)
        objective = min(ratio * a, min(max(ratio, 1 - clip_ratio), 1 + clip_ratio) * a)
        if dual_clip is not None and a < 0:
            objective = max(objective, dual_clip * a)
        objective_sum += objective * w
        entropy_sum += ent * w
        kl_sum += lo - ln
        clipped += ratio > 1 + clip_ratio or ratio < 1 - clip_ratio
    n = len(adv)
    return -objective_sum / n, entropy_sum / n, kl_sum / n, clipped / n


def _reference_value(value_new, value_old, return_, weight, clip_ratio, use_value_clip):
    total = 0.0
    for vn, vo, r, w in zip(value_new, value_old, return_, weight):
        error = (r - vn) ** 2
        if use_value_clip:
            clipped_value = vo + min(max(vn - vo, -clip_ratio), clip_ratio)
            error = max(error, (r - clipped_value) ** 2)
        total += error * w
    return 0.5 * total / len(value_new)


# ---------------------------------------------------------------- data builders


def _noise(seed: int, dtype: torch.dtype):
    gen = torch.Generator().manual_seed(seed)
    return gen, lambda *shape: torch.randn(*shape, generator=gen, dtype=dtype)


def _discrete(seed: int, batch: int, num: int, agents: int | None, weighted: bool, dtype=torch.float64) -> ppo_data:
    gen, randn = _noise(seed, dtype)
    lead = (batch,) if agents is None else (batch, agents)
    logit_new, value_new = randn(*lead, num), randn(*lead)
    action = torch.randint(0, num, lead, generator=gen)
    weight = torch.rand(*lead, generator=gen, dtype=dtype) if weighted else None
    return ppo_data(logit_new, logit_new + 0.6 * randn(*lead, num), action, value_new, value_new + 0.3 * randn(*lead),
                    randn(*lead), randn(*lead), weight)


def _continuous(seed: int, batch: int, dim: int, agents: int | None, weighted: bool) -> ppo_data_continuous:
    gen, randn = _noise(seed, torch.float64)
    lead = (batch,) if agents is None else (batch, agents)
    mu, value_new = randn(*lead, dim), randn(*lead)
    sigma = 0.5 + torch.rand(*lead, dim, generator=gen, dtype=torch.float64)
    old = {"mu": mu + 0.4 * randn(*lead, dim), "sigma": sigma * 1.2}
    weight = torch.rand(*lead, generator=gen, dtype=torch.float64) if weighted else None
    return ppo_data_continuous({"mu": mu, "sigma": sigma}, old, mu + sigma * randn(*lead, dim), value_new,
                               value_new + 0.3 * randn(*lead), randn(*lead), randn(*lead), weight)


def _expected(data, clip_ratio: float, use_value_clip: bool, dual_clip: float | None):
    """Reference (policy_loss, entropy_loss, approx_kl, clipfrac), value_loss for either kind of ppo data."""
    if hasattr(data, "mu_sigma_new"):
        new, old = data.mu_sigma_new, data.mu_sigma_old
        actions = _flat(data.action, 1)
        new = [_gaussian(*row) for row in zip(_flat(new["mu"], 1), _flat(new["sigma"], 1), actions)]
        old = [_gaussian(*row) for row in zip(_flat(old["mu"], 1), _flat(old["sigma"], 1), actions)]
    else:
        actions = data.action.reshape(-1).tolist()
        new = [_categorical(row, a) for row, a in zip(_flat(data.logit_new, 1), actions)]
        old = [_categorical(row, a) for row, a in zip(_flat(data.logit_old, 1), actions)]
    weight = [1.0] * data.adv.numel() if data.weight is None else _flat(data.weight)
    logp_new, entropies = zip(*new)
    policy = _reference_policy(logp_new, [o[0] for o in old], entropies, _flat(data.adv), weight, clip_ratio, dual_clip)
    value = _reference_value(
        _flat(data.value_new), _flat(data.value_old), _flat(data.return_), weight, clip_ratio, use_value_clip
    )
    return policy, value


def _assert_matches(loss, info, policy, value) -> None:
    assert loss.policy_loss.item() == pytest.approx(policy[0], rel=1e-9, abs=1e-12)
    assert loss.entropy_loss.item() == pytest.approx(policy[1], rel=1e-9, abs=1e-12)
    assert loss.value_loss.item() == pytest.approx(value, rel=1e-9, abs=1e-12)
    assert info.approx_kl == pytest.approx(policy[2], rel=1e-9, abs=1e-12)
    assert info.clipfrac == pytest.approx(policy[3])


# ---------------------------------------------------------------- property tests against the loops

_CASES = dict(
    seed=st.integers(0, 2**31 - 1),
    batch=st.integers(1, 7),
    size=st.integers(1, 4),
    agents=st.sampled_from([None, 2, 3]),
    weighted=st.booleans(),
    clip_ratio=st.sampled_from([0.1, 0.2, 0.3]),
    use_value_clip=st.booleans(),
    dual_clip=st.sampled_from([None, 1.5, 3.0]),
)


@settings(max_examples=30, deadline=None)
@given(**_CASES)
def test_ppo_error_matches_loop(seed, batch, size, agents, weighted, clip_ratio, use_value_clip, dual_clip):
    data = _discrete(seed, batch, size + 1, agents, weighted)
    loss, info = ppo_error(data, clip_ratio, use_value_clip, dual_clip)
    _assert_matches(loss, info, *_expected(data, clip_ratio, use_value_clip, dual_clip))


@settings(max_examples=30, deadline=None)
@given(**_CASES)
def test_ppo_error_continuous_matches_loop(seed, batch, size, agents, weighted, clip_ratio, use_value_clip, dual_clip):
    data = _continuous(seed, batch, size, agents, weighted)
    loss, info = ppo_error_continuous(data, clip_ratio, use_value_clip, dual_clip)
    _assert_matches(loss, info, *_expected(data, clip_ratio, use_value_clip, dual_clip))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), agents=st.sampled_from([None, 2]), dual_clip=st.sampled_from([1.5, 3.0]))
def test_continuous_dual_clip_leaves_non_negative_advantages_alone(seed, agents, dual_clip):
    data = _continuous(seed, 8, 2, agents, weighted=False)
    # Weighting by the indicator adv >= 0 keeps only the samples the dual clip must not touch.
    data = data._replace(weight=(data.adv >= 0).double())
    with_dual, _ = ppo_error_continuous(data, dual_clip=dual_clip)
    without, _ = ppo_error_continuous(data, dual_clip=None)
    assert with_dual.policy_loss.item() == pytest.approx(without.policy_loss.item(), rel=1e-12, abs=1e-12)


# ---------------------------------------------------------------- hand-computed cases


def _two_action_logits(p_action0: list[float]) -> torch.Tensor:
    p = torch.tensor(p_action0, dtype=torch.float64)
    return torch.stack([p.log(), (1 - p).log()], dim=-1)


def test_hand_computed_discrete_ratios_clip_and_dual_clip():
    # ratios 1.5 (adv +1, clipped to 1.2), 4 (adv -1, -4; dual clip 3 lifts it to -3), 0.25 (adv +2: 0.5), 1 (adv -0.5)
    logit_new = _two_action_logits([0.6, 0.8, 0.2, 0.5])
    logit_old = _two_action_logits([0.4, 0.2, 0.8, 0.5])
    adv = torch.tensor([1.0, -1.0, 2.0, -0.5], dtype=torch.float64)
    data = ppo_policy_data(logit_new, logit_old, torch.zeros(4, dtype=torch.long), adv, None)
    plain, info = ppo_policy_error(data, clip_ratio=0.2)
    dual, dual_info = ppo_policy_error(data, clip_ratio=0.2, dual_clip=3.0)
    assert plain.policy_loss.item() == pytest.approx(-(1.2 - 4.0 + 0.5 - 0.5) / 4)
    assert dual.policy_loss.item() == pytest.approx(-(1.2 - 3.0 + 0.5 - 0.5) / 4)
    assert info.clipfrac == pytest.approx(0.75) and dual_info == info
    assert info.approx_kl == pytest.approx(math.log(2 / 3) / 4)
    assert plain.entropy_loss.item() == pytest.approx(
        -sum(p * math.log(p) + (1 - p) * math.log(1 - p) for p in [0.6, 0.8, 0.2, 0.5]) / 4
    )


def test_hand_computed_continuous_dual_clip_only_where_advantage_negative():
    # At action == mu the log-density is -log(sigma) - const, so ratio = sigma_old / sigma_new: 4 and 0.25.
    new = {"mu": torch.zeros(2, 1, dtype=torch.float64), "sigma": torch.tensor([[1.0], [4.0]], dtype=torch.float64)}
    old = {"mu": torch.zeros(2, 1, dtype=torch.float64), "sigma": torch.tensor([[4.0], [1.0]], dtype=torch.float64)}
    adv = torch.tensor([-1.0, 2.0], dtype=torch.float64)
    data = ppo_policy_data_continuous(new, old, torch.zeros(2, 1, dtype=torch.float64), adv, None)
    loss, info = ppo_policy_error_continuous(data, clip_ratio=0.2, dual_clip=3.0)
    # adv -1, ratio 4: max(min(-4, -1.2), -3) = -3.  adv +2, ratio 0.25: min(0.5, 1.6) = 0.5 (DI-engine: max(0.5, 6)).
    assert loss.policy_loss.item() == pytest.approx(-(-3.0 + 0.5) / 2)
    assert info.clipfrac == 1.0
    assert info.approx_kl == pytest.approx((-math.log(4) + math.log(4)) / 2, abs=1e-12)


def test_hand_computed_value_clip_and_its_gradient():
    # value_new 0.5 leaves the clip (0.2): max(0.25, 0.64); value_new 0.1 is inside: 0.81 both ways.
    value_new = torch.tensor([0.5, 0.1], dtype=torch.float64, requires_grad=True)
    data = ppo_value_data(value_new, torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64), None)
    clipped = ppo_value_error(data, clip_ratio=0.2, use_value_clip=True)
    assert clipped.item() == pytest.approx(0.5 * (0.64 + 0.81) / 2)
    assert ppo_value_error(data, 0.2, use_value_clip=False).item() == pytest.approx(0.5 * (0.25 + 0.81) / 2)
    clipped.backward()
    # The pessimistic term of sample 0 is the clipped value, which no longer depends on value_new.
    assert value_new.grad.tolist() == pytest.approx([0.0, 0.5 * 2 * (0.1 - 1.0) / 2])


# ---------------------------------------------------------------- gradients


def test_gradcheck_discrete():
    data = _discrete(3, 5, 4, None, weighted=True)

    def losses(logit_new, value_new):
        loss, _ = ppo_error(data._replace(logit_new=logit_new, value_new=value_new), 0.2, True, 2.0)
        return tuple(loss)

    inputs = (data.logit_new.clone().requires_grad_(), data.value_new.clone().requires_grad_())
    assert torch.autograd.gradcheck(losses, inputs)


def test_gradcheck_continuous():
    data = _continuous(4, 5, 3, None, weighted=True)

    def losses(mu, sigma, value_new):
        loss, _ = ppo_error_continuous(data._replace(mu_sigma_new={"mu": mu, "sigma": sigma}, value_new=value_new),
                                       0.2, True, 2.0)
        return tuple(loss)

    new = data.mu_sigma_new
    inputs = tuple(t.clone().requires_grad_() for t in (new["mu"], new["sigma"], data.value_new))
    assert torch.autograd.gradcheck(losses, inputs)


def _leaf(x):
    return {k: v.clone().requires_grad_() for k, v in x.items()} if isinstance(x, dict) else x.clone().requires_grad_()


def _tensors(x) -> list[torch.Tensor]:
    return list(x.values()) if isinstance(x, dict) else [x]


@pytest.mark.parametrize("continuous", [False, True])
def test_targets_and_old_policy_get_no_gradient(continuous):
    data = _continuous(5, 6, 2, None, True) if continuous else _discrete(5, 6, 3, None, True)
    data = type(data)(*(_leaf(x) if i != 2 else x for i, x in enumerate(data[:8])))  # every field but action
    loss, _ = (ppo_error_continuous if continuous else ppo_error)(data, dual_clip=2.0)
    sum(loss).backward()
    constants = [*_tensors(data[1]), data.value_old, data.adv, data.return_, data.weight]
    assert all(tensor.grad is None for tensor in constants)
    assert all(tensor.grad.abs().sum() > 0 for tensor in [*_tensors(data[0]), data.value_new])


def test_masked_logits_keep_gradients_finite():
    data = _discrete(6, 4, 3, None, False)
    logit_new = data.logit_new.clone()
    logit_new[:, 2] = float("-inf")  # action 2 masked out everywhere
    logit_new.requires_grad_()
    data = data._replace(logit_new=logit_new, logit_old=data.logit_old.clone(), action=data.action % 2)
    loss, _ = ppo_error(data)
    sum(loss).backward()
    assert all(torch.isfinite(x) for x in loss) and torch.isfinite(logit_new.grad).all()


# ---------------------------------------------------------------- API contract


@pytest.mark.parametrize("continuous", [False, True])
def test_no_mutation_and_output_types(continuous):
    data = _continuous(7, 5, 2, 2, True) if continuous else _discrete(7, 5, 3, 2, True)
    before = [t.clone() for x in data[:8] for t in _tensors(x)]
    loss, info = (ppo_error_continuous if continuous else ppo_error)(data, dual_clip=2.0)
    assert all(torch.equal(old, now) for old, now in zip(before, [t for x in data[:8] for t in _tensors(x)]))
    assert isinstance(loss, ppo_loss) and isinstance(info, ppo_info)
    assert all(x.ndim == 0 and x.dtype == torch.float64 for x in loss)
    assert type(info.approx_kl) is float and type(info.clipfrac) is float


@pytest.mark.parametrize("continuous", [False, True])
def test_weight_none_equals_ones_and_batch_of_one(continuous):
    for batch in (1, 6):
        data = _continuous(8, batch, 2, None, False) if continuous else _discrete(8, batch, 3, None, False)
        fn = ppo_error_continuous if continuous else ppo_error
        uniform, info = fn(data, dual_clip=2.0)
        ones, info_ones = fn(data._replace(weight=torch.ones(batch, dtype=torch.float64)), dual_clip=2.0)
        assert all(torch.allclose(a, b, rtol=0, atol=1e-14) for a, b in zip(uniform, ones)) and info == info_ones


def test_multi_agent_equals_flattened_batch():
    data = _discrete(9, 4, 5, 3, True)
    flat = ppo_data(*(t.reshape(12, -1).squeeze(-1) if t.ndim == 2 else t.reshape(12, 5) for t in data[:8]))
    (loss, info), (flat_loss, flat_info) = ppo_error(data, dual_clip=2.0), ppo_error(flat, dual_clip=2.0)
    assert all(torch.allclose(a, b, rtol=1e-12) for a, b in zip(loss, flat_loss))
    assert info.approx_kl == pytest.approx(flat_info.approx_kl) and info.clipfrac == flat_info.clipfrac


def test_policy_and_value_parts_compose_to_ppo_error():
    data = _discrete(10, 5, 3, None, True)
    loss, info = ppo_error(data, 0.25, False, 2.5)
    policy, policy_info = ppo_policy_error(ppo_policy_data(*data[:3], data.adv, data.weight), 0.25, 2.5)
    value = ppo_value_error(ppo_value_data(data.value_new, data.value_old, data.return_, data.weight), 0.25, False)
    assert isinstance(policy, ppo_policy_loss) and policy_info == info
    assert torch.equal(loss.policy_loss, policy.policy_loss) and torch.equal(loss.value_loss, value)


def test_continuous_accepts_ppo_data_with_dicts_and_float32():
    data = _continuous(11, 4, 2, None, True)
    as_ppo_data, _ = ppo_error_continuous(ppo_data(*data[:8]))
    native, _ = ppo_error_continuous(data)
    assert all(torch.equal(a, b) for a, b in zip(as_ppo_data, native))
    discrete32 = _discrete(11, 4, 3, None, True, dtype=torch.float32)
    assert all(x.dtype == torch.float32 for x in ppo_error(discrete32)[0])


def test_data_tuples_follow_di_engine_field_order():
    assert ppo_data._fields[:8] == ("logit_new", "logit_old", "action", "value_new", "value_old", "adv", "return_",
                                    "weight")
    assert ppo_data(*range(8)).logit_pretrained is None
    assert ppo_policy_data._fields[:5] == ("logit_new", "logit_old", "action", "adv", "weight")
    assert ppo_value_data._fields == ("value_new", "value_old", "return_", "weight")
    assert ppo_loss._fields == ("policy_loss", "value_loss", "entropy_loss")
    assert ppo_info._fields == ("approx_kl", "clipfrac")


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("dual_clip", [1.0, 0.5, -2.0])
def test_dual_clip_must_exceed_one(dual_clip):
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_error(_discrete(0, 3, 2, None, False), dual_clip=dual_clip)
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_error_continuous(_continuous(0, 3, 2, None, False), dual_clip=dual_clip)


def test_negative_clip_ratio_and_pretrained_logits_are_rejected():
    data = _discrete(0, 3, 2, None, False)
    with pytest.raises(ValueError, match="clip_ratio"):
        ppo_error(data, clip_ratio=-0.1)
    with pytest.raises(NotImplementedError, match="logit_pretrained"):
        ppo_error(data._replace(logit_pretrained=data.logit_new))


_BAD_DISCRETE = {
    "logit_new": lambda d: d._replace(logit_new=d.logit_new[:, 0]),
    "logit_old": lambda d: d._replace(logit_old=d.logit_old[:, :1]),
    "action": lambda d: d._replace(action=d.action[:2]),
    "adv": lambda d: d._replace(adv=d.adv[:, None]),
    "value_new": lambda d: d._replace(value_new=d.value_new[:2]),
    "value_old": lambda d: d._replace(value_old=d.value_old[:2]),
    "return_": lambda d: d._replace(return_=d.return_[None]),
    "weight": lambda d: d._replace(weight=torch.ones(4)),
}


@pytest.mark.parametrize("field", sorted(_BAD_DISCRETE))
def test_wrong_discrete_shape_names_the_field(field):
    with pytest.raises(ValueError, match=f"^{field} has shape"):
        ppo_error(_BAD_DISCRETE[field](_discrete(0, 3, 2, None, True)))


_BAD_CONTINUOUS = {
    "mu_sigma_new['mu']": lambda d: d._replace(mu_sigma_new={**d.mu_sigma_new, "mu": d.mu_sigma_new["mu"][:, 0]}),
    "mu_sigma_new['sigma']": lambda d: d._replace(mu_sigma_new={**d.mu_sigma_new, "sigma": d.mu_sigma_old["mu"][:2]}),
    "mu_sigma_old['mu']": lambda d: d._replace(mu_sigma_old={**d.mu_sigma_old, "mu": d.mu_sigma_old["mu"][:, :1]}),
    "action": lambda d: d._replace(action=d.action[:, 0]),
    "adv": lambda d: d._replace(adv=d.adv[:2]),
    "value_new": lambda d: d._replace(value_new=d.value_new[:, None]),
}


@pytest.mark.parametrize("field", sorted(_BAD_CONTINUOUS))
def test_wrong_continuous_shape_names_the_field(field):
    with pytest.raises(ValueError, match="^" + field.replace("[", r"\[").replace("]", r"\]") + " has shape"):
        ppo_error_continuous(_BAD_CONTINUOUS[field](_continuous(0, 3, 2, None, True)))


def test_continuous_needs_mu_sigma_dicts():
    data = _continuous(0, 3, 2, None, False)
    with pytest.raises(ValueError, match="mu_sigma_old must be a dict"):
        ppo_error_continuous(data._replace(mu_sigma_old=(data.mu_sigma_old["mu"], data.mu_sigma_old["sigma"])))


# ---------------------------------------------------------------- inputs DI-engine 0.5.3 accepts beyond (B,) / (B, A)


def _discrete_of(lead: tuple, num: int, seed: int) -> ppo_data:
    gen, randn = _noise(seed, torch.float64)
    logit_new, value_new = randn((*lead, num)), randn(lead)
    return ppo_data(logit_new, logit_new + 0.6 * randn((*lead, num)), torch.randint(0, num, lead, generator=gen),
                    value_new, value_new + 0.3 * randn(lead), randn(lead), randn(lead),
                    torch.rand(lead, generator=gen, dtype=torch.float64))


def _continuous_of(lead: tuple, dim: int, seed: int) -> ppo_data_continuous:
    gen, randn = _noise(seed, torch.float64)
    mu, value_new = randn((*lead, dim)), randn(lead)
    sigma = 0.5 + torch.rand((*lead, dim), generator=gen, dtype=torch.float64)
    old = {"mu": mu + 0.4 * randn((*lead, dim)), "sigma": sigma * 1.2}
    return ppo_data_continuous({"mu": mu, "sigma": sigma}, old, mu + sigma * randn((*lead, dim)), value_new,
                               value_new + 0.3 * randn(lead), randn(lead), randn(lead),
                               torch.rand(lead, generator=gen, dtype=torch.float64))


@pytest.mark.parametrize("lead", [(), (4, 3, 2), (2, 3, 2, 2)])  # one sample, (T, B, A), (T, B, A, C)
@pytest.mark.parametrize("dual_clip", [None, 2.0])
def test_discrete_any_leading_dimensions_match_loop(lead, dual_clip):
    data = _discrete_of(lead, 3, seed=len(lead))
    loss, info = ppo_error(data, 0.2, True, dual_clip)
    _assert_matches(loss, info, *_expected(data, 0.2, True, dual_clip))
    policy, policy_info = ppo_policy_error(ppo_policy_data(*data[:3], data.adv, data.weight), 0.2, dual_clip)
    assert policy.policy_loss.item() == pytest.approx(loss.policy_loss.item(), rel=1e-12)
    assert policy_info == info


@pytest.mark.parametrize("lead", [(4, 3, 2), (2, 3, 2, 2)])
def test_continuous_any_leading_dimensions_match_loop(lead):
    data = _continuous_of(lead, 2, seed=len(lead))
    loss, info = ppo_error_continuous(data, 0.2, True, 3.0)
    _assert_matches(loss, info, *_expected(data, 0.2, True, 3.0))


@pytest.mark.parametrize("shape", [(), (5, 3, 2)])
@pytest.mark.parametrize("use_value_clip", [False, True])
def test_value_error_any_shape_matches_loop(shape, use_value_clip):
    _, randn = _noise(11, torch.float64)
    value_new, return_, weight = randn(shape), randn(shape), randn(shape).abs()
    value_old = value_new + 0.3 * randn(shape)
    loss = ppo_value_error(ppo_value_data(value_new, value_old, return_, weight), 0.2, use_value_clip)
    expected = _reference_value(_flat(value_new), _flat(value_old), _flat(return_), _flat(weight), 0.2, use_value_clip)
    assert loss.item() == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("sigma_shape", [(2,), (1, 2)])
def test_continuous_state_independent_sigma_broadcasts(sigma_shape):
    # A (D,) or (1, D) standard deviation (an nn.Parameter shared by every state): DI-engine's Normal broadcasts it.
    data = _continuous_of((5,), 2, seed=12)
    new_sigma = torch.tensor([0.7, 1.3], dtype=torch.float64).reshape(sigma_shape)
    old_sigma = torch.tensor([0.9, 1.1], dtype=torch.float64).reshape(sigma_shape)
    data = data._replace(mu_sigma_new={**data.mu_sigma_new, "sigma": new_sigma},
                         mu_sigma_old={**data.mu_sigma_old, "sigma": old_sigma})
    loss, info = ppo_error_continuous(data, 0.2, True, None)
    expanded = data._replace(  # the reference reads one sigma row per sample
        mu_sigma_new={**data.mu_sigma_new, "sigma": new_sigma.expand(5, 2)},
        mu_sigma_old={**data.mu_sigma_old, "sigma": old_sigma.expand(5, 2)},
    )
    _assert_matches(loss, info, *_expected(expanded, 0.2, True, None))


def test_continuous_old_mu_sigma_of_shape_b_is_one_action_dimension():
    # DI-engine 0.5.3 reads a 1-D old mu/sigma (B,) as (B, 1): one action dimension, as buffers often store it.
    data = _continuous_of((6,), 1, seed=13)
    squeezed = {"mu": data.mu_sigma_old["mu"][:, 0], "sigma": data.mu_sigma_old["sigma"][:, 0]}
    loss, info = ppo_error_continuous(data._replace(mu_sigma_old=squeezed), 0.2, True, None)
    _assert_matches(loss, info, *_expected(data, 0.2, True, None))
    policy, _ = ppo_policy_error_continuous(
        ppo_policy_data_continuous(data.mu_sigma_new, squeezed, data.action, data.adv, data.weight)
    )
    assert policy.policy_loss.item() == pytest.approx(loss.policy_loss.item(), rel=1e-12)
    with pytest.raises(ValueError, match="mu_sigma_old"):  # (B,) still means (B, 1): not (B, 2)
        ppo_error_continuous(_continuous_of((6,), 2, seed=13)._replace(mu_sigma_old=squeezed))


def test_continuous_action_broadcast_over_the_batch():
    data = _continuous_of((4,), 3, seed=14)
    action = torch.tensor([0.5, -0.25, 1.0], dtype=torch.float64)
    loss, info = ppo_error_continuous(data._replace(action=action), 0.2, True, None)
    _assert_matches(loss, info, *_expected(data._replace(action=action.expand(4, 3)), 0.2, True, None))
    with pytest.raises(ValueError, match="^action has shape"):  # the last dimension must stay D
        ppo_error_continuous(data._replace(action=data.action[:, :1]))


def test_integer_valued_actions_of_any_dtype():
    # torch's Categorical takes int32 actions and floats holding integers; so does DI-engine's PPO.
    data = _discrete_of((5,), 4, seed=15)
    expected = ppo_error(data)
    for action in (data.action.int(), data.action.double()):
        loss, info = ppo_error(data._replace(action=action))
        assert loss.policy_loss.item() == pytest.approx(expected[0].policy_loss.item(), rel=1e-12)
        assert info == expected[1]


def test_logits_without_sample_dimensions_are_rejected():
    # DI-engine would broadcast one distribution over the batch; a dropped dimension is a bug here.
    data = _discrete_of((5,), 4, seed=16)
    with pytest.raises(ValueError, match="^logit_new has shape"):
        ppo_error(data._replace(logit_new=data.logit_new[0], logit_old=data.logit_old[0]))
