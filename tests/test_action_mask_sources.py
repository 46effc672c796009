"""More sources and players of action masks (zoo.envs.masks): ``env.action_mask=obs:<key>`` (the mask a key of Dict
observations, moved out before the rest is flattened), a final observation without a valid action (a full board),
``EnvMasks`` for one env, and videos that play among the valid actions."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers import new_policy, registered_envs

from zoo.envs import EnvSpec
from zoo.envs.masked import MaskedChoice
from zoo.envs.masks import MASK_KEY, EnvMasks
from zoo.errors import ConfigError, EnvError
from zoo.pipelines.collector import VectorCollector
from zoo.policies import LearnContext, PPOPolicy


class DictChoice(MaskedChoice):
    """MaskedChoice observing a Dict: the target one-hot under ``target`` and the valid actions under ``valid``
    (its masks only there: no method, no info key)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(masks="none", **kwargs)
        self.observation_space = gym.spaces.Dict({"target": gym.spaces.Box(0.0, 1.0, (self.n,), np.float32),
                                                  "valid": gym.spaces.MultiBinary(self.n)})

    def _obs(self):
        flat = super()._obs()
        return {"target": flat[:self.n], "valid": flat[self.n:].astype(np.int8)}


class FullBoard(MaskedChoice):
    """MaskedChoice whose episodes end (terminated) with no action valid at the final observation."""

    def __init__(self, render_mode=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.render_mode = render_mode

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if terminated or truncated:
            self._valid[:] = False
            info = self._info()
        return obs, reward, terminated or truncated, False, info

    def render(self):
        return np.zeros((4, 4, 3), dtype=np.uint8)


@pytest.fixture
def registered():
    with registered_envs(**{"DictChoice-v0": DictChoice, "FullBoard-v0": FullBoard}):
        yield


def test_a_dict_observation_key_is_the_mask_and_the_policy_sees_the_rest(registered):
    spec = EnvSpec("DictChoice-v0", {}, action_mask="obs:valid")
    observation_space, _ = spec.spaces()
    assert observation_space.shape == (6,)  # the target alone: the mask is not an observation
    venv = spec.make_vector(3, seed=0, mode="sync")
    obs, infos = venv.reset(seed=0)
    plain = [DictChoice().reset(seed=seed)[0] for seed in range(3)]
    assert np.array_equal(infos[MASK_KEY], np.stack([p["valid"] for p in plain]).astype(bool))
    assert np.array_equal(obs, np.stack([p["target"] for p in plain]))
    venv.close()
    policy = new_policy(PPOPolicy, observation_space, gym.spaces.Discrete(6), hidden_sizes=[16])
    collector = VectorCollector(spec, 8, seed=0, vector_mode="sync")
    for _ in range(10):
        policy.learn(policy.process_rollout(collector.rollout(policy, 32)), LearnContext(progress=0.0))
    assert sum(collector.venv.unwrapped.get_attr("invalid_actions")) == 0
    collector.close()


def test_an_observation_key_that_is_not_there_is_one_line(registered):
    for env_id, source, wanted in (("DictChoice-v0", "obs:mask", "has Dict observations with keys target, valid"),
                                   ("MaskedChoice-v0", "obs:valid", "has Box observations"),
                                   ("DictChoice-v0", "bogus", "or obs:<key>")):
        with pytest.raises(ConfigError, match=wanted) as error:
            EnvSpec(env_id, {}, action_mask=source).make_vector(2, seed=0, mode="sync")
        assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="use vector mode sync or async"):
        EnvSpec("CartPole-v1", {}, action_mask="obs:x").make_vector(2, seed=0, mode="vector_entry_point")


def test_a_final_observation_without_a_valid_action_is_given_as_all_valid(registered):
    venv = EnvSpec("FullBoard-v0", {"length": 3}, action_mask="auto").make_vector(2, seed=0, mode="sync")
    venv.reset(seed=0)
    for step in range(3):
        _, _, terminated, _, infos = venv.step(np.array([env.unwrapped._target for env in venv.unwrapped.envs]))
        assert bool(terminated.all()) == (step == 2)
    assert bool(infos[MASK_KEY].all())  # the final observations': none valid there, given as all valid
    venv.close()
    env = FullBoard(length=1)
    masks = EnvMasks(env, "auto", "FullBoard-v0")
    _, info = env.reset(seed=0)
    assert masks.read(info, reset=True).sum() >= 1
    _, _, _, _, info = env.step(env._target)
    assert masks.read(info, final=True).all()
    with pytest.raises(EnvError, match=r"FullBoard-v0' \(step 2 of its episode\) gave an action mask with no valid"):
        masks.read(info)  # the same mask where an action is still to be taken


def test_env_masks_read_each_source_of_one_env(registered):
    for source, env, wanted in (("auto", MaskedChoice(masks="method"), "method"),
                                ("info", MaskedChoice(masks="info"), "info"),
                                ("none", MaskedChoice(), None)):
        masks = EnvMasks(env, source, "MaskedChoice-v0")
        _, info = env.reset(seed=1)
        mask = masks.read(info, reset=True)
        assert (mask is None) == (wanted is None) and masks.active in (wanted, None)
        if mask is not None:
            assert np.array_equal(mask, env._valid)
    with pytest.raises(ConfigError, match="has no action_masks"):
        env = MaskedChoice(masks="info")
        EnvMasks(env, "method", "X").read(env.reset(seed=0)[1], reset=True)


def test_a_video_plays_among_the_valid_actions(tmp_path, registered):
    pytest.importorskip("imageio")
    from zoo.video import record_episodes

    policy = new_policy(PPOPolicy, gym.spaces.Box(0, 1, (12,), np.float32), gym.spaces.Discrete(6), hidden_sizes=[8])
    spec = EnvSpec("FullBoard-v0", {"length": 20}, action_mask="auto")
    for deterministic in (True, False):
        written = record_episodes(policy, spec, tmp_path / str(deterministic), 3, seed=0, fmt="gif",
                                  deterministic=deterministic)
        assert [total >= 0 for _, total in written] == [True] * 3  # an invalid action scores -1 and ends it
        assert all(Path(path).exists() for path, _ in written)
    unmasked = record_episodes(policy, EnvSpec("FullBoard-v0", {"length": 20}), tmp_path / "u", 3, seed=0,
                               fmt="gif", deterministic=False)
    assert any(total < 0 for _, total in unmasked)  # the same policy unmasked: the check can fail
