"""How unrolls travel from actors to the learner and weights back: the layout both ends agree on, shared memory on
one machine, packets under torchrun.

- ``actor_layout(cfg)``: the env's spaces, the field layout of one actor unroll and the actor weights' shapes,
  probed once from the config (the env's spaces, then an acting-only policy's ``collect`` on sampled
  observations). The learner checks the env and sizes its slots with it before any actor starts; a torchrun actor
  lays out its packets with it, as the learner does.
- ``UnrollSlots``: ``queue_size`` unroll buffers preallocated in shared memory, which actors fill in place, so that
  unrolls are never pickled and memory is bounded; the learner reads several side by side.
- ``WeightBoard``: the learner's actor weights in one shared flat buffer under a sequence lock (neither side ever
  waits for the other).
- ``UnrollPacker`` and ``Heartbeats``: under torchrun, one fixed-size packet per unroll (a header, the finished
  episodes, the unroll's fields as raw bytes, laid out identically on both sides from the same layout), and
  liveness over the process group's store.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
from easydict import EasyDict

from ...data import Unroll
from ...envs import EnvSpec
from ...policies.build import build_policy
from .pool import Episodes

FieldSpecs = dict[str, tuple[tuple[int, ...], torch.dtype]]


def unroll_fields(unroll: Unroll) -> dict[str, torch.Tensor]:
    """An unroll's per-step tensors by slot field name (``behaviour.<name>`` for the behaviour outputs)."""
    memory = {} if unroll.memory is None else {"episode_start": unroll.episode_start, "memory": unroll.memory}
    return {"obs": unroll.obs, "action": unroll.action, "reward": unroll.reward, "terminated": unroll.terminated,
            "truncated": unroll.truncated, "valid": unroll.valid, **memory,
            **{f"behaviour.{name}": x for name, x in unroll.behaviour.items()}}


@dataclass(frozen=True)
class ActorLayout:
    """What the learner and its actors agree on: the env's spaces, every unroll field's per-slot shape and dtype
    (``fields``) and the actor weights' shapes by name (``weights``, an ``actor_state_dict``'s)."""

    observation_space: gym.Space
    action_space: gym.Space
    fields: FieldSpecs
    weights: dict[str, tuple[int, ...]]

    @property
    def slot_bytes(self) -> int:
        """Bytes of one unroll slot."""
        return sum(math.prod(shape) * torch.empty((), dtype=dtype).element_size()
                   for shape, dtype in self.fields.values())


def actor_layout(cfg: EasyDict) -> ActorLayout:
    """The layout of the config's actors, probed once: the env's spaces (an env that cannot be built fails here),
    then an acting-only policy, whose ``collect`` on sampled observations shapes a zero template unroll and whose
    ``actor_state_dict`` shapes the weights. The global RNGs are left as they were."""
    pipe = cfg.pipeline
    spec = EnvSpec.from_config(cfg)
    observation_space, action_space = spec.spaces()
    with torch.random.fork_rng(devices=[]):
        actor = build_policy(cfg, observation_space, action_space, "cpu", acting_only=True)
        # An env that gives action masks: each step's mask is shipped with the unroll (a policy that cannot take
        # them is refused by its actors' collectors, in one line).
        width = spec.mask_width() if getattr(actor, "takes_action_mask", False) else 0
        mask = np.ones((pipe.num_envs, width), dtype=bool) if width else None
        obs = torch.as_tensor(np.stack([observation_space.sample() for _ in range(pipe.num_envs)]),
                              dtype=torch.float32)
        memory = None
        if getattr(actor, "recurrent", False):  # one step of its memory actor shapes the extras
            acting = actor.memory_actor(1, pipe.num_envs, None)
            acting.act(0, obs.numpy(), np.ones(pipe.num_envs, dtype=bool), *(() if mask is None else (mask,)))
            raw, extras = acting.finish()
            raw, extras = raw[0], {name: x[0] for name, x in extras.items()}
            memory = actor.initial_memory(pipe.num_envs)
        else:
            out = actor.collect(obs, **({} if mask is None else {"action_mask": torch.from_numpy(mask)}))
            raw = torch.as_tensor(out.action) if out.raw_action is None else out.raw_action.cpu()
            extras = out.extras
    steps, envs = pipe.unroll_length, pipe.num_envs
    flags = torch.zeros((steps, envs), dtype=torch.bool)
    template = Unroll(
        obs=torch.zeros((steps + 1, *obs.shape)), action=torch.zeros((steps, *raw.shape), dtype=raw.dtype),
        reward=torch.zeros((steps, envs)), terminated=flags, truncated=flags, valid=flags,
        behaviour={name: torch.zeros((steps, *x.shape), dtype=x.dtype) for name, x in extras.items()},
        policy_version=0, episode_start=None if memory is None else torch.zeros((steps + 1, envs), dtype=torch.bool),
        memory=memory,
    )
    weights = {name: tuple(t.shape) for name, t in actor.actor_state_dict().items()}
    return ActorLayout(observation_space, action_space, UnrollSlots.specs(template), weights)


