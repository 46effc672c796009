"""Stop requests from signals: SIGINT (Ctrl-C), SIGTERM and SIGHUP (what SLURM and Kubernetes send).

A signal does not interrupt the iteration in progress: the loop finishes it (rollout, update, metrics row),
saves that consistent state and exits with the conventional code 128 + signal number, so a resumed run continues
exactly as if it had never stopped. An iteration whose env call does not return (a hung ``step``/``reset`` of the
user's env) cannot finish: once a stop was requested, the env-call watchdog (``zoo.envs.calls``) interrupts a call
that has run ``STOP_GRACE_S`` seconds with ``EnvCallInterrupted``, and the loop saves the state as of the end of
the last completed iteration instead (a resume then starts fresh episodes: not exact). The same SIGTERM or SIGHUP
again during an env call interrupts it at once (another signal after the first, such as the SIGTERM that DPPO's
supervisor relays after a terminal's Ctrl-C reached the whole process group, does not); a second Ctrl-C stops at
once without saving (the previous checkpoint stays intact, as checkpoints are written atomically).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from ..envs.calls import EnvCallInterrupted, in_env_call, request_stop

_CATCH = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class StopSignals:
    """Context manager: while active, ``received`` holds the first stop signal's number (None until then).

    Handlers are installed only in the main thread (Python delivers signals there); elsewhere it does nothing.
    """

    def __init__(self, message: str = "saving after the current iteration",
                 on_first: Callable[[int], None] | None = None) -> None:
        self.received: int | None = None
        self.interrupts = 0  # Ctrl-Cs (SIGINT) received: the second stops at once
        self.message = message
        self.on_first = on_first  # called with the first signal's number (e.g. to forward it to workers)
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in _CATCH:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        call = in_env_call()
        self.interrupts += signum == signal.SIGINT
        if self.received is not None:
            # A second Ctrl-C: stop now, keep the last checkpoint. Counted as Ctrl-Cs, not as signals: a DPPO worker
            # gets a terminal's Ctrl-C and its supervisor's SIGTERM relay of it in either order.
            if self.interrupts >= 2:
                raise KeyboardInterrupt
            # The same signal again is the user insisting; another one is usually a relay of the first (DPPO's
            # supervisor forwards a terminal's Ctrl-C to its workers as SIGTERM): the grace still applies to it.
            if call is not None and signum == self.received:
                raise EnvCallInterrupted(f"a stop signal interrupted {call[1]}() of env '{call[0]}'")
            return
        self.received = signum
        request_stop()  # a call that runs on for STOP_GRACE_S is interrupted: the iteration could never end
        print(f"zoo: {signal.Signals(signum).name} received: {self.message} (Ctrl-C again to stop at once)",
              file=sys.stderr, flush=True)
        if self.on_first is not None:
            self.on_first(signum)

    @property
    def exit_code(self) -> int:
        """128 + the received signal's number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP); 0 if none."""
        return 0 if self.received is None else 128 + int(self.received)
