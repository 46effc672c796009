"""``zoo eval RUN --video DIR``: one MP4 or GIF per episode with one frame per step (plus the first), written
atomically; a missing extra or an env that cannot render is one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers import predicted_returns

from zoo import train

imageio = pytest.importorskip("imageio.v2")

FRAME_ENV = '''
import gymnasium
import numpy as np
from zoo.registry import ENV_REGISTRY


class FrameCartPole(gymnasium.Wrapper):
    """CartPole drawing its cart position as a bright column (no pygame needed)."""

    def __init__(self, render_mode=None):
        super().__init__(gymnasium.make("CartPole-v1", max_episode_steps=40))
        self._mode, self._t = render_mode, 0

    def reset(self, **kwargs):
        self._t = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        self._t += 1
        return self.env.step(action)

    def render(self):
        frame = np.zeros((32, 48, 3), dtype=np.uint8)
        frame[:8, :8, 1] = 5 * self._t  # every frame differs (GIF writers merge equal ones)
        x = int(np.clip((self.env.unwrapped.state[0] + 2.4) / 4.8 * 47, 0, 47))
        frame[:, x] = 255
        return frame


ENV_REGISTRY.register("frame_cartpole", FrameCartPole)
'''


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("video")
    (root / "frame_env.py").write_text(FRAME_ENV)
    summary = train({"exp_name": "v", "runs_dir": str(root / "runs"), "import_names": ["frame_env"],
                     "import_paths": [str(root)], "env": {"id": "frame_cartpole"},
                     "policy": {"type": "ppo", "epochs": 1, "minibatch_size": 64},
                     "pipeline": {"num_envs": 2, "rollout_steps": 32, "max_env_steps": 128, "eval_every": 0}})
    return Path(summary["run_dir"])


def _eval(run: Path, *args: str) -> subprocess.CompletedProcess:
    # --trust-imports: the run's env comes from its own import_names module (zoo eval imports none by default)
    return subprocess.run([sys.executable, "-m", "zoo", "eval", str(run), "--trust-imports", *args],
                          capture_output=True, text=True, timeout=120, cwd=run.parent.parent)


@pytest.mark.parametrize("fmt", ["gif", "mp4"])
def test_each_episode_becomes_a_video_with_a_frame_per_step(run, tmp_path, fmt):
    if fmt == "mp4":
        pytest.importorskip("imageio_ffmpeg")
    out = _eval(run, "--episodes", "2", "--video", str(tmp_path / "videos"), "--video-format", fmt)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1].startswith("mean_return=") and lines[-1].endswith("episodes=2")
    for k, line in enumerate(lines[:2]):
        path, episode_return = line.split(" return=")
        assert Path(path) == tmp_path / "videos" / f"episode_{k}.{fmt}"
        frames = imageio.mimread(path, memtest=False)
        assert len(frames) == int(float(episode_return)) + 1  # CartPole: reward 1 per step, plus the first frame
        assert np.asarray(frames[0]).shape[:2] == (32, 48)
    assert sorted(p.name for p in (tmp_path / "videos").iterdir()) == [f"episode_0.{fmt}", f"episode_1.{fmt}"]


def test_video_errors_are_one_line(run, tmp_path):
    out = _eval(run, "--video", str(tmp_path / "v"), "--fps", "0")
    assert out.returncode == 2 and "--fps must be between 1 and 1000" in out.stderr
    from zoo.envs import EnvSpec
    from zoo.errors import ZooError
    from zoo.video import record_episodes

    class NoFrames(gym.Env):  # render() gives nothing: the env has no rgb_array support
        observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def __init__(self, render_mode=None):
            self.render_mode = render_mode

        def reset(self, *, seed=None, options=None):
            return np.zeros(2, np.float32), {}

        def render(self):
            return None

    def without_render_mode():
        return NoFrames()

    from zoo.registry import ENV_REGISTRY

    ENV_REGISTRY.register("test_no_frames", NoFrames, source="tests")
    ENV_REGISTRY.register("test_no_render_mode", without_render_mode, source="tests")
    try:
        with pytest.raises(ZooError, match="not an RGB image") as err:
            record_episodes(None, EnvSpec("test_no_frames"), tmp_path / "w", 1, 0, fmt="gif")
        with pytest.raises(ZooError, match="cannot render frames") as err2:
            record_episodes(None, EnvSpec("test_no_render_mode"), tmp_path / "w", 1, 0, fmt="gif")
    finally:
        ENV_REGISTRY.unregister("test_no_frames")
        ENV_REGISTRY.unregister("test_no_render_mode")
    assert "\n" not in str(err.value) and "\n" not in str(err2.value)


def test_without_imageio_video_names_the_extra(monkeypatch, tmp_path):
    from zoo.envs import EnvSpec
    from zoo.errors import ZooError
    from zoo.video import record_episodes

    monkeypatch.setitem(sys.modules, "imageio", None)
    monkeypatch.setitem(sys.modules, "imageio.v2", None)
    with pytest.raises(ZooError, match=r"pip install 'zoo-rl\[video\]'"):
        record_episodes(None, EnvSpec("CartPole-v1"), tmp_path, 1, 0, fmt="gif")


def test_a_recurrent_policy_plays_each_video_episode_with_its_memory(tmp_path):
    """zoo eval --video of a policy with memory (policy.recurrent): each episode played from zero memory, carried
    step to step, so that every video's return is the episode that predict with state plays (issue 52)."""
    (tmp_path / "frame_env.py").write_text(FRAME_ENV)
    summary = train({"exp_name": "r", "runs_dir": str(tmp_path / "runs"), "import_names": ["frame_env"],
                     "import_paths": [str(tmp_path)], "env": {"id": "frame_cartpole"},
                     "policy": {"type": "ppo", "epochs": 1, "minibatch_size": 64, "recurrent": "lstm",
                                "recurrent_size": 8, "sequence_length": 8},
                     "pipeline": {"num_envs": 2, "rollout_steps": 32, "max_env_steps": 128, "eval_every": 0}})
    run = Path(summary["run_dir"])
    out = _eval(run, "--episodes", "2", "--seed", "11", "--video", str(tmp_path / "videos"), "--video-format", "gif")
    assert out.returncode == 0, out.stderr
    returns = [float(line.split(" return=")[1]) for line in out.stdout.strip().splitlines()[:2]]
    import zoo
    from zoo.envs import EnvSpec

    agent = zoo.load(run, trust_imports=True)
    assert returns == predicted_returns(agent, EnvSpec("frame_cartpole").make, 2, seed=11)
