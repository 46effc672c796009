"""n-step windows from the replay buffer (``ReplayBuffer.windows``, ``OffPolicyPolicy.sample_windows``) and DQN's
n-step target, each against a plain loop over the transitions in the order they were added.

The data imitate the collector: B sub-envs stepped together, a sub-env that ended an episode skips its autoreset
step (no row), rows of one vector step in sub-env order, episodes ended by terminations and truncations, and a
ring buffer that wrapped around several times.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from test_dqn import make_policy

from zoo.data import ReplayBuffer, Transitions
from zoo.policies.base import LearnContext
from zoo.rl_utils import q_nstep_td_data, q_nstep_td_error

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def vector_steps(num_envs: int, steps: int, seed: int, end_rate: float = 0.15) -> list[dict]:
    """Transitions in the collector's order: per vector step, one row per sub-env not in its autoreset step."""
    rng = np.random.default_rng(seed)
    pending = np.zeros(num_envs, dtype=bool)
    rows, counter = [], 0
    for _ in range(steps):
        ended = np.zeros(num_envs, dtype=bool)
        for env in range(num_envs):
            if pending[env]:
                continue
            terminated, truncated = rng.random() < end_rate, rng.random() < end_rate / 2
            rows.append(dict(env=env, reward=float(rng.normal()), terminated=terminated, truncated=truncated,
                             obs=float(counter), next_obs=counter + 0.5))
            counter += 1
            ended[env] = terminated or truncated
        pending = ended
    return rows


def fill(rows: list[dict], capacity: int, chunk: int = 7, with_env: bool = True, obs_dim: int = 1) -> ReplayBuffer:
    replay = ReplayBuffer(capacity, (obs_dim,), (), action_dtype=np.int64)
    for start in range(0, len(rows), chunk):
        part = rows[start:start + chunk]
        replay.add(Transitions(
            obs=np.array([[r["obs"]] * obs_dim for r in part], np.float32), action=np.zeros(len(part), np.int64),
            reward=np.array([r["reward"] for r in part], np.float32),
            next_obs=np.array([[r["next_obs"]] * obs_dim for r in part], np.float32),
            terminated=np.array([r["terminated"] for r in part]), truncated=np.array([r["truncated"] for r in part]),
            env=np.array([r["env"] for r in part], np.int32) if with_env else None,
        ))
    return replay


def reference_window(held: list[dict], start: int, steps: int) -> list[int]:
    """Positions in ``held`` (oldest first) of the window starting at ``start``: follow the same sub-env forward,
    stop after an episode end, after ``steps`` transitions, or where nothing newer of that sub-env is held."""
    window = [start]
    while len(window) < steps:
        row = held[window[-1]]
        if row["terminated"] or row["truncated"]:
            break
        following = [i for i in range(window[-1] + 1, len(held)) if held[i]["env"] == row["env"]]
        if not following:
            break
        window.append(following[0])
    return window


def held_rows(replay: ReplayBuffer) -> tuple[list[dict], np.ndarray]:
    """The rows held, oldest first, as dicts read back by their obs id, and their buffer row indices."""
    order = (replay.position - len(replay) + np.arange(len(replay))) % replay.capacity
    return [dict(env=int(replay.env[i]), terminated=bool(replay.terminated[i]), truncated=bool(replay.truncated[i]),
                 obs=float(replay.obs[i, 0])) for i in order], order


@pytest.mark.parametrize("num_envs, capacity, steps", [(1, 50, 3), (3, 64, 4), (4, 1000, 5), (2, 37, 1)])
def test_windows_follow_each_sub_env_within_one_episode(num_envs, capacity, steps):
    rows = vector_steps(num_envs, 120, seed=num_envs)
    replay = fill(rows, capacity)
    held, order = held_rows(replay)
    window, valid = replay.windows(order, steps)
    assert window.shape == valid.shape == (steps, len(order))
    position_of = {int(row): position for position, row in enumerate(order)}
    for column, start in enumerate(range(len(held))):
        expected = reference_window(held, start, steps)
        got = [position_of[int(r)] for r, ok in zip(window[:, column], valid[:, column]) if ok]
        assert got == expected, f"window at {start}"
        assert valid[: len(expected), column].all() and not valid[len(expected):, column].any()
        assert (window[len(expected):, column] == window[len(expected) - 1, column]).all()


def test_windows_cross_the_ring_boundary():
    rows = [dict(env=0, reward=1.0, terminated=False, truncated=False, obs=float(i), next_obs=i + 0.5)
            for i in range(13)]
    replay = fill(rows, capacity=10, chunk=5)  # 3 overwritten: obs 10-12 in rows 0-2, the oldest (obs 3) in row 3
    window, valid = replay.windows(np.array([8, 9, 0, 2]), 3)
    assert replay.obs[window[:, 0], 0].tolist() == [8, 9, 10]  # rows 8, 9, then 0 after the wrap
    assert replay.obs[window[:, 2], 0].tolist() == [10, 11, 12]
    assert valid[:, 3].tolist() == [True, False, False]  # obs 12 is the newest: nothing follows it


