"""``policy.precision`` of the off-policy family (``zoo.accel.precision``): what ``auto`` picks, bf16 updates that
keep fp32 master weights, optimiser state and losses, exact resume within a precision, and the record of the
choice in the run directory."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from zoo.accel import precision as precision_module
from zoo.accel.precision import AUTO_MIN_BATCH, AUTO_MIN_WIDTH, resolve_precision
from zoo.data import ReplayBuffer, Transitions
from zoo.errors import ConfigError
from zoo.policies.base import LearnContext
from zoo.policies.dqn import DQNPolicy
from zoo.policies.sac import SACPolicy
from zoo.policies.td3 import TD3Policy
from zoo.run import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
CASES = {"sac": (SACPolicy, BOX), "td3": (TD3Policy, BOX), "dqn": (DQNPolicy, gym.spaces.Discrete(3))}


def make(name: str, precision: str, seed: int = 0, **overrides):
    cls, actions = CASES[name]
    cfg = EasyDict({**cls.default_config, "hidden_sizes": [32, 32], "batch_size": 16, "precision": precision,
                    **overrides})
    torch.manual_seed(seed)
    return cls(cfg, OBS, actions, torch.device("cpu"))


def replay_for(name: str, rows: int = 200) -> ReplayBuffer:
    rng = np.random.default_rng(0)
    discrete = name == "dqn"
    replay = ReplayBuffer(rows, (3,), () if discrete else (2,), action_dtype=np.int64 if discrete else np.float32)
    replay.add(Transitions(
        obs=rng.normal(size=(rows, 3)).astype(np.float32),
        action=rng.integers(0, 3, rows) if discrete else rng.uniform(-2, 2, (rows, 2)).astype(np.float32),
        reward=rng.normal(size=rows).astype(np.float32), next_obs=rng.normal(size=(rows, 3)).astype(np.float32),
        terminated=rng.random(rows) < 0.1, truncated=rng.random(rows) < 0.05, env=np.zeros(rows, np.int32),
    ))
    return replay


def flat_parameters(policy) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for name in policy.acting_parts + policy.learning_parts
                      if isinstance(getattr(policy, name), torch.nn.Module)
                      for p in getattr(policy, name).parameters()])


@pytest.mark.parametrize("native, widths, batch, convolutional, expected", [
    (True, [256, 256], 256, False, "bf16"), (True, [64, 512], 512, False, "bf16"), (True, [512], 64, False, "fp32"),
    (True, [256, 256], 255, False, "fp32"), (True, [255], 1024, False, "fp32"), (True, [256], 64, False, "fp32"),
    (True, [], 256, False, "fp32"),
    (True, [], 32, True, "bf16"), (False, [1024, 1024], 256, False, "fp32"), (False, [], 32, True, "fp32"),
])
def test_auto_picks_bf16_only_on_native_bf16_and_big_updates(monkeypatch, native, widths, batch, convolutional,
                                                              expected):
    monkeypatch.setattr(precision_module, "native_bf16", lambda device: native)
    assert (AUTO_MIN_BATCH, AUTO_MIN_WIDTH) == (256, 256)
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu, widths, batch, convolutional) == expected
    assert resolve_precision("fp32", cpu, widths, batch, convolutional) == "fp32"
    assert resolve_precision("bf16", cpu, widths, batch, convolutional) == "bf16"


def test_policies_resolve_auto_from_their_own_sizes(monkeypatch):
    monkeypatch.setattr(precision_module, "native_bf16", lambda device: True)
    assert make("sac", "auto", hidden_sizes=[256, 256], batch_size=256).precision == "bf16"
    assert make("sac", "auto", hidden_sizes=[64, 64], batch_size=256).precision == "fp32"
    assert make("dqn", "auto", hidden_sizes=[256, 256], batch_size=64).precision == "fp32"
    assert make("td3", "auto", hidden_sizes=[256, 256], batch_size=256).precision == "bf16"


def test_native_bf16_reads_the_cpu_flags(monkeypatch):
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    assert precision_module.native_bf16(torch.device("cpu"))
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset({"avx512f", "amx_bf16"}))
    assert precision_module.native_bf16(torch.device("cpu"))
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    assert not precision_module.native_bf16(torch.device("cpu"))


def test_dqn_auto_counts_the_image_encoder(monkeypatch):
    monkeypatch.setattr(precision_module, "native_bf16", lambda device: True)
    cfg = EasyDict({**DQNPolicy.default_config, "hidden_sizes": [], "batch_size": 32, "precision": "auto"})
    images = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    policy = DQNPolicy(cfg, images, gym.spaces.Discrete(4), torch.device("cpu"))
    assert policy.precision == "bf16"  # NatureCNN's 512 features


@pytest.mark.parametrize("name", list(CASES))
def test_bf16_updates_keep_fp32_state_and_stay_near_fp32(name):
    replay = replay_for(name)
    runs = {}
    for precision in ("fp32", "bf16"):
        policy = make(name, precision)
        before = flat_parameters(policy).clone()
        torch.manual_seed(1)
        metrics = policy.learn(replay, LearnContext(updates=4))
        runs[precision] = (policy, flat_parameters(policy) - before, metrics)
    policy, delta_bf16, metrics = runs["bf16"]
    _, delta_fp32, metrics_fp32 = runs["fp32"]
    assert policy.precision == "bf16"
    state = policy.learner_state.state_tensors()  # every declared tensor: weights, optimiser state, temperature
    assert len(state) > 10
    assert all(t.dtype == torch.float32 for t in state if t.is_floating_point())
    # floats, or 0-dim tensors the pipeline reads once per metrics row (sync-free updates)
    assert all(np.isfinite(float(v)) and (isinstance(v, float) or v.ndim == 0) for v in metrics.values())
    # bf16 really ran (the updates differ from fp32's) but moves the weights the same way (Adam's first steps
    # move each weight by about the learning rate in the sign of its gradient)
    assert not torch.equal(delta_bf16, delta_fp32)
    moved = delta_fp32.abs() > 1e-6
    agree = (torch.sign(delta_bf16[moved]) == torch.sign(delta_fp32[moved])).float().mean()
    assert agree > 0.9
    loss_key = "q_loss" if name == "dqn" else "critic_loss"
    assert float(metrics[loss_key]) == pytest.approx(float(metrics_fp32[loss_key]), rel=0.05)


def test_acting_stays_fp32_under_bf16():
    policy = make("td3", "bf16")
    obs = torch.randn(5, 3)
    assert policy.deterministic_action(obs).dtype == torch.float32
    assert policy.explore(obs).dtype == np.float32


@pytest.mark.parametrize("name", list(CASES))
def test_bf16_state_dict_round_trip_resumes_exactly(name):
    replay = replay_for(name)
    first = make(name, "bf16", seed=1)
    first.learn(replay, LearnContext(updates=3))
    second = make(name, "bf16", seed=2)
    second.load_state_dict(first.state_dict())
    torch.manual_seed(5)
    metrics_first = first.learn(replay, LearnContext(updates=3))
    torch.manual_seed(5)
    metrics_second = second.learn(replay, LearnContext(updates=3))
    assert metrics_first == metrics_second
    assert torch.equal(flat_parameters(first), flat_parameters(second))


def test_an_unknown_precision_is_refused_with_the_choices(tmp_path):
    config = {"runs_dir": str(tmp_path), "env": {"id": "Pendulum-v1"}, "policy": {"type": "sac", "precision": "fp16"}}
    with pytest.raises(ConfigError, match="precision") as caught:
        train(config)
    assert "bf16" in str(caught.value) and "\n" not in str(caught.value)


def test_the_run_directory_records_the_precision_chosen(tmp_path, monkeypatch):
    monkeypatch.setattr(precision_module, "native_bf16", lambda device: False)
    config = {"runs_dir": str(tmp_path), "env": {"id": "Pendulum-v1"},
              "policy": {"type": "sac", "hidden_sizes": [256], "batch_size": 256, "precision": "auto"},
              "pipeline": {"max_env_steps": 300, "learning_starts": 200, "steps_per_iteration": 100}}
    run = Path(train(config)["run_dir"])
    sessions = json.loads((run / "environment.json").read_text())["sessions"]
    assert sessions[-1]["precision"] == "fp32"
    monkeypatch.setattr(precision_module, "native_bf16", lambda device: True)
    train(None, ["pipeline.max_env_steps=400"], resume=run)
    sessions = json.loads((run / "environment.json").read_text())["sessions"]
    assert [s["precision"] for s in sessions] == ["fp32", "bf16"]


def test_networks_return_fp32_under_bf16_autocast_so_losses_are_fp32():
    from zoo.accel.precision import learning_precision

    obs, action = torch.randn(4, 3), torch.rand(4, 2) * 2 - 1
    sac, td3, dqn = make("sac", "bf16"), make("td3", "bf16"), make("dqn", "bf16")
    with learning_precision("bf16", torch.device("cpu")):
        assert torch.matmul(obs, torch.randn(3, 3)).dtype == torch.bfloat16  # the context is on
        outputs = [*sac.actor(obs), sac.critic(obs, action), td3.actor(obs), td3.critic(obs, action), dqn.q(obs)]
    assert [out.dtype for out in outputs] == [torch.float32] * len(outputs)
    dueling = make("dqn", "bf16", dueling=True)
    with learning_precision("bf16", torch.device("cpu")):
        assert dueling.q(obs).dtype == torch.float32
