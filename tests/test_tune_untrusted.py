"""zoo tune with a study as untrusted data, counting to --trials, refused writes: fast tests of the tuner's machinery.

The trials' runs are a fake ``zoo run`` (``FAKE``: it writes a synthetic run directory, no training), started by the
real ``Tuner`` through its own ``_command`` (so the removal of a config-less folder and the ``--set`` values are the
tuner's own); studies are tmp SQLite databases with crafted rows.
"""

from __future__ import annotations

import fcntl
import json
import resource
import sqlite3
import sys
import threading
import time

import pytest

optuna = pytest.importorskip("optuna")

from tests.test_tune import tune  # noqa: E402
from zoo.config.schema import Field, derived  # noqa: E402
from zoo.errors import ConfigError, ZooError  # noqa: E402
from zoo.tune import trials as trials_module  # noqa: E402
from zoo.tune.report import table, write_best_config  # noqa: E402
from zoo.tune.space import parse_settings  # noqa: E402
from zoo.tune.study import open_storage, open_study  # noqa: E402
from zoo.tune.trials import ERROR_ATTR, HOST_ATTR, RUN_DIR_ATTR, Tuner  # noqa: E402

State = optuna.trial.TrialState
SPACE = {"policy.learning_rate": {"log_uniform": [1e-4, 1e-2]}, "policy.activation": {"categorical": ["tanh", "relu"]}}
BASE = {"exp_name": "tiny", "env": {"id": "CartPole-v1"}, "policy": {"type": "ppo", "epochs": 1},
        "pipeline": {"num_envs": 2, "rollout_steps": 8, "max_env_steps": 64, "eval_every": 1},
        "tune": {"space": SPACE, "pruner": "none"}}
FAKE = """
import json, os, pathlib, signal, sys, time
args, sets, resume = sys.argv[1:], {}, None
for flag, value in zip(args, args[1:]):
    if flag == "--set":
        key, text = value.split("=", 1)
        sets[key] = json.loads(text)
    elif flag == "--resume":
        resume = value
trial = os.environ["ZOO_TUNE_TRIAL"]
mode = os.environ.get("FAKE_MODE_" + trial, os.environ.get("FAKE_MODE", "ok"))
run = pathlib.Path(resume) if resume else pathlib.Path(sets["runs_dir"]) / sets["exp_name"]
if not resume:
    run.mkdir()  # as zoo run: an existing folder would not be reused
    (run / "config.yaml").write_text(json.dumps(sets))
cfg = json.loads((run / "config.yaml").read_text())
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({"trial": int(trial), "run": str(run), "sets": cfg, "resume": bool(resume)}) + "\\n")
if mode == "fail":
    print("zoo: error: the loss went to nan"); sys.exit(2)
if mode == "full":
    print(f"zoo: error: cannot write '{run}/checkpoint.pt' (No space left on device): free space"); sys.exit(2)
if mode == "wait":
    def saved(*_):
        (run / "saved").write_text("1"); print(f"run_dir={run} reason=interrupted"); sys.exit(143)
    signal.signal(signal.SIGTERM, saved)
    (run / "started").write_text("1")
    time.sleep(60); sys.exit(1)
row = {"iteration": 1, "env_steps": 8, "eval_return_mean": cfg["policy.learning_rate"] * 1000}
(run / "metrics.jsonl").write_text(json.dumps(row) + "\\n")
(run / "model.pt").write_text("")
print(f"run_dir={run} reason=max_env_steps")
"""


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A tmp study 'tiny' (SQLite), a fake zoo run, and a log of what each fake run was given."""
    fake = tmp_path / "fake_run.py"
    fake.write_text(FAKE)
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log.jsonl"))
    real = Tuner._command
    monkeypatch.setattr(Tuner, "_command", lambda self, job, index: [sys.executable, str(fake),
                                                                     *real(self, job, index)[4:]])
    monkeypatch.setattr(trials_module, "POLL_S", 0.1, raising=False)
    waited = Tuner._wait_for_others if hasattr(Tuner, "_wait_for_others") else lambda self: None
    started: list[float] = []

    def wait_a_while(self):  # a tuner that would wait forever fails the test instead of hanging it
        started.append(started[0] if started else time.monotonic())
        assert time.monotonic() - started[0] < 10, "the tuner waits for a trial that never ends"
        waited(self)

    monkeypatch.setattr(Tuner, "_wait_for_others", wait_a_while, raising=False)
    study_dir = tmp_path / "runs" / "tiny"
    study_dir.mkdir(parents=True)
    (tmp_path / "runs" / "other_run").mkdir()
    (tmp_path / "runs" / "other_run" / "precious").write_text("keep me")
    url = f"sqlite:///{study_dir / 'study.db'}"
    storage = open_storage(url, create=True)
    settings = parse_settings(BASE["tune"], "ppo")
    study = open_study(storage, "tiny", url, settings, BASE)
    (study_dir / trials_module.BASE_CONFIG_FILE).write_text("unused: by the fake run\n")
    lines: list[str] = []

    class Lab:
        pass

    lab = Lab()
    lab.tmp, lab.dir, lab.url, lab.storage, lab.study, lab.settings, lab.lines = (
        tmp_path, study_dir.resolve(), url, storage, study, settings, lines)
    lab.tuner = lambda trials, jobs=1, seeds=(0,): Tuner(study, storage, url, settings, study_dir, trials, jobs,
                                                          list(seeds), say=lines.append)
    lab.log = lambda: [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()] \
        if (tmp_path / "log.jsonl").exists() else []
    return lab


def _row(lab, run_dir=None, host=None, values=None, extra=None, state=None):
    """A crafted trial: the space's parameters (``values``, else lr 1e-3 and tanh), ``extra`` ones ({key: choice}),
    its recorded run directory and host, and ``state``."""
    lab.study.enqueue_trial(values or {"policy.learning_rate": 1e-3, "policy.activation": "tanh"})
    trial = lab.study.ask()
    for parameter in lab.settings.parameters:
        parameter.suggest(trial)
    for key, choice in (extra or {}).items():
        trial.suggest_categorical(key, [choice])
    if run_dir is not None:
        trial.set_user_attr(RUN_DIR_ATTR, run_dir)
        trial.set_user_attr(HOST_ATTR, host or trials_module.socket.gethostname())
    if state is not None:
        lab.study.tell(trial.number, 5.0 if state == State.COMPLETE else None, state=state)
    return trial.number


def _tamper(lab, number, key, value=None, choices=None):
    """Change a stored parameter behind Optuna's back, as anyone who can write to the database can (None: drop it)."""
    with sqlite3.connect(lab.dir / "study.db") as db:
        trial_id = db.execute("SELECT trial_id FROM trials WHERE number = ?", (number,)).fetchone()[0]
        where = "WHERE trial_id = ? AND param_name = ?"
        if value is None:
            db.execute(f"DELETE FROM trial_params {where}", (trial_id, key))
            return
        db.execute(f"UPDATE trial_params SET param_value = ? {where}", (value, trial_id, key))
        if choices is not None:
            text = json.dumps({"name": "CategoricalDistribution", "attributes": {"choices": choices}})
            db.execute(f"UPDATE trial_params SET distribution_json = ? {where}", (text, trial_id, key))


