"""DQN under action masks (``env.action_mask``; zoo.policies.dqn, zoo.data.replay, zoo.pipelines.collector): no
invalid action in 10,000 steps of random masks (random warm-up and epsilon exploration included) where the same
config unmasked takes some; the target's max (and double DQN's argmax) over the valid next actions only, against a
plain float64 loop, one-step and n-step; the replay's next-observation masks through wraparound, windows, the device
mirror and the collector's autoresets; and an exact resume of a masked run."""

from __future__ import annotations

import copy
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import TIMINGS, metrics_rows, new_policy
from test_nstep_windows import held_rows, reference_window, vector_steps

from zoo.accel.replay_storage import ReplayStorage
from zoo.data import ReplayBuffer, Transitions
from zoo.envs import EnvSpec
from zoo.envs.masks import random_valid_actions
from zoo.pipelines.collector import VectorCollector
from zoo.policies import DQNPolicy, LearnContext
from zoo.run import train
from zoo.run.run_dir import load_weights_only

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACTIONS = gym.spaces.Discrete(5, start=1)  # env actions 1..5, indices 0..4
WIDTH = 6  # MaskedChoice's default n: its observation is [one-hot target (6), mask (6)]


def random_masks(rng: np.random.Generator, rows: int, width: int = 5) -> np.ndarray:
    masks = rng.random((rows, width)) < 0.4
    masks[np.arange(rows), rng.integers(0, width, rows)] = True  # at least one valid action, as an env must give
    return masks


def masked_policy(**overrides) -> DQNPolicy:
    policy = new_policy(DQNPolicy, OBS, ACTIONS, hidden_sizes=[16], gamma=0.9, loss="mse", **overrides)
    with torch.no_grad():  # a target unlike the online network: plain and double targets differ
        for parameter in policy.target.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))
    return policy


def reference_loss(policy: DQNPolicy, samples: list[dict], masked: bool = True) -> float:
    """Mean over ``samples`` of ``(Q(s, a) - y)**2``, ``y = sum_k gamma**k r_k + gamma**K max_{a' valid} Q_target(s',
    a')`` (double DQN: Q_target at the online argmax over the valid a'; no bootstrap after a termination), computed
    one sample at a time in float64 with copies of the networks taken before any update."""
    online, target_net = copy.deepcopy(policy.q).double(), copy.deepcopy(policy.target).double()
    gamma, losses = policy.cfg.gamma, []
    with torch.no_grad():
        for sample in samples:
            y = sum(gamma ** k * reward for k, reward in enumerate(sample["rewards"]))
            if not sample["terminated"]:
                next_obs = torch.as_tensor(np.asarray(sample["next_obs"], np.float64))[None]
                target_q = target_net(next_obs)[0].numpy()
                chooser = online(next_obs)[0].numpy() if policy.cfg.double_dqn else target_q
                valid = [a for a in range(len(chooser)) if sample["next_mask"][a] or not masked]
                best = max(valid, key=lambda a: chooser[a])
                y += gamma ** len(sample["rewards"]) * float(target_q[best])
            q = online(torch.as_tensor(np.asarray(sample["obs"], np.float64))[None])[0]
            losses.append((float(q[sample["action"] - ACTIONS.start]) - y) ** 2)
    return float(np.mean(losses))


# -- the target -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("double_dqn", [False, True])
def test_the_masked_target_equals_a_plain_loop_over_the_valid_next_actions(double_dqn):
    rng = np.random.default_rng(int(double_dqn))
    size = 64
    terminated = rng.random(size) < 0.2
    batch = {"obs": rng.normal(size=(size, 3)), "action": rng.integers(1, 6, size),
             "reward": rng.normal(size=(1, size)), "terminated": terminated[None],
             "truncated": ((rng.random(size) < 0.2) & ~terminated)[None],  # bootstraps, from its final observation
             "next_obs": 2 * rng.normal(size=(size, 3)), "next_action_mask": random_masks(rng, size)}
    batch = {key: torch.as_tensor(value, dtype=torch.float32 if value.dtype == np.float64 else None)
             for key, value in batch.items()}
    policy = masked_policy(double_dqn=double_dqn)
    samples = [{"obs": batch["obs"][i].numpy(), "action": int(batch["action"][i]),
                "rewards": [float(batch["reward"][0, i])], "terminated": bool(terminated[i]),
                "next_obs": batch["next_obs"][i].numpy(), "next_mask": batch["next_action_mask"][i].numpy()}
               for i in range(size)]
    expected, unmasked = reference_loss(policy, samples), reference_loss(policy, samples, masked=False)
    assert abs(unmasked - expected) > 0.01 * expected  # the data make the mask matter: dropping it fails below
    loss = float(policy.update(batch, LearnContext())["q_loss"])
    assert loss == pytest.approx(expected, rel=1e-5)


