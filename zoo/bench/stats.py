"""Aggregate statistics over seeds and tasks with stratified-bootstrap confidence intervals, as rliable computes them.

Agarwal et al. 2021 ("Deep RL at the Edge of the Statistical Precipice") argue that a handful of seeds per task
calls for interval estimates of robust aggregates rather than point estimates of the mean. The definitions here
are rliable's (``rliable.metrics``, ``rliable.library``), re-implemented with numpy and scipy so that zoo does not
depend on rliable and its dependencies (arch, pandas < 3):

- IQM: ``scipy.stats.trim_mean(x, 0.25)`` over all runs x tasks pooled: sort the N scores, drop
  ``int(0.25 * N)`` from each end, average the rest (so N = 5, 6 or 7 drops one from each end, N = 3 none);
- mean, median: of the per-task mean scores (with a single task both are the mean over its runs);
- optimality gap: the mean of ``max(gamma - score, 0)``;
- performance profile: the fraction of runs whose score is strictly above each threshold.

Scores come as an array ``(runs, tasks)`` (a 1-D array is one task's runs), or as per-task arrays that may hold
different numbers of runs (a mapping ``task -> runs``, or a list or tuple of 1-D arrays). With ragged tasks the
mean-like statistics weight every task equally (mean of per-task means, gaps and fractions) and the IQM pools the
runs; with equal numbers of runs both readings agree with rliable's.

The bootstrap resamples runs with replacement within each task (stratified: a task's resample holds only its own
runs), recomputes the statistic, and reports the percentile interval, which is rliable's default. It draws from
``numpy.random.RandomState(seed)``: legacy, because that stream is frozen across numpy versions (NEP 19) and
because rliable draws its indices from the global legacy generator in the same order (``np.random.choice(runs,
(runs, tasks))`` per replicate for an array, ``np.random.choice(n_i, n_i)`` per task per replicate for per-task
arrays), so after ``np.random.seed(seed)`` rliable's bounds are these to the last bit (tests/test_bench_stats.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

Scores = np.ndarray | Mapping[str, Any] | Sequence[Any]
Tasks = np.ndarray | list  # (..., runs, tasks) or per-task arrays (..., runs_i): leading axes are replicates


class Normalisation(NamedTuple):
    """An environment's returns that map to 0 (``random``) and 1 (``reference``) in ``normalise``."""

    random: float
    reference: float


# random: the mean undiscounted return of a uniformly random policy over 100 episodes, measured here with gymnasium
# 1.4.0 (mujoco 4.0.0): gym.make(env_id), env.action_space.seed(0), episode k reset with seed=k (k = 0..99),
# env.action_space.sample() every step until terminated or truncated by the registered time limit. Standard errors
# of those means: CartPole 1.2, Acrobot 1.9, Pendulum 29.5, Hopper 1.8, HalfCheetah 7.3, Walker2d 0.8.
# reference: gymnasium's registered reward_threshold where it defines one (gym.spec(env_id).reward_threshold);
# otherwise a published SAC score from rl-baselines3-zoo's benchmark.md (one trained agent, deterministic policy,
# evaluated over about 150k steps), the closest published figure for these environments.
NORMALISATION: dict[str, Normalisation] = {
    "CartPole-v1": Normalisation(random=23.68, reference=475.0),  # reward_threshold
    "Acrobot-v1": Normalisation(random=-497.08, reference=-100.0),  # reward_threshold
    # No reward_threshold; rl-baselines3-zoo SAC Pendulum-v1 after 20k steps: -156.995 +- 88.714.
    "Pendulum-v1": Normalisation(random=-1207.56, reference=-157.0),
    "Hopper-v5": Normalisation(random=16.67, reference=3800.0),  # reward_threshold
    "HalfCheetah-v5": Normalisation(random=-282.49, reference=4800.0),  # reward_threshold
    # No reward_threshold; rl-baselines3-zoo SAC Walker2d-v3 after 1M steps: 3863.203 +- 254.347 (v5 differs from
    # v3 in the left foot's friction, 0.9 instead of 1.9, and in the contact forces left out of the observation).
    "Walker2d-v5": Normalisation(random=1.77, reference=3863.2),
}


def normalise(score: Any, random: float, reference: float) -> Any:
    """``(score - random) / (reference - random)``: 0 at the random policy's return, 1 at the reference's.

    ``score`` may be a number (a float comes back) or an array (an array of the same shape comes back).
    """
    if reference == random:
        raise ValueError(f"reference and random returns are both {random}: the normalisation is undefined")
    value = (np.asarray(score, dtype=float) - random) / (reference - random)
    return float(value) if value.ndim == 0 else value