def _states(lab):
    return [t.state for t in lab.study.get_trials(deepcopy=False)]


def _error(lab, number):
    return lab.study.get_trials(deepcopy=False)[number].user_attrs.get(ERROR_ATTR, "")


# -- item 1: a study's rows are data --------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["..", "/", "other"])
def test_a_running_row_outside_its_own_folder_is_failed_never_adopted_and_nothing_is_removed(lab, where):
    recorded = {"..": str(lab.dir) + "/..", "/": "/", "other": str(lab.dir / "trial_5")}[where]
    number = _row(lab, recorded)
    assert lab.tuner(1).run() == 0
    assert (lab.tmp / "runs" / "other_run" / "precious").read_text() == "keep me"
    assert (lab.dir / "study.db").is_file()
    assert _states(lab) == [State.FAIL, State.COMPLETE]
    assert f"is not <study>/trial_{number}" in _error(lab, number)
    assert [entry["trial"] for entry in lab.log()] == [1]


def test_a_running_row_pointing_at_another_trials_folder_does_not_take_its_objective(lab):
    first = _row(lab, str(lab.dir / "trial_0"), state=State.COMPLETE)
    (lab.dir / "trial_0").mkdir()
    (lab.dir / "trial_0" / "model.pt").write_text("")
    (lab.dir / "trial_0" / "metrics.jsonl").write_text('{"iteration": 1, "eval_return_mean": 99.0}\n')
    thief = _row(lab, str(lab.dir / f"trial_{first}"))
    assert lab.tuner(2).run() == 0
    trials = lab.study.get_trials(deepcopy=False)
    assert trials[thief].state == State.FAIL and trials[thief].value is None
    assert [t.state for t in trials] == [State.COMPLETE, State.FAIL, State.COMPLETE]
    assert trials[2].value == pytest.approx(trials[2].params["policy.learning_rate"] * 1000)  # its own run's


