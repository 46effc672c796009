"""Value tests for zoo.rl_utils.hl_gauss against float64 loops, scipy.stats.norm and hand-computed cases."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import log_softmax
from scipy.stats import norm, truncnorm

from zoo.rl_utils.hl_gauss import (
    HLGauss,
    categorical_to_scalar,
    hl_gauss_loss,
    hl_gauss_probs,
    two_hot,
    two_hot_loss,
)

# ---------------------------------------------------------------- independent references (plain float64 loops)


def ref_edges(min_value: float, max_value: float, num_bins: int) -> list[float]:
    width = (max_value - min_value) / num_bins
    return [min_value + k * width for k in range(num_bins + 1)]


def ref_centers(min_value: float, max_value: float, num_bins: int) -> list[float]:
    width = (max_value - min_value) / num_bins
    return [min_value + (k + 0.5) * width for k in range(num_bins)]


def ref_hl_gauss(target: float, min_value: float, max_value: float, num_bins: int, sigma: float) -> np.ndarray:
    t = min(max(target, min_value), max_value)
    edges = ref_edges(min_value, max_value, num_bins)
    mass = norm.cdf(max_value, t, sigma) - norm.cdf(min_value, t, sigma)
    return np.array([(norm.cdf(edges[k + 1], t, sigma) - norm.cdf(edges[k], t, sigma)) / mass
                     for k in range(num_bins)])


def ref_two_hot(target: float, min_value: float, max_value: float, num_bins: int) -> np.ndarray:
    centers = ref_centers(min_value, max_value, num_bins)
    t = min(max(target, centers[0]), centers[-1])
    probs = np.zeros(num_bins)
    for k in range(num_bins - 1):
        if centers[k] <= t <= centers[k + 1]:
            upper = (t - centers[k]) / (centers[k + 1] - centers[k])
            probs[k], probs[k + 1] = 1 - upper, upper
            return probs
    raise AssertionError("unreachable")


def ref_cross_entropy(logits: np.ndarray, probs: np.ndarray) -> float:
    return float(np.mean(-(probs * log_softmax(logits, axis=-1)).sum(-1)))


supports = st.tuples(
    st.floats(-100, 100), st.floats(0.1, 200), st.integers(2, 64)
).map(lambda s: (s[0], s[0] + s[1], s[2]))


# ---------------------------------------------------------------- HL-Gauss probabilities


def test_hand_computed_two_bins():
    # bins [-1, 0], [0, 1]; sigma = 0.75 * 1; target 0.5 -> standardised edges -2, -2/3, 2/3.
    phi = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))  # noqa: E731
    mass = phi(2 / 3) - phi(-2)
    expected = [(phi(-2 / 3) - phi(-2)) / mass, (phi(2 / 3) - phi(-2 / 3)) / mass]
    probs = hl_gauss_probs(torch.tensor(0.5, dtype=torch.float64), -1.0, 1.0, 2)
    np.testing.assert_allclose(probs.numpy(), expected, rtol=1e-12)
    symmetric = hl_gauss_probs(torch.tensor([0.0]), -1.0, 1.0, 2)
    np.testing.assert_allclose(symmetric.numpy(), [[0.5, 0.5]], atol=1e-7)


@settings(max_examples=30, deadline=None)
@given(support=supports, fractions=st.lists(st.floats(-0.5, 1.5), min_size=1, max_size=6),
       sigma_ratio=st.floats(0.05, 4.0))
def test_matches_scipy_reference_and_sums_to_one(support, fractions, sigma_ratio):
    min_value, max_value, num_bins = support
    sigma = sigma_ratio * (max_value - min_value) / num_bins
    targets = [min_value + f * (max_value - min_value) for f in fractions]  # some outside: clamped
    expected = np.stack([ref_hl_gauss(t, min_value, max_value, num_bins, sigma) for t in targets])
    # Rounding the target and edges to the dtype moves them by ~eps * |value|, i.e. the standardised edges by
    # eps * |value| / sigma; the probabilities (density <= 0.4 per unit z) move by at most a few times that.
    scale = max(abs(min_value), abs(max_value)) / sigma
    for dtype in (torch.float64, torch.float32):
        tol = 1e-12 + 4 * torch.finfo(dtype).eps * (1 + scale)
        probs = hl_gauss_probs(torch.tensor(targets, dtype=dtype), min_value, max_value, num_bins, sigma)
        assert probs.dtype == dtype and probs.shape == (len(targets), num_bins)
        assert (probs >= 0).all()
        np.testing.assert_allclose(probs.sum(-1).double().numpy(), 1.0, atol=10 * torch.finfo(dtype).eps * num_bins)
        np.testing.assert_allclose(probs.double().numpy(), expected, atol=tol)


def test_far_tail_has_relative_precision_in_float32_and_float64():
    # Differences of the CDF near 1 would round to 0 here; the tail bins must keep relative accuracy.
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    min_value, max_value, num_bins = -10.0, 10.0, 51
    sigma = 0.75 * 20 / 51
    edges = ref_edges(min_value, max_value, num_bins)
    upper_tail = [mpmath.ncdf(-(mpmath.mpf(e) - min_value) / sigma) for e in edges]
    exact = [float((upper_tail[k] - upper_tail[k + 1]) / upper_tail[0]) for k in range(num_bins)]
    for dtype, smallest in ((torch.float64, 1e-250), (torch.float32, 1e-30)):
        probs = hl_gauss_probs(torch.tensor([min_value], dtype=dtype), min_value, max_value, num_bins)[0].double()
        for k, value in enumerate(exact):
            if value > smallest:
                assert abs(probs[k].item() - value) <= 1e-4 * value, (dtype, k)


@pytest.mark.parametrize("shape", [(), (3,), (2, 3, 4)])
def test_shapes_and_dtypes(shape):
    target = torch.randn(shape, dtype=torch.float64)
    assert hl_gauss_probs(target, -3.0, 3.0, 7).shape == (*shape, 7)
    assert hl_gauss_probs(target.float(), -3.0, 3.0, 7).dtype == torch.float32
    assert two_hot(target, -3.0, 3.0, 7).shape == (*shape, 7)
    assert hl_gauss_probs(torch.tensor([1, 2]), -3.0, 3.0, 7).dtype == torch.get_default_dtype()


def test_clamping_out_of_support_targets():
    inside = hl_gauss_probs(torch.tensor([-2.0, 5.0], dtype=torch.float64), -2.0, 5.0, 9)
    outside = hl_gauss_probs(torch.tensor([-30.0, 1e6], dtype=torch.float64), -2.0, 5.0, 9)
    infinite = hl_gauss_probs(torch.tensor([-math.inf, math.inf], dtype=torch.float64), -2.0, 5.0, 9)
    torch.testing.assert_close(outside, inside, rtol=0, atol=0)
    torch.testing.assert_close(infinite, inside, rtol=0, atol=0)


def test_small_sigma_is_nearly_one_hot():
    centers = ref_centers(-1.0, 1.0, 10)
    target = torch.tensor(centers, dtype=torch.float64)
    probs = hl_gauss_probs(target, -1.0, 1.0, 10, sigma=1e-3 * 0.2)
    torch.testing.assert_close(probs, torch.eye(10, dtype=torch.float64), rtol=0, atol=1e-12)


# ---------------------------------------------------------------- expectation over centers


def mean_error_bound(t: float, min_value: float, max_value: float, width: float, sigma: float) -> float:
    # E_centers = E_trunc[X] - E_trunc[s(X)] with s(x) = x - center(x) a period-w sawtooth. Its n-th harmonic
    # has amplitude w / (pi n) and is damped by exp(-2 pi^2 n^2 sigma^2 / w^2) under N(t, sigma^2): for
    # sigma = 0.75 w that is ~4.8e-6 w. Truncation adds |E_trunc[X] - t| plus at most (w / 2) P(outside).
    fourier = sum(width / (math.pi * n) * math.exp(-2 * math.pi**2 * n**2 * sigma**2 / width**2) for n in range(1, 6))
    a, b = (min_value - t) / sigma, (max_value - t) / sigma
    inside = norm.cdf(b) - norm.cdf(a)
    truncation = abs(truncnorm.mean(a, b, loc=t, scale=sigma) - t)
    return truncation + (fourier + width / 2 * (1 - inside)) / inside


def test_mean_recovers_target_deep_inside_support():
    # >= 6 sigma from both edges the truncation bias is < phi(6) sigma ~ 5e-9 w, so only the
    # discretisation error (~4.8e-6 w for sigma = 0.75 w) remains: 1e-5 w is a tight tolerance.
    min_value, max_value, num_bins = -10.0, 10.0, 51
    width = 20 / 51
    sigma = 0.75 * width
    targets = torch.linspace(min_value + 6 * sigma, max_value - 6 * sigma, 997, dtype=torch.float64)
    centers = torch.tensor(ref_centers(min_value, max_value, num_bins), dtype=torch.float64)
    mean = (hl_gauss_probs(targets, min_value, max_value, num_bins) * centers).sum(-1)
    assert (mean - targets).abs().max().item() <= 1e-5 * width
    # A genuine discretisation error exists (it is not identically zero), so the tolerance is meaningful.
    assert (mean - targets).abs().max().item() >= 1e-7 * width


@settings(max_examples=30, deadline=None)
@given(support=supports, fraction=st.floats(0, 1), sigma_ratio=st.floats(0.5, 1.5))
def test_mean_within_bound_at_least_three_sigma_inside(support, fraction, sigma_ratio):
    min_value, max_value, num_bins = support
    width = (max_value - min_value) / num_bins
    sigma = sigma_ratio * width
    if max_value - min_value <= 6 * sigma:
        return
    t = min_value + 3 * sigma + fraction * (max_value - min_value - 6 * sigma)
    probs = hl_gauss_probs(torch.tensor(t, dtype=torch.float64), min_value, max_value, num_bins, sigma)
    mean = float((probs.numpy() * np.array(ref_centers(min_value, max_value, num_bins))).sum())
    assert abs(mean - t) <= mean_error_bound(t, min_value, max_value, width, sigma) + 1e-12 * (1 + abs(t))


def test_edges_biased_inward_but_inside_support():
    model = HLGauss(-10.0, 10.0, 51)
    centers = model.centers.double()
    targets = torch.tensor([-50.0, -10.0, -9.9, 9.9, 10.0, 50.0], dtype=torch.float64)
    mean = (hl_gauss_probs(targets, -10.0, 10.0, 51) * centers).sum(-1)
    clamped = targets.clamp(-10.0, 10.0)
    assert (mean[:3] > clamped[:3]).all() and (mean[3:] < clamped[3:]).all()
    assert ((mean >= centers[0]) & (mean <= centers[-1])).all()
    # On the edge the target is a half-normal discretised on bins that start exactly at the edge, so its
    # mean is near, but measurably off (~0.09 w here), the continuous edge + sigma sqrt(2 / pi).
    assert abs(mean[1].item() - (-10.0 + model.sigma * math.sqrt(2 / math.pi))) < 0.25 * model.bin_width
    # The expectation is monotone in the target, so clamped targets order correctly.
    dense = torch.linspace(-12.0, 12.0, 501, dtype=torch.float64)
    dense_mean = model.to_scalar(torch.log(hl_gauss_probs(dense, -10.0, 10.0, 51)))
    assert (dense_mean.diff() >= -1e-12).all()


# ---------------------------------------------------------------- categorical -> scalar


def test_categorical_to_scalar_hand_computed():
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64))
    value = categorical_to_scalar(logits, -1.0, 1.0, 4)  # centers -0.75, -0.25, 0.25, 0.75
    torch.testing.assert_close(value, torch.tensor([0.25, 0.0], dtype=torch.float64))
    peaked = torch.tensor([0.0, 0.0, 1e4, 0.0])
    assert categorical_to_scalar(peaked, -1.0, 1.0, 4).item() == pytest.approx(0.25)
    with pytest.raises(ValueError, match="logits"):
        categorical_to_scalar(torch.zeros(3, 5), -1.0, 1.0, 4)


# ---------------------------------------------------------------- two-hot


@settings(max_examples=30, deadline=None)
@given(support=supports, targets=st.lists(st.floats(-300, 300), min_size=1, max_size=8))
def test_two_hot_matches_reference_and_is_exact(support, targets):
    min_value, max_value, num_bins = support
    centers = np.array(ref_centers(min_value, max_value, num_bins))
    probs = two_hot(torch.tensor(targets, dtype=torch.float64), min_value, max_value, num_bins).numpy()
    expected = np.stack([ref_two_hot(t, min_value, max_value, num_bins) for t in targets])
    np.testing.assert_allclose(probs, expected, atol=1e-9)
    assert ((probs > 0).sum(-1) <= 2).all() and (probs >= 0).all()
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-12)
    clamped = np.clip(targets, centers[0], centers[-1])
    np.testing.assert_allclose(probs @ centers, clamped, atol=1e-6)
    probs32 = two_hot(torch.tensor(targets, dtype=torch.float32), min_value, max_value, num_bins)
    # float32 rounds targets and centers by ~6e-8 relative; 1e-5 leaves room for the weight arithmetic.
    assert (np.abs(probs32.double().numpy() @ centers - clamped) <= 1e-5 * (1 + np.abs(clamped))).all()


def test_two_hot_hand_cases_and_exact_one_hot_on_centers():
    probs = two_hot(torch.tensor([0.5, -0.75, 0.0, -5.0, 5.0, 0.7]), -1.0, 1.0, 4)
    expected = torch.tensor([[0, 0, 0.5, 0.5], [1, 0, 0, 0], [0, 0.5, 0.5, 0], [1, 0, 0, 0], [0, 0, 0, 1],
                             [0, 0, 0.1, 0.9]])
    torch.testing.assert_close(probs, expected)
    for dtype in (torch.float32, torch.float64):
        model = HLGauss(-7.3, 11.9, 37)
        centers = torch.linspace(-7.3, 11.9, 38, dtype=dtype)
        centers = (centers[:-1] + centers[1:]) / 2
        one_hot = two_hot(centers, -7.3, 11.9, model.num_bins)
        assert torch.equal(one_hot, torch.eye(37, dtype=dtype))


# ---------------------------------------------------------------- losses and gradients


@pytest.mark.parametrize("loss_fn, ref_probs", [
    (hl_gauss_loss, lambda t: ref_hl_gauss(t, -2.0, 3.0, 11, 0.75 * 5 / 11)),
    (two_hot_loss, lambda t: ref_two_hot(t, -2.0, 3.0, 11)),
])
def test_loss_value_and_gradient(loss_fn, ref_probs):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 11, dtype=torch.float64, generator=generator, requires_grad=True)
    target = (torch.rand(2, 3, dtype=torch.float64, generator=generator) * 7 - 3).requires_grad_()
    expected_probs = np.stack([ref_probs(t) for t in target.detach().flatten().tolist()]).reshape(2, 3, 11)
    loss = loss_fn(logits, target, -2.0, 3.0, 11)
    assert loss.dim() == 0
    assert loss.item() == pytest.approx(ref_cross_entropy(logits.detach().numpy(), expected_probs), rel=1e-10)
    loss.backward()
    expected_grad = (torch.softmax(logits.detach(), -1).numpy() - expected_probs) / 6  # mean over 6 targets
    np.testing.assert_allclose(logits.grad.numpy(), expected_grad, atol=1e-10)
    assert target.grad is None  # the target distribution carries no gradient
    assert torch.autograd.gradcheck(lambda x: loss_fn(x, target, -2.0, 3.0, 11), (logits.detach().requires_grad_(),))


def test_loss_minimum_is_target_entropy_and_probs_need_no_grad():
    target = torch.tensor([0.3, -1.7, 2.9], dtype=torch.float64, requires_grad=True)
    probs = hl_gauss_probs(target, -2.0, 3.0, 11)
    assert not probs.requires_grad and not two_hot(target, -2.0, 3.0, 11).requires_grad
    entropy = -(probs * probs.log()).sum(-1).mean()
    torch.testing.assert_close(hl_gauss_loss(probs.log(), target, -2.0, 3.0, 11), entropy)
    assert hl_gauss_loss(probs.log() + 0.1 * torch.randn_like(probs), target, -2.0, 3.0, 11) > entropy


def test_loss_rejects_mismatched_logits():
    with pytest.raises(ValueError, match=r"logits has shape \(4, 10\).*\(4, 11\)"):
        hl_gauss_loss(torch.zeros(4, 10), torch.zeros(4), -1.0, 1.0, 11)
    with pytest.raises(ValueError, match="logits"):
        two_hot_loss(torch.zeros(3, 11), torch.zeros(4), -1.0, 1.0, 11)


def test_no_input_is_mutated():
    logits = torch.randn(6, 9, requires_grad=True)
    target = torch.tensor([-5.0, -1.0, 0.0, 0.4, 1.0, 9.0])
    logits_before, target_before = logits.detach().clone(), target.clone()
    hl_gauss_probs(target, -1.0, 1.0, 9)
    two_hot(target, -1.0, 1.0, 9)
    categorical_to_scalar(logits, -1.0, 1.0, 9)
    hl_gauss_loss(logits, target, -1.0, 1.0, 9).backward()
    two_hot_loss(logits, target, -1.0, 1.0, 9).backward()
    assert torch.equal(logits.detach(), logits_before) and torch.equal(target, target_before)


# ---------------------------------------------------------------- HLGauss and validation


def test_hl_gauss_class_values_and_agreement():
    model = HLGauss(-1.0, 1.0, 4)
    torch.testing.assert_close(model.edges, torch.tensor([-1.0, -0.5, 0.0, 0.5, 1.0]))
    torch.testing.assert_close(model.centers, torch.tensor([-0.75, -0.25, 0.25, 0.75]))
    assert model.bin_width == pytest.approx(0.5) and model.sigma == pytest.approx(0.375)
    assert HLGauss(-1.0, 1.0, 4, sigma_ratio=2.0).sigma == pytest.approx(1.0)
    target = torch.tensor([-2.0, 0.1, 0.9])
    logits = torch.randn(3, 4)
    torch.testing.assert_close(model.to_probs(target), hl_gauss_probs(target, -1.0, 1.0, 4))
    torch.testing.assert_close(model.to_scalar(logits), categorical_to_scalar(logits, -1.0, 1.0, 4))
    torch.testing.assert_close(model.loss(logits, target), hl_gauss_loss(logits, target, -1.0, 1.0, 4, 0.375))
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.num_bins = 5


@pytest.mark.parametrize("kwargs, message", [
    ({"num_bins": 1}, "num_bins"),
    ({"num_bins": 2.5}, "num_bins"),
    ({"min_value": 1.0, "max_value": 1.0}, "min_value < max_value"),
    ({"min_value": 2.0, "max_value": 1.0}, "min_value < max_value"),
    ({"max_value": math.inf}, "finite"),
    ({"sigma": 0.0}, "sigma"),
    ({"sigma": -1.0}, "sigma"),
    ({"sigma": math.nan}, "sigma"),
])
def test_validation_errors(kwargs, message):
    arguments = {"min_value": -1.0, "max_value": 1.0, "num_bins": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        hl_gauss_probs(torch.zeros(2), **arguments)
    sigma = arguments.pop("sigma", None)
    if sigma is None:
        with pytest.raises(ValueError, match=message):
            two_hot(torch.zeros(2), **arguments)
        with pytest.raises(ValueError, match=message):
            HLGauss(**arguments)
    else:
        with pytest.raises(ValueError, match="sigma_ratio"):
            HLGauss(**arguments, sigma_ratio=sigma)
