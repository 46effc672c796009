"""``zoo bench SUITE...``: run every (entry, seed) of benchmark suites as ordinary run directories, resumably.

Layout: ``<runs_dir>/bench/<entry>/seed_<k>/``, one ordinary run directory per entry and seed (an entry that two
suites share, such as ``sac_hopper`` in ``mujoco`` and ``ace``, is one set of runs). Each run is a child process
(``python -m zoo run ...``, then ``python -m zoo eval ... --json``), ``jobs`` at a time, started by
``zoo.run.children.ChildRuns``: the children die with the runner (SIGTERM, so that they save), however it dies, and
each ``zoo run``'s summary (where it trained) is read from a file, not parsed from its output.
Started again after a kill or Ctrl-C, the runner first waits (at most ``RELEASE_WAIT_S`` seconds in all) for the
children of the killed runner to let go of their runs (each child holds its run's lock as well as its run directory's:
one killed while still starting has no directory yet, but its lock), then looks at each one and does only what is
left:

- no directory: train it (a new run, into exactly ``seed_<k>``: never ``seed_<k>_2``);
- a directory that trained nothing (killed before its config.yaml, holding nothing but dot files; or before its
  first checkpoint): removed and trained again;
- a checkpoint but no final model (stopped during training): ``zoo run --resume``;
- a final model but no ``final_eval.json``: the final evaluation alone (10 deterministic episodes, ``zoo eval``'s
  default seed, whose stream is disjoint from the training envs' and the periodic evaluations');
- ``final_eval.json`` (checked: ``zoo.bench.runs.read_final_returns``): finished, skipped;
- no directory, but the results folder (``--results``) keeps the seed's files, of the entry's config as resolved
  here: finished, skipped (a campaign goes on from its committed results in a new runs directory). Kept files of
  another config (one changed since) or damaged ones are trained again, and replaced once evaluated.

A directory that holds a run of another config or seed (replaced, copied: its config.yaml against the entry's config
and overrides as resolved here, ``zoo.bench.runs.check_own``), other files without a config.yaml, a damaged
``final_eval.json``, or a run directory still held by another process after the wait is a failed run: reported by
name, never trained into, evaluated or removed.

A progress line says how many runs are done, running and left, and an estimate of the time left (each entry's
measured wall time per seed once one has finished, its declared estimate before). A run that fails is reported by
name with its last error line at the end and does not stop the others (exit code 1 then). Ctrl-C or SIGTERM stop
the children (which save) and the runner exits with 128 + the signal. One runner at a time runs each slice
(``shard``: M runners on M machines can share one runs directory, see ``bench``), and one runner at a time each run
(``zoo.bench.locks``): a run that another runner holds (two overlapping shardings, say) is left to it and named,
never trained twice. A ``seed_<k>`` folder (or its entry's folder) that is a symbolic link is a failed run, never
followed.
"""

from __future__ import annotations

import difflib
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import ConfigError, ZooError
from ..lifetime import check_counts, exit_cause
from ..run.children import RELEASE_WAIT_S, ChildRuns, Ended, wait_for_release
from ..run.run_dir import CHECKPOINT_FILE, CONFIG_FILE, MODEL_FILE, lock_owner
from ..run.view import RunView
from .locks import RunLocks, take_lock
from .results import finished_kept, is_kept, keep, kept_path, refuse_links
from .runs import FINAL_EVAL_EPISODES, FINAL_EVAL_FILE, check_eval_seed, check_own, configs_dir, read_final_returns
from .suites import SUITES, Entry, suite_entries

__all__ = ["FINAL_EVAL_EPISODES", "FINAL_EVAL_FILE", "SUITES", "Bench", "Run", "bench", "bench_runs", "configs_dir",
           "entries_of", "parse_shard", "pick_entries", "plan", "read_final_returns", "shard_of"]
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LOCK_WAIT_S = 5.0  # how long a runner tries for its slice's lock, and the runs', before refusing (`take_lock`)
LOOK_WAIT_S = 2.0  # at least this long for one run's lock: another runner may be looking at the run a moment


def entries_of(suites: list[str]) -> list[Entry]:
    """The entries of ``suites`` (built-in or plugins': ``zoo.bench.suites.suite_entries``), each once (suites share
    entries by name); one line listing the known suites for an unknown one."""
    found: dict[str, Entry] = {}
    for suite in suites:
        for entry in suite_entries(suite):
            if found.setdefault(entry.name, entry) != entry:
                raise ConfigError(f"suites disagree on entry '{entry.name}'")  # a bug in SUITES, caught early
    return list(found.values())


