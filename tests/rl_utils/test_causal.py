"""Tests for zoo.rl_utils.causal: DirectLiNGAM against a plain-loop reference and known DAGs, ACE weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.rl_utils import causal
from zoo.rl_utils.causal import (
    _exogeneity_scores,
    _lasso_path_supports,
    causal_action_weights,
    causal_weighted_log_prob,
    direct_lingam,
)

# Published constants of the log-cosh maximum-entropy approximation (Hyvärinen 1998).
K1, K2, GAMMA = 79.047, 7.4129, 0.37457


def make_dag_data(rows: int, dims: int, seed: int, noise: str, edge_prob: float) -> tuple[np.ndarray, np.ndarray]:
    """Linear non-Gaussian SEM x = B x + e on a random DAG, |b| in [0.5, 1.5] with random sign, shuffled columns."""
    rng = np.random.default_rng(seed)
    mask = rng.random((dims, dims)) < edge_prob
    weights = rng.uniform(0.5, 1.5, (dims, dims)) * rng.choice([-1.0, 1.0], (dims, dims))
    adjacency = np.tril(weights * mask, -1)
    noise_values = rng.uniform(-1, 1, (rows, dims)) if noise == "uniform" else rng.laplace(size=(rows, dims))
    data = np.linalg.solve(np.eye(dims) - adjacency, noise_values.T).T
    perm = rng.permutation(dims)
    return data[:, perm], adjacency[np.ix_(perm, perm)]


def order_respects(order: list[int], adjacency: np.ndarray) -> bool:
    position = {variable: k for k, variable in enumerate(order)}
    return all(position[j] < position[i] for i, j in zip(*np.nonzero(adjacency)))


# ---------- plain-loop reference of the pwling order search (one pair at a time, float64, np.log(np.cosh)) ----------


def reference_entropy(u: np.ndarray) -> float:
    return -K1 * (np.mean(np.log(np.cosh(u))) - GAMMA) ** 2 - K2 * np.mean(u * np.exp(-(u**2) / 2)) ** 2


def reference_scores(data: np.ndarray) -> np.ndarray:
    dims = data.shape[1]
    scores = np.zeros(dims)
    for i in range(dims):
        for j in range(dims):
            if i == j:
                continue
            xi = (data[:, i] - data[:, i].mean()) / data[:, i].std()
            xj = (data[:, j] - data[:, j].mean()) / data[:, j].std()
            ri = xi - np.mean(xi * xj) * xj
            rj = xj - np.mean(xi * xj) * xi
            ratio = (reference_entropy(xj) + reference_entropy(ri / ri.std())) - (
                reference_entropy(xi) + reference_entropy(rj / rj.std())
            )
            scores[i] += min(0.0, ratio) ** 2
    return scores


def reference_order(data: np.ndarray) -> list[int]:
    remaining = list(range(data.shape[1]))
    current = data.copy()
    order = []
    while remaining:
        chosen = remaining[int(np.argmin(reference_scores(current[:, remaining])))]
        order.append(chosen)
        remaining.remove(chosen)
        for i in remaining:
            slope = np.cov(current[:, i], current[:, chosen], bias=True)[0, 1] / np.var(current[:, chosen])
            current[:, i] = current[:, i] - slope * current[:, chosen]
    return order


@pytest.mark.parametrize("precision, rtol", [(np.float64, 1e-10), (np.float32, 1e-4)])
def test_exogeneity_scores_match_plain_loop(precision, rtol):
    data, _ = make_dag_data(3000, 5, seed=1, noise="uniform", edge_prob=0.6)
    standardised = (data - data.mean(0)) / data.std(0)
    expected = reference_scores(data)
    got = _exogeneity_scores(standardised, precision)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=1e-9 * expected.max())


def test_exogeneity_scores_in_small_pair_chunks(monkeypatch):
    data, _ = make_dag_data(1000, 5, seed=9, noise="laplace", edge_prob=0.6)
    standardised = (data - data.mean(0)) / data.std(0)
    whole = _exogeneity_scores(standardised, np.float64)
    monkeypatch.setattr(causal, "_PAIR_CHUNK", 7)  # 25 pairs: chunks of 7, 7, 7 and 4
    np.testing.assert_allclose(_exogeneity_scores(standardised, np.float64), whole, rtol=1e-12)
    np.testing.assert_allclose(whole, reference_scores(data), rtol=1e-10)


@pytest.mark.parametrize("seed, noise", [(2, "uniform"), (3, "laplace")])
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_order_matches_plain_loop_reference(seed, noise, precision):
    data, _ = make_dag_data(2000, 6, seed=seed, noise=noise, edge_prob=0.5)
    assert direct_lingam(data, entropy_precision=precision).causal_order == reference_order(data)


# ---------- recovery of known DAGs ----------


@pytest.mark.parametrize(
    "dims, edge_prob, seeds",
    # Dense 24-variable graphs at n = 5000 are hard for DirectLiNGAM itself (lingam 1.13 gets the same wrong
    # orders), so d = 24 uses about one parent per variable and fixed seeds.
    [(5, 0.5, range(3)), (10, 0.3, range(3)), (24, 0.1, range(2))],
)
@pytest.mark.parametrize("noise", ["uniform", "laplace"])
def test_recovers_order_and_coefficients(dims, edge_prob, seeds, noise):
    for seed in seeds:
        data, true_adjacency = make_dag_data(5000, dims, seed, noise, edge_prob)
        order, adjacency = direct_lingam(data)
        assert sorted(order) == list(range(dims))
        assert order_respects(order, true_adjacency), (seed, order)
        edges = true_adjacency != 0
        assert np.abs(adjacency - true_adjacency)[edges].max() < 0.1, seed
        assert np.all(adjacency[edges] != 0), "a true edge was pruned"
        assert np.abs(adjacency[~edges]).max() < 0.1, seed
        assert np.count_nonzero(adjacency[~edges]) <= max(2, dims // 5), "too many spurious edges kept"


@settings(max_examples=20, deadline=None, derandomize=True)
@given(dims=st.integers(2, 5), seed=st.integers(0, 2**16), noise=st.sampled_from(["uniform", "laplace"]))
def test_small_dags_over_seeds(dims, seed, noise):
    data, true_adjacency = make_dag_data(5000, dims, seed, noise, edge_prob=0.5)
    order, adjacency = direct_lingam(data)
    assert order_respects(order, true_adjacency)
    assert np.abs(adjacency - true_adjacency).max() < 0.12


def test_adjacency_without_pruning_is_ols_on_predecessors():
    data, _ = make_dag_data(1500, 6, seed=4, noise="laplace", edge_prob=0.4)
    data = data * np.array([1.0, 10.0, 0.1, 3.0, 1.0, 7.0]) + 5.0  # units and offsets must not matter
    order, adjacency = direct_lingam(data, prune="none")
    expected = np.zeros((6, 6))
    for position in range(1, 6):
        target, predictors = order[position], order[:position]
        design = np.column_stack([data[:, predictors], np.ones(len(data))])
        expected[target, predictors] = np.linalg.lstsq(design, data[:, target], rcond=None)[0][:-1]
    np.testing.assert_allclose(adjacency, expected, atol=1e-9)


def test_threshold_pruning_refits_on_kept_predictors():
    rng = np.random.default_rng(5)
    cause, weak = rng.uniform(-1, 1, (2, 4000))
    effect = 1.0 * cause + 0.03 * weak + rng.uniform(-0.3, 0.3, 4000)
    data = np.column_stack([effect, cause, weak])
    order, adjacency = direct_lingam(data, prune="threshold", threshold=0.1)
    assert order[-1] == 0
    slope = np.polyfit(cause, effect, 1)[0]  # refit on the one kept predictor
    np.testing.assert_allclose(adjacency[0], [0.0, slope, 0.0], atol=1e-9)
    kept = direct_lingam(data, prune="threshold", threshold=0.01).adjacency
    assert kept[0, 2] != 0.0


def lasso_supports_by_coordinate_descent(gram: np.ndarray, target_corr: np.ndarray) -> set[tuple[int, ...]]:
    """Supports of min 0.5 b'Gb - c'b + lam |b|_1 on a fine lambda grid, solved independently by coordinate descent."""
    size = len(target_corr)
    beta = np.zeros(size)
    supports = set()
    for lam in np.geomspace(np.abs(target_corr).max() * 0.999, 1e-4, 300):
        for _ in range(500):
            previous = beta.copy()
            for k in range(size):
                partial = target_corr[k] - gram[k] @ beta + gram[k, k] * beta[k]
                beta[k] = np.sign(partial) * max(abs(partial) - lam, 0.0) / gram[k, k]
            if np.abs(beta - previous).max() < 1e-12:
                break
        supports.add(tuple(np.flatnonzero(np.abs(beta) > 1e-10)))
    return supports


def test_lasso_path_supports_match_coordinate_descent():
    rng = np.random.default_rng(6)
    design = rng.standard_normal((300, 6)) @ rng.standard_normal((6, 6))  # correlated predictors
    response = design @ np.array([1.0, -0.5, 0.0, 0.2, 0.0, 0.05]) + rng.standard_normal(300)
    gram, target_corr = design.T @ design / 300, design.T @ response / 300
    supports = _lasso_path_supports(gram, target_corr)
    assert supports[0] == () and supports[-1] == tuple(range(6))
    assert lasso_supports_by_coordinate_descent(gram, target_corr) <= set(supports)


# ---------- input handling ----------


def test_does_not_mutate_and_accepts_tensors():
    data, _ = make_dag_data(1000, 4, seed=7, noise="uniform", edge_prob=0.5)
    before = data.copy()
    from_numpy = direct_lingam(data)
    from_tensor = direct_lingam(torch.from_numpy(data))
    np.testing.assert_array_equal(data, before)
    assert from_numpy.causal_order == from_tensor.causal_order
    np.testing.assert_array_equal(from_numpy.adjacency, from_tensor.adjacency)


@pytest.mark.parametrize(
    "data, message",
    [
        (np.ones(10), "dimensions"),
        (np.random.default_rng(0).uniform(size=(5, 4)), "N >= d \\+ 2"),
        (np.where(np.eye(20, 3) > 0, np.nan, 1.0) + np.arange(60).reshape(20, 3) % 7, "NaN"),
        (np.column_stack([np.arange(20.0), np.full(20, 3.0)]), "constant columns \\[1\\]"),
        (np.column_stack([np.arange(20.0), 2 * np.arange(20.0)]), "linearly dependent"),
    ],
)
def test_direct_lingam_rejects_bad_data(data, message):
    with pytest.raises(ValueError, match=message):
        direct_lingam(data)


def test_direct_lingam_rejects_bad_options():
    data = np.random.default_rng(0).uniform(size=(50, 3))
    with pytest.raises(ValueError, match="prune"):
        direct_lingam(data, prune="lasso")
    with pytest.raises(ValueError, match="entropy_precision"):
        direct_lingam(data, entropy_precision="float16")


# ---------- ACE weights ----------


def reward_dataset(rows: int = 5000, seed: int = 8, a0: float = 2.0, a1: float = 0.1):
    rng = np.random.default_rng(seed)
    states = rng.uniform(-1, 1, (rows, 3))
    actions = rng.uniform(-1, 1, (rows, 4))
    rewards = a0 * actions[:, 0] + a1 * actions[:, 1] + 0.5 * states[:, 0] + rng.uniform(-0.5, 0.5, rows)
    return states, actions, rewards


def softmax(values: np.ndarray) -> np.ndarray:
    exp = np.exp(values - values.max())
    return exp / exp.sum()


def test_action_weights_follow_reward_effects():
    states, actions, rewards = reward_dataset()
    weights = causal_action_weights(states, actions, rewards)
    np.testing.assert_allclose(weights, 4 * softmax(np.array([2.0, 0.1, 0.0, 0.0])), atol=0.05)
    assert weights.shape == (4,) and weights.mean() == pytest.approx(1.0) and weights.sum() == pytest.approx(4.0)
    assert weights[0] > weights[1] > 0.9 * weights[2]


def test_action_weights_sign_and_temperature():
    states, actions, rewards = reward_dataset(a0=-2.0)
    signed = causal_action_weights(states, actions, rewards)  # the default: signed effects, as ACE's code
    np.testing.assert_allclose(signed, 4 * softmax(np.array([-2.0, 0.1, 0.0, 0.0])), atol=0.02)
    tempered = causal_action_weights(states, actions, rewards, temperature=2.0, use_abs=True)
    np.testing.assert_allclose(tempered, 4 * softmax(np.array([1.0, 0.05, 0.0, 0.0])), atol=0.05)


def test_action_weights_accept_tensors_and_column_rewards_without_mutation():
    states, actions, rewards = reward_dataset(rows=2000)
    copies = (states.copy(), actions.copy(), rewards.copy())
    expected = causal_action_weights(states, actions, rewards)
    as_tensors = causal_action_weights(torch.tensor(states), torch.tensor(actions), torch.tensor(rewards)[:, None])
    np.testing.assert_allclose(as_tensors, expected, atol=1e-12)
    for original, copy in zip((states, actions, rewards), copies):
        np.testing.assert_array_equal(original, copy)


def test_action_weights_degenerate_columns():
    states, actions, rewards = reward_dataset(rows=2000, a1=0.0)
    rewards = rewards + 1.0 * actions[:, 3]
    states = np.column_stack([states, np.zeros(len(states))])  # an always-zero observation
    actions = actions.copy()
    actions[:, 1] = 0.5  # an action dimension that never moves: effect 0
    weights = causal_action_weights(states, actions, rewards)
    np.testing.assert_allclose(weights, 4 * softmax(np.array([2.0, 0.0, 0.0, 1.0])), atol=0.05)
    np.testing.assert_array_equal(causal_action_weights(states, actions, np.zeros(len(states))), np.ones(4))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s, a, r: (s, a, r[:-1]), "differ in N"),
        (lambda s, a, r: (s, a, np.stack([r, r], 1)), "expected \\(N,\\) or \\(N, 1\\)"),
        (lambda s, a, r: (s, a[:, 0], r), "actions has shape"),
        (lambda s, a, r: (s, np.where(a > 0.99, np.nan, a), r), "NaN"),
    ],
)
def test_action_weights_reject_bad_input(change, message):
    with pytest.raises(ValueError, match=message):
        causal_action_weights(*change(*reward_dataset(rows=200)))
    with pytest.raises(ValueError, match="temperature"):
        causal_action_weights(*reward_dataset(rows=200), temperature=0.0)


# ---------- weighted log-probability ----------


def test_weighted_log_prob_values_and_gradients():
    log_prob = torch.randn(3, 5, 4, dtype=torch.float64, requires_grad=True)
    weights = torch.tensor([0.5, 1.5, 1.0, 1.0], requires_grad=True)
    got = causal_weighted_log_prob(log_prob, weights)
    expected = torch.zeros(3, 5, dtype=torch.float64)
    for t in range(3):
        for b in range(5):
            expected[t, b] = sum(float(weights[k].detach()) * float(log_prob[t, b, k].detach()) for k in range(4))
    assert got.dtype == torch.float64 and got.shape == (3, 5)
    torch.testing.assert_close(got, expected)
    got.sum().backward()
    torch.testing.assert_close(log_prob.grad, weights.detach().double().expand(3, 5, 4))
    assert weights.grad is None
    torch.testing.assert_close(causal_weighted_log_prob(log_prob, np.ones(4)), log_prob.sum(-1))


def test_weighted_log_prob_rejects_wrong_weight_shape():
    with pytest.raises(ValueError, match="weights has shape"):
        causal_weighted_log_prob(torch.zeros(2, 3), np.ones(4))
    with pytest.raises(ValueError, match="weights has shape"):
        causal_weighted_log_prob(torch.zeros(2, 3), np.ones((1, 3)))
