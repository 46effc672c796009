"""Env state in checkpoints (``zoo.envs.state`` through ``VectorCollector.state_dict``): a MuJoCo env continues
bit-exactly after a snapshot and a restore, a custom env that implements ``get_env_state``/``set_env_state`` does
too, and an env whose state zoo cannot capture is said so in one line at resume, restarts its episodes and cuts the
replay's sequences instead of coming back silently at a fresh pose.

The references are independent: the same collector stepped on without a snapshot (the unbroken env).
"""

from __future__ import annotations

import functools
import io
import logging
import pickle
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils import EzPickle
from helpers import TIMINGS, metrics_rows

from zoo.data.replay import ReplayBuffer
from zoo.envs.state import EnvNotCaptured, capture_kind, restore, snapshot
from zoo.pipelines.collector import VectorCollector
from zoo.registry import ENV_REGISTRY
from zoo.run import train

pytest.importorskip("mujoco")


def _checkpointed(state: dict) -> dict:
    """``state`` after the trip a checkpoint makes (torch.save, torch.load)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def _play(collector: VectorCollector, steps: int, seed: int) -> list[tuple[np.ndarray, ...]]:
    """``steps`` steps of seeded random actions: what each step returned, and each sub-env's qpos and qvel."""
    rng = np.random.default_rng(seed)
    shape = (collector.num_envs, *collector.action_space.shape)
    played = []
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = collector.venv.step(rng.uniform(-1, 1, shape).astype(np.float32))
        physics = [(env.unwrapped.data.qpos.copy(), env.unwrapped.data.qvel.copy())
                   for env in collector.venv.unwrapped.envs]
        played.append((obs.copy(), reward.copy(), terminated.copy(), truncated.copy(),
                       np.array([p for p, _ in physics]), np.array([v for _, v in physics])))
    return played


def _equal(a: list[tuple[np.ndarray, ...]], b: list[tuple[np.ndarray, ...]]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for p, q in zip(a, b) for x, y in zip(p, q))


@pytest.mark.parametrize("env_id", ["Hopper-v5", "Ant-v5"])  # Ant-v5 reads xpos (a derived quantity) before stepping
def test_a_mujoco_env_restored_mid_episode_continues_bit_exactly(env_id):
    # 30-step episodes: the 50 steps after the snapshot cross an autoreset, whose start pose draws from np_random.
    unbroken = VectorCollector(env_id, 2, seed=7, max_episode_steps=30, normalize_obs=True)
    unbroken.start()
    _play(unbroken, 20, seed=1)
    state = _checkpointed(unbroken.state_dict())
    assert state["uncaptured"] is None
    restored = VectorCollector(env_id, 2, seed=7, max_episode_steps=30, normalize_obs=True)
    restored.load_state_dict(state)
    pairs = list(zip(restored.venv.unwrapped.envs, unbroken.venv.unwrapped.envs))
    for env, reference in pairs:
        elapsed = env.get_wrapper_attr("_elapsed_steps")
        assert elapsed == reference.get_wrapper_attr("_elapsed_steps") > 0  # TimeLimit's count came back too
        assert env.unwrapped.data.time == reference.unwrapped.data.time > 0
        assert env.unwrapped.np_random_seed == reference.unwrapped.np_random_seed
    assert np.array_equal(restored.obs, unbroken.obs)
    assert _equal(_play(restored, 50, seed=2), _play(unbroken, 50, seed=2))


def test_two_restores_of_one_snapshot_continue_alike():
    collector = VectorCollector("Hopper-v5", 1, seed=3)
    collector.start()
    _play(collector, 10, seed=1)
    state = collector.state_dict()
    first, second = (VectorCollector("Hopper-v5", 1, seed=3) for _ in range(2))
    first.load_state_dict(pickle.loads(pickle.dumps(state)))
    second.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert _equal(_play(first, 40, seed=5), _play(second, 40, seed=5))


