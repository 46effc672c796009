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
