"""``EpisodeStats`` reports gymnasium's standard ``info["episode"]``, checked side by side with gymnasium 1.4's own
``RecordEpisodeStatistics`` on the same env, seeds and actions (NEXT_STEP autoreset, episodes ending at many steps)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from zoo.envs import make_vector_env
from zoo.envs.wrappers import EpisodeStats


@pytest.mark.parametrize("mode", ["sync", "vector_entry_point"])
def test_episode_info_matches_gymnasiums_record_episode_statistics(mode):
    ours = EpisodeStats(make_vector_env("CartPole-v1", 4, seed=3, mode=mode, max_episode_steps=30))
    theirs = gym.wrappers.vector.RecordEpisodeStatistics(
        make_vector_env("CartPole-v1", 4, seed=3, mode=mode, max_episode_steps=30)
    )
    ours.reset()
    theirs.reset()
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(300):
        actions = rng.integers(0, 2, 4)
        *_, info_ours = ours.step(actions)
        *_, info_theirs = theirs.step(actions)
        assert ("episode" in info_ours) == ("episode" in info_theirs)
        if "episode" in info_theirs:
            ended += int(info_theirs["_episode"].sum())
            np.testing.assert_array_equal(info_ours["_episode"], info_theirs["_episode"])
            np.testing.assert_allclose(info_ours["episode"]["r"], info_theirs["episode"]["r"])
            np.testing.assert_array_equal(info_ours["episode"]["l"], info_theirs["episode"]["l"])
            assert np.all(info_ours["episode"]["t"][info_ours["_episode"]] >= 0.0)
            assert np.all(info_ours["episode"]["t"][~info_ours["_episode"]] == 0.0)
    assert ended > 20 and ours.episodes == ended
    assert [r for r, _ in list(ours.recent)[-5:]] == list(theirs.return_queue)[-5:]


def test_without_episode_info_the_steps_carry_no_episode_key_but_episodes_are_recorded():
    venv = EpisodeStats(make_vector_env("CartPole-v1", 2, seed=0, max_episode_steps=3), episode_info=False)
    venv.reset()
    infos = [venv.step(np.ones(2, dtype=np.int64))[-1] for _ in range(8)]
    assert not any("episode" in info for info in infos)
    assert venv.pop_finished() == [(3.0, 3)] * 4


class _RandomEnds(gym.Env):
    """Float rewards that do not add up exactly, and terminations at random steps: what record_steps must sum
    in step()'s order."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        reward = float(self.np_random.normal()) * 0.1 + 1.0 / 3.0
        return np.zeros(1, np.float32), reward, bool(self.np_random.random() < 0.2), False, {}


@pytest.mark.parametrize("chunk", [1, 4, 9])
def test_record_steps_equals_the_bookkeeping_of_step_by_step(chunk):
    def make(episode_info=False):
        env = gym.vector.SyncVectorEnv([lambda: gym.wrappers.TimeLimit(_RandomEnds(), 6)] * 3,
                                       autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
        return EpisodeStats(env, episode_info=episode_info)

    stepped, recorded, with_info = make(), make(), make(episode_info=True)
    for venv in (stepped, recorded, with_info):
        venv.reset(seed=5)
    actions = np.zeros(3, dtype=np.int64)
    for _ in range(40 // chunk):
        rows = [recorded.env.step(actions)[1:4] for _ in range(chunk)]  # past the wrapper, in blocks of T steps
        reward, terminated, truncated = (np.stack(column) for column in zip(*rows))
        recorded.record_steps(reward, terminated, truncated)
        for _ in range(chunk):
            stepped.step(actions)
            with_info.step(actions)
        finished = stepped.pop_finished()
        assert recorded.pop_finished() == finished == with_info.pop_finished()  # equal floats: same order of sums
        np.testing.assert_array_equal(recorded._returns, stepped._returns)
        np.testing.assert_array_equal(recorded._lengths, stepped._lengths)
        np.testing.assert_array_equal(recorded._autoreset, stepped._autoreset)
    assert recorded.episodes == stepped.episodes == with_info.episodes > 10
