"""The user's env calls, watched: what they raise names the env, a hung one can be interrupted and timed out.

Every vector env zoo builds (training, actors, evaluation) is wrapped innermost, directly around gymnasium's
vector env, by ``GuardedCalls``. Only the user's code (and gymnasium's stepping of it) runs inside that wrapper;
zoo's own wrappers (finite checks, episode statistics, normalisation) sit above it, so a bug of zoo's still reads
as one, while whatever the env raises becomes one ``EnvError`` line naming the env id, the call and the exception.

The wrapper also tells the process which env call is in progress in the main thread (``in_env_call``).
``watch_calls`` (a context manager entered by training loops) starts a watchdog thread that ends a call running
longer than ``env.call_timeout_s`` with an ``EnvError``, and, once a stop was requested (``request_stop``, by the
loop's signal handler), one running longer than ``STOP_GRACE_S`` with ``EnvCallInterrupted``, so that a hung env
call never holds a stopping run hostage. The watchdog interrupts
the main thread with ``SIGALRM`` (``signal.pthread_kill``) only then, so the per-call cost is a few attribute
writes: no system call per step (an interval timer armed around every call cost 2.7 us per call here).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from _thread import get_ident
from collections.abc import Iterator
from typing import Any

import gymnasium as gym

from ..config.flags import debug
from ..errors import EnvError, ZooError, first_line

# Seconds an env call may run once a stop was requested, before it is interrupted: far longer than a step or reset
# (so a stop normally ends the iteration and its resume is exact), and short enough to leave time for the save
# under SLURM's and Kubernetes' usual 30 s between SIGTERM and SIGKILL.
STOP_GRACE_S = 2.0


class EnvCallInterrupted(BaseException):  # noqa: N818 (a control-flow signal like KeyboardInterrupt, not an error)
    """Raised out of an env call that a stop signal interrupted. A BaseException, so that an env's own ``except
    Exception`` does not swallow it; the training loop catches it and saves its last consistent state."""


class _CallTimedOut(BaseException):  # noqa: N818
    """Raised by the SIGALRM handler into the hung call; ``GuardedCalls`` turns it into an ``EnvError``."""


class _Calls:
    """The process's watched env call (main thread only): which env and call is in progress, and how long."""

    def __init__(self) -> None:
        self.env: GuardedCalls | None = None  # the wrapper whose call is in progress
        self.call = ""  # "step" or "reset"
        self.count = 0  # calls started so far: the watchdog tells one long call from many short ones
        self.timeout_s: float | None = None  # env.call_timeout_s while watch_calls is active
        self.stop_requested = False
        self.expired: str | None = None  # what the watchdog raises at the next SIGALRM: "timeout" or "stop"


_CALLS = _Calls()
_MAIN_THREAD = threading.main_thread().ident


def in_env_call() -> tuple[str, str] | None:
    """``(env id, call)`` of the env call in progress in the main thread, or None."""
    env = _CALLS.env
    return None if env is None else (env.env_id, _CALLS.call)


def request_stop() -> None:
    """Say that a stop signal arrived: from now on an env call that runs longer than ``STOP_GRACE_S`` seconds is
    interrupted (``EnvCallInterrupted``), as the stop handler would have done had the call been running then."""
    _CALLS.stop_requested = True


