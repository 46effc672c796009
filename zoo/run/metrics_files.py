"""metrics.jsonl and metrics.csv: one row per iteration, appended as the run goes, read back strictly.

metrics.jsonl is the source of truth; metrics.csv holds the same rows as a table (a key that appears later gets a
column of its own, earlier rows an empty cell) and can always be rebuilt from it, which a resumed run does.

Reading is strict, because a resumed run appends to what it reads: every line must be a JSON object of one row
and the rows a checkpoint covers must be iterations 1..N in order. Garbage, a non-UTF-8 byte or a deleted row is a
one-line RunDirectoryError naming the file and the line; ``repair_rows`` keeps what can be kept and says what it
dropped. The one exception is a last line without its newline: a row cut by a kill, ignored everywhere.

``read_rows`` (what ``zoo.run.view`` reads a run or kept results with, someone else's data perhaps) also refuses a
row whose values are not all null or finite numbers (what zoo writes: the loop refuses a non-finite metric, and a
64-bit integer is the largest count), so a string, NaN or a 400-digit integer never reaches a statistic; it is bounded
in bytes (``MAX_DECOMPRESSED_BYTES``, also decompressed: a gzip bomb), in lines (``MAX_METRICS_ROWS``: a file of
85 million ``{}`` lines fits in 256 MiB and would take gigabytes as rows) and per line (``MAX_LINE_BYTES``), and
streams the file, so nothing is held beyond the rows it returns. The largest run zoo's suites train writes 15,625
rows of about 600 bytes. Only a regular file is read (``zoo.run.state_files.open_regular``): a FIFO or a device is
refused before it is opened.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from ..errors import RunDirectoryError
from .state_files import open_regular

METRICS_JSONL = "metrics.jsonl"
METRICS_CSV = "metrics.csv"
# metrics.jsonl compressed, as committed benchmark results keep it (``zoo.bench.results``); read like the plain file.
METRICS_JSONL_GZ = "metrics.jsonl.gz"
# A metrics file is someone else's data: read (decompressed, for a gzip bomb), it may not grow past this ...
MAX_DECOMPRESSED_BYTES = 256 << 20
# ... nor hold more lines than this (blank ones included), nor a line longer than this.
MAX_METRICS_ROWS = 1_000_000
MAX_LINE_BYTES = 1 << 20
_INTEGER_LIMIT = 2**63  # counts are 64-bit integers; beyond, a value is damage (and no float holds it exactly)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _lines(path: Path, bounded: bool = False) -> Iterator[tuple[int, bytes]]:
    """``(number, line)`` for each complete line of ``path`` (a last line without its newline is dropped), read as
    a stream; nothing for a missing file; one RunDirectoryError line for what cannot be read. ``bounded``: the
    bounds of ``read_rows`` (see the module docstring)."""
    import gzip
    import zlib

    compressed = path.name.endswith(".gz")
    try:
        handle = open_regular(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise RunDirectoryError(f"'{path}' cannot be read ({exc.strerror}): check its permissions") from None
    limit, total = MAX_DECOMPRESSED_BYTES, 0
    with handle:
        if bounded and not compressed and os.fstat(handle.fileno()).st_size > limit:  # a sparse 3 GB file, say
            raise RunDirectoryError(f"'{path}' holds more than {limit >> 20} MiB: not a metrics file zoo wrote")
        stream: Any = gzip.GzipFile(fileobj=handle, mode="rb") if compressed else handle
        for number in itertools.count(1):
            if bounded and number > MAX_METRICS_ROWS:
                if stream.read(1):
                    raise RunDirectoryError(f"'{path}' holds more than {MAX_METRICS_ROWS:,} lines: not a metrics file "
                                            f"zoo wrote (its longest runs write tens of thousands)")
                return
            try:
                line = stream.readline(MAX_LINE_BYTES + 1 if bounded else -1)
            except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
                raise RunDirectoryError(f"'{path}' is not a readable gzip file ({exc}): restore it from a copy"
                                        ) from None
            except OSError as exc:
                raise RunDirectoryError(f"'{path}' cannot be read ({exc.strerror}): check the disk") from None
            total += len(line)
            if bounded and total > limit:
                what = "decompresses to" if compressed else "holds"
                raise RunDirectoryError(f"'{path}' {what} more than {limit >> 20} MiB: not a metrics file zoo wrote")
            if not line.endswith(b"\n"):
                if bounded and len(line) > MAX_LINE_BYTES:
                    raise RunDirectoryError(f"'{path}' is damaged: line {number} is longer than {MAX_LINE_BYTES >> 20} "
                                            f"MiB, not a metrics row: restore the file from a copy")
                return  # the end, or a last row cut by a kill
            yield number, line[:-1]


def _value_problem(key: str, value: Any) -> str | None:
    # Why ``value`` is no metric zoo writes (None when it is one).
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return None if abs(value) < _INTEGER_LIMIT else f"the value of '{key[:40]}' is an integer of " \
                                                         f"{len(str(abs(value)))} digits"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"the value of '{key[:40]}' is {value}"
    return f"the value of '{key[:40]}' is {json.dumps(value)[:40]}, not a number"


def _parse(line: bytes, typed: bool = False) -> tuple[dict[str, Any] | None, str]:
    """The row of one line, or None and why it is none; ``typed``: also refused where a value is not null or a
    finite number (what ``read_rows`` hands to readers that compute with the values)."""
    try:
        row = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: a line nested thousands deep
        return None, "not UTF-8 JSON of one object"
    if not isinstance(row, dict):
        return None, "not UTF-8 JSON of one object"
    problem = next((p for key, value in row.items() if (p := _value_problem(key, value)) is not None), None) \
        if typed else None
    return (None, problem) if problem is not None else (row, "")


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every row of a metrics.jsonl (or .jsonl.gz), in order, bounded (see the module docstring); RunDirectoryError
    naming the first line that is not a row.

    Blank lines are skipped; a last line without its newline (cut by a kill) is ignored.
    """
    rows = []
    for number, line in _lines(path, bounded=True):
        if not line.strip():
            continue
        row, problem = _parse(line, typed=True)
        if row is None:
            raise RunDirectoryError(f"'{path}' is damaged: line {number} is not a metrics row ({problem}): restore "
                                    f"the file from a copy")
        rows.append(row)
    return rows


