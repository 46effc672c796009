"""IMPALA in lockstep (``pipeline.lockstep``): the same seed writes the same rows, and a run killed with SIGKILL and
resumed writes the unbroken run's rows, with memory and with action masks (the actors' episodes, memory, current
masks and RNGs travel in the checkpoint); the config checks of the mode."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import TIMINGS, metrics_rows
from test_reliability import _killed

from zoo.cli import main
from zoo.errors import ConfigError
from zoo.run import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# What differs between two runs of the same seed: the clocks, and how full the queue happened to be.
UNTIMED = (*TIMINGS, "actor_sps", "learner_sps", "learner_idle", "queue_depth")
RUN = {
    "exp_name": "m", "seed": 1, "env": {"id": "CartPoleNoVel-v1"},
    "policy": {"type": "impala", "hidden_sizes": [16], "recurrent": "lstm", "recurrent_size": 8},
    "pipeline": {"type": "parallel_async", "num_actors": 2, "num_envs": 4, "unroll_length": 16, "batch_unrolls": 4,
                 "max_env_steps": 4096, "eval_every": 8, "eval_episodes": 2, "lockstep": True,
                 "checkpoint_every": 4},
}


def _run(root: Path, **pipeline) -> Path:
    config = {**RUN, "runs_dir": str(root), "pipeline": {**RUN["pipeline"], **pipeline}}
    return Path(train(config)["run_dir"])


@pytest.mark.parametrize("recurrent", ["none", "lstm"])
def test_the_same_seed_writes_the_same_rows(tmp_path, recurrent):
    config = {**RUN, "policy": {**RUN["policy"], "recurrent": recurrent}}
    rows = [metrics_rows(Path(train({**config, "runs_dir": str(tmp_path / name)})["run_dir"]), UNTIMED)
            for name in "ab"]
    assert len(rows[0]) == 16 and rows[0] == rows[1]
    assert {row["policy_lag_max"] for row in rows[0] if "policy_lag_max" in row} == {0.0}


MASKED = {"env": {"id": "MaskedChoice-v0", "action_mask": "auto", "kwargs": {"length": 12}},
          "policy": {**RUN["policy"], "recurrent": "none"}}


@pytest.mark.parametrize("changes", [{}, MASKED], ids=["lstm", "masked"])
def test_a_killed_run_resumes_to_the_unbroken_runs_rows(tmp_path, changes):
    run = {**RUN, **changes}
    unbroken = Path(train({**run, "runs_dir": str(tmp_path / "a")})["run_dir"])
    config = tmp_path / "b.py"
    config.write_text(f"config = {({**run, 'runs_dir': str(tmp_path / 'b')})!r}\n")
    _killed(tmp_path, "after:checkpoint.pt", 2, "run", "--config", str(config), "-q")  # episodes and memory held
    assert main(["run", "--resume", str(tmp_path / "b" / "m"), "-q"]) == 0
    assert metrics_rows(tmp_path / "b" / "m", UNTIMED) == metrics_rows(unbroken, UNTIMED)


def test_without_lockstep_a_resume_starts_fresh_episodes(tmp_path):
    """The default keeps no actor state: a resumed run's actors get new seeds (the module docstring of
    zoo.pipelines.actor_learner.local_pool), so its rows differ from the unbroken run's."""
    import torch

    run = _run(tmp_path, lockstep=False, max_env_steps=1024)
    assert "actor_states" not in torch.load(run / "checkpoint.pt", weights_only=False)["components"]["actors"]


def test_lockstep_needs_a_batch_of_whole_rounds(tmp_path):
    with pytest.raises(ConfigError, match=r"batch_unrolls \(3\) must be a multiple of pipeline.num_actors \(2\)"):
        _run(tmp_path, batch_unrolls=3)
