"""``zoo tune``: the ``tune`` section and its refusals, studies of tiny CartPole PPO trials (real ``zoo run`` child
processes), pruning through the trial's callbacks, and a study killed (SIGTERM, then SIGKILL) and started again.

The command is driven through ``zoo.tune.add_parser`` and ``main`` on a parser of its own, as ``zoo/cli.py`` wires
them, with the CLI's handling of ZooError (one line, exit 2).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from helpers import metrics_rows  # noqa: E402

from zoo.config import load_config_file, parse_override  # noqa: E402
from zoo.config.resolve import resolve_config  # noqa: E402
from zoo.errors import ZooError  # noqa: E402
from zoo.run.run_dir import RunDirectory  # noqa: E402
from zoo.tune import add_parser, main  # noqa: E402
from zoo.tune import space as space_module  # noqa: E402
from zoo.tune.space import DEFAULT_SPACES, Parameter, check_settings, parse_settings  # noqa: E402
from zoo.tune.trials import objective  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SPACE = ('{"policy.learning_rate": dict(log_uniform=[1e-4, 1e-2]), '
         '"policy.activation": dict(categorical=["tanh", "relu"])}')


def _config(tmp_path: Path, budget: int = 2048, tune: str = f"dict(space={SPACE})", extra: str = "") -> Path:
    path = tmp_path / "tiny.py"
    path.write_text(
        f"config = dict(exp_name='tiny', runs_dir={str(tmp_path / 'runs')!r}, env=dict(id='CartPole-v1'), "
        f"policy=dict(type='ppo', epochs=1), pipeline=dict(num_envs=4, rollout_steps=32, max_env_steps={budget}, "
        f"eval_every=4, eval_episodes=2{extra}), tune={tune})\n")
    return path


# What zoo/cli.py does with the command: parse, call main, a ZooError is one line and exit code 2.
HELPER = """
import argparse, sys
from zoo.errors import ZooError
from zoo.tune import add_parser, main
parser = argparse.ArgumentParser(prog="zoo")
add_parser(parser.add_subparsers(dest="command"))
try:
    sys.exit(main(parser.parse_args(["tune", *sys.argv[1:]])))
except ZooError as error:
    print(f"zoo: error: {error}", file=sys.stderr)
    sys.exit(2)
