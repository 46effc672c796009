"""RunningMeanStd and ReturnNormalizer against numpy over the concatenated data and a plain-loop reference."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.rl_utils.normalisation import ReturnNormalizer, RunningMeanStd, normalize


def _batches(rng: np.random.Generator, sizes: list[int], shape: tuple[int, ...]) -> list[np.ndarray]:
    # Non-zero mean and non-unit scale so the prior (0, 1) and the data are distinguishable.
    return [rng.normal(3.0, 2.5, size=(n, *shape)) for n in sizes]


@pytest.mark.parametrize("shape", [(), (3,), (2, 2)])
def test_update_over_batches_equals_numpy_over_concatenation(shape):
    rng = np.random.default_rng(0)
    batches = _batches(rng, [5, 1, 17, 2], shape)
    rms = RunningMeanStd(shape=shape, epsilon=0.0)
    for batch in batches:
        rms.update(batch)
    data = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean, data.mean(axis=0), rtol=0, atol=1e-10)
    np.testing.assert_allclose(rms.var, data.var(axis=0), rtol=0, atol=1e-10)
    np.testing.assert_allclose(rms.std, data.std(axis=0), rtol=0, atol=1e-10)
    assert rms.count == rms.data_count == len(data)
    assert rms.mean.shape == shape and rms.mean.dtype == np.float64


def test_prior_pseudo_count_matches_closed_form():
    # epsilon pseudo-samples of mean 0 and variance 1 pooled with the data, written out by hand.
    rng = np.random.default_rng(1)
    data = rng.normal(-1.0, 0.5, size=(40, 2))
    eps = 0.25
    rms = RunningMeanStd(shape=(2,), epsilon=eps)
    rms.update(data[:15])
    rms.update(torch.as_tensor(data[15:], dtype=torch.float64))
    n, m, v = len(data), data.mean(axis=0), data.var(axis=0)
    expected_mean = n * m / (n + eps)
    expected_var = (eps * (1.0 + expected_mean**2) + n * (v + (m - expected_mean) ** 2)) / (n + eps)
    np.testing.assert_allclose(rms.mean, expected_mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rms.var, expected_var, rtol=0, atol=1e-12)
    assert rms.count == pytest.approx(n + eps) and rms.data_count == n


def test_empty_statistics_and_empty_batch():
    rms = RunningMeanStd(shape=(2,), epsilon=0.0)
    np.testing.assert_array_equal(rms.mean, [0.0, 0.0])
    np.testing.assert_array_equal(rms.var, [1.0, 1.0])
    rms.update(np.zeros((0, 2)))
    assert rms.data_count == 0


def test_batch_of_size_one_has_zero_variance_then_combines():
    rms = RunningMeanStd(epsilon=0.0)
    rms.update(np.array([4.0]))
    assert rms.mean == 4.0 and rms.var == 0.0
    rms.update(np.array([2.0]))
    assert rms.mean == 3.0 and rms.var == 1.0  # hand case: values 4, 2


def _chan_with_one_sample(count, mean, var, x):
    # Chan et al. as the general path computes it for a batch of one: count_b = 1, mean_b = x / 1, var_b = 0 / 1.
    mean_b, var_b = x / 1, np.zeros_like(x) / 1
    total = count + 1
    delta = mean_b - mean
    return total, mean + delta * (1 / total), (var * count + var_b * 1 + np.square(delta) * (count * 1 / total)) / total


@pytest.mark.parametrize("shape", [(), (11,)])
def test_single_sample_updates_give_the_bits_of_the_general_formula_and_the_data_statistics(shape):
    # One env's step at a time (the collectors' case) has a path of its own: the same floats as the batch formula.
    rng = np.random.default_rng(5)
    rms = RunningMeanStd(shape=shape, epsilon=1e-4)
    rms.update(rng.normal(3.0, 2.5, size=(4, *shape)))
    count, mean, var = rms.data_count, rms.state_dict()["data_mean"], rms.state_dict()["data_var"]
    seen = [rms.state_dict()]
    samples = rng.normal(-1.0, 4.0, size=(300, *shape)) * rng.uniform(0.0, 3.0, size=(300, *shape))
    for x in samples:
        rms.update(x[None])
        count, mean, var = _chan_with_one_sample(count, np.asarray(mean), np.asarray(var), x)
        state = rms.state_dict()
        assert state["data_count"] == count
        assert np.array_equal(state["data_mean"], mean) and np.array_equal(state["data_var"], var)
        seen.append(state)
    data = samples
    part = rms.since(seen[0])  # the 300 single samples alone
    np.testing.assert_allclose(part.mean, data.mean(axis=0), rtol=0, atol=1e-9)
    np.testing.assert_allclose(part.var, data.var(axis=0), rtol=1e-9)
    # the prior-combined moments follow: epsilon pseudo-samples of mean 0 and variance 1
    total = 1e-4 + count
    np.testing.assert_allclose(rms.mean, mean * count / total, rtol=1e-12)


def test_torch_float32_input_is_accumulated_in_float64():
    values = torch.tensor([[1.0, 2.0, 3.0], [5.0, 7.0, 11.0]], dtype=torch.float32)
    rms = RunningMeanStd(shape=(3,), epsilon=0.0)
    rms.update(values)
    np.testing.assert_allclose(rms.mean, [3.0, 4.5, 7.0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(rms.var, [4.0, 6.25, 16.0], rtol=0, atol=1e-12)


def test_wrong_shape_names_expected_shape():
    rms = RunningMeanStd(shape=(3,))
    with pytest.raises(ValueError, match=r"S = \(3,\)"):
        rms.update(np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"S = \(3,\)"):
        rms.update(np.zeros(3))  # a single sample without the batch dimension
    with pytest.raises(ValueError, match=r"S = \(3,\)"):
        rms.normalize(np.zeros((5, 4)))
    with pytest.raises(ValueError, match=r"S = \(\)"):
        RunningMeanStd().update(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="NaN"):
        rms.update(np.array([[0.0, np.nan, 1.0]]))
    assert rms.data_count == 0


def test_attributes_are_read_only():
    rms = RunningMeanStd(shape=(2,))
    with pytest.raises(ValueError):
        rms.mean[0] = 1.0


def test_merge_equals_one_instance_over_all_data():
    rng = np.random.default_rng(2)
    first, second = _batches(rng, [7, 3], (3,)), _batches(rng, [11, 1, 4], (3,))
    worker_a, worker_b, single = (RunningMeanStd(shape=(3,)) for _ in range(3))
    for batch in first:
        worker_a.update(batch)
        single.update(batch)
    for batch in second:
        worker_b.update(batch)
        single.update(batch)
    b_state = worker_b.state_dict()
    worker_a.merge(worker_b)
    np.testing.assert_allclose(worker_a.mean, single.mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(worker_a.var, single.var, rtol=0, atol=1e-12)
    assert worker_a.count == pytest.approx(single.count)
    np.testing.assert_array_equal(worker_b.state_dict()["data_mean"], b_state["data_mean"])  # other untouched
    with pytest.raises(ValueError, match="expected"):
        worker_a.merge(RunningMeanStd(shape=()))


def test_merge_with_empty_instance_is_identity():
    rms = RunningMeanStd(shape=(2,))
    rms.update(np.array([[1.0, 2.0], [3.0, 5.0]]))
    mean, var = rms.mean.copy(), rms.var.copy()
    rms.merge(RunningMeanStd(shape=(2,)))
    np.testing.assert_array_equal(rms.mean, mean)
    np.testing.assert_array_equal(rms.var, var)


def test_state_dict_round_trips_exactly_through_pickle():
    rng = np.random.default_rng(3)
    rms = RunningMeanStd(shape=(3,), epsilon=1e-3)
    for batch in _batches(rng, [9, 4], (3,)):
        rms.update(batch)
    restored = RunningMeanStd(shape=(3,))
    restored.load_state_dict(pickle.loads(pickle.dumps(rms.state_dict())))
    np.testing.assert_array_equal(restored.mean, rms.mean)
    np.testing.assert_array_equal(restored.var, rms.var)
    assert restored.count == rms.count and restored.epsilon == 1e-3
    batch = rng.normal(size=(5, 3))
    rms.update(batch)
    restored.update(batch)
    np.testing.assert_array_equal(restored.var, rms.var)
    with pytest.raises(ValueError, match=r"expected \(\)"):
        RunningMeanStd().load_state_dict(rms.state_dict())


def test_normalize_values_clip_and_kinds():
    rms = RunningMeanStd(shape=(2,), epsilon=0.0)
    rms.update(np.array([[0.0, 10.0], [2.0, 30.0]]))  # mean (1, 20), var (1, 100)
    x = np.array([[3.0, 20.0], [1.0, 500.0]])
    expected = (x - [1.0, 20.0]) / np.sqrt(np.array([1.0, 100.0]) + 1e-8)
    np.testing.assert_allclose(rms.normalize(x), expected, rtol=1e-12)
    np.testing.assert_allclose(rms.normalize(x, clip=5.0), np.clip(expected, -5.0, 5.0), rtol=1e-12)
    assert rms.normalize(x, clip=5.0)[1, 1] == 5.0

    as_f32 = rms.normalize(x.astype(np.float32))
    assert as_f32.dtype == np.float32 and rms.normalize(x).dtype == np.float64
    assert rms.normalize(np.array([[1, 20]])).dtype == np.float64  # integers become float64

    tensor = torch.tensor(x, dtype=torch.float32)
    out = rms.normalize(tensor, clip=5.0)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.device == tensor.device
    np.testing.assert_allclose(out.numpy(), np.clip(expected, -5.0, 5.0), rtol=1e-6)
    assert rms.normalize(torch.tensor(x)).dtype == torch.float64
    np.testing.assert_array_equal(tensor.numpy(), x.astype(np.float32))  # input untouched

    back = rms.denormalize(rms.normalize(x))
    np.testing.assert_allclose(back, x, rtol=1e-12)
    np.testing.assert_allclose(rms.denormalize(rms.normalize(tensor)).numpy(), x, rtol=1e-6)


def test_numpy_clipping_is_np_clip_bit_for_bit_nan_signed_zero_and_infinities_included():
    x = np.random.default_rng(1).normal(0.0, 10.0, 1000)
    x[::37], x[5], x[6], x[7] = np.nan, -0.0, np.inf, -np.inf
    ours, reference = normalize(x, 0.0, 1.0, 5.0), np.clip(x, -5.0, 5.0)
    assert np.array_equal(ours, reference, equal_nan=True) and np.array_equal(np.signbit(ours), np.signbit(reference))
    assert normalize(np.float32(-30.0), 0.0, 1.0, 5.0) == np.float32(-5.0)  # a scalar stays a scalar


def test_free_normalize_hand_case():
    np.testing.assert_array_equal(normalize(np.array([1.0, 3.0]), 2.0, 0.5), [-2.0, 2.0])
    out = normalize(torch.tensor([1.0, 9.0]), torch.tensor(2.0), 0.5, clip=3.0)
    assert torch.equal(out, torch.tensor([-2.0, 3.0]))
    with pytest.raises(ValueError, match="clip"):
        normalize(np.zeros(2), 0.0, 1.0, clip=0.0)


@settings(max_examples=30, deadline=None)
@given(
    data=st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=6),
    split_at=st.integers(0, 60),
)
def test_any_batch_split_and_merge_gives_the_concatenated_statistics(data, cuts, split_at):
    values = np.array(data, dtype=np.float64)
    bounds = sorted({0, len(values), *(c for c in cuts if c <= len(values))})
    rms = RunningMeanStd(epsilon=0.0)
    for start, stop in zip(bounds[:-1], bounds[1:]):
        rms.update(values[start:stop])
    scale = max(1.0, float(np.abs(values).max()) ** 2)
    assert abs(float(rms.mean) - values.mean()) <= 1e-10 * np.sqrt(scale)
    assert abs(float(rms.var) - values.var()) <= 1e-10 * scale

    split = min(split_at, len(values))
    left, right = RunningMeanStd(epsilon=0.0), RunningMeanStd(epsilon=0.0)
    left.update(values[:split])
    right.update(values[split:])
    left.merge(right)
    assert left.data_count == len(values)
    assert abs(float(left.var) - values.var()) <= 1e-10 * scale


def _reference_return_scaling(rewards, dones, gamma, epsilon, clip, masks=None):
    """Plain python loop: per-env accumulator, statistics over every accumulator value so far (numpy var).
    Where ``masks[t][i]`` is False the step does not count: accumulator, statistics and done stay untouched."""
    num_steps, num_envs = len(rewards), len(rewards[0])
    masks = masks or [[True] * num_envs for _ in range(num_steps)]
    returns = [0.0] * num_envs
    seen, outputs = [], []
    for t in range(num_steps):
        returns = [returns[i] * gamma + rewards[t][i] if masks[t][i] else returns[i] for i in range(num_envs)]
        seen.extend(returns[i] for i in range(num_envs) if masks[t][i])
        # The default prior: 1e-4 pseudo-samples of mean 0 and variance 1, pooled by hand.
        n, m, v, p = len(seen), float(np.mean(seen)), float(np.var(seen)), 1e-4
        mean = n * m / (n + p)
        var = (p * (1.0 + mean**2) + n * (v + (m - mean) ** 2)) / (n + p)
        outputs.append([max(-clip, min(clip, r / (var + epsilon) ** 0.5)) for r in rewards[t]])
        returns = [0.0 if dones[t][i] and masks[t][i] else returns[i] for i in range(num_envs)]
    return np.array(outputs)


def test_return_normalizer_matches_plain_loop():
    rng = np.random.default_rng(4)
    rewards = rng.normal(0.5, 2.0, size=(30, 3))
    rewards[7, 1] = 80.0  # large enough to be clipped at 2.0
    dones = rng.random((30, 3)) < 0.15
    expected = _reference_return_scaling(rewards.tolist(), dones.tolist(), 0.9, 1e-8, 2.0)
    scaler = ReturnNormalizer(num_envs=3, gamma=0.9, clip=2.0)
    got = np.stack([scaler(rewards[t], dones[t]) for t in range(30)])
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    assert np.abs(got).max() == 2.0


def test_return_normalizer_mask_skips_steps_exactly():
    rng = np.random.default_rng(6)
    rewards = rng.normal(0.0, 1.5, size=(40, 4))
    dones = rng.random((40, 4)) < 0.2
    masks = rng.random((40, 4)) < 0.7
    masks[3] = False  # a step where no env counts: nothing moves
    expected = _reference_return_scaling(rewards.tolist(), dones.tolist(), 0.95, 1e-8, 5.0, masks.tolist())
    scaler = ReturnNormalizer(num_envs=4, gamma=0.95, clip=5.0)
    got = np.stack([scaler(rewards[t], dones[t], mask=masks[t]) for t in range(40)])
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    assert scaler.return_rms.data_count == int(masks.sum())
    with pytest.raises(ValueError, match=r"mask has shape \(3,\)"):
        scaler(rewards[0], dones[0], mask=np.ones(3, dtype=bool))


def test_return_normalizer_resets_after_the_update_and_keeps_kind():
    scaler = ReturnNormalizer(num_envs=2, gamma=0.5, clip=None)
    reward = torch.tensor([1.0, 2.0], dtype=torch.float32)
    out = scaler(reward, torch.tensor([True, False]))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_array_equal(scaler.returns, [0.0, 2.0])  # env 0 reset only after its return was counted
    assert scaler.return_rms.data_count == 2 and scaler.return_rms.mean == pytest.approx(1.5, rel=1e-4)
    scaler(np.array([1.0, 1.0]), np.array([0, 0]))
    np.testing.assert_array_equal(scaler.returns, [1.0, 2.0])  # 0 * 0.5 + 1 and 2 * 0.5 + 1
    with pytest.raises(ValueError, match=r"\(2,\)"):
        scaler(np.zeros(3), np.zeros(3, dtype=bool))


def test_return_normalizer_state_dict_round_trip():
    rng = np.random.default_rng(5)
    scaler = ReturnNormalizer(num_envs=4, gamma=0.95)
    for _ in range(10):
        scaler(rng.normal(size=4), rng.random(4) < 0.2)
    restored = ReturnNormalizer(num_envs=4)
    restored.load_state_dict(pickle.loads(pickle.dumps(scaler.state_dict())))
    reward, done = rng.normal(size=4), np.array([False, True, False, False])
    np.testing.assert_array_equal(restored(reward, done), scaler(reward, done))
    np.testing.assert_array_equal(restored.returns, scaler.returns)
    with pytest.raises(ValueError, match="num_envs"):
        ReturnNormalizer(num_envs=3).load_state_dict(scaler.state_dict())
