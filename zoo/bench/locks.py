"""One lock per run of ``zoo bench`` (entry and seed), so that no two runners ever train one seed.

Runners may share a runs directory: M machines with ``--shard K/M``, or two shardings by mistake (``--shard 1/2``
and ``--shard 1/3`` both hold the first run), or a plain ``zoo bench`` beside a sharded one. A lock per slice would
let two of them train the same seed (the second into ``seed_<k>_2``); a lock per run cannot. A runner holds the
lock of a run from the moment it looks at the run's folder until the run is done with (trained, evaluated and kept,
or failed), and a run whose lock another runner holds is left to that runner and named. The locks are ``flock``s
on files under ``<runs_dir>/bench/.locks/`` (one small file per run, never removed: removing a lock file while
another process waits on it would let two processes hold "the same" lock). The ``zoo`` child that trains or
evaluates a run holds its lock too (``start_child``'s ``hold``), so the OS releases it once the runner and that
child have both ended, however they end: a runner killed while its child is still starting or saving leaves the
lock to that child, and a rerun waits for it (``take_lock``'s ``orphans_until``) instead of training the seed beside
it.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

from ..errors import ZooError
from ..run.state_files import not_regular

LOCKS_FOLDER = ".locks"
# Lock files are never opened through a symbolic link, never blocking (a FIFO in their place), never inherited.
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_lock_file(path: Path) -> int:
    """The descriptor of the lock file ``path`` (created); a ZooError line when it is not a regular file."""
    try:
        descriptor = os.open(path, _FLAGS, 0o666)
    except OSError as exc:
        raise ZooError(f"cannot open the lock file '{path}' ({exc.strerror}): make '{path.parent}' a writable folder "
                       f"and '{path.name}' a regular file") from None
    kind = not_regular(os.fstat(descriptor).st_mode)
    if kind is not None:
        os.close(descriptor)
        raise ZooError(f"the lock file '{path}' is {kind}: move it away")
    return descriptor


def _holder(descriptor: int) -> tuple[str, bool]:
    """Who holds the lock file ``descriptor`` (its text: ``"<pid> <host>"``, or ``"<pid>"`` as written before hosts
    were), for messages, and whether that process has ended on this host: then its children hold the lock (a run
    passes its lock on to the ``zoo`` child that trains it, ``start_child``'s ``hold``), saving on the SIGTERM of
    their parent's death."""
    text = os.pread(descriptor, 300, 0).decode("ascii", "replace").split()
    if not text or not text[0].isdigit():
        return "?", False
    pid, host = text[0], text[1] if len(text) > 1 else None
    if host is not None and host != socket.gethostname():
        return f"{pid} on {host}", False  # not ours to look up
    try:
        os.kill(int(pid), 0)
        with open(f"/proc/{pid}/stat", "rb") as stat:  # a zombie (killed, not yet reaped) has ended too
            ended = stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (ProcessLookupError, FileNotFoundError):
        ended = True
    except (OSError, OverflowError, IndexError):  # another user's process; no /proc here
        ended = False
    return (f"{pid}, ended, its child still holding it", True) if ended else (pid, False)


def take_lock(path: Path, deadline: float = 0.0, orphans_until: float = 0.0) -> tuple[int | None, str]:
    """``(descriptor, "")`` once the lock file ``path`` is locked here (this process's pid and host written in it),
    trying until ``deadline`` (``time.monotonic()``: a runner killed a moment ago may have left a child between fork
    and exec that holds it for an instant), and until ``orphans_until`` while the process that wrote it has ended
    (its children, saving on their SIGTERM, hold it as long as they live); ``(None, holder)`` naming the process that
    holds it (``_holder``: its pid, its host when another, ``"?"``)."""
    descriptor = open_lock_file(path)
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            now = time.monotonic()
            if now >= deadline:
                holder, ended = _holder(descriptor)
                if not ended or now >= orphans_until:
                    os.close(descriptor)
                    return None, holder
            time.sleep(0.1)
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()} {socket.gethostname()}".encode(), 0)
    return descriptor, ""


class RunLocks:
    """The run locks of one runner under ``root`` (``<runs_dir>/bench``), by run label (``entry/seed_<k>``)."""

    def __init__(self, root: Path) -> None:
        self.folder = root / LOCKS_FOLDER
        self.held: dict[str, int] = {}

    def take(self, label: str, deadline: float = 0.0, orphans_until: float = 0.0) -> str | None:
        """Take the lock of run ``label``, trying until ``deadline`` (and ``orphans_until`` while only a killed
        runner's children hold it: ``take_lock``); None once taken (or already held here), else the pid of the
        runner that holds it."""
        if label in self.held:
            return None
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.folder.is_symlink():
            raise ZooError(f"'{self.folder}' is a symbolic link: zoo bench keeps its run locks in a folder of its own "
                           f"there; move it away")
        descriptor, owner = take_lock(self.folder / f"{label.replace('/', '.')}.lock", deadline, orphans_until)
        if descriptor is None:
            return owner
        self.held[label] = descriptor
        return None

    def release(self, label: str) -> None:
        """Let go of the lock of run ``label`` (nothing when it is not held here)."""
        descriptor = self.held.pop(label, None)
        if descriptor is not None:
            os.close(descriptor)

    def release_all(self) -> None:
        """Let go of every lock this runner holds."""
        for label in list(self.held):
            self.release(label)