# -- custom envs: pickled constructor arguments lose the state, unless the env implements the protocol ------------
class LossyWalk(gym.Env, EzPickle):
    """A random walk that pickles its constructor arguments only, as gymnasium's MuJoCo, Box2D and Atari envs do."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), dtype=np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)

    def __init__(self, length: int = 25) -> None:
        EzPickle.__init__(self, length)
        self.length, self.t, self.x = length, 0, 0.0

    def _obs(self) -> np.ndarray:
        return np.array([self.x, self.t / self.length], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.x = 0, float(self.np_random.normal())
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.x += float(action[0]) + 0.1 * float(self.np_random.normal())
        return self._obs(), -abs(self.x), abs(self.x) > 3.0, self.t >= self.length, {}


class CapturedWalk(LossyWalk):
    """The same walk, with the env-state protocol: its position, clock and random generator."""

    def get_env_state(self):
        return {"t": self.t, "x": self.x, "rng": self.np_random}

    def set_env_state(self, state):
        self.t, self.x, self.np_random = state["t"], state["x"], state["rng"]


@pytest.fixture
def walks():
    ENV_REGISTRY.register("zoo_test_lossy_walk", LossyWalk, source="tests")
    ENV_REGISTRY.register("zoo_test_captured_walk", CapturedWalk, source="tests")
    yield
    ENV_REGISTRY.unregister("zoo_test_lossy_walk")
    ENV_REGISTRY.unregister("zoo_test_captured_walk")


def _walk_steps(collector: VectorCollector, steps: int) -> list[tuple[np.ndarray, ...]]:
    actions = np.linspace(-0.5, 0.5, collector.num_envs, dtype=np.float32)[:, None]
    return [tuple(np.copy(x) for x in collector.venv.step(actions)[:4]) for _ in range(steps)]


class PlainWalk(gym.Env):
    """A pure-Python env with Python's own pickling: every attribute, its generator included, is saved."""

    observation_space, action_space = LossyWalk.observation_space, LossyWalk.action_space

    def __init__(self) -> None:
        self.x = 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = float(self.np_random.normal())
        return np.array([self.x, 0.0], dtype=np.float32), {}

    def step(self, action):
        self.x += float(action[0]) + 0.1 * float(self.np_random.normal())
        return np.array([self.x, 0.0], dtype=np.float32), -abs(self.x), abs(self.x) > 3.0, False, {}


class UserWrapper(gym.Wrapper):
    """A wrapper of the user's with a counter of its own."""

    def step(self, action):
        self.count = getattr(self, "count", 0) + 1
        return self.env.step(action)


def _given(env: gym.Env) -> gym.Env:
    return env


def _vector(*envs: gym.Env) -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv([functools.partial(_given, env) for env in envs],
                                    autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)


def test_which_envs_zoo_captures_and_how():
    assert capture_kind(gym.make("Hopper-v5").unwrapped) == "mujoco"
    assert capture_kind(CapturedWalk()) == "protocol"
    assert capture_kind(LossyWalk()) == capture_kind(PlainWalk()) == "pickle"
    for captured in (gym.make("CartPole-v1"), gym.make("Pendulum-v1"), gym.make("Hopper-v5"), CapturedWalk(),
                     PlainWalk(), UserWrapper(gym.make("Acrobot-v1")), gym.wrappers.TimeLimit(PlainWalk(), 5)):
        venv = _vector(captured)
        venv.reset(seed=0)
        restored, extra = restore(snapshot(venv, "extra"))
        assert extra == ("extra",) and type(restored.envs[0].unwrapped) is type(captured.unwrapped)
    for lossy in (LossyWalk(), UserWrapper(LossyWalk()), gym.wrappers.TimeLimit(LossyWalk(), 5)):
        with pytest.raises(EnvNotCaptured, match=r"test_env_state\.LossyWalk, pickled by .*EzPickle"):
            snapshot(_vector(lossy))


class TaggedArray(np.ndarray):
    """An array with an attribute, which numpy's pickling of the array drops."""


def test_an_object_with_its_own_unknown_pickling_anywhere_in_an_env_is_not_captured():
    env = PlainWalk()
    env.helper = LossyWalk()  # not a layer: zoo adds no state for it, and its pickle loses some
    with pytest.raises(EnvNotCaptured, match="LossyWalk"):
        snapshot(_vector(env))
    env = PlainWalk()
    env.goal = np.zeros(2).view(TaggedArray)
    env.goal.tag = "lost in a pickle"
    with pytest.raises(EnvNotCaptured, match="TaggedArray, pickled by numpy.ndarray"):
        snapshot(_vector(env))


def test_a_custom_env_with_the_protocol_continues_exactly(walks, caplog):
    unbroken = VectorCollector("zoo_test_captured_walk", 2, seed=4)
    unbroken.start()
    _walk_steps(unbroken, 7)
    restored = VectorCollector("zoo_test_captured_walk", 2, seed=4)
    with caplog.at_level(logging.WARNING, logger="zoo"):
        restored.load_state_dict(_checkpointed(unbroken.state_dict()))
    assert not caplog.records
    assert _equal(_walk_steps(restored, 40), _walk_steps(unbroken, 40))


