"""zoo export writes where it says, refuses a run that is training, and its check catches what it must (fast tests:
one tiny run, the check on synthetic actions)."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from zoo.cli import main
from zoo.errors import ZooError
from zoo.export import CHECK_RELATIVE, CHECK_TOLERANCE
from zoo.export.command import ExportCheckError, _check, export_run
from zoo.export.graph import graph_inputs
from zoo.run import train
from zoo.run.run_dir import LOCK_FILE, lock_owner

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("export_guard_runs")
    config = {"exp_name": "tiny", "env": {"id": "Pendulum-v1"}, "policy": {"type": "ppo"},
              "pipeline": {"num_envs": 2, "rollout_steps": 16, "eval_every": 0, "max_env_steps": 64}}
    return Path(train(config, [f"runs_dir={root}", "logger.progress=false"])["run_dir"])


def test_a_symlinked_export_folder_is_refused_and_nothing_is_written_outside(run, tmp_path, capsys):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    link = run / "export"
    link.symlink_to(outside, target_is_directory=True)
    try:
        code = main(["export", str(run), "--format", "torchscript", "--check", "0"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1
        assert err == (f"zoo: error: '{link}' is a symbolic link (to '{outside}'): zoo export writes only inside the "
                       f"run directory unless told where: remove the link, or pass --out FILE")
        assert list(outside.iterdir()) == []
    finally:
        link.unlink()


def test_an_export_file_in_place_of_the_folder_is_refused(run, tmp_path):
    (run / "export").write_text("not a folder")
    try:
        with pytest.raises(ZooError, match="is not a folder"):
            export_run(run, "torchscript", check=0)
    finally:
        (run / "export").unlink()


def test_an_explicit_out_is_written_where_asked(run, tmp_path):
    result = export_run(run, "torchscript", tmp_path / "p.pt", check=8)
    assert result.path == tmp_path / "p.pt" and result.path.is_file() and result.note is None


def test_a_run_that_is_training_is_refused_unless_asked(run, tmp_path, capsys):
    with open(run / LOCK_FILE, "r+") as holder:  # what a training process holds
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        holder.seek(0)
        holder.truncate()
        holder.write("4242")
        holder.flush()
        assert lock_owner(run) == "4242"
        out = tmp_path / "p.pt"
        code = main(["export", str(run), "--format", "torchscript", "--out", str(out), "--check", "0"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and not out.exists()
        assert err == (f"zoo: error: run '{run}' is training (zoo process pid 4242 holds it): its checkpoint is "
                       f"mid-training; wait for the run to end, or pass --while-training to export its latest "
                       f"checkpoint anyway")
        code = main(["export", str(run), "--format", "torchscript", "--out", str(out), "--check", "0",
                     "--while-training"])
        printed = capsys.readouterr().out
        assert code == 0 and out.is_file()
        assert f"note: run '{run}' is training (pid 4242): exported its latest checkpoint" in printed
    assert lock_owner(run) is None


def test_lock_owner_probe_leaves_the_run_free(run):
    assert lock_owner(run) is None
    assert lock_owner(run / "no such folder") is None
    with open(run / LOCK_FILE) as handle:  # the probe released its lock: another process could take it
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


# -- the check: tolerance, both halves, dtypes -------------------------------------------------------------
class _Agent:
    def __init__(self, table: dict[int, np.ndarray]) -> None:
        self.table = table

    def predict(self, obs):
        obs = np.asarray(obs)
        if obs.ndim == 1:
            return self.table[int(obs[0])]
        return np.stack([self.table[int(o[0])] for o in obs])


def _case(count: int = 6):
    table = {k: np.array([0.1 * k, -0.2 * k], np.float32) for k in range(count)}
    observations = [np.array([k, 0.0], np.float32) for k in range(count)]
    arrays = [np.stack(observations)]
    return _Agent(table), observations, arrays, table


def _runner(table, batch_offset=0.0, single_offset=0.0):
    def run(arrays):
        keys = [int(o[0]) for o in arrays[0]]
        offset = single_offset if len(keys) == 1 else batch_offset
        return np.stack([table[k] for k in keys]).astype(np.float64) + offset
    return run


@pytest.mark.parametrize(("batch_offset", "single_offset", "passes"), [
    (0.0, 0.0, True), (0.5 * CHECK_TOLERANCE, 0.0, True), (2 * CHECK_TOLERANCE, 0.0, False),
    (0.0, 2 * CHECK_TOLERANCE, False), (1e-3, 0.0, False),
])
def test_the_check_holds_both_halves_to_the_tolerance(batch_offset, single_offset, passes):
    agent, observations, arrays, table = _case()
    runner = _runner(table, batch_offset, single_offset)
    if passes:
        assert _check(runner, agent, observations, arrays, len(observations)) == pytest.approx(batch_offset, abs=1e-7)
    else:
        with pytest.raises(ExportCheckError, match="nothing written"):
            _check(runner, agent, observations, arrays, len(observations))


def test_the_tolerance_is_tight():
    assert CHECK_TOLERANCE == 1e-5 and CHECK_RELATIVE == 1e-4


@pytest.mark.parametrize(("relative", "passes"), [(0.5 * CHECK_RELATIVE, True), (3 * CHECK_RELATIVE, False)])
def test_the_check_allows_float32_spread_relative_to_each_action(relative, passes):
    # every action scaled by (1 + relative): within 1e-5 + 1e-4 |a| only when relative is under 1e-4 (|a| <= 1 here,
    # so an absolute limit alone would pass both or neither)
    agent, observations, arrays, table = _case()
    scaled = {k: (v.astype(np.float64) * (1 + relative)) for k, v in table.items()}
    runner = _runner(scaled)
    if passes:
        assert _check(runner, agent, observations, arrays, len(observations)) == pytest.approx(relative, rel=1e-3)
    else:
        with pytest.raises(ExportCheckError, match=r"for 5 of 6 observations .*limit 1e-05 \+ 0.0001 x \|action\|"):
            _check(runner, agent, observations, arrays, len(observations))


def test_integer_actions_must_be_identical():
    table = {k: np.array(k % 3, np.int64) for k in range(4)}
    agent = _Agent(table)
    observations = [np.array([k, 0.0], np.float32) for k in range(4)]

    def off_by_one_alone(arrays):
        keys = [int(o[0]) for o in arrays[0]]
        return np.array([table[k] + (1 if len(keys) == 1 else 0) for k in keys])

    with pytest.raises(ExportCheckError, match="max \\|difference\\| 1"):
        _check(off_by_one_alone, agent, observations, [np.stack(observations)], 4)


@pytest.mark.parametrize(("space", "dtype"), [
    (gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), np.uint8),
    (gym.spaces.Box(-1.0, 1.0, (3,), np.float64), np.float32),
    (gym.spaces.Box(-1.0, 1.0, (3,), np.float32), np.float32),
])
def test_image_inputs_stay_uint8_and_others_are_float32(space, dtype):
    (only,) = graph_inputs(None, space)
    assert only.name == "obs" and only.dtype == np.dtype(dtype) and only.shape == space.shape


def test_a_refused_write_is_one_line_and_leaves_no_temporary_file(run, tmp_path):
    # A real refusal by the system: the file size limit (EFBIG; Python ignores SIGXFSZ), as a full disk would.
    out = tmp_path / "p.pt"
    done = subprocess.run(["bash", "-c", f"ulimit -f 4; exec {sys.executable} -m zoo export {run} --format "
                           f"torchscript --out {out} --check 0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"zoo: error: cannot write '{out}' (File too large): choose another --out"]
    assert list(tmp_path.iterdir()) == []
