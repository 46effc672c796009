"""The run directory: resolved config, metrics (JSONL and CSV), atomic checkpoints, final model, and a lock.

Guarantees, each tested:

- One process owns a run directory at a time (``lock``: an advisory ``flock`` on ``.lock``, released by the OS
  when the process dies, so a killed run never leaves a stale lock).
- Checkpoints and the model are written to a temporary file, fsync-ed and renamed: a reader sees the old file or
  the new one, never half of one. Temporary files a killed writer left behind are removed by the next owner.
- Metrics rows are appended once per iteration. A checkpoint records how many rows it covers; a resumed run
  first cuts both files back to that many rows, so after any number of kills and resumes each iteration appears
  exactly once, in order.
- Everything in a checkpoint loads with ``torch.load(weights_only=True)``: tensors and plain Python values only
  (numpy arrays are stored as bytes with their dtype and shape). Reading weights never runs code from the file.
  The one exception is the env snapshot (pickled bytes inside the checkpoint), which only ``--resume`` unpickles:
  a run directory you resume must be one you trust.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import pickle
import re
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from ..config import dump_config
from ..errors import ConfigError, RunDirectoryError, first_line

CONFIG_FILE = "config.yaml"
CHECKPOINT_FILE = "checkpoint.pt"
MODEL_FILE = "model.pt"
BEST_MODEL_FILE = "best_model.pt"
METRICS_JSONL = "metrics.jsonl"
METRICS_CSV = "metrics.csv"
LOCK_FILE = ".lock"
CHECKPOINT_FORMAT = 2


def _file_mode() -> int:
    # mkstemp creates 0o600 files; run files should be readable as any other file the user writes.
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_FILE_MODE = _file_mode()


def _atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write through ``write`` to a temporary file beside ``path``, fsync it, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(temporary, _FILE_MODE)
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` that never leaves a half-written file: a reader sees the old file or the new one."""
    _atomic_write(path, lambda stream: torch.save(obj, stream))


def _atomic_write_text(path: Path, text: str) -> None:
    _atomic_write(path, lambda stream: stream.write(text.encode("utf-8")))


# -- weights-only-safe state ------------------------------------------------------------------------------
def encode_state(value: Any) -> Any:
    """``value`` with numpy arrays and scalars replaced by plain values that ``weights_only`` loading accepts."""
    if isinstance(value, dict):
        return {key: encode_state(child) for key, child in value.items()}
    if isinstance(value, (list, tuple)):
        children = [encode_state(child) for child in value]
        return tuple(children) if isinstance(value, tuple) else children
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError("object arrays cannot be stored in a checkpoint")
        return {"__ndarray__": np.ascontiguousarray(value).tobytes(), "dtype": value.dtype.str,
                "shape": list(value.shape)}
    if isinstance(value, np.generic):
        return value.item()
    return value


def decode_state(value: Any) -> Any:
    """Inverse of ``encode_state``."""
    if isinstance(value, dict):
        if "__ndarray__" in value:
            array = np.frombuffer(value["__ndarray__"], dtype=np.dtype(value["dtype"]))
            return array.reshape(value["shape"]).copy()
        return {key: decode_state(child) for key, child in value.items()}
    if isinstance(value, (list, tuple)):
        children = [decode_state(child) for child in value]
        return tuple(children) if isinstance(value, tuple) else children
    return value


