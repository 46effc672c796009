"""zoo.envs: vector env construction (modes, NEXT_STEP autoreset, seeding) and the vector wrappers."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

from zoo.envs import (
    EpisodeStats,
    NormalizeObservation,
    NormalizeReward,
    make_env,
    make_vector_env,
    wrap_vector_env,
)
from zoo.errors import ConfigError, EnvError, ZooError
from zoo.registry import ENV_REGISTRY

COUNTER = "zoo-test-counter"


class CounterEnv(gym.Env):
    """Observation ``[step in episode, episode index]``; reward ``k * (1 + action)`` at step ``k``.

    Episode lengths are drawn from ``[min_length, max_length]`` with the env's seeded generator, so seeded
    sub-envs finish at different, reproducible times.
    """

    def __init__(self, min_length: int = 1, max_length: int = 5) -> None:
        self.observation_space = gym.spaces.Box(0.0, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.min_length, self.max_length = min_length, max_length
        self.episode = -1

    def _obs(self) -> np.ndarray:
        return np.array([self.step_in_episode, self.episode], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.step_in_episode = 0
        self.length = int(self.np_random.integers(self.min_length, self.max_length + 1))
        return self._obs(), {}

    def step(self, action):
        self.step_in_episode += 1
        reward = float(self.step_in_episode * (1 + int(action)))
        return self._obs(), reward, self.step_in_episode >= self.length, False, {}


@pytest.fixture
def counter_env():
    ENV_REGISTRY.register(COUNTER, CounterEnv, source="tests")
    yield COUNTER
    ENV_REGISTRY.unregister(COUNTER)


def _rollout(venv, steps: int, action_seed: int = 0):
    """Reset, then step with seeded random actions; return lists of observations and step results."""
    rng = np.random.default_rng(action_seed)
    obs, _ = venv.reset()
    observations, results = [obs], []
    for _ in range(steps):
        actions = rng.integers(0, venv.single_action_space.n, size=venv.num_envs)
        obs, reward, terminated, truncated, _ = venv.step(actions)
        observations.append(obs)
        results.append((reward, terminated, truncated))
    return observations, results


# --- factory ---------------------------------------------------------------------------------------------------


def test_auto_mode_picks_vector_entry_point_for_cartpole_and_sync_for_pendulum():
    cartpole = make_vector_env("CartPole-v1", 4)
    pendulum = make_vector_env("Pendulum-v1", 2)
    assert isinstance(cartpole.unwrapped, CartPoleVectorEnv)
    assert isinstance(pendulum.unwrapped, gym.vector.SyncVectorEnv)
    for venv in (cartpole, pendulum):
        assert venv.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
        venv.close()


def test_explicit_modes_and_errors():
    assert isinstance(make_vector_env("CartPole-v1", 2, mode="sync").unwrapped, gym.vector.SyncVectorEnv)
    with pytest.raises(ConfigError, match="valid modes are auto, sync, async, vector_entry_point"):
        make_vector_env("CartPole-v1", 2, mode="threads")
    with pytest.raises(ConfigError, match="no vector_entry_point"):
        make_vector_env("Pendulum-v1", 2, mode="vector_entry_point")
    with pytest.raises(ConfigError, match="num_envs"):
        make_vector_env("CartPole-v1", 0)


@pytest.mark.parametrize("mode", ["vector_entry_point", "sync", "async"])
def test_next_step_autoreset_after_time_limit_on_cartpole(mode):
    venv = make_vector_env("CartPole-v1", 3, seed=0, mode=mode, max_episode_steps=5)
    _, results = _rollout(venv, 7)
    venv.close()
    rewards = np.array([r for r, _, _ in results])
    truncated = np.array([t for _, _, t in results])
    # 5 rewarded steps, truncation at the 5th, an autoreset step with reward 0, then the new episode.
    np.testing.assert_array_equal(rewards[:, 0], [1, 1, 1, 1, 1, 0, 1])
    np.testing.assert_array_equal(truncated[:, 0], [0, 0, 0, 0, 1, 0, 0])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_next_step_semantics_on_counter_env(counter_env, mode):
    venv = make_vector_env(
        counter_env, 2, seed=1, mode=mode, env_kwargs={"min_length": 100, "max_length": 100}, max_episode_steps=5
    )
    obs, _ = venv.reset()
    np.testing.assert_array_equal(obs, [[0, 0], [0, 0]])
    for k in range(1, 6):
        obs, reward, terminated, truncated, _ = venv.step(np.array([1, 0]))
        np.testing.assert_array_equal(obs, [[k, 0], [k, 0]])
        np.testing.assert_array_equal(reward, [2 * k, k])
    np.testing.assert_array_equal(truncated, [True, True])  # the final observation [5, 0] came with it
    np.testing.assert_array_equal(terminated, [False, False])
    obs, reward, terminated, truncated, _ = venv.step(np.array([1, 1]))  # actions ignored: autoreset step
    np.testing.assert_array_equal(obs, [[0, 1], [0, 1]])
    np.testing.assert_array_equal(reward, [0, 0])
    assert not terminated.any() and not truncated.any()
    obs, reward, *_ = venv.step(np.array([1, 1]))
    np.testing.assert_array_equal(obs, [[1, 1], [1, 1]])
    np.testing.assert_array_equal(reward, [2, 2])
    venv.close()


def test_custom_factory_in_env_registry(counter_env):
    env = make_env(counter_env, min_length=3, max_length=3)
    assert isinstance(env, CounterEnv)
    env.reset(seed=0)
    assert env.length == 3
    venv = make_vector_env(counter_env, 2, env_kwargs={"min_length": 2, "max_length": 2})
    assert isinstance(venv.unwrapped, gym.vector.SyncVectorEnv)  # auto: factories use sync
    _, results = _rollout(venv, 3)
    np.testing.assert_array_equal([t for _, t, _ in results], [[0, 0], [1, 1], [0, 0]])
    with pytest.raises(ConfigError, match="registry factory"):
        make_vector_env(counter_env, 2, mode="vector_entry_point")


def test_unknown_env_id_error_names_closest_ids():
    with pytest.raises(ZooError) as error:
        make_env("CartPol-v1")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("unknown env 'CartPol-v1'")
    assert "CartPole-v1" in message
    with pytest.raises(ZooError, match="CartPole-v1"):
        make_vector_env("CartPole-v9", 2)


# --- seeding ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["vector_entry_point", "sync", "async"])
def test_same_seed_same_observations(mode):
    runs = []
    for seed in (7, 7, 8):
        venv = make_vector_env("CartPole-v1", 4, seed=seed, mode=mode)
        observations, _ = _rollout(venv, 30)
        actions = venv.action_space.sample()  # seeded by make_vector_env
        runs.append((np.stack(observations), actions))
        venv.close()
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert not np.array_equal(runs[0][0], runs[2][0])


def test_sync_sub_env_i_is_seeded_with_seed_plus_i():
    venv = make_vector_env("CartPole-v1", 3, seed=10, mode="sync")
    obs, _ = venv.reset()
    for i in range(3):
        expected, _ = gym.make("CartPole-v1").reset(seed=10 + i)
        np.testing.assert_array_equal(obs[i], expected)
    # The stored seed is used once; an explicit seed wins.
    explicit, _ = make_vector_env("CartPole-v1", 3, seed=99, mode="sync").reset(seed=10)
    np.testing.assert_array_equal(explicit, obs)


# --- EpisodeStats ----------------------------------------------------------------------------------------------


def _reference_episodes(observations, results):
    """Plain loop over raw steps: a step is real when the env's own step counter (obs[:, 0]) is >= 1."""
    num_envs = observations[0].shape[0]
    episodes, returns, lengths = [], [0.0] * num_envs, [0] * num_envs
    for obs, (reward, terminated, truncated) in zip(observations[1:], results):
        for i in range(num_envs):
            if obs[i, 0] >= 1:
                returns[i] += reward[i]
                lengths[i] += 1
            if terminated[i] or truncated[i]:
                assert lengths[i] == obs[i, 0]
                episodes.append((returns[i], lengths[i]))
                returns[i], lengths[i] = 0.0, 0
    return episodes


