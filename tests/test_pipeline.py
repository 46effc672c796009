"""The collector keeps termination and truncation apart: a truncated step bootstraps from its final observation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from zoo.experiment import resolve_config, train
from zoo.pipelines.run_dir import RunDirectory
from zoo.pipelines.serial_onpolicy import SerialOnPolicyPipeline


def test_truncated_step_bootstraps_from_final_observation(tmp_path):
    # CartPole cannot fail within 5 steps (the pole needs ~8 to fall), so every episode is truncated at step 5.
    cfg = resolve_config({
        "env": {"id": "CartPole-v1", "max_episode_steps": 5},
        "policy": {"type": "ppo", "gamma": 0.9, "gae_lambda": 0.8},
        "pipeline": {"num_envs": 3, "rollout_steps": 13, "vector_mode": "sync"},
    })
    pipeline = SerialOnPolicyPipeline(cfg, RunDirectory(tmp_path))
    obs, _ = pipeline.venv.reset(seed=0)
    batch, _, _ = pipeline._collect(obs, torch.zeros(3, dtype=torch.bool).numpy())
    pipeline._advantages(batch)
    assert batch.truncated[4].all() and not batch.terminated.any()
    assert not batch.valid[5].any() and batch.valid[6:11].all() and batch.truncated[10].all()
    # The observation after step 4 is the final one (NEXT_STEP autoreset), stored as obs[5].
    final_value = pipeline.policy.value(batch.obs[5])
    torch.testing.assert_close(batch.next_value[4], final_value)
    expected = batch.reward[4] + 0.9 * final_value - batch.value[4]  # bootstrapped; the trace ends here
    torch.testing.assert_close(batch.advantage[4], expected)
    # Inside the episode, GAE chains: adv[3] = delta[3] + gamma * lambda * adv[4].
    delta3 = batch.reward[3] + 0.9 * batch.value[4] - batch.value[3]
    torch.testing.assert_close(batch.advantage[3], delta3 + 0.9 * 0.8 * batch.advantage[4])
    # Terminating instead would drop the bootstrap: the pipeline must not confuse the two.
    assert not torch.allclose(batch.advantage[4], batch.reward[4] - batch.value[4])


def _rows_without_time(run_dir) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in ("wall_time", "sps")} for row in rows]


@pytest.mark.parametrize("normalize", [False, True])
def test_resume_continues_exactly_as_if_never_stopped(tmp_path, normalize):
    # The checkpoint holds the vector env itself (episodes in progress, env RNGs, normaliser wrappers): a run
    # stopped half-way and resumed writes the same metrics and ends with the same weights as an unbroken run.
    config = {
        "exp_name": "r", "runs_dir": str(tmp_path), "seed": 3,
        "env": {"id": "CartPole-v1"},
        "policy": {"type": "a2c", "anneal_lr": False},
        "pipeline": {"num_envs": 4, "rollout_steps": 8, "eval_every": 0, "checkpoint_every": 0,
                     "normalize_obs": normalize, "normalize_reward": normalize},
    }
    whole = train(config, ["pipeline.max_env_steps=640", "exp_name=whole"])
    half = train(config, ["pipeline.max_env_steps=320", "exp_name=half"])
    resumed = train(None, ["pipeline.max_env_steps=640"], resume=half["run_dir"])
    assert resumed["env_steps"] == whole["env_steps"] == 640
    whole_dir, half_dir = Path(whole["run_dir"]), Path(half["run_dir"])
    rows = _rows_without_time(whole_dir)
    assert any(row["episodes"] > 0 for row in rows[:10])  # episodes did finish around the stop
    assert _rows_without_time(half_dir) == rows
    a = torch.load(whole_dir / "model.pt", weights_only=False)["policy"]["model"]
    b = torch.load(half_dir / "model.pt", weights_only=False)["policy"]["model"]
    assert all(torch.equal(a[key], b[key]) for key in a)
