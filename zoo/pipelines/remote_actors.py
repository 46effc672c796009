"""IMPALA across machines: actors under torchrun that ship unrolls to the learner over torch.distributed (gloo).

``torchrun --nnodes=N ... -m zoo run --config configs/impala_cartpole.py``: global rank 0 is the learner (it owns
the run directory), every other rank is an actor (``pipeline.num_actors`` becomes WORLD_SIZE - 1). The transport
is point-to-point: an actor sends one fixed-size packet per unroll (a header, its finished episodes, and the unroll's
fields as raw bytes, laid out identically on both sides from the same template) and receives the newest weights
(float64: the version, then the flat actor weights). The learner's receiver thread takes a packet only when a slot is
free, so a learner that falls behind makes actors wait in ``send``: memory stays bounded. Version -1 tells an
actor to stop (the learner does so for every actor when its run ends).

Faults: an actor that raises sends its error in one line and the run stops naming it (any error: a ZooError
such as a non-finite env output, as on one machine, but also any other, since a remote actor cannot be restarted
from here: torchrun's own ``--max-restarts`` restarts the whole job); an actor that dies or stops responding
(no heartbeat for ``actor_timeout_s``) stops the run in one line. Actors ignore SIGINT and SIGTERM (torchrun
forwards them to every process): the learner saves and then stops them; a learner waiting for unrolls abandons
the wait on a stop signal, as on one machine. If the learner dies, each actor's next send or receive fails and
it exits with one line.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from easydict import EasyDict

from ..envs import EnvSpec
from ..errors import ZooError, first_line
from ..policies.build import build_policy
from .loop import IterationAbandoned
from .parallel_async import ActorError, UnrollSlots, WeightBoard, actor_collector, template_unroll, unroll_fields
from .process import component_seed

HELLO, UNROLL, FAILED = 0, 1, 2
_HEADER = 3  # int64: kind, behaviour version, episodes (or message bytes)


class UnrollPacker:
    """The byte layout of one actor packet: header, episodes (or an error message), then the unroll's fields
    (largest element size first, so that every field starts aligned)."""

    def __init__(self, specs: dict[str, tuple[tuple[int, ...], torch.dtype]], max_episodes: int) -> None:
        self.max_episodes = max_episodes
        self.episodes_at = 8 * _HEADER
        offset = self.episodes_at + 16 * max_episodes
        self.fields: list[tuple[str, tuple[int, ...], torch.dtype, int, int]] = []
        order = sorted(specs.items(), key=lambda item: -torch.empty((), dtype=item[1][1]).element_size())
        for name, (shape, dtype) in order:
            size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            self.fields.append((name, shape, dtype, offset, size))
            offset += size
        self.size = offset

    def empty(self) -> torch.Tensor:
        """A packet buffer."""
        return torch.zeros(self.size, dtype=torch.uint8)

    def pack(self, packet: torch.Tensor, kind: int, version: int, episodes: list[tuple[float, int]] | None = None,
             fields: dict[str, torch.Tensor] | None = None, message: str = "") -> None:
        """Fill ``packet`` in place (the newest ``max_episodes`` episodes are kept)."""
        area = packet[self.episodes_at:self.episodes_at + 16 * self.max_episodes]
        if kind == FAILED:
            text = message.encode()[: 16 * self.max_episodes]
            count = len(text)
            area[:count].copy_(torch.frombuffer(bytearray(text), dtype=torch.uint8))
        else:
            kept = (episodes or [])[-self.max_episodes:]
            count = len(kept)
            if kept:
                values = torch.tensor([[float(r), float(n)] for r, n in kept], dtype=torch.float64)
                area[:16 * count].view(torch.float64).copy_(values.reshape(-1))
        packet[:self.episodes_at].view(torch.int64).copy_(torch.tensor([kind, version, count]))
        if fields is not None:
            for name, _, _, offset, size in self.fields:
                packet[offset:offset + size].copy_(fields[name].contiguous().reshape(-1).view(torch.uint8))

    def header(self, packet: torch.Tensor) -> tuple[int, int, int]:
        """``(kind, version, count)``."""
        kind, version, count = packet[:self.episodes_at].view(torch.int64).tolist()
        return int(kind), int(version), int(count)

    def episodes(self, packet: torch.Tensor, count: int) -> list[tuple[float, int]]:
        """The finished episodes ``(return, length)`` of an unroll packet."""
        area = packet[self.episodes_at:self.episodes_at + 16 * count].view(torch.float64).view(-1, 2)
        return [(float(r), int(n)) for r, n in area.tolist()]

    def message(self, packet: torch.Tensor, count: int) -> str:
        """The error line of a FAILED packet."""
        return bytes(packet[self.episodes_at:self.episodes_at + count].tolist()).decode(errors="replace")

    def unpack_into(self, packet: torch.Tensor, slots: UnrollSlots, slot: int) -> None:
        """Copy the unroll's fields of ``packet`` into ``slot``."""
        for name, shape, dtype, offset, size in self.fields:
            slots.tensors[name][slot].copy_(packet[offset:offset + size].view(dtype).reshape(shape))