@pytest.mark.parametrize("inside", ["nothing", "a finished run"])
def test_a_symlinked_trial_folder_is_refused_not_followed(lab, inside):
    elsewhere = lab.tmp / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("keep me")
    if inside == "a finished run":
        (elsewhere / "model.pt").write_text("")
        (elsewhere / "metrics.jsonl").write_text('{"iteration": 1, "eval_return_mean": 99.0}\n')
    number = _row(lab, str(lab.dir / "trial_0"))
    (lab.dir / "trial_0").symlink_to(elsewhere)
    assert lab.tuner(1).run() == 0
    assert sorted(p.name for p in elsewhere.iterdir())[-1] == "precious" and (lab.dir / "trial_0").is_symlink()
    assert _states(lab) == [State.FAIL, State.COMPLETE] and "symbolic link" in _error(lab, number)
    assert lab.tuner(1).failures_in_a_row == 0


def test_only_what_zoo_run_creates_before_its_config_is_removed(lab):
    stray = _row(lab, str(lab.dir / "trial_0"))
    (lab.dir / "trial_0").mkdir()
    (lab.dir / "trial_0" / ".lock").write_text("")
    (lab.dir / "trial_0" / "notes.txt").write_text("mine")
    clean = _row(lab, str(lab.dir / "trial_1"))
    (lab.dir / "trial_1").mkdir()
    (lab.dir / "trial_1" / ".lock").write_text("")
    (lab.dir / "trial_1" / ".config.yaml.123.0a1b2c3d.tmp").write_text("half")
    assert lab.tuner(1).run() == 0
    assert (lab.dir / "trial_0" / "notes.txt").read_text() == "mine"
    assert "holds notes.txt" in _error(lab, stray)
    assert _states(lab) == [State.FAIL, State.COMPLETE]
    assert [(e["trial"], e["resume"]) for e in lab.log()] == [(clean, False)]  # removed, then trained afresh


def test_an_adopted_trial_keeps_only_the_space_parameters(lab):
    extra = {"runs_dir": str(lab.tmp / "elsewhere"), "seed": 99, "env.id": "Evil-v0"}
    _row(lab, str(lab.dir / "trial_0"), values={"policy.learning_rate": 2e-3, "policy.activation": "relu"},
         extra=extra)
    assert lab.tuner(1).run() == 0
    (entry,) = lab.log()
    assert entry["sets"] == {"runs_dir": str(lab.dir), "exp_name": "trial_0", "seed": 0,
                             "policy.learning_rate": 2e-3, "policy.activation": "relu"}
    assert not (lab.tmp / "elsewhere").exists()


@pytest.mark.parametrize("tamper, words", [
    (("policy.learning_rate", 0.5, None), "policy.learning_rate = 0.5 is outside"),
    (("policy.activation", 2, ["tanh", "relu", "sigmoid"]), "'sigmoid' is outside"),
    (("policy.activation", None, None), "no value for policy.activation"),
])
def test_an_adopted_trial_with_values_outside_the_space_fails_and_never_runs(lab, tamper, words):
    _row(lab, str(lab.dir / "trial_0"), state=State.COMPLETE)  # the study's first rows set the distributions
    number = _row(lab, str(lab.dir / "trial_1"))
    _tamper(lab, number, *tamper)
    assert lab.tuner(2).run() == 0
    assert words in _error(lab, number) and _states(lab) == [State.COMPLETE, State.FAIL, State.COMPLETE]
    assert [entry["trial"] for entry in lab.log()] == [2]


def test_a_study_never_adopts_a_folder_outside_its_own_and_counts_other_processes_running_trials(lab):
    number = _row(lab, str(lab.dir / "trial_0"), host="elsewhere")  # another machine's: its folder not here
    assert not trials_module.own(str(lab.dir / "trial_0"), "elsewhere", lab.dir, number, "here")
    assert trials_module.own(str(lab.dir / "trial_0"), "here", lab.dir, number, "here")
    assert not trials_module.own(str(lab.dir) + "/../tiny/trial_0", "here", lab.dir, number, "here")
    assert not trials_module.own(str(lab.dir / "trial_1"), "here", lab.dir, number, "here")  # another's
    assert not trials_module.own(f"/elsewhere/tiny/trial_{number}", "here", lab.dir, number, "here")
    # The other machine completes its trial half a second later: this tuner waits for it and asks for none.
    timer = threading.Timer(0.5, lambda: lab.study.tell(number, 3.0))
    timer.start()
    assert lab.tuner(1).run() == 0
    timer.join()
    assert _states(lab) == [State.COMPLETE] and lab.log() == []


