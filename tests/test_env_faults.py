"""A user's env that hangs or raises never holds a run hostage, and is reported as the env's fault, not zoo's.

The envs are real registered gymnasium envs of a module written next to each test's config (``faulty_envs``,
found through ``import_names``/``module:EnvId``): one that blocks forever in ``step`` after some steps while a
marker file exists, one that raises in ``step``/``reset``, one that returns observations of the wrong shape. The
hang tests send a real SIGTERM to a real ``zoo run`` process and resume what it saved.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import metrics_rows

from zoo.cli import main
from zoo.envs import EnvSpec, make_env, make_vector_env
from zoo.envs.calls import STOP_GRACE_S, EnvCallInterrupted, GuardedCalls, watch_calls
from zoo.errors import EnvError, ZooError
from zoo.pipelines.evaluator import evaluate_policy
from zoo.run.run_dir import load_weights_only

FAULTY_ENVS = '''
import os, time
import gymnasium as gym
import numpy as np


class Faulty(gym.Env):
    """A 4-d random walk; ``fault`` picks how it misbehaves from its ``after``-th step on."""

    def __init__(self, fault="none", after=0, marker="", continuous=False):
        self.fault, self.after, self.marker = fault, after, marker
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (4,), np.float32)
        self.action_space = (gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous
                             else gym.spaces.Discrete(2))
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.fault == "raise-reset":
            raise RuntimeError("no reset today")
        self.state = self.np_random.normal(size=4).astype(np.float32)
        return self.state, {}

    def step(self, action):
        self.steps += 1
        if self.steps >= self.after:
            if self.fault == "hang" and os.path.exists(self.marker):
                open(self.marker + ".hanging", "w").close()
                while True:
                    time.sleep(3600)
            if self.fault == "raise-step":
                raise ValueError("boom")
            if self.fault == "shape":
                return np.zeros(3, np.float32), 0.0, False, False, {}
        self.state = np.clip(self.state + self.np_random.normal(size=4).astype(np.float32) * 0.1, -5, 5)
        return self.state, float(self.state[0]), False, False, {}


if "Faulty-v0" not in gym.registry:
    gym.register("Faulty-v0", entry_point=Faulty, max_episode_steps=25)
'''

# compile off: a budget of 10**6 env steps makes ``auto`` compile, while the unbroken reference runs (a short
# budget) train eager: float-level differences
PPO = {"policy": {"type": "ppo", "hidden_sizes": [8], "epochs": 1, "minibatch_size": 32, "anneal_lr": False,
                  "compile": "off"},
       "pipeline": {"num_envs": 2, "normalize_obs": True, "normalize_reward": True, "rollout_steps": 16,
                    "eval_every": 0, "checkpoint_every": 1000, "max_env_steps": 10**6, "log_every_s": 1000.0}}
SAC = {"policy": {"type": "sac", "hidden_sizes": [8], "batch_size": 16, "compile": "off"},
       "pipeline": {"num_envs": 1, "buffer_size": 60, "learning_starts": 20, "steps_per_iteration": 25,
                    "eval_every": 0, "checkpoint_every": 1000, "max_env_steps": 10**6, "log_every_s": 1000.0}}
DPPO = {"policy": {"type": "dppo", "hidden_sizes": [8], "epochs": 1, "minibatch_size": 32},
        "pipeline": {"world_size": 2, "num_envs": 2, "rollout_steps": 16, "eval_every": 0, "checkpoint_every": 1000,
                     "max_env_steps": 10**6, "log_every_s": 1000.0}}


def _config(tmp_path: Path, base: dict, **env_kwargs) -> Path:
    """A config file running ``faulty_envs:Faulty-v0`` with ``env_kwargs``, beside the env module."""
    (tmp_path / "faulty_envs.py").write_text(FAULTY_ENVS)
    config = {**base, "exp_name": "f", "seed": 1, "runs_dir": str(tmp_path / "runs"), "import_names": ["faulty_envs"],
              "env": {"id": "faulty_envs:Faulty-v0", "kwargs": env_kwargs}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def _zoo(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zoo", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def _hang_then_sigterm(tmp_path: Path, base: dict, after: int, continuous: bool = False) -> tuple[int, str, Path]:
    """Start a run whose env hangs in its ``after``-th step, SIGTERM it once it hangs; (exit code, stderr, run)."""
    marker = tmp_path / "hang"
    marker.touch()
    config = _config(tmp_path, base, fault="hang", after=after, marker=str(marker), continuous=continuous)
    process = subprocess.Popen([sys.executable, "-m", "zoo", "run", "--config", str(config)], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not Path(f"{marker}.hanging").exists():
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        time.sleep(0.3)  # well inside the call that never returns
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
        assert time.monotonic() - signalled < STOP_GRACE_S + 10  # the grace, the save and the exit
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    marker.unlink()  # the resumed run's env behaves
    return process.returncode, err, tmp_path / "runs" / "f"


def _same(a, b) -> bool:
    """Nested states equal, tensors and arrays element by element."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def _unbroken(tmp_path: Path, base: dict, budget: int, **env_kwargs) -> Path:
    """The run directory of the same run with an env that behaves, stopped by its budget (a process like the
    interrupted one: the same BLAS threads, so the same numbers)."""
    folder = tmp_path / "unbroken"
    folder.mkdir()
    config = _config(folder, {**base, "pipeline": {**base["pipeline"], "max_env_steps": budget}}, **env_kwargs)
    done = _zoo("run", "--config", str(config), "-q", cwd=folder)
    assert done.returncode == 0, done.stderr
    return folder / "runs" / "f"


