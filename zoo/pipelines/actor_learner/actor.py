"""The actor: one loop for actor processes on this machine and actor ranks under torchrun.

An actor owns a vector env of ``num_envs`` copies and an acting-only CPU copy of the policy. It repeats: load the
newest weights if they changed, collect an unroll of ``unroll_length`` steps (observations ``(T + 1, B)``,
actions, behaviour outputs, rewards, terminated, truncated, valid, and the version of the weights that acted), and
hand it over with its finished episodes. Only how weights arrive and unrolls leave differs, behind an
``ActorChannel``:

- ``PipeChannel`` (``actor_main``: a process started by the ``LocalActorPool``): weights from the shared
  ``WeightBoard``, each unroll written into the shared slot the learner named over the pipe. The actor collects an
  unroll before it waits for a slot, so a free slot is filled at once.
- ``PacketChannel`` (``remote_actor_main``: a torchrun rank other than 0): one packet per unroll to the learner,
  answered with the newest weights; version -1 says stop (the learner says so to every actor when its run ends).

Seeds: an actor's env, torch and numpy seeds derive from the config's seed, its index and its incarnation (how
often it was started), so a restarted actor, or a resumed run's, collects new episodes; a torchrun actor's
incarnation is the learner's version when it connects (a resumed learner's is new).

Lockstep (``pipeline.lockstep``, one machine): the actor collects ``batch_unrolls / num_actors`` unrolls per round,
each round with the weights of the learner's newest version, then waits for the next version. With the last unroll
of a round it sends its state (``actor_state``: its envs' episodes, their memory, its RNGs), which is its state at
the start of its next round: the learner keeps it in its checkpoint, and a resumed run's actors start from it
(``restore_actor``), so the run continues as an unbroken one would.

Failures follow zoo's one-line protocol (``zoo.lifetime.failure_line``): an actor that raises tells the learner
its error in one line and whether it is fatal, i.e. a ``ZooError`` (zoo's own diagnosis: a non-finite env output,
a bad env kwarg), which a restart would meet again, so it is never restarted. An actor whose learner stopped or
vanished ends without a report.
"""

from __future__ import annotations

import math
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import time
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist
from easydict import EasyDict

from ...config.flags import debug
from ...data import Unroll
from ...envs import EnvSpec
from ...errors import EnvError, ZooError, first_line
from ...lifetime import die_with_parent, failure_line
from ...plugins import load_run_plugins
from ...policies.build import build_policy
from ..collector import VectorCollector
from ..process import component_seed
from .pool import ActorError, Episodes
from .transport import (
    FAILED,
    HELLO,
    UNROLL,
    Heartbeats,
    UnrollPacker,
    UnrollSlots,
    WeightBoard,
    actor_layout,
    max_episodes,
    unflatten,
    unroll_fields,
)