def test_an_env_zoo_cannot_capture_is_said_once_and_restarts_its_episodes(walks, caplog):
    collector = VectorCollector("zoo_test_lossy_walk", 2, seed=4)
    collector.start()
    _walk_steps(collector, 7)
    with caplog.at_level(logging.WARNING, logger="zoo"):
        state = _checkpointed(collector.state_dict())
        collector.state_dict()  # said once, when it first saves
    saving = [r.getMessage() for r in caplog.records]
    assert len(saving) == 1 and "zoo_test_lossy_walk" in saving[0] and "LossyWalk" in saving[0], saving
    assert state["env"] is None and "LossyWalk" in state["uncaptured"]
    caplog.clear()
    restored = VectorCollector("zoo_test_lossy_walk", 2, seed=4)
    with caplog.at_level(logging.WARNING, logger="zoo"):
        restored.load_state_dict(state)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "'zoo_test_lossy_walk'" in lines[0] and "start fresh episodes" in lines[0] and "LossyWalk" in lines[0]
    resets = restored.resets
    restored.transitions(None, 1)
    assert restored.resets == resets + 1  # fresh episodes, reseeded (what cuts the replay's sequences)


def test_a_snapshot_of_zoo_before_env_states_is_not_taken_for_an_exact_one(caplog):
    collector = VectorCollector("Hopper-v5", 1, seed=0)
    collector.start()
    _play(collector, 5, seed=0)
    state = collector.state_dict()
    state["env"] = pickle.dumps((collector.venv, collector.obs, collector.pending_reset))  # the old format
    restored = VectorCollector("Hopper-v5", 1, seed=0)
    with caplog.at_level(logging.WARNING, logger="zoo"):
        restored.load_state_dict(state)
    assert restored.obs is None
    assert [r.getMessage() for r in caplog.records if "start fresh episodes" in r.getMessage()
            and "predates env states" in r.getMessage() and "HopperEnv" in r.getMessage()]


def test_a_saved_mujoco_state_of_another_model_is_refused_not_copied(caplog, monkeypatch):
    collector = VectorCollector("Hopper-v5", 1, seed=0)
    collector.start()
    state = collector.state_dict()
    monkeypatch.setattr("zoo.envs.state._MUJOCO_SIZES", ("nq", "nv", "nbody_that_differs"))
    restored = VectorCollector("Walker2d-v5", 1, seed=0)  # another model: mj_copyData must not run
    restored.env_id = "Hopper-v5"
    with caplog.at_level(logging.WARNING, logger="zoo"):
        restored.load_state_dict(state)
    assert restored.obs is None
    assert any("does not restore" in r.getMessage() and "start fresh episodes" in r.getMessage()
               for r in caplog.records)


# -- end to end: a resume of an off-policy run ----------------------------------------------------------------------
def _run(walk: str, tmp_path, budget: int) -> dict:
    return {"exp_name": walk, "seed": 2, "runs_dir": str(tmp_path), "env": {"id": walk, "max_episode_steps": 25},
            "policy": {"type": "td3", "hidden_sizes": [8], "batch_size": 16},
            "pipeline": {"num_envs": 2, "buffer_size": 2000, "learning_starts": 40, "steps_per_iteration": 30,
                         "max_env_steps": budget, "eval_every": 0, "checkpoint_every": 1}}


def test_resuming_an_env_zoo_cannot_capture_says_so_once_and_cuts_the_replay_s_sequences(walks, tmp_path, capsys,
                                                                                         monkeypatch):
    first = train(_run("zoo_test_lossy_walk", tmp_path, 120))
    capsys.readouterr()
    cuts = []
    real = ReplayBuffer.end_sequences
    monkeypatch.setattr(ReplayBuffer, "end_sequences", lambda self: (cuts.append(len(self)), real(self))[1])
    train(None, ["pipeline.max_env_steps=240"], resume=first["run_dir"])
    said = [line for line in capsys.readouterr().err.splitlines() if "LossyWalk" in line]
    assert len(said) == 1, said  # one line, at resume (not again when the resumed run saves)
    assert "'zoo_test_lossy_walk'" in said[0] and "start fresh episodes" in said[0]
    assert len(cuts) == 1 and 0 < cuts[0] <= 120  # once, before the resumed run stored anything: cut there


def test_resuming_a_custom_env_with_the_protocol_equals_the_unbroken_run(walks, tmp_path, caplog):
    unbroken = train(_run("zoo_test_captured_walk", tmp_path / "a", 240))
    first = train(_run("zoo_test_captured_walk", tmp_path / "b", 120))
    with caplog.at_level(logging.WARNING, logger="zoo"):
        resumed = train(None, ["pipeline.max_env_steps=240"], resume=first["run_dir"])
    assert not [r for r in caplog.records if "not exact" in r.getMessage()]
    assert metrics_rows(Path(resumed["run_dir"]), TIMINGS) == metrics_rows(Path(unbroken["run_dir"]), TIMINGS)


