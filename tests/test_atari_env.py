"""zoo.envs.atari: the "atari" env factory (ALE through gymnasium's AtariPreprocessing and FrameStackObservation).

The tests of missing packages, of the registry entry and of FireOnReset run everywhere; those that build a game
need the optional ``atari`` extra (ale-py, opencv) and are skipped without it.
"""

from __future__ import annotations

import importlib.util
import sys

import gymnasium as gym
import numpy as np
import pytest

import zoo.builtin_plugin
import zoo.envs.atari
from zoo.envs import make_env, make_vector_env
from zoo.envs.atari import FireOnReset, make_atari_env
from zoo.errors import ConfigError, ZooError
from zoo.plugins import load_plugins
from zoo.registry import ENV_REGISTRY

FIX = "pip install 'zoo-rl[atari]'"


def _needs_atari() -> None:
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")


# --- without ale-py ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("build", [
    lambda: make_atari_env("Pong"),
    lambda: make_env("atari", game="Pong"),
    lambda: make_vector_env("atari", 2, env_kwargs={"game": "Pong"}),
])
def test_missing_ale_py_is_one_line_naming_the_extra(monkeypatch, build):
    monkeypatch.setitem(sys.modules, "ale_py", None)  # `import ale_py` now raises ImportError
    with pytest.raises(ZooError) as error:
        build()
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("Atari envs need ale-py, which could not be imported")
    assert message.endswith(FIX)


def test_atari_is_a_built_in_env_and_importing_it_does_not_import_ale_py(monkeypatch):
    load_plugins()
    assert ENV_REGISTRY.get("atari") is make_atari_env
    assert ENV_REGISTRY.source("atari") == "built-in"
    # Run fresh copies of the modules' code with ale_py and cv2 unimportable: an import at module level would fail.
    monkeypatch.setitem(sys.modules, "ale_py", None)
    monkeypatch.setitem(sys.modules, "cv2", None)
    for module in (zoo.envs.atari, zoo.builtin_plugin):
        spec = importlib.util.spec_from_file_location(f"{module.__name__}_probe", module.__file__)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


# --- FireOnReset, on a stand-in for an ALE env --------------------------------------------------------------------


class RecordingEnv(gym.Env):
    """Observation: the number of steps since reset; records every action; ends after ``length`` steps."""

    def __init__(self, meanings: list[str], length: int = 10) -> None:
        self.observation_space = gym.spaces.Box(0, 100, shape=(), dtype=np.int64)
        self.action_space = gym.spaces.Discrete(len(meanings))
        self.meanings, self.length = meanings, length
        self.actions: list[int] = []
        self.resets = 0

    def get_action_meanings(self) -> list[str]:
        return self.meanings

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        self.steps = 0
        return np.int64(0), {"reset": self.resets}

    def step(self, action):
        self.actions.append(int(action))
        self.steps += 1
        return np.int64(self.steps), 0.0, self.steps >= self.length, False, {}


def test_fire_on_reset_presses_fire_once_and_returns_that_observation():
    inner = RecordingEnv(["NOOP", "FIRE", "RIGHT"])
    env = FireOnReset(inner)
    obs, _ = env.reset(seed=3)
    assert obs == 1 and inner.actions == [1]
    env.step(2)
    assert inner.actions == [1, 2] and inner.resets == 1


def test_fire_on_reset_resets_again_if_fire_ended_the_episode():
    inner = RecordingEnv(["NOOP", "FIRE"], length=1)
    obs, info = FireOnReset(inner).reset()
    assert obs == 0 and info == {"reset": 2} and inner.actions == [1]


def test_fire_on_reset_is_refused_for_a_game_without_fire():
    with pytest.raises(ConfigError, match=r"has no FIRE action \(its actions: NOOP, UP, DOWN\): set env.kwargs"):
        FireOnReset(RecordingEnv(["NOOP", "UP", "DOWN"]))


# --- real games (need the atari extra) -------------------------------------------------------------------------


def test_pong_observations_are_stacked_84x84_grayscale_bytes_of_the_emulator_screen():
    _needs_atari()
    import cv2

    env = make_env("atari", game="Pong")
    assert env.observation_space == gym.spaces.Box(0, 255, shape=(4, 84, 84), dtype=np.uint8)
    assert env.action_space == gym.spaces.Discrete(6)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.uint8 and obs.shape == (4, 84, 84)
    # Reference: the emulator's own grayscale screen, resized by hand; at reset all 4 stacked frames are it.
    screen = env.unwrapped.ale.getScreenGrayscale()
    expected = cv2.resize(screen, (84, 84), interpolation=cv2.INTER_AREA)
    for frame in obs:
        np.testing.assert_array_equal(frame, expected)
    next_obs, *_ = env.step(0)
    np.testing.assert_array_equal(next_obs[:3], obs[1:])  # the stack shifts by one frame per step
    assert env.unwrapped._frameskip == 1  # frames are skipped once, by AtariPreprocessing
    env.close()


def test_vector_atari_same_seed_same_observations():
    _needs_atari()
    runs = []
    for seed in (0, 0, 1):
        venv = make_vector_env("atari", 2, seed=seed, env_kwargs={"game": "Pong"})
        assert venv.single_observation_space.shape == (4, 84, 84)
        obs, _ = venv.reset()
        observations = [obs]
        for _ in range(40):
            observations.append(venv.step(venv.action_space.sample())[0])  # actions seeded by make_vector_env
        venv.close()
        runs.append(np.stack(observations))
    assert runs[0].shape == (41, 2, 4, 84, 84) and runs[0].dtype == np.uint8
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])


def test_game_names_ignore_case_and_underscores_and_unknown_games_name_the_closest():
    _needs_atari()
    assert make_atari_env("space_invaders").spec.id == "ALE/SpaceInvaders-v5"
    with pytest.raises(ConfigError) as error:
        make_env("atari", game="Pongg")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("unknown Atari game 'Pongg': did you mean Pong?")
    assert "ALE/<game>-v5" in message


def test_missing_opencv_is_one_line_naming_the_extra(monkeypatch):
    _needs_atari()
    monkeypatch.setitem(sys.modules, "cv2", None)
    with pytest.raises(ZooError) as error:
        make_atari_env("Pong")
    assert str(error.value) == f"Atari preprocessing needs opencv (cv2), which is not installed: {FIX}"


def test_rgb_array_render_mode_gives_full_colour_frames():
    _needs_atari()
    env = make_env("atari", game="Breakout", fire_reset=True, render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8
    env.close()


@pytest.mark.slow
def test_the_pong_config_starts_and_runs_two_iterations(tmp_path):
    # configs/ppo_atari_pong.py with a 2-iteration budget: the CNN encoder is chosen for the uint8 frames, PPO
    # learns on them, and the run ends with a model and metrics (learning Pong needs ~10M steps, not a CPU test).
    _needs_atari()
    import json
    from pathlib import Path

    from zoo.run import train

    config = Path(__file__).resolve().parent.parent / "configs" / "ppo_atari_pong.py"
    summary = train(config, [f"runs_dir={tmp_path}", "pipeline.max_env_steps=2048", "pipeline.eval_every=0",
                             "logger.progress=false"])
    assert summary["reason"] == "max_env_steps" and summary["env_steps"] == 2048
    rows = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(np.isfinite(row["policy_loss"]) for row in rows)
    assert (Path(summary["run_dir"]) / "model.pt").exists()
