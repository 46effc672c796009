"""The off-policy base (zoo.policies.off_policy): minibatches drawn with torch's checkpointed generator, soft and
hard target updates, per-key metric averaging over one learn call, the training progress when acting (set by the
pipeline before every collection), the replay convention (env actions), and SAC-ACE's keys declared by sac_ace
alone."""

from __future__ import annotations

import copy
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict
from torch import nn

from zoo.cli import main
from zoo.config.resolve import resolve_config
from zoo.data import ReplayBuffer, Transitions
from zoo.errors import ConfigError
from zoo.policies import LearnContext, OffPolicyPolicy, SACACEPolicy, SACPolicy, TD3Policy, soft_update
from zoo.run import train
from zoo.run.run_dir import load_weights_only

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ACE_KEYS = {"causal_weights", "causal_interval", "causal_sample_size", "causal_apply_after", "causal_temperature",
            "causal_use_abs", "dormant_reset", "reset_interval", "reset_start", "dormant_tau", "reset_factor_min",
            "reset_factor_max", "reset_init"}


def numbered_replay(n: int = 20) -> ReplayBuffer:
    """Row i has obs (i, -i) and action i: a minibatch shows which rows it drew."""
    replay = ReplayBuffer(n, (2,), (1,))
    index = np.arange(n, dtype=np.float32)
    replay.add(Transitions(obs=np.stack([index, -index], 1), action=index[:, None], reward=index,
                           next_obs=np.stack([index, -index], 1), terminated=np.zeros(n, bool),
                           truncated=np.zeros(n, bool)))
    return replay


class Recorder(OffPolicyPolicy):
    """A policy without networks: each update reports the rows it got; 'odd' only on odd updates."""

    fields = {}

    def __init__(self, batch_size: int = 4) -> None:
        space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        super().__init__(EasyDict(batch_size=batch_size), space, gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
                         torch.device("cpu"))
        self.rows: list[list[int]] = []

    def update(self, batch, ctx):
        rows = batch["action"][:, 0].long().tolist()
        self.rows.append(rows)
        metrics = {"first": float(rows[0]), "updates_seen": float(self.updates)}
        if self.updates % 2:
            metrics["odd"] = float(self.updates)
        return metrics

    def learn_metrics(self):
        return {"calls": 1.0}


def test_minibatches_come_from_torchs_global_generator_so_a_restored_state_draws_the_same_rows():
    policy, replay = Recorder(batch_size=5), numbered_replay()
    torch.manual_seed(7)
    want = [torch.randint(20, (5,)).tolist() for _ in range(3)]
    torch.manual_seed(7)
    policy.learn(replay, LearnContext(updates=3))
    assert policy.rows == want
    state = torch.get_rng_state()
    policy.learn(replay, LearnContext(updates=2))
    torch.set_rng_state(state)
    again = Recorder(batch_size=5)
    again.learn(replay, LearnContext(updates=2))
    assert again.rows == policy.rows[3:]


def test_metrics_are_averaged_per_key_over_the_updates_reporting_them_and_updates_are_counted():
    policy = Recorder()
    torch.manual_seed(0)
    metrics = policy.learn(numbered_replay(), LearnContext(updates=4))
    assert policy.updates == 4 and policy.state_dict() == {"updates": 4}
    assert metrics["updates_seen"] == (1 + 2 + 3 + 4) / 4  # update() sees the update in progress counted
    assert metrics["odd"] == (1 + 3) / 2  # only the updates that reported it
    assert metrics["first"] == np.mean([rows[0] for rows in policy.rows])
    assert list(metrics) == ["first", "updates_seen", "odd", "calls"]
    restored = Recorder()
    restored.load_state_dict({"updates": 4})
    assert restored.updates == 4


def test_soft_update_is_polyak_on_modules_and_tensors_and_tau_one_copies():
    torch.manual_seed(0)
    target, source = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)), nn.Sequential(nn.Linear(3, 2),
                                                                                      nn.BatchNorm1d(2))
    source[1].running_mean.fill_(4.0)
    source[1].num_batches_tracked.fill_(9)
    before = copy.deepcopy(target.state_dict())
    soft_update(target, source, 0.25)
    for key, value in target.state_dict().items():
        if key.endswith("num_batches_tracked"):
            assert value.item() == 9  # integers are copied
        else:
            torch.testing.assert_close(value, before[key] + 0.25 * (source.state_dict()[key] - before[key]),
                                       rtol=0, atol=1e-7)
    flat, src = torch.zeros(3), torch.tensor([1.0, 2.0, 4.0])
    soft_update(flat, src, 0.5)
    assert flat.tolist() == [0.5, 1.0, 2.0]
    soft_update(flat, src, 1.0)
    assert torch.equal(flat, src)