def test_unknown_sub_envs_give_one_step_windows():
    rows = vector_steps(2, 30, seed=1)
    replay = fill(rows, 100, with_env=False)  # e.g. a replay saved before sub-env indices were kept
    _, valid = replay.windows(np.arange(len(replay)), 4)
    assert valid[0].all() and not valid[1:].any()
    state = fill(rows, 100).state_dict()
    del state["env"]
    old = ReplayBuffer(100, (1,), (), action_dtype=np.int64)
    old.load_state_dict(state)
    assert (old.env[: len(old)] == -1).all() and not old.windows(np.arange(len(old)), 3)[1][1:].any()
    saved = fill(rows, 100).state_dict()
    again = ReplayBuffer(100, (1,), (), action_dtype=np.int64)
    again.load_state_dict(saved)
    assert np.array_equal(again.windows(np.arange(len(again)), 4)[0], fill(rows, 100).windows(
        np.arange(len(again)), 4)[0])


def test_end_sequences_cuts_each_sub_envs_newest_row_only():
    rows = [dict(env=e, reward=0.0, terminated=(e == 2 and t == 4), truncated=False, obs=float(3 * t + e),
                 next_obs=0.0) for t in range(5) for e in range(3)]
    replay = fill(rows, 100)
    replay.end_sequences()
    newest = replay.recent(len(replay))
    cut = newest.truncated.nonzero()[0].tolist()
    assert cut == [12, 13]  # sub-envs 0 and 1's last rows; sub-env 2's ended in a termination already
    assert not newest.truncated[:12].any() and newest.terminated[14] and not newest.truncated[14]


def reference_batch(replay: ReplayBuffer, starts: np.ndarray, steps: int) -> dict[str, np.ndarray]:
    held, order = held_rows(replay)
    position_of = {int(row): position for position, row in enumerate(order)}
    reward = np.zeros((steps, len(starts)), np.float32)
    terminated = np.zeros((steps, len(starts)), bool)
    truncated = np.zeros((steps, len(starts)), bool)
    next_obs = np.zeros(len(starts), np.float32)
    for column, start in enumerate(starts):
        window = [order[p] for p in reference_window(held, position_of[int(start)], steps)]
        for k, row in enumerate(window):
            reward[k, column] = replay.reward[row]
            terminated[k, column] = replay.terminated[row]
            truncated[k, column] = replay.truncated[row]
        last = window[-1]
        if len(window) < steps and not (replay.terminated[last] or replay.truncated[last]):
            truncated[len(window) - 1, column] = True  # cut by the newest row: bootstraps there
        next_obs[column] = replay.next_obs[last, 0]
    return dict(reward=reward, terminated=terminated, truncated=truncated, next_obs=next_obs)


def test_sample_windows_draws_the_minibatch_rows_and_marks_cut_windows():
    replay = fill(vector_steps(3, 60, seed=4), 80)
    policy = make_policy(batch_size=64, nstep=4)
    torch.manual_seed(11)
    starts = torch.randint(len(replay), (64,)).numpy()  # the draw sample_minibatch makes with the same state
    torch.manual_seed(11)
    batch = policy.sample_windows(replay, 4)
    expected = reference_batch(replay, starts, 4)
    np.testing.assert_array_equal(batch["obs"].numpy(), replay.obs[starts])
    for key in ("reward", "terminated", "truncated"):
        np.testing.assert_array_equal(batch[key].numpy(), expected[key], err_msg=key)
    np.testing.assert_array_equal(batch["next_obs"].numpy()[:, 0], expected["next_obs"])
    assert (batch["truncated"].sum(0) <= 1).all()  # one end flag at most per window


