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
in bytes and rows, typed); checkpoints and models are never copied. A seed is kept whole or not at all: its files
are written into a new folder beside ``seed_<k>`` (``.seed_<k>.<random>.tmp``), which is then renamed to it (an
older ``seed_<k>`` is renamed away first and removed after), so a kill or a full disk never leaves a half-written
seed. ``kept_state`` says whether a folder is such a whole seed: a real folder (not a symbolic link) holding
config.yaml, final_eval.json and metrics.jsonl.gz (and environment.json), each a regular file, and nothing else;
anything else (a folder written by hand or by an older zoo, a final evaluation without its metrics) is not counted,
and the report and the runner say so. Nothing is ever written through a symbolic link out of the results folder.
Kept files hold no machine's paths (``portable``): config.yaml's ``runs_dir`` is written ``runs`` and the home
folder ``~`` (environment.json's cache folders), so results can be committed as they are.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gzip
import io
import json
import math
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from ..errors import ZooError
from ..run.metrics_files import MAX_DECOMPRESSED_BYTES, METRICS_JSONL, METRICS_JSONL_GZ
from ..run.run_dir import CONFIG_FILE, ENVIRONMENT_FILE
from ..run.state_files import not_regular, read_regular
from ..run.view import RunView
from .output import refused_write
from .runs import FINAL_EVAL_FILE, check_eval_seed, config_difference, read_final_returns
from .suites import Entry

KEPT_FILES = (CONFIG_FILE, ENVIRONMENT_FILE, FINAL_EVAL_FILE)
# What a whole kept seed holds (environment.json too, where the run had one) and nothing else.
WHOLE_FILES = (CONFIG_FILE, FINAL_EVAL_FILE, METRICS_JSONL_GZ)
KEPT_TRAINING_ROWS = 500  # training rows kept per run besides its evaluation rows, the first and the last
_SMALL_FILE_BYTES = 1 << 20  # config.yaml, environment.json, final_eval.json: a few KB each


def thinned(data: bytes, rows: int = KEPT_TRAINING_ROWS) -> bytes:
    """The metrics lines ``data`` (JSON rows) that are kept: every row with an ``eval_return_mean``, the first and
    the last row (even where it repeats the env steps of the row before), every row without ``env_steps``, and the
    first row at or after each multiple of ``last env_steps / rows`` (the first row among them); each line byte
    for byte, in order. Thinning thinned rows changes nothing (the grid comes from the last row, which is kept),
    and the report reads only the kept ones (evaluations, the last row). At most ``rows + 2`` lines are kept whole."""
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


def refuse_links(destination: Path) -> None:
    """A ZooError unless ``destination`` and its entry folder are real folders or absent: zoo bench never writes
    through a symbolic link out of the results folder."""
    for folder in (destination.parent, destination):
        try:
            mode = os.lstat(folder).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(mode):
            kind = not_regular(mode) if not stat.S_ISREG(mode) else "a file"
            raise ZooError(f"'{folder}' is {kind}, not a folder of kept results: zoo bench writes only inside the "
                           f"results folder; move it away")


def _write_whole(path: Path, data: bytes) -> None:
    with open(path, "xb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())


def _replace_folder(staging: Path, destination: Path) -> None:
    """Rename the whole folder ``staging`` to ``destination``; an older ``destination`` is renamed away first and
    removed after (between the two renames there is no ``destination``: never a half of one)."""
    try:
        os.rename(staging, destination)
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    old = destination.parent / f".{destination.name}.{secrets.token_hex(4)}.old"
    os.rename(destination, old)
    os.rename(staging, destination)
    shutil.rmtree(old, ignore_errors=True)


def keep(run: Path, destination: Path) -> Path:
    """Copy the kept files of the evaluated run directory ``run`` into the folder ``destination``, the metrics rows
    thinned and compressed, as one whole folder (see the module docstring). A ZooError line when the final
    evaluation is damaged, ``destination`` is a symbolic link, or a write is refused. Safe beside other keepers, in
    this process or others: the entry's folder is locked while a seed is written (``_locked_folder``), so every
    call keeps its seed whole (the last one's stays) or refuses in one line."""
    read_final_returns(run)  # never keep a damaged evaluation
    refuse_links(destination)
    files = {name: portable(name, read_regular(run / name, _SMALL_FILE_BYTES))
             for name in KEPT_FILES if os.path.lexists(run / name)}
    metrics = read_regular(run / METRICS_JSONL, MAX_DECOMPRESSED_BYTES)
    files[METRICS_JSONL_GZ] = compressed(thinned(metrics))
    parent = destination.parent
    with refused_write(destination):
        parent.mkdir(parents=True, exist_ok=True)
        with _locked_folder(parent):  # keepers of one entry, in any process, one at a time
            _write_kept(files, destination)
    return destination


@contextlib.contextmanager
def _locked_folder(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder`` itself (``flock`` of the folder, no file left behind), released on exit or
    when the process dies: two runners keeping seeds of one entry at once (different runs directories share no run
    lock) would otherwise remove each other's staging folders as leftovers of a killed keep."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def _write_kept(files: dict[str, bytes], destination: Path) -> None:
    """``files`` into a staging folder beside ``destination``, renamed to it whole (under the entry's lock)."""
    parent = destination.parent
    for leftover in parent.glob(f".{destination.name}.*"):  # of a keep that was killed
        if leftover.name.endswith((".tmp", ".old")) and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
    staging = parent / f".{destination.name}.{secrets.token_hex(4)}.tmp"
    staging.mkdir()
    try:
        for name, data in files.items():
            _write_whole(staging / name, data)
        _replace_folder(staging, destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def kept_path(results: Path, entry: str, seed: int) -> Path:
    """Where the results of one entry and seed are kept."""
    return results / entry / f"seed_{seed}"


def portable(name: str, data: bytes) -> bytes:
    """A kept file's bytes without this machine's paths: config.yaml's ``runs_dir`` line written ``runs_dir: runs``
    (the runs folder is no part of what a run is: ``IGNORED_KEYS``), and the home folder written ``~`` wherever it
    opens a path (environment.json's cache folders). Other files, and bytes that are not UTF-8, as they are."""
    if name not in (CONFIG_FILE, ENVIRONMENT_FILE):
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    if name == CONFIG_FILE:
        text = re.sub(r"(?m)^runs_dir:.*$", "runs_dir: runs", text)
    home = str(Path.home()).rstrip("/")
    if home:
        text = text.replace(home + "/", "~/")
    return text.encode("utf-8")


def is_kept(run: Path, destination: Path) -> bool:
    """Whether ``destination`` already holds ``run``'s final evaluation and config (same bytes), and metrics, as a
    whole kept seed: nothing to copy again (a run trained again over kept files of another config may evaluate to
    the same bytes)."""
    if kept_state(destination) is not None:
        return False
    try:
        return all(read_regular(destination / name, _SMALL_FILE_BYTES)
                   == portable(name, read_regular(run / name, _SMALL_FILE_BYTES))
                   for name in (FINAL_EVAL_FILE, CONFIG_FILE))
    except (OSError, ZooError):
        return False


def kept_state(kept: Path) -> str | None:
    """None when the folder ``kept`` is a whole kept seed (see the module docstring); "" when nothing is there;
    else one line saying why it is not one."""
    try:
        mode = os.lstat(kept).st_mode
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"'{kept}' cannot be looked at ({exc.strerror})"
    if not stat.S_ISDIR(mode):
        return f"'{kept}' is {not_regular(mode) or 'a file'}, not a folder of kept results"
    names = []
    with os.scandir(kept) as entries:
        for item in entries:
            if item.name not in (*KEPT_FILES, METRICS_JSONL_GZ):
                return f"'{kept}' holds '{item.name[:80]}', which zoo bench does not keep: not a whole kept seed"
            kind = not_regular(item.stat(follow_symlinks=False).st_mode)
            if kind is not None:
                return f"'{kept / item.name}' is {kind}, not a regular file"
            names.append(item.name)
    missing = [name for name in WHOLE_FILES if name not in names]
    if missing:
        return f"'{kept}' has no {missing[-1]}: a half-written kept seed"
    return None


def finished_kept(kept: Path, entry: Entry, seed: int, configs: Path) -> str | None:
    """None when the folder ``kept`` holds ``entry``'s seed ``seed`` finished (a whole kept seed, ``kept_state``:
    its metrics rows readable, a sound final evaluation of that seed's evaluation seed, and the config.yaml
    ``zoo bench`` trains that seed with, resolved from ``configs``); otherwise why not: "" when nothing is kept
    there, else one line (a run of another config, a damaged file)."""
    state = kept_state(kept)
    if state is not None:
        return state
    try:
        read_final_returns(kept)
        check_eval_seed(kept, entry, seed, required=True)
    except ZooError as exc:  # its advice (delete it, evaluate the run again) is for a run directory
        return str(exc).split("; delete it")[0].split("; move it away")[0]
    try:
        difference = config_difference(kept, entry, seed, configs)
    except ZooError:
        return f"'{kept / CONFIG_FILE}' cannot be read as a config"
    if difference is not None:
        return f"'{kept}' holds a run of another config ({difference})"
    try:
        view = RunView(kept)
        if not view.rows:
            return f"'{kept / METRICS_JSONL_GZ}' holds no metrics rows"
        return view.order_problem()
    except ZooError as exc:
        return str(exc).split(": restore")[0]
