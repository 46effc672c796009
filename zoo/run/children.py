"""Child ``zoo`` processes that die with the process that started them, and waiting for a run directory to be free.

``start_child`` starts a command (``python -m zoo run ...``) so that:

- it gets SIGTERM when its parent dies, however the parent dies (``kill -9`` included: ``PR_SET_PDEATHSIG`` through
  ``zoo.lifetime.die_with_parent``), so a training run saves its checkpoint and exits instead of training on as an
  orphan that a rerun would find holding its run directory;
- it runs in its own session: a Ctrl-C in the terminal reaches the parent alone, which passes it on once;
- its stdout and stderr go to one unnamed temporary file, not a pipe: a chatty child never blocks on a full pipe
  that nobody reads while it trains, and the parent reads the output once the child has ended;
- ``OPENBLAS_NUM_THREADS`` is 1 unless the caller's environment sets it (several runs share the cores).

``wait_for_release`` waits, bounded, for the process that holds a run directory's lock (a child of a killed parent,
saving on its SIGTERM) to let go of it, so that the next owner finds it free instead of "in use".
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from ..lifetime import die_with_parent
from .run_dir import lock_owner

# How long a new owner waits for a run directory's previous owner (saving after its SIGTERM) to let go of it.
RELEASE_WAIT_S = 60.0


class Child(subprocess.Popen):
    """A ``subprocess.Popen`` whose stdout and stderr (together) are kept in ``output``, read by ``read_output``."""

    output: IO[str]

    def read_output(self) -> str:
        """Everything the child wrote (call once it has ended); closes the temporary file."""
        self.output.seek(0)
        text = self.output.read()
        self.output.close()
        return text


def start_child(command: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | Path | None = None) -> Child:
    """Start ``command`` as a child that dies with this process (see the module docstring); ``env`` replaces the
    environment (default: this process's), with ``OPENBLAS_NUM_THREADS=1`` unless it sets it."""
    environment = dict(os.environ if env is None else env)
    environment.setdefault("OPENBLAS_NUM_THREADS", "1")
    output = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - the child's
    try:
        child = Child(list(command), stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                      env=environment, cwd=cwd, start_new_session=True, preexec_fn=die_with_parent)
    except BaseException:
        output.close()
        raise
    child.output = output
    return child


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