def rows_for_resume(path: Path, count: int) -> list[dict[str, Any]]:
    """The first ``count`` rows (what the checkpoint being resumed covers), checked to be iterations 1..count in
    order; RunDirectoryError (one line, with the way out) when they are not."""
    fix = ("restore it from a copy, or resume with --repair to keep the readable rows (the missing iterations "
           "stay missing)")
    rows: list[dict[str, Any]] = []
    for number, line in _lines(path):
        if len(rows) == count:
            break
        row, _ = _parse(line)
        if row is None:
            raise RunDirectoryError(f"'{path}' is damaged at line {number} (not a metrics row): {fix}")
        if row.get("iteration") != len(rows) + 1:
            raise RunDirectoryError(
                f"'{path}' is damaged at line {number}: it holds iteration {row.get('iteration')!r} where "
                f"iteration {len(rows) + 1} belongs (rows were deleted or reordered): {fix}")
        rows.append(row)
    if len(rows) < count:
        raise RunDirectoryError(f"'{path}' holds {len(rows)} rows but the checkpoint covers {count} iterations "
                                f"(rows were deleted): {fix}")
    return rows


def repair_rows(path: Path, count: int) -> tuple[list[dict[str, Any]], str]:
    """The readable rows of iterations 1..``count`` (each once, in order) and a sentence saying what was dropped."""
    kept: dict[int, dict[str, Any]] = {}
    unreadable = 0
    for _, line in _lines(path):
        row, _ = _parse(line)
        iteration = None if row is None else row.get("iteration")
        if row is None or not isinstance(iteration, int) or isinstance(iteration, bool):
            unreadable += bool(line.strip())
            continue
        if 1 <= iteration <= count:
            kept.setdefault(iteration, row)
    missing = count - len(kept)
    report = (f"{path.name}: kept {len(kept)} rows of iterations 1-{count}, dropped {unreadable} unreadable "
              f"line(s); {missing} iteration(s) have no row")
    return [kept[key] for key in sorted(kept)], report


