"""Child ``zoo`` processes that die with the process that started them (one runner for ``zoo run --seeds``,
``zoo bench`` and ``zoo tune``), their outcome, and waiting for a run directory to be free.

``start_child`` starts a command (``python -m zoo run ...``) so that:

- it gets SIGTERM when its parent dies, however the parent dies (``kill -9`` included: ``PR_SET_PDEATHSIG`` through
  ``zoo.lifetime.die_with_parent``), so a training run saves its checkpoint and exits instead of training on as an
  orphan that a rerun would find holding its run directory;
- it runs in its own session: a Ctrl-C in the terminal reaches the parent alone, which passes it on once;
- its stdout and stderr go to one unnamed temporary file, not a pipe: a chatty child never blocks on a full pipe
  that nobody reads while it trains, and the parent reads the output once the child has ended;
- ``OPENBLAS_NUM_THREADS`` is 1 unless the caller's environment sets it (several runs share the cores).

- its outcome is read from files, not parsed from its text: a ``zoo run`` child writes its summary (``write_summary``,
  atomic JSON) to the file ``SUMMARY_ENV`` names, which ``start_child`` sets to a file in a private temporary folder
  (``zoo.lifetime.owned_temp_folder``: a ``zoo-child-*`` folder that a ``kill -9`` of the parent leaves is removed
  by the next start of a child, and a child never makes the folder again); ``finish``
  gives the exit code, that summary (None when the child wrote none: it failed or was killed) and its last
  ``zoo: error:`` line (``error_line``, the one place that reads the CLI's error lines).

``ChildRuns`` watches the children of one runner (keyed by the runner's own names: a seed, a run, a trial): starts
them, hands back the ended ones, passes a stop signal on (each run saves) and stops the rest when the runner ends.

``wait_for_release`` waits, bounded, for the process that holds a run directory's lock (a child of a killed parent,
saving on its SIGTERM) to let go of it, so that the next owner finds it free instead of "in use".
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..lifetime import die_with_parent, owned_temp_folder
from .run_dir import lock_owner

# The environment variable naming the file where a ``zoo run`` child writes its summary (set by ``start_child``).
SUMMARY_ENV = "ZOO_SUMMARY_FILE"
CHILD_FOLDER_PREFIX = "zoo-child-"  # the temporary folder of each child's summary
_SUMMARY_MAX_BYTES = 1 << 16  # a summary is a few hundred bytes
_ERROR_PREFIXES = ("zoo: error: ", "zoo: internal error: ")

# How long a new owner waits for a run directory's previous owner (saving after its SIGTERM) to let go of it.
RELEASE_WAIT_S = 60.0


def write_summary(summary: Mapping[str, Any]) -> None:
    """Write ``zoo run``'s summary where the runner that started it asked (``SUMMARY_ENV``), atomically; nothing when
    no runner asked. A write the system refuses is left out: the runner then reports the run by its exit code."""
    path = os.environ.get(SUMMARY_ENV)
    if not path:
        return
    target = Path(path)
    try:  # into the runner's folder only: one removed (the runner was killed) is not made again
        handle, temporary = tempfile.mkstemp(prefix=".summary.", suffix=".tmp", dir=target.parent)
    except OSError:
        return
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(json.dumps(dict(summary), default=str))
        os.replace(temporary, target)
    except OSError:
        Path(temporary).unlink(missing_ok=True)


def error_line(output: str) -> str | None:
    """The last ``zoo: error: ...`` (or ``zoo: internal error: ...``) line of a child's output, None without one."""
    return next((line for line in reversed(output.splitlines()) if line.startswith(_ERROR_PREFIXES)), None)


@dataclass(frozen=True)
class Ended:
    """What an ended child left: its command (``args``), exit ``code``, ``output`` (stdout and stderr together), its
    ``summary`` (a ``zoo run`` that got to its end, interrupted or not) and its last error line (``error``)."""

    args: list[str]
    code: int
    output: str
    summary: dict[str, Any] | None
    error: str | None


def _read_summary(path: Path) -> dict[str, Any] | None:
    # None for no file (the child failed or was killed before its end) and for anything not a summary.
    try:
        if path.stat().st_size > _SUMMARY_MAX_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("reason"), str):
        return None
    return {key: None if isinstance(value, float) and math.isnan(value) else value for key, value in data.items()}