def test_best_config_imports_nothing_a_study_names_without_trust_imports(lab, capsys):
    marker = lab.tmp / "marker"
    (lab.tmp / "zoo_evil_study_module.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    base = {**BASE, "import_names": ["zoo_evil_study_module"], "import_paths": [str(lab.tmp)]}
    lab.study.set_user_attr("zoo_base_config", base)
    _row(lab, str(lab.dir / "trial_0"), state=State.COMPLETE)
    out = lab.tmp / "best.yaml"
    assert tune("--best-config", str(out), "--study", "tiny", "--runs-dir", str(lab.tmp / "runs")) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--trust-imports" in err and "zoo_evil_study_module" in err
    assert not marker.exists() and not out.exists()
    with pytest.raises(ConfigError, match="whose module gymnasium would import"):
        write_best_config(_with_base(lab, "evil_pkg:Env-v0"), out)
    assert not out.exists()


def _with_base(lab, env_id):
    lab.study.set_user_attr("zoo_base_config", {**BASE, "env": {"id": env_id}})
    return lab.study


def test_a_best_trial_outside_the_space_and_a_base_config_without_policy_are_one_line(lab, capsys):
    _row(lab, str(lab.dir / "trial_0"), extra={"import_names": "evil"}, state=State.COMPLETE)
    out = lab.tmp / "best.yaml"
    write_best_config(lab.study, out)
    assert "evil" not in out.read_text() and "learning_rate: 0.001" in out.read_text()
    lab.study.set_user_attr("zoo_base_config", {k: v for k, v in BASE.items() if k != "policy"})
    with pytest.raises(ZooError, match="records a base config without policy.type"):
        table(lab.study)
    assert tune("--show", "tiny", "--runs-dir", str(lab.tmp / "runs")) == 2
    assert "without policy.type" in capsys.readouterr().err


# -- item 7: counting ------------------------------------------------------------------------------------------
def test_a_trial_that_never_got_a_run_directory_is_failed_once_orphaned_and_the_count_is_reached(lab, monkeypatch):
    monkeypatch.setattr(trials_module, "ORPHAN_AFTER_S", 1.0)
    _row(lab)  # asked for, then the process died before it recorded a run directory
    assert lab.tuner(2).run() == 0
    assert _states(lab) == [State.FAIL, State.COMPLETE, State.COMPLETE]


def test_completed_pruned_and_running_trials_count_toward_the_trials(lab):
    _row(lab, str(lab.dir / "trial_0"), state=State.COMPLETE)
    _row(lab, str(lab.dir / "trial_1"), state=State.PRUNED)
    assert lab.tuner(2).run() == 0 and lab.log() == []
    number = _row(lab, str(lab.dir / "trial_2"))
    (lab.dir / ".locks").mkdir()
    with open(lab.dir / ".locks" / f"trial_{number}.lock", "w") as held:  # another zoo tune runs it
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        timer = threading.Timer(0.5, lambda: lab.study.tell(number, 1.0))
        timer.start()
        assert lab.tuner(3).run() == 0
        timer.join()
    assert lab.log() == [] and len(_states(lab)) == 3


def test_three_failures_in_a_row_stop_with_exit_1(lab, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "fail")
    assert lab.tuner(5).run() == 1
    assert _states(lab) == [State.FAIL] * 3 and "the loss went to nan" in lab.lines[-1]


def test_a_refused_write_stops_at_once_and_leaves_the_trial_running(lab, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "full")
    tuner = lab.tuner(3)
    with pytest.raises(ZooError, match=r"^trial 0: cannot write '.*checkpoint.pt' \(No space left on device\)"):
        tuner.run()
    assert _states(lab) == [State.RUNNING] and tuner.failures_in_a_row == 0
    monkeypatch.setenv("FAKE_MODE", "ok")
    assert lab.tuner(1).run() == 0  # the next zoo tune continues it from its run directory
    assert _states(lab) == [State.COMPLETE] and [e["resume"] for e in lab.log()] == [False, True]


# -- item 6: refused writes ------------------------------------------------------------------------------------
def test_a_study_database_failing_mid_search_is_one_line_and_the_runs_save(lab, monkeypatch):
    import sqlalchemy.exc

    monkeypatch.setenv("FAKE_MODE", "wait")
    monkeypatch.setenv("FAKE_MODE_1", "ok")
    real_tell = lab.study.tell

    def tell(*args, **kwargs):  # the database fails once trial 0's run is up and trial 1's is done
        for _ in range(200):
            if (lab.dir / "trial_0" / "started").exists():
                raise sqlalchemy.exc.OperationalError("UPDATE trials", {}, Exception("disk I/O error"))
            threading.Event().wait(0.05)
        return real_tell(*args, **kwargs)

    monkeypatch.setattr(lab.study, "tell", tell)
    with pytest.raises(ZooError) as error:
        lab.tuner(3, jobs=2).run()
    assert str(error.value).startswith(f"the study database '{lab.dir / 'study.db'}' failed (OperationalError: ")
    assert "disk I/O error" in str(error.value) and "\n" not in str(error.value)
    assert (lab.dir / "trial_0" / "saved").read_text() == "1"  # SIGTERM: the run saved
    assert _states(lab) == [State.RUNNING, State.RUNNING]


def test_best_config_on_a_full_disk_is_one_line_and_leaves_no_temporary_file(lab):
    _row(lab, str(lab.dir / "trial_0"), state=State.COMPLETE)
    out = lab.tmp / "out"
    out.mkdir()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    errors = []
    for name in ("best.yaml", "best.json"):
        # A real refused write: the file-size limit (ulimit -f) below the config's size; Python ignores SIGXFSZ.
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, hard))
        try:
            write_best_config(lab.study, out / name)
        except ZooError as exc:
            errors.append(str(exc))
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert errors == [f"cannot write '{out / name}' (File too large): free space or choose another --best-config"
                      for name in ("best.yaml", "best.json")]
    assert list(out.iterdir()) == []