def csv_text(rows: list[dict[str, Any]]) -> str:
    """metrics.csv for ``rows``: columns in the order keys first appear, empty cells for None or absent keys."""
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    stream = io.StringIO()
    writer = csv.writer(stream)
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(column) is None else row[column] for column in columns])
    return stream.getvalue() if rows else ""


class MetricsWriter:
    """Appends rows to both files of a run directory (``folder()`` gives where they are: the locked directory).

    The files stay open between rows (opening and closing two files per iteration cost a few % of a fast run);
    each row is flushed as it is written. ``rewrite`` writes both files from a list of rows (atomically, through
    ``write_text``), as a resumed run does with the rows its checkpoint covers.
    """

    def __init__(self, folder: Callable[[], Path], write_text: Callable[[Path, str], None]) -> None:
        self._folder, self._write_text = folder, write_text
        self._columns: list[str] | None = None
        self._streams: dict[str, IO[str]] = {}

    def append(self, row: dict[str, Any]) -> None:
        """Append one row to metrics.jsonl and metrics.csv (a new key rewrites the CSV once with the wider
        header)."""
        clean = {key: _plain(value) for key, value in row.items()}
        jsonl = self._stream(METRICS_JSONL)
        jsonl.write(json.dumps(clean) + "\n")
        jsonl.flush()  # every row reaches the file when it is written (one write call): readers see whole rows
        csv_path = self._folder() / METRICS_CSV
        if self._columns is None:
            self._columns = _csv_header(csv_path)
        new_keys = [key for key in clean if key not in self._columns]
        if new_keys:
            self._columns = self._columns + new_keys
            self._close(METRICS_CSV)  # the rewrite below replaces the file
            self._write_text(csv_path, _widened(csv_path, self._columns))
        stream = self._stream(METRICS_CSV)
        csv.writer(stream).writerow(["" if clean.get(col) is None else clean[col] for col in self._columns])
        stream.flush()

    def rewrite(self, rows: list[dict[str, Any]]) -> None:
        """Replace both files by exactly ``rows`` (the CSV rebuilt from them)."""
        self.close()
        folder = self._folder()
        self._write_text(folder / METRICS_JSONL, "".join(json.dumps(row) + "\n" for row in rows))
        self._write_text(folder / METRICS_CSV, csv_text(rows))
        self._columns = None

    def _stream(self, name: str) -> IO[str]:
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = open(self._folder() / name, "a", newline="")  # noqa: SIM115
        return stream

    def _close(self, name: str) -> None:
        stream = self._streams.pop(name, None)
        if stream is not None:
            stream.close()

    def close(self) -> None:
        """Close the files (the next row reopens them)."""
        for name in list(self._streams):
            self._close(name)


def _csv_header(path: Path) -> list[str]:
    if not path.exists() or path.stat().st_size == 0:
        return []
    with open(path, newline="") as stream:
        return next(csv.reader(stream), [])


def _widened(path: Path, columns: list[str]) -> str:
    text = path.read_text() if path.exists() else ""
    text = text[: text.rfind("\n") + 1]  # a row cut by a kill: dropped
    rows = list(csv.reader(io.StringIO(text)))[1:]
    stream = io.StringIO()
    writer = csv.writer(stream)
    writer.writerow(columns)
    for row in rows:
        writer.writerow(row + [""] * (len(columns) - len(row)))
    return stream.getvalue()