@pytest.mark.parametrize("nstep, double_dqn", [(3, False), (5, True), (1, False)])
def test_dqn_nstep_target_equals_a_plain_loop(nstep, double_dqn):
    gamma = 0.9
    replay = fill(vector_steps(2, 80, seed=nstep), 120, obs_dim=2)
    replay.obs[:] = np.random.default_rng(0).normal(size=replay.obs.shape)
    replay.next_obs[:] = np.random.default_rng(1).normal(size=replay.next_obs.shape)
    replay.action[:] = np.random.default_rng(2).integers(-1, 1, len(replay.action))
    policy = make_policy(batch_size=48, nstep=nstep, gamma=gamma, double_dqn=double_dqn, loss="mse")
    with torch.no_grad():
        for p in policy.target.parameters():
            p.add_(0.3 * torch.randn_like(p))
    torch.manual_seed(3)
    starts = torch.randint(len(replay), (48,)).numpy()
    held, order = held_rows(replay)
    position_of = {int(row): position for position, row in enumerate(order)}
    obs = torch.as_tensor(replay.obs.astype(np.float64))
    online, target_net = copy.deepcopy(policy.q).double(), copy.deepcopy(policy.target).double()
    losses = []
    for start in starts:
        window = [order[p] for p in reference_window(held, position_of[int(start)], nstep)]
        target = sum(gamma ** k * float(replay.reward[row]) for k, row in enumerate(window))
        last = window[-1]
        if not replay.terminated[last]:
            next_obs = torch.as_tensor(replay.next_obs[last:last + 1].astype(np.float64))
            with torch.no_grad():
                target_q = target_net(next_obs)[0]
                chooser = online(next_obs)[0] if double_dqn else target_q
                target += gamma ** len(window) * float(target_q[int(chooser.argmax())])
        with torch.no_grad():
            q_taken = float(online(obs[start:start + 1])[0, int(replay.action[start]) + 1])
        losses.append((q_taken - target) ** 2)
    torch.manual_seed(3)
    metrics = policy.update(policy.sample_minibatch(replay), LearnContext())
    assert metrics["q_loss"] == pytest.approx(np.mean(losses), rel=1e-5)


def test_nstep_one_is_the_one_step_target():
    replay = fill(vector_steps(2, 40, seed=9), 60, obs_dim=2)
    policy = make_policy(batch_size=32, nstep=1, loss="mse")
    torch.manual_seed(0)
    batch = policy.sample_minibatch(replay)
    q = policy.q(batch["obs"])
    with torch.no_grad():
        next_q = policy.target(batch["next_obs"])
    action = batch["action"].long() + 1
    one_step = q_nstep_td_error(q_nstep_td_data(q, next_q, action, next_q.argmax(-1), batch["reward"],
                                                batch["terminated"][0], None), 0.99, nstep=1)[0]
    torch.manual_seed(0)
    assert policy.update(policy.sample_minibatch(replay), LearnContext())["q_loss"] == pytest.approx(
        float(one_step.detach()), rel=1e-6)


def test_collected_transitions_carry_their_sub_env_and_follow_each_other(tmp_path):
    from zoo.pipelines.collector import VectorCollector

    collector = VectorCollector("CartPole-v1", 3, seed=0, vector_mode="sync")
    replay = ReplayBuffer(1000, (4,), (), action_dtype=np.int64)
    for _ in range(20):
        replay.add(collector.transitions(None, 7))  # CartPole episodes end (and autoreset) inside this
    collector.close()
    held = replay.recent(len(replay))
    assert set(held.env.tolist()) == {0, 1, 2}
    window, valid = replay.windows(np.arange(len(replay)), 2)
    follows = valid[1]
    assert follows.sum() > 0.8 * len(replay)  # most transitions have a successor in their episode
    # a successor starts where its predecessor ended: the predecessor's next_obs is the successor's obs
    np.testing.assert_array_equal(replay.next_obs[window[0, follows]], replay.obs[window[1, follows]])
    ended = replay.terminated | replay.truncated
    assert not follows[ended[: len(replay)]].any()


def test_an_inexact_resume_cuts_the_stored_episodes_of_every_sub_env(tmp_path):
    from zoo.run import train
    from zoo.run.run_dir import load_weights_only

    config = {"exp_name": "dqn", "seed": 0, "runs_dir": str(tmp_path), "env": {"id": "CartPole-v1"},
              "policy": {"type": "dqn", "hidden_sizes": [8], "batch_size": 8, "nstep": 3},
              "pipeline": {"num_envs": 2, "vector_mode": "async", "learning_starts": 16, "steps_per_iteration": 32,
                           "max_env_steps": 64, "checkpoint_every": 1}}
    run = train(config)["run_dir"]
    before = load_weights_only(next(Path(run).glob("replay-*.pt")))
    train(None, ["pipeline.max_env_steps=128"], resume=run)  # async envs cannot be saved: fresh episodes
    after = load_weights_only(sorted(Path(run).glob("replay-*.pt"))[-1])
    count = len(before["reward"])
    for env in (0, 1):
        last = np.nonzero(before["env"] == env)[0][-1]
        assert after["truncated"][last] or after["terminated"][last], f"sub-env {env}'s newest row not cut"
    unchanged = np.ones(count, bool)
    unchanged[[np.nonzero(before["env"] == env)[0][-1] for env in (0, 1)]] = False
    np.testing.assert_array_equal(after["truncated"][:count][unchanged], before["truncated"][unchanged])
