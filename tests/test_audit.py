"""Behaviours a mutation audit found unguarded, each checked against an independent reference.

- DPPO's pipeline across two real gloo workers: after each iteration both workers' observation and reward
  normalisers hold the statistics of both workers' data (one ``RunningMeanStd`` fed everything each worker's
  normalisers were fed), and ``DistributedContext.mean/min/any/sum`` reduce over the workers.
- SAC with HL-Gauss critics and a sigma ratio other than the default: the critic loss and its gradient use
  ``sigma = ratio * bin width`` (Gaussian mass per bin written out with ``math.erf``).
- A replay buffer restored into a smaller capacity keeps the newest rows in order, also from a buffer that had
  wrapped around; ``recent``, ``sample`` and later ``add`` calls see exactly those rows.
- ``pipeline.stop_return``: a full window whose mean equals the target stops the run, one just below does not,
  and a window not yet full never stops it.
- A non-finite metric that is not a loss stops the run naming the metric and the iteration, keeping the last
  checkpoint.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import end_spawned_worker, free_port, metrics_rows

from zoo.config.resolve import resolve_config
from zoo.data import ReplayBuffer, Transitions
from zoo.errors import NonFiniteError
from zoo.policies import A2CPolicy, LearnContext, build_policy
from zoo.registry import ENV_REGISTRY
from zoo.rl_utils import RunningMeanStd
from zoo.run import build_pipeline, train
from zoo.run.run_dir import load_weights_only

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -- 1. DPPO: merged running statistics and the context's collectives, across two real workers ---------------
DPPO = {
    "seed": 4, "env": {"id": "CartPole-v1"},
    "policy": {"type": "dppo", "hidden_sizes": [8], "epochs": 1, "minibatch_size": 16},
    "pipeline": {"world_size": 2, "num_envs": 2, "rollout_steps": 8, "eval_every": 0},
}
ITERATIONS = 2  # the second iteration merges into the common state of the first (``since``)


def _record_updates(statistics: RunningMeanStd, batches: list[np.ndarray]) -> None:
    """Make ``statistics.update`` also append a float64 copy of every batch it is given to ``batches``."""
    update = statistics.update

    def recording(x):
        batches.append(np.array(x, dtype=np.float64))
        update(x)

    statistics.update = recording


def _dppo_worker(rank: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        pipeline = build_pipeline(resolve_config(DPPO))
        try:
            collector = pipeline.collector
            obs_rms = collector.obs_normalizer.obs_rms
            return_rms = collector.reward_normalizer.normalizer.return_rms
            fed: dict[str, list[np.ndarray]] = {"obs": [], "return": []}
            _record_updates(obs_rms, fed["obs"])
            _record_updates(return_rms, fed["return"])
            after = []  # per iteration: the statistics, and how many batches each normaliser had been fed
            for _ in range(ITERATIONS):
                pipeline.iterate()
                after.append({"obs": obs_rms.state_dict(), "return": return_rms.state_dict(),
                              "fed": {name: len(batches) for name, batches in fed.items()}})
            ctx = pipeline.learn_context()
            reduced = {  # a different value on each worker
                "mean": ctx.mean(1.0 + 3.0 * rank), "min": ctx.min(7 - 4 * rank),
                "any": ctx.any(rank == 1), "any_none": ctx.any(False),
                "sum": ctx.sum(torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) * (rank + 1)),
            }
        finally:
            pipeline.close()
    finally:
        dist.destroy_process_group()
    torch.save({"fed": fed, "after": after, "reduced": reduced}, Path(out_dir) / f"rank{rank}.pt")
    end_spawned_worker()


@pytest.fixture(scope="module")
def dppo_workers(tmp_path_factory) -> list[dict]:
    out_dir = tmp_path_factory.mktemp("audit_dppo")
    mp.spawn(_dppo_worker, args=(free_port(), str(out_dir)), nprocs=2, join=True)
    return [torch.load(out_dir / f"rank{rank}.pt", weights_only=False) for rank in range(2)]


@pytest.mark.parametrize("name", ["obs", "return"])
def test_dppo_workers_normalise_with_the_statistics_of_both_workers_data_after_every_iteration(dppo_workers, name):
    for iteration in range(ITERATIONS):
        # What each worker's own normaliser was fed up to the end of this iteration, and one that saw it all.
        fed = [worker["fed"][name][:worker["after"][iteration]["fed"][name]] for worker in dppo_workers]
        reference = RunningMeanStd(dppo_workers[0]["after"][iteration][name]["shape"])
        for batch in fed[0] + fed[1]:
            reference.update(batch)
        expected = reference.state_dict()
        first, second = (worker["after"][iteration][name] for worker in dppo_workers)
        own = [sum(len(batch) for batch in batches) for batches in fed]
        assert min(own) > 0  # each worker saw data of its own, which the other must have received
        assert first["data_count"] == second["data_count"] == expected["data_count"] == sum(own)
        np.testing.assert_array_equal(first["data_mean"], second["data_mean"])  # bit-identical on both workers
        np.testing.assert_array_equal(first["data_var"], second["data_var"])
        np.testing.assert_allclose(first["data_mean"], expected["data_mean"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(first["data_var"], expected["data_var"], rtol=1e-10, atol=1e-12)


def test_dppo_context_mean_min_any_and_sum_reduce_over_both_workers(dppo_workers):
    for worker in dppo_workers:
        reduced = worker["reduced"]
        assert reduced["mean"] == pytest.approx((1.0 + 4.0) / 2, abs=1e-12)
        assert reduced["min"] == 3 and isinstance(reduced["min"], int)
        assert reduced["any"] is True and reduced["any_none"] is False
        assert reduced["sum"].dtype == torch.float64 and reduced["sum"].tolist() == [3.0, -6.0, 1.5]


# -- 2. SAC's HL-Gauss critics with a sigma ratio other than 0.75 --------------------------------------------
HL_MIN, HL_MAX, HL_BINS, HL_RATIO = -5.0, 5.0, 10, 2.0


def gaussian_bin_mass_ref(target: float, low: float, high: float, bins: int, sigma: float) -> torch.Tensor:
    """Mass of N(clamp(target), sigma^2) in each of ``bins`` equal bins of [low, high], renormalised, in float64."""
    centre = min(max(target, low), high)
    edges = [low + (high - low) * k / bins for k in range(bins + 1)]
    cdf = [0.5 * (1.0 + math.erf((edge - centre) / (sigma * math.sqrt(2.0)))) for edge in edges]
    mass = [cdf[k + 1] - cdf[k] for k in range(bins)]
    return torch.tensor([m / sum(mass) for m in mass], dtype=torch.float64)


class _RecordingContext(LearnContext):
    """Keeps a copy of every gradient buffer handed to ``sync_gradients`` (the critic's comes first)."""

    def __init__(self) -> None:
        super().__init__(updates=1)
        self.grads: list[torch.Tensor] = []

    def sync_gradients(self, grad: torch.Tensor) -> None:
        self.grads.append(grad.detach().clone())


def test_sac_hl_gauss_critic_uses_the_configured_sigma_ratio():
    cfg = resolve_config({"env": {"id": "Pendulum-v1"}, "policy": {
        "type": "sac", "hidden_sizes": [16], "batch_size": 8, "critic_loss": "hl_gauss", "hl_gauss_min": HL_MIN,
        "hl_gauss_max": HL_MAX, "hl_gauss_bins": HL_BINS, "hl_gauss_sigma_ratio": HL_RATIO}})
    obs_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    torch.manual_seed(0)
    policy = build_policy(cfg, obs_space, action_space)
    # One terminated transition: every sampled row is it and the critic target is its reward alone, whatever
    # the actor and the target critics say.
    obs, action, reward = np.array([[0.3, -0.7, 1.1]], np.float32), np.array([[1.0]], np.float32), 1.375
    replay = ReplayBuffer(1, (3,), (1,))
    replay.add(Transitions(obs=obs, action=action, reward=np.array([reward], np.float32), next_obs=obs,
                           terminated=np.array([True]), truncated=np.array([False])))
    critic = copy.deepcopy(policy.critic)  # before the update changes it
    ctx = _RecordingContext()
    metrics = policy.learn(replay, ctx)

    sigma = HL_RATIO * (HL_MAX - HL_MIN) / HL_BINS
    probs = gaussian_bin_mass_ref(reward, HL_MIN, HL_MAX, HL_BINS, sigma).float()
    batch_obs = torch.as_tensor(obs).expand(8, -1)
    batch_action = torch.as_tensor(action / 2.0).expand(8, -1)  # the critics see actions rescaled to [-1, 1]
    logits = critic(batch_obs, batch_action)  # (critics, batch, bins)
    expected_loss = (-(probs * torch.log_softmax(logits, -1)).sum(-1)).mean(1).sum()  # summed over both critics
    expected_loss.backward()
    expected_grad = torch.cat([param.grad.reshape(-1) for param in critic.parameters()])
    assert metrics["critic_loss"] == pytest.approx(expected_loss.item(), rel=1e-5)
    np.testing.assert_allclose(ctx.grads[0].numpy(), expected_grad.numpy(), rtol=1e-4, atol=1e-6)
    # The default ratio gives a clearly different loss: the comparison above can tell them apart.
    default = gaussian_bin_mass_ref(reward, HL_MIN, HL_MAX, HL_BINS, 0.75 * (HL_MAX - HL_MIN) / HL_BINS).float()
    default_loss = (-(default * torch.log_softmax(logits.detach(), -1)).sum(-1)).mean(1).sum()
    assert abs(default_loss.item() - expected_loss.item()) > 1e-2


# -- 3. a replay buffer restored into a smaller capacity ------------------------------------------------------
def _numbered(first: int, count: int) -> Transitions:
    """Transitions whose every field encodes their number ``k`` (obs ``[k, -k]``, reward ``k``...)."""
    k = np.arange(first, first + count)
    return Transitions(
        obs=np.stack([k, -k], 1).astype(np.float32), action=(k[:, None] + 0.5).astype(np.float32),
        reward=(10.0 * k).astype(np.float32), next_obs=np.stack([k + 1, -k - 1], 1).astype(np.float32),
        terminated=k % 3 == 0, truncated=k % 4 == 1,
    )


def _assert_rows(transitions: Transitions, numbers: list[int]) -> None:
    expected = _numbered(0, max(numbers) + 1)
    for name in ("obs", "action", "reward", "next_obs", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(transitions, name), getattr(expected, name)[numbers], err_msg=name)


@pytest.mark.parametrize("added", [7, 23], ids=["not_wrapped", "wrapped"])
def test_a_replay_loaded_into_a_smaller_capacity_keeps_the_newest_rows_in_order(added):
    source = ReplayBuffer(10, (2,), (1,))
    for first in range(0, added, 3):  # several adds: the source's position wraps around when added > 10
        source.add(_numbered(first, min(3, added - first)))
    held = list(range(max(0, added - 10), added))
    _assert_rows(source.recent(10), held)  # the source itself, as a baseline

    small = ReplayBuffer(4, (2,), (1,))
    small.load_state_dict(source.state_dict())
    newest = held[-4:]
    assert len(small) == 4
    _assert_rows(small.recent(4), newest)
    _assert_rows(small.recent(2), newest[-2:])
    sampled = small.sample(500, np.random.default_rng(0))
    assert set(sampled.reward.tolist()) == {10.0 * k for k in newest}  # every kept row, and only those
    state = small.state_dict()
    assert state["capacity"] == 4
    _assert_rows(Transitions(**{key: value for key, value in state.items() if key != "capacity"}), newest)
    small.add(_numbered(added, 1))  # the oldest kept row goes first
    _assert_rows(small.recent(4), newest[1:] + [added])


# -- 4. stop_return: the window mean against the target -------------------------------------------------------
FIXED_RETURNS = "zoo-audit-fixed-returns"


class FixedReturnsEnv(gym.Env):
    """One-step episodes; the k-th episode (from 0) returns ``returns[k % len(returns)]``, whatever the action."""

    def __init__(self, returns: tuple[float, ...] = (3.0, 0.0)) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.returns = tuple(float(value) for value in returns)
        self.episode = -1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        return np.zeros(1, np.float32), {}

    def step(self, action):
        reward = self.returns[self.episode % len(self.returns)]
        return np.zeros(1, np.float32), reward, True, False, {}


@pytest.fixture(scope="module")
def fixed_returns_env():
    ENV_REGISTRY.register(FIXED_RETURNS, FixedReturnsEnv, source="tests")
    yield FIXED_RETURNS
    ENV_REGISTRY.unregister(FIXED_RETURNS)


WINDOW = 4
# With one sub-env and two steps per rollout (the episode's step, then its autoreset step), every iteration
# finishes exactly one episode: the window is full from iteration 4 on. Returns cycling through four values
# make every full window's mean the same.
RISING = (0.0, 0.0, 3.0, 3.0)  # partial windows' means 0, 0, 1: below the full window's 1.5
FALLING = (3.0, 0.0)  # partial windows' means 3, 1.5, 2: above the full window's 1.5
FULL_WINDOW_MEAN = float(np.mean(RISING))
BUDGET_ITERATIONS = 10


def _stop_config(tmp_path: Path, env_id: str, returns: tuple[float, ...], stop_return: float | None) -> dict:
    return {
        "exp_name": "stop", "seed": 0, "runs_dir": str(tmp_path), "env": {"id": env_id, "kwargs": {"returns": returns}},
        "policy": {"type": "a2c", "hidden_sizes": [8]},
        "pipeline": {"num_envs": 1, "rollout_steps": 2, "stats_window": WINDOW, "stop_return": stop_return,
                     "max_env_steps": 2 * BUDGET_ITERATIONS, "eval_every": 0, "checkpoint_every": 0},
    }


def _return_means(run_dir: str | Path) -> list[float]:
    return [row["episode_return_mean"] for row in metrics_rows(Path(run_dir))]


def test_a_full_window_whose_mean_equals_stop_return_stops_the_run(tmp_path, fixed_returns_env):
    summary = train(_stop_config(tmp_path, fixed_returns_env, RISING, FULL_WINDOW_MEAN))
    assert summary["reason"] == "stop_return" and summary["iteration"] == WINDOW
    assert _return_means(summary["run_dir"]) == [0.0, 0.0, 1.0, FULL_WINDOW_MEAN]  # the last one exactly the target


def test_a_full_window_mean_just_below_stop_return_does_not_stop_the_run(tmp_path, fixed_returns_env):
    just_above = float(np.nextafter(FULL_WINDOW_MEAN, np.inf))
    summary = train(_stop_config(tmp_path, fixed_returns_env, RISING, just_above))
    assert summary["reason"] == "max_env_steps" and summary["iteration"] == BUDGET_ITERATIONS
    assert _return_means(summary["run_dir"])[WINDOW - 1:] == [FULL_WINDOW_MEAN] * (BUDGET_ITERATIONS - WINDOW + 1)


def test_a_window_not_yet_full_never_stops_the_run(tmp_path, fixed_returns_env):
    summary = train(_stop_config(tmp_path, fixed_returns_env, FALLING, 1.0))
    assert _return_means(summary["run_dir"]) == [3.0, 1.5, 2.0, FULL_WINDOW_MEAN]  # all above the target
    assert summary["reason"] == "stop_return" and summary["iteration"] == WINDOW


# -- 5. a non-finite metric that is not a loss -----------------------------------------------------------------
@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_a_non_finite_metric_from_learn_stops_the_run_naming_it_and_keeps_the_last_checkpoint(
        tmp_path, monkeypatch, fixed_returns_env, bad):
    original = A2CPolicy.learn
    calls = {"count": 0}

    def learn_reporting_a_bad_metric(self, batch, ctx):
        metrics = original(self, batch, ctx)
        calls["count"] += 1
        return {**metrics, "x": bad} if calls["count"] == 3 else metrics

    monkeypatch.setattr(A2CPolicy, "learn", learn_reporting_a_bad_metric)
    config = _stop_config(tmp_path, fixed_returns_env, RISING, None)
    config["pipeline"]["checkpoint_every"] = 2
    with pytest.raises(NonFiniteError) as caught:
        train(config)
    message = str(caught.value)
    assert f"stopped at iteration 3: the metric 'x' is {bad}" in message, message
    assert "the last checkpoint (iteration 2) is kept" in message, message
    run_dir = tmp_path / "stop"
    assert load_weights_only(run_dir / "checkpoint.pt")["loop"]["iteration"] == 2
    assert len(_return_means(run_dir)) == 2  # no row for the iteration whose metric was not finite
    assert not (run_dir / "model.pt").exists()