"""


def tune(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="zoo")
    add_parser(parser.add_subparsers(dest="command"))
    try:
        return main(parser.parse_args(["tune", *argv]))
    except ZooError as error:
        print(f"zoo: error: {error}", file=sys.stderr)
        return 2


def _study(tmp_path: Path, name: str = "tiny") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 'runs' / name / 'study.db'}")


def _iterations_once(run: Path) -> bool:
    return [row["iteration"] for row in metrics_rows(run)] == list(range(1, len(metrics_rows(run)) + 1))


def _sessions(run: Path) -> int:
    return len(json.loads((run / "environment.json").read_text())["sessions"])


# -- the tune section -----------------------------------------------------------------------------------------
def test_the_section_parses_into_parameters_and_normalises_with_its_defaults():
    settings = parse_settings({"space": {"policy.learning_rate": {"log_uniform": [1e-5, 1e-2]},
                                         "policy.epochs": {"int": [1, 20]},
                                         "policy.hidden_sizes": {"categorical": [[64, 64], [256, 256]]}},
                               "pruner": {"median": {"n_startup_trials": 2}}}, "ppo", seeds=3)
    assert [(p.key, p.kind) for p in settings.parameters] == [
        ("policy.learning_rate", "log_uniform"), ("policy.epochs", "int"), ("policy.hidden_sizes", "categorical")]
    assert (settings.metric, settings.direction, settings.objective, settings.seeds) == (
        "eval_return_mean", "maximize", "best", 3)
    assert (settings.pruner, settings.pruner_kwargs, settings.budget, settings.sampler) == (
        "median", {"n_startup_trials": 2}, None, "tpe")
    assert parse_settings(settings.section(), "ppo") == settings  # the normalised section reads back the same
    assert parse_settings(None, "sac").parameters[0].key == "policy.actor_learning_rate"  # the default space


def test_list_choices_travel_through_optuna_as_json_and_every_value_survives_set():
    hidden = Parameter("policy.hidden_sizes", "categorical", choices=([64, 64], [256, 256]), encoded=True)
    study = optuna.create_study()
    for _ in range(4):
        assert hidden.config_value(hidden.suggest(study.ask())) in ([64, 64], [256, 256])
    # zoo tune passes each value as --set KEY=<JSON>: a string that looks like a number or a bool stays a string.
    for value in ("true", "1e-3", "null", "relu", 1e-05, 3, True, None, [64, 64], -0.5):
        assert parse_override(f"policy.x={json.dumps(value)}") == ("policy.x", value)


@pytest.mark.parametrize("config, policy", [("ppo_cartpole.py", "ppo"), ("a2c_cartpole.py", "a2c"),
                                            ("dppo_cartpole.py", "dppo"), ("impala_cartpole.py", "impala"),
                                            ("sac_pendulum.py", "sac"), ("sac_ace_pendulum.py", "sac_ace"),
                                            ("td3_pendulum.py", "td3"), ("dqn_cartpole.py", "dqn"),
                                            ("dqn_acrobot.py", "dqn")])
def test_every_default_space_fits_its_policy(config, policy):
    cfg = resolve_config(load_config_file(CONFIGS / config), ["pipeline.eval_every=10"], CONFIGS)
    assert cfg.policy.type == policy
    settings = parse_settings(cfg.get("tune"), policy)
    assert {p.key for p in settings.parameters} == set(DEFAULT_SPACES[policy])
    check_settings(settings, cfg, CONFIGS)  # every bound and choice is a value the config accepts


def test_the_objective_is_the_best_or_the_final_row_of_the_metric(tmp_path):
    values = [None, 3.0, 7.0, None, 5.0]
    (tmp_path / "metrics.jsonl").write_text("".join(
        json.dumps({"iteration": i + 1, "eval_return_mean": v, "episode_return_mean": -v if v else None}) + "\n"
        for i, v in enumerate(values)))

    def settings(**section):
        return parse_settings({"space": {"policy.gamma": {"uniform": [0.9, 0.99]}}, **section}, "ppo")

    assert objective(tmp_path, settings()) == 7.0
    assert objective(tmp_path, settings(objective="final")) == 5.0
    assert objective(tmp_path, settings(metric="episode_return_mean", direction="minimize")) == -7.0
    assert objective(tmp_path, settings(metric="sps")) is None  # no row has it: the trial fails


REFUSALS = [
    (["--set", "tune.space={policy.learning_rate: {gaussian: [0, 1]}}"], "unknown distribution 'gaussian'"),
    (["--set", "tune.space={policy.learnig_rate: {uniform: [0.001, 0.01]}}"], "did you mean 'policy.learning_rate'"),
    (["--set", "tune.space={policy: {uniform: [0, 1]}}"], "is a section"),
    (["--set", "tune.space={policy.activation: {uniform: [0, 1]}}"], "not numbers"),
    (["--set", "tune.space={policy.anneal_lr: {int: [0, 1]}}"], "holds bool values"),
    (["--set", "tune.space={policy.epochs: {uniform: [1, 10]}}"], "use int=[low, high]"),
    (["--set", "tune.space={policy.learning_rate: {uniform: [0.01, 0.01]}}"], "empty range"),
    (["--set", "tune.space={policy.learning_rate: {log_uniform: [0, 0.01]}}"], "positive low bound"),
    (["--set", "tune.space={policy.epochs: {int: [1.5, 10]}}"], "whole-number bounds"),
    (["--set", "tune.space={policy.learning_rate: {uniform: [0.001, 20]}}"], "out of range"),
    (["--set", "tune.space={policy.activation: {categorical: [tanh]}}"], "at least two values"),
    (["--set", "tune.space={policy.activation: {categorical: [tanh, gelu]}}"], "'gelu' is not one of"),
    (["--set", "tune.space={exp_name: {categorical: [a, b]}}"], "set by zoo tune itself"),
    (["--set", "tune.spcae={}"], "did you mean 'space'"),
    (["--set", "tune.metric=policy_loss"], "not a metric every pipeline writes"),
    (["--set", "tune.direction=max"], "not one of maximize, minimize"),
    (["--set", "tune.objective=last"], "not one of best, final"),
    (["--set", "tune.pruner=medain"], "did you mean 'median'"),
    (["--set", "tune.pruner={median: {n_startup: 3}}"], "n_startup"),
    (["--set", "tune.budget=0"], "tune.budget must be a whole number"),
    (["--set", "pipeline.eval_every=0"], "pipeline.eval_every is 0"),
    (["--set", "pipeline.eval_every=0", "--set", "tune.metric=episode_return_mean"], "decides at each evaluation"),
    (["--trials", "0"], "--trials must be at least 1"),
    (["--jobs", "0"], "--jobs must be at least 1"),
    (["--jobs", "100000"], "--jobs must be at least 1 and at most 256 (trials at once"),
    (["--seeds", "100000"], "--seeds must be at least 1 and at most"),
    (["--seeds", "0"], "--seeds must be at least 1"),
    (["--study", "../elsewhere"], "plain folder name"),
    (["--storage", "foo://nowhere"], "cannot open the study storage"),
    (["--storage", "sqlite://"], "in-memory"),
    (["--storage", "sqlite:///{tmp}/no/such/folder/study.db"], "does not exist"),
    (["--storage", "postgresql://me:secret@127.0.0.1:1/db"], "postgresql://me:***@127.0.0.1:1/db"),
]


@pytest.mark.parametrize("args, words", REFUSALS, ids=[words for _, words in REFUSALS])
def test_every_refusal_is_one_line_and_writes_nothing(tmp_path, capsys, args, words):
    config = _config(tmp_path)
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    assert tune("--config", str(config), "--trials", "2", *args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("zoo: error: ") and words in err, err
    assert "secret" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.py"]  # no runs folder, no study database


def test_a_policy_without_a_default_space_needs_one_and_reading_a_missing_study_writes_nothing(
        tmp_path, capsys, monkeypatch):
    monkeypatch.delitem(space_module.DEFAULT_SPACES, "ppo")
    assert tune("--config", str(_config(tmp_path, tune="dict()"))) == 2
    assert "policy 'ppo' has no default search space" in capsys.readouterr().err
    assert tune("--show", "nope", "--runs-dir", str(tmp_path / "runs")) == 2
    assert "no study database" in capsys.readouterr().err
    assert tune("--out", "x.png") == 2
    assert "need --study" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.py"]


def test_a_trial_folder_of_another_study_is_never_taken_over(tmp_path, capsys):
    stray = tmp_path / "runs" / "tiny" / "trial_0"
    stray.mkdir(parents=True)
    (stray / "config.yaml").write_text("seed: 7\n")  # e.g. the study of the same name in another --storage
    assert tune("--config", str(_config(tmp_path)), "--trials", "1") == 2
    assert "belongs to no trial of study 'tiny'" in capsys.readouterr().err
    assert sorted(p.name for p in stray.iterdir()) == ["config.yaml"]  # neither resumed nor replaced
    assert [t.state for t in _study(tmp_path).trials] == [optuna.trial.TrialState.FAIL]


def test_without_optuna_one_line_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna raises ImportError
    assert tune("--config", str(_config(tmp_path))) == 2
    assert capsys.readouterr().err.strip() == "zoo: error: zoo tune needs optuna: pip install 'zoo-rl[tune]'"


def test_importing_the_package_and_the_trial_callbacks_does_not_import_optuna():
    code = ("import sys, zoo.tune, zoo.tune.trial_callbacks, zoo.run; "
            "assert 'optuna' not in sys.modules and 'sqlalchemy' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- studies of real trials -----------------------------------------------------------------------------------
@pytest.mark.slow  # trains real runs: the quick loop stays under 3 minutes
def test_each_trials_run_holds_the_trials_lock_so_a_killed_tune_leaves_it_locked_until_the_run_ends(
        tmp_path, monkeypatch):
    from zoo.tune import trials as trials_module

    held: list[str] = []
    start = trials_module.ChildRuns.start

    def recording(self, key, command, env=None, hold=None):
        held.append("none" if hold is None else os.readlink(f"/proc/self/fd/{hold}"))
        return start(self, key, command, env, hold=hold)

    monkeypatch.setattr(trials_module.ChildRuns, "start", recording)
    assert tune("--config", str(_config(tmp_path, budget=512, tune=f"dict(space={SPACE}, pruner='none')")),
                "--trials", "2") == 0
    locks = tmp_path / "runs" / "tiny" / ".locks"
    assert held == [str(locks / "trial_0.lock"), str(locks / "trial_1.lock")]


@pytest.mark.slow
def test_a_study_runs_its_trials_as_run_directories_and_reports_them(tmp_path, capsys):
    config = _config(tmp_path)
    assert tune("--config", str(config), "--trials", "6", "--jobs", "2") == 0
    study = _study(tmp_path)
    states = [t.state for t in study.trials]
    assert len(states) == 6 and all(s in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
                                    for s in states)
    for trial in study.trials:
        run = tmp_path / "runs" / "tiny" / f"trial_{trial.number}"
        assert trial.user_attrs["zoo_run_dir"] == str(run) and _iterations_once(run) and (run / "model.pt").is_file()
        cfg = load_config_file(run / "config.yaml")
        assert cfg.policy.learning_rate == trial.params["policy.learning_rate"]
        assert cfg.policy.activation == trial.params["policy.activation"]
        if trial.state == optuna.trial.TrialState.COMPLETE:
            assert trial.value == objective(run, parse_settings(cfg.tune, "ppo"))
            assert trial.intermediate_values  # each evaluation was reported through the run's callbacks
    capsys.readouterr()

    assert tune("--show", "tiny", "--runs-dir", str(tmp_path / "runs")) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[1].split() == ["trial", "state", "value", "params", "run_dir"] and len(shown) == 2 + 6 + 2
    assert shown[-1].startswith(f"best: trial {study.best_trial.number} eval_return_mean")

    best, figure = tmp_path / "best.yaml", tmp_path / "study.png"
    assert tune("--best-config", str(best), "--out", str(figure), "--study", "tiny",
                "--runs-dir", str(tmp_path / "runs")) == 0
    assert figure.read_bytes()[:4] == b"\x89PNG"
    run = subprocess.run([sys.executable, "-m", "zoo", "run", "--config", str(best), "-q",
                          "--set", "pipeline.max_env_steps=256"], capture_output=True, text=True, check=True)
    assert "reason=max_env_steps" in run.stdout
    trained = load_config_file(tmp_path / "runs" / "tiny_best" / "config.yaml")
    assert trained.policy.learning_rate == study.best_params["policy.learning_rate"]

    # Started again: nothing left to do. Another config under the same study name: refused, nothing written.
    database = (tmp_path / "runs" / "tiny" / "study.db").read_bytes()
    stamp = (tmp_path / "runs" / "tiny" / "trial_0" / "checkpoint.pt").stat().st_mtime_ns
    assert tune("--config", str(config), "--trials", "6", "--jobs", "2") == 0
    assert len(_study(tmp_path).trials) == 6
    assert (tmp_path / "runs" / "tiny" / "trial_0" / "checkpoint.pt").stat().st_mtime_ns == stamp
    capsys.readouterr()
    database = (tmp_path / "runs" / "tiny" / "study.db").read_bytes()
    assert tune("--config", str(config), "--trials", "8", "--set", "policy.gamma=0.9") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "created from another config (first difference: policy.gamma)" in err
    assert (tmp_path / "runs" / "tiny" / "study.db").read_bytes() == database
    assert not (tmp_path / "runs" / "tiny" / "trial_6").exists()


@pytest.mark.slow
def test_a_pruned_trial_stops_early_with_its_checkpoint(tmp_path):
    config = _config(tmp_path, tune=f"dict(space={SPACE}, pruner=dict(threshold=dict(lower=1e9)))")
    assert tune("--config", str(config), "--trials", "2", "--jobs", "2") == 0
    for trial in _study(tmp_path).trials:
        assert trial.state == optuna.trial.TrialState.PRUNED and trial.user_attrs["zoo_pruned_at"] == 512
        assert list(trial.intermediate_values) == [512] and trial.value == trial.intermediate_values[512]
        run = tmp_path / "runs" / "tiny" / f"trial_{trial.number}"
        # the first evaluation (iteration 4 of 16) pruned it
        assert len(metrics_rows(run)) == 4 and _iterations_once(run)
        state = RunDirectory(run).load_checkpoint(separate=False)
        assert (state["loop"]["iteration"], state["loop"]["env_steps"]) == (4, 512)
        assert (run / "model.pt").is_file()  # a clean stop (reason callback): the final save


@pytest.mark.slow
def test_seeds_train_in_one_folder_per_trial_and_the_objective_is_their_mean(tmp_path):
    config = _config(tmp_path, budget=1024, tune=f"dict(space={SPACE}, pruner='none')")
    assert tune("--config", str(config), "--trials", "1", "--seeds", "2") == 0
    (trial,) = _study(tmp_path).trials
    folder = tmp_path / "runs" / "tiny" / "trial_0"
    settings = parse_settings(load_config_file(folder / "seed_0" / "config.yaml").tune, "ppo")
    assert settings.seeds == 2
    values = [objective(folder / f"seed_{seed}", settings) for seed in (0, 1)]
    assert [load_config_file(folder / f"seed_{seed}" / "config.yaml").seed for seed in (0, 1)] == [0, 1]
    assert trial.value == pytest.approx(sum(values) / 2)


@pytest.mark.slow
def test_failing_trials_are_failed_trials_and_three_in_a_row_stop_the_command(tmp_path, capsys):
    bad = "{'env.id': dict(categorical=['NoSuchEnv-v8', 'NoSuchEnv-v9'])}"
    assert tune("--config", str(_config(tmp_path, tune=f"dict(space={bad}, pruner='none')")), "--trials", "2") == 1
    trials = _study(tmp_path).trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.FAIL] * 3
    assert all(t.user_attrs["zoo_error"].startswith("unknown env 'NoSuchEnv-v") for t in trials)
    assert "3 trials in a row failed" in capsys.readouterr().err


def _wait_for_rows(run: Path, count: int, process: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not ((run / "metrics.jsonl").is_file() and len(metrics_rows(run)) >= count):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{run} never reached {count} rows"
        time.sleep(0.1)


def _wait_until_unlocked(run: Path, timeout: float = 60.0) -> None:
    # The run's own process (the trial's zoo run) holds .lock while it trains; it lets go once it has saved.
    deadline = time.monotonic() + timeout
    with open(run / ".lock") as handle:
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError:
                assert time.monotonic() < deadline, f"{run} stays locked"
                time.sleep(0.1)


def _covered(run: Path) -> list[dict]:
    """The rows the run's checkpoint covers: what a resume keeps."""
    return metrics_rows(run)[: RunDirectory(run).load_checkpoint(separate=False)["metrics_rows"]]