def _resume_and_check(tmp_path: Path, run: Path, saved_iteration: int, budget: int) -> None:
    """The run resumes from the saved iteration, says once that the resume is not exact, and ends with every
    iteration's metrics row exactly once."""
    done = _zoo("run", "--resume", str(run), "--set", f"pipeline.max_env_steps={budget}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("a stop signal interrupted them mid-call") == 1, done.stderr
    assert "not exact" in done.stderr
    rows = metrics_rows(run)
    assert [row["iteration"] for row in rows] == list(range(1, len(rows) + 1))
    assert len(rows) > saved_iteration
    assert load_weights_only(run / "checkpoint.pt")["loop"]["iteration"] == len(rows)


# -- 3. a hung env never holds a run hostage ----------------------------------------------------------------------
@pytest.mark.slow
def test_sigterm_stops_a_ppo_run_hung_in_step_and_saves_its_last_completed_iteration(tmp_path):
    # 2 envs x 16 steps per iteration: the 40th step of each env is in iteration 3; iterations 1 and 2 completed.
    code, err, run = _hang_then_sigterm(tmp_path, PPO, after=40)
    assert code == 143, err
    assert ("a stop signal interrupted step() of env 'faulty_envs:Faulty-v0': iteration 3 is abandoned and "
            "iteration 2 saved") in err
    state = load_weights_only(run / "checkpoint.pt")
    assert (state["loop"]["iteration"], state["loop"]["env_steps"], state["metrics_rows"]) == (2, 64, 2)
    assert state["components"]["collector"]["env"] is None  # the envs were mid-step: not saved
    assert [row["iteration"] for row in metrics_rows(run)] == [1, 2]
    # the state of iteration 2 exactly, normalisers' statistics included (the abandoned rollout updated them)
    unbroken = load_weights_only(_unbroken(tmp_path, PPO, 64) / "checkpoint.pt")
    assert _same(state["policy"], unbroken["policy"])
    saved, reference = state["components"]["collector"], unbroken["components"]["collector"]
    assert _same(saved["obs_normalizer"], reference["obs_normalizer"])
    assert _same(saved["reward_normalizer"]["return_normalizer"]["return_rms"],
                 reference["reward_normalizer"]["return_normalizer"]["return_rms"])
    _resume_and_check(tmp_path, run, 2, budget=128)


@pytest.mark.slow
def test_sigterm_stops_an_sac_run_hung_in_step_and_undoes_its_partial_iteration(tmp_path):
    # 25 steps per iteration, learning from step 20, a buffer of 60 that wraps in iteration 3: the hang at the
    # 70th step interrupts iteration 3 after it added (and overwrote) rows and learned from them.
    code, err, run = _hang_then_sigterm(tmp_path, SAC, after=70, continuous=True)
    assert code == 143, err
    state = load_weights_only(run / "checkpoint.pt")
    assert (state["loop"]["iteration"], state["loop"]["env_steps"], state["metrics_rows"]) == (2, 50, 2)
    replay = load_weights_only(run / state["separate_files"]["replay"])
    # iteration 1's 25 steps and iteration 2's, minus the autoreset step after the episode that ended at step 25
    assert len(replay["reward"]) == 49
    # weights, optimisers and replay rows exactly as an unbroken run had them after iteration 2
    unbroken = _unbroken(tmp_path, SAC, 50, continuous=True)
    reference = load_weights_only(unbroken / "checkpoint.pt")
    assert _same(state["policy"], reference["policy"])
    assert _same(replay, load_weights_only(unbroken / reference["separate_files"]["replay"]))
    _resume_and_check(tmp_path, run, 2, budget=125)


@pytest.mark.slow
def test_sigterm_stops_dppo_workers_when_one_hangs_in_step(tmp_path):
    code, err, run = _hang_then_sigterm(tmp_path, DPPO, after=40)
    assert code == 143, err
    state = load_weights_only(run / "checkpoint.pt")
    assert (state["loop"]["iteration"], state["loop"]["env_steps"], state["metrics_rows"]) == (2, 128, 2)
    assert [row["iteration"] for row in metrics_rows(run)] == [1, 2]
    _resume_and_check(tmp_path, run, 2, budget=256)


def test_an_env_call_past_call_timeout_s_stops_the_run_in_one_line_keeping_the_checkpoint(tmp_path, capsys):
    marker = tmp_path / "hang"
    marker.touch()
    config = _config(tmp_path, PPO, fault="hang", after=40, marker=str(marker))
    start = time.monotonic()
    assert main(["run", "--config", str(config), "--set", "env.call_timeout_s=0.5", "-q"]) == 2
    assert time.monotonic() - start < 30
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("zoo: error: env 'faulty_envs:Faulty-v0' did not return from step() within 0.5 s "
                       "(env.call_timeout_s): fix the env or raise env.call_timeout_s")
    state = load_weights_only(tmp_path / "runs" / "f" / "checkpoint.pt")
    assert state["loop"]["iteration"] == 0  # the checkpoint the run started with, not a mid-iteration state


def test_call_timeout_s_0_is_no_limit(tmp_path, capsys):
    config = _config(tmp_path, {**PPO, "pipeline": {**PPO["pipeline"], "max_env_steps": 64}})
    assert main(["run", "--config", str(config), "--set", "env.call_timeout_s=0", "-q"]) == 0, capsys.readouterr()
    assert len(metrics_rows(tmp_path / "runs" / "f")) == 2


def test_a_stop_requested_before_a_call_interrupts_it_after_the_grace(monkeypatch):
    # The signal came between env calls; the next call hangs: it is interrupted after STOP_GRACE_S.
    monkeypatch.setattr("zoo.envs.calls.STOP_GRACE_S", 0.3)
    venv = GuardedCalls(gym.make_vec("CartPole-v1", 1, vectorization_mode="sync"), "CartPole-v1")
    venv.env.step = lambda actions: time.sleep(30)
    from zoo.envs.calls import request_stop

    start = time.monotonic()
    with watch_calls(None), pytest.raises(EnvCallInterrupted, match="step"):
        request_stop()
        venv.step(np.zeros(1, dtype=np.int64))
    assert time.monotonic() - start < 5
    assert venv.broken


# -- 4. the user's env is not zoo's bug ---------------------------------------------------------------------------
@pytest.mark.parametrize("fault, line", [
    ("raise-step", "zoo: error: env 'faulty_envs:Faulty-v0' raised in step(): ValueError: boom (ZOO_DEBUG=1 shows "
                   "the traceback)"),
    ("raise-reset", "zoo: error: env 'faulty_envs:Faulty-v0' raised in reset(): RuntimeError: no reset today "
                    "(ZOO_DEBUG=1 shows the traceback)"),
    ("shape", "zoo: error: env 'faulty_envs:Faulty-v0' raised in step(): ValueError: {} (ZOO_DEBUG=1 shows the "
              "traceback)"),
])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_env_that_raises_is_one_line_naming_it_not_an_internal_error(tmp_path, capsys, fault, line, mode):
    # a wrong shape, as gymnasium's sync and async vector envs put it
    line = line.format({"async": "could not broadcast input array from shape (3,) into shape (4,)",
                        "sync": "Output array is the wrong shape"}[mode])
    config = _config(tmp_path, PPO, fault=fault, after=40)
    assert main(["run", "--config", str(config), "--set", f"pipeline.vector_mode={mode}", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [line]
    state = load_weights_only(tmp_path / "runs" / "f" / "checkpoint.pt")
    assert state["loop"]["iteration"] == 0


def test_an_evaluation_env_that_raises_is_one_line_naming_it(tmp_path):
    _config(tmp_path, PPO)
    sys.path.insert(0, str(tmp_path))
    try:
        spec = EnvSpec("faulty_envs:Faulty-v0", {"fault": "raise-step", "after": 3})
        policy = SimpleNamespace(device=torch.device("cpu"), evaluate=lambda obs: np.zeros(len(obs), np.int64))
        with pytest.raises(EnvError) as caught:
            evaluate_policy(policy, spec, 2, seed=0, vector_mode="sync")
    finally:
        sys.path.remove(str(tmp_path))
    assert str(caught.value) == ("env 'faulty_envs:Faulty-v0' raised in step(): ValueError: boom (ZOO_DEBUG=1 "
                                 "shows the traceback)")


IMPALA = {"policy": {"type": "impala", "hidden_sizes": [8]},
          "pipeline": {"type": "parallel_async", "num_actors": 2, "num_envs": 2, "unroll_length": 8,
                       "batch_unrolls": 2, "queue_size": 4, "eval_every": 0, "max_env_steps": 3_200}}


def test_an_impala_actor_whose_env_keeps_raising_stops_the_run_in_one_line_naming_the_env(tmp_path, capsys):
    # from its 4th step on, inside every incarnation's first unroll (8 steps): no restart ever delivers one
    config = _config(tmp_path, IMPALA, fault="raise-step", after=4)
    assert main(["run", "--config", str(config), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(("zoo: error: actor 0 of 2 failed: ", "zoo: error: actor 1 of 2 "
                                                                                    "failed: ")), err
    assert ("env 'faulty_envs:Faulty-v0' raised in step(): ValueError: boom (ZOO_DEBUG=1 shows the traceback), 3 "
            "times in a row") in err[0]  # restarted as for any passing failure (a crashed simulator)


def test_a_bug_in_zoo_s_own_wrappers_is_still_an_internal_error(tmp_path, capsys, monkeypatch):
    def broken(self, *args, **kwargs):
        raise KeyError("zoo's own bug")

    monkeypatch.setattr("zoo.envs.wrappers.EpisodeStats.record_steps", broken)
    config = _config(tmp_path, PPO)
    assert main(["run", "--config", str(config), "-q"]) == 1
    assert "zoo: internal error: KeyError" in capsys.readouterr().err


def test_zoo_debug_shows_the_env_s_own_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ZOO_DEBUG", "1")
    config = _config(tmp_path, PPO, fault="raise-step", after=3)
    assert main(["run", "--config", str(config), "-q"]) == 2
    err = capsys.readouterr().err
    assert 'raise ValueError("boom")' in err and "faulty_envs.py" in err


# -- 11. a missing module is named, with the install that provides it ---------------------------------------------
@pytest.mark.parametrize("module", ["mujoco", "packaging"])
def test_a_missing_module_of_a_mujoco_env_is_named_with_the_extra_that_installs_it(monkeypatch, module):
    # MuJoCo present (a stand-in where it is not installed) but the module ``module`` missing, as after a pip
    # install of an extra that forgot it: "import packaging" fails as if it were not installed.
    if module != "mujoco":
        try:
            import mujoco  # noqa: F401
        except ImportError:  # and what MuJoCo's own package installs
            for name in ("mujoco", "glfw"):
                monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module, None)
    for name in [name for name in sys.modules if name.startswith(("gymnasium.envs.mujoco.", "packaging."))]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ZooError) as caught:
        make_env("Hopper-v5")
    assert str(caught.value) == (f"env 'Hopper-v5' needs the module '{module}', which is not installed: "
                                 f"pip install 'zoo-rl[mujoco]'")


def test_a_missing_module_that_no_extra_installs_is_named_with_its_own_package(tmp_path, monkeypatch):
    (tmp_path / "needs_cv2.py").write_text("import cv2\nimport gymnasium as gym\nEnv = gym.Env\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "cv2", None)
    gym.register("NeedsCv2-v0", entry_point="needs_cv2:Env")
    try:
        with pytest.raises(ZooError) as caught:
            make_vector_env("NeedsCv2-v0", 1)
    finally:
        gym.registry.pop("NeedsCv2-v0")
    assert str(caught.value) == ("env 'NeedsCv2-v0' needs the module 'cv2', which is not installed: "
                                 "pip install opencv-python-headless")


def test_every_env_extra_installs_what_gymnasium_says_its_envs_import():
    import importlib.metadata
    import re

    import tomllib

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[\s<>=!;\[]", req, maxsplit=1)[0].lower().replace("_", "-") for req in requirements}

    gym_requires = importlib.metadata.requires("gymnasium")
    for extra in ("mujoco", "atari"):
        wanted = [req.split(";")[0] for req in gym_requires if f'extra == "{extra}"' in req]
        assert names(wanted) <= names(extras[extra]) | names(["gymnasium"]), extra
        assert f"gymnasium[{extra}]" in " ".join(extras[extra])


def test_guarded_calls_pass_results_and_zoo_errors_through_unchanged():
    venv = make_vector_env("CartPole-v1", 2, seed=0, mode="sync")
    assert isinstance(venv.env, GuardedCalls)
    obs, _ = venv.reset()
    assert obs.shape == (2, 4)
    assert venv.step(np.zeros(2, dtype=np.int64))[0].shape == (2, 4)
    venv.close()
    with pytest.raises(EnvError):
        raise EnvError("x")
    assert issubclass(EnvError, ZooError)