# -- item 12: the search space and the study's config ----------------------------------------------------------
def test_log_uniform_is_sampled_on_a_log_scale_and_ints_and_lists_travel_right(tmp_path):
    settings = parse_settings({"space": {"a": {"log_uniform": [1e-4, 1e-2]}, "b": {"uniform": [0.0, 1.0]},
                                         "c": {"log_int": [1, 64]}, "d": {"categorical": [[64, 64], [32]]},
                                         "e": {"categorical": [1, True]}}}, "ppo")
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    trial = study.ask()
    stored = {p.key: p.suggest(trial) for p in settings.parameters}
    dists = trial.distributions
    assert (dists["a"].log, dists["b"].log, dists["c"].log) == (True, False, True)
    assert dists["d"].choices == ("[64, 64]", "[32]") and isinstance(stored["d"], str)
    values = settings.config_values(stored)
    assert values["d"] in ([64, 64], [32])
    assert settings.parameter("e").accepts(1) and not settings.parameter("e").accepts(1.0)
    assert not settings.parameter("c").accepts(2.0) and not settings.parameter("a").accepts(float("nan"))
    assert settings.parameter("a").accepts(1e-4) and not settings.parameter("a").accepts(1.1e-2)


def test_the_budget_goes_into_every_trials_base_config(tmp_path, monkeypatch):
    config = tmp_path / "tiny.py"
    config.write_text(f"config = dict(exp_name='tiny', runs_dir={str(tmp_path / 'runs')!r}, env=dict(id='CartPole-v1'),"
                      f" policy=dict(type='ppo'), pipeline=dict(eval_every=1, max_env_steps=999999), "
                      f"tune=dict(space={SPACE!r}, budget=4096))\n")
    monkeypatch.setattr(Tuner, "run", lambda self: 0)
    assert tune("--config", str(config), "--trials", "1") == 0
    text = (tmp_path / "runs" / "tiny" / "base_config.yaml").read_text()
    assert "max_env_steps: 4096\n" in text and "999999" not in text and "zoo.tune.trial_callbacks" in text


def test_another_config_under_the_same_study_name_is_refused(lab):
    other = {**BASE, "policy": {"type": "ppo", "epochs": 2}}
    with pytest.raises(ConfigError, match="created from another config .first difference: policy.epochs"):
        open_study(lab.storage, "tiny", lab.url, lab.settings, other)
    assert open_study(lab.storage, "tiny", lab.url, lab.settings, {**BASE, "runs_dir": "x"}).study_name == "tiny"


def test_keys_with_choices_can_be_frozen_and_activation_is():
    from zoo.config.resolve import FROZEN_KEYS  # noqa: F401 - the registry is filled by resolving
    from zoo.plugins import load_plugins
    from zoo.registry import POLICY_REGISTRY

    load_plugins()
    assert derived({"a": Field("x", "doc", choices=("x", "y"), frozen=True)})["frozen_keys"] == ("a",)
    assert "activation" in POLICY_REGISTRY.get("ppo").frozen_keys
