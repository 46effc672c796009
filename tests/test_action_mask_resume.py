"""A masked run killed with SIGKILL and resumed writes the unbroken run's rows: the masks of the current
observations (and, with memory, every env's memory) are in the checkpoint with the episodes in progress."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import TIMINGS, metrics_rows
from test_reliability import _killed

from zoo.cli import main
from zoo.run import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RUN = {
    "exp_name": "m", "seed": 4, "env": {"id": "MaskedChoice-v0", "action_mask": "auto", "kwargs": {"length": 12}},
    "policy": {"type": "ppo", "hidden_sizes": [8], "minibatch_size": 16, "epochs": 2},
    "pipeline": {"num_envs": 2, "rollout_steps": 8, "max_env_steps": 320, "eval_every": 10, "eval_episodes": 2,
                 "checkpoint_every": 4},
}
MEMORY = {"recurrent": "lstm", "recurrent_size": 8, "sequence_length": 4}


@pytest.mark.parametrize("memory", [{}, MEMORY], ids=["feed_forward", "lstm"])
def test_a_killed_masked_run_resumes_to_the_unbroken_runs_rows(tmp_path, memory):
    config = {**RUN, "policy": {**RUN["policy"], **memory}}
    unbroken = Path(train({**config, "runs_dir": str(tmp_path / "a")})["run_dir"])
    path = tmp_path / "b.py"
    path.write_text(f"config = {({**config, 'runs_dir': str(tmp_path / 'b')})!r}\n")
    _killed(tmp_path, "after:checkpoint.pt", 3, "run", "--config", str(path), "-q")  # mid-episode, masks held
    assert main(["run", "--resume", str(tmp_path / "b" / "m"), "-q"]) == 0
    rows = metrics_rows(tmp_path / "b" / "m", TIMINGS)
    assert rows == metrics_rows(unbroken, TIMINGS)
    evaluations = [row["eval_return_mean"] for row in rows if row.get("eval_return_mean") is not None]
    assert evaluations and min(evaluations) >= 0  # an invalid action scores -1 and ends the episode