def masked_replay(rows: list[dict], capacity: int, seed: int = 0, chunk: int = 7) -> ReplayBuffer:
    """The rows of ``vector_steps`` in a replay with a mask column: random observations, actions and masks."""
    rng = np.random.default_rng(seed)
    replay = ReplayBuffer(capacity, (3,), (), action_dtype=np.int64, mask_width=5)
    for start in range(0, len(rows), chunk):
        part = rows[start:start + chunk]
        replay.add(Transitions(
            obs=rng.normal(size=(len(part), 3)).astype(np.float32), action=rng.integers(1, 6, len(part)),
            reward=np.array([r["reward"] for r in part], np.float32),
            next_obs=2 * rng.normal(size=(len(part), 3)).astype(np.float32),
            terminated=np.array([r["terminated"] for r in part]), truncated=np.array([r["truncated"] for r in part]),
            env=np.array([r["env"] for r in part], np.int32), next_action_mask=random_masks(rng, len(part))))
    return replay


@pytest.mark.parametrize("nstep, double_dqn", [(1, False), (1, True), (3, False), (4, True)])
def test_the_masked_target_from_the_replay_equals_a_plain_loop(nstep, double_dqn):
    replay = masked_replay(vector_steps(3, 80, seed=nstep), 150)  # wrapped around
    policy = masked_policy(batch_size=48, nstep=nstep, double_dqn=double_dqn)
    torch.manual_seed(5)
    starts = torch.randint(len(replay), (48,)).numpy()  # the rows the minibatch draws with the same state
    held, order = held_rows(replay)
    position_of = {int(row): position for position, row in enumerate(order)}
    samples = []
    for start in starts:
        window = [order[p] for p in reference_window(held, position_of[int(start)], nstep)]
        last = window[-1]
        samples.append({"obs": replay.obs[start], "action": int(replay.action[start]),
                        "rewards": [float(replay.reward[row]) for row in window],
                        "terminated": bool(replay.terminated[last]), "next_obs": replay.next_obs[last],
                        "next_mask": replay.next_action_mask[last]})  # the mask where the window bootstraps
    expected, unmasked = reference_loss(policy, samples), reference_loss(policy, samples, masked=False)
    assert abs(unmasked - expected) > 0.01 * expected
    torch.manual_seed(5)
    metrics = policy.learn(replay, LearnContext(updates=1))  # one-step: gathered from the storage columns
    assert float(metrics["q_loss"]) == pytest.approx(expected, rel=1e-5)