class GuardedCalls(gym.vector.VectorWrapper):
    """Innermost wrapper of zoo's vector envs (see the module docstring): the user's ``step``/``reset`` raise one
    ``EnvError`` line naming ``env_id``, and are watched (``in_env_call``, ``watch_calls``).

    ``broken`` turns true once a call failed or was interrupted: ``close`` then terminates async workers instead
    of waiting for a call that may never return.
    """

    def __init__(self, env: gym.vector.VectorEnv, env_id: str) -> None:
        super().__init__(env)
        self.env_id = env_id
        self.broken = False
        self._quiet_async = isinstance(env.unwrapped, gym.vector.AsyncVectorEnv)

    def step(self, actions: Any) -> Any:
        """The wrapped env's ``step``, watched."""
        calls = _CALLS
        if calls.env is not None or get_ident() != _MAIN_THREAD or self._quiet_async:
            return self._call("step", self.env.step, actions)
        calls.env, calls.call = self, "step"  # the common case inline: this runs at every step
        calls.count += 1
        try:
            return self.env.step(actions)
        except BaseException as exc:
            raise self._failure("step", exc) from (exc if isinstance(exc, Exception) else None)
        finally:
            calls.env = None

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> Any:
        """The wrapped env's ``reset``, watched."""
        return self._call("reset", self.env.reset, seed=seed, options=options)

    def _call(self, name: str, function: Any, *args: Any, **kwargs: Any) -> Any:
        calls = _CALLS
        watched = calls.env is None and get_ident() == _MAIN_THREAD
        if watched:
            calls.env, calls.call = self, name
            calls.count += 1
        logger_level = _quiet_gymnasium() if self._quiet_async else None
        try:
            return function(*args, **kwargs)
        except BaseException as exc:
            raise self._failure(name, exc) from (exc if isinstance(exc, Exception) else None)
        finally:
            if watched:
                calls.env = None
            if logger_level is not None:
                gym.logger.min_level = logger_level

    def _failure(self, name: str, exc: BaseException) -> BaseException:
        """What to raise for ``exc`` out of the call ``name``: the user's exception as one EnvError line; zoo's
        errors, interruptions (EnvCallInterrupted, KeyboardInterrupt) and exits as they are."""
        self.broken = True
        if isinstance(exc, _CallTimedOut):
            return EnvError(f"env '{self.env_id}' did not return from {name}() within {_CALLS.timeout_s:g} s "
                            f"(env.call_timeout_s): fix the env or raise env.call_timeout_s")
        if isinstance(exc, ZooError) or not isinstance(exc, Exception):
            return exc
        return EnvError(f"env '{self.env_id}' raised in {name}(): {type(exc).__name__}: {first_line(exc, 200)} "
                        f"(ZOO_DEBUG=1 shows the traceback)")

    def close(self, **kwargs: Any) -> None:
        """Close the env; one left mid-call is terminated (async workers), not waited for."""
        if self.broken and self._quiet_async:
            kwargs["terminate"] = True
        self.env.close(**kwargs)


def _quiet_gymnasium() -> int | None:
    """Silence gymnasium's multi-line report of an async worker's error (the worker's traceback) unless ZOO_DEBUG
    asks for tracebacks: zoo reports it in one line. The previous level, to restore."""
    if debug():
        return None
    level = gym.logger.min_level
    gym.logger.min_level = gym.logger.ERROR + 10
    return level


def _on_alarm(signum: int, frame: Any) -> None:
    expired, _CALLS.expired = _CALLS.expired, None
    if _CALLS.env is None or expired is None:  # the call returned just before the watchdog's signal
        return
    if expired == "stop":
        raise EnvCallInterrupted(f"a stop signal interrupted {_CALLS.call}() of env '{_CALLS.env.env_id}'")
    raise _CallTimedOut


def _watchdog(done: threading.Event, poll_s: float) -> None:
    calls, seen, since = _CALLS, -1, 0.0
    while not done.wait(poll_s):
        if calls.env is None or calls.expired is not None:
            continue
        if calls.count != seen:  # a new call since the last look: time it from now (at most poll_s late)
            seen, since = calls.count, time.monotonic()
            continue
        running = time.monotonic() - since  # at most poll_s less than the call's own time: never early
        if calls.timeout_s is not None and running >= calls.timeout_s:
            calls.expired = "timeout"
        elif calls.stop_requested and running >= STOP_GRACE_S:
            calls.expired = "stop"
        else:
            continue
        signal.pthread_kill(_MAIN_THREAD, signal.SIGALRM)  # wakes the main thread out of a blocking system call


@contextlib.contextmanager
def watch_calls(timeout_s: float | None) -> Iterator[None]:
    """While active (main thread): env calls longer than ``timeout_s`` seconds (None or 0: no limit) end with an
    ``EnvError``, and after ``request_stop`` calls longer than ``STOP_GRACE_S`` with ``EnvCallInterrupted``.
    Elsewhere than in the main thread it does nothing."""
    if get_ident() != _MAIN_THREAD:
        yield
        return
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    timeout_s = timeout_s or None  # 0: no limit, as in the config
    limits = [t for t in (timeout_s, STOP_GRACE_S) if t is not None]
    done = threading.Event()
    _CALLS.timeout_s, _CALLS.stop_requested, _CALLS.expired = timeout_s, False, None
    watchdog = threading.Thread(target=_watchdog, args=(done, min(1.0, min(limits) / 10)), name="zoo-env-watchdog",
                                daemon=True)
    watchdog.start()
    try:
        yield
    finally:
        done.set()
        watchdog.join()
        _CALLS.timeout_s, _CALLS.stop_requested, _CALLS.expired = None, False, None
        signal.signal(signal.SIGALRM, previous)
