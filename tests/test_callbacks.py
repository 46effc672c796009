"""Plugin callbacks (``zoo.hookspecs``): rows, evaluations, a custom stop rule and the end of a run reach a
module's hooks; a module listed in one config's ``import_names`` affects that run only; a failing callback is one
line with the checkpoint kept."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from zoo import train
from zoo.errors import ZooError

MODULE = '''
from zoo.hookspecs import hookimpl

SEEN = {"rows": [], "evals": [], "end": []}


@hookimpl
def on_metrics_row(row, run_dir, cfg):
    SEEN["rows"].append(row["iteration"])


@hookimpl
def on_evaluation(returns, row, run_dir, cfg):
    SEEN["evals"].append((row["iteration"], len(returns)))


@hookimpl
def should_stop(row, cfg):
    return row["iteration"] >= 5


@hookimpl
def on_run_end(summary, run_dir, cfg):
    SEEN["end"].append((summary["reason"], run_dir, cfg["exp_name"]))
'''

BROKEN = '''
from zoo.hookspecs import hookimpl


@hookimpl
def on_metrics_row(row, run_dir, cfg):
    if row["iteration"] == 3:
        raise RuntimeError("the logger lost its server")
'''


def _config(tmp_path: Path, **extra) -> dict:
    return {"exp_name": "cb", "runs_dir": str(tmp_path / "runs"), "env": {"id": "CartPole-v1"},
            "policy": {"type": "ppo", "epochs": 1, "minibatch_size": 64},
            "pipeline": {"num_envs": 2, "rollout_steps": 32, "max_env_steps": 64 * 20, "eval_every": 2,
                         "eval_episodes": 2, "checkpoint_every": 2}, **extra}


def test_callbacks_see_rows_evaluations_the_end_and_can_stop_the_run(tmp_path):
    (tmp_path / "my_callbacks.py").write_text(MODULE)
    summary = train(_config(tmp_path, import_names=["my_callbacks"], import_paths=[str(tmp_path)]))
    seen = sys.modules["my_callbacks"].SEEN
    assert summary["reason"] == "callback" and summary["iteration"] == 5
    assert seen["rows"] == [1, 2, 3, 4, 5]
    assert seen["evals"] == [(2, 2), (4, 2)]
    assert seen["end"] == [("callback", summary["run_dir"], "cb")]
    rows = (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in rows] == [1, 2, 3, 4, 5]
    # the module stays imported, but a run that does not list it is not affected
    other = train(_config(tmp_path, exp_name="plain"))
    assert other["reason"] == "max_env_steps" and seen["rows"] == [1, 2, 3, 4, 5]


def test_a_failing_callback_is_one_line_and_the_checkpoint_is_kept(tmp_path):
    (tmp_path / "broken_callbacks.py").write_text(BROKEN)
    with pytest.raises(ZooError) as error:
        train(_config(tmp_path, import_names=["broken_callbacks"], import_paths=[str(tmp_path)]))
    message = str(error.value)
    assert "on_metrics_row callback failed: RuntimeError: the logger lost its server" in message
    assert "\n" not in message
    from zoo.run.run_dir import load_weights_only

    assert load_weights_only(tmp_path / "runs" / "cb" / "checkpoint.pt")["loop"]["iteration"] == 2
