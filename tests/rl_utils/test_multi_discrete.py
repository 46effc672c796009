"""Multi-categorical helpers and the MultiDiscrete PPO / A2C losses against per-component loops (float64)."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.rl_utils import (
    a2c_data,
    a2c_error_multi_discrete,
    multi_categorical_entropy,
    multi_categorical_log_prob,
    multi_categorical_logits,
    ppo_data,
    ppo_error_multi_discrete,
)

NVEC_CASES = [(3, 2, 4), (2, 2, 2), (1, 5), (4,)]


def _components(flat: torch.Tensor, nvec: tuple[int, ...]) -> list[torch.Tensor]:
    return list(flat.split(list(nvec), dim=-1))


def _reference_log_prob(flat: torch.Tensor, action: torch.Tensor, nvec: tuple[int, ...]) -> torch.Tensor:
    total = torch.zeros(flat.shape[:-1], dtype=flat.dtype)
    for k, logits in enumerate(_components(flat, nvec)):
        total = total + torch.distributions.Categorical(logits=logits).log_prob(action[..., k])
    return total


def _reference_entropy(flat: torch.Tensor, nvec: tuple[int, ...]) -> torch.Tensor:
    return sum(torch.distributions.Categorical(logits=logits).entropy() for logits in _components(flat, nvec))


def _actions(nvec: tuple[int, ...], batch: int, generator: torch.Generator) -> torch.Tensor:
    return torch.stack([torch.randint(0, n, (batch,), generator=generator) for n in nvec], -1)


@pytest.mark.parametrize("nvec", NVEC_CASES)
def test_padded_logits_hold_each_component_then_minus_infinity(nvec):
    flat = torch.arange(float(sum(nvec))).expand(2, -1)
    padded = multi_categorical_logits(flat, nvec)
    assert padded.shape == (2, len(nvec), max(nvec))
    start = 0
    for k, n in enumerate(nvec):
        assert torch.equal(padded[:, k, :n], flat[:, start:start + n])
        assert torch.all(padded[:, k, n:] == float("-inf"))
        start += n


@pytest.mark.parametrize("nvec", NVEC_CASES)
def test_log_prob_and_entropy_match_independent_categoricals(nvec):
    generator = torch.Generator().manual_seed(0)
    flat = torch.randn(6, sum(nvec), dtype=torch.float64, generator=generator)
    action = _actions(nvec, 6, generator)
    padded = multi_categorical_logits(flat, nvec)
    torch.testing.assert_close(multi_categorical_log_prob(padded, action), _reference_log_prob(flat, action, nvec))
    torch.testing.assert_close(multi_categorical_entropy(padded), _reference_entropy(flat, nvec))


def test_padded_logits_give_finite_gradients_only_to_real_logits():
    flat = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    padded = multi_categorical_logits(flat, (3, 2))
    (multi_categorical_entropy(padded).sum() + multi_categorical_log_prob(padded, torch.tensor([[2, 1]] * 3)).sum()
     ).backward()
    assert torch.isfinite(flat.grad).all() and flat.grad.abs().sum() > 0


def test_bad_nvec_and_widths_are_refused():
    with pytest.raises(ValueError, match="sum\\(nvec\\) = 5"):
        multi_categorical_logits(torch.zeros(2, 4), (3, 2))
    with pytest.raises(ValueError, match="each >= 1"):
        multi_categorical_logits(torch.zeros(2, 0), ())


def _reference_ppo(flat_new, flat_old, action, value_new, value_old, adv, return_, weight, nvec, clip, dual_clip,
                   value_clip):
    """Per-sample loop: one joint ratio per sample, clipped once."""
    batch = flat_new.shape[0]
    policy, value, ent = 0.0, 0.0, 0.0
    for i in range(batch):
        logp_new = _reference_log_prob(flat_new[i], action[i], nvec)
        logp_old = _reference_log_prob(flat_old[i], action[i], nvec)
        ratio = torch.exp(logp_new - logp_old)
        objective = torch.min(ratio * adv[i], ratio.clamp(1 - clip, 1 + clip) * adv[i])
        if dual_clip is not None and adv[i] < 0:
            objective = torch.max(objective, dual_clip * adv[i])
        policy = policy - objective * weight[i]
        error = (return_[i] - value_new[i]) ** 2
        if value_clip:
            clipped = value_old[i] + (value_new[i] - value_old[i]).clamp(-clip, clip)
            error = torch.max(error, (return_[i] - clipped) ** 2)
        value = value + 0.5 * error * weight[i]
        ent = ent + _reference_entropy(flat_new[i], nvec) * weight[i]
    return policy / batch, value / batch, ent / batch


@pytest.mark.parametrize("nvec", [(3, 2, 4), (2, 2)])
@pytest.mark.parametrize("dual_clip, value_clip", [(None, False), (3.0, True)])
def test_ppo_multi_discrete_matches_a_joint_ratio_loop_with_gradients(nvec, dual_clip, value_clip):
    generator = torch.Generator().manual_seed(1)
    batch = 7
    flat_old = torch.randn(batch, sum(nvec), dtype=torch.float64, generator=generator)
    flat_new = (flat_old + 0.8 * torch.randn(batch, sum(nvec), dtype=torch.float64, generator=generator))
    flat_new.requires_grad_(True)
    value_new = torch.randn(batch, dtype=torch.float64, generator=generator, requires_grad=True)
    value_old, adv, return_ = (torch.randn(batch, dtype=torch.float64, generator=generator) for _ in range(3))
    weight = torch.rand(batch, dtype=torch.float64, generator=generator)
    action = _actions(nvec, batch, generator)
    data = ppo_data(multi_categorical_logits(flat_new, nvec), multi_categorical_logits(flat_old, nvec), action,
                    value_new, value_old, adv, return_, weight)
    loss, info = ppo_error_multi_discrete(data, 0.2, value_clip, dual_clip)
    total = loss.policy_loss + loss.value_loss - 0.01 * loss.entropy_loss
    grads = torch.autograd.grad(total, (flat_new, value_new))

    flat_ref = flat_new.detach().clone().requires_grad_(True)
    value_ref = value_new.detach().clone().requires_grad_(True)
    policy, value, ent = _reference_ppo(flat_ref, flat_old, action, value_ref, value_old, adv, return_, weight, nvec,
                                        0.2, dual_clip, value_clip)
    torch.testing.assert_close(loss.policy_loss, policy)
    torch.testing.assert_close(loss.value_loss, value)
    torch.testing.assert_close(loss.entropy_loss, ent)
    ref_grads = torch.autograd.grad(policy + value - 0.01 * ent, (flat_ref, value_ref))
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want)
    logp_new = _reference_log_prob(flat_new.detach(), action, nvec)
    logp_old = _reference_log_prob(flat_old, action, nvec)
    assert info.approx_kl == pytest.approx((logp_old - logp_new).mean().item())
    ratio = (logp_new - logp_old).exp()
    assert info.clipfrac == pytest.approx(((ratio > 1.2) | (ratio < 0.8)).double().mean().item())


def test_ppo_multi_discrete_with_equal_policies_is_minus_the_mean_advantage():
    # ratio 1 everywhere: the loss is -mean(adv) (hand-computed), whatever K, and nothing is clipped.
    flat = torch.randn(4, 5)
    adv = torch.tensor([1.0, -2.0, 0.5, 4.0])
    padded = multi_categorical_logits(flat, (3, 2))
    data = ppo_data(padded, padded, torch.tensor([[0, 1], [2, 0], [1, 1], [0, 0]]), torch.zeros(4), torch.zeros(4),
                    adv, torch.zeros(4), None)
    loss, info = ppo_error_multi_discrete(data)
    assert loss.policy_loss.item() == pytest.approx(-0.875)
    assert info.clipfrac == 0.0 and info.approx_kl == pytest.approx(0.0, abs=1e-7)


def test_ppo_multi_discrete_shapes_are_checked():
    padded = multi_categorical_logits(torch.randn(4, 5), (3, 2))
    with pytest.raises(ValueError, match="adv has shape"):
        ppo_error_multi_discrete(ppo_data(padded, padded, torch.zeros(4, 2, dtype=torch.long), torch.zeros(4),
                                          torch.zeros(4), torch.zeros(4, 2), torch.zeros(4), None))
    with pytest.raises(ValueError, match="logit_new has shape"):
        ppo_error_multi_discrete(ppo_data(padded, padded, torch.zeros(4, dtype=torch.long), torch.zeros(4),
                                          torch.zeros(4), torch.zeros(4), torch.zeros(4), None))


@pytest.mark.parametrize("batch", [1, 5])
def test_a2c_multi_discrete_matches_a_loop(batch):
    nvec = (3, 1, 4)
    generator = torch.Generator().manual_seed(2)
    flat = torch.randn(batch, sum(nvec), dtype=torch.float64, generator=generator, requires_grad=True)
    value = torch.randn(batch, dtype=torch.float64, generator=generator, requires_grad=True)
    adv, return_ = (torch.randn(batch, dtype=torch.float64, generator=generator) for _ in range(2))
    action = _actions(nvec, batch, generator)
    loss = a2c_error_multi_discrete(a2c_data(multi_categorical_logits(flat, nvec), action, value, adv, return_, None))
    log_prob = _reference_log_prob(flat, action, nvec)
    torch.testing.assert_close(loss.policy_loss, -(log_prob * adv).mean())
    torch.testing.assert_close(loss.value_loss, ((return_ - value) ** 2).mean())
    torch.testing.assert_close(loss.entropy_loss, _reference_entropy(flat, nvec).mean())
    grad = torch.autograd.grad(loss.policy_loss - 0.1 * loss.entropy_loss, flat)[0]
    want = torch.autograd.grad(-(log_prob * adv).mean() - 0.1 * _reference_entropy(flat, nvec).mean(), flat)[0]
    torch.testing.assert_close(grad, want)


def test_a2c_multi_discrete_uniform_entropy_is_the_sum_of_logs():
    padded = multi_categorical_logits(torch.zeros(2, 7), (3, 4))
    loss = a2c_error_multi_discrete(a2c_data(padded, torch.zeros(2, 2, dtype=torch.long), torch.zeros(2),
                                             torch.zeros(2), torch.zeros(2), None))
    assert loss.entropy_loss.item() == pytest.approx(math.log(3) + math.log(4))
