"""The envpool backend (``zoo.envs.envpool_backend``) keeps zoo's env semantics: each convention where EnvPool differs
from gymnasium is pinned here against the gymnasium backend on the same env (spaces and dtypes, autoreset steps, a
fall at the time limit, final observations of truncated episodes, seeds, episode statistics, Atari's frame stack and
episodic life), with EnvPool's raw behaviour asserted beside it where zoo adapts it.

References are independent: plain loops over the raw steps, the physical start states of the envs, and EnvPool's
own pool. Skipped where envpool is not installed (CI installs it: .ci/run).
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
import torch

from zoo.envs import EnvSpec, wrap_vector_env
from zoo.pipelines.collector import VectorCollector

envpool = pytest.importorskip("envpool", reason="envpool is not installed: pip install 'zoo-rl[envpool]'")
BACKENDS = ("gymnasium", "envpool")


def _spec(env_id: str, backend: str, **kwargs) -> EnvSpec:
    return EnvSpec(env_id, dict(kwargs.pop("kwargs", {})), kwargs.pop("max_episode_steps", None), backend)


def _cartpole_start(obs: np.ndarray) -> np.ndarray:
    """Which CartPole observations are start states (every component drawn from U(-0.05, 0.05))."""
    return np.all(np.abs(obs) <= 0.05, axis=-1)


def _cartpole_fallen(obs: np.ndarray) -> np.ndarray:
    """Which CartPole observations end an episode (cart beyond 2.4, pole beyond 12 degrees)."""
    return (np.abs(obs[..., 0]) > 2.4) | (np.abs(obs[..., 2]) > 12 * 2 * np.pi / 360)


def _hopper_start(obs: np.ndarray) -> np.ndarray:
    """Which Hopper-v5 observations are start states (qpos[1:] and qvel within 0.005 of the initial pose)."""
    initial = np.zeros(obs.shape[-1])
    initial[0] = 1.25
    return np.all(np.abs(obs - initial) <= 0.005 + 1e-9, axis=-1)


def _steps(venv: gym.vector.VectorEnv, actions: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    return [tuple(np.array(x, copy=True) for x in venv.step(action)[:4]) for action in actions]


# -- spaces and dtypes ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Hopper-v5"])
def test_both_backends_give_the_same_spaces_dtypes_and_autoreset_mode(env_id):
    if env_id.startswith("Hopper"):
        pytest.importorskip("mujoco")
    found = {}
    for backend in BACKENDS:  # gymnasium in sync mode (one Python env per sub-env: float64 rewards)
        venv = _spec(env_id, backend).make_vector(2, seed=0, mode="sync")
        obs, _ = venv.reset(seed=0)
        step = venv.step(venv.action_space.sample())
        found[backend] = (venv.single_observation_space, venv.single_action_space, obs.dtype, step[0].dtype,
                          step[1].dtype, step[2].dtype, step[3].dtype, venv.metadata["autoreset_mode"])
        venv.close()
    assert found["envpool"] == found["gymnasium"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = envpool.make_gymnasium(env_id, num_envs=2, seed=0)
    raw.reset()
    # EnvPool's own conventions, which the backend adapts: an unbatched action_space, actions that are not numpy
    # arrays refused unless of its exact dtype (int32 for Discrete), float32 rewards, a float64 Box for MuJoCo
    assert raw.action_space == raw.single_action_space
    action_spec = raw.spec.action_array_spec["action"]
    wrong = torch.zeros((2, *action_spec.shape[1:]), dtype=torch.int64 if env_id.startswith("Cart") else torch.float32)
    with pytest.raises(RuntimeError, match="Expected dtype"):
        envpool.make_gymnasium(env_id, num_envs=2, seed=0).step(wrong)
    venv = _spec(env_id, "envpool").make_vector(2, seed=0)
    venv.reset()
    assert venv.step(wrong)[0].shape == (2, *found["envpool"][0].shape)  # the backend takes what policies give
    assert raw.step(np.zeros((2, *action_spec.shape[1:]), dtype=action_spec.dtype))[1].dtype == np.float32
    if env_id.startswith("Hopper"):
        assert raw.single_action_space.dtype == np.float64 and found["envpool"][1].dtype == np.float32


# -- autoreset steps ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_step_after_an_end_is_an_autoreset_step_with_the_final_observation_before_it(backend):
    venv = _spec("CartPole-v1", backend).make_vector(8, seed=3)
    venv.reset(seed=3)
    actions = np.random.default_rng(0).integers(0, 2, size=(300, 8))
    steps = _steps(venv, actions)
    ended = np.array([terminated | truncated for _, _, terminated, truncated in steps])
    observations = np.array([obs for obs, *_ in steps])
    rewards = np.array([reward for _, reward, _, _ in steps])
    after_end = np.zeros_like(ended)
    after_end[1:] = ended[:-1]
    assert after_end.sum() > 50
    assert np.all(rewards[after_end] == 0.0) and not ended[after_end].any()  # reward 0, flags off
    assert np.all(_cartpole_start(observations[after_end]))  # the new episode's first observation
    assert np.all(rewards[~after_end] == 1.0)
    terminated = np.array([t for _, _, t, _ in steps])
    assert np.all(_cartpole_fallen(observations[terminated]))  # the final observation, not a reset one


# -- time limits ----------------------------------------------------------------------------------------------------
def _lengths_pushing_left(spec: EnvSpec, envs: int) -> np.ndarray:
    venv = spec.make_vector(envs, seed=5)
    venv.reset(seed=5)
    lengths = np.zeros(envs, dtype=int)
    for step in range(1, 40):
        _, _, terminated, _, _ = venv.step(np.zeros(envs, dtype=np.int64))
        lengths[(lengths == 0) & terminated] = step
    venv.close()
    return lengths


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fall_at_the_time_limit_is_terminated_and_truncated(backend):
    envs = 64
    lengths = _lengths_pushing_left(_spec("CartPole-v1", backend), envs)
    limit = Counter(lengths.tolist()).most_common(1)[0][0]  # the step where most envs fall: set the limit there
    venv = _spec("CartPole-v1", backend, max_episode_steps=limit).make_vector(envs, seed=5)
    venv.reset(seed=5)
    for step in range(1, limit + 1):
        obs, _, terminated, truncated, _ = venv.step(np.zeros(envs, dtype=np.int64))
        assert np.array_equal(terminated, lengths == step)
    assert np.array_equal(truncated, np.ones(envs, dtype=bool) & (lengths >= limit))
    assert (terminated & truncated).sum() == (lengths == limit).sum() > 0  # both, as gymnasium's TimeLimit says
    assert np.all(_cartpole_fallen(obs[terminated]))
    if backend == "envpool":  # what EnvPool itself reports there: truncated only (zoo applies the limit itself)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = envpool.make_gymnasium("CartPole-v1", num_envs=envs, seed=5, max_episode_steps=limit)
        raw.reset()
        for _ in range(limit):
            _, _, raw_terminated, raw_truncated, _ = raw.step(np.zeros(envs, dtype=np.int32))
        assert not (raw_terminated & raw_truncated).any() and raw_truncated[lengths == limit].all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncated_episodes_keep_their_final_observation_and_autoreset_steps_are_never_stored(backend):
    pytest.importorskip("mujoco")
    collector = VectorCollector(_spec("Hopper-v5", backend, max_episode_steps=15), 4, seed=1)
    batch = collector.transitions(None, 60)
    env, truncated, terminated = batch.env, np.asarray(batch.truncated), np.asarray(batch.terminated)
    assert truncated.sum() >= 8  # every env reached the limit at least twice
    assert not np.any(_hopper_start(np.asarray(batch.next_obs)[truncated]))  # the final pose, not a fresh one
    for index in range(4):
        mine = env == index
        obs, ends = np.asarray(batch.obs)[mine], (truncated | terminated)[mine]
        assert _hopper_start(obs[0]) and np.all(_hopper_start(obs[1:][ends[:-1]]))  # after an end: a new episode
        assert not np.any(_hopper_start(obs[1:][~ends[:-1]]))
        # no stored transition is an autoreset step: each one continues the observation the previous one reached
        next_obs = np.asarray(batch.next_obs)[mine]
        assert np.array_equal(obs[1:][~ends[:-1]], next_obs[:-1][~ends[:-1]])
    # one autoreset step (not stored) follows each end, except the ends of the last step (they come next call)
    assert len(env) == 60 * 4 - (int((truncated | terminated).sum()) - int(collector.pending_reset.sum()))
    collector.close()


# -- seeds ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_seed_gives_the_same_episodes_and_reset_with_a_seed_starts_them_again(backend):
    spec = _spec("CartPole-v1", backend)
    actions = np.random.default_rng(1).integers(0, 2, size=(120, 4))

    def played(seed: int, warm_up: int = 0) -> list:
        venv = spec.make_vector(4, seed=seed)
        venv.reset()
        _steps(venv, actions[:warm_up])  # then a seeded reset must start the seed's episodes again
        first = venv.reset(seed=seed)[0]
        return [first, *(x for step in _steps(venv, actions) for x in step)]

    same, again, restarted, other = played(7), played(7), played(7, warm_up=30), played(8)
    assert all(np.array_equal(a, b) for a, b in zip(same, again))
    assert all(np.array_equal(a, b) for a, b in zip(same, restarted))
    assert not np.array_equal(same[0], other[0])


def test_seeds_beyond_int32_are_folded_apart():
    from zoo.envs.envpool_backend import pool_seed

    assert pool_seed(0) == 0 and pool_seed(12345) == 12345
    big = [pool_seed(2**40 + i) for i in range(4)]
    assert len(set(big)) == 4 and all(0 <= s < 2**31 for s in big)
    venv = _spec("CartPole-v1", "envpool").make_vector(2, seed=2**62 + 3)  # EnvPool asserts int32 seeds itself
    assert venv.reset()[0].shape == (2, 4)


# -- episode statistics and normalisation ---------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_episode_statistics_are_the_raw_returns_and_normalisation_skips_autoreset_steps(backend):
    spec, actions = _spec("CartPole-v1", backend), np.random.default_rng(2).integers(0, 2, size=(400, 3))
    plain = spec.make_vector(3, seed=4)
    plain.reset(seed=4)
    raw = _steps(plain, actions)
    wrapped, stats = wrap_vector_env(spec.make_vector(3, seed=4), normalize_obs=True, normalize_reward=True)
    wrapped.reset(seed=4)
    scaled = _steps(wrapped, actions)
    expected, returns, lengths, autoreset = [], np.zeros(3), np.zeros(3, dtype=int), np.zeros(3, dtype=bool)
    for (_, reward, terminated, truncated), (_, scaled_reward, _, _) in zip(raw, scaled):  # a plain loop
        assert np.all(scaled_reward[autoreset] == 0.0)
        returns += np.where(autoreset, 0.0, reward)
        lengths += ~autoreset
        for index in np.flatnonzero((terminated | truncated) & ~autoreset):
            expected.append((returns[index], lengths[index]))
        autoreset = terminated | truncated
        returns[autoreset], lengths[autoreset] = 0.0, 0
    assert len(expected) > 20 and list(stats.recent) == expected[-100:]


# -- Atari ----------------------------------------------------------------------------------------------------------
def _atari(backend: str, game: str, **kwargs) -> EnvSpec:
    if backend == "gymnasium":
        pytest.importorskip("ale_py")
        pytest.importorskip("cv2")
        return EnvSpec("atari", {"game": game, **kwargs.pop("gymnasium", {})})
    return EnvSpec(f"{game}-v5", kwargs.pop("envpool", {}), backend="envpool")


@pytest.mark.parametrize("backend", BACKENDS)
def test_atari_observations_are_four_84x84_grayscale_frames_newest_last(backend):
    venv = _atari(backend, "Pong").make_vector(2, seed=0)
    obs, _ = venv.reset(seed=0)
    assert venv.single_observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert venv.single_action_space == gym.spaces.Discrete(6)
    for _ in range(20):
        previous = obs
        obs, _, terminated, truncated, _ = venv.step(venv.action_space.sample())
        assert np.array_equal(obs[:, :3], previous[:, 1:])  # the stack shifts by one: the newest frame is last
    assert obs[:, -1].std() > 0  # a real frame
    venv.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lost_life_ends_the_episode_and_only_envpool_continues_the_game(backend):
    spec = _atari(backend, "Breakout", gymnasium={"terminal_on_life_loss": True, "fire_reset": True},
                  envpool={"episodic_life": True})
    venv = spec.make_vector(1, seed=0)
    _, info = venv.reset(seed=0)
    lives = int(info["lives"][0])
    rng = np.random.default_rng(0)
    for _ in range(3000):
        _, _, terminated, truncated, info = venv.step(rng.integers(0, 4, size=1))
        if terminated[0] or truncated[0]:
            break
    assert terminated[0] and not truncated[0] and int(info["lives"][0]) == lives - 1
    _, reward, terminated, truncated, info = venv.step(np.ones(1, dtype=np.int64))  # the autoreset step
    assert reward[0] == 0 and not (terminated[0] or truncated[0])
    # gymnasium's wrapper starts a new game; EnvPool (as OpenAI baselines' EpisodicLifeEnv) plays on
    assert int(info["lives"][0]) == (lives - 1 if backend == "envpool" else lives)
    venv.close()


def test_a_training_collector_of_one_envpool_env_says_once_that_several_envs_pay(caplog, monkeypatch):
    import zoo.pipelines.collector as collector_module

    monkeypatch.setattr(collector_module, "_ONE_ENV_NOTICES", set())
    def notices() -> list[str]:
        return [r.getMessage() for r in caplog.records if "EnvPool pays from several envs" in r.getMessage()]

    with caplog.at_level(logging.INFO, logger="zoo"):
        for num_envs, backend in ((2, "envpool"), (1, "gymnasium")):
            VectorCollector(_spec("CartPole-v1", backend), num_envs, seed=0).close()
        assert notices() == []
        for _ in range(2):
            VectorCollector(_spec("CartPole-v1", "envpool"), 1, seed=0).close()
    assert len(notices()) == 1 and "env.backend=envpool with one env (CartPole-v1)" in notices()[0]
    assert "set pipeline.num_envs above 1, or env.backend=gymnasium" in notices()[0]


# -- zoo's bookkeeping of EnvPool's resets, around every kind of episode end (issue 54) --------------------------------
def _played(venv: gym.vector.VectorEnv, actions: np.ndarray) -> tuple[np.ndarray, ...]:
    steps = _steps(venv, actions)
    return tuple(np.array([step[k] for step in steps]) for k in range(4))  # obs, rewards, terminated, truncated


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("limit", [9, 10, 12])  # CartPole pushed one way falls near step 9-10: falls at the limit too
def test_every_end_is_followed_by_exactly_one_autoreset_step_terminations_truncations_and_both(backend, limit):
    venv = _spec("CartPole-v1", backend, max_episode_steps=limit).make_vector(16, seed=11)
    venv.reset(seed=11)
    actions = np.zeros((240, 16), dtype=np.int64)
    actions[:, 8:] = np.random.default_rng(2).integers(0, 2, size=(240, 8))  # half pushed left, half at random
    observations, rewards, terminated, truncated = _played(venv, actions)
    ended = terminated | truncated
    autoreset = np.zeros_like(ended)
    autoreset[1:] = ended[:-1]
    assert terminated.any() and (truncated & ~terminated).any()  # both kinds of end happened
    assert np.all(rewards[autoreset] == 0.0) and not ended[autoreset].any()
    assert np.all(_cartpole_start(observations[autoreset]))
    assert np.all(rewards[~autoreset] == 1.0)  # never a second reset (EnvPool's own and zoo's for one end)
    for env in range(16):  # each episode: at most `limit` steps, truncated exactly when it reaches them alive
        length = 0
        for t in range(len(rewards)):
            if autoreset[t, env]:
                length = 0
                continue
            length += 1
            assert length <= limit
            assert truncated[t, env] == (length == limit), (env, t, length)


def test_a_masked_reset_of_a_sub_env_zoo_truncated_clears_its_pending_reset():
    venv = _spec("CartPole-v1", "envpool", max_episode_steps=5).make_vector(4, seed=1)
    venv.reset(seed=1)
    for _ in range(5):  # the fifth step truncates every sub-env (by zoo's limit): their resets are pending
        _, _, terminated, truncated, _ = venv.step(np.array([0, 1, 0, 1]))
    assert (truncated & ~terminated).all()
    mask = np.array([True, True, False, False])
    obs, _ = venv.reset(options={"reset_mask": mask})
    assert np.all(_cartpole_start(obs[mask]))
    _, reward, _, _, _ = venv.step(np.array([0, 1, 0, 1]))
    assert reward.tolist() == [1.0, 1.0, 0.0, 0.0]  # the reset ones step on; the others take their autoreset step


def test_large_seeds_never_overflow_the_sub_envs_int32_seeds():
    from zoo.envs.envpool_backend import pool_seed

    for seed in (2**30 - 1, 2**30, 2**31 - 2, 2**31 - 1, 2**31, 2**32 + 5, 2**62, 2**63 - 1):
        assert 0 <= pool_seed(seed) and pool_seed(seed) + 2**10 < 2**31, seed  # room for 1,024 sub-envs
    venv = _spec("CartPole-v1", "envpool").make_vector(8, seed=2**31 - 1)
    obs = venv.reset()[0]
    assert len({tuple(row) for row in obs.tolist()}) == 8  # eight sub-envs, eight seeds


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_seed_seeds_the_action_spaces_random_warm_up_actions_too(backend):
    def samples(seed: int) -> list:
        venv = _spec("Pendulum-v1", backend).make_vector(2, seed=seed)
        return [venv.single_action_space.sample().tolist() for _ in range(3)] + [venv.action_space.sample().tolist()]

    assert samples(4) == samples(4) and samples(4) != samples(5)


class _RecordedPool:
    """EnvPool's pool with its resets recorded (which sub-envs zoo asked it to reset at each step)."""

    def __init__(self, pool):
        self.pool, self.resets = pool, []

    def reset(self, env_id=None):
        if env_id is not None:
            self.resets.append(sorted(np.asarray(env_id).tolist()))
        return self.pool.reset(env_id=env_id) if env_id is not None else self.pool.reset()

    def __getattr__(self, name):
        return getattr(self.pool, name)


def test_zoo_resets_only_what_it_truncated_itself_never_an_env_envpool_ended():
    """A sub-env that falls exactly at zoo's time limit is ended by EnvPool too, which resets it at its next step
    itself: zoo must not reset it as well (an extra reset of EnvPool's own, and a draw of its generator)."""
    from zoo.envs.envpool_backend import EnvPoolVectorEnv

    lengths = _lengths_pushing_left(_spec("CartPole-v1", "envpool"), 32)
    limit = Counter(lengths.tolist()).most_common(1)[0][0]
    venv = EnvPoolVectorEnv("CartPole-v1", 32, seed=5, max_episode_steps=limit)
    venv.reset(seed=5)
    venv._pool = recorded = _RecordedPool(venv._pool)
    expected = []
    for _ in range(3 * limit):
        _, _, terminated, truncated, _ = venv.step(np.zeros(32, dtype=np.int64))
        mine = np.flatnonzero(truncated & ~terminated).tolist()  # what zoo's own limit ended, EnvPool did not
        if mine:
            expected.append(mine)
    both = sum(int(n) for n in (lengths == limit))
    assert both > 0 and expected  # falls at the limit and truncations by it both happened
    assert recorded.resets == expected