def test_episode_stats_match_a_hand_loop(counter_env):
    kwargs = {"min_length": 1, "max_length": 6}
    stats = EpisodeStats(make_vector_env(counter_env, 3, seed=4, env_kwargs=kwargs), window=5)
    assert stats.mean_return() is None
    observations, results = _rollout(stats, 40)
    raw_observations, raw_results = _rollout(make_vector_env(counter_env, 3, seed=4, env_kwargs=kwargs), 40)
    np.testing.assert_array_equal(np.stack(observations), np.stack(raw_observations))
    expected = _reference_episodes(raw_observations, raw_results)
    # Episodes finishing at the same step are listed in env order by both.
    assert stats.pop_finished() == expected
    assert stats.episodes == len(expected) > 10
    assert stats.pop_finished() == []
    assert stats.mean_return() == pytest.approx(np.mean([r for r, _ in expected[-5:]]))
    assert stats.mean_length() == pytest.approx(np.mean([n for _, n in expected[-5:]]))


def test_episode_stats_on_cartpole_count_raw_rewards_under_reward_normalisation():
    venv, stats = wrap_vector_env(make_vector_env("CartPole-v1", 4, seed=0), normalize_obs=True, normalize_reward=True)
    _, results = _rollout(venv, 200)
    episodes = stats.pop_finished()
    assert len(episodes) > 10
    for episode_return, length in episodes:
        assert episode_return == length  # CartPole pays 1 per step: raw, not scaled
    assert len(episodes) == sum(int((terminated | truncated).sum()) for _, terminated, truncated in results)


