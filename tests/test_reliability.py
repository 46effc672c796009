"""Promises kept under attack: a foreign run directory runs no code, every run resumes, nothing fails silently.

Each test breaks if one promise of docs/promises.md regresses, with real processes where the
promise is about processes: SIGKILL at every phase of a run's life (iteration 0 and mid-write included) and
resume, a config.yaml cut or edited behind the checkpoint's back, damaged metrics, a run directory moved and
copied under a running process, writes past the file-size limit, a read-only run directory, a missing replay
file, and marker files proving that loading, evaluating, recording or plotting a run imports nothing it names.
"""

from __future__ import annotations

import logging
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import TIMINGS, metrics_rows, write_config

from zoo.cli import main
from zoo.errors import NonFiniteError
from zoo.registry import ENV_REGISTRY
from zoo.run import train
from zoo.run.run_dir import load_weights_only

SAC = {
    "exp_name": "s", "seed": 5,
    "env": {"id": "Pendulum-v1"},
    "policy": {"type": "sac", "hidden_sizes": [16, 16], "batch_size": 32},
    "pipeline": {"num_envs": 1, "buffer_size": 5_000, "learning_starts": 150, "steps_per_iteration": 100,
                 "max_env_steps": 700, "eval_every": 3, "eval_episodes": 1, "checkpoint_every": 2},
}
A2C = {
    "exp_name": "r", "seed": 3, "env": {"id": "CartPole-v1"}, "policy": {"type": "a2c"},
    "pipeline": {"num_envs": 4, "rollout_steps": 8, "eval_every": 0, "checkpoint_every": 20},
}

# Runs zoo with a SIGKILL at a chosen moment: "replace:NAME" kills just before the COUNT-th atomic rename onto a
# file whose name starts with NAME (its temporary file is whole, the target not yet replaced: a kill mid-write),
# "after:NAME" just after it, "metrics-row" half-way through writing the COUNT-th metrics row.
KILLER = '''
import os, signal, sys
phase, count, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
calls = [0]

def hit():
    calls[0] += 1
    if calls[0] == count:
        sys.stdout.flush(); sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)

real_replace = os.replace
def replace(src, dst, *a, **k):
    kind, _, prefix = phase.partition(":")
    match = os.path.basename(str(dst)).startswith(prefix) if prefix else False
    if match and kind == "replace":
        hit()
    real_replace(src, dst, *a, **k)
    if match and kind == "after":
        hit()
os.replace = replace

if phase == "metrics-row":
    from zoo.run import metrics_files
    real_append = metrics_files.MetricsWriter.append
    def append(self, row):
        if calls[0] + 1 == count:
            stream = self._stream(metrics_files.METRICS_JSONL)
            stream.write('{"iteration": ' + str(row["iteration"]) + ', "env_st')
            stream.flush()
        hit()
        real_append(self, row)
    metrics_files.MetricsWriter.append = append

from zoo.cli import main
sys.exit(main(args))
'''


def _weights(run: Path) -> dict:
    return load_weights_only(run / "checkpoint.pt")["policy"]