# -- the replay -----------------------------------------------------------------------------------------------------
def test_the_replay_keeps_each_rows_next_mask_through_wraparound_state_and_the_device_mirror():
    rng = np.random.default_rng(0)
    replay = ReplayBuffer(10, (3,), (), action_dtype=np.int64, mask_width=5)
    storage = ReplayStorage(torch.device("cpu"), mirror=True)
    added = []
    for count in (3, 4, 5, 1, 12, 2):  # wraps, and one addition larger than the capacity
        masks = random_masks(rng, count)
        added.extend(masks)
        replay.add(Transitions(obs=np.zeros((count, 3), np.float32), action=np.zeros(count, np.int64),
                               reward=np.arange(count, dtype=np.float32), next_obs=np.zeros((count, 3), np.float32),
                               terminated=np.zeros(count, bool), truncated=np.zeros(count, bool),
                               next_action_mask=masks))
        held = replay.recent(len(replay)).next_action_mask
        np.testing.assert_array_equal(held, np.array(added[-len(replay):]))
        columns = storage.of(replay)
        np.testing.assert_array_equal(columns["next_action_mask"][:len(replay)].numpy(),
                                      replay.next_action_mask[:len(replay)])
    state = replay.state_dict()
    again = ReplayBuffer(10, (3,), (), action_dtype=np.int64, mask_width=5)
    again.load_state_dict(state)
    np.testing.assert_array_equal(again.recent(10).next_action_mask, np.array(added[-10:]))
    plain = ReplayBuffer(10, (3,), (), action_dtype=np.int64)  # env.action_mask turned off: the column dropped
    plain.load_state_dict(state)
    assert plain.next_action_mask is None and "next_action_mask" not in plain.state_dict()
    again.load_state_dict(plain.state_dict())  # turned on: rows saved without masks load as all valid
    assert again.next_action_mask[:10].all()
    with pytest.raises(ValueError, match="has a next_action_mask column and the transitions disagree"):
        again.add(plain.recent(1))
    assert ReplayBuffer(10, (3,), ()).nbytes + 10 * 5 == ReplayBuffer(10, (3,), (), mask_width=5).nbytes


def test_n_step_windows_return_the_mask_of_the_observation_they_bootstrap_from():
    replay = masked_replay(vector_steps(4, 60, seed=1), 90)
    rows = np.arange(len(replay))
    held, order = held_rows(replay)
    position_of = {int(row): position for position, row in enumerate(order)}
    for steps in (1, 3, 5):
        batch = replay.window_batch(rows, steps)
        last = [order[reference_window(held, position_of[int(row)], steps)[-1]] for row in rows]
        np.testing.assert_array_equal(batch["next_action_mask"], replay.next_action_mask[last])
        np.testing.assert_array_equal(batch["next_obs"], replay.next_obs[last])
    assert "next_action_mask" not in ReplayBuffer(4, (3,), ()).window_batch(np.zeros(0, np.int64), 2)


def test_collected_transitions_keep_the_next_observations_mask_through_episode_ends():
    # MaskedChoice shows its mask in the observation: next_obs[:, 6:] is the mask of next_obs, the final one included
    collector = VectorCollector(EnvSpec("MaskedChoice-v0", {"length": 3}, action_mask="auto"), 4, seed=0,
                                vector_mode="sync")
    policy = new_policy(DQNPolicy, collector.observation_space, collector.action_space, hidden_sizes=[8])
    collector.check_masks(policy)
    parts = [collector.transitions(None, 20), collector.transitions(policy, 20)]
    for part in parts:
        assert part.next_action_mask.shape == (len(part), WIDTH) and part.truncated.sum() > 5
        np.testing.assert_array_equal(part.next_action_mask, part.next_obs[:, WIDTH:] > 0.5)
        assert (part.obs[np.arange(len(part)), WIDTH + part.action] == 1).all()  # each action valid where taken
        assert not part.terminated.any()  # MaskedChoice terminates on an invalid action only
    np.testing.assert_array_equal(collector.action_mask, np.asarray(collector.obs)[:, WIDTH:] > 0.5)
    collector.close()
    space = gym.spaces.MultiDiscrete([3, 2], start=[1, -1])
    masks = np.array([[False, True, False, True, False]] * 50 + [[True, False, True, False, True]] * 50)
    actions = random_valid_actions(space, masks, np.random.default_rng(0))
    assert (actions[:50] == [2, -1]).all() and set(actions[50:, 0]) == {1, 3} and (actions[50:, 1] == 0).all()


# -- acting -----------------------------------------------------------------------------------------------------------
def run_steps(action_mask: str, total: int = 10_000, num_envs: int = 8, warm_up: int = 2_000) -> tuple[int, int]:
    """Invalid actions taken in ``total`` env steps of a DQN with epsilon 0.5 on MaskedChoice (random masks),
    the first ``warm_up`` uniformly random: (during the warm-up, after it)."""
    collector = VectorCollector(EnvSpec("MaskedChoice-v0", {}, action_mask=action_mask), num_envs, seed=0,
                                vector_mode="sync")
    policy = new_policy(DQNPolicy, collector.observation_space, collector.action_space, hidden_sizes=[16],
                        batch_size=32, exploration_fraction=0.0, exploration_final_eps=0.5)
    collector.check_masks(policy)
    replay = ReplayBuffer(total, collector.observation_space.shape, (), action_dtype=np.int64,
                          mask_width=WIDTH if action_mask != "none" else 0)
    steps, per_call = 0, 10 * num_envs
    while steps < warm_up:
        replay.add(collector.transitions(None, 10))
        steps += per_call
    during = sum(collector.venv.unwrapped.get_attr("invalid_actions"))
    while steps < total:
        replay.add(collector.transitions(policy, 10))
        steps += per_call
        policy.learn(replay, LearnContext(updates=1, env_steps=steps))
    after = sum(collector.venv.unwrapped.get_attr("invalid_actions")) - during
    collector.close()
    return during, after