def pick_entries(entries: list[Entry], names: list[str] | None, suites: list[str]) -> list[Entry]:
    """The ``entries`` named in ``names`` (all of them for None), in the suites' order; one line for a name that is
    no entry of ``suites``."""
    if names is None:
        return entries
    known = [entry.name for entry in entries]
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else f"choose from {', '.join(known)}"
            raise ConfigError(f"--entries: '{name}' is not an entry of {' '.join(suites)}: {hint}")
    return [entry for entry in entries if entry.name in names]


@dataclass
class Run:
    """One entry and seed: where its run directory is and what is left to do for it."""

    entry: Entry
    seed: int
    path: Path
    error: str | None = None
    started: float = 0.0
    steps: list[list[str]] = field(default_factory=list)
    kept_at: Path | None = None  # finished in the results folder alone (no run directory here)

    @property
    def label(self) -> str:
        return f"{self.entry.name}/seed_{self.seed}"


def plan(run: Run, configs: Path, python: str = sys.executable) -> list[list[str]]:
    """The commands still needed for ``run`` (see the module docstring), in order; a ZooError naming the folder or
    file for a run that is not the entry's (call once no other process holds the run directory)."""
    path, entry = run.path, run.entry
    for folder in (path.parent, path):
        if folder.is_symlink():
            raise ZooError(f"'{folder}' is a symbolic link: zoo bench trains only into folders of its own under the "
                           f"runs directory: move it away, zoo bench neither trains into nor reports it")
    evaluate = [python, "-m", "zoo", "eval", str(path), "--episodes", str(FINAL_EVAL_EPISODES),
                "--json", str(path / FINAL_EVAL_FILE)]
    if (path / CONFIG_FILE).is_file():
        check_own(path, entry, run.seed, configs)
        if (path / FINAL_EVAL_FILE).is_file():
            read_final_returns(path)
            check_eval_seed(path, entry, run.seed)
            return []
        if (path / MODEL_FILE).is_file():
            return [evaluate]
        if (path / CHECKPOINT_FILE).is_file():
            return [[python, "-m", "zoo", "run", "--resume", str(path), "-q"], evaluate]
        shutil.rmtree(path)  # killed before its first checkpoint (iteration 0): nothing was trained
    elif path.exists() or path.is_symlink():
        if not path.is_dir() or path.is_symlink() or any(not child.name.startswith(".") for child in path.iterdir()):
            raise ZooError(f"'{path}' is not a run directory of zoo bench (no config.yaml, but other files): move it "
                           "away, zoo bench neither trains into nor reports it")
        shutil.rmtree(path)  # killed before it wrote its config (a lock, temporaries): nothing was trained
    train = [python, "-m", "zoo", "run", "--config", str(configs / entry.config), "--seed", str(run.seed),
             "--set", f"runs_dir={path.parent}", "--exp-name", path.name, "-q",
             *[arg for override in entry.overrides for arg in ("--set", override)]]
    return [train, evaluate]


def _error_line(ended: Ended) -> str:
    if ended.error is not None:
        return ended.error
    lines = [line for line in ended.output.splitlines() if line.strip()]
    return lines[-1] if lines else f"the child {exit_cause(ended.code)}"


def _minutes(run: Run) -> float | None:
    # The measured training time of a finished run (its last metrics row), for the ETA.
    try:
        rows = RunView(run.kept_at or run.path).rows
        return float(rows[-1]["wall_time"]) / 60.0 if rows and "wall_time" in rows[-1] else None
    except (ZooError, ValueError, KeyError, TypeError):
        return None