def _same(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    return a == b


def _stray_files(run: Path) -> list[str]:
    """Temporary files, and replay files the checkpoint does not name."""
    named = set(load_weights_only(run / "checkpoint.pt").get("separate_files", {}).values())
    return sorted(p.name for p in run.iterdir()
                  if p.name.endswith(".tmp") or (p.name.startswith("replay-") and p.name not in named))


def _zoo(*args: str, cwd: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zoo", *args], capture_output=True, text=True, timeout=180,
                          cwd=cwd, **kwargs)


def _killed(tmp_path: Path, phase: str, count: int, *args: str) -> None:
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    done = subprocess.run([sys.executable, str(script), phase, str(count), *args], capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == -signal.SIGKILL, f"not killed at {phase} #{count}: {done.returncode}\n{done.stderr}"


@pytest.fixture(scope="module")
def unbroken_sac(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("unbroken")
    return Path(train({**SAC, "runs_dir": str(root)})["run_dir"])


# -- 2. every state a run can be killed in resumes ------------------------------------------------------------
PHASES = [
    ("replace:replay-", 1),  # iteration 0: the (empty) replay file half-written
    ("replace:checkpoint.pt", 1),  # iteration 0: replay written, its checkpoint not
    ("after:checkpoint.pt", 1),  # iteration 0 saved, nothing else yet (the empty replay must load)
    ("metrics-row", 1),  # half of the first metrics row
    ("replace:metrics.csv", 2),  # the CSV widened for the learner's keys, half-written
    ("replace:best_model.pt", 1),
    ("replace:replay-", 2),  # the first periodic checkpoint's replay half-written
    ("replace:checkpoint.pt", 2),  # its replay written, the checkpoint not (the new replay file is stray)
    ("after:checkpoint.pt", 3),
    ("metrics-row", 5),
    ("replace:model.pt", 1),  # the final checkpoint written, the final model not
]


@pytest.mark.slow
@pytest.mark.parametrize(("phase", "count"), PHASES, ids=[f"{p}#{c}" for p, c in PHASES])
def test_a_run_killed_at_any_moment_resumes_to_the_result_of_an_unbroken_run(tmp_path, unbroken_sac, phase, count):
    cfg = write_config(tmp_path, {**SAC, "runs_dir": str(tmp_path / "runs")})
    _killed(tmp_path, phase, count, "run", "--config", str(cfg), "-q")
    run = tmp_path / "runs" / "s"
    done = _zoo("run", "--resume", str(run), "-q")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    # every iteration once, in order, as if never killed
    assert metrics_rows(run, TIMINGS) == metrics_rows(unbroken_sac, TIMINGS)
    assert _same(_weights(run), _weights(unbroken_sac))
    assert (run / "model.pt").is_file() and _stray_files(run) == []


@pytest.mark.slow
def test_a_run_killed_before_it_wrote_its_config_says_nothing_was_trained(tmp_path):
    cfg = write_config(tmp_path, {**SAC, "runs_dir": str(tmp_path / "runs")})
    _killed(tmp_path, "replace:config.yaml", 1, "run", "--config", str(cfg), "-q")
    done = _zoo("run", "--resume", str(tmp_path / "runs" / "s"))
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "before it wrote its config.yaml (nothing was trained)" in done.stderr


@pytest.mark.slow
def test_a_resume_that_changed_the_config_and_was_killed_before_rewriting_config_yaml_resumes_as_asked(
        tmp_path, unbroken_sac):
    reference, broken = tmp_path / "reference", tmp_path / "broken"
    shutil.copytree(unbroken_sac, reference)
    shutil.copytree(unbroken_sac, broken)
    assert train(None, ["pipeline.max_env_steps=900"], resume=reference)["env_steps"] == 900
    # The resume saves a checkpoint with the new budget first, then rewrites config.yaml: killed in between.
    _killed(tmp_path, "after:checkpoint.pt", 1, "run", "--resume", str(broken), "--set",
            "pipeline.max_env_steps=900", "-q")
    assert "max_env_steps: 700" in (broken / "config.yaml").read_text()
    done = _zoo("run", "--resume", str(broken), "-q")
    assert done.returncode == 0, done.stderr
    assert "env_steps=900" in done.stdout and "max_env_steps: 900" in (broken / "config.yaml").read_text()
    assert metrics_rows(broken, TIMINGS) == metrics_rows(reference, TIMINGS)


# -- 4. a config.yaml that no longer matches its checkpoint --------------------------------------------------------
def test_a_truncated_config_is_refused_and_repair_restores_it_from_the_checkpoint(tmp_path, unbroken_sac, capsys):
    run = tmp_path / "run"
    shutil.copytree(unbroken_sac, run)
    text = (run / "config.yaml").read_text()
    cut = text[: text.index("  learning_starts:")]  # on a line boundary: buffer_size and the rest fall back
    (run / "config.yaml").write_text(cut)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    capsys.readouterr()
    assert main(["run", "--resume", str(run), "--set", "pipeline.max_env_steps=800"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pipeline.learning_starts (5000 in config.yaml, 150 in the checkpoint)" \
        in err and "--repair" in err, err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    assert main(["run", "--resume", str(run), "--set", "pipeline.max_env_steps=800", "--repair"]) == 0
    assert "config.yaml restored from the checkpoint" in capsys.readouterr().err
    restored = (run / "config.yaml").read_text()
    assert "learning_starts: 150" in restored and "buffer_size: 5000" in restored and "max_env_steps: 800" in restored


def test_an_edited_value_is_refused_unless_set_asks_for_it(tmp_path, unbroken_sac, capsys):
    run = tmp_path / "run"
    shutil.copytree(unbroken_sac, run)
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(text.replace("learning_starts: 150", "learning_starts: 50"))
    assert main(["run", "--resume", str(run), "--set", "pipeline.max_env_steps=800"]) == 2
    assert "pipeline.learning_starts" in capsys.readouterr().err
    assert main(["run", "--resume", str(run), "--set", "pipeline.max_env_steps=800",
                 "--set", "pipeline.learning_starts=50"]) == 0
    assert "learning_starts: 50" in (run / "config.yaml").read_text()


# -- 4. metrics rows the resume keeps are verified -----------------------------------------------------------------
def test_damaged_metrics_are_refused_and_repair_keeps_the_readable_rows_and_says_so(tmp_path, unbroken_sac,
                                                                                     capsys):
    run = tmp_path / "run"
    shutil.copytree(unbroken_sac, run)
    lines = (run / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    (run / "metrics.jsonl").write_bytes(b"".join([*lines[:2], b"garbage\n", *lines[3:]]))  # row 3 gone
    assert main(["run", "--resume", str(run), "--set", "pipeline.max_env_steps=800"]) == 2
    assert "metrics.jsonl' is damaged at line 3" in capsys.readouterr().err
    assert main(["run", "--resume", str(run), "--set", "pipeline.max_env_steps=800", "--repair"]) == 0
    err = capsys.readouterr().err
    assert "kept 6 rows of iterations 1-7, dropped 1 unreadable line(s); 1 iteration(s) have no row" in err
    assert [row["iteration"] for row in metrics_rows(run, TIMINGS)] == [1, 2, 4, 5, 6, 7, 8]
    assert (run / "metrics.csv").read_text().count("\n") == 8  # the CSV rebuilt from the same rows


# -- 4. a run directory moved and copied under a running process -----------------------------------------------
def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_run_directory_moved_and_copied_under_a_running_process_gets_no_write_from_it(tmp_path):
    cfg = write_config(tmp_path, {**A2C, "runs_dir": str(tmp_path / "runs"), "pipeline": {
        **A2C["pipeline"], "max_env_steps": 10**8}})
    run, moved = tmp_path / "runs" / "r", tmp_path / "runs" / "moved"
    process = subprocess.Popen([sys.executable, "-m", "zoo", "run", "--config", str(cfg)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ((run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().count("\n") >= 45):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.01)
        process.send_signal(signal.SIGSTOP)  # a consistent copy
        run.rename(moved)
        shutil.copytree(moved, run)
        copied = _tree(run)
        rows_before = len(metrics_rows(moved, TIMINGS))
        process.send_signal(signal.SIGCONT)
        while len(metrics_rows(moved, TIMINGS)) < rows_before + 60:  # three more checkpoints
            assert time.monotonic() < deadline + 60 and process.poll() is None
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.communicate()
    assert process.returncode == 143, err
    assert _tree(run) == copied  # the copy is the second owner's to take: nothing of the first process's in it
    assert "was moved or replaced while this run trains in it" in err and str(moved.resolve()) in err
    assert load_weights_only(moved / "checkpoint.pt")["loop"]["iteration"] == len(metrics_rows(moved, TIMINGS))
    for each in (run, moved):
        assert _zoo("run", "--resume", str(each), "--set", f"pipeline.max_env_steps={32 * 200}",
                    "-q").returncode == 0


# -- 6. writes the system refuses -----------------------------------------------------------------------------
@pytest.mark.slow
def test_a_write_past_the_file_size_limit_is_one_line_and_keeps_the_checkpoint(tmp_path):
    config = {**SAC, "runs_dir": str(tmp_path / "runs"), "pipeline": {
        **SAC["pipeline"], "learning_starts": 10**6, "steps_per_iteration": 500, "max_env_steps": 20_000,
        "checkpoint_every": 10, "eval_every": 0, "buffer_size": 20_000}}
    cfg = write_config(tmp_path, config)

    def limit() -> None:  # the replay file of iteration 10 (5000 transitions, ~170 kB) does not fit
        resource.setrlimit(resource.RLIMIT_FSIZE, (150_000, 150_000))

    done = subprocess.run([sys.executable, "-m", "zoo", "run", "--config", str(cfg), "-q"], capture_output=True,
                          text=True, timeout=180, preexec_fn=limit)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "cannot write" in done.stderr and "replay-000000010.pt" in done.stderr and "ulimit -f" in done.stderr
    run = tmp_path / "runs" / "s"
    assert load_weights_only(run / "checkpoint.pt")["loop"]["iteration"] == 0 and _stray_files(run) == []
    done = _zoo("run", "--resume", str(run), "-q", "--set", "pipeline.max_env_steps=6000")
    assert done.returncode == 0, done.stderr


def _mount(point: Path, *options: str) -> bool:
    point.mkdir(exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("size=8m", *options)), "tmpfs", str(point)],
                          capture_output=True).returncode == 0


def test_resume_of_a_read_only_run_directory_is_one_line(tmp_path, unbroken_sac):
    point = tmp_path / "mount"
    if not _mount(point):
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN)")
    try:
        shutil.copytree(unbroken_sac, point / "run")
        assert subprocess.run(["mount", "-o", "remount,ro", str(point)]).returncode == 0
        done = _zoo("run", "--resume", str(point / "run"), "--set", "pipeline.max_env_steps=800")
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
        assert "is not writable (Read-only file system)" in done.stderr and "copy it" in done.stderr
    finally:
        subprocess.run(["umount", str(point)])


# -- 7. messages ------------------------------------------------------------------------------------------------
def test_a_missing_replay_file_is_named_with_the_way_to_resume_without_it(tmp_path, unbroken_sac, capsys):
    run = tmp_path / "run"
    shutil.copytree(unbroken_sac, run)
    replay = next(run.glob("replay-*.pt"))
    replay.unlink()
    assert main(["run", "--resume", str(run), "--set", "pipeline.max_env_steps=800"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"'{replay}' (the replay saved with checkpoint.pt) is missing" in err and "save_replay=false" in err
    assert main(["run", "--resume", str(run), "--set", "pipeline.max_env_steps=800",
                 "--set", "pipeline.save_replay=false"]) == 0


class NanPendulum(gym.Wrapper):
    def __init__(self) -> None:
        super().__init__(gym.make("Pendulum-v1"))
        self.steps = 0

    def step(self, action):
        self.steps += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, float("nan") if self.steps > 250 else reward, terminated, truncated, info


def test_a_nan_in_an_sac_run_names_the_learning_rates_sac_has(tmp_path):
    ENV_REGISTRY.register("zoo-test-nan-pendulum", NanPendulum, source="tests")
    try:
        with pytest.raises(NonFiniteError) as caught:
            train({**SAC, "runs_dir": str(tmp_path), "env": {"id": "zoo-test-nan-pendulum"}})
    finally:
        ENV_REGISTRY.unregister("zoo-test-nan-pendulum")
    message = str(caught.value)
    assert "lower policy.actor_learning_rate / policy.critic_learning_rate / policy.alpha_learning_rate" in message
    assert "policy.learning_rate " not in message


def test_an_interrupted_rank_without_a_run_directory_does_not_print_resume_none(monkeypatch, capsys):
    import zoo.run.train

    summary = {"reason": "interrupted", "exit_code": 143, "run_dir": None, "env_steps": 10, "wall_time": 1.0,
               "episode_return_mean": None}
    monkeypatch.setattr(zoo.run, "train", lambda *args, **kwargs: summary)
    assert main(["run", "--config", "configs/ppo_cartpole.py"]) == 143
    out = capsys.readouterr().out
    assert "--resume None" not in out and "rank 0 saved the checkpoint" in out


def test_async_envs_say_when_saving_and_resuming_that_the_resume_is_not_exact(tmp_path, caplog):
    config = {**A2C, "runs_dir": str(tmp_path), "pipeline": {**A2C["pipeline"], "vector_mode": "async",
                                                             "num_envs": 2, "max_env_steps": 64}}
    with caplog.at_level(logging.WARNING, logger="zoo"):
        summary = train(config)
        assert any("cannot be saved with the checkpoint" in r.message and "not exact" in r.message
                   for r in caplog.records)
        caplog.clear()
        train(None, ["pipeline.max_env_steps=128"], resume=summary["run_dir"])
        assert any("start fresh episodes, so this resume is not exact" in r.message for r in caplog.records)


# -- 1. a foreign run directory runs no code ---------------------------------------------------------------------
EVIL = '''
from pathlib import Path
Path(__file__).with_name("MARKER").write_text("imported")
from zoo.policies import PPOPolicy
from zoo.registry import POLICY_REGISTRY
if "evil_ppo" not in POLICY_REGISTRY:
    POLICY_REGISTRY.register("evil_ppo", type("EvilPPO", (PPOPolicy,), {}))
'''
EVIL_ENV = '''
from pathlib import Path
import gymnasium as gym
Path(__file__).with_name("MARKER").write_text("imported")
if "EvilCartPole-v0" not in gym.registry:
    gym.register("EvilCartPole-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv", max_episode_steps=50)
'''


@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> dict[str, Path]:
    """Runs that name a module which leaves a marker file when imported: one only imports it (a built-in policy),
    one takes its policy from it, one its env (gymnasium's ``module:`` env ids). Trained in subprocesses: the
    test process never imports the module, so each check below could see an import."""
    root = tmp_path_factory.mktemp("foreign")
    (root / "zoo_evil_module.py").write_text(EVIL)
    (root / "zoo_evil_env.py").write_text(EVIL_ENV)
    base = {"runs_dir": str(root / "runs"), "import_names": ["zoo_evil_module"], "import_paths": [str(root)],
            "env": {"id": "CartPole-v1"}, "policy": {"type": "ppo", "epochs": 1, "minibatch_size": 32},
            "pipeline": {"num_envs": 2, "rollout_steps": 16, "max_env_steps": 128, "eval_every": 2}}
    runs = {"imports": base, "policy": {**base, "policy": {**base["policy"], "type": "evil_ppo"}},
            "env": {**base, "import_names": [], "import_paths": [], "env": {"id": "zoo_evil_env:EvilCartPole-v0"}}}
    for name, config in runs.items():
        done = _zoo("run", "--config", str(write_config(root, {**config, "exp_name": name}, f"{name}.py")), "-q",
                    cwd=root)
        assert done.returncode == 0, done.stderr
    return {"root": root, **{name: root / "runs" / name for name in runs}}


def _reads_without_import(foreign: dict[str, Path], *args: str) -> subprocess.CompletedProcess:
    marker = foreign["root"] / "MARKER"
    marker.unlink(missing_ok=True)
    done = _zoo(*args, cwd=foreign["root"])  # cwd: the module is importable from here (python -m puts it on sys.path)
    assert not marker.exists(), f"{args} imported a module the run directory names\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.parametrize("command", [
    ["eval", "{run}", "--episodes", "1"],
    ["eval", "{run}", "--episodes", "1", "--which", "best"],
    ["eval", "{run}", "--episodes", "1", "--video", "{root}/videos", "--video-format", "gif"],
    ["plot", "{run}"],
    ["-c", "import zoo; zoo.load('{run}').predict([0.0, 0.0, 0.0, 0.0])"],
    ["export", "{run}", "--format", "torchscript", "--out", "{root}/policy.pt", "--check", "16"],
], ids=["eval", "eval-best", "eval-video", "plot", "load", "export"])
@pytest.mark.slow
def test_reading_a_foreign_run_imports_nothing_it_names(foreign, command):
    args = [part.format(run=foreign["imports"], root=foreign["root"]) for part in command]
    if args[0] == "-c":
        marker = foreign["root"] / "MARKER"
        marker.unlink(missing_ok=True)
        done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                              cwd=foreign["root"])
        assert done.returncode == 0 and not marker.exists(), done.stderr
        return
    done = _reads_without_import(foreign, *args)
    if args[0] != "eval" or "--video" not in args:  # a video also needs imageio and pygame, not installed here
        assert done.returncode == 0, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("which", ["policy", "env"])
def test_a_run_that_needs_its_code_is_refused_in_one_line_unless_trusted(foreign, which):
    exported = _reads_without_import(foreign, "export", str(foreign[which]), "--format", "torchscript", "--out",
                                     str(foreign["root"] / f"refused_{which}.pt"))
    assert exported.returncode == 2 and "--trust-imports" in exported.stderr, exported.stderr
    assert not (foreign["root"] / f"refused_{which}.pt").exists()
    done = _reads_without_import(foreign, "eval", str(foreign[which]), "--episodes", "1")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "--trust-imports" in done.stderr and ("zoo_evil_module" in done.stderr or "zoo_evil_env" in done.stderr)
    marker = foreign["root"] / "MARKER"
    trusted = _zoo("eval", str(foreign[which]), "--episodes", "1", "--trust-imports", cwd=foreign["root"])
    assert trusted.returncode == 0 and marker.exists(), trusted.stderr  # the marker does show an import


def test_rewards_of_the_killed_phases_are_finite_and_the_reference_learned(unbroken_sac):
    rows = metrics_rows(unbroken_sac, TIMINGS)
    assert len(rows) == 7 and all(np.isfinite(row["episode_return_mean"] or 0.0) for row in rows)
    assert any(row.get("critic_loss") is not None for row in rows)  # the phases cover learning iterations too


# -- a bug in zoo reads as a bug, a checkpoint that does not fit as the one-line error --------------------------
def test_a_bug_during_restore_is_reported_as_a_bug_not_as_a_misfit(tmp_path, unbroken_sac, capsys, monkeypatch):
    from zoo.policies import SACPolicy

    run = tmp_path / "run"
    shutil.copytree(unbroken_sac, run)

    def broken(self, state):
        raise TypeError("'NoneType' object is not subscriptable")  # what a slip in zoo's own code raises

    monkeypatch.setattr(SACPolicy, "load_state_dict", broken)
    assert main(["run", "--resume", str(run), "--set", "pipeline.max_env_steps=800"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the replay buffer's info line
    assert err.startswith("zoo: internal error: TypeError") and "bug" in err and "ZOO_DEBUG=1" in err, err
    assert "does not fit" not in err
    monkeypatch.setenv("ZOO_DEBUG", "1")
    assert main(["run", "--resume", str(run), "--set", "pipeline.max_env_steps=800"]) == 1
    assert "Traceback" in capsys.readouterr().err