def test_update_target_acts_only_every_interval_updates():
    policy, target, source = Recorder(), torch.zeros(2), torch.ones(2)
    done = []
    for updates in range(1, 7):
        policy.updates = updates
        done.append(policy.update_target(target, source, 1.0, interval=3))
        if updates == 2:
            assert target.tolist() == [0.0, 0.0]
    assert done == [False, False, True, False, False, True] and target.tolist() == [1.0, 1.0]


def test_collect_hands_the_env_actions_of_explore_to_the_replay():
    class Fixed(Recorder):
        def explore(self, obs):
            return np.full((len(obs), 1), 0.25, np.float32)

    out = Fixed().collect(torch.zeros(3, 2))
    assert out.raw_action is None and out.action.tolist() == [[0.25]] * 3


def test_the_pipeline_sets_the_progress_before_every_collection_with_the_policy(tmp_path, monkeypatch):
    seen = []
    original = OffPolicyPolicy.set_progress

    def set_progress(self, ctx):
        seen.append((ctx.env_steps, ctx.iteration, ctx.progress))
        original(self, ctx)

    monkeypatch.setattr(OffPolicyPolicy, "set_progress", set_progress)
    monkeypatch.setattr(TD3Policy, "explore", lambda self, obs: np.asarray([[self.progress.env_steps / 100.0 - 1]],
                                                                           np.float32))
    config = {"exp_name": "p", "seed": 0, "runs_dir": str(tmp_path), "env": {"id": "Pendulum-v1"},
              "policy": {"type": "td3", "hidden_sizes": [4], "batch_size": 4},
              "pipeline": {"learning_starts": 20, "train_freq": 10, "gradient_steps": 1, "steps_per_iteration": 30,
                           "eval_every": 0, "checkpoint_every": 1, "buffer_size": 100, "max_env_steps": 60}}
    summary = train(config)
    # Random actions for the first 2 collections (to 20 steps); then before each: the steps so far, the
    # iterations completed, and their fraction of the 60-step budget.
    assert seen == [(20, 0, 20 / 60), (30, 1, 30 / 60), (40, 1, 40 / 60), (50, 1, 50 / 60)]
    replay = load_weights_only(sorted(Path(summary["run_dir"]).glob("replay-*.pt"))[-1])
    actions = np.asarray(replay["action"])[:60, 0]
    # The replay holds the env actions the schedule produced (env steps / 100 - 1), as it holds random ones.
    assert actions[20:30].tolist() == pytest.approx([-0.8] * 10)
    assert actions[50:60].tolist() == pytest.approx([-0.5] * 10)
    assert len(set(actions[:20].tolist())) == 20


def test_sac_declares_no_ace_key_and_sac_ace_declares_them_all(capsys):
    assert not ACE_KEYS & set(SACPolicy.fields)
    assert ACE_KEYS <= set(SACACEPolicy.fields)
    assert set(SACACEPolicy.fields) - ACE_KEYS == set(SACPolicy.fields)
    assert SACACEPolicy.default_config["causal_weights"] is True and SACACEPolicy.default_config["dormant_reset"]
    with pytest.raises(ConfigError, match="policy.dormant_reset"):
        resolve_config({"env": {"id": "Pendulum-v1"}, "policy": {"type": "sac", "dormant_reset": True}})
    assert main(["config", "sac"]) == 0
    assert "causal" not in capsys.readouterr().out
    assert main(["config", "sac_ace"]) == 0
    listed = capsys.readouterr().out
    assert all(key in listed for key in ACE_KEYS)


def test_an_older_sac_config_with_ace_keys_still_resolves_and_resumes_unless_ace_was_on():
    from zoo.config.resolve import config_differences

    old_ace = {"causal_weights": False, "causal_interval": 10_000, "dormant_reset": False, "reset_start": 5_000}
    old = {"env": {"id": "Pendulum-v1"}, "policy": {"type": "sac", "tau": 0.01, **old_ace}}
    cfg = resolve_config(old)
    assert cfg.policy.tau == 0.01 and not set(cfg.policy) & ACE_KEYS
    trained = {**old, "policy": {**old["policy"], "hidden_sizes": cfg.policy.hidden_sizes}}
    assert config_differences(trained, cfg) == []  # what --resume compares: the checkpoint's config with this
    assert config_differences({**trained, "policy": {**trained["policy"], "tau": 0.02}}, cfg) == ["policy.tau"]
    with pytest.raises(ConfigError, match=r"policy.causal_weights=True .*policy.type=sac_ace"):
        resolve_config({**old, "policy": {**old["policy"], "causal_weights": True}})


def test_sac_ace_keeps_its_keys_when_resolved():
    cfg = resolve_config({"env": {"id": "Pendulum-v1"}, "policy": {"type": "sac_ace", "causal_weights": True,
                                                                    "reset_start": 7}})
    assert cfg.policy.causal_weights is True and cfg.policy.reset_start == 7 and cfg.policy.dormant_reset is True
