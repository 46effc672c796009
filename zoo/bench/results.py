"""Benchmark results as data: the small files of each finished bench run, kept where they can be committed.

``zoo bench SUITE... --results DIR`` copies, for every run that has its final evaluation, the files the report
needs into ``DIR/<entry>/seed_<k>/``: the resolved ``config.yaml``, the ``environment.json`` record (versions,
machine, precision), ``final_eval.json`` and the metrics rows as ``metrics.jsonl.gz`` (gzip with a zero timestamp:
the same rows give the same bytes), thinned (``thinned``): every evaluation row, the first and the last, and one
training row per 1/``KEPT_TRAINING_ROWS`` of the run's env steps. About 10-100 KB per run (a 1M-step A2C run logs
15,625 rows, 1 MB compressed, 40 KB thinned), so a whole campaign stays a few MB. Each run is kept
as soon as it is evaluated (and runs evaluated before the first ``--results`` are kept on the next start), so the
files can be committed as they finish. ``zoo bench SUITE... --report FILE.md --results DIR`` reads them instead of
run directories: a fresh clone regenerates the table without a single run directory (``zoo.bench.report``).

A results folder is read as data like a run directory (``zoo.run.view.RunView`` reads ``metrics.jsonl.gz``, bounded
when decompressed); checkpoints and models are never copied.
"""

from __future__ import annotations

import gzip
import io
import json
import math
from pathlib import Path

from ..errors import ZooError
from ..run.metrics_files import METRICS_JSONL, METRICS_JSONL_GZ
from ..run.run_dir import CONFIG_FILE, ENVIRONMENT_FILE
from ..run.state_files import atomic_write_bytes
from .output import refused_write
from .runs import FINAL_EVAL_FILE, config_difference, read_final_returns
from .suites import Entry

KEPT_FILES = (CONFIG_FILE, ENVIRONMENT_FILE, FINAL_EVAL_FILE)
KEPT_TRAINING_ROWS = 500  # training rows kept per run besides its evaluation rows, the first and the last


def thinned(data: bytes, rows: int = KEPT_TRAINING_ROWS) -> bytes:
    """The metrics lines ``data`` (JSON rows) that are kept: every row with an ``eval_return_mean``, the first and
    the last row (even where it repeats the env steps of the row before), every row without ``env_steps``, and the
    first row at or after each multiple of ``last env_steps / rows`` (the first row among them); each line byte
    for byte, in order. Thinning thinned rows changes nothing (the grid comes from the last row, which is kept),
    and the report reads only the kept ones (evaluations, the last row)."""
    lines = data.splitlines(keepends=True)
    if len(lines) <= rows + 2:
        return data
    parsed = [json.loads(line) for line in lines]
    total = parsed[-1].get("env_steps")
    grid = total / rows if isinstance(total, (int, float)) and total > 0 else None
    kept, cell = [], -1
    for index, (line, row) in enumerate(zip(lines, parsed)):
        steps = row.get("env_steps")
        here = math.floor(steps / grid) if grid is not None and isinstance(steps, (int, float)) else None
        if index == len(lines) - 1 or row.get("eval_return_mean") is not None or here is None or here > cell:
            kept.append(line)
        if here is not None:
            cell = max(cell, here)
    return b"".join(kept)


def compressed(data: bytes) -> bytes:
    """``data`` gzipped the same way every time (no file name, timestamp 0, level 9)."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as stream:
        stream.write(data)
    return buffer.getvalue()


def keep(run: Path, destination: Path) -> Path:
    """Copy the kept files of the evaluated run directory ``run`` into ``destination`` (created), the metrics rows
    thinned and compressed; each file written whole or not at all. A ZooError line when the final evaluation is
    damaged or a write is refused."""
    read_final_returns(run)  # never keep a damaged evaluation
    with refused_write(destination):
        destination.mkdir(parents=True, exist_ok=True)
        for name in KEPT_FILES:
            if (run / name).is_file():
                atomic_write_bytes(destination / name, (run / name).read_bytes())
        atomic_write_bytes(destination / METRICS_JSONL_GZ, compressed(thinned((run / METRICS_JSONL).read_bytes())))
    return destination


def kept_path(results: Path, entry: str, seed: int) -> Path:
    """Where the results of one entry and seed are kept."""
    return results / entry / f"seed_{seed}"


def is_kept(run: Path, destination: Path) -> bool:
    """Whether ``destination`` already holds ``run``'s final evaluation and config (same bytes), and metrics: nothing
    to copy again (a run trained again over kept files of another config may evaluate to the same bytes)."""
    return (destination / METRICS_JSONL_GZ).is_file() and all(
        (destination / name).is_file() and (destination / name).read_bytes() == (run / name).read_bytes()
        for name in (FINAL_EVAL_FILE, CONFIG_FILE))


def finished_kept(kept: Path, entry: Entry, seed: int, configs: Path) -> str | None:
    """None when the folder ``kept`` holds ``entry``'s seed ``seed`` finished (its metrics, a sound final evaluation,
    and the config.yaml ``zoo bench`` trains that seed with, resolved from ``configs``); otherwise why not: "" when
    nothing is kept there, else one line (a run of another config, a damaged file)."""
    if not (kept / FINAL_EVAL_FILE).is_file():
        return ""
    if not (kept / METRICS_JSONL_GZ).is_file():
        return f"'{kept}' has no {METRICS_JSONL_GZ}"
    try:
        read_final_returns(kept)
    except ZooError as exc:  # its advice (delete it, evaluate the run again) is for a run directory
        return str(exc).split("; delete it")[0]
    try:
        difference = config_difference(kept, entry, seed, configs)
    except ZooError:
        return f"'{kept / CONFIG_FILE}' cannot be read as a config"
    return None if difference is None else f"'{kept}' holds a run of another config ({difference})"