# --- NormalizeObservation --------------------------------------------------------------------------------------


def test_observation_statistics_equal_numpy_mean_and_var_of_all_observations():
    env = NormalizeObservation(make_vector_env("Pendulum-v1", 3, seed=2, max_episode_steps=20), clip=2.0)
    raw = make_vector_env("Pendulum-v1", 3, seed=2, max_episode_steps=20)
    rng_a, rng_b = np.random.default_rng(0), np.random.default_rng(0)
    normalized = [env.reset()[0]]
    seen = [raw.reset()[0]]
    for _ in range(50):  # crosses two time limits, so autoreset observations are included
        normalized.append(env.step(rng_a.uniform(-2, 2, size=(3, 1)))[0])
        seen.append(raw.step(rng_b.uniform(-2, 2, size=(3, 1)))[0])
    all_obs = np.concatenate(seen).astype(np.float64)
    assert env.obs_rms.data_count == len(all_obs) == 153
    np.testing.assert_allclose(env.obs_rms.mean, all_obs.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(env.obs_rms.var, all_obs.var(axis=0), rtol=1e-5, atol=1e-6)
    expected = np.clip((seen[-1] - env.obs_rms.mean) / np.sqrt(env.obs_rms.var + 1e-8), -2.0, 2.0)
    assert normalized[-1].dtype == np.float32
    np.testing.assert_allclose(normalized[-1], expected, rtol=1e-5, atol=1e-6)
    assert env.single_observation_space.high[0] == 2.0


def test_observation_state_dict_round_trip_and_frozen_evaluation_copy():
    train = NormalizeObservation(make_vector_env("Pendulum-v1", 2, seed=0))
    _rollout_continuous(train, 10)
    evaluation = NormalizeObservation(make_vector_env("Pendulum-v1", 2, seed=5), training=False)
    evaluation.load_state_dict(train.state_dict())
    np.testing.assert_array_equal(evaluation.obs_rms.mean, train.obs_rms.mean)
    np.testing.assert_array_equal(evaluation.obs_rms.var, train.obs_rms.var)
    before = evaluation.obs_rms.state_dict()
    _rollout_continuous(evaluation, 5)
    assert evaluation.obs_rms.data_count == before["data_count"] == 22  # training=False: not updated
    np.testing.assert_array_equal(evaluation.obs_rms.mean, before["data_mean"] * 22 / (22 + 1e-4))


def test_frozen_normalizer_of_a_saved_state_matches_the_wrapper():
    train = NormalizeObservation(make_vector_env("Pendulum-v1", 2, seed=0), clip=1.5)
    _rollout_continuous(train, 10)
    frozen = NormalizeObservation.frozen(pickle.loads(pickle.dumps(train.state_dict())), clip=1.5)
    raw = np.random.default_rng(0).normal(0.0, 3.0, size=(5, 3))
    out = frozen(raw)
    assert out.dtype == np.float32 and np.abs(out).max() <= 1.5
    np.testing.assert_array_equal(out, train.normalize(raw))
    count = train.obs_rms.data_count
    train.normalize(raw)
    assert train.obs_rms.data_count == count  # normalize() never updates the statistics


def _rollout_continuous(venv, steps: int) -> None:
    venv.reset()
    for _ in range(steps):
        venv.step(np.zeros((venv.num_envs, 1), dtype=np.float32))


# --- NormalizeReward -------------------------------------------------------------------------------------------


def test_reward_normaliser_skips_autoreset_steps(counter_env):
    gamma, kwargs = 0.9, {"min_length": 1, "max_length": 4}
    venv = NormalizeReward(make_vector_env(counter_env, 3, seed=3, env_kwargs=kwargs), gamma=gamma, clip=100.0)
    observations, scaled_results = _rollout(venv, 30)
    raw_observations, raw_results = _rollout(make_vector_env(counter_env, 3, seed=3, env_kwargs=kwargs), 30)
    np.testing.assert_array_equal(np.stack(observations), np.stack(raw_observations))
    # Reference: discounted returns of real steps only (the env's step counter is >= 1), baselines order.
    accumulators, seen_returns, expected_scaled = np.zeros(3), [], []
    for obs, (reward, terminated, truncated) in zip(raw_observations[1:], raw_results):
        real = obs[:, 0] >= 1
        accumulators[real] = accumulators[real] * gamma + reward[real]
        seen_returns.extend(accumulators[real])
        prior, n = 1e-4, len(seen_returns)  # RunningMeanStd's pseudo-count: mean 0, var 1
        data = np.array(seen_returns)
        var = (data.var() * n + prior + data.mean() ** 2 * n * prior / (n + prior)) / (n + prior)
        expected_scaled.append(np.where(real, np.clip(reward / np.sqrt(var + 1e-8), -100.0, 100.0), 0.0))
        accumulators[terminated | truncated] = 0.0
    autoreset_count = int(sum((~(obs[:, 0] >= 1)).sum() for obs in raw_observations[1:]))
    assert autoreset_count > 5
    assert venv.normalizer.return_rms.data_count == len(seen_returns) == 30 * 3 - autoreset_count
    np.testing.assert_allclose(np.stack([r for r, _, _ in scaled_results]), np.stack(expected_scaled), rtol=1e-6)


def test_reward_state_dict_round_trip():
    venv = NormalizeReward(make_vector_env("CartPole-v1", 2, seed=0), gamma=0.95)
    _rollout(venv, 40)
    copy = NormalizeReward(make_vector_env("CartPole-v1", 2, seed=1))
    copy.load_state_dict(venv.state_dict())
    state, restored = venv.state_dict()["return_normalizer"], copy.state_dict()["return_normalizer"]
    np.testing.assert_array_equal(restored["returns"], state["returns"])
    assert restored["gamma"] == 0.95
    assert restored["return_rms"]["data_count"] == state["return_rms"]["data_count"] > 0
    np.testing.assert_array_equal(copy.normalizer.return_rms.var, venv.normalizer.return_rms.var)


def test_wrappers_reject_same_step_autoreset():
    same_step = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1")], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    with pytest.raises(ConfigError, match="NEXT_STEP"):
        EpisodeStats(same_step)


# --- non-Box observations are flattened ------------------------------------------------------------------------

DICT_ENV = "zoo-test-dict-observations"
DICT_VECTOR_ID = "zoo-test/DictCounter-v0"  # a gymnasium id with a vector_entry_point
DICT_LENGTH = 4


def _dict_space() -> gym.spaces.Dict:
    return gym.spaces.Dict({"pos": gym.spaces.Box(-10.0, 10.0, shape=(2,), dtype=np.float32),
                            "flag": gym.spaces.Discrete(3)})


def _expected_flat(step: int) -> np.ndarray:
    """Hand-written layout: gymnasium orders Dict keys alphabetically, so the one-hot 'flag' comes before 'pos'."""
    one_hot = np.eye(3)[step % 3]
    return np.concatenate([one_hot, [step, -step]])


class DictCounterEnv(gym.Env):
    """Dict observation {"pos": [k, -k], "flag": k % 3} at step ``k``; terminates at step ``DICT_LENGTH``."""

    def __init__(self) -> None:
        self.observation_space = _dict_space()
        self.action_space = gym.spaces.Discrete(2)
        self.step_in_episode = 0

    def _obs(self) -> dict:
        k = self.step_in_episode
        return {"pos": np.array([k, -k], dtype=np.float32), "flag": k % 3}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.step_in_episode = 0
        return self._obs(), {}

    def step(self, action):
        self.step_in_episode += 1
        return self._obs(), 1.0, self.step_in_episode >= DICT_LENGTH, False, {}


class DictCounterVectorEnv(gym.vector.VectorEnv):
    """The batched DictCounterEnv (all sub-envs in step), NEXT_STEP autoreset, for the vector_entry_point mode."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1) -> None:
        self.num_envs = num_envs
        self.single_observation_space = _dict_space()
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.steps = np.zeros(num_envs, dtype=np.int64)

    def _obs(self) -> dict:
        return {"pos": np.stack([self.steps, -self.steps], axis=1).astype(np.float32), "flag": self.steps % 3}

    def reset(self, *, seed=None, options=None):
        self.steps[:] = 0
        return self._obs(), {}

    def step(self, actions):
        ended = self.steps >= DICT_LENGTH
        self.steps = np.where(ended, 0, self.steps + 1)
        terminated = self.steps >= DICT_LENGTH
        return self._obs(), np.where(ended, 0.0, 1.0), terminated, np.zeros(self.num_envs, dtype=bool), {}


class FixedSpaceEnv(gym.Env):
    """Any observation space, observations sampled from it: for what is flattened, kept or refused."""

    def __init__(self, observation_space: gym.Space) -> None:
        self.observation_space = observation_space
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


@pytest.fixture
def dict_envs():
    ENV_REGISTRY.register(DICT_ENV, DictCounterEnv, source="tests")
    gym.register(DICT_VECTOR_ID, entry_point=DictCounterEnv, vector_entry_point=DictCounterVectorEnv)
    yield DICT_ENV
    ENV_REGISTRY.unregister(DICT_ENV)
    del gym.registry[DICT_VECTOR_ID]


@pytest.fixture
def fixed_space_env():
    name = "zoo-test-fixed-space"
    ENV_REGISTRY.register(name, FixedSpaceEnv, source="tests")
    yield name
    ENV_REGISTRY.unregister(name)


def test_make_env_flattens_a_dict_observation_with_the_one_hot_in_place(dict_envs):
    for env in (make_env(dict_envs), make_env(DICT_VECTOR_ID)):
        expected_space = gym.spaces.Box(np.array([0, 0, 0, -10, -10]), np.array([1, 1, 1, 10, 10]), dtype=np.float64)
        assert env.observation_space == expected_space
        obs, _ = env.reset(seed=0)
        np.testing.assert_array_equal(obs, _expected_flat(0))
        for k in range(1, DICT_LENGTH + 1):
            obs, *_ = env.step(0)
            np.testing.assert_array_equal(obs, _expected_flat(k))


@pytest.mark.parametrize("mode", ["sync", "async", "vector_entry_point"])
def test_make_vector_env_flattens_a_dict_observation_in_every_mode(dict_envs, mode):
    env_id = DICT_VECTOR_ID if mode == "vector_entry_point" else dict_envs
    venv = make_vector_env(env_id, 2, seed=0, mode=mode)
    assert isinstance(venv.unwrapped, DictCounterVectorEnv) == (mode == "vector_entry_point")
    assert venv.single_observation_space.shape == (5,)
    assert venv.observation_space.shape == (2, 5)
    obs, _ = venv.reset()
    np.testing.assert_array_equal(obs, np.stack([_expected_flat(0)] * 2))
    step = 0
    for _ in range(DICT_LENGTH + 2):  # through a termination and the autoreset step after it
        obs, *_ = venv.step(np.zeros(2, dtype=np.int64))
        step = 0 if step == DICT_LENGTH else step + 1
        np.testing.assert_array_equal(obs, np.stack([_expected_flat(step)] * 2))
    venv.close()


@pytest.mark.parametrize("space", [
    gym.spaces.Box(0.0, 1.0, shape=(3,), dtype=np.float32),
    gym.spaces.Box(0, 255, shape=(3, 8, 8), dtype=np.uint8),  # an image: kept as it is, not flattened
])
def test_box_observations_are_left_untouched(fixed_space_env, space):
    env = make_env(fixed_space_env, observation_space=space)
    assert env.observation_space is space and not isinstance(env, gym.wrappers.FlattenObservation)
    venv = make_vector_env(fixed_space_env, 2, env_kwargs={"observation_space": space})
    assert venv.single_observation_space == space
    assert venv.reset(seed=0)[0].shape == (2, *space.shape) and venv.reset()[0].dtype == space.dtype


@pytest.mark.parametrize("space, named", [
    (gym.spaces.Graph(gym.spaces.Box(0.0, 1.0, shape=(2,)), None), "Graph observations"),
    (gym.spaces.Text(8), "Text observations"),
    (gym.spaces.Dict({"pos": gym.spaces.Box(0.0, 1.0, shape=(2,)),
                      "items": gym.spaces.Sequence(gym.spaces.Discrete(4))}),
     "Dict observations (a Sequence at observation['items'])"),
])
def test_spaces_without_a_flat_box_are_refused_in_one_line(fixed_space_env, space, named):
    for build in (lambda: make_env(fixed_space_env, observation_space=space),
                  lambda: make_vector_env(fixed_space_env, 2, env_kwargs={"observation_space": space})):
        with pytest.raises(ConfigError) as error:
            build()
        message = str(error.value)
        assert "\n" not in message
        assert message.startswith(f"env '{fixed_space_env}' has {named}, which zoo cannot flatten into a Box")
        assert message.endswith("so that it gives Box or Dict-of-Box observations")


# --- async workers ---------------------------------------------------------------------------------------------


class _BrokenStepEnv(CounterEnv):
    def step(self, action):
        raise ValueError("the env broke on purpose")


def test_an_async_workers_env_error_still_reaches_the_parent_as_one_line_naming_the_env(recwarn):
    ENV_REGISTRY.register("zoo-test-broken-step", _BrokenStepEnv, source="tests")
    try:
        venv = make_vector_env("zoo-test-broken-step", 2, mode="async")
        assert venv.unwrapped.worker.__module__ == "zoo.envs.factory"  # zoo's worker (dies with its parent)
        venv.reset(seed=0)
        with pytest.raises(EnvError) as caught:
            venv.step(np.zeros(2, dtype=np.int64))
        assert str(caught.value) == ("env 'zoo-test-broken-step' raised in step(): ValueError: the env broke on "
                                     "purpose (ZOO_DEBUG=1 shows the traceback)")
        assert not recwarn.list  # gymnasium's report with the worker's traceback: only under ZOO_DEBUG
        venv.close()
    finally:
        ENV_REGISTRY.unregister("zoo-test-broken-step")
