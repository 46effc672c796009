"""metrics.jsonl and metrics.csv: one row per iteration, appended as the run goes, read back strictly.

metrics.jsonl is the source of truth; metrics.csv holds the same rows as a table (a key that appears later gets a
column of its own, earlier rows an empty cell) and can always be rebuilt from it, which a resumed run does.

Reading is strict, because a resumed run appends to what it reads: every line must be a JSON object of one row
and the rows a checkpoint covers must be iterations 1..N in order. Garbage, a non-UTF-8 byte or a deleted row is
a one-line RunDirectoryError naming the file and the line; ``repair_rows`` keeps what can be kept and says what it
dropped. The one exception is a last line without its newline: a row cut by a kill, ignored everywhere.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ..errors import RunDirectoryError

METRICS_JSONL = "metrics.jsonl"
METRICS_CSV = "metrics.csv"
# metrics.jsonl compressed, as committed benchmark results keep it (``zoo.bench.results``); read like the plain file.
METRICS_JSONL_GZ = "metrics.jsonl.gz"
# A compressed metrics file is someone else's data: decompressed, it may not grow past this (a gzip bomb).
MAX_DECOMPRESSED_BYTES = 256 << 20


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _lines(path: Path) -> list[bytes]:
    """The complete lines of ``path`` (a last line without its newline is dropped); one line for what cannot be
    read at all."""
    try:
        data = _decompressed(path) if path.name.endswith(".gz") else path.read_bytes()
    except FileNotFoundError:
        return []
    except IsADirectoryError:
        raise RunDirectoryError(f"'{path}' is a directory, not a metrics file: move it out of the way") from None
    except OSError as exc:
        raise RunDirectoryError(f"'{path}' cannot be read ({exc.strerror}): check its permissions") from None
    return data.split(b"\n")[:-1]


def _decompressed(path: Path) -> bytes:
    """The gzip file's content, at most ``MAX_DECOMPRESSED_BYTES`` (RunDirectoryError past it, or when damaged)."""
    import gzip
    import zlib

    try:
        with gzip.open(path, "rb") as stream:
            data = stream.read(MAX_DECOMPRESSED_BYTES + 1)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise RunDirectoryError(f"'{path}' is not a readable gzip file ({exc}): restore it from a copy") from None
    if len(data) > MAX_DECOMPRESSED_BYTES:
        raise RunDirectoryError(f"'{path}' decompresses to more than {MAX_DECOMPRESSED_BYTES >> 20} MiB: not a "
                                "metrics file zoo wrote")
    return data


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        row = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: a line nested thousands deep
        return None
    return row if isinstance(row, dict) else None


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every row of a metrics.jsonl, in order; RunDirectoryError naming the first line that is not a row.

    Blank lines are skipped; a last line without its newline (cut by a kill) is ignored.
    """
    rows = []
    for number, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        row = _parse(line)
        if row is None:
            raise RunDirectoryError(f"'{path}' is damaged: line {number} is not a metrics row (not UTF-8 JSON of "
                                    f"one object): restore the file from a copy")
        rows.append(row)
    return rows


def rows_for_resume(path: Path, count: int) -> list[dict[str, Any]]:
    """The first ``count`` rows (what the checkpoint being resumed covers), checked to be iterations 1..count in
    order; RunDirectoryError (one line, with the way out) when they are not."""
    fix = ("restore it from a copy, or resume with --repair to keep the readable rows (the missing iterations "
           "stay missing)")
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(_lines(path), 1):
        if len(rows) == count:
            break
        row = _parse(line)
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
    lines = _lines(path)
    kept: dict[int, dict[str, Any]] = {}
    unreadable = 0
    for line in lines:
        row = _parse(line)
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
