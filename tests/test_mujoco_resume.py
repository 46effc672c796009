"""MuJoCo runs resume exactly: Hopper-v5 runs of TD3, SAC and PPO stopped by ``kill -9`` or SIGTERM mid-episode,
then ``zoo run --resume``, write the metrics rows and final weights of an unbroken run of the same seed, and two
resumes of one checkpoint equal each other.

Before env states, the checkpoint pickled gymnasium's ``MujocoEnv`` as its constructor arguments: the resumed
Hopper stood at its start pose with an unseeded generator, so the rows after a resume differed from the unbroken
run's and from another resume's. The signal comes from inside the run, at a chosen env step (mid-iteration, with
episodes in progress), so that the test stops each run at the same moment every time.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TIMINGS, metrics_rows, write_config
from test_reliability import _same, _weights, _zoo

from zoo.run import train

pytest.importorskip("mujoco")

_PIPELINE = {"num_envs": 2, "eval_every": 5, "eval_episodes": 1, "checkpoint_every": 2}
CONFIGS = {
    "td3": {"exp_name": "td3", "seed": 4, "env": {"id": "Hopper-v5"},
            "policy": {"type": "td3", "hidden_sizes": [16, 16], "batch_size": 32},
            "pipeline": {**_PIPELINE, "buffer_size": 5000, "learning_starts": 100, "steps_per_iteration": 50,
                         "max_env_steps": 500}},
    "sac": {"exp_name": "sac", "seed": 4, "env": {"id": "Hopper-v5"},
            "policy": {"type": "sac", "hidden_sizes": [16, 16], "batch_size": 32},
            "pipeline": {**_PIPELINE, "buffer_size": 5000, "learning_starts": 100, "steps_per_iteration": 50,
                         "max_env_steps": 500}},
    "ppo": {"exp_name": "ppo", "seed": 4, "env": {"id": "Hopper-v5"},
            "policy": {"type": "ppo", "hidden_sizes": [16, 16], "minibatch_size": 32, "epochs": 2},
            "pipeline": {**_PIPELINE, "rollout_steps": 32, "max_env_steps": 640, "normalize_obs": True,
                         "normalize_reward": True}},
}
# Env steps (vector steps of both sub-envs) after which the signal arrives: mid-iteration, after the checkpoint of
# iteration 4 (TD3, SAC: 25 steps an iteration; PPO: 32; the first evaluation comes after), with learning under way
# and episodes in progress.
SIGNAL_AT = {"td3": 117, "sac": 117, "ppo": 141}

# Runs zoo and sends the process a signal when its env has taken a given number of (vector) steps.
SIGNALLER = '''
import os, signal, sys
number, at, args = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
from zoo.envs.calls import GuardedCalls
real_step, steps = GuardedCalls.step, [0]
def step(self, actions):
    steps[0] += 1
    if steps[0] == at:
        sys.stdout.flush(); sys.stderr.flush()
        os.kill(os.getpid(), number)
    return real_step(self, actions)
GuardedCalls.step = step
from zoo.cli import main
sys.exit(main(args))
'''


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory) -> dict[str, Path]:
    """Each algorithm's unbroken run, trained once when a test first asks for it."""
    root, runs = tmp_path_factory.mktemp("unbroken"), {}

    class Lazy(dict):
        def __missing__(self, algorithm: str) -> Path:
            runs[algorithm] = Path(train({**CONFIGS[algorithm], "runs_dir": str(root)})["run_dir"])
            return runs[algorithm]

    return Lazy()


def _signalled(tmp_path: Path, algorithm: str, number: int) -> tuple[Path, subprocess.CompletedProcess]:
    """Start ``algorithm``'s run and deliver signal ``number`` at its ``SIGNAL_AT`` env step."""
    script = tmp_path / "signaller.py"
    script.write_text(SIGNALLER)
    config = write_config(tmp_path, {**CONFIGS[algorithm], "runs_dir": str(tmp_path / "runs")})
    done = subprocess.run([sys.executable, str(script), str(number), str(SIGNAL_AT[algorithm]), "run", "--config",
                           str(config), "-q"], capture_output=True, text=True, timeout=180)
    return tmp_path / "runs" / algorithm, done


def _resumed(run: Path) -> list[dict]:
    done = _zoo("run", "--resume", str(run), "-q")
    assert done.returncode == 0, done.stderr
    assert "not exact" not in done.stderr and "restart" not in done.stderr, done.stderr
    return metrics_rows(run, TIMINGS)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["td3", "sac", "ppo"])
def test_a_hopper_run_killed_mid_episode_resumes_to_the_unbroken_run_twice_alike(tmp_path, unbroken, algorithm):
    run, done = _signalled(tmp_path, algorithm, signal.SIGKILL)
    assert done.returncode == -signal.SIGKILL, done.stderr
    rows_before = len(metrics_rows(run))
    assert rows_before == 4, rows_before  # killed in iteration 5, after the checkpoint of iteration 4
    copy = tmp_path / "copy" / algorithm
    shutil.copytree(run, copy)  # the same checkpoint, resumed twice
    expected = metrics_rows(unbroken[algorithm], TIMINGS)
    assert _resumed(run) == expected
    assert _resumed(copy) == expected
    assert _same(_weights(run), _weights(unbroken[algorithm])) and _same(_weights(copy), _weights(run))


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["td3", "sac", "ppo"])
def test_a_hopper_run_stopped_by_sigterm_mid_episode_resumes_to_the_unbroken_run(tmp_path, unbroken, algorithm):
    run, done = _signalled(tmp_path, algorithm, signal.SIGTERM)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr  # it finished the iteration and saved
    assert "not exact" not in done.stderr, done.stderr
    assert len(metrics_rows(run)) == 5  # iteration 5 finished, then saved
    assert _resumed(run) == metrics_rows(unbroken[algorithm], TIMINGS)
    assert _same(_weights(run), _weights(unbroken[algorithm]))