class Bench:
    """Runs ``runs`` ``jobs`` at a time (see the module docstring); ``run()`` returns the failed ones.

    Each run is looked at under its lock (``locks``, default: beside the runs, ``zoo.bench.locks``), which is let go
    of again while it waits for a free job and taken back (and the run looked at again: another runner may have
    done it meanwhile) when it starts, then held until the run is done with."""

    def __init__(self, runs: list[Run], jobs: int, stream: IO[str] | None = None, configs: Path | None = None,
                 release_wait_s: float = RELEASE_WAIT_S, results: Path | None = None,
                 locks: RunLocks | None = None) -> None:
        self.runs, self.jobs = runs, jobs
        self.results = results  # where each evaluated run's small files are kept (zoo.bench.results), or None
        self.stream = stream or sys.stderr
        self.configs = configs if configs is not None else configs_dir([run.entry for run in runs])
        self.release_wait_s = release_wait_s
        self.children = ChildRuns()
        self.active: dict[str, Run] = {}  # by label, as the children are
        self.signal: int | None = None
        self.locks = locks if locks is not None else RunLocks(runs[0].path.parents[1] if runs else Path("."))
        self._measured: dict[str, float | None] = {}  # by label: each finished run's minutes, read once

    def _eta_minutes(self, pending: list[Run]) -> float:
        measured: dict[str, list[float]] = {}
        for run in self.runs:
            if run.label not in self._measured and ((run.kept_at or run.path) / FINAL_EVAL_FILE).is_file():
                self._measured[run.label] = _minutes(run)
            if (minutes := self._measured.get(run.label)) is not None:
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
        # The child holds the run's lock too: killed, this runner leaves it to the child until the child has ended.
        self.children.start(run.label, run.steps.pop(0), hold=self.locks.held[run.label])
        self.active[run.label] = run

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signal = self.signal or signum
        self.children.send(signal.SIGTERM)  # each run saves its checkpoint and exits

    def _look(self, run: Run, deadline: float, lock_deadline: float, quiet: bool = False) -> bool:
        """Take ``run``'s lock and plan it (``_plan``); a run finished before is kept (``_keep``). True when the
        run has steps left to start, with its lock held; else (done, failed, or another runner's) without it."""
        run.steps, run.kept_at, run.error = [], None, None
        try:
            holder = self.locks.take(run.label, max(lock_deadline, time.monotonic() + LOOK_WAIT_S), deadline)
        except ZooError as exc:
            holder, run.error = None, str(exc)
        if holder is not None:
            run.error = (f"another zoo bench (pid {holder}) is running it (an overlapping --shard, or the same runs "
                         f"directory): left to it; run this command again once that one has finished")
        if run.error is not None:
            return False
        self._plan(run, deadline, quiet)
        if not run.steps and run.error is None and run.kept_at is None and self.signal is None:
            try:  # evaluated before (perhaps before the first --results): kept now
                self._keep(run)
            except ZooError as exc:
                run.error = str(exc)
        if run.steps and run.error is None:
            return True
        self.locks.release(run.label)
        return False

    def _plan(self, run: Run, deadline: float, quiet: bool = False) -> None:
        """``run.steps``, once the killed runner's child (saving on its SIGTERM) has let go of its directory; a
        run that cannot be planned gets ``error``."""
        if not wait_for_release(run.path, max(0.0, deadline - time.monotonic()), lambda: self.signal is not None):
            if self.signal is None:
                run.error = (f"'{run.path}' is in use by another zoo process (pid {lock_owner(run.path) or '?'}) "
                             f"after waiting {self.release_wait_s:.0f} s: stop it, then run zoo bench again")
            return
        if self._finished_in_results(run, quiet):
            return
        try:
            run.steps = plan(run, self.configs)
        except ZooError as exc:
            run.error = str(exc)

    def _finished_in_results(self, run: Run, quiet: bool = False) -> bool:
        """Whether ``run`` needs nothing more: it has no directory here and is finished in the results folder (then
        ``kept_at``), or its kept seed is a symbolic link (then ``error``: nothing is trained to be kept there)."""
        if self.results is None or run.path.exists() or run.path.is_symlink():
            return False
        kept = kept_path(self.results, run.entry.name, run.seed)
        try:
            refuse_links(kept)
        except ZooError as exc:
            run.error = str(exc)
            return True
        problem = finished_kept(kept, run.entry, run.seed, self.configs)
        if problem is None:
            run.kept_at = kept
            return True
        if problem and not quiet:  # kept files there, but not this entry's finished run: say why it trains again
            print(f"zoo bench: {run.label} trains again: {problem}", file=self.stream, flush=True)
        return False

    def _ended(self, ended: Ended, run: Run) -> bool:
        """Take in a child that ended; True when ``run`` is done (finished or failed), False when it goes on."""
        if self.signal is not None:  # stopped (it saved): the next start goes on from there
            return False
        if ended.code != 0:
            run.error = _error_line(ended)
        elif ended.args[3] == "run" and "--config" in ended.args and (
                (trained := (ended.summary or {}).get("run_dir")) is None or Path(trained) != run.path):
            run.error = f"zoo run trained into '{trained}' instead of '{run.path}'"  # never counted as this seed
        elif run.steps:
            self._start(run)
            return False
        elif ended.args[3] == "eval":
            try:
                read_final_returns(run.path)
                self._keep(run)
            except ZooError as exc:
                run.error = str(exc)
        return True

    def _keep(self, run: Run) -> None:
        """Keep an evaluated run's small files in the results folder (once: unchanged ones are not rewritten)."""
        if self.results is None:
            return
        destination = kept_path(self.results, run.entry.name, run.seed)
        if not is_kept(run.path, destination):
            keep(run.path, destination)

    def run(self) -> list[Run]:
        """Do what is left of every run; the runs that failed (with ``error``)."""
        previous = {signum: signal.signal(signum, self._on_signal) for signum in _SIGNALS}
        try:
            # One wait for all: the killed children (and the killed runner's forks) die together.
            deadline, lock_deadline = time.monotonic() + self.release_wait_s, time.monotonic() + LOCK_WAIT_S
            for run in self.runs:
                if self.signal is None and self._look(run, deadline, lock_deadline):
                    self.locks.release(run.label)  # taken again when it starts: a waiting run holds no lock
            pending = [run for run in self.runs if run.steps and run.error is None]
            if self.signal is not None:
                pending = []
            done = len(self.runs) - len(pending)
            self._report(done, pending)
            while self.active or (pending and self.signal is None):
                while pending and len(self.active) < self.jobs and self.signal is None:
                    run = pending.pop(0)
                    now = time.monotonic()
                    if self._look(run, now + self.release_wait_s, now, quiet=True):
                        self._start(run)
                    else:  # done meanwhile, by another runner, or failed
                        done += 1
                        self._report(done, pending)
                finished = self.children.ended()
                if not finished:
                    time.sleep(0.2)
                    continue
                for label, ended in finished:
                    if self._ended(ended, self.active.pop(label)):
                        self.locks.release(label)
                        done += 1
                        self._report(done, pending)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.children.stop()  # nothing left running after an error here (on the way out, they save)
            self.locks.release_all()
        return [run for run in self.runs if run.error is not None]


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/M"`` -> ``(K, M)`` with ``1 <= K <= M``; ConfigError (one line, with an example) otherwise."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        index, count = 0, 0
    if not 1 <= index <= count:
        raise ConfigError(f"--shard '{text}' is not K/M with 1 <= K <= M: e.g. --shard 2/4 trains the 2nd of 4 "
                          "disjoint slices")
    return index, count


