"""Benchmark results as data: the small files of each finished bench run, kept where they can be committed.

``zoo bench SUITE... --results DIR`` copies, for every run that has its final evaluation, the files the report
needs into ``DIR/<entry>/seed_<k>/``: the resolved ``config.yaml``, the ``environment.json`` record (versions,
machine, precision), ``final_eval.json`` and the metrics rows as ``metrics.jsonl.gz`` (gzip with a zero timestamp:
the same rows give the same bytes). About 10-100 KB per run, so a whole campaign stays a few MB. Each run is kept
as soon as it is evaluated (and runs evaluated before the first ``--results`` are kept on the next start), so the
files can be committed as they finish. ``zoo bench SUITE... --report FILE.md --results DIR`` reads them instead of
run directories: a fresh clone regenerates the table without a single run directory (``zoo.bench.report``).

A results folder is read as data like a run directory (``zoo.run.view.RunView`` reads ``metrics.jsonl.gz``, bounded
when decompressed); checkpoints and models are never copied.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

from ..run.metrics_files import METRICS_JSONL, METRICS_JSONL_GZ
from ..run.run_dir import CONFIG_FILE, ENVIRONMENT_FILE
from ..run.state_files import atomic_write_bytes
from .output import refused_write
from .runs import FINAL_EVAL_FILE, read_final_returns

KEPT_FILES = (CONFIG_FILE, ENVIRONMENT_FILE, FINAL_EVAL_FILE)


def compressed(data: bytes) -> bytes:
    """``data`` gzipped the same way every time (no file name, timestamp 0, level 9)."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as stream:
        stream.write(data)
    return buffer.getvalue()


def keep(run: Path, destination: Path) -> Path:
    """Copy the kept files of the evaluated run directory ``run`` into ``destination`` (created), the metrics rows
    compressed; each file written whole or not at all. A ZooError line when the final evaluation is damaged or a
    write is refused."""
    read_final_returns(run)  # never keep a damaged evaluation
    with refused_write(destination):
        destination.mkdir(parents=True, exist_ok=True)
        for name in KEPT_FILES:
            if (run / name).is_file():
                atomic_write_bytes(destination / name, (run / name).read_bytes())
        atomic_write_bytes(destination / METRICS_JSONL_GZ, compressed((run / METRICS_JSONL).read_bytes()))
    return destination


def kept_path(results: Path, entry: str, seed: int) -> Path:
    """Where the results of one entry and seed are kept."""
    return results / entry / f"seed_{seed}"


def is_kept(run: Path, destination: Path) -> bool:
    """Whether ``destination`` already holds ``run``'s final evaluation (same bytes): nothing to copy again."""
    kept = destination / FINAL_EVAL_FILE
    return kept.is_file() and (destination / METRICS_JSONL_GZ).is_file() and (
        kept.read_bytes() == (run / FINAL_EVAL_FILE).read_bytes())
