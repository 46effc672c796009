"""Running a study's trials: each one an ordinary run directory, trained by a ``zoo run`` child process, ``jobs`` at a
time; started again after a kill, the study goes on where it stopped.

Layout: ``<runs_dir>/<study>/trial_<k>/`` (with several seeds ``trial_<k>/seed_<s>/``, the seeds one after another,
the objective their mean), beside ``base_config.yaml`` (the config every trial starts from) and ``.locks/``.

Which trial is whose. Optuna leaves a trial RUNNING forever when the process that asked for it dies, so each trial
records its run directory and host (user attributes ``zoo_run_dir``, ``zoo_host``), and the ``zoo tune`` process that
runs it holds an flock on ``.locks/trial_<k>.lock`` for as long as it does, and so does the trial's running ``zoo run``
child (the OS releases it once both have ended, however they end: a rerun started at once after a kill never starts the
trial's seed beside the killed process's run, still starting or saving). A RUNNING trial whose recorded run directory is
exactly ``<study>/trial_<its number>`` here (this host, or a run directory this machine sees) and whose lock no process
holds is this study's own stale trial: it is adopted and continued with the same parameters (only the space's, each
checked against its distribution: a trial holding anything else fails, never runs), each seed's run directory as far as
it got: ``model.pt`` there: finished (its metrics give the objective); ``config.yaml`` there: ``zoo run --resume`` (from
its checkpoint, never from the start); a directory killed before its config: trained afresh. The rows are data
(``ownership``): a row zoo could not have written fails, and the only folder ever removed is the job's own config-less
seed directory. A trial the pruner pruned records it first (``zoo_pruned_at``), so a kill between the prune and the
``tell`` still ends it pruned. A RUNNING trial without a run directory (killed between Optuna's ask and the first
attribute, a few milliseconds) never trained: after a minute it is marked failed.

New trials are asked for only while completed + pruned + running trials (of every process of the study) are fewer
than ``--trials``, so the study ends with exactly that many completed-or-pruned trials; with nothing to run here and
the count not reached, the command waits for the other processes' trials (exit 0 only at the count). A trial whose
run fails is a failed trial and another takes its place; three failures in a row stop the command (the config is
probably wrong). A run whose write the system refused (its error line says ``cannot write``: a full disk, a quota, a
read-only folder) is no failure of the trial: the command stops at once (the other runs save as on SIGTERM) with
that line and exit 2, and the trial stays RUNNING for the next ``zoo tune`` to continue from its checkpoint. A study
database that fails mid-search (disk I/O error, a lock held beyond the timeout, read-only) stops it the same way. A
stop signal (Ctrl-C, SIGTERM, SIGHUP) goes to the trials' runs, which save; their trials stay RUNNING and the same
command continues them. The children die with this process (SIGTERM, so they save) if it is killed
(``zoo.run.children.ChildRuns``, which reads each run's summary from a file).
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import ZooError, first_line
from ..lifetime import exit_cause
from ..run.children import RELEASE_WAIT_S, ChildRuns, Ended, wait_for_release
from ..run.run_dir import CONFIG_FILE, MODEL_FILE
from ..run.view import RunView
from .ownership import Refused, check_folders, clear_unconfigured, malformed, own, trial_folder
from .space import TuneSettings
from .study import optuna_module, redact, storage_errors
from .trial_callbacks import ENV_REPORT, ENV_STORAGE, ENV_STUDY, ENV_TRIAL, PRUNED_ATTR

RUN_DIR_ATTR = "zoo_run_dir"
HOST_ATTR = "zoo_host"
ERROR_ATTR = "zoo_error"
BASE_CONFIG_FILE = "base_config.yaml"
LOCKS = ".locks"
ORPHAN_AFTER_S = 60.0
POLL_S = 2.0  # how often an idle tuner asks the storage again
FAILURES_IN_A_ROW = 3
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def objective(run_path: Path, settings: TuneSettings) -> float | None:
    """The objective of one finished run: the best or the last value of ``tune.metric`` in its metrics rows (None
    when no row has one)."""
    values = [row[settings.metric] for row in RunView(run_path).rows if row.get(settings.metric) is not None]
    if not values:
        return None
    if settings.objective == "final":
        return float(values[-1])
    return float(max(values) if settings.direction == "maximize" else min(values))


def _error_line(ended: Ended) -> str:
    return ended.error.split("error: ", 1)[1] if ended.error else f"zoo run {exit_cause(ended.code)}"


@dataclass
class Job:
    """One trial this process runs: its parameters (config values), folder, lock and the seeds' results so far."""

    number: int
    values: dict[str, Any]
    folder: Path
    lock: IO[str]
    seeds: list[int]
    results: list[float] = field(default_factory=list)

    def run_path(self, index: int) -> Path:
        """The run directory of the ``index``-th seed."""
        return self.folder if len(self.seeds) == 1 else self.folder / f"seed_{self.seeds[index]}"