class Child(subprocess.Popen):
    """A ``subprocess.Popen`` whose stdout and stderr (together) are kept in ``output``, read by ``read_output``,
    and whose summary file is read by ``finish``."""

    output: IO[str]
    summary_dir: Path | None = None
    summary_lock: int | None = None  # held while the summary folder is this process's (``owned_temp_folder``)

    def read_output(self) -> str:
        """Everything the child wrote (call once it has ended); closes and removes its temporary files."""
        self.output.seek(0)
        text = self.output.read()
        self.output.close()
        if self.summary_dir is not None:
            shutil.rmtree(self.summary_dir, ignore_errors=True)
        if self.summary_lock is not None:
            os.close(self.summary_lock)
            self.summary_lock = None
        return text

    def finish(self) -> Ended:
        """The child's outcome (call once it has ended); removes its temporary files."""
        summary = None if self.summary_dir is None else _read_summary(self.summary_dir / "summary.json")
        output = self.read_output()
        return Ended([str(arg) for arg in self.args], int(self.returncode), output, summary, error_line(output))


def start_child(command: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                hold: int | None = None) -> Child:
    """Start ``command`` as a child that dies with this process (see the module docstring); ``env`` replaces the
    environment (default: this process's), with ``OPENBLAS_NUM_THREADS=1`` unless it sets it. ``hold``: the
    descriptor of a lock (an ``flock``) the child keeps open for as long as it lives, so that the lock outlives a
    killed parent until its child, saving on its SIGTERM, has ended."""
    environment = dict(os.environ if env is None else env)
    environment.setdefault("OPENBLAS_NUM_THREADS", "1")
    summary_dir, summary_lock = owned_temp_folder(CHILD_FOLDER_PREFIX)
    environment[SUMMARY_ENV] = str(summary_dir / "summary.json")
    output = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - the child's
    try:
        child = Child(list(command), stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                      env=environment, cwd=cwd, start_new_session=True, preexec_fn=die_with_parent,
                      pass_fds=() if hold is None else (hold,))
    except BaseException:
        output.close()
        shutil.rmtree(summary_dir, ignore_errors=True)
        os.close(summary_lock)
        raise
    child.output = output
    child.summary_dir, child.summary_lock = summary_dir, summary_lock
    return child


class ChildRuns:
    """The children of one runner, by the runner's key for each (see the module docstring)."""

    def __init__(self) -> None:
        self.active: dict[Hashable, Child] = {}

    def __len__(self) -> int:
        return len(self.active)

    def __contains__(self, key: Hashable) -> bool:
        return key in self.active

    def start(self, key: Hashable, command: Sequence[str], env: Mapping[str, str] | None = None,
              hold: int | None = None) -> None:
        """Start ``command`` for ``key`` (``start_child``, ``hold`` included)."""
        if key in self.active:
            raise RuntimeError(f"a child for {key!r} is running")  # the runner's bookkeeping is wrong
        self.active[key] = start_child(command, env, hold=hold)

    def ended(self) -> list[tuple[Hashable, Ended]]:
        """The children that have ended since the last call, with their outcome, in the order they were started."""
        done = [key for key, child in self.active.items() if child.poll() is not None]
        return [(key, self.active.pop(key).finish()) for key in done]

    def send(self, signum: int) -> None:
        """Send ``signum`` to every child still running (SIGTERM or SIGINT: each run saves and stops)."""
        for child in self.active.values():
            if child.poll() is None:
                child.send_signal(signum)

    def stop(self) -> list[tuple[Hashable, Ended]]:
        """SIGTERM the children still running (they save), wait for every child; their outcomes."""
        self.send(signal.SIGTERM)
        for child in self.active.values():
            child.wait()
        return self.ended()


def wait_for_release(run_dir: str | Path, timeout_s: float = RELEASE_WAIT_S, stop: Callable[[], bool] | None = None,
                     poll_s: float = 0.1) -> bool:
    """Wait until no process holds ``run_dir``'s lock; False after ``timeout_s`` seconds, or as soon as ``stop()``
    says so (a signal to this process), with the lock still held."""
    deadline = time.monotonic() + timeout_s
    while lock_owner(run_dir) is not None:
        if time.monotonic() >= deadline or (stop is not None and stop()):
            return False
        time.sleep(poll_s)
    return True