@pytest.mark.slow
def test_a_study_stopped_by_sigterm_then_killed_by_sigkill_finishes_without_running_a_trial_twice(tmp_path):
    config = _config(tmp_path, budget=20_000, tune=f"dict(space={SPACE}, pruner='none')",
                     extra=", checkpoint_every=5")
    command = [sys.executable, "-c", HELPER, "--config", str(config), "--trials", "3"]
    trials = [tmp_path / "runs" / "tiny" / f"trial_{k}" for k in range(3)]

    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for_rows(trials[0], 5, process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 143 and "stopped by SIGTERM" in process.stderr.read()
    assert _study(tmp_path).trials[0].state == optuna.trial.TrialState.RUNNING
    kept = {0: _covered(trials[0])}

    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for_rows(trials[1], 5, process)
    process.kill()  # SIGKILL: no handler runs; Optuna leaves trial 1 RUNNING and its run gets SIGTERM, then saves
    process.wait()
    _wait_until_unlocked(trials[1])
    assert _study(tmp_path).trials[1].state == optuna.trial.TrialState.RUNNING
    kept[1] = _covered(trials[1])
    assert kept[0] and kept[1]

    assert tune("--config", str(config), "--trials", "3") == 0
    study = _study(tmp_path)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 3  # trial 1 continued, no 4th
    for number, run in enumerate(trials):
        assert _iterations_once(run) and metrics_rows(run)[-1]["env_steps"] >= 20_000
        assert _sessions(run) == (2 if number in kept else 1)  # resumed once, never trained again from the start
        if number in kept:
            assert metrics_rows(run)[: len(kept[number])] == kept[number]  # its first rows, as they were written