class ActorChannel(Protocol):
    """How one actor's weights arrive and its unrolls leave (see the module docstring)."""

    def connect(self) -> int | None:
        """Reach the learner: this start's incarnation (the seeds derive from it), or None to stop at once."""

    def ready(self) -> None:
        """Say that the env and the policy are built."""

    def weights(self, version: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        """The newest ``(version, actor weights)``, or None while ``version`` is the newest."""

    def deliver(self, unroll: Unroll, episodes: Episodes, state: bytes | None = None) -> bool:
        """Hand ``unroll`` and its finished episodes to the learner (with the actor's ``state`` after it, lockstep's
        last unroll of a round); False: the learner says stop."""

    def fail(self, line: str, fatal: bool) -> None:
        """Tell the learner this actor failed (``line``: a ``failure_line``; ``fatal``: do not restart it)."""

    def learner_gone(self, error: BaseException) -> bool:
        """Whether ``error`` means the learner stopped or vanished (nothing to tell it)."""


def actor_collector(cfg: EasyDict, actor: int, incarnation: int) -> VectorCollector:
    """The vector env of ``actor`` (its ``incarnation``-th start), seeded apart from every other actor and
    start."""
    pipe = cfg.pipeline
    seed = component_seed(cfg.seed, actor + 1, "env", incarnation)
    return VectorCollector(EnvSpec.from_config(cfg), pipe.num_envs, seed, vector_mode=pipe.vector_mode)


def actor_state(collector: VectorCollector) -> bytes:
    """An actor's state between two rounds (lockstep): its collector's (the envs' episodes in progress, their
    memory, the normalisers) and its torch and numpy RNGs, pickled."""
    return pickle.dumps({"collector": collector.state_dict(), "torch": torch.get_rng_state(),
                         "numpy": np.random.get_state()})


def restore_actor(collector: VectorCollector, state: bytes) -> None:
    """Continue from ``actor_state`` output (a checkpoint's: unpickled, only for run directories you trust)."""
    saved = pickle.loads(state)
    collector.load_state_dict(saved["collector"])
    torch.set_rng_state(saved["torch"])
    np.random.set_state(saved["numpy"])


def run_actor(cfg: EasyDict, actor: int, channel: ActorChannel, state: bytes | None = None) -> None:
    """Actor ``actor``'s loop: collect unrolls with the newest weights and deliver them until the learner says
    stop (lockstep: rounds, each with the next version; ``state``: where a resumed lockstep actor continues). A
    failure is reported through ``channel`` (unless the learner is gone) and raised again."""
    collector = None
    try:
        load_run_plugins(cfg)  # no-ops after fork and under torchrun; a spawned actor starts with empty registries
        incarnation = channel.connect()
        if incarnation is None:
            return
        torch.set_num_threads(1)
        torch.manual_seed(component_seed(cfg.seed, actor + 1, "torch", incarnation))
        np.random.seed(component_seed(cfg.seed, actor + 1, "numpy", incarnation))
        collector = actor_collector(cfg, actor, incarnation)
        policy = build_policy(cfg, collector.observation_space, collector.action_space, "cpu", acting_only=True)
        if state is not None:
            restore_actor(collector, state)
        channel.ready()
        pipe = cfg.pipeline
        steps, version = pipe.unroll_length, -1
        per_round = pipe.batch_unrolls // pipe.num_actors if pipe.get("lockstep") else 0
        while True:
            newest = channel.weights(version)
            while per_round and newest is None:  # lockstep: each round with the next version
                time.sleep(0.0005)
                newest = channel.weights(version)
            if newest is not None:
                version, weights = newest
                policy.load_actor_state_dict(weights)
            for unroll_in_round in range(max(per_round, 1)):
                unroll = collector.rollout(policy, steps).to_unroll(version)
                episodes = collector.pop_finished()
                state_after = (actor_state(collector),) if per_round and unroll_in_round == per_round - 1 else ()
                if not channel.deliver(unroll, episodes, *state_after):
                    return
    except BaseException as error:
        if not channel.learner_gone(error):
            # what the user's env raised may pass (a crashed simulator): its actor is restarted like any other
            channel.fail(failure_line(error), isinstance(error, ZooError) and not isinstance(error, EnvError))
        raise
    finally:
        if collector is not None:
            collector.close()


# -- on this machine: a process of the LocalActorPool -------------------------------------------------------------
class PipeChannel:
    """An actor process's end of the ``LocalActorPool``. Messages to the learner: ``("ready",)``, ``("unroll",
    slot, env_steps, episodes)`` and ``("failed", line, fatal)``; from it: a slot index to fill, or None to stop."""

    def __init__(self, conn: multiprocessing.connection.Connection, slots: UnrollSlots, board: WeightBoard,
                 steps_done: torch.Tensor, actor: int, incarnation: int) -> None:
        self.conn, self.slots, self.board, self.steps_done = conn, slots, board, steps_done
        self.actor, self.incarnation = actor, incarnation

    def connect(self) -> int | None:
        return self.incarnation  # the pool counts the starts

    def ready(self) -> None:
        self.conn.send(("ready",))

    def weights(self, version: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        return None if self.board.version() == version else self.board.read()

    def deliver(self, unroll: Unroll, episodes: Episodes, state: bytes | None = None) -> bool:
        slot = self.conn.recv()
        if slot is None:
            return False
        self.slots.write(slot, unroll)
        env_steps = unroll.steps * int(unroll.reward.shape[1])
        self.steps_done[self.actor] += env_steps
        self.conn.send(("unroll", slot, env_steps, episodes, state))
        return True

    def fail(self, line: str, fatal: bool) -> None:
        try:
            self.conn.send(("failed", line, fatal))
        except OSError:
            pass

    def learner_gone(self, error: BaseException) -> bool:
        return isinstance(error, (EOFError, BrokenPipeError, KeyboardInterrupt))  # its pipe closed, or stopping


def actor_main(
    cfg_plain: dict[str, Any], actor: int, incarnation: int, slots: UnrollSlots, board: WeightBoard,
    steps_done: torch.Tensor, conn: multiprocessing.connection.Connection, state: bytes | None = None,
) -> None:
    """An actor process (the target the ``LocalActorPool`` starts): ``run_actor`` over a ``PipeChannel`` (from
    ``state``, a lockstep checkpoint's); exits 0 when the learner stops it, 1 after a failure it reported."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    die_with_parent(signal.SIGKILL)  # nothing to save here; SIGKILL also ends an actor that is stopped (SIGSTOP)
    channel = PipeChannel(conn, slots, board, steps_done, actor, incarnation)
    try:
        run_actor(EasyDict(cfg_plain), actor, channel, state)
    except BaseException as error:
        if not channel.learner_gone(error):
            if debug():
                import traceback

                traceback.print_exc()
            os._exit(1)
    os._exit(0)


# -- under torchrun: a rank of the RemoteActorPool --------------------------------------------------------------
class PacketChannel:
    """A torchrun actor rank's end of the ``RemoteActorPool``: every packet to rank 0 (HELLO first, then one per
    unroll, or FAILED) is answered with the newest weights (float64: the version, then the flat actor weights).

    Its heartbeat tells the learner it is alive; a thread watches the learner's and ends this process, in one line,
    when it stops: a send or receive to a dead learner can wait for a long time.
    """

    def __init__(self, cfg: EasyDict, rank: int, world_size: int) -> None:
        layout = actor_layout(cfg)
        self.packer = UnrollPacker(layout.fields, max_episodes(cfg))
        self.packet = self.packer.empty()
        self.names, self.shapes = list(layout.weights), list(layout.weights.values())
        self.reply = torch.zeros(1 + sum(math.prod(shape) for shape in self.shapes), dtype=torch.float64)
        self.received = -1  # the version in ``reply``
        self.unrolls_sent = 0
        self.who = f"actor {rank - 1} of {world_size - 1} (rank {rank})"
        self.heartbeats = Heartbeats(rank, [0], float(cfg.pipeline.actor_timeout_s))
        threading.Thread(target=self._watch_learner, name="zoo-watch-learner", daemon=True).start()

    def _watch_learner(self) -> None:
        while True:
            time.sleep(1.0)
            if self.heartbeats.stale():
                print(f"zoo: error: {self.who}: the learner (rank 0) stopped responding (no heartbeat for "
                      f"{self.heartbeats.timeout_s:g} s); this actor stops", file=sys.stderr, flush=True)
                os._exit(1)

    def _exchange(self, kind: int, version: int, **parts: Any) -> int:
        self.packer.pack(self.packet, kind, version, **parts)
        try:
            dist.send(self.packet, dst=0)
            dist.recv(self.reply, src=0)
        except Exception as error:
            raise ActorError(f"{self.who}: the learner (rank 0) is gone ({first_line(error, 200)})") from None
        self.received = int(self.reply[0])
        return self.received

    def connect(self) -> int | None:
        version = self._exchange(HELLO, 0)
        return version if version >= 0 else None

    def ready(self) -> None:
        pass  # the learner watches heartbeats, not start-up

    def weights(self, version: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        if self.received == version:
            return None
        return self.received, unflatten(self.reply[1:].to(torch.float32), self.names, self.shapes)

    def deliver(self, unroll: Unroll, episodes: Episodes, state: bytes | None = None) -> bool:
        received = self._exchange(UNROLL, unroll.policy_version, episodes=episodes, fields=unroll_fields(unroll))
        self.unrolls_sent += 1
        return received >= 0

    def fail(self, line: str, fatal: bool) -> None:
        try:
            self._exchange(FAILED, 0, message=line)  # fatal or not: the learner cannot restart a remote actor
        except ActorError:
            pass

    def learner_gone(self, error: BaseException) -> bool:
        return isinstance(error, ActorError)  # raised by ``_exchange`` only

    def close(self) -> None:
        """Stop the heartbeat."""
        self.heartbeats.close()


def remote_actor_main(cfg: EasyDict) -> dict[str, Any]:
    """An actor rank under torchrun: ``run_actor`` over a ``PacketChannel``; returns a summary when the learner
    stops it, raises ``ActorError`` (one line) when it fails or the learner is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # torchrun forwards signals to every rank: the learner decides
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    channel = PacketChannel(cfg, rank, world_size)
    try:
        run_actor(cfg, rank - 1, channel)
    except ActorError:
        raise
    except Exception as error:
        raise ActorError(f"{channel.who} failed: {failure_line(error)}") from None
    finally:
        channel.close()
    unrolls = channel.unrolls_sent
    steps = unrolls * cfg.pipeline.unroll_length * cfg.pipeline.num_envs
    return {"reason": "stopped_by_learner", "iteration": unrolls, "env_steps": steps, "wall_time": 0.0,
            "episode_return_mean": None, "run_dir": None}
