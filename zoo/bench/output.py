"""The files a report or a plot writes (``zoo bench --report``, ``zoo plot --out/--json``): whole or not at all, and
a write the system refuses (a full disk, a read-only folder) is one line naming the file, never a traceback."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import ZooError
from ..errors import refused_write as refused_write_line
from ..run.state_files import atomic_write_text


@contextmanager
def refused_write(path: Path) -> Iterator[None]:
    """Turn an OSError of the writes inside into one ZooError naming ``path``, the reason and the fix."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            fix = "free space on that disk, or write it elsewhere"
        elif exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            fix = "make its folder writable, or write it elsewhere"
        else:
            fix = "check the disk and the folder, or write it elsewhere"
        raise ZooError(refused_write_line(path, exc, fix)) from None


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (no temporary file is left behind when it fails), or one ZooError line."""
    with refused_write(path):
        atomic_write_text(path, text)
