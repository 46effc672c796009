"""``zoo bench SUITE...``: run every (entry, seed) of benchmark suites as ordinary run directories, resumably.

Layout: ``<runs_dir>/bench/<entry>/seed_<k>/``, one ordinary run directory per entry and seed (an entry that two
suites share, such as ``sac_hopper`` in ``mujoco`` and ``ace``, is one set of runs). Each run is a child process
(``python -m zoo run ...``, then ``python -m zoo eval ... --json``), ``jobs`` at a time. Started again after a
kill or Ctrl-C, the runner looks at each run directory and does only what is left:

- no directory: train it (a new run);
- a directory that trained nothing (killed before its config.yaml): removed and trained again;
- a checkpoint but no final model (stopped during training): ``zoo run --resume``;
- a final model but no ``final_eval.json``: the final evaluation alone (10 deterministic episodes, ``zoo eval``'s
  default seed, whose stream is disjoint from the training envs' and the periodic evaluations');
- ``final_eval.json``: finished, skipped.

A progress line says how many runs are done, running and left, and an estimate of the time left (each entry's
measured wall time per seed once one has finished, its declared estimate before). A run that fails is reported by
name with its last error line at the end and does not stop the others (exit code 1 then). Ctrl-C or SIGTERM stop
the children (which save) and the runner exits with 128 + the signal; one runner at a time owns the bench folder.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import ConfigError, ZooError
from .suites import SUITES, Entry

FINAL_EVAL_FILE = "final_eval.json"
FINAL_EVAL_EPISODES = 10


def read_final_returns(run: Path) -> list[float]:
    """The episode returns of ``run``'s ``final_eval.json`` (the runner's final evaluation, ``zoo eval --json``);
    a ZooError naming the file when it is not one, or holds no finite return."""
    path = run / FINAL_EVAL_FILE
    try:
        returns = [float(value) for value in json.loads(path.read_text(encoding="utf-8"))["returns"]]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise ZooError(f"'{path}' is not a final evaluation (JSON with a list of 'returns'): delete it and run "
                       "the benchmark's final evaluation again (zoo bench)") from None
    if not returns or not all(math.isfinite(value) for value in returns):
        raise ZooError(f"'{path}' holds no finite returns: delete it and run the benchmark's final evaluation "
                       "again (zoo bench)")
    return returns
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def configs_dir() -> Path:
    """The repository's ``configs/`` folder (the suites' configs live there, not in an installed wheel)."""
    folder = Path(__file__).resolve().parents[2] / "configs"
    if not folder.is_dir():
        raise ConfigError("zoo bench runs the configs of the zoo repository (configs/): run it from a clone")
    return folder


def entries_of(suites: list[str]) -> list[Entry]:
    """The entries of ``suites``, each once (suites share entries by name); one line for an unknown suite."""
    found: dict[str, Entry] = {}
    for suite in suites:
        if suite not in SUITES:
            raise ConfigError(f"unknown benchmark suite '{suite}': choose from {', '.join(SUITES)}")
        for entry in SUITES[suite]:
            if found.setdefault(entry.name, entry) != entry:
                raise ConfigError(f"suites disagree on entry '{entry.name}'")  # a bug in SUITES, caught early
    return list(found.values())


@dataclass
class Run:
    """One entry and seed: where its run directory is and what is left to do for it."""

    entry: Entry
    seed: int
    path: Path
    error: str | None = None
    started: float = 0.0
    steps: list[list[str]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.entry.name}/seed_{self.seed}"


def plan(run: Run, python: str = sys.executable) -> list[list[str]]:
    """The commands still needed for ``run`` (see the module docstring), in order."""
    path, entry = run.path, run.entry
    if (path / FINAL_EVAL_FILE).is_file():
        return []
    evaluate = [python, "-m", "zoo", "eval", str(path), "--episodes", str(FINAL_EVAL_EPISODES),
                "--json", str(path / FINAL_EVAL_FILE)]
    if (path / "model.pt").is_file():
        return [evaluate]
    if path.is_dir() and (path / "config.yaml").is_file():
        return [[python, "-m", "zoo", "run", "--resume", str(path), "-q"], evaluate]
    if path.is_dir():
        shutil.rmtree(path)  # killed before it wrote its config: nothing was trained
    train = [python, "-m", "zoo", "run", "--config", str(configs_dir() / entry.config), "--seed", str(run.seed),
             "--set", f"runs_dir={path.parent}", "--exp-name", path.name, "-q",
             *[arg for override in entry.overrides for arg in ("--set", override)]]
    return [train, evaluate]


def _minutes(run: Run) -> float | None:
    # The measured training time of a finished run (its last metrics row), for the ETA.
    try:
        lines = (run.path / "metrics.jsonl").read_text().splitlines()
        return float(json.loads(lines[-1])["wall_time"]) / 60.0 if lines else None
    except (OSError, ValueError, KeyError):
        return None


class Bench:
    """Runs ``runs`` ``jobs`` at a time (see the module docstring); ``run()`` returns the failed ones."""

    def __init__(self, runs: list[Run], jobs: int, stream: IO[str] | None = None) -> None:
        self.runs, self.jobs = runs, jobs
        self.stream = stream or sys.stderr
        self.active: dict[subprocess.Popen, Run] = {}
        self.signal: int | None = None

    def _eta_minutes(self, pending: list[Run]) -> float:
        measured: dict[str, list[float]] = {}
        for run in self.runs:
            if (run.path / FINAL_EVAL_FILE).is_file() and (minutes := _minutes(run)) is not None:
                measured.setdefault(run.entry.name, []).append(minutes)
        left = [run for run in pending] + list(self.active.values())
        total = sum(sum(measured[r.entry.name]) / len(measured[r.entry.name]) if r.entry.name in measured
                    else r.entry.est_minutes for r in left)
        return total / max(self.jobs, 1)

    def _report(self, done: int, pending: list[Run]) -> None:
        eta = self._eta_minutes(pending)
        print(f"zoo bench: {done}/{len(self.runs)} runs finished, {len(self.active)} running, {len(pending)} waiting; "
              f"about {eta:.0f} min left", file=self.stream, flush=True)

    def _start(self, run: Run) -> None:
        command = run.steps.pop(0)
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS",
                                                                                             "1")})
        self.active[process] = run

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signal = self.signal or signum
        for process in self.active:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)  # each run saves its checkpoint and exits

    def run(self) -> list[Run]:
        """Do what is left of every run; the runs that failed (with ``error``)."""
        pending = []
        for run in self.runs:
            run.steps = plan(run)
            if run.steps:
                pending.append(run)
        done = len(self.runs) - len(pending)
        previous = {signum: signal.signal(signum, self._on_signal) for signum in _SIGNALS}
        try:
            self._report(done, pending)
            while self.active or (pending and self.signal is None):
                while pending and len(self.active) < self.jobs and self.signal is None:
                    self._start(pending.pop(0))
                finished = [process for process in self.active if process.poll() is not None]
                if not finished:
                    time.sleep(0.2)
                    continue
                for process in finished:
                    run = self.active.pop(process)
                    err = process.stderr.read() if process.stderr else ""
                    if self.signal is not None:  # stopped (it saved): the next start goes on from there
                        continue
                    if process.returncode != 0:
                        lines = [line for line in err.splitlines() if line.startswith("zoo:")] or err.splitlines()
                        run.error = lines[-1] if lines else f"exit code {process.returncode}"
                    elif run.steps:
                        self._start(run)
                        continue
                    done += 1
                    self._report(done, pending)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return [run for run in self.runs if run.error is not None]


def bench(suites: list[str], seeds: int = 5, jobs: int = 1, runs_dir: str = "runs",
          stream: IO[str] | None = None) -> int:
    """Run ``seeds`` seeds (0 .. seeds-1) of every entry of ``suites``; the exit code (0 all done, 1 a run
    failed, 128 + N after signal N)."""
    if seeds < 1 or jobs < 1:
        raise ConfigError(f"--seeds and --jobs must be at least 1, got {seeds} and {jobs}")
    entries = entries_of(suites)
    configs_dir()
    root = Path(runs_dir) / "bench"
    root.mkdir(parents=True, exist_ok=True)
    lock = open(root / ".lock", "a+")  # noqa: SIM115 - held for the whole bench
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise ZooError(f"another zoo bench is running in '{root}': wait for it, or use another --runs-dir") from None
    try:
        # Seed-major: the entries a suite compares (SAC and SAC-ACE, say) finish their seeds side by side.
        runs = [Run(entry, seed, root / entry.name / f"seed_{seed}") for seed in range(seeds) for entry in entries]
        runner = Bench(runs, jobs, stream)
        failed = runner.run()
    finally:
        lock.close()
    out = stream or sys.stderr
    for run in failed:
        print(f"zoo bench: {run.label} failed: {run.error}", file=out)
    if runner.signal is not None:
        print(f"zoo bench: stopped by {signal.Signals(runner.signal).name}; run the same command again to finish",
              file=out)
        return 128 + int(runner.signal)
    return 1 if failed else 0