def load_weights_only(path: Path) -> Any:
    """``torch.load`` that never runs code from the file; any failure is one RunDirectoryError line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RunDirectoryError(f"'{path}' does not exist: the run has not saved it yet") from None
    except OSError as exc:
        raise RunDirectoryError(f"'{path}' cannot be read ({exc.strerror}): check its permissions") from None
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickle protocols; the error below says it all
            warnings.simplefilter("ignore")
            return decode_state(torch.load(io.BytesIO(data), map_location="cpu", weights_only=True))
    except Exception as exc:  # truncated, garbage, or carrying code that weights-only loading refuses
        text = str(exc)
        refused = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
        if refused or isinstance(exc, pickle.UnpicklingError):
            detail = f"it holds objects that are not weights ({refused.group(1) if refused else 'refused'})"
        else:
            detail = first_line(exc, 160)
        raise RunDirectoryError(
            f"'{path}' is not a loadable zoo file: {detail}; it is truncated, corrupted or not from zoo, and is "
            f"never unpickled: restore it from a copy or train again"
        ) from None


# -- names and creation -----------------------------------------------------------------------------------
def check_exp_name(exp_name: Any) -> None:
    """Raise ConfigError unless ``exp_name`` is a plain directory name that stays inside ``runs_dir``."""
    bad = (
        not isinstance(exp_name, str) or exp_name.strip() in ("", ".", "..") or exp_name != exp_name.strip()
        or any(ch in exp_name for ch in "/\\\0") or len(exp_name) > 200 or exp_name.startswith(".")
    )
    if bad:
        raise ConfigError(
            f"exp_name {exp_name!r} must be a plain directory name (no '/', not empty, not starting with '.'): "
            f"use e.g. --exp-name my_run"
        )


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


class RunDirectory:
    """Paths, writers and the lock of one run."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock_handle: Any = None
        self._columns: list[str] | None = None
        self._streams: dict[str, IO[str]] = {}  # metrics files, open for appending while the run writes them

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT_FILE

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    # -- ownership ----------------------------------------------------------------------------------------
    def lock(self) -> None:
        """Take the run directory for this process, or raise RunDirectoryError when another process has it."""
        import fcntl

        handle = open(self.path / LOCK_FILE, "a+")  # noqa: SIM115 - held open for the life of the run
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            owner = handle.read().strip() or "?"
            handle.close()
            raise RunDirectoryError(
                f"run directory '{self.path}' is in use by another zoo process (pid {owner}): wait for it to finish "
                f"or stop it first"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._lock_handle = handle

    def unlock(self) -> None:
        """Close the metrics files and release the lock (also released by the OS when the process exits)."""
        self.close_metrics()
        if self._lock_handle is not None:
            self._lock_handle.close()
            self._lock_handle = None

    def clean_temporaries(self) -> None:
        """Remove temporary files that a killed writer left behind (call while holding the lock)."""
        for leftover in self.path.glob(".*.tmp"):
            leftover.unlink(missing_ok=True)

    # -- config and metrics -------------------------------------------------------------------------------
    def write_config(self, cfg: Any) -> Path:
        """Write the resolved config; ``zoo run --config RUN_DIR/config.yaml`` reproduces the run."""
        return dump_config(cfg, self.config_path)

    def append_metrics(self, row: dict[str, Any]) -> None:
        """Append one row to metrics.jsonl and metrics.csv.

        A key that no earlier row had gets a new CSV column: the CSV is rewritten once with the wider header
        (earlier rows get empty cells), so every key of every row reaches both files.
        """
        clean = {key: _plain(value) for key, value in row.items()}
        jsonl = self._stream(METRICS_JSONL)
        jsonl.write(json.dumps(clean) + "\n")
        jsonl.flush()  # every row reaches the file when it is written (one write call): readers see whole rows
        csv_path = self.path / METRICS_CSV
        if self._columns is None:
            self._columns = _read_csv_header(csv_path)
        new_keys = [key for key in clean if key not in self._columns]
        if new_keys:
            self._columns = self._columns + new_keys
            self._close_stream(METRICS_CSV)  # the rewrite below replaces the file
            rows = _read_csv_rows(csv_path)
            _atomic_write_text(csv_path, _csv_text(self._columns, rows))
        stream = self._stream(METRICS_CSV)
        csv.writer(stream).writerow(["" if clean.get(col) is None else clean[col] for col in self._columns])
        stream.flush()

    def _stream(self, name: str) -> IO[str]:
        # Kept open between rows: opening and closing two files per iteration cost a few % of a fast run.
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = open(self.path / name, "a", newline="")  # noqa: SIM115
        return stream

    def _close_stream(self, name: str) -> None:
        stream = self._streams.pop(name, None)
        if stream is not None:
            stream.close()

    def close_metrics(self) -> None:
        """Close the metrics files (rows are flushed as they are written; the next row reopens them)."""
        for name in list(self._streams):
            self._close_stream(name)

    def metrics_rows(self) -> list[dict[str, Any]]:
        """The rows of metrics.jsonl, in order."""
        path = self.path / METRICS_JSONL
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def truncate_metrics(self, rows: int) -> None:
        """Keep the first ``rows`` rows of both metrics files (what the checkpoint being resumed covers)."""
        self.close_metrics()  # the files are replaced below
        jsonl = self.path / METRICS_JSONL
        if jsonl.exists():
            lines = [line for line in jsonl.read_text().splitlines(keepends=True) if line.endswith("\n")]
            if len(lines) != rows:
                _atomic_write_text(jsonl, "".join(lines[:rows]))
        csv_path = self.path / METRICS_CSV
        if csv_path.exists():
            header = _read_csv_header(csv_path)
            kept = _read_csv_rows(csv_path)[:rows]
            _atomic_write_text(csv_path, _csv_text(header, kept) if header else "")
        self._columns = None

    # -- checkpoints --------------------------------------------------------------------------------------
    def save_checkpoint(self, state: dict[str, Any], separate: dict[str, Any] | None = None) -> None:
        """Write ``state`` (plain values, tensors, numpy arrays) atomically as checkpoint.pt.

        Each entry of ``separate`` (e.g. a replay buffer) goes to a file of its own, ``NAME-ITERATION.pt``,
        written before the checkpoint that names it; files no checkpoint names any more are removed after. A kill
        at any moment thus leaves a checkpoint whose separate files all exist.
        """
        files = {}
        tag = int(state.get("loop", {}).get("iteration", 0))
        for name, part in (separate or {}).items():
            files[name] = f"{name}-{tag:09d}.pt"
            atomic_torch_save(encode_state(part), self.path / files[name])
        atomic_torch_save(encode_state({**state, "separate_files": files}), self.checkpoint_path)
        for name, filename in files.items():
            for old in self.path.glob(f"{name}-*.pt"):
                if old.name != filename:
                    old.unlink(missing_ok=True)

    def save_model(self, state: dict[str, Any]) -> None:
        """Write the final model (policy weights and observation normaliser) atomically as model.pt."""
        atomic_torch_save(encode_state(state), self.path / MODEL_FILE)

    def save_best_model(self, state: dict[str, Any]) -> None:
        """Write the model of the best evaluation so far (as ``model.pt``, plus its eval return) atomically."""
        atomic_torch_save(encode_state(state), self.path / BEST_MODEL_FILE)

    def load_checkpoint(self, separate: bool = True) -> dict[str, Any]:
        """The checkpoint, loaded weights-only; RunDirectoryError when it is missing, unreadable or foreign.

        With ``separate`` the files of its separately saved components are loaded into ``state["separate"]``.
        """
        if not self.checkpoint_path.exists():
            raise RunDirectoryError(f"no {CHECKPOINT_FILE} in '{self.path}': the run saved no checkpoint yet")
        state = load_weights_only(self.checkpoint_path)
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT or "policy" not in state:
            raise RunDirectoryError(
                f"'{self.checkpoint_path}' is not a checkpoint of this zoo version (format "
                f"{state.get('format') if isinstance(state, dict) else '?'}, expected {CHECKPOINT_FORMAT}): "
                f"train again with this version"
            )
        files = state.get("separate_files", {}) if separate else {}
        state["separate"] = {name: load_weights_only(self.path / filename) for name, filename in files.items()}
        return state


def _read_csv_header(path: Path) -> list[str]:
    if not path.exists() or path.stat().st_size == 0:
        return []
    with open(path, newline="") as stream:
        return next(csv.reader(stream), [])


def _read_csv_rows(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    with open(path, newline="") as stream:
        text = stream.read()
    if not text.endswith("\n"):  # a row cut by a kill: drop it
        text = text[: text.rfind("\n") + 1]
    return list(csv.reader(io.StringIO(text)))[1:]


def _csv_text(columns: list[str], rows: list[list[str]]) -> str:
    stream = io.StringIO()
    writer = csv.writer(stream)
    writer.writerow(columns)
    for row in rows:
        writer.writerow(row + [""] * (len(columns) - len(row)))
    return stream.getvalue()


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
