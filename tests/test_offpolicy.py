"""The serial off-policy pipeline: random actions until learning_starts, the update-to-data ratio, the replay
buffer in the run directory, exact resume (with a causal fit pending across the stop), and the MuJoCo extra."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import TIMINGS, metrics_rows

from zoo.cli import main
from zoo.policies import SACPolicy
from zoo.registry import ENV_REGISTRY
from zoo.run import train
from zoo.run.run_dir import RunDirectory, load_weights_only

TINY = {
    "exp_name": "off", "seed": 2,
    "env": {"id": "Pendulum-v1"},
    "policy": {"type": "sac", "hidden_sizes": [16, 16], "batch_size": 32},
    "pipeline": {"learning_starts": 200, "steps_per_iteration": 100, "eval_every": 0, "checkpoint_every": 1,
                 "buffer_size": 5000, "max_env_steps": 600},
}


class TwoActionEnv(gym.Env):
    """Reward 2 * a0 (a1 is irrelevant), uniform random observations, episodes of 50 steps (truncated)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        reward = 2.0 * float(action[0]) + float(self.np_random.uniform(-0.1, 0.1))
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), reward, False, self.t >= 50, {}


@pytest.fixture
def two_action_env():
    ENV_REGISTRY.register("zoo_test_two_action", TwoActionEnv)
    yield "zoo_test_two_action"
    ENV_REGISTRY.unregister("zoo_test_two_action")


def test_random_actions_until_learning_starts_then_the_update_to_data_ratio(tmp_path, monkeypatch):
    calls = {"collect": 0, "learn": [], "env_steps": []}
    original_collect, original_learn = SACPolicy.collect, SACPolicy.learn

    def collect(self, obs):
        calls["collect"] += 1
        return original_collect(self, obs)

    def learn(self, replay, ctx):
        calls["learn"].append(ctx.updates)
        calls["env_steps"].append(ctx.env_steps)
        return original_learn(self, replay, ctx)

    monkeypatch.setattr(SACPolicy, "collect", collect)
    monkeypatch.setattr(SACPolicy, "learn", learn)
    config = {**TINY, "runs_dir": str(tmp_path),
              "pipeline": {**TINY["pipeline"], "num_envs": 2, "train_freq": 3, "gradient_steps": 5}}
    summary = train(config)
    # Cycles of 3 steps x 2 envs; an iteration ends at the first cycle reaching its 100 steps: 102, 204, ... 612.
    assert summary["env_steps"] == 612
    # Random actions while fewer than 200 steps were taken (34 cycles, to 204); from then on one learn call of 5
    # updates after every cycle (69 calls, at 204, 210, ... 612) and the policy acts (68 cycles of 3 steps).
    assert calls["env_steps"][0] == 204 and all(b - a == 6 for a, b in zip(calls["env_steps"], calls["env_steps"][1:]))
    assert calls["learn"] == [5] * 69 and calls["collect"] == 3 * 68
    state = load_weights_only(Path(summary["run_dir"]) / "checkpoint.pt")
    assert state["policy"]["updates"] == 5 * 69


def test_random_steps_apart_from_learning_starts_and_no_update_after_an_autoreset_step(tmp_path, monkeypatch):
    # ACE's code acts randomly for its first 10k steps but learns from step 513 on: random_steps apart from
    # learning_starts. The step after a Pendulum episode's end (step 200) is gymnasium's autoreset step: it counts
    # in the budget but stores nothing, and no update follows it (it would learn twice from unchanged data).
    seen = {"collect": [], "learn": []}
    original_collect, original_learn = SACPolicy.collect, SACPolicy.learn

    def collect(self, obs):
        seen["collect"].append(self.progress.env_steps)
        return original_collect(self, obs)

    def learn(self, replay, ctx):
        seen["learn"].append((ctx.env_steps, len(replay)))
        return original_learn(self, replay, ctx)

    monkeypatch.setattr(SACPolicy, "collect", collect)
    monkeypatch.setattr(SACPolicy, "learn", learn)
    config = {**TINY, "runs_dir": str(tmp_path),
              "pipeline": {**TINY["pipeline"], "learning_starts": 50, "random_steps": 150, "max_env_steps": 300}}
    train(config)
    steps = [step for step, _ in seen["learn"]]
    assert steps[0] == 50 and 201 not in steps and steps == [s for s in range(50, 301) if s != 201]
    assert dict(seen["learn"])[202] == dict(seen["learn"])[200] + 1  # the autoreset step stored nothing
    assert seen["collect"][0] == 150 and len(seen["collect"]) == 150  # the policy acts from step 150 on