def _as_tasks(scores: Scores) -> Tasks:
    """The scores as an array ``(..., runs, tasks)`` or a list of per-task arrays ``(..., runs_i)``, checked."""
    if isinstance(scores, np.ndarray):
        x = np.asarray(scores, dtype=float)
        x = x[:, None] if x.ndim == 1 else x
        if x.ndim < 2 or x.shape[-2] == 0 or x.shape[-1] == 0:
            raise ValueError(f"scores need at least one run of one task, got shape {scores.shape}")
        parts = [x]
    elif isinstance(scores, Mapping | list | tuple):
        parts = [np.asarray(task, dtype=float) for task in (scores.values() if isinstance(scores, Mapping)
                                                             else scores)]
        if any(part.ndim == 0 for part in parts):
            raise ValueError("a list or tuple of scores holds per-task arrays: give one task's runs as an array")
        if not parts or any(part.shape[-1] == 0 for part in parts):
            raise ValueError("scores need at least one task, and every task at least one run")
        if len({part.shape[:-1] for part in parts}) > 1:
            raise ValueError("per-task score arrays disagree on their leading (replicate) axes")
        x = parts
    else:
        raise TypeError(f"scores must be an array (runs, tasks) or per-task arrays, got {type(scores).__name__}")
    if not all(np.isfinite(part).all() for part in parts):
        raise ValueError("scores must be finite (a NaN or infinite return has no rank)")
    return x


def _value(value: Any) -> Any:
    return float(value) if np.ndim(value) == 0 else np.asarray(value)


def _per_task_means(x: Tasks) -> np.ndarray:
    return x.mean(axis=-2) if isinstance(x, np.ndarray) else np.stack([task.mean(axis=-1) for task in x], axis=-1)


def iqm(scores: Scores) -> Any:
    """Interquartile mean: ``scipy.stats.trim_mean(pooled, 0.25)`` over all runs of all tasks.

    The N pooled scores are sorted, ``int(0.25 * N)`` are dropped from each end and the rest are averaged (rliable's
    ``aggregate_iqm``; no fractional weights when N is not a multiple of 4). A float, or one value per replicate
    when the scores carry leading replicate axes.
    """
    import scipy.stats  # here: importing it costs about a second, which plain `zoo plot` need not pay

    x = _as_tasks(scores)
    pooled = x.reshape(*x.shape[:-2], -1) if isinstance(x, np.ndarray) else np.concatenate(x, axis=-1)
    return _value(scipy.stats.trim_mean(pooled, 0.25, axis=-1))


def mean(scores: Scores) -> Any:
    """The mean over tasks of each task's mean score (rliable's ``aggregate_mean``)."""
    return _value(_per_task_means(_as_tasks(scores)).mean(axis=-1))


def median(scores: Scores) -> Any:
    """Across several tasks, the median over tasks of each task's mean score (rliable's ``aggregate_median``); for a
    single task (one algorithm on one env, the rows of ``zoo plot --aggregate``), the median of its runs, which is
    what the word means there (rliable's would equal the mean)."""
    x = _as_tasks(scores)
    if isinstance(x, np.ndarray) and x.shape[-1] == 1:
        return _value(np.median(x[..., 0], axis=-1))
    if not isinstance(x, np.ndarray) and len(x) == 1:
        return _value(np.median(x[0], axis=-1))
    return _value(np.median(_per_task_means(x), axis=-1))


def optimality_gap(scores: Scores, gamma: float = 1.0) -> Any:
    """The mean of ``max(gamma - score, 0)``: how far the runs fall short of ``gamma`` on average (0 when every run
    reaches it). Computed as rliable's ``gamma - mean(min(score, gamma))``; tasks weigh equally when ragged."""
    x = _as_tasks(scores)
    if isinstance(x, np.ndarray):
        return _value(gamma - np.mean(np.minimum(x, gamma), axis=(-2, -1)))
    return _value(gamma - _per_task_means([np.minimum(task, gamma) for task in x]).mean(axis=-1))


def _fraction_above(scores: Scores, thresholds: np.ndarray) -> np.ndarray:
    # rliable's score distribution: the fraction of runs with score > tau (strictly), one value per threshold.
    x = _as_tasks(scores)
    if isinstance(x, np.ndarray):
        return (x[..., None] > thresholds).mean(axis=(-3, -2))
    return np.stack([(task[..., None] > thresholds).mean(axis=-2) for task in x], axis=-2).mean(axis=-2)


def _resample(scores: Scores, reps: int, seed: int) -> Tasks:
    """``reps`` stratified resamples: runs drawn with replacement within each task, in rliable's draw order."""
    x = _as_tasks(scores)
    if (x.ndim != 2) if isinstance(x, np.ndarray) else (x[0].ndim != 1):
        raise ValueError("bootstrap scores must be one array (runs, tasks) or 1-D per-task arrays")
    if reps < 1:
        raise ValueError(f"reps must be at least 1, got {reps}")
    generator = np.random.RandomState(seed)  # legacy on purpose: see the module docstring
    if isinstance(x, np.ndarray):
        runs, tasks = x.shape
        rows = generator.choice(runs, (reps, runs, tasks))
        return x[rows, np.arange(tasks)]  # (reps, runs, tasks): column t only ever holds task t's runs
    draws = [[generator.choice(len(task), len(task)) for task in x] for _ in range(reps)]
    return [task[np.stack([draw[i] for draw in draws])] for i, task in enumerate(x)]


