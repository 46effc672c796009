"""zoo.bench.stats against hand-computed cases, a coverage simulation and rliable itself; ``zoo plot --aggregate``
(zoo.plot.aggregate_runs) on small fake run directories (config.yaml, metrics.jsonl, final_eval.json)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

from zoo.bench.stats import (
    NORMALISATION,
    aggregate,
    iqm,
    mean,
    median,
    normalise,
    optimality_gap,
    performance_profile,
    stratified_bootstrap_ci,
)
from zoo.errors import ZooError
from zoo.plot import aggregate_runs


def _hand_iqm(values: list[float]) -> float:
    # The definition written out: sort, drop floor(N / 4) from each end, average the rest.
    ordered = sorted(values)
    cut = len(ordered) // 4
    kept = ordered[cut:len(ordered) - cut]
    return sum(kept) / len(kept)


@pytest.mark.parametrize(("values", "expected"), [
    ([8, 1, 7, 2, 6, 3, 5, 4], 4.5),  # N = 8: two dropped from each end, mean of 3, 4, 5, 6
    ([10, 1, 3, 100, 2], 5.0),  # N = 5: int(1.25) = 1 from each end, mean of 2, 3, 10
    ([0, 1, 2, 3, 4, 100], 2.5),  # N = 6: int(1.5) = 1, mean of 1, 2, 3, 4
    ([-50, 1, 2, 3, 4, 5, 90], 3.0),  # N = 7: int(1.75) = 1, mean of 1..5
    ([0, 0, 9], 3.0),  # N = 3: int(0.75) = 0, nothing dropped
])
def test_iqm_of_one_task_by_hand(values, expected):
    assert iqm(np.array(values, float)) == pytest.approx(expected, abs=1e-12)
    assert _hand_iqm(values) == pytest.approx(expected, abs=1e-12)


def test_iqm_pools_runs_of_all_tasks_and_matches_the_written_definition():
    scores = np.array([[1.0, 100.0], [2.0, 200.0], [3.0, 300.0], [4.0, 400.0]])  # (runs, tasks)
    assert iqm(scores) == pytest.approx((3 + 4 + 100 + 200) / 4)
    assert iqm({"a": [1.0, 2.0, 3.0], "b": [10.0, 20.0]}) == pytest.approx((2 + 3 + 10) / 3)  # ragged: pooled, N = 5
    rng = np.random.default_rng(0)
    for runs, tasks in [(1, 1), (3, 3), (5, 2), (7, 3), (9, 1), (10, 6)]:
        x = rng.normal(size=(runs, tasks))
        assert iqm(x) == pytest.approx(_hand_iqm(x.ravel().tolist()), abs=1e-12)


def test_mean_and_median_are_of_per_task_means_with_tasks_weighted_equally():
    ragged = {"a": [1.0, 2.0, 3.0], "b": [10.0, 20.0], "c": [0.0]}  # task means 2, 15, 0
    assert mean(ragged) == pytest.approx(17 / 3) and median(ragged) == pytest.approx(2.0)
    scores = np.array([[1.0, 10.0, 5.0], [3.0, 30.0, 5.0]])  # task means 2, 20, 5
    assert mean(scores) == pytest.approx(9.0) and median(scores) == pytest.approx(5.0)


def test_optimality_gap_by_hand():
    scores = np.array([[0.5, 1.2], [0.9, -0.3]])  # shortfalls below 1: 0.5, 0, 0.1, 1.3
    assert optimality_gap(scores) == pytest.approx(1.9 / 4)
    assert optimality_gap(scores, gamma=0.5) == pytest.approx(0.8 / 4)  # only -0.3 falls short of 0.5
    assert optimality_gap(np.array([[2.0, 3.0]])) == 0.0
    # Ragged: per-task gaps 0.5 and (0 + 2) / 2 = 1, averaged over tasks (pooling the runs would give 2.5 / 3).
    assert optimality_gap({"a": [0.5], "b": [2.0, -1.0]}) == pytest.approx(0.75)


def test_normalise_and_the_normalisation_table():
    assert normalise(475.0, 23.68, 475.0) == 1.0 and normalise(23.68, 23.68, 475.0) == 0.0
    assert normalise(np.array([0.0, 5.0, 10.0]), 0.0, 10.0).tolist() == [0.0, 0.5, 1.0]
    assert normalise(-100.0, -500.0, -100.0) == 1.0  # negative returns: still 0 at random, 1 at the reference
    with pytest.raises(ValueError, match="undefined"):
        normalise(1.0, 2.0, 2.0)
    assert set(NORMALISATION) == {"CartPole-v1", "Acrobot-v1", "Pendulum-v1", "Hopper-v5", "HalfCheetah-v5",
                                  "Walker2d-v5"}
    for env_id, entry in NORMALISATION.items():
        assert entry.reference > entry.random, env_id
        threshold = gym.spec(env_id).reward_threshold  # the declared source where gymnasium defines one
        assert threshold is None or entry.reference == threshold, env_id


def test_the_bootstrap_resamples_each_task_only_from_its_own_runs():
    seen = []

    def record(resampled):
        seen.append(resampled)
        return mean(resampled)

    ragged = {"few": [1.0, 2.0], "many": np.arange(100.0, 150.0)}
    stratified_bootstrap_ci(ragged, record, reps=300, seed=1)
    few, many = seen[0]
    assert few.shape == (300, 2) and many.shape == (300, 50)
    assert set(np.unique(few)) == {1.0, 2.0} and np.isin(many, ragged["many"]).all()
    scores = np.stack([np.arange(10.0), np.arange(100.0, 110.0)], axis=1)  # the same as one (runs, tasks) array
    stratified_bootstrap_ci(scores, record, reps=300, seed=1)
    assert seen[1].shape == (300, 10, 2)
    assert (seen[1][..., 0] < 10).all() and (seen[1][..., 1] >= 100).all()
    # A task with one run adds no spread, whatever the other task does: pooled resampling would mix them.
    assert stratified_bootstrap_ci({"one": [3.0], "same": [1.0] * 4}, mean) == (2.0, 2.0)


def test_the_bootstrap_is_reproducible_with_a_seed():
    x = np.random.default_rng(3).normal(size=(6, 4))
    assert stratified_bootstrap_ci(x, iqm, seed=5) == stratified_bootstrap_ci(x, iqm, seed=5)
    assert stratified_bootstrap_ci(x, iqm, seed=5) != stratified_bootstrap_ci(x, iqm, seed=6)
    assert aggregate(x, reps=500, seed=2) == aggregate(x, reps=500, seed=2)
    summary = aggregate(x, reps=500, seed=2)  # every interval is stratified_bootstrap_ci's with that seed
    assert summary["median_ci"] == list(stratified_bootstrap_ci(x, median, reps=500, seed=2))
    assert summary["iqm"] == iqm(x) and summary["seeds"] == 6 and summary["tasks"] == 4 and summary["runs"] == 24


def test_the_95_percent_intervals_cover_the_true_value_about_95_percent_of_the_time():
    rng = np.random.default_rng(2021)
    task_means = np.array([0.0, 1.0, 2.0, 3.0])  # the aggregate mean of the population is 1.5
    covered = {"mean": 0, "iqm": 0}
    repetitions = 200
    for repetition in range(repetitions):
        runs = rng.normal(task_means, 1.0, size=(20, 4))
        low, high = stratified_bootstrap_ci(runs, mean, reps=1000, seed=repetition)
        covered["mean"] += low <= 1.5 <= high
        # One symmetric task: the population IQM is its centre, 0.
        low, high = stratified_bootstrap_ci(rng.normal(0.0, 1.0, size=40), iqm, reps=1000, seed=repetition)
        covered["iqm"] += low <= 0.0 <= high
    # Measured here: mean 192/200, IQM 189/200. The percentile interval is a little narrow with few runs (the
    # bootstrap's variance is (n - 1) / n of the sample's), hence 20 and 40 runs rather than 5.
    for name, count in covered.items():
        assert 0.90 <= count / repetitions <= 0.99, (name, count)


def test_performance_profile_counts_runs_strictly_above_each_threshold():
    scores = np.array([[0.0, 0.5], [1.0, 2.0]])
    profile = performance_profile(scores, [-1.0, 0.0, 0.5, 1.5, 2.0], reps=200)
    assert profile.fraction.tolist() == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert (profile.lower <= profile.fraction).all() and (profile.fraction <= profile.upper).all()
    assert profile.lower[0] == profile.upper[0] == 1.0 and profile.lower[-1] == profile.upper[-1] == 0.0


def test_bad_scores_are_value_errors():
    with pytest.raises(ValueError, match="finite"):
        iqm(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="at least one"):
        mean({"a": []})
    with pytest.raises(ValueError, match="one value per replicate"):
        stratified_bootstrap_ci(np.ones((3, 2)), lambda x: float(np.mean(x)))


# Against rliable. Both sides draw the same indices: rliable takes them from numpy's global legacy generator
# (np.random.choice, whatever random_state it is given), zoo from RandomState(seed) in the same order, and both take
# np.percentile of the replicates, so with np.random.seed(seed) on rliable's side the bounds agree to rounding
# (bit for bit here). The independent-streams check below is the looser one that survives a change of draw order.
def _rliable():
    pytest.importorskip("rliable")
    from rliable import library, metrics

    return library, metrics


RLIABLE_STATISTICS = {"iqm": ("aggregate_iqm", iqm), "mean": ("aggregate_mean", mean),
                      "median": ("aggregate_median", median), "optimality_gap": ("aggregate_optimality_gap",
                                                                                 optimality_gap)}


@pytest.mark.parametrize("shape", [(5, 3), (7, 1), (10, 5), (3, 6)])
def test_statistics_and_intervals_equal_rliables(shape):
    library, metrics = _rliable()
    scores = np.random.default_rng(sum(shape)).normal(0.7, 0.4, size=shape)
    assert iqm(scores) == metrics.aggregate_iqm(scores)  # exactly: the same trim_mean on the same pooled order
    for name, (theirs, ours) in RLIABLE_STATISTICS.items():
        if name == "median" and shape[1] == 1:
            continue  # one task: zoo's median is the runs' median (rliable's equals the mean); tested below
        function = getattr(metrics, theirs)
        np.random.seed(11)
        points, intervals = library.get_interval_estimates(
            {"x": scores}, lambda x, f=function: np.array([f(x)]), reps=500)
        assert ours(scores) == pytest.approx(float(points["x"][0]), rel=1e-12), name
        low, high = stratified_bootstrap_ci(scores, ours, reps=500, seed=11)
        assert (low, high) == pytest.approx(tuple(intervals["x"].ravel()), rel=1e-12, abs=1e-12), name


def test_ragged_tasks_match_rliables_independent_bootstrap():
    library, _ = _rliable()
    tasks = [np.random.default_rng(k).normal(size=runs) for k, runs in enumerate((4, 7, 2))]
    np.random.seed(3)
    _, intervals = library.get_interval_estimates(
        {"x": tasks}, lambda *x: np.array([np.mean([task.mean() for task in x])]), reps=500)
    assert stratified_bootstrap_ci(tasks, mean, reps=500, seed=3) == pytest.approx(tuple(intervals["x"].ravel()),
                                                                                   rel=1e-12)


def test_intervals_agree_with_rliables_on_independent_random_streams_within_2_percent():
    library, metrics = _rliable()
    scores = np.random.default_rng(7).normal(1.0, 0.3, size=(10, 3))
    np.random.seed(12345)  # a stream unrelated to zoo's seed 0: only Monte Carlo error separates the two
    _, intervals = library.get_interval_estimates({"x": scores}, lambda x: np.array([metrics.aggregate_iqm(x)]),
                                                  reps=10000)
    ours = stratified_bootstrap_ci(scores, iqm, reps=10000, seed=0)
    assert ours == pytest.approx(tuple(intervals["x"].ravel()), rel=0.02)


def test_performance_profile_equals_rliables():
    library, _ = _rliable()
    scores = np.random.default_rng(4).normal(0.5, 0.5, size=(6, 3))
    taus = np.linspace(-0.5, 1.5, 21)
    np.random.seed(0)
    profiles, bands = library.create_performance_profile({"x": scores}, taus, reps=300)
    ours = performance_profile(scores, taus, reps=300, seed=0)
    assert ours.fraction.tolist() == profiles["x"].tolist()
    assert np.array_equal(np.stack([ours.lower, ours.upper]), bands["x"])


# zoo plot --aggregate on fake run directories.
def _fake_run(folder: Path, seed: int, env: str = "CartPole-v1", policy: str = "ppo",
              evals: Sequence[float] | None = (10.0, 20.0), final: list[float] | None = None, gamma: float = 0.99,
              steps_per_eval: int = 100) -> Path:
    run = folder / f"seed_{seed}"
    run.mkdir(parents=True)
    config = {"seed": seed, "exp_name": run.name, "runs_dir": str(folder), "env": {"id": env},
              "policy": {"type": policy, "gamma": gamma}, "pipeline": {"eval_every": 1}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    rows = [{"iteration": k + 1, "env_steps": (k + 1) * steps_per_eval,
             **({"eval_return_mean": evals[k]} if evals else {})} for k in range(len(evals) if evals else 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    if final is not None:
        (run / "final_eval.json").write_text(json.dumps({"returns": final, "episodes": len(final),
                                                         "deterministic": True, "seed": 1234}))
    return run


def test_aggregate_uses_final_evaluations_normalises_and_writes_json(tmp_path):
    finals = [[400.0, 420.0], [475.0, 475.0], [100.0, 300.0], [500.0, 500.0]]
    for seed, returns in enumerate(finals):
        _fake_run(tmp_path / "ppo_cartpole", seed, final=returns, evals=[10.0, 20.0, 30.0])
    for seed, last in enumerate([-300.0, -250.0, -200.0]):  # no final_eval.json: the last periodic evaluation
        _fake_run(tmp_path / "sac_custom", seed, env="MyEnv-v0", policy="sac", evals=[-900.0, last])
    text = aggregate_runs([str(tmp_path / "*")], json_path=str(tmp_path / "aggregate.json"), reps=500, seed=3)
    results = json.loads((tmp_path / "aggregate.json").read_text())
    cartpole, custom = results["ppo x CartPole-v1"], results["sac x MyEnv-v0"]
    expected = aggregate(normalise(np.array([410.0, 475.0, 200.0, 500.0]), 23.68, 475.0), reps=500, seed=3)
    for name in ("iqm", "iqm_ci", "mean", "mean_ci", "median", "median_ci", "optimality_gap", "optimality_gap_ci"):
        assert cartpole[name] == pytest.approx(expected[name], rel=1e-12), name
    assert cartpole["iqm"] == pytest.approx((normalise(410.0, 23.68, 475.0) + 1.0) / 2)  # N = 4: the middle two
    assert cartpole["normalised"] and cartpole["seeds"] == 4 and cartpole["env_steps"] == 300
    assert cartpole["sources"] == {"final": 4} and cartpole["final_returns"] == [410.0, 475.0, 200.0, 500.0]
    assert not custom["normalised"] and custom["optimality_gap"] is None and custom["optimality_gap_ci"] is None
    assert custom["mean"] == pytest.approx(-250.0) and custom["iqm"] == pytest.approx(-250.0)  # N = 3: all kept
    assert custom["sources"] == {"last": 3} and custom["env_steps"] == 200
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["group", "seeds", "env", "steps"] and "IQM [95% CI]" in lines[0]
    row = next(line for line in lines if line.startswith("ppo x CartPole-v1 *"))
    assert row.split()[4:6] == ["4", "300"] and row.split()[6] == "final"
    assert f"{cartpole['iqm']:.3f} [{cartpole['iqm_ci'][0]:.3f}, {cartpole['iqm_ci'][1]:.3f}]" in row
    custom_row = next(line for line in lines if line.startswith("sac x MyEnv-v0 "))
    assert custom_row.rstrip().endswith("n/a") and " last " in custom_row
    assert any(line.startswith("* normalised: (return - random) / (reference - random)") for line in lines)


def test_groups_of_one_policy_and_env_are_told_apart_by_folder_and_mixed_sources_are_marked(tmp_path):
    _fake_run(tmp_path / "sac_mse", 0, env="Pendulum-v1", policy="sac", final=[-150.0])
    _fake_run(tmp_path / "sac_mse", 1, env="Pendulum-v1", policy="sac", evals=[-400.0, -170.0])
    _fake_run(tmp_path / "sac_hl_gauss", 0, env="Pendulum-v1", policy="sac", gamma=0.9, final=[-160.0])
    results_path = tmp_path / "out.json"
    text = aggregate_runs([str(tmp_path / "sac_mse"), str(tmp_path / "sac_hl_gauss")], json_path=str(results_path),
                          reps=100)
    results = json.loads(results_path.read_text())
    assert set(results) == {"sac x Pendulum-v1 (sac_mse)", "sac x Pendulum-v1 (sac_hl_gauss)"}
    assert results["sac x Pendulum-v1 (sac_mse)"]["sources"] == {"final": 1, "last": 1}
    assert " mixed " in next(line for line in text.splitlines() if "(sac_mse)" in line)


def test_a_figure_is_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    for seed in range(3):
        _fake_run(tmp_path / "ppo", seed, evals=[50.0 + seed, 200.0 + 10 * seed, 400.0], final=[450.0 + seed])
        _fake_run(tmp_path / "a2c", seed, policy="a2c", evals=[30.0, 100.0 * seed], steps_per_eval=150)
    _fake_run(tmp_path / "other", 0, env="MyEnv-v0", evals=[1.0])
    out = tmp_path / "aggregate.png"
    aggregate_runs([str(tmp_path / "*")], out=str(out), reps=200)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000 and not list(tmp_path.glob(".*.tmp*"))


def test_seeds_with_no_evaluation_or_no_metrics_are_left_out_with_a_line_and_the_rest_plotted(tmp_path, caplog):
    for seed in range(3):
        _fake_run(tmp_path / "ppo", seed, evals=[10.0, 100.0 + seed])
    unevaluated = _fake_run(tmp_path / "ppo", 3, evals=None)  # metrics rows, no evaluation
    untrained = _fake_run(tmp_path / "ppo", 4)
    (untrained / "metrics.jsonl").unlink()  # stopped before its first row
    with caplog.at_level(logging.WARNING, logger="zoo"):
        aggregate_runs([str(tmp_path / "ppo" / "seed_*")], json_path=str(tmp_path / "a.json"), reps=100)
    assert json.loads((tmp_path / "a.json").read_text())["ppo x CartPole-v1"]["seeds"] == 3
    said = sorted(r.getMessage() for r in caplog.records)
    assert len(said) == 2 and all(line.count("\n") == 0 for line in said)
    assert said[0].startswith(f"left out '{unevaluated}': a run with no evaluation yet")
    assert said[1].startswith(f"left out '{untrained}': a run directory with no metrics yet")


def test_bad_aggregate_input_is_one_line(tmp_path):
    run = _fake_run(tmp_path / "none", 0, evals=None)
    with pytest.raises(ZooError, match=r"no run with an evaluation among 1 run .*pipeline\.eval_every") as error:
        aggregate_runs([str(run)])
    assert "\n" not in str(error.value)
    (run / "final_eval.json").write_text('{"returns": "many"}')
    with pytest.raises(ZooError, match="is not a final evaluation"):
        aggregate_runs([str(run)])
    (run / "final_eval.json").write_text('{"returns": [NaN]}')
    with pytest.raises(ZooError, match=r"returns\[0\] is nan, not a finite return"):
        aggregate_runs([str(run)])
    with pytest.raises(ZooError, match="does not exist"):
        aggregate_runs([str(run)], json_path=str(tmp_path / "missing" / "x.json"))
    with pytest.raises(ZooError, match="at least 1 resample"):
        aggregate_runs([str(run)], reps=0)


def test_the_median_of_one_task_is_the_median_of_its_runs():
    runs = np.array([1.0, 2.0, 10.0, 3.0, 4.0])
    assert median(runs) == 3.0 and median({"only": runs}) == 3.0 and mean(runs) == 4.0
    low, high = stratified_bootstrap_ci(runs, median, reps=300, seed=0)
    assert 1.0 <= low <= 3.0 <= high <= 10.0
