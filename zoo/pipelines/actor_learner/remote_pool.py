"""The learner's actors across machines: ``RemoteActorPool``, rank 0's side of an IMPALA job under torchrun.

``torchrun --nnodes=N ... -m zoo run --config configs/impala_cartpole.py``: global rank 0 is the learner (it owns
the run directory), every other rank is an actor (``pipeline.num_actors`` becomes WORLD_SIZE - 1) running
``remote_actor_main`` (``zoo.pipelines.actor_learner.actor``). The transport is point-to-point over gloo: an actor
sends one fixed-size packet per unroll (``UnrollPacker``) and receives the newest weights. The learner's receiver
thread takes a packet only when a slot is free, so a learner that falls behind makes actors wait in ``send``:
memory stays bounded. The packet's unroll lands in the same shared ``UnrollSlots`` the local actors fill, so the
pipeline reads both alike.

Faults: an actor that raises sends its error in one line and the run stops naming it (any error: a ZooError
such as a non-finite env output, as on one machine, but also any other, since a remote actor cannot be restarted
from here: torchrun's own ``--max-restarts`` restarts the whole job); an actor that dies or stops responding
(no heartbeat for ``actor_timeout_s``) stops the run in one line. Actors ignore SIGINT and SIGTERM (torchrun
forwards them to every process): the learner saves and then stops them; a learner waiting for unrolls abandons
the wait on a stop signal, as on one machine. If the learner dies, each actor's next send or receive fails (or its
watch on the learner's heartbeat ends it) and it exits with one line.

Checkpoints keep the restart count only: remote actors derive their seeds from the learner's version.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from easydict import EasyDict

from ...errors import first_line
from ..loop import IterationAbandoned
from .pool import ActorError, Episodes
from .transport import FAILED, UNROLL, Heartbeats, UnrollPacker, UnrollSlots, WeightBoard, max_episodes


class RemoteActorPool:
    """The learner's side: a receiver thread that fills slots from actor packets and answers with weights; an
    ``ActorPool``."""

    def __init__(self, cfg: EasyDict, slots: UnrollSlots, board: WeightBoard) -> None:
        self.slots, self.board = slots, board
        self.num_actors = cfg.pipeline.num_actors
        self.packer = UnrollPacker(slots.layout, max_episodes(cfg))
        self.steps = cfg.pipeline.unroll_length * cfg.pipeline.num_envs
        self.steps_done = torch.zeros(self.num_actors, dtype=torch.int64)
        self.restarts = 0
        self.free = list(range(slots.count))
        self.ready: list[tuple[int, Episodes]] = []
        self.lock = threading.Condition()
        self.error: str | None = None
        self._closing = False
        self._thread: threading.Thread | None = None
        self.timeout_s = float(cfg.pipeline.actor_timeout_s)
        self.heartbeats: Heartbeats | None = None
        self._checked = 0.0
        self._connection_error: tuple[str, float] | None = None

    def state_dict(self) -> dict[str, Any]:
        """The actors' part of a checkpoint: the restarts so far (``incarnations`` are all 0: remote actors derive
        their seeds from the learner's version, so there is nothing to count here)."""
        return {"incarnations": [0] * self.num_actors, "restarts": self.restarts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue a checkpoint's restart total (its ``incarnations`` do not matter here)."""
        self.restarts = int(state["restarts"])

    def start(self) -> None:
        """Start the heartbeats and the receiver thread."""
        self.heartbeats = Heartbeats(0, list(range(1, self.num_actors + 1)), self.timeout_s)
        self._thread = threading.Thread(target=self._serve, name="zoo-remote-actors", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        packet = self.packer.empty()
        reply = torch.zeros(1 + self.board.flat.numel(), dtype=torch.float64)
        told: set[int] = set()
        while True:
            with self.lock:
                while not self.free and not self._closing:
                    self.lock.wait(timeout=0.5)
                closing = self._closing
            try:
                sender = dist.recv(packet)
            except Exception as error:  # a peer is gone; which one, its heartbeat tells (``_check_actors``)
                with self.lock:
                    self._connection_error = (first_line(error, 200), time.monotonic())
                    self.lock.notify_all()
                return
            kind, version, count = self.packer.header(packet)
            if kind == FAILED:
                with self.lock:
                    self.error = f"actor {sender - 1} of {self.num_actors} (rank {sender}) failed: " \
                                 f"{self.packer.message(packet, count)}"
                    self.lock.notify_all()
                reply[0] = -1
                dist.send(reply, dst=sender)
                return
            if closing:
                reply[0] = -1
                dist.send(reply, dst=sender)
                told.add(sender)
                if len(told) == self.num_actors:
                    return
                continue
            if kind == UNROLL:
                with self.lock:
                    slot = self.free.pop(0)
                self.packer.unpack_into(packet, self.slots, slot)
                self.slots.version[slot] = version
                with self.lock:
                    self.ready.append((slot, self.packer.episodes(packet, count)))
                    self.steps_done[sender - 1] += self.steps
                    self.lock.notify_all()
            latest, weights = self.board.read()
            reply[0] = latest
            reply[1:] = torch.cat([weights[name].reshape(-1) for name in self.board.names])
            dist.send(reply, dst=sender)

    def take(self, count: int, stop: Callable[[], bool] | None = None) -> tuple[list[int], list[Episodes], float]:
        """As ``ActorPool.take`` (``stop``: a stop signal must not wait for actors that may never send again)."""
        start = time.perf_counter()
        with self.lock:
            while len(self.ready) < count and self.error is None:
                if stop is not None and stop():
                    raise IterationAbandoned("a stop signal arrived while the learner waited for unrolls")
                self.lock.wait(timeout=0.5)
                self._check_actors()
            if self.error is not None:
                raise ActorError(self.error)
            taken, self.ready = self.ready[:count], self.ready[count:]
        return [slot for slot, _ in taken], [episodes for _, episodes in taken], time.perf_counter() - start

    def _check_actors(self) -> None:
        # With the lock held, at most once a second: an actor whose heartbeat stopped is gone.
        now = time.monotonic()
        if self.heartbeats is None or now - self._checked < 1.0 or self.error is not None:
            return
        self._checked = now
        stale = self.heartbeats.stale()
        lost = self._connection_error
        if not stale and lost is not None and now - lost[1] > self.timeout_s + 2.0:
            self.error = f"an actor's connection was lost ({lost[0]})"
        elif stale:
            rank = stale[0]
            self.error = (f"actor {rank - 1} of {self.num_actors} (rank {rank}) stopped responding (no heartbeat for "
                          f"{self.timeout_s:g} s: killed, or its machine or network is gone)")

    def queue_depth(self) -> int:
        """Filled slots waiting for the learner."""
        return len(self.ready)

    def release(self, slots: list[int]) -> None:
        """Return read slots to the free list."""
        with self.lock:
            self.free.extend(slots)
            self.lock.notify_all()

    def close(self) -> None:
        """Tell every actor to stop (each is told at its next packet), waiting a few seconds at most."""
        with self.lock:
            self._closing = True
            self.lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10.0 if self.error is None else 2.0)
        if self.heartbeats is not None:
            self.heartbeats.close()

