"""``logger.tensorboard`` / ``--tensorboard``: every key of every metrics row as a scalar (x: env steps), with a
resumed run's rewritten rows purged like the metrics file's; a missing extra is one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")  # installed by the dev extra (CI); the base install stays lean
from helpers import metrics_rows
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from zoo import train  # noqa: E402
from zoo.config.resolve import resolve_config  # noqa: E402
from zoo.errors import ConfigError  # noqa: E402

CONFIG = {"exp_name": "tb", "env": {"id": "CartPole-v1"},
          "policy": {"type": "ppo", "epochs": 1, "minibatch_size": 64},
          "pipeline": {"num_envs": 2, "rollout_steps": 32, "max_env_steps": 64 * 8, "eval_every": 3,
                       "eval_episodes": 2}}


def _scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_every_key_of_every_row_becomes_a_scalar(tmp_path):
    summary = train({**CONFIG, "runs_dir": str(tmp_path), "logger": {"tensorboard": True}})
    run = Path(summary["run_dir"])
    rows, scalars = metrics_rows(run), _scalars(run)
    for key in {key for row in rows for key in row} - {"iteration", "env_steps"}:
        expected = [(row["env_steps"], row[key]) for row in rows if row.get(key) is not None]
        assert [step for step, _ in scalars[key]] == [step for step, _ in expected], key
        assert [value for _, value in scalars[key]] == pytest.approx([value for _, value in expected], rel=1e-6)
    assert len(scalars["eval_return_mean"]) == 2  # a key that appears only on some rows


@pytest.mark.slow  # trains real runs: tens of seconds (the quick loop stays under 3 minutes)
def test_a_resumed_run_purges_the_events_after_its_checkpoint(tmp_path):
    config = {**CONFIG, "runs_dir": str(tmp_path / "runs"), "logger": {"tensorboard": True},
              "pipeline": {**CONFIG["pipeline"], "max_env_steps": 10**8, "checkpoint_every": 25, "eval_every": 0}}
    path = tmp_path / "cfg.py"
    path.write_text(f"config = {config!r}\n")
    process = subprocess.Popen([sys.executable, "-m", "zoo", "run", "--config", str(path)], cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = tmp_path / "runs" / "tb"
    deadline = time.monotonic() + 120
    while not ((run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().count("\n") >= 40):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    train(None, ["pipeline.max_env_steps=6400"], resume=run)
    steps = [row["env_steps"] for row in metrics_rows(run)]
    assert steps == sorted(set(steps))
    assert [step for step, _ in _scalars(run)["policy_loss"]] == steps


def test_tensorboard_without_the_extra_is_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install 'zoo-rl\[tensorboard\]'"):
        resolve_config({**CONFIG, "logger": {"tensorboard": True}})
    with pytest.raises(ConfigError, match="logger.tensorboard.* must be a bool"):
        resolve_config({**CONFIG, "logger": {"tensorboard": "yes"}})
