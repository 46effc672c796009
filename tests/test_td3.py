"""TD3: the target by hand (smoothing noise from a fixed generator, clipped; the min of the twin targets;
termination vs truncation), the critic loss, delayed actor and target updates every policy_delay critic updates,
exact Polyak targets, exploration noise, state_dict round trip and an exact resume through the pipeline, export,
and a short learning run on Pendulum."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from tests.helpers import metrics_rows
from zoo.data import ReplayBuffer, Transitions
from zoo.export.command import export_run
from zoo.policies import LearnContext, TD3Policy
from zoo.run import train
from zoo.run.run_dir import load_weights_only

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
# Asymmetric bounds: the critics must see (a - center) / half = (a - 2) / 2, not the env action.
ACT_SPACE = gym.spaces.Box(np.array([0.0], np.float32), np.array([4.0], np.float32), dtype=np.float32)
CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def make_policy(seed=0, obs_space=OBS_SPACE, act_space=ACT_SPACE, acting_only=False, **overrides) -> TD3Policy:
    cfg = EasyDict({**TD3Policy.default_config, "hidden_sizes": [16, 16], "batch_size": 8, "tau": 0.3,
                    **overrides})
    torch.manual_seed(seed)
    return TD3Policy(cfg, obs_space, act_space, torch.device("cpu"), acting_only=acting_only)


def make_replay(n=16, seed=0) -> ReplayBuffer:
    rng = np.random.default_rng(seed)
    replay = ReplayBuffer(n, (2,), (1,))
    replay.add(Transitions(
        obs=rng.normal(size=(n, 2)).astype(np.float32), action=rng.uniform(0, 4, (n, 1)).astype(np.float32),
        reward=rng.normal(size=n).astype(np.float32), next_obs=rng.normal(size=(n, 2)).astype(np.float32),
        terminated=np.arange(n) % 5 == 0, truncated=np.arange(n) % 7 == 0,
    ))
    return replay


# -- the target and the critic loss, by hand ------------------------------------------------------------------
W_ACTOR, B_ACTOR = [[0.5, -1.0]], [0.2]
# Q_e(s, a) = w_e . [s0, s1, a] + b_e: two different linear critics, so the min picks either.
W_Q = [[1.0, 2.0, 3.0], [-1.0, 0.5, 1.0]]
B_Q = [0.1, 0.0]


def linear_policy(**overrides) -> TD3Policy:
    policy = make_policy(hidden_sizes=[], gamma=0.9, policy_noise=1.0, noise_clip=0.5, **overrides)
    with torch.no_grad():
        for actor in (policy.actor, policy.actor_target):
            actor.layers[0].weight.copy_(torch.tensor(W_ACTOR))
            actor.layers[0].bias.copy_(torch.tensor(B_ACTOR))
        for critic, scale in ((policy.critic, 0.5), (policy.critic_target, 1.0)):
            critic.weights[0].copy_(scale * torch.tensor(W_Q).unsqueeze(-1))
            critic.biases[0].copy_(torch.tensor(B_Q).reshape(2, 1, 1))
    return policy


NEXT_OBS = np.array([[3.0, -1.0], [0.0, 0.0], [-1.0, 1.0], [1.0, 2.0]], np.float32)
REWARD = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
TERMINATED = np.array([False, True, False, False])  # row 2 is a truncation: it bootstraps like row 0


def hand_target(noise: np.ndarray) -> np.ndarray:
    w, b = np.array(W_ACTOR[0]), B_ACTOR[0]
    target = []
    for s, r, done, eps in zip(NEXT_OBS.astype(np.float64), REWARD, TERMINATED, noise):
        a = np.tanh(w @ s + b)
        a = min(max(a + min(max(1.0 * eps, -0.5), 0.5), -1.0), 1.0)
        q = [np.dot(we, [s[0], s[1], a]) + be for we, be in zip(W_Q, B_Q)]
        target.append(r + (0.0 if done else 0.9 * min(q)))
    return np.array(target)


def test_the_target_smooths_with_clipped_noise_takes_the_min_and_bootstraps_truncations():
    policy = linear_policy()
    torch.manual_seed(0)
    noise = torch.randn(4, 1).numpy()[:, 0].astype(np.float64)
    # The case is one where each rule shows: noise clipped at +-0.5 in some rows, the action clipped at 1 in row 0.
    assert (np.abs(noise) > 0.5).any() and (np.abs(noise) < 0.5).any()
    assert np.tanh(0.5 * 3 + 1 + 0.2) + min(max(noise[0], -0.5), 0.5) > 1.0
    torch.manual_seed(0)
    got = policy.td_target(torch.from_numpy(REWARD), torch.from_numpy(NEXT_OBS), torch.from_numpy(TERMINATED))
    np.testing.assert_allclose(got.numpy(), hand_target(noise), rtol=1e-6, atol=1e-6)
    assert got[1].item() == -2.0  # terminated: the reward alone


def test_the_critic_loss_is_the_sum_of_the_twin_squared_errors_on_rescaled_actions():
    policy = linear_policy(policy_delay=1_000)
    obs = np.array([[1.0, 0.0], [0.5, -0.5], [0.0, 2.0], [-1.0, -1.0]], np.float32)
    env_action = np.array([[4.0], [0.0], [1.0], [3.0]], np.float32)  # -> 1, -1, -0.5, 0.5 in [-1, 1]
    batch = {"obs": torch.from_numpy(obs), "action": torch.from_numpy(env_action), "reward": torch.from_numpy(REWARD),
             "next_obs": torch.from_numpy(NEXT_OBS), "terminated": torch.from_numpy(TERMINATED),
             "truncated": torch.zeros(4, dtype=torch.bool)}
    torch.manual_seed(5)
    target = hand_target(torch.randn(4, 1).numpy()[:, 0].astype(np.float64))
    unit = (env_action[:, 0] - 2.0) / 2.0
    q = np.array([[0.5 * np.dot(we, [s[0], s[1], a]) + be for s, a in zip(obs, unit)] for we, be in zip(W_Q, B_Q)])
    torch.manual_seed(5)
    policy.updates = 1
    metrics = policy.update(batch, LearnContext())
    assert metrics["critic_loss"] == pytest.approx(((q - target) ** 2).mean(1).sum(), rel=1e-6)
    assert metrics["q_mean"] == pytest.approx(q.mean(), rel=1e-6)
    assert "actor_loss" not in metrics
    # Every update with policy_delay 1: the actor ascends Q_1 alone (not the min), after the critics' step.
    policy = linear_policy(policy_delay=1)
    actor = copy.deepcopy(policy.actor)
    metrics = policy.update(batch, LearnContext())
    with torch.no_grad():
        q_new = policy.critic(torch.from_numpy(obs), actor(torch.from_numpy(obs))).squeeze(-1)
    assert (q_new[0] != q_new.min(0).values).any()
    assert metrics["actor_loss"] == pytest.approx(-q_new[0].mean().item(), rel=1e-6)


# -- delayed updates and Polyak targets -----------------------------------------------------------------------
def test_actor_and_targets_update_every_policy_delay_critic_updates_with_exact_polyak():
    policy, replay = make_policy(seed=1, policy_delay=3, tau=0.3), make_replay()
    seen = []
    for _ in range(7):
        before = {name: flat.clone() for name, flat in (
            ("actor", policy.actor_optimizer.flat), ("critic", policy.critic_optimizer.flat),
            ("actor_target", policy.actor_target_flat), ("critic_target", policy.critic_target_flat))}
        metrics = policy.learn(replay, LearnContext(updates=1))
        changed = {name: not torch.equal(before[name], flat) for name, flat in (
            ("actor", policy.actor_optimizer.flat), ("critic", policy.critic_optimizer.flat),
            ("actor_target", policy.actor_target_flat), ("critic_target", policy.critic_target_flat))}
        seen.append((changed["actor"], changed["actor_target"], changed["critic_target"], "actor_loss" in metrics))
        assert changed["critic"]
        if changed["actor"]:  # target <- target + tau (online - target), the online networks after their step
            for name, online in (("actor_target", policy.actor_optimizer.flat),
                                 ("critic_target", policy.critic_optimizer.flat)):
                want = before[name] + 0.3 * (online - before[name])
                torch.testing.assert_close(getattr(policy, f"{name}_flat"), want, rtol=0, atol=1e-7)
    delayed = (True, True, True, True)
    quiet = (False, False, False, False)
    assert seen == [quiet, quiet, delayed, quiet, quiet, delayed, quiet]
    assert policy.updates == 7


def test_the_targets_start_as_copies_and_a_state_dict_round_trip_resumes_exactly():
    policy, replay = make_policy(seed=2), make_replay()
    assert torch.equal(policy.actor_target_flat, policy.actor_optimizer.flat)
    assert torch.equal(policy.critic_target_flat, policy.critic_optimizer.flat)
    policy.learn(replay, LearnContext(updates=5))
    state, rng = copy.deepcopy(policy.state_dict()), torch.get_rng_state()
    other = make_policy(seed=99)
    other.load_state_dict(state)
    torch.set_rng_state(rng)
    first = policy.learn(replay, LearnContext(updates=5))
    torch.set_rng_state(rng)
    second = other.learn(replay, LearnContext(updates=5))
    assert first == second and other.updates == policy.updates == 10
    for a, b in zip(policy.state_dict().values(), other.state_dict().values()):
        if isinstance(a, dict):
            assert all(torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a if k != "algorithm")


# -- acting ---------------------------------------------------------------------------------------------------
def test_exploration_adds_clipped_gaussian_noise_and_evaluation_and_export_act_deterministically():
    policy = make_policy(seed=3, exploration_noise=0.5)
    obs = torch.randn(64, 2)
    mean = policy.actor(obs)
    torch.manual_seed(4)
    noise = torch.randn(64, 1)
    torch.manual_seed(4)
    out = policy.collect(obs)
    assert out.raw_action is None  # the replay stores env actions
    want = 2.0 + 2.0 * (mean + 0.5 * noise).clamp(-1.0, 1.0)
    np.testing.assert_allclose(out.action, want.detach().numpy(), rtol=0, atol=1e-6)
    assert (out.action == 0.0).any() or (out.action == 4.0).any() or (np.abs(noise.numpy()) > 0).all()
    deterministic = policy.evaluate(obs)
    np.testing.assert_allclose(deterministic, (2.0 + 2.0 * mean).detach().numpy(), rtol=0, atol=1e-6)
    acting = make_policy(seed=0, acting_only=True)
    acting.load_state_dict(policy.state_dict())  # what zoo eval does, optimiser parts ignored
    np.testing.assert_array_equal(acting.evaluate(obs), deterministic)
    traced = torch.jit.trace(policy.export_module(), obs)
    np.testing.assert_allclose(traced(obs).detach().numpy(), deterministic, rtol=0, atol=1e-6)


# -- through the pipeline -------------------------------------------------------------------------------------
TINY = {
    "exp_name": "td3", "seed": 3, "env": {"id": "Pendulum-v1"},
    "policy": {"type": "td3", "hidden_sizes": [16, 16], "batch_size": 16},
    "pipeline": {"learning_starts": 200, "steps_per_iteration": 100, "eval_every": 2, "eval_episodes": 1,
                 "checkpoint_every": 1, "buffer_size": 5000, "max_env_steps": 500},
}


def test_a_resumed_td3_run_equals_an_unbroken_one(tmp_path):
    config = {**TINY, "runs_dir": str(tmp_path)}
    whole = train(config, ["exp_name=whole", "pipeline.max_env_steps=500"])
    half = train(config, ["exp_name=half", "pipeline.max_env_steps=300"])
    train(None, ["pipeline.max_env_steps=500"], resume=half["run_dir"])
    rows = metrics_rows(Path(half["run_dir"]), without=("wall_time", "sps"))
    assert rows == metrics_rows(Path(whole["run_dir"]), without=("wall_time", "sps"))
    assert len(rows) == 5 and "actor_loss" in rows[-1]
    a, b = (load_weights_only(Path(r) / "checkpoint.pt")["policy"] for r in (whole["run_dir"], half["run_dir"]))
    # a learning call after each step from 200 to 500, but the autoreset steps 201 and 402 (nothing stored)
    assert a["updates"] == b["updates"] == 299
    assert all(torch.equal(a["critic_target"][k], b["critic_target"][k]) for k in a["critic_target"])
    # zoo export: the tanh-bounded actor as TorchScript, checked against zoo.load(run).predict.
    result = export_run(half["run_dir"], "torchscript", tmp_path / "td3.pt", check=32)
    assert result.checked == 32 and result.max_difference <= 1e-5


@pytest.mark.slow  # 36-45 s alone on the 2-core dev machine, 105 s beside other runs
def test_td3_learns_pendulum_in_8k_steps(tmp_path):
    # td3_pendulum.py with 64x64 networks and 1k random steps: seeds 0 and 1 evaluated -218 and -147 at 8k env
    # steps (10 episodes; random play scores about -1200 to -1500). Deterministic for a seed on one thread.
    summary = train(CONFIGS / "td3_pendulum.py", [f"runs_dir={tmp_path}", "seed=0", "torch_threads=1",
                                                  "policy.hidden_sizes=[64,64]", "pipeline.learning_starts=1000",
                                                  "pipeline.max_env_steps=8000", "pipeline.eval_every=2"])
    last = json.loads((Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["env_steps"] == 8000 and last["eval_return_mean"] >= -400.0, last


def test_the_default_tune_space_fits_td3():
    from zoo.config.files import load_config_file
    from zoo.config.resolve import resolve_config
    from zoo.tune.space import DEFAULT_SPACES, check_settings, parse_settings

    cfg = resolve_config(load_config_file(CONFIGS / "td3_pendulum.py"), [], CONFIGS)
    settings = parse_settings(cfg.get("tune"), "td3")
    assert {p.key for p in settings.parameters} == {
        "policy.actor_learning_rate", "policy.critic_learning_rate", "policy.gamma", "policy.tau",
        "policy.batch_size", "policy.exploration_noise"} == set(DEFAULT_SPACES["td3"])
    check_settings(settings, cfg, CONFIGS)  # every bound and choice is a value the config accepts
