"""One learning test per algorithm: its CartPole config, seed 0, one thread, until the config's stop criterion.

Random play on CartPole-v1 scores ~22. Each test asserts what every tested seed reached: the 100-episode training
mean of 475 (``stop_return``) within the config's budget. Measured with the seeds derived by zoo.pipelines.process
(seeds 0-7): PPO solved in 69k-144k env steps (budget 200k), A2C in 107k-256k (budget 500k).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.experiment import train

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.mark.parametrize("config", ["ppo_cartpole.py", "a2c_cartpole.py"])
def test_learns_cartpole_to_its_stop_return(tmp_path, config):
    summary = train(CONFIGS / config, [f"runs_dir={tmp_path}", "seed=0", "torch_threads=1"])
    assert summary["reason"] == "stop_return" and summary["episode_return_mean"] >= 475.0, summary