def test_a_masked_dqn_never_takes_an_invalid_action_in_10000_steps():
    assert run_steps("auto") == (0, 0)  # neither random warm-up, epsilon's random actions nor the greedy ones
    during, after = run_steps("none", total=4_000)
    assert during > 0 and after > 0  # the same config unmasked: the count can fail


def test_evaluate_and_predict_choose_the_best_valid_action():
    policy = new_policy(DQNPolicy, OBS, ACTIONS, hidden_sizes=[8])
    obs = torch.randn(200, 3)
    masks = torch.as_tensor(random_masks(np.random.default_rng(0), 200))
    chosen = policy.evaluate(obs, action_mask=masks) - ACTIONS.start
    q = policy.q(obs).detach()
    best = torch.where(masks, q, torch.full_like(q, -torch.inf)).max(-1).values
    assert masks[torch.arange(200), torch.as_tensor(chosen)].all()
    assert torch.equal(q[torch.arange(200), torch.as_tensor(chosen)], best)
    assert not masks[torch.arange(200), q.argmax(-1)].all()  # unmasked, some greedy choices are invalid
    np.testing.assert_array_equal(policy.evaluate(obs), policy.deterministic_action(obs).numpy())
    policy.cfg.exploration_final_eps, policy.cfg.exploration_fraction = 1.0, 0.0  # every action random
    explored = policy.collect(obs.repeat(20, 1), action_mask=masks.repeat(20, 1)).action - ACTIONS.start
    assert masks.repeat(20, 1)[torch.arange(4000), torch.as_tensor(explored)].all()
    counts = np.bincount(explored[masks.repeat(20, 1).sum(1) == 5], minlength=5)  # rows with every action valid
    assert counts.min() > 0.6 * counts.mean()  # uniform among the valid ones


# -- resume ---------------------------------------------------------------------------------------------------------
def test_a_masked_dqn_run_resumes_exactly(tmp_path):
    config = {"seed": 1, "runs_dir": str(tmp_path),
              "env": {"id": "MaskedChoice-v0", "action_mask": "auto", "kwargs": {"length": 7}},
              "policy": {"type": "dqn", "hidden_sizes": [16], "batch_size": 16, "nstep": 2,
                         "target_update_interval": 50, "exploration_fraction": 0.0,  # a schedule follows the
                         "exploration_final_eps": 0.3},  # budget, which differs between the two runs
              "pipeline": {"num_envs": 2, "vector_mode": "sync", "learning_starts": 100, "steps_per_iteration": 100,
                           "buffer_size": 300, "eval_every": 0, "checkpoint_every": 1, "max_env_steps": 600}}
    whole = train(config, ["exp_name=whole"])
    half = train(config, ["exp_name=half", "pipeline.max_env_steps=300"])
    run = Path(half["run_dir"])
    train(None, ["pipeline.max_env_steps=600"], resume=run)
    assert metrics_rows(run, TIMINGS) == metrics_rows(Path(whole["run_dir"]), TIMINGS)
    a, b = (load_weights_only(sorted(Path(r).glob("replay-*.pt"))[-1]) for r in (whole["run_dir"], run))
    assert a["next_action_mask"].shape == (300, WIDTH) and not a["next_action_mask"].all()  # wrapped, masks kept
    assert all(np.array_equal(a[key], b[key]) for key in a)
    weights = [load_weights_only(Path(r) / "checkpoint.pt")["policy"]["q"] for r in (whole["run_dir"], run)]
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])