# -- one machine: shared memory ----------------------------------------------------------------------------------
class UnrollSlots:
    """``count`` unroll buffers in shared memory, each holding one actor unroll of ``steps`` x ``num_envs``.

    ``specs`` maps every field (``obs``, ``action``, ``reward``, ``terminated``, ``truncated``, ``valid`` and
    ``behaviour.<name>``) to its per-slot shape and dtype; ``version`` holds each slot's behaviour-policy version.
    """

    def __init__(self, count: int, specs: FieldSpecs) -> None:
        self.count = count
        self.layout = dict(specs)
        self.tensors = {name: torch.zeros((count, *shape), dtype=dtype).share_memory_()
                        for name, (shape, dtype) in specs.items()}
        self.version = torch.zeros(count, dtype=torch.int64).share_memory_()

    @staticmethod
    def specs(unroll: Unroll) -> FieldSpecs:
        """The field layout of ``unroll`` (a template unroll of the right shapes)."""
        return {name: (tuple(x.shape), x.dtype) for name, x in unroll_fields(unroll).items()}

    @property
    def nbytes(self) -> int:
        """Bytes of shared memory held by all slots."""
        return sum(x.numel() * x.element_size() for x in self.tensors.values())

    def write(self, slot: int, unroll: Unroll) -> None:
        """Copy ``unroll`` into ``slot``."""
        for name, value in unroll_fields(unroll).items():
            self.tensors[name][slot].copy_(value)
        self.version[slot] = unroll.policy_version

    def read(self, slots: list[int]) -> Unroll:
        """The unrolls in ``slots`` side by side (concatenated along B; copies, so the slots may be reused)."""
        index = torch.as_tensor(slots, dtype=torch.long)

        def gather(name: str) -> torch.Tensor:
            x = self.tensors[name].index_select(0, index)  # (n, T, B, ...) -> (T, n * B, ...)
            if name == "memory":  # (n, B, ...) -> (n * B, ...): no time axis
                return x.flatten(0, 1)
            return x.transpose(0, 1).flatten(1, 2) if len(slots) > 1 else x[0]

        behaviour = {name.split(".", 1)[1]: gather(name) for name in self.tensors if name.startswith("behaviour.")}
        memory = {name: gather(name) for name in ("episode_start", "memory") if name in self.tensors}
        return Unroll(obs=gather("obs"), action=gather("action"), reward=gather("reward"),
                      terminated=gather("terminated"), truncated=gather("truncated"), valid=gather("valid"),
                      behaviour=behaviour, policy_version=int(self.version[index].min()), **memory)


class WeightBoard:
    """The learner's actor weights in one shared flat buffer, published under a sequence lock.

    The learner (the only writer) makes the sequence odd, copies, and makes it even; a reader copies and retries
    when the sequence was odd or changed meanwhile. Neither side ever waits for the other, so an actor killed
    mid-read cannot block the learner.
    """

    def __init__(self, template: dict[str, torch.Tensor]) -> None:
        self.names = list(template)
        self.shapes = [tuple(t.shape) for t in template.values()]
        sizes = [t.numel() for t in template.values()]
        self.flat = torch.zeros(sum(sizes), dtype=torch.float32).share_memory_()
        self.sequence = torch.zeros(2, dtype=torch.int64).share_memory_()  # [sequence, version]
        self._views = list(self.flat.split(sizes))

    def publish(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Write ``weights`` (an ``actor_state_dict``) as ``version``."""
        self.sequence[0] += 1
        for view, name in zip(self._views, self.names, strict=True):
            view.copy_(weights[name].detach().reshape(-1))
        self.sequence[1] = version
        self.sequence[0] += 1

    def version(self) -> int:
        """The version last published."""
        return int(self.sequence[1])

    def read(self) -> tuple[int, dict[str, torch.Tensor]]:
        """``(version, weights)``: a consistent copy of the latest publication."""
        while True:
            before = int(self.sequence[0])
            if before % 2 == 0:
                flat = self.flat.clone()
                version = int(self.sequence[1])
                if int(self.sequence[0]) == before:
                    break
            time.sleep(0.0001)
        return version, unflatten(flat, self.names, self.shapes)


def unflatten(flat: torch.Tensor, names: list[str], shapes: list[tuple[int, ...]]) -> dict[str, torch.Tensor]:
    """Weights by name from one flat buffer (views into it), in the order and shapes given."""
    parts = flat.split([math.prod(shape) for shape in shapes])
    return {name: part.reshape(shape) for name, part, shape in zip(names, parts, shapes, strict=True)}


# -- across machines: packets over torch.distributed --------------------------------------------------------------
HELLO, UNROLL, FAILED = 0, 1, 2  # packet kinds
_HEADER = 3  # int64: kind, behaviour version, episodes (or message bytes)


def max_episodes(cfg: EasyDict) -> int:
    """How many finished episodes one unroll packet carries at most (every step of every env)."""
    return cfg.pipeline.unroll_length * cfg.pipeline.num_envs


class UnrollPacker:
    """The byte layout of one actor packet: header, episodes (or an error message), then the unroll's fields
    (largest element size first, so that every field starts aligned)."""

    def __init__(self, specs: FieldSpecs, max_episodes: int) -> None:
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

    def pack(self, packet: torch.Tensor, kind: int, version: int, episodes: Episodes | None = None,
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

    def episodes(self, packet: torch.Tensor, count: int) -> Episodes:
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
