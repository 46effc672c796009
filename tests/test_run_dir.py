"""Run directories you can trust: kills, signals, locks, NaNs, hostile checkpoints, failed writes, extensions.

Each test breaks one promise of docs/promises.md if its behaviour regresses: a real SIGKILL of
a subprocess followed by --resume gives the metrics of an unbroken run; every stop signal saves a consistent
state and exits 128 + N; a second owner is refused; a NaN stops the run without overwriting the last good
checkpoint; loading weights never runs code from a checkpoint.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import TIMINGS, metrics_rows, write_config

from zoo.cli import main
from zoo.errors import NonFiniteError, RunDirectoryError, ZooError
from zoo.pipelines.collector import VectorCollector
from zoo.policies import A2CPolicy
from zoo.run import train
from zoo.run.run_dir import RunDirectory, load_weights_only

A2C = {
    "exp_name": "r", "seed": 3,
    "env": {"id": "CartPole-v1"},
    "policy": {"type": "a2c", "anneal_lr": True},
    "pipeline": {"num_envs": 4, "rollout_steps": 8, "eval_every": 0, "checkpoint_every": 0},
}


def _csv_rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as stream:
        return [{k: v for k, v in row.items() if k not in ("wall_time", "sps")} for row in csv.DictReader(stream)]


def _weights(run_dir: Path) -> dict:
    return load_weights_only(run_dir / "checkpoint.pt")["policy"]["model"]


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def _leftovers(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir() if p.name.endswith(".tmp"))


# -- kill -9 and resume -------------------------------------------------------------------------------------
def _zoo(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zoo", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _kill_after_rows(process: subprocess.Popen, metrics: Path, rows: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if metrics.exists() and metrics.read_text().count("\n") >= rows:
            process.send_signal(signal.SIGKILL)
            process.wait()
            return
        if process.poll() is not None:
            pytest.fail(f"the run ended before it could be killed: {process.communicate()}")
        time.sleep(0.005)
    process.kill()
    pytest.fail("the run did not reach the row to kill at")


@pytest.mark.slow
def test_sigkill_then_resume_gives_the_metrics_and_weights_of_an_unbroken_run(tmp_path):
    config = {**A2C, "runs_dir": str(tmp_path / "runs"),
              "pipeline": {**A2C["pipeline"], "max_env_steps": 24_000, "checkpoint_every": 97}}
    cfg = write_config(tmp_path, config)
    whole = train(cfg, ["exp_name=whole"])
    broken = tmp_path / "runs" / "broken"
    _kill_after_rows(_zoo("run", "--config", str(cfg), "--exp-name", "broken"), broken / "metrics.jsonl", 150)
    killed_at = len(metrics_rows(broken, TIMINGS))
    assert killed_at >= 150 and load_weights_only(broken / "checkpoint.pt")["loop"]["iteration"] < killed_at
    _kill_after_rows(_zoo("run", "--resume", str(broken)), broken / "metrics.jsonl", 450)
    finish = _zoo("run", "--resume", str(broken))
    out, err = finish.communicate(timeout=120)
    assert finish.returncode == 0, err
    whole_dir = Path(whole["run_dir"])
    # every iteration exactly once, in order, identical
    assert metrics_rows(broken, TIMINGS) == metrics_rows(whole_dir, TIMINGS)
    assert _csv_rows(broken) == _csv_rows(whole_dir)
    assert _same_weights(_weights(broken), _weights(whole_dir))
    assert _leftovers(broken) == []


def test_a_run_killed_before_its_first_periodic_checkpoint_can_be_resumed(tmp_path):
    config = {**A2C, "runs_dir": str(tmp_path / "runs"),
              "pipeline": {**A2C["pipeline"], "max_env_steps": 8_000, "checkpoint_every": 100_000}}
    cfg = write_config(tmp_path, config)
    whole = train(cfg, ["exp_name=whole"])
    broken = tmp_path / "runs" / "broken"
    _kill_after_rows(_zoo("run", "--config", str(cfg), "--exp-name", "broken"), broken / "metrics.jsonl", 60)
    assert load_weights_only(broken / "checkpoint.pt")["loop"]["iteration"] == 0  # only the initial one
    summary = train(None, resume=broken)
    assert summary["reason"] == "max_env_steps"
    assert metrics_rows(broken, TIMINGS) == metrics_rows(Path(whole["run_dir"]), TIMINGS)


# -- signals --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("signum", "where"), [
    (signal.SIGINT, "learn"), (signal.SIGTERM, "rollout"), (signal.SIGHUP, "learn"), (signal.SIGTERM, "learn"),
])  # fmt: skip
def test_a_signal_saves_a_consistent_state_and_resume_is_exact(tmp_path, monkeypatch, signum, where):
    config = {**A2C, "runs_dir": str(tmp_path), "pipeline": {**A2C["pipeline"], "max_env_steps": 1280}}
    whole = train(config, ["exp_name=whole"])
    calls = {"count": 0}
    if where == "learn":
        original = A2CPolicy.learn

        def patched(self, batch, ctx):  # the signal arrives in the middle of the 7th update
            calls["count"] += 1
            if calls["count"] == 7:
                os.kill(os.getpid(), signum)
            return original(self, batch, ctx)

        monkeypatch.setattr(A2CPolicy, "learn", patched)
    else:
        original_rollout = VectorCollector.rollout

        def patched_rollout(self, policy, steps):
            calls["count"] += 1
            if calls["count"] == 7:
                os.kill(os.getpid(), signum)
            return original_rollout(self, policy, steps)

        monkeypatch.setattr(VectorCollector, "rollout", patched_rollout)
    stopped = train(config, ["exp_name=stopped"])
    monkeypatch.undo()
    assert stopped["reason"] == "interrupted" and stopped["exit_code"] == 128 + signum
    run = Path(stopped["run_dir"])
    assert len(metrics_rows(run, TIMINGS)) == 7  # the interrupted iteration was completed and written, then saved
    assert load_weights_only(run / "checkpoint.pt")["loop"]["iteration"] == 7
    assert not (run / "model.pt").exists()  # an interrupted run has no final model yet
    resumed = train(None, resume=run)
    assert resumed["reason"] == "max_env_steps"
    assert metrics_rows(run, TIMINGS) == metrics_rows(Path(whole["run_dir"]), TIMINGS)
    assert _same_weights(_weights(run), _weights(Path(whole["run_dir"])))


def test_sigterm_to_the_cli_exits_143_with_a_checkpoint(tmp_path):
    config = {**A2C, "runs_dir": str(tmp_path / "runs"), "pipeline": {**A2C["pipeline"], "max_env_steps": 10**7}}
    run = tmp_path / "runs" / "r"
    process = _zoo("run", "--config", str(write_config(tmp_path, config)))
    deadline = time.monotonic() + 60
    while not ((run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().count("\n") >= 20):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    assert "SIGTERM" in err and f"zoo run --resume {run}" in out
    state = load_weights_only(run / "checkpoint.pt")
    assert state["loop"]["iteration"] == len(metrics_rows(run, TIMINGS)) >= 20


# -- ownership, NaN, hostile files ------------------------------------------------------------------------------
def test_a_second_owner_of_a_run_directory_is_refused(tmp_path, capsys):
    summary = train({**A2C, "runs_dir": str(tmp_path)}, ["pipeline.max_env_steps=64"])
    holder = RunDirectory(summary["run_dir"])
    holder.lock()
    capsys.readouterr()
    try:
        before = (Path(summary["run_dir"]) / "metrics.jsonl").read_bytes()
        assert main(["run", "--resume", summary["run_dir"], "--set", "pipeline.max_env_steps=128"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "in use by another zoo process" in err
        assert (Path(summary["run_dir"]) / "metrics.jsonl").read_bytes() == before
    finally:
        holder.unlock()
    assert main(["run", "--resume", summary["run_dir"], "--set", "pipeline.max_env_steps=128"]) == 0


NAN_ENV = '''
import gymnasium as gym
import numpy as np
from zoo.registry import ENV_REGISTRY


class NanAfter(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, after=100):
        self.after, self.total = after, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.total += 1
        reward = float("nan") if self.total > self.after else 1.0
        return np.zeros(2, np.float32), reward, False, self.total % 10 == 0, {}


ENV_REGISTRY.register("nan_after", NanAfter)
'''


def test_a_nan_reward_stops_the_run_naming_the_iteration_and_keeps_the_last_checkpoint(tmp_path, capsys):
    (tmp_path / "nan_env.py").write_text(NAN_ENV)
    config = {**A2C, "runs_dir": str(tmp_path / "runs"), "import_names": ["nan_env"],
              "env": {"id": "nan_after", "kwargs": {"after": 300}},
              "pipeline": {**A2C["pipeline"], "num_envs": 1, "rollout_steps": 16, "checkpoint_every": 5,
                           "max_env_steps": 10_000}}
    code = main(["run", "--config", str(write_config(tmp_path, config))])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("zoo:")]
    assert code == 2 and len(errors) == 1, errors  # besides progress lines, one error line
    err = errors[0]
    run = tmp_path / "runs" / "r"
    written = len(metrics_rows(run, TIMINGS))  # the rows of the iterations before the one that met the NaN
    saved = written - written % 5
    assert written > 15 and load_weights_only(run / "checkpoint.pt")["loop"]["iteration"] == saved
    assert f"iteration {written + 1}:" in err and f"checkpoint (iteration {saved})" in err
    assert "non-finite reward" in err and "nan_after" in err
    assert not (run / "model.pt").exists()
    assert all(torch.isfinite(w).all() for w in _weights(run).values())


def test_a_non_finite_gradient_stops_before_the_optimiser_step(tmp_path, monkeypatch):
    config = {**A2C, "runs_dir": str(tmp_path), "pipeline": {**A2C["pipeline"], "checkpoint_every": 2,
                                                             "max_env_steps": 640}}
    original = A2CPolicy.learn
    calls = {"count": 0}

    def poisoned(self, batch, ctx):
        calls["count"] += 1
        if calls["count"] == 5:
            batch = batch.with_extras(advantage=batch.extras["advantage"] * float("nan"))
        return original(self, batch, ctx)

    monkeypatch.setattr(A2CPolicy, "learn", poisoned)
    with pytest.raises(NonFiniteError, match=r"iteration 5: the (loss|gradient) is not finite.*iteration 4"):
        train(config)
    assert load_weights_only(tmp_path / "r" / "checkpoint.pt")["loop"]["iteration"] == 4


class _Exploit:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


MARKER = Path("/tmp") / f"zoo-exploit-{os.getpid()}"


def test_eval_and_load_never_run_code_from_a_checkpoint(tmp_path, capsys):
    summary = train({**A2C, "runs_dir": str(tmp_path)}, ["pipeline.max_env_steps=64"])
    checkpoint = Path(summary["run_dir"]) / "checkpoint.pt"
    state = torch.load(checkpoint, weights_only=False)
    state["policy"]["evil"] = _Exploit()
    with open(checkpoint, "wb") as stream:
        pickle.dump(state, stream)  # what an attacker would ship: a pickle that runs a command when loaded
    MARKER.unlink(missing_ok=True)
    capsys.readouterr()
    assert main(["eval", summary["run_dir"], "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a loadable zoo file" in err
    import zoo

    with pytest.raises(ZooError, match="not a loadable zoo file"):
        zoo.load(summary["run_dir"])
    assert not MARKER.exists()


def test_a_checkpoint_write_that_fails_half_way_leaves_the_previous_one_intact(tmp_path, monkeypatch):
    summary = train({**A2C, "runs_dir": str(tmp_path)}, ["pipeline.max_env_steps=64"])
    run = Path(summary["run_dir"])
    before = (run / "checkpoint.pt").read_bytes()
    original = torch.save

    def failing_save(obj, stream, *args, **kwargs):
        if "separate_files" not in obj:  # the replay file is written; the checkpoint after it fails
            return original(obj, stream, *args, **kwargs)
        stream.write(b"PK\x03\x04 half a zip")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(RunDirectoryError, match="No space left on device.*free space.*last checkpoint is kept"):
        RunDirectory(run).save_checkpoint({"format": 2, "policy": {}, "loop": {"iteration": 7}},
                                          {"replay": {"rows": np.zeros(3)}})
    assert (run / "checkpoint.pt").read_bytes() == before and _leftovers(run) == []
    assert not (run / "replay-000000007.pt").exists()  # no file that no checkpoint names


def test_resume_cleans_temporary_files_a_killed_writer_left(tmp_path):
    summary = train({**A2C, "runs_dir": str(tmp_path)}, ["pipeline.max_env_steps=64"])
    run = Path(summary["run_dir"])
    (run / ".checkpoint.pt.abc123.tmp").write_bytes(b"partial")
    train(None, ["pipeline.max_env_steps=128"], resume=run)
    assert _leftovers(run) == []


def test_resume_with_an_incompatible_override_is_one_line_and_changes_nothing(tmp_path, capsys):
    summary = train({**A2C, "runs_dir": str(tmp_path)}, ["pipeline.max_env_steps=64"])
    run = Path(summary["run_dir"])
    before = {name: (run / name).read_bytes() for name in ("config.yaml", "metrics.jsonl", "checkpoint.pt")}
    capsys.readouterr()
    for override in ("policy.hidden_sizes=[32]", "pipeline.num_envs=2", "env.id=Acrobot-v1", "seed=5"):
        assert main(["run", "--resume", str(run), "--set", override]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--resume cannot change" in err, err
    assert main(["run", "--resume", str(run), "--config", "x.py"]) == 2
    assert "not both" in capsys.readouterr().err
    assert {name: (run / name).read_bytes() for name in before} == before
    assert main(["eval", str(run), "--episodes", "1"]) == 0


def test_metrics_csv_gains_columns_for_keys_that_appear_later(tmp_path):
    run = RunDirectory(tmp_path)
    run.append_metrics({"iteration": 1, "loss": None})
    run.append_metrics({"iteration": 2, "loss": 0.5, "eval_return_mean": 10.0})
    run.append_metrics({"iteration": 3, "loss": 0.25})
    with open(tmp_path / "metrics.csv", newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert [row["eval_return_mean"] for row in rows] == ["", "10.0", ""]
    assert [row["loss"] for row in rows] == ["", "0.5", "0.25"]
    run.truncate_metrics(2)
    assert len(run.metrics_rows()) == 2
    with open(tmp_path / "metrics.csv", newline="") as stream:
        assert len(list(csv.DictReader(stream))) == 2
    # The files stay open between rows: a row written after the truncation (which replaced both files) and read
    # while the run still holds them must be in the new files, whole.
    run.append_metrics({"iteration": 3, "loss": 0.125})
    assert [row["iteration"] for row in run.metrics_rows()] == [1, 2, 3]
    with open(tmp_path / "metrics.csv", newline="") as stream:
        assert [row["loss"] for row in csv.DictReader(stream)] == ["", "0.5", "0.125"]
    run.close_metrics()
    run.append_metrics({"iteration": 4, "loss": 0.0625})  # reopened on demand
    assert [row["iteration"] for row in RunDirectory(tmp_path).metrics_rows()] == [1, 2, 3, 4]


# -- extending a finished run -----------------------------------------------------------------------------------
def test_extending_a_run_continues_the_schedule_and_does_not_stop_again_for_the_same_target(tmp_path):
    config = {**A2C, "runs_dir": str(tmp_path), "pipeline": {**A2C["pipeline"], "max_env_steps": 4000,
                                                             "stop_return": 15.0, "stats_window": 10}}
    first = train(config)
    assert first["reason"] == "stop_return" and first["env_steps"] < 4000
    run = Path(first["run_dir"])
    reached = len(metrics_rows(run, TIMINGS))
    extended = train(None, ["pipeline.max_env_steps=8000"], resume=run)
    assert extended["reason"] == "max_env_steps" and extended["env_steps"] == 8000
    rows = metrics_rows(run, TIMINGS)
    rates = [row["learning_rate"] for row in rows]
    # No jump: the first extended iteration continues just below the last rate, then decays linearly to 0.
    assert rates[reached] <= rates[reached - 1] and rates[reached - 1] - rates[reached] < 0.01 * rates[0]
    assert rates[-1] < 0.01 * rates[0]
    # A new target applies again.
    again = train(None, ["pipeline.max_env_steps=12000", "pipeline.stop_return=16.0"], resume=run)
    assert again["reason"] == "stop_return" and 8000 < again["env_steps"] < 12000


def test_each_session_records_what_the_results_depend_on_beyond_the_config(tmp_path):

    import gymnasium
    import numpy

    from zoo.rl_utils._scan import kernels_available

    summary = train({**A2C, "runs_dir": str(tmp_path)}, ["pipeline.max_env_steps=64"])
    run = Path(summary["run_dir"])
    train(None, ["pipeline.max_env_steps=128"], resume=run)
    sessions = json.loads((run / "environment.json").read_text())["sessions"]
    assert len(sessions) == 2  # one per session: a resumed run may continue under other versions
    first = sessions[0]
    assert first["torch"] == torch.__version__ and first["numpy"] == numpy.__version__
    assert first["gymnasium"] == gymnasium.__version__ and first["python"].count(".") == 2
    assert first["rl_utils_kernels"] == ("compiled C" if kernels_available() else "numpy fallback")


def test_an_empty_replay_buffer_and_empty_bytes_survive_a_checkpoint_round_trip(tmp_path):
    """What a run killed before its first periodic checkpoint left: the iteration-0 replay file holds an empty
    buffer, which weights-only loading once refused (an empty bytes object pickles as a call of bytes())."""
    from zoo.data import ReplayBuffer

    replay = ReplayBuffer(10, (3,), (1,))
    run = RunDirectory(tmp_path)
    run.save_checkpoint({"format": 2, "policy": {}, "loop": {"iteration": 0}, "blob": b"", "env": b"\x00\xff"},
                        {"replay": replay})
    state = run.load_checkpoint()
    assert state["blob"] == b"" and state["env"] == b"\x00\xff"
    restored = ReplayBuffer(10, (3,), (1,))
    restored.load_state_dict(state["separate"]["replay"])
    assert len(restored) == 0 and state["separate"]["replay"]["obs"].shape == (0, 3)
