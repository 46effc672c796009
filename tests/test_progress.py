"""The progress line (steps, sps, training and eval return, elapsed, ETA), -q/-v, and the rounded final line."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from zoo.run.progress import Progress

CONFIG = ("config = dict(exp_name='p', env=dict(id='CartPole-v1'), policy=dict(type='ppo', epochs=1, "
          "minibatch_size=64), pipeline=dict(num_envs=2, rollout_steps=32, max_env_steps=640, eval_every=5, "
          "eval_episodes=2, log_every_s=0.0))\n")


def test_progress_shows_the_latest_eval_elapsed_and_eta():
    stream = io.StringIO()
    progress = Progress(1000, 0.0, stream)
    progress.update(100, {"sps": 50.0, "wall_time": 2.0, "episode_return_mean": 10.0, "eval_return_mean": 42.5})
    progress.update(250, {"sps": 50.0, "wall_time": 5.0, "episode_return_mean": 12.0, "eval_return_mean": None})
    first, second = stream.getvalue().splitlines()
    assert "eval    42.50" in first and "elapsed 0:00:02" in first and "eta 0:00:18" in first
    assert "eval    42.50" in second and "return(100)    12.00" in second and "eta 0:00:15" in second


def _run(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    path = tmp_path / "cfg.py"
    path.write_text(CONFIG)
    return subprocess.run([sys.executable, "-m", "zoo", "run", "--config", str(path), "--set",
                           f"runs_dir={tmp_path / 'runs'}", *flags], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_quiet_verbose_and_the_final_line(tmp_path):
    normal = _run(tmp_path)
    assert normal.returncode == 0 and "elapsed" in normal.stderr and "steps" in normal.stderr
    final = normal.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"run_dir=\S+ reason=max_env_steps env_steps=640 wall_time=\d+\.\ds "
                        r"episode_return_mean=\d+\.\d\d eval_return_mean=\d+\.\d\d", final), final
    quiet = _run(tmp_path, "-q")
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout.startswith("run_dir=")
    verbose = _run(tmp_path, "-v")
    assert verbose.returncode == 0 and verbose.stderr.count("zoo: row {") == 10
    both = _run(tmp_path, "-q", "-v")
    assert both.returncode == 2 and "not both" in both.stderr


def test_the_return_label_names_the_window_it_averages():
    stream = io.StringIO()
    Progress(1000, 0.0, stream, window=4).update(100, {"sps": 50.0, "wall_time": 2.0, "episode_return_mean": 3.0})
    assert "return(4)" in stream.getvalue() and "return(100)" not in stream.getvalue()
