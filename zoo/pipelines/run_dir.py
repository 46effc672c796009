"""The run directory: resolved config, append-only metrics (JSONL and CSV), atomic checkpoints, final model."""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..config import dump_config
from ..errors import ZooError

CONFIG_FILE = "config.yaml"
CHECKPOINT_FILE = "checkpoint.pt"
MODEL_FILE = "model.pt"


def atomic_torch_save(obj: Any, path: Path) -> None:
    """Write ``obj`` to a temporary file beside ``path``, fsync it, then rename: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            torch.save(obj, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def new_run_directory(runs_root: str, exp_name: str) -> Path:
    """``runs_root/exp_name``, or ``exp_name_2``, ``_3``... when taken: an earlier run is never overwritten."""
    root = Path(runs_root)
    root.mkdir(parents=True, exist_ok=True)
    for index in range(1, 10_000):
        candidate = root / (exp_name if index == 1 else f"{exp_name}_{index}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise ZooError(f"too many runs named '{exp_name}' in {root}: choose another --exp-name")


class RunDirectory:
    """Paths and writers of one run."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._columns: list[str] | None = None
        csv_path = self.path / "metrics.csv"
        if csv_path.exists() and csv_path.stat().st_size > 0:
            with open(csv_path, newline="") as stream:
                self._columns = next(csv.reader(stream), None)

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT_FILE

    def write_config(self, cfg: Any) -> Path:
        """Write the resolved config; ``zoo run --config RUN_DIR/config.yaml`` reproduces the run."""
        return dump_config(cfg, self.path / CONFIG_FILE)

    def append_metrics(self, row: dict[str, Any]) -> None:
        """Append one row to metrics.jsonl and metrics.csv (columns fixed by the first row ever written)."""
        clean = {key: _plain(value) for key, value in row.items()}
        with open(self.path / "metrics.jsonl", "a") as stream:
            stream.write(json.dumps(clean) + "\n")
        new_file = self._columns is None
        if new_file:
            self._columns = list(clean)
        with open(self.path / "metrics.csv", "a", newline="") as stream:
            writer = csv.writer(stream)
            if new_file:
                writer.writerow(self._columns)
            writer.writerow(["" if clean.get(col) is None else clean[col] for col in self._columns])

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        atomic_torch_save(state, self.checkpoint_path)

    def save_model(self, state: dict[str, Any]) -> None:
        atomic_torch_save(state, self.path / MODEL_FILE)

    def load_checkpoint(self) -> dict[str, Any]:
        if not self.checkpoint_path.exists():
            raise ZooError(f"no checkpoint in {self.path}: was the run started with this directory?")
        return torch.load(self.checkpoint_path, map_location="cpu", weights_only=False)


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value