class Tuner:
    """Runs ``study``'s trials until ``trials`` are completed or pruned (see the module docstring); ``run()``
    returns the exit code."""

    def __init__(self, study: Any, storage: Any, url: str, settings: TuneSettings, study_dir: Path,
                 trials: int, jobs: int, seeds: list[int], say: Callable[[str], None] | None = None) -> None:
        self.study, self.storage, self.url, self.settings = study, storage, url, settings
        self.study_dir, self.trials, self.jobs, self.seeds = study_dir.resolve(), trials, jobs, seeds
        self.say = say or (lambda text: print(f"zoo tune: {text}", file=sys.stderr, flush=True))
        self.host = socket.gethostname()
        self.active: dict[int, Job] = {}
        self.children = ChildRuns()  # the running seeds' zoo run processes, by trial number
        self.signal: int | None = None
        self.failures_in_a_row = 0
        self.last_error: str | None = None
        self.skipped: set[int] = set()  # stale trials whose run directory another process holds
        self.reached = False  # the study has its completed + pruned trials
        self.refused: str | None = None  # the line of a trial whose write the system refused
        self.waiting = False
        self.state = optuna_module().trial.TrialState

    # -- trials: which to run next -------------------------------------------------------------------------
    def _lock(self, number: int) -> IO[str] | None:
        folder = self.study_dir / LOCKS
        try:
            folder.mkdir(exist_ok=True)
            handle = open(folder / f"trial_{number}.lock", "a+")  # noqa: SIM115 - held while the trial runs here
        except OSError as exc:
            raise ZooError(f"cannot write '{folder / f'trial_{number}.lock'}' ({exc.strerror}): free space or "
                           f"make {self.study_dir} writable, then run the same command again") from None
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return None
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        return handle

    def _fail_row(self, number: int, error: str) -> None:
        """Fail a RUNNING trial that is nobody's (see ``ownership``), without counting it as a failure here."""
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(
            self.storage.get_study_id_from_name(self.study.study_name), number)
        self.storage.set_trial_user_attr(trial_id, ERROR_ATTR, error)
        self.study.tell(number, state=self.state.FAIL, skip_if_finished=True)
        self.say(f"trial {number} failed: {error}")

    def _counts(self, trials: list[Any]) -> tuple[int, int]:
        done = sum(t.state in (self.state.COMPLETE, self.state.PRUNED) for t in trials)
        return done, sum(t.state == self.state.RUNNING for t in trials)

    def _next(self) -> Job | None:
        trials = self.study.get_trials(deepcopy=False)
        now = datetime.datetime.now()
        for trial in trials:
            if trial.state != self.state.RUNNING or trial.number in self.active or trial.number in self.skipped:
                continue
            if RUN_DIR_ATTR not in trial.user_attrs:
                started = trial.datetime_start or now
                if (now - started).total_seconds() > ORPHAN_AFTER_S:  # it never got as far as training
                    self.study.tell(trial.number, state=self.state.FAIL, skip_if_finished=True)
                continue
            recorded = trial.user_attrs[RUN_DIR_ATTR]
            if malformed(recorded, self.study.study_name, trial.number):
                self._fail_row(trial.number, f"its run directory {str(recorded)[:200]!r} is not "
                                             f"<study>/trial_{trial.number}: not a trial zoo tune started")
                continue
            if (own(recorded, trial.user_attrs.get(HOST_ATTR), self.study_dir, trial.number, self.host)
                    and (lock := self._lock(trial.number)) is not None):
                try:
                    values = self.settings.config_values(trial.params)
                except ZooError as exc:
                    lock.close()
                    self._fail_row(trial.number, str(exc))
                    continue
                self.say(f"trial {trial.number} was left running by a stopped zoo tune: continuing it")
                return Job(trial.number, values, trial_folder(self.study_dir, trial.number), lock, list(self.seeds))
        done, running = self._counts(trials)
        self.reached = done >= self.trials
        if done + running >= self.trials:
            return None
        trial = self.study.ask()
        values = {p.key: p.config_value(p.suggest(trial)) for p in self.settings.parameters}
        lock = self._lock(trial.number)
        if lock is None:
            raise RuntimeError(f"the lock of the new trial {trial.number} is held")  # no other trial has its number
        folder = trial_folder(self.study_dir, trial.number)
        if os.path.lexists(folder):  # not this study's: a study of the same name in another storage, or a deleted one
            self.study.tell(trial.number, state=self.state.FAIL)
            lock.close()
            raise ZooError(f"'{folder}' exists but belongs to no trial of study '{self.study.study_name}' in this "
                           f"storage (another --storage, or a study deleted since): use another --study name or "
                           f"runs_dir, or move {self.study_dir} away")
        trial.set_user_attr(RUN_DIR_ATTR, str(folder))
        trial.set_user_attr(HOST_ATTR, self.host)
        return Job(trial.number, values, folder, lock, list(self.seeds))

    # -- one trial: its seeds, one child process each ------------------------------------------------------
    def _command(self, job: Job, index: int) -> list[str]:
        path = job.run_path(index)
        if (path / CONFIG_FILE).is_file():
            return [sys.executable, "-m", "zoo", "run", "--resume", str(path), "-q"]
        if os.path.lexists(path):
            clear_unconfigured(self.study_dir, job.number, job.seeds, path)  # killed before its config
        path.parent.mkdir(parents=True, exist_ok=True)
        sets = {"runs_dir": str(path.parent), "exp_name": path.name, "seed": job.seeds[index], **job.values}
        command = [sys.executable, "-m", "zoo", "run", "--config", str(self.study_dir / BASE_CONFIG_FILE), "-q"]
        for key, value in sets.items():
            command += ["--set", f"{key}={json.dumps(value)}"]  # JSON: a string choice stays a string
        return command

    def _advance(self, job: Job) -> None:
        """Start the job's next seed, or end the trial when every seed is done (or it was pruned)."""
        while len(job.results) < len(job.seeds):
            index = len(job.results)
            path = job.run_path(index)
            if PRUNED_ATTR in self.storage.get_trial(self._trial_id(job)).user_attrs:
                return self._finish(job, self.state.PRUNED)
            try:
                check_folders(self.study_dir, job.number, path)
            except Refused as exc:
                return self._finish(job, self.state.FAIL, str(exc), counts=False)
            if (path / MODEL_FILE).is_file():
                value = objective(path, self.settings)
                if value is None:
                    return self._finish(job, self.state.FAIL, f"no metrics row of {path} has {self.settings.metric}")
                job.results.append(value)
                continue
            if self._stopping_at_once():
                return self._release(job)  # stopping: the next zoo tune starts this seed
            if not wait_for_release(path, RELEASE_WAIT_S, lambda: self.signal is not None, poll_s=0.2):
                if self.signal is None:
                    self.say(f"trial {job.number}: another process holds {path}: leaving the trial for later")
                    self.skipped.add(job.number)
                return self._release(job)
            env = {**os.environ, ENV_STORAGE: self.url, ENV_STUDY: self.study.study_name,
                   ENV_TRIAL: str(job.number), ENV_REPORT: "1" if index == 0 else "0"}
            try:
                command = self._command(job, index)
            except Refused as exc:
                return self._finish(job, self.state.FAIL, str(exc), counts=False)
            # Its own session: a Ctrl-C in the terminal reaches this process alone, which passes it on once. It holds
            # the trial's lock too: a kill of this process leaves the trial locked until the run has saved and ended.
            self.children.start(job.number, command, env, hold=job.lock.fileno())
            self.active[job.number] = job
            return None
        mean = sum(job.results) / len(job.results)
        return self._finish(job, self.state.COMPLETE, value=mean)

    def _trial_id(self, job: Job) -> int:
        study_id = self.storage.get_study_id_from_name(self.study.study_name)
        return self.storage.get_trial_id_from_study_id_trial_number(study_id, job.number)

    def _finish(self, job: Job, state: Any, error: str | None = None, value: float | None = None,
                counts: bool = True) -> None:
        if error is not None:
            self.storage.set_trial_user_attr(self._trial_id(job), ERROR_ATTR, error)
        frozen = self.study.tell(job.number, values=value, state=state, skip_if_finished=True)
        self._release(job)
        if state == self.state.FAIL:
            self.failures_in_a_row += counts  # a refused folder says nothing about the config
            self.last_error = error
            self.say(f"trial {job.number} failed: {error}")
        else:
            self.failures_in_a_row = 0
            done, running = self._counts(self.study.get_trials(deepcopy=False))
            shown = "-" if frozen.value is None else f"{frozen.value:.4g}"
            self.say(f"trial {job.number} {state.name.lower()}: {self.settings.metric} {shown} "
                     f"({done}/{self.trials} done, {running} running)")

    def _release(self, job: Job) -> None:
        self.active.pop(job.number, None)
        job.lock.close()  # the flock goes with the descriptor

    def _collect(self) -> None:
        for number, ended in self.children.ended():
            job, code = self.active[number], ended.code
            summary = ended.summary or {}
            error = _error_line(ended)
            if summary.get("reason") == "interrupted" or (self._stopping_at_once() and code != 0):
                self._release(job)  # saved (or stopped at once): it stays RUNNING for the next zoo tune
            elif code == 0:
                self._advance(job)
            elif "cannot write" in error:
                # The system refused a write (full disk, quota, read-only): no fault of the trial's parameters.
                # The trial stays RUNNING, as after a stop; the next zoo tune continues it from its checkpoint.
                self._release(job)
                self.refused = self.refused or f"trial {job.number}: {error}"
                self._stop_children(signal.SIGTERM)
            else:
                self._finish(job, self.state.FAIL, error)

    def _stopping_at_once(self) -> bool:
        return self.signal is not None or self.refused is not None

    def _stop_children(self, signum: int) -> None:
        self.children.send(signum)

    # -- the loop ------------------------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: Any) -> None:
        again = self.signal is not None
        self.signal = self.signal or signum
        # First signal: every run saves after its iteration; a second Ctrl-C stops them at once.
        self._stop_children(signal.SIGINT if again and signum == signal.SIGINT else signal.SIGTERM)

    def run(self) -> int:
        """Run trials until the study has ``trials`` completed or pruned ones; the exit code (0 only then, 1 after
        ``FAILURES_IN_A_ROW`` failures in a row, 128 + N after signal N). A refused write (a trial's or the study
        database's) stops the command at once: the runs save as on SIGTERM, their trials stay RUNNING for the next
        zoo tune, and a ZooError line names what could not be written."""
        previous = {signum: signal.signal(signum, self._on_signal) for signum in _SIGNALS}
        try:
            self._loop()
        except storage_errors() as exc:
            where = self.url if not self.url.startswith("sqlite") else self.url.split("://", 1)[1][1:]
            self.refused = (f"the study database '{redact(where)}' failed ({type(exc).__name__}: "
                            f"{first_line(exc, 200).strip()})")
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.children.stop()  # SIGTERM: the runs save
            for job in list(self.active.values()):
                self._release(job)
        if self.refused is not None:
            raise ZooError(f"{self.refused}; the running trials' runs saved and stay RUNNING: fix that, then run "
                           f"the same command again")
        if self.signal is not None:
            self.say(f"stopped by {signal.Signals(self.signal).name}: the trials' runs saved; run the same command "
                     f"again to continue")
            return 128 + int(self.signal)
        if self.failures_in_a_row >= FAILURES_IN_A_ROW:
            self.say(f"{FAILURES_IN_A_ROW} trials in a row failed (the last: {self.last_error}): fix the config or "
                     f"the search space, then run the same command again")
            return 1
        return 0

    def _loop(self) -> None:
        idle_since = 0.0
        while True:
            self._collect()
            stopping = (self._stopping_at_once() or self.failures_in_a_row >= FAILURES_IN_A_ROW)
            started = False
            # Asking the storage costs a query: when no trial could start, ask again every POLL_S, not every tick.
            if not stopping and len(self.active) < self.jobs and time.monotonic() - idle_since > POLL_S:
                while len(self.active) < self.jobs and (job := self._next()) is not None:
                    self._advance(job)
                    started = True
                idle_since = 0.0 if started else time.monotonic()
                if not started and not self.active and not self.reached:
                    self._wait_for_others()
            if not self.active and not started and (stopping or (idle_since and self.reached)):
                return
            time.sleep(0.1)

    def _wait_for_others(self) -> None:
        """Nothing to run here but the study is short of its count: other processes' trials are RUNNING (or a
        trial without a run directory, failed once orphaned): wait for them, said once."""
        if not self.waiting:
            self.waiting = True
            self.say(f"waiting for the trials other processes run (a trial that never got a run directory is "
                     f"failed after {ORPHAN_AFTER_S:.0f} s)")
        self.skipped.clear()  # their holders may have let go: try them again