class Heartbeats:
    """Liveness over the process group's store: every process adds 1 to its own counter each ``interval`` s (a
    thread of its own); a watched peer whose counter stops moving for ``timeout_s`` is reported by ``stale``.
    Counters, not clocks, so machines need not agree on the time. (A receive from any actor would wait forever
    for a dead one: gloo reports a closed connection only to operations on that peer.)"""

    def __init__(self, rank: int, watch: list[int], timeout_s: float, interval: float = 1.0) -> None:
        store = dist.distributed_c10d._get_default_store()
        self._beat_store, self._watch_store = store.clone(), store.clone()
        self.rank, self.timeout_s, self.interval = rank, timeout_s, interval
        now = time.monotonic()
        self.seen = {peer: (-1, now) for peer in watch}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="zoo-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.is_set():
            try:
                self._beat_store.add(f"zoo/heartbeat/{self.rank}", 1)
            except Exception:  # the store is gone with its host: the peers' own checks decide
                return
            self._stop.wait(self.interval)

    def stale(self) -> list[int]:
        """Watched ranks whose counter has not moved for ``timeout_s`` seconds."""
        now, found = time.monotonic(), []
        for peer, (value, since) in self.seen.items():
            try:
                current = int(self._watch_store.add(f"zoo/heartbeat/{peer}", 0))
            except Exception:
                current = value
            if current != value:
                self.seen[peer] = (current, now)
            elif now - since > self.timeout_s:
                found.append(peer)
        return found

    def close(self) -> None:
        """Stop beating."""
        self._stop.set()


def _layout(cfg: EasyDict) -> tuple[Any, Any, dict[str, tuple[tuple[int, ...], torch.dtype]]]:
    observation_space, action_space = EnvSpec.from_config(cfg).spaces()
    template = template_unroll(cfg, observation_space, action_space)
    return observation_space, action_space, UnrollSlots.specs(template)


def max_episodes(cfg: EasyDict) -> int:
    """How many finished episodes one unroll packet carries at most (every step of every env)."""
    return cfg.pipeline.unroll_length * cfg.pipeline.num_envs


class RemoteActorPool:
    """The learner's side: a receiver thread that fills slots from actor packets and answers with weights.

    Offers the same interface as ``ActorPool`` (``start``, ``take``, ``release``, ``queue_depth``, ``close``,
    ``restarts``, ``incarnations``, ``steps_done``, ``actors``).
    """

    def __init__(self, cfg: EasyDict, slots: UnrollSlots, board: WeightBoard) -> None:
        self.slots, self.board = slots, board
        self.num_actors = cfg.pipeline.num_actors
        self.packer = UnrollPacker(slots.layout, max_episodes(cfg))
        self.steps = cfg.pipeline.unroll_length * cfg.pipeline.num_envs
        self.steps_done = torch.zeros(self.num_actors, dtype=torch.int64)
        self.actors: list[Any] = [None] * self.num_actors
        self.restarts = 0
        self.free = list(range(slots.count))
        self.ready: list[tuple[int, list[tuple[float, int]]]] = []
        self.lock = threading.Condition()
        self.error: str | None = None
        self._closing = False
        self._thread: threading.Thread | None = None
        self.timeout_s = float(cfg.pipeline.actor_timeout_s)
        self.heartbeats: Heartbeats | None = None
        self._checked = 0.0
        self._connection_error: tuple[str, float] | None = None

    @property
    def incarnations(self) -> list[int]:
        """Remote actors derive their seeds from the learner's version; nothing to count here."""
        return [0] * self.num_actors

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

    def take(self, count: int, stop: Callable[[], bool] | None = None
             ) -> tuple[list[int], list[list[tuple[float, int]]], float]:
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


