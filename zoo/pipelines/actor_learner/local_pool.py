"""The learner's actors on one machine: ``LocalActorPool`` starts them as processes, hands them shared-memory
slots, and restarts the ones that fail or stall.

``zoo run`` makes this process the learner. It starts ``num_actors`` actor processes (torch.multiprocessing;
``fork`` on Linux, so an actor starts in milliseconds and never re-runs the caller's script), each running
``actor_main`` (``zoo.pipelines.actor_learner.actor``). Unrolls go into **slots**: ``queue_size`` unroll buffers
preallocated in shared memory (``UnrollSlots``). The learner hands out free slots (an integer over each actor's own
pipe); an actor that finished an unroll reports ``(slot, episodes)`` and goes on collecting its next unroll while
it waits for a new slot, so unrolls are never pickled and memory is bounded: when the learner falls behind, actors
block instead of queueing without limit.

Faults: the learner's dispatcher thread sees an actor that raises or is killed (a closed pipe, an exit code) or
stalls: one that holds a slot and delivers nothing for ``actor_timeout_s`` s (counted from the later of the slot
and its "ready" message, sent once its env and policy are built; never ready after ``max(60 s, actor_timeout_s)``
is stalled too) is killed with SIGKILL (it may be stopped) and counts as failed. Actors waiting for a free slot
(a slow learner) are never stalled. A failed actor's slots are freed, and with ``restart_actors`` (default) a fresh
actor takes its place (counted in the ``actor_restarts`` metric) with new env seeds; the run stops, in one line
naming the actor and its cause, when an actor fails three times in a row before delivering an unroll, on any
failure with ``restart_actors: false``, and on any ``ZooError`` in an actor (a non-finite env output, a bad env
kwarg: deterministic, a restart would fail again). Ctrl-C and SIGTERM reach the learner's loop (it saves and
stops); a learner waiting for unrolls abandons the wait (``IterationAbandoned``) and saves the state before. Actors
ignore SIGINT, are terminated by the learner on the way out, and die with it (``PR_SET_PDEATHSIG``) if it is killed.

Checkpoints keep how often each actor was started (``incarnations``) and the restart count: resumed actors start
fresh episodes with new seeds. Lockstep (``pipeline.lockstep``): ``take`` orders each batch by actor (each actor's
unrolls in the order it collected them), and keeps the state each actor sent with its last unroll of the round
taken (``actor_states``); checkpoints hold them, and resumed actors continue from them instead (an actor restarted
after a failure starts fresh, with new seeds). An actor waiting for the next version is not stalled.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
import torch.multiprocessing as mp
from easydict import EasyDict

from ...config import to_plain
from ...errors import ConfigError
from ...lifetime import exit_cause
from ..loop import IterationAbandoned
from .actor import actor_main
from .pool import ActorError, Episodes
from .transport import UnrollSlots, WeightBoard

# An actor that fails this many times in a row without delivering an unroll stops the run (a broken env).
_FAILURES_IN_A_ROW = 3
# Seconds an actor may take to become ready (at least): a spawned one imports torch and builds its env first.
_START_UP_S = 60.0


class _Actor:
    def __init__(self, index: int) -> None:
        self.index = index
        self.incarnation = 0
        self.process: Any = None
        self.conn: multiprocessing.connection.Connection | None = None
        self.holding: list[int] = []
        self.failures_in_a_row = 0
        self.delivered = False
        self.started_at = self.assigned_at = 0.0  # time.monotonic() of its start and its latest slot, and of
        self.ready_at: float | None = None  # its "ready" message
        self.round_done = False  # lockstep: it delivered its round and waits for the next version


class LocalActorPool:
    """Starts and watches the actors, hands out free slots and collects filled ones (a dispatcher thread); an
    ``ActorPool``.

    ``take(n)`` blocks until ``n`` filled slots are ready (or raises ``ActorError``); ``release`` returns slots
    to the free list, which the dispatcher hands to waiting actors. The dispatcher also kills stalled actors
    (see the module docstring).
    """

    def __init__(self, cfg: EasyDict, slots: UnrollSlots, board: WeightBoard) -> None:
        pipe = cfg.pipeline
        self.cfg_plain = to_plain(cfg)
        self.slots, self.board = slots, board
        self.restart = bool(pipe.restart_actors)
        self.timeout_s = float(pipe.actor_timeout_s)
        self.start_up_s = max(_START_UP_S, self.timeout_s)
        method = pipe.start_method
        if method == "auto":
            method = "fork" if sys.platform.startswith("linux") else "spawn"
        self.context = mp.get_context(method)
        self.steps_done = torch.zeros(pipe.num_actors, dtype=torch.int64).share_memory_()
        self.actors = [_Actor(i) for i in range(pipe.num_actors)]
        self.free: deque[int] = deque(range(slots.count))
        self.ready: deque[tuple[int, Episodes, int, bytes | None]] = deque()  # slot, episodes, actor, its state
        self.lockstep = bool(pipe.get("lockstep"))
        self.actor_states: list[bytes | None] = [None] * pipe.num_actors  # lockstep: at the next round's start
        self._resume_states: list[bytes | None] = [None] * pipe.num_actors  # given to each actor's next start
        self.published_at = 0.0  # time.monotonic() of the learner's latest version (lockstep actors wait for it)
        self.lock = threading.Condition()
        self.restarts = 0
        self._to_restart: list[_Actor] = []
        self.error: str | None = None
        self._closing = False
        self._thread: threading.Thread | None = None

    @property
    def incarnations(self) -> list[int]:
        """How many times each actor has been started (new starts get new env seeds)."""
        return [actor.incarnation for actor in self.actors]

    def state_dict(self) -> dict[str, Any]:
        """The actors' part of a checkpoint: how often each was started, the restarts so far, and (lockstep) each
        actor's state at the start of its next round."""
        state: dict[str, Any] = {"incarnations": self.incarnations, "restarts": self.restarts}
        if self.lockstep:
            state["actor_states"] = list(self.actor_states)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue a checkpoint's start counts (so resumed actors get new seeds) and restart total, before
        ``start``."""
        incarnations = list(state["incarnations"])
        if len(incarnations) != len(self.actors):
            raise ConfigError(f"the checkpoint has {len(incarnations)} actors, the config {len(self.actors)}")
        for actor, incarnation in zip(self.actors, incarnations, strict=True):
            actor.incarnation = incarnation
        self.restarts = int(state["restarts"])
        if self.lockstep and state.get("actor_states") is not None:
            self.actor_states = list(state["actor_states"])
            self._resume_states = list(self.actor_states)

    def start(self) -> None:
        """Start every actor and the dispatcher thread."""
        with self.lock:
            for actor in self.actors:
                self._start(actor)
            self._assign()
        self._thread = threading.Thread(target=self._dispatch, name="zoo-actor-dispatcher", daemon=True)
        self._thread.start()

    def _start(self, actor: _Actor) -> None:
        ours, theirs = self.context.Pipe(duplex=True)
        process = self.context.Process(
            target=actor_main, name=f"zoo-actor-{actor.index}", daemon=True,
            args=(self.cfg_plain, actor.index, actor.incarnation, self.slots, self.board, self.steps_done, theirs,
                  self._resume_states[actor.index]),
        )
        self._resume_states[actor.index] = None  # a restart after a failure starts fresh
        process.start()
        theirs.close()
        actor.process, actor.conn, actor.holding, actor.delivered = process, ours, [], False
        actor.started_at, actor.ready_at, actor.round_done = time.monotonic(), None, False
        actor.incarnation += 1

    def _assign(self) -> None:
        # Called with the lock held: every live actor without a slot gets one while any is free.
        for actor in self.actors:
            if actor.conn is not None and not actor.holding and self.free:
                slot = self.free.popleft()
                try:
                    actor.conn.send(slot)
                    actor.holding.append(slot)
                    actor.assigned_at = time.monotonic()
                except OSError:  # it just died: the dispatcher will see it
                    self.free.appendleft(slot)

    def _dispatch(self) -> None:
        while not self._closing:
            connections = {actor.conn: actor for actor in self.actors if actor.conn is not None}
            try:
                ready = multiprocessing.connection.wait(list(connections), timeout=0.1)
            except OSError:
                ready = []
            with self.lock:
                if self._closing:
                    return
                for conn in ready:
                    actor = connections[conn]  # type: ignore[index]
                    try:
                        message = conn.recv()  # type: ignore[union-attr]
                    except (EOFError, OSError):
                        self._lost(actor, None)
                        continue
                    if message[0] == "unroll":
                        self._delivered(actor, message)
                    elif message[0] == "ready":
                        actor.ready_at = time.monotonic()
                    elif message[0] == "failed":
                        self._lost(actor, f"failed: {message[1]}", fatal=message[2])
                for actor in self.actors:
                    if actor.conn is not None and actor.process.exitcode is not None:
                        self._lost(actor, None)
                    elif actor.conn is not None and (stalled := self._stalled(actor)) is not None:
                        actor.process.kill()  # SIGKILL: it may be stopped (SIGSTOP) or stuck in native code
                        self._lost(actor, stalled, hint="raise pipeline.actor_timeout_s if its env is that slow")
                self._assign()

    def _delivered(self, actor: _Actor, message: tuple[Any, ...]) -> None:
        # With the lock held: an actor's "unroll" message, its slot filled.
        _, slot, _, episodes, *rest = message
        state = rest[0] if rest else None  # lockstep: the actor's state after its round's last unroll
        actor.holding.remove(slot)
        actor.delivered, actor.failures_in_a_row = True, 0
        self.ready.append((slot, episodes, actor.index, state))
        actor.round_done = state is not None
        self.lock.notify_all()

    def _stalled(self, actor: _Actor) -> str | None:
        # With the lock held: why a live actor is stalled, or None. Only an actor holding a slot owes an unroll, and
        # its clock starts once it is ready too: neither start-up nor a slow learner (no free slot) counts.
        now, why = time.monotonic(), None
        if actor.round_done:  # lockstep: waiting for the learner's next version owes nothing
            return None
        if actor.ready_at is None and now - actor.started_at > self.start_up_s:
            why = f"not ready {self.start_up_s:g} s after its start"
        elif actor.ready_at and actor.holding and now - max(actor.ready_at, actor.assigned_at,
                                                             self.published_at) > self.timeout_s:
            why = f"no unroll for {self.timeout_s:g} s"
        if why is None:
            return None
        try:  # a message waiting to be read is no stall (the dispatcher was held up)
            return None if actor.conn is None or actor.conn.poll() else f"stalled: {why}, so it was killed"
        except OSError:
            return None

    def _lost(self, actor: _Actor, cause: str | None, fatal: bool = False, hint: str = "") -> None:
        # With the lock held: an actor ended (reported failure, closed pipe, exit code, or killed as stalled).
        # ``fatal``: a ZooError (zoo's own diagnosis, deterministic), which stops the run whatever restart_actors.
        if actor.conn is None:
            return
        actor.process.join(timeout=1.0)
        if actor.process.is_alive():
            actor.process.kill()
            actor.process.join(timeout=1.0)
        code = actor.process.exitcode
        try:  # its last words may still be in the pipe (the exit code can be seen first): a filled slot counts
            while cause is None and actor.conn.poll():
                message = actor.conn.recv()
                if message[0] == "unroll":
                    self._delivered(actor, message)
                elif message[0] == "failed":
                    cause, fatal = f"failed: {message[1]}", message[2]
        except (EOFError, OSError):
            pass
        if cause is None:
            cause = exit_cause(code)
        actor.conn.close()
        actor.conn = None
        self.free.extend(actor.holding)  # a half-written slot is simply written again
        actor.holding = []
        actor.failures_in_a_row = 0 if actor.delivered else actor.failures_in_a_row + 1
        where, hint, error = f"actor {actor.index} of {len(self.actors)} {cause}", f"; {hint}" if hint else "", None
        if fatal:
            error = f"{where} (not restarted: it would fail the same way)"
        elif not self.restart:
            error = f"{where} (pipeline.restart_actors is false){hint}"
        elif actor.failures_in_a_row >= _FAILURES_IN_A_ROW:
            error = f"{where}, {actor.failures_in_a_row} times in a row before delivering an unroll{hint}"
        else:  # restarted by the learner's own thread (``take``/``release``): never fork from this thread
            self.restarts += 1
            self._to_restart.append(actor)
        self.error = self.error or error  # the first cause is the one to report
        self.lock.notify_all()

    def _restart_lost(self) -> None:
        # With the lock held, on the learner's thread: no other thread is inside torch while it forks.
        while self._to_restart and not self._closing:
            self._start(self._to_restart.pop(0))
        self._assign()

    def take(self, count: int, stop: Callable[[], bool] | None = None) -> tuple[list[int], list[Episodes], float]:
        """Wait for ``count`` filled slots; returns them, their episodes and the seconds spent waiting. Raises
        ``ActorError`` when the run must stop, ``IterationAbandoned`` when ``stop()`` turns true while it waits."""
        start = time.perf_counter()
        with self.lock:
            while len(self.ready) < count and self.error is None:
                if stop is not None and stop():
                    raise IterationAbandoned("a stop signal arrived while the learner waited for unrolls")
                self._restart_lost()
                self.lock.wait(timeout=0.5)
                if self._thread is not None and not self._thread.is_alive() and self.error is None:
                    self.error = "the actor dispatcher thread stopped"
            if self.error is not None:
                raise ActorError(self.error)
            taken = [self.ready.popleft() for _ in range(count)]
        if self.lockstep:  # by actor, each one's in the order collected: the same batch whatever the arrival order
            taken.sort(key=lambda entry: entry[2])
            for _, _, index, state in taken:
                if state is not None:
                    self.actor_states[index] = state
        return [entry[0] for entry in taken], [entry[1] for entry in taken], time.perf_counter() - start

    def published(self) -> None:
        """The learner published a new version: lockstep actors waiting for it owe their next round from now."""
        with self.lock:
            self.published_at = time.monotonic()
            for actor in self.actors:
                actor.round_done = False

    def queue_depth(self) -> int:
        """Filled slots waiting for the learner."""
        return len(self.ready)

    def release(self, slots: list[int]) -> None:
        """Return read slots to the free list (and to waiting actors)."""
        with self.lock:
            self.free.extend(slots)
            self._restart_lost()

    def close(self) -> None:
        """Stop the dispatcher and every actor (terminate, then kill what is left)."""
        with self.lock:
            self._closing = True
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        for actor in self.actors:
            if actor.process is not None and actor.process.is_alive():
                actor.process.terminate()
                with contextlib.suppress(OSError):  # a stopped actor (SIGSTOP) acts on SIGTERM once continued
                    os.kill(actor.process.pid, signal.SIGCONT)
        deadline = time.monotonic() + 3.0
        for actor in self.actors:
            if actor.process is not None:
                actor.process.join(timeout=max(deadline - time.monotonic(), 0.0))
                if actor.process.is_alive():
                    actor.process.kill()
                    actor.process.join(timeout=1.0)
            if actor.conn is not None:
                actor.conn.close()
                actor.conn = None