def _interval(replicates: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    alpha = (1.0 - confidence) / 2  # arch's arithmetic, so that the percentiles are rliable's to the last bit
    lower, upper = np.percentile(replicates, [100 * alpha, 100 * (1.0 - alpha)], axis=0)
    return lower, upper


def _replicate_values(statistic: Callable[[Tasks], Any], resampled: Tasks, reps: int) -> np.ndarray:
    values = np.asarray(statistic(resampled), dtype=float)
    if values.ndim == 0 or values.shape[0] != reps:
        raise ValueError(f"the statistic must return one value per replicate ({reps}), got shape {values.shape}: "
                         "make it reduce over the last two axes (runs, tasks) or the last axis of per-task arrays")
    return values


def stratified_bootstrap_ci(scores_by_task: Scores, statistic: Callable[[Tasks], Any], reps: int = 2000,
                            confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval of ``statistic`` with runs resampled within each task.

    Each of ``reps`` replicates draws, for every task independently, as many runs as the task has, with replacement
    from that task's runs only; the interval is the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles
    of the statistic over the replicates (``np.percentile``, linear interpolation). The same ``seed`` gives the same
    interval; it equals rliable's ``get_interval_estimates(..., method='percentile')`` after ``np.random.seed(seed)``.

    ``statistic`` receives all replicates at once, in the form of the input with a leading replicate axis
    (``(reps, runs, tasks)``, or per-task arrays ``(reps, runs_i)``), and returns one value per replicate: every
    statistic of this module does. A task with a single run contributes no spread (its resamples are all equal).
    """
    values = _replicate_values(statistic, _resample(scores_by_task, reps, seed), reps)
    lower, upper = _interval(values, confidence)
    return float(lower), float(upper)


STATISTICS: dict[str, Callable[[Tasks], Any]] = {"iqm": iqm, "mean": mean, "median": median,
                                                  "optimality_gap": optimality_gap}


def aggregate(scores_by_task: Scores, reps: int = 2000, seed: int = 0, confidence: float = 0.95,
              gamma: float = 1.0) -> dict[str, Any]:
    """IQM, mean, median and optimality gap (at ``gamma``) of one group's scores, each with its stratified-bootstrap
    interval, plus the counts: ``{"iqm": x, "iqm_ci": [lo, hi], "mean", "mean_ci", "median", "median_ci",
    "optimality_gap", "optimality_gap_ci", "seeds" (the fewest runs of any task), "tasks", "runs" (all runs),
    "reps", "confidence", "bootstrap_seed", "gamma"}``.

    All four intervals come from the same replicates, so each equals ``stratified_bootstrap_ci`` with this seed.
    """
    tasks = _as_tasks(scores_by_task)
    resampled = _resample(tasks, reps, seed)
    result: dict[str, Any] = {}
    for name, function in STATISTICS.items():
        statistic = (lambda x: optimality_gap(x, gamma)) if name == "optimality_gap" else function
        lower, upper = _interval(_replicate_values(statistic, resampled, reps), confidence)
        result[name] = float(statistic(tasks))
        result[f"{name}_ci"] = [float(lower), float(upper)]
    runs = [tasks.shape[0]] * tasks.shape[1] if isinstance(tasks, np.ndarray) else [len(task) for task in tasks]
    result.update(seeds=min(runs), tasks=len(runs), runs=sum(runs), reps=reps, confidence=confidence,
                  bootstrap_seed=seed, gamma=gamma)
    return result


class Profile(NamedTuple):
    """A performance profile: at each threshold, the fraction of runs above it and its bootstrap interval."""

    thresholds: np.ndarray
    fraction: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


def performance_profile(scores_by_task: Scores, thresholds: Any, reps: int = 2000, confidence: float = 0.95,
                        seed: int = 0) -> Profile:
    """The fraction of runs whose score is strictly above each threshold (rliable's score distribution; tasks
    weigh equally when ragged), with the percentile interval of each from the stratified bootstrap."""
    taus = np.asarray(thresholds, dtype=float).reshape(-1)
    fraction = _fraction_above(scores_by_task, taus)
    replicates = _replicate_values(lambda x: _fraction_above(x, taus), _resample(scores_by_task, reps, seed), reps)
    lower, upper = _interval(replicates, confidence)
    return Profile(taus, fraction, lower, upper)