def test_the_replay_buffer_is_saved_apart_and_resume_is_exact_with_a_pending_causal_fit(tmp_path, two_action_env):
    config = {**TINY, "runs_dir": str(tmp_path), "env": {"id": two_action_env},
              "policy": {**TINY["policy"], "type": "sac_ace", "causal_interval": 300, "causal_sample_size": 250,
                         "causal_apply_after": 250, "reset_interval": 150, "reset_start": 100}}
    whole = train(config, ["exp_name=whole", "pipeline.max_env_steps=900"])
    half = train(config, ["exp_name=half", "pipeline.max_env_steps=500"])
    run = Path(half["run_dir"])
    state = RunDirectory(run).load_checkpoint()
    # The fit started at env step 300 applies 250 updates later. By then the run made 98 updates (from step 200 on,
    # none after the autoreset steps 204 and 255 of its 50-step episodes): it applies at update 348, after the stop.
    assert state["policy"]["causal"]["pending"]["apply_at"] == 348
    assert sorted(p.name for p in run.glob("replay-*.pt")) == ["replay-000000005.pt"]
    train(None, ["pipeline.max_env_steps=900"], resume=run)
    rows, whole_rows = metrics_rows(run, TIMINGS), metrics_rows(Path(whole["run_dir"]), TIMINGS)
    assert rows == whole_rows
    weights = [row.get("causal_weight_0") for row in rows]
    assert weights[0] is None  # no learning (and no learning metrics) before learning_starts
    assert weights[1:5] == [1.0] * 4 and weights[-1] > 1.5  # the fit found that only a0 drives the reward
    assert rows[-1]["resets"] >= 3 and 0.2 <= rows[-1]["reset_factor"] <= 0.9
    a, b = (load_weights_only(Path(r) / "checkpoint.pt")["policy"] for r in (whole["run_dir"], half["run_dir"]))
    assert all(torch.equal(a["critic"][key], b["critic"][key]) for key in a["critic"])


def test_without_save_replay_the_log_says_so_and_a_resume_refills_an_empty_buffer(tmp_path, capsys):
    config = {**TINY, "runs_dir": str(tmp_path), "pipeline": {**TINY["pipeline"], "save_replay": False}}
    summary = train(config, ["pipeline.max_env_steps=300"])
    assert "NOT saved (pipeline.save_replay=False)" in capsys.readouterr().err
    run = Path(summary["run_dir"])
    assert not list(run.glob("replay-*.pt"))
    resumed = train(None, ["pipeline.max_env_steps=600"], resume=run)
    assert resumed["env_steps"] == 600


def test_a_replay_buffer_that_cannot_fit_is_refused_in_one_line(tmp_path, capsys):
    config = tmp_path / "c.py"
    config.write_text(f"config = {TINY!r}\n")
    code = main(["run", "--config", str(config), "--set", f"runs_dir={tmp_path / 'runs'}",
                 "--set", "pipeline.buffer_size=100000000000"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "replay buffer" in err and "buffer_size" in err
    assert not (tmp_path / "runs").exists()


def test_a_missing_mujoco_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco", None)  # as if it were not installed
    for module in [name for name in sys.modules if name.startswith("gymnasium.envs.mujoco")]:
        monkeypatch.delitem(sys.modules, module)
    config = Path(__file__).resolve().parent.parent / "configs" / "sac_ace_hopper.py"
    code = main(["run", "--config", str(config), "--set", f"runs_dir={tmp_path}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "pip install 'zoo-rl[mujoco]'" in err, err
    assert not list(tmp_path.iterdir())