def shard_of(runs: list[Run], shard: tuple[int, int] | None) -> list[Run]:
    """The K-th of M disjoint slices of ``runs`` (every M-th run from the K-th: each slice mixes entries and
    seeds, so slices take about as long); all of them for no shard. The M slices together are ``runs``."""
    if shard is None:
        return runs
    index, count = shard
    return runs[index - 1::count]


def bench_runs(entries: list[Entry], seeds: int | None, root: Path) -> list[Run]:
    """Every run of ``entries`` x seeds 0 .. ``seeds``-1 (None: each entry's own ``Entry.seeds``) under ``root``,
    seed-major: the entries a suite compares (SAC and SAC-ACE, say) finish their seeds side by side, and every
    slice of ``shard_of`` holds each entry's seeds in turn, so that slices take about as long."""
    most = max((entry.seed_count(seeds) for entry in entries), default=0)
    return [Run(entry, seed, root / entry.name / f"seed_{seed}") for seed in range(most)
            for entry in entries if seed < entry.seed_count(seeds)]


def bench(suites: list[str], seeds: int | None = None, jobs: int = 1, runs_dir: str = "runs",
          stream: IO[str] | None = None, configs: str | Path | None = None,
          shard: tuple[int, int] | None = None, results: str | Path | None = None,
          only: list[str] | None = None) -> int:
    """Run ``seeds`` seeds (0 .. seeds-1; None: each entry's own count) of every entry of ``suites``; the exit code (0
    all done, 1 a run failed, 128 + N after signal N). ``configs``: the folder of the suites' config files (default
    ``configs_dir``). ``shard=(K, M)``: only the K-th of M disjoint slices (``shard_of``), so that M runners -- on
    as many machines, into one shared ``runs_dir`` -- train a suite together; each slice has its own lock, each run
    too (``zoo.bench.locks``: overlapping slices never train a run twice), and ``--report`` reads whatever has
    finished, whichever runner trained it. ``results``: a folder where each run's small files are kept as soon as it
    is evaluated (``zoo.bench.results``), to commit; a run with no directory under ``runs_dir`` whose files are kept
    there, of the entry's config, counts as finished. ``only``: train only these entries of the suites
    (``pick_entries``), in the suites' order."""
    check_counts(seeds, jobs)
    entries = pick_entries(entries_of(suites), only, suites)
    configs = Path(configs) if configs is not None else configs_dir(entries)
    root = Path(runs_dir) / "bench"
    root.mkdir(parents=True, exist_ok=True)
    lock_name = ".lock" if shard is None else f".lock-shard-{shard[0]}-of-{shard[1]}"
    lock, _ = take_lock(root / lock_name, time.monotonic() + LOCK_WAIT_S)  # held for the whole bench
    if lock is None:
        which = "" if shard is None else f" for shard {shard[0]}/{shard[1]}"
        raise ZooError(f"another zoo bench is running in '{root}'{which}: wait for it, or use another --runs-dir")
    try:
        runner = Bench(shard_of(bench_runs(entries, seeds, root), shard), jobs, stream, configs,
                       results=Path(results) if results is not None else None, locks=RunLocks(root))
        failed = runner.run()
    finally:
        os.close(lock)
    out = stream or sys.stderr
    for run in failed:
        print(f"zoo bench: {run.label} failed: {run.error}", file=out)
    if runner.signal is not None:
        print(f"zoo bench: stopped by {signal.Signals(runner.signal).name}; run the same command again to finish",
              file=out)
        return 128 + int(runner.signal)
    return 1 if failed else 0
