"""The run directory: resolved config, metrics (JSONL and CSV), atomic checkpoints, final model, and a lock.

Guarantees, each tested:

- One process owns a run directory at a time (``lock``: an advisory ``flock`` on ``.lock``, released by the OS
  when the process dies, so a killed run never leaves a stale lock). A ``.lock`` that is not a regular file (a
  FIFO, a device, a symbolic link) is refused in one line, never opened in a way that could block. The owner
  writes into the directory it locked, whatever its name becomes: on Linux every file is reached through the
  directory's own file descriptor, so a run directory moved (or moved and replaced by a copy) while a process
  trains in it keeps one writer per directory.
- Checkpoints and the model are written to a temporary file, fsync-ed and renamed: a reader sees the old file or
  the new one, never half of one. Temporary files a killed writer left behind are removed by the next owner.
- Metrics rows are appended once per iteration. A checkpoint records how many rows it covers; a resumed run
  checks those rows (iterations 1..N, in order: ``metrics_files``) and writes both files back to exactly them, so
  after any number of kills and resumes each iteration appears exactly once, in order.
- A write that fails (a full disk, ``ulimit -f``, a read-only directory) is one RunDirectoryError line; the
  checkpoint on disk stays the last whole one, and files written for a checkpoint that failed are removed.
- Everything in a checkpoint loads with ``torch.load(weights_only=True)``: tensors and plain Python values only
  (numpy arrays and bytes are stored as uint8 tensors, arrays with their dtype and shape). Reading weights never
  runs code from the file.
  The one exception is the env snapshot (pickled bytes inside the checkpoint), which only ``--resume`` unpickles:
  a run directory you resume must be one you trust.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from ..config import check_exp_name, dump_config
from ..errors import ConfigError, RunDirectoryError, ZooError
from ..pipelines.loop import CHECKPOINT_FORMAT
from .metrics_files import METRICS_CSV, METRICS_JSONL, MetricsWriter, read_rows
from .state_files import (
    atomic_torch_save,
    atomic_write_text,
    decode_state,
    encode_state,
    load_weights_only,
    not_regular,
    read_regular,
    writing,
)

CONFIG_FILE = "config.yaml"
CHECKPOINT_FILE = "checkpoint.pt"
MODEL_FILE = "model.pt"
BEST_MODEL_FILE = "best_model.pt"
LOCK_FILE = ".lock"
ENVIRONMENT_FILE = "environment.json"
__all__ = ["BEST_MODEL_FILE", "CHECKPOINT_FILE", "CHECKPOINT_FORMAT", "CONFIG_FILE", "LOCK_FILE", "METRICS_CSV",
           "METRICS_JSONL", "MODEL_FILE", "RunDirectory", "atomic_torch_save", "check_exp_name", "decode_state",
           "encode_state", "load_weights_only", "lock_owner", "new_run_directory"]
# A component saved in a file of its own beside the checkpoint: NAME-ITERATION.pt (e.g. replay-000000050.pt).
_SEPARATE_FILE = re.compile(r"^[A-Za-z_]+-\d{9}\.pt$")


# -- names and creation -----------------------------------------------------------------------------------
def check_runs_dir(runs_dir: Any) -> Path:
    """The runs directory as a Path, refused in one line when it is a file or cannot be written."""
    if not isinstance(runs_dir, str) or not runs_dir.strip():
        raise ConfigError(f"runs_dir {runs_dir!r} must be a directory path: e.g. --set runs_dir=runs")
    root = Path(runs_dir)
    existing = next((p for p in (root, *root.parents) if p.exists()), None)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"runs_dir '{root}' is a file, not a directory: choose another runs_dir")
    if existing is not None and (not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK)):
        raise ConfigError(f"runs_dir '{root}' cannot be created or written ('{existing}' is not writable): "
                          f"choose a writable runs_dir")
    return root


def new_run_directory(runs_root: str, exp_name: str) -> Path:
    """Create ``runs_root/exp_name`` (or ``exp_name_2``, ``_3``... when taken): an earlier run is never overwritten."""
    check_exp_name(exp_name)
    root = check_runs_dir(runs_root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        for index in range(1, 10_000):
            candidate = root / (exp_name if index == 1 else f"{exp_name}_{index}")
            try:
                candidate.mkdir()
                return candidate
            except FileExistsError:
                continue
    except OSError as exc:
        raise ConfigError(
            f"cannot create a run directory in '{root}' ({exc.strerror}): choose another runs_dir"
        ) from None
    raise RunDirectoryError(f"too many runs named '{exp_name}' in {root}: choose another --exp-name")


# How a lock file is opened: never through a symbolic link (its pid would be written wherever that points), never
# blocking (a FIFO in its place), never inherited by a child.
_LOCK_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_RECORD_MAX_BYTES = 1 << 20  # environment.json: a few KB per session


def lock_owner(path: str | Path) -> str | None:
    """The pid (as written in its lock file, ``"?"`` if unreadable) of the process that holds run directory
    ``path`` now, or None when no process does (also when ``.lock`` is no regular file: no zoo process can hold
    that one, and ``lock`` refuses it). Probes with a shared lock, taken and dropped at once."""
    import fcntl

    try:
        descriptor = os.open(Path(path) / LOCK_FILE, os.O_RDONLY | _LOCK_FLAGS)
    except OSError:
        return None
    if not_regular(os.fstat(descriptor).st_mode) is not None:
        os.close(descriptor)
        return None
    with os.fdopen(descriptor) as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return handle.read(32).strip() or "?"
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    return None


class RunDirectory:
    """Paths, writers and the lock of one run.

    ``path`` is the name the run was opened by (what messages show); once locked, files are reached through
    ``root``, the locked directory itself (see the module docstring).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock_handle: IO[str] | None = None
        self._lock_inode: tuple[int, int] | None = None
        self._directory: int | None = None  # the locked directory's file descriptor
        self._moved_reported = False
        self._metrics = MetricsWriter(lambda: self.root, self._write_text)

    @property
    def root(self) -> Path:
        """Where the files are: the locked directory through its descriptor (Linux), else ``path``."""
        if self._directory is not None:
            return Path(f"/proc/self/fd/{self._directory}")
        return self.path

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT_FILE

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    # -- ownership ----------------------------------------------------------------------------------------
    def lock(self) -> None:
        """Take the run directory for this process, or raise RunDirectoryError when another process has it or it
        cannot be written."""
        import fcntl

        try:
            directory = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise RunDirectoryError(f"run directory '{self.path}' cannot be opened ({exc.strerror})") from None
        try:
            descriptor = self._open_lock_file(directory)
            if not os.access(self.path, os.W_OK):  # a read-only file system: the lock file could still open
                os.close(descriptor)
                raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        except OSError as exc:
            os.close(directory)
            raise RunDirectoryError(
                f"run directory '{self.path}' is not writable ({exc.strerror}): training writes into it: make it "
                f"writable, or copy it somewhere writable (cp -r) and resume the copy") from None
        except RunDirectoryError:
            os.close(directory)
            raise
        handle = os.fdopen(descriptor, "r+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = handle.read().strip() or "?"
            handle.close()
            os.close(directory)
            raise RunDirectoryError(
                f"run directory '{self.path}' is in use by another zoo process (pid {owner}): wait for it to finish "
                f"or stop it first"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._lock_handle = handle
        stat = os.fstat(descriptor)
        self._lock_inode = (stat.st_dev, stat.st_ino)
        if os.path.isdir(f"/proc/self/fd/{directory}"):
            self._directory = directory
        else:  # no /proc: files are reached by name
            os.close(directory)

    def _open_lock_file(self, directory: int) -> int:
        """The descriptor of ``.lock`` in the opened ``directory`` (created): a RunDirectoryError line when it is not
        a regular file, decided before it is opened (see ``_LOCK_FLAGS``)."""
        try:
            kind = not_regular(os.stat(LOCK_FILE, dir_fd=directory, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            kind = None
        if kind is None:  # a link made since the look: ELOOP, an OSError line of its own
            descriptor = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | _LOCK_FLAGS, 0o666, dir_fd=directory)
            kind = not_regular(os.fstat(descriptor).st_mode)
            if kind is None:
                return descriptor
            os.close(descriptor)
        raise RunDirectoryError(f"'{self.path / LOCK_FILE}' is {kind}, not a regular file: zoo locks a run directory "
                                f"with a file of its own; move it away")

    def unlock(self) -> None:
        """Close the metrics files and release the lock (also released by the OS when the process exits)."""
        self.close_metrics()
        if self._lock_handle is not None:
            self._lock_handle.close()
            self._lock_handle = None
        if self._directory is not None:
            os.close(self._directory)
            self._directory = None

    def _check_not_moved(self) -> None:
        # Said once: the run goes on in the directory it locked (see the module docstring).
        if self._lock_inode is None or self._moved_reported:
            return
        try:
            stat = os.stat(self.path / LOCK_FILE)
            same = (stat.st_dev, stat.st_ino) == self._lock_inode
        except OSError:
            same = False
        if not same:
            self._moved_reported = True
            where = os.path.realpath(self.root) if self._directory is not None else "?"
            logging.getLogger("zoo").warning(
                f"run directory '{self.path}' was moved or replaced while this run trains in it: the run goes on "
                f"writing into the directory it locked, now at '{where}'")

    def clean_temporaries(self, keep: Iterable[str] = ()) -> None:
        """Remove temporary files that a killed writer left behind, and files of separately saved components that
        no checkpoint names (all but ``keep``); call while holding the lock."""
        keep = set(keep)
        with writing(self.path):
            for leftover in self.root.iterdir():
                name = leftover.name
                if (name.startswith(".") and name.endswith(".tmp")) or (
                        _SEPARATE_FILE.match(name) and name not in keep):
                    leftover.unlink(missing_ok=True)

    def _write_text(self, path: Path, text: str) -> None:
        with writing(self.path / path.name):
            atomic_write_text(path, text)

    # -- config and metrics -------------------------------------------------------------------------------
    def write_config(self, cfg: Any) -> Path:
        """Write the resolved config; ``zoo run --config RUN_DIR/config.yaml`` reproduces the run."""
        with writing(self.config_path):
            dump_config(cfg, self.root / CONFIG_FILE)
        return self.config_path

    def record_environment(self, facts: dict[str, Any] | None = None) -> None:
        """Add this session to ``environment.json``: what a run's results depend on beyond its config (the versions
        of zoo, Python, torch, numpy and gymnasium, whether the compiled rl_utils kernels or their numpy fallback
        ran, the machine) and ``facts`` (the policy's ``environment_record()``: the precision it chose), one entry per
        session, since a resumed run may continue under other versions."""
        path = self.root / ENVIRONMENT_FILE
        sessions = []
        try:
            sessions = list(json.loads(read_regular(path, _RECORD_MAX_BYTES)).get("sessions", []))
        except (OSError, ZooError, ValueError, AttributeError, TypeError, RecursionError):
            pass  # none yet, or unreadable (no regular file, say): a new list (a record, never an input)
        sessions.append({**environment(), **(facts or {})})
        self._write_text(path, json.dumps({"sessions": sessions}, indent=1) + "\n")

    def update_environment(self, facts: dict[str, Any]) -> None:
        """Merge ``facts`` into this session's entry of ``environment.json`` (the last one ``record_environment``
        added): facts learnt after the start, such as the learning step's compile time."""
        path = self.root / ENVIRONMENT_FILE
        try:
            sessions = list(json.loads(path.read_text()).get("sessions", []))
        except (OSError, ValueError, AttributeError):
            sessions = []
        if not sessions or not isinstance(sessions[-1], dict):
            self.record_environment(facts)
            return
        sessions[-1] = {**sessions[-1], **facts}
        self._write_text(path, json.dumps({"sessions": sessions}, indent=1) + "\n")

    def append_metrics(self, row: dict[str, Any]) -> None:
        """Append one row to metrics.jsonl and metrics.csv (a key no earlier row had gets a new CSV column)."""
        with writing(self.path / METRICS_JSONL):
            self._metrics.append(row)

    def close_metrics(self) -> None:
        """Close the metrics files (rows are flushed as they are written; the next row reopens them)."""
        self._metrics.close()

    def metrics_rows(self) -> list[dict[str, Any]]:
        """The rows of metrics.jsonl, in order (RunDirectoryError naming a damaged line)."""
        return read_rows(self.root / METRICS_JSONL)

    def rewrite_metrics(self, rows: list[dict[str, Any]]) -> None:
        """Make both metrics files hold exactly ``rows`` (a resumed run's: what its checkpoint covers)."""
        self._metrics.rewrite(rows)

    def truncate_metrics(self, rows: int) -> None:
        """Keep the first ``rows`` rows of both metrics files."""
        self.rewrite_metrics(self.metrics_rows()[:rows])

    # -- checkpoints --------------------------------------------------------------------------------------
    def save_checkpoint(self, state: dict[str, Any], separate: dict[str, Any] | None = None,
                        separate_unchanged: bool = False) -> None:
        """Write ``state`` (plain values, tensors, numpy arrays) atomically as checkpoint.pt.

        Each entry of ``separate`` (a component such as a replay buffer, whose ``state_dict()`` is taken when it
        is written, or that state itself) goes to a file of its own, ``NAME-ITERATION.pt``,
        written before the checkpoint that names it; files no checkpoint names any more are removed after. A kill
        at any moment thus leaves a checkpoint whose separate files all exist; a write that fails removes the
        files it wrote. ``separate_unchanged``: the components are as the existing files of the same names hold
        them (just restored from them), which are then kept instead of written again.
        """
        self._check_not_moved()
        files, written = {}, []
        tag = int(state.get("loop", {}).get("iteration", 0))
        try:
            for name, part in (separate or {}).items():
                files[name] = f"{name}-{tag:09d}.pt"
                target = self.root / files[name]
                existed = target.is_file()
                if separate_unchanged and existed:
                    continue
                state_of = getattr(part, "state_dict", None)
                with writing(self.path / files[name]):
                    atomic_torch_save(encode_state(part if state_of is None else state_of()), target)
                if not existed:  # a file of the same iteration may be the one the checkpoint on disk names
                    written.append(target)
            with writing(self.checkpoint_path):
                atomic_torch_save(encode_state({**state, "separate_files": files}), self.root / CHECKPOINT_FILE)
        except BaseException:
            for target in written:
                target.unlink(missing_ok=True)
            raise
        for name, filename in files.items():
            for old in self.root.glob(f"{name}-*.pt"):
                if old.name != filename:
                    old.unlink(missing_ok=True)

    def save_model(self, state: dict[str, Any]) -> None:
        """Write the final model (policy weights and observation normaliser) atomically as model.pt."""
        with writing(self.path / MODEL_FILE):
            atomic_torch_save(encode_state(state), self.root / MODEL_FILE)

    def save_best_model(self, state: dict[str, Any]) -> None:
        """Write the model of the best evaluation so far (as ``model.pt``, plus its eval return) atomically."""
        with writing(self.path / BEST_MODEL_FILE):
            atomic_torch_save(encode_state(state), self.root / BEST_MODEL_FILE)

    def load_checkpoint(self, separate: bool | Iterable[str] = True) -> dict[str, Any]:
        """The checkpoint, loaded weights-only; RunDirectoryError when it is missing, unreadable or foreign.

        ``separate``: the names of separately saved components to load into ``state["separate"]`` (True: all the
        checkpoint names; False: none; ``load_separate`` loads them later).
        """
        if not (self.root / CHECKPOINT_FILE).exists():
            raise RunDirectoryError(f"no {CHECKPOINT_FILE} in '{self.path}': the run saved no checkpoint yet")
        state = load_weights_only(self.root / CHECKPOINT_FILE)
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT or "policy" not in state:
            raise RunDirectoryError(
                f"'{self.checkpoint_path}' is not a checkpoint of this zoo version (format "
                f"{state.get('format') if isinstance(state, dict) else '?'}, expected {CHECKPOINT_FORMAT}): "
                f"train again with this version"
            )
        state["separate"] = {}
        names = state.get("separate_files", {}) if separate is True else () if separate is False else separate
        self.load_separate(state, names)
        return state

    def load_separate(self, state: dict[str, Any], names: Iterable[str]) -> None:
        """Load the files of the separately saved components ``names`` that ``state`` (a checkpoint) names."""
        files = state.get("separate_files", {})
        for name in names:
            if name not in files:
                continue  # the pipeline reports a component its checkpoint lacks
            path = self.root / files[name]
            if not path.exists():
                hint = " or resume with --set pipeline.save_replay=false (an empty buffer is refilled)" \
                    if name == "replay" else ""
                raise RunDirectoryError(
                    f"'{self.path / files[name]}' (the {name} saved with checkpoint.pt) is missing: restore it from "
                    f"a copy{hint}")
            state["separate"][name] = load_weights_only(path)


def environment() -> dict[str, Any]:
    """The versions and machine this process trains with (see ``RunDirectory.record_environment``)."""
    import importlib.metadata
    import platform
    import time

    import gymnasium
    import numpy
    import torch

    from .. import __version__
    from ..rl_utils._scan import kernels_available

    try:
        scipy_version = importlib.metadata.version("scipy")
    except importlib.metadata.PackageNotFoundError:
        scipy_version = None
    return {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "zoo": __version__, "python": platform.python_version(),
        "torch": torch.__version__, "numpy": numpy.__version__, "gymnasium": gymnasium.__version__,
        "scipy": scipy_version, "rl_utils_kernels": "compiled C" if kernels_available() else "numpy fallback",
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
        "machine": f"{platform.system()} {platform.machine()} {platform.processor() or ''}".strip(),
        "cpus": os.cpu_count(),
    }