def remote_actor_main(cfg: EasyDict) -> dict[str, Any]:
    """An actor rank under torchrun (see the module docstring); returns a summary when the learner stops it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # torchrun forwards signals to every rank: the learner decides
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    actor = rank - 1
    observation_space, action_space, specs = _layout(cfg)
    packer = UnrollPacker(specs, max_episodes(cfg))
    packet = packer.empty()
    policy = build_policy(cfg, observation_space, action_space, "cpu", acting_only=True)
    template = policy.actor_state_dict()
    names, shapes = list(template), [tuple(t.shape) for t in template.values()]
    reply = torch.zeros(1 + sum(t.numel() for t in template.values()), dtype=torch.float64)
    torch.set_num_threads(1)
    heartbeats = Heartbeats(rank, [0], float(cfg.pipeline.actor_timeout_s))

    def watch_learner() -> None:
        while True:
            time.sleep(1.0)
            if heartbeats.stale():
                print(f"zoo: error: actor {actor} of {world_size - 1} (rank {rank}): the learner (rank 0) stopped "
                      f"responding (no heartbeat for {heartbeats.timeout_s:g} s); this actor stops",
                      file=sys.stderr, flush=True)
                os._exit(1)

    threading.Thread(target=watch_learner, name="zoo-watch-learner", daemon=True).start()

    def exchange(kind: int, version: int, **parts: Any) -> int:
        packer.pack(packet, kind, version, **parts)
        try:
            dist.send(packet, dst=0)
            dist.recv(reply, src=0)
        except Exception as error:
            raise ActorError(f"actor {actor} of {world_size - 1} (rank {rank}): the learner (rank 0) is gone "
                             f"({first_line(error, 200)})") from None
        received = int(reply[0])
        if received >= 0:
            flat = reply[1:].to(torch.float32)
            parts_ = flat.split([math.prod(shape) for shape in shapes])
            policy.load_actor_state_dict({n: p.reshape(s) for n, p, s in zip(names, parts_, shapes, strict=True)})
        return received

    version = exchange(HELLO, 0)
    collector = None
    unrolls = 0
    try:
        if version >= 0:
            collector = actor_collector(cfg, actor, version)  # a resumed learner's version gives new seeds
            torch.manual_seed(component_seed(cfg.seed, rank, "torch", version))
        while version >= 0:
            unroll = collector.rollout(policy, cfg.pipeline.unroll_length).to_unroll(version)
            version = exchange(UNROLL, version, episodes=collector.pop_finished(), fields=unroll_fields(unroll))
            unrolls += 1
    except ActorError:
        raise
    except Exception as error:
        line = first_line(error, 300) if isinstance(error, ZooError) else \
            f"{type(error).__name__}: {first_line(error, 300)}"
        try:
            exchange(FAILED, 0, message=line)
        except ActorError:
            pass
        raise ActorError(f"actor {actor} of {world_size - 1} (rank {rank}) failed: {line}") from None
    finally:
        heartbeats.close()
        if collector is not None:
            collector.close()
    steps = unrolls * cfg.pipeline.unroll_length * cfg.pipeline.num_envs
    return {"reason": "stopped_by_learner", "iteration": unrolls, "env_steps": steps, "wall_time": 0.0,
            "episode_return_mean": None, "run_dir": None}
