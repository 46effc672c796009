"""One learning test per algorithm: its config, seed 0, one thread, a budget every tested seed clears.

Random play on CartPole-v1 scores ~22. Each CartPole test asserts what every tested seed reached: the 100-episode
training mean of 475 (``stop_return``) within the config's budget and, for the synchronous ones (deterministic
for a seed), within a step limit a little above the slowest tested seed. Measured with the seeds derived by
zoo.pipelines.process: PPO solved in 70k-98k env steps (seeds 0-15, budget 200k, limit 110k), A2C in 74k-174k
(seeds 0-15; seeds 16-31: 59k-147k; budget 500k, limit 180k), DPPO (2 spawned workers, gradients all-reduced) in
57k-102k env steps in total (seeds 0-7, budget 200k, limit 120k). IMPALA's actors run asynchronously: its step
count varies run to run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zoo.run import train

pytestmark = pytest.mark.slow  # learning tests: tens of seconds each

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.mark.parametrize("config", ["ppo_cartpole.py", "a2c_cartpole.py", "dppo_cartpole.py", "impala_cartpole.py"])
def test_learns_cartpole_to_its_stop_return(tmp_path, config):
    summary = train(CONFIGS / config, [f"runs_dir={tmp_path}", "seed=0", "torch_threads=1"])
    assert summary["reason"] == "stop_return" and summary["episode_return_mean"] >= 475.0, summary
    assert summary["env_steps"] <= STEP_LIMITS.get(config, summary["env_steps"]), summary


STEP_LIMITS = {"ppo_cartpole.py": 110_000, "a2c_cartpole.py": 180_000, "dppo_cartpole.py": 120_000}


@pytest.mark.parametrize("config", ["sac_pendulum.py", "sac_ace_pendulum.py"])
def test_sac_learns_pendulum_in_8k_steps(tmp_path, config):
    # Seeds 0-3 evaluated -142..-157 at 8k env steps, for sac and sac_ace alike; random play scores about -1200.
    summary = train(CONFIGS / config, [f"runs_dir={tmp_path}", "seed=0", "torch_threads=1",
                                       "pipeline.max_env_steps=8000"])
    rows = (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()
    last = json.loads(rows[-1])
    assert last["env_steps"] == 8000 and last["eval_return_mean"] >= -200.0, last