# -- flattened observations (toy text): gymnasium's FlattenObservation keeps a lambda, zoo's pickles -------------
@pytest.mark.parametrize("env_id", ["FrozenLake-v1", "Blackjack-v1"])  # Discrete and Tuple observations
def test_a_toy_text_env_with_flattened_observations_continues_exactly(env_id):
    unbroken = VectorCollector(env_id, 2, seed=1)
    unbroken.start()
    unbroken.transitions(None, 3)
    state = _checkpointed(unbroken.state_dict())
    assert state["env"] is not None
    restored = VectorCollector(env_id, 2, seed=1)
    restored.load_state_dict(state)
    a, b = restored.transitions(None, 30), unbroken.transitions(None, 30)
    assert all(np.array_equal(getattr(a, field), getattr(b, field)) for field in ("obs", "action", "reward",
                                                                                   "next_obs", "terminated"))


def test_a_vector_env_with_flattened_observations_pickles_and_flattens_alike():
    from zoo.envs.wrappers import flatten_vector_observation

    venv = flatten_vector_observation(gym.vector.SyncVectorEnv([functools.partial(gym.make, "FrozenLake-v1")] * 2))
    copy = pickle.loads(pickle.dumps(venv))
    assert np.array_equal(copy.reset(seed=3)[0], venv.reset(seed=3)[0])
    assert copy.single_observation_space == venv.single_observation_space == gym.spaces.Box(0, 1, (16,), np.int64)


# -- the rules that decide what is restored, and what is trusted (issue 54: each fails under a one-line change) -----
RESTORED: list[str] = []


class OrderedWalk(CapturedWalk):
    """The protocol, recording when its state is set."""

    def set_env_state(self, state):
        RESTORED.append("env")
        super().set_env_state(state)


class ScaledWrapper(gym.Wrapper):
    """A wrapper with the protocol whose state is read off the env it wraps: it must be set after that env's."""

    def get_env_state(self):
        return {"scale": 2.0}

    def set_env_state(self, state):
        RESTORED.append("wrapper")
        self.scale = state["scale"] * (1.0 + abs(self.env.unwrapped.x))  # needs the inner state restored first


class VectorScale(gym.vector.VectorWrapper):
    """A vector wrapper with the protocol: outermost of all."""

    def get_env_state(self):
        return {}

    def set_env_state(self, state):
        RESTORED.append("vector wrapper")


def test_states_are_restored_innermost_layer_first():
    venv = VectorScale(_vector(ScaledWrapper(OrderedWalk()), ScaledWrapper(OrderedWalk())))
    venv.reset(seed=3)
    venv.step(np.zeros((2, 1), np.float32))
    RESTORED.clear()
    restored, _ = restore(snapshot(venv))
    assert RESTORED == ["env", "wrapper", "env", "wrapper", "vector wrapper"]
    assert restored.env.envs[0].scale == pytest.approx(2.0 * (1.0 + abs(venv.env.envs[0].unwrapped.x)))


@pytest.mark.parametrize("module, trusted", [
    ("numpy.random._generator", True), ("torch.nn.modules.linear", True), ("zoo.envs.wrappers", True),
    ("collections", True), ("gymnasium.spaces.box", True), ("random", True),
    # look-alikes: a name that starts like a trusted module is another package
    ("zoo_plugin", False), ("zoo_plugin.envs", False), ("torchrl.envs", False), ("randomgen", False),
    ("numpyro.distributions", False), ("collections_extended", False), ("gymnasium.spacesx", False),
    ("gymnasium.envs.classic_control", False), ("", False),
])
def test_the_trust_rule_matches_whole_module_names_never_prefixes(module, trusted):
    from zoo.envs import state

    klass = type("Lookalike", (), {"__module__": module})
    assert state._trusted(klass) is trusted


class PluginRng:
    """A plugin's generator (module ``zoo_plugin``: a look-alike of ``zoo``) whose pickle keeps its seed only."""

    def __init__(self, seed: int = 1) -> None:
        self.seed, self.position = seed, 0

    def __reduce__(self):
        return (PluginRng, (self.seed,))


def test_an_object_of_a_look_alike_module_with_its_own_pickling_is_not_captured(monkeypatch):
    import sys
    import types

    plugin = types.ModuleType("zoo_plugin")
    plugin.PluginRng = PluginRng
    monkeypatch.setitem(sys.modules, "zoo_plugin", plugin)
    monkeypatch.setattr(PluginRng, "__module__", "zoo_plugin")
    env = PlainWalk()
    env.plugin_rng = PluginRng()
    with pytest.raises(EnvNotCaptured, match=r"zoo_plugin\.PluginRng"):
        snapshot(_vector(env))


def test_a_gymnasium_mujoco_env_that_implements_the_protocol_is_captured_by_it():
    env = gym.make("Hopper-v5").unwrapped
    env.get_env_state = lambda: {"mine": 1}
    env.set_env_state = lambda state: None
    assert capture_kind(env) == "protocol"  # its own state, not zoo's MuJoCo capture
