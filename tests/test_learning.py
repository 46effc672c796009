"""One learning test per algorithm: its config, seed 0, one thread, a budget every tested seed clears.

Random play on CartPole-v1 scores ~22. Each CartPole test asserts what every tested seed reached: the 100-episode
training mean of 475 (``stop_return``) within the config's budget. Measured with the seeds derived by
zoo.pipelines.process (seeds 0-7): PPO solved in 91k-159k env steps (budget 200k), A2C in 106k-245k (budget 500k).
DPPO (2 spawned workers, gradients all-reduced): seeds 0-7 solved in 67k-104k env steps in total (budget 200k).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zoo.experiment import train

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.mark.parametrize("config", ["ppo_cartpole.py", "a2c_cartpole.py", "dppo_cartpole.py", "impala_cartpole.py"])
def test_learns_cartpole_to_its_stop_return(tmp_path, config):
    summary = train(CONFIGS / config, [f"runs_dir={tmp_path}", "seed=0", "torch_threads=1"])
    assert summary["reason"] == "stop_return" and summary["episode_return_mean"] >= 475.0, summary


@pytest.mark.parametrize("config", ["sac_pendulum.py", "sac_ace_pendulum.py"])
def test_sac_learns_pendulum_in_8k_steps(tmp_path, config):
    # Seeds 0-3 evaluated -142..-157 at 8k env steps, for sac and sac_ace alike; random play scores about -1200.
    summary = train(CONFIGS / config, [f"runs_dir={tmp_path}", "seed=0", "torch_threads=1",
                                       "pipeline.max_env_steps=8000"])
    rows = (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()
    last = json.loads(rows[-1])
    assert last["env_steps"] == 8000 and last["eval_return_mean"] >= -200.0, last
