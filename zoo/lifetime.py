"""Child processes: they must not outlive the process that started it, and their failures reach it as one line.

Below every floor that starts processes (env workers, DPPO workers, IMPALA actors, torchrun ranks); it imports
only zoo's errors. Temporary folders that a process keeps for its children (``owned_temp_folder``) go away with
it even when it is killed with SIGKILL: each holds a lock while its owner lives, and the next one made removes
those whose owner is gone. The one protocol every supervisor of zoo's children follows (DPPO's launcher, IMPALA's actor
pool): a child that fails sends ``("failed", failure_line(error), flag)`` over its pipe and exits; a child that
dies without a word is described from its exit code by ``exit_cause``.
"""

from __future__ import annotations

import _thread
import fcntl
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

from .errors import ConfigError, ZooError, first_line

# How many child runs one command may ask for (``zoo run --seeds``, ``zoo bench``): a count past these is a typo,
# never a plan (``--seeds 99999999999999999999999`` would plan that many runs, ``--jobs 100000`` start that many
# processes at once). Here, light, because the CLI checks them before anything heavy is imported.
MAX_SEEDS = 1000  # seeds of one command: rliable's studies use at most 100
MAX_JOBS = 256  # runs at once, each a process


def check_counts(seeds: int | None, jobs: int) -> None:
    """One ConfigError line unless ``1 <= seeds <= MAX_SEEDS`` (how many seeds; None: each bench entry's own count,
    nothing to check) and ``1 <= jobs <= MAX_JOBS``."""
    if seeds is not None and not 1 <= seeds <= MAX_SEEDS:
        raise ConfigError(f"--seeds must be at least 1 and at most {MAX_SEEDS} seeds, got {seeds}")
    if not 1 <= jobs <= MAX_JOBS:
        raise ConfigError(f"--jobs must be at least 1 and at most {MAX_JOBS} (runs at once, each a process), got "
                          f"{jobs}")


def failure_line(error: BaseException, limit: int = 300) -> str:
    """What a child reports of ``error``: zoo's own errors as they read, others with their type
    (``RuntimeError: ...``), one line."""
    detail = first_line(error, limit)
    if isinstance(error, ZooError) or not str(error).strip():
        return detail
    return f"{type(error).__name__}: {detail}"


def exit_cause(code: int | None) -> str:
    """A child that ended without reporting, by its exit code: "was killed by SIGKILL", "exited with code 1"."""
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Linux: get ``signum`` when the parent process dies (``PR_SET_PDEATHSIG``), so that a killed supervisor or
    learner leaves no worker behind; elsewhere a no-op. SIGTERM (the default) lets a worker save; processes with
    nothing to save (actors, env workers) ask for SIGKILL, which also ends one that is stopped (SIGSTOP)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signum))  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before prctl took effect
            os.kill(os.getpid(), signum)
    except (OSError, AttributeError):
        pass


_parent_watcher: threading.Thread | None = None  # the thread stop_when_parent_dies started here, if any


def stop_when_parent_dies(grace_s: float = 30.0, poll_s: float = 0.5) -> threading.Thread:
    """Watch the parent process from a daemon thread; once it has died, stop this process as SIGTERM would, and
    end it with ``os._exit(1)`` if it is still alive ``grace_s`` seconds later (a hung exit, SIGTERM ignored).

    "As SIGTERM would": the main thread runs this process's Python SIGTERM handler (a training loop's: it saves
    after the current iteration and exits), through ``_thread.interrupt_main(SIGTERM)``, as soon as one is
    installed. Not a real SIGTERM: with no Python handler installed at that instant (before the loop has started,
    or after it has ended, during its final save of a checkpoint and a collective with the other ranks), the
    default action would kill the process on the spot, and the other ranks with it at their next collective.

    For processes whose parent is not ours to trust with ``PR_SET_PDEATHSIG`` (see ``die_with_parent``): that
    signal fires when the parent *thread* that forked us ends, and a launcher such as torchrun's agent may start
    its workers from a thread other than its main one. Polling ``os.getppid()`` (every ``poll_s`` seconds) sees
    the process itself die, and works on every POSIX system. The parent is the one at the time of the call, so
    call it early: a parent that died before it is not noticed. Idempotent; returns the watching thread.
    """
    global _parent_watcher
    if _parent_watcher is not None and _parent_watcher.is_alive():
        return _parent_watcher
    parent = os.getppid()

    def watch() -> None:
        # A dead parent's children are reparented (to init or a subreaper): the parent pid changes.
        while os.getppid() == parent:
            time.sleep(poll_s)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if callable(signal.getsignal(signal.SIGTERM)):
                # Only a flag for the main thread, which runs the Python handler installed when it gets to it: a
                # handler removed meanwhile never turns into the default action (killing the process).
                _thread.interrupt_main(signal.SIGTERM)
                break
            time.sleep(min(poll_s, 0.1))
        time.sleep(max(0.0, deadline - time.monotonic()))
        os._exit(1)

    _parent_watcher = threading.Thread(target=watch, name="zoo-parent-watcher", daemon=True)
    _parent_watcher.start()
    return _parent_watcher


OWNER_FILE = ".owner"  # in a folder of ``owned_temp_folder``: locked while the process that made it lives


def owned_temp_folder(prefix: str) -> tuple[Path, int]:
    """A new folder ``<temp>/<prefix><random>`` and the descriptor of the lock it holds while this process lives
    (close it, after removing the folder, to let go). Folders of the same ``prefix`` whose owner has died (a
    ``kill -9`` leaves them) are removed first (``remove_orphaned_folders``)."""
    remove_orphaned_folders(prefix)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    # Locked before it gets its name, so that no other process ever sees an owner file that is not held.
    pending = folder / f"{OWNER_FILE}.{secrets.token_hex(4)}"
    descriptor = os.open(pending, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(pending, folder / OWNER_FILE)
    except BaseException:
        os.close(descriptor)
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder, descriptor


def remove_orphaned_folders(prefix: str, where: str | None = None) -> list[Path]:
    """Remove the folders ``<where>/<prefix>*`` (default: the temp folder) that this user owns and whose owner
    process has died: their ``OWNER_FILE`` lock is free. A folder without one (made by an older zoo, or being made
    this instant) is left alone, and so is anything that is not a real folder. The folders removed."""
    removed = []
    try:
        entries = list(os.scandir(where or tempfile.gettempdir()))
    except OSError:
        return removed
    for entry in entries:
        try:
            if (not entry.name.startswith(prefix) or not entry.is_dir(follow_symlinks=False)
                    or entry.stat(follow_symlinks=False).st_uid != os.getuid()):
                continue
            descriptor = os.open(os.path.join(entry.path, OWNER_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                                 | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its owner lives
        finally:
            os.close(descriptor)
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed
