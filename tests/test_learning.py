"""One short learning test per algorithm: fixed seed, one thread, small budget, threshold with margin.

Random play on CartPole-v1 scores ~22; the thresholds sit far above that and well below what the seeded runs
reach (PPO ~472 at 100k steps, A2C ~256 at 30k steps when measured; PPO's learning rate anneals over the
budget, so the budget is part of the test), so they hold on every run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.experiment import train

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.mark.parametrize(
    ("config", "budget", "threshold"),
    [("ppo_cartpole.py", 100_000, 250.0), ("a2c_cartpole.py", 30_000, 100.0)],
)
def test_learns_cartpole(tmp_path, config, budget, threshold):
    summary = train(
        CONFIGS / config,
        [f"runs_dir={tmp_path}", f"pipeline.max_env_steps={budget}", "seed=0", "torch_threads=1"],
    )
    assert summary["episode_return_mean"] >= threshold, summary
