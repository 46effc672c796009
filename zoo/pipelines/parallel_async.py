"""Asynchronous actor-learner pipeline (IMPALA): actor processes ship unrolls, one learner learns from them.

One machine (``zoo run``): this process is the learner. It starts ``num_actors`` actor processes
(torch.multiprocessing; ``fork`` on Linux, so an actor starts in milliseconds and never re-runs the caller's
script). Each actor owns a vector env of ``num_envs`` copies and an acting-only CPU copy of the policy, and fills
fixed-length unrolls (observations ``(T + 1, B)``, actions, behaviour outputs, rewards, terminated, truncated,
valid, policy version) directly into **slots**: ``queue_size`` unroll buffers preallocated in shared memory. The
learner hands out free slots (an integer over each actor's own pipe); an actor that finished an unroll reports
``(slot, episodes)`` and goes on collecting its next unroll while it waits for a new slot, so unrolls are never
pickled and memory is bounded: when the learner falls behind, actors block instead of queueing without limit.

The learner takes ``batch_unrolls`` filled slots, learns (``policy.learn(Unroll, ctx)``: V-trace for IMPALA),
frees the slots and publishes the actor weights into a shared flat buffer under a sequence lock (the learner never
waits for an actor; an actor copies the weights again if the learner wrote while it read). Actors pick up new
weights before each unroll.

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

Resume restores the learner (policy, optimiser, counters, RNGs); actors start fresh episodes with new seeds.

Across machines, under torchrun, rank 0 is this learner and the other ranks are actors that ship the same unrolls
over torch.distributed instead of shared memory: see ``zoo.pipelines.remote_actors``.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
import torch.multiprocessing as mp
from easydict import EasyDict

from ..config import to_plain
from ..data import Unroll
from ..envs import VECTOR_MODES, EnvSpec
from ..errors import ConfigError, ZooError, first_line
from ..lifetime import die_with_parent
from ..policies.build import build_policy
from ..sizes import check_memory, check_processes
from .collector import VectorCollector
from .loop import IterationAbandoned, TrainingLoop
from .process import component_seed

# An actor that fails this many times in a row without delivering an unroll stops the run (a broken env).
_FAILURES_IN_A_ROW = 3
# Seconds an actor may take to become ready (at least): a spawned one imports torch and builds its env first.
_START_UP_S = 60.0


class ActorError(ZooError):
    """An actor process failed and was not (or could not be) restarted; the run was stopped."""


def unroll_fields(unroll: Unroll) -> dict[str, torch.Tensor]:
    """An unroll's per-step tensors by slot field name (``behaviour.<name>`` for the behaviour outputs)."""
    return {"obs": unroll.obs, "action": unroll.action, "reward": unroll.reward, "terminated": unroll.terminated,
            "truncated": unroll.truncated, "valid": unroll.valid,
            **{f"behaviour.{name}": x for name, x in unroll.behaviour.items()}}


# -- shared memory -----------------------------------------------------------------------------------------
class UnrollSlots:
    """``count`` unroll buffers in shared memory, each holding one actor unroll of ``steps`` x ``num_envs``.

    ``specs`` maps every field (``obs``, ``action``, ``reward``, ``terminated``, ``truncated``, ``valid`` and
    ``behaviour.<name>``) to its per-slot shape and dtype; ``version`` holds each slot's behaviour-policy version.
    """

    def __init__(self, count: int, specs: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> None:
        self.count = count
        self.layout = dict(specs)
        self.tensors = {name: torch.zeros((count, *shape), dtype=dtype).share_memory_()
                        for name, (shape, dtype) in specs.items()}
        self.version = torch.zeros(count, dtype=torch.int64).share_memory_()

    @staticmethod
    def specs(unroll: Unroll) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
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
            return x.transpose(0, 1).flatten(1, 2) if len(slots) > 1 else x[0]

        behaviour = {name.split(".", 1)[1]: gather(name) for name in self.tensors if name.startswith("behaviour.")}
        return Unroll(obs=gather("obs"), action=gather("action"), reward=gather("reward"),
                      terminated=gather("terminated"), truncated=gather("truncated"), valid=gather("valid"),
                      behaviour=behaviour, policy_version=int(self.version[index].min()))


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
        parts = flat.split([math.prod(shape) for shape in self.shapes])
        return version, {name: part.reshape(shape) for name, part, shape in zip(self.names, parts, self.shapes,
                                                                                  strict=True)}


def template_unroll(cfg: EasyDict, observation_space: gym.Space, action_space: gym.Space) -> Unroll:
    """An unroll of the shapes and dtypes the config's actors produce (zeros), from an acting-only policy's
    ``collect`` on sampled observations; the global RNGs are left as they were."""
    pipe = cfg.pipeline
    with torch.random.fork_rng(devices=[]):
        actor = build_policy(cfg, observation_space, action_space, "cpu", acting_only=True)
        obs = torch.as_tensor(np.stack([observation_space.sample() for _ in range(pipe.num_envs)]),
                              dtype=torch.float32)
        out = actor.collect(obs)
    raw = torch.as_tensor(out.action) if out.raw_action is None else out.raw_action.cpu()
    steps, envs = pipe.unroll_length, pipe.num_envs
    flags = torch.zeros((steps, envs), dtype=torch.bool)
    return Unroll(
        obs=torch.zeros((steps + 1, *obs.shape)), action=torch.zeros((steps, *raw.shape), dtype=raw.dtype),
        reward=torch.zeros((steps, envs)), terminated=flags, truncated=flags, valid=flags,
        behaviour={name: torch.zeros((steps, *x.shape), dtype=x.dtype) for name, x in out.extras.items()},
        policy_version=0,
    )


# -- the actor process ---------------------------------------------------------------------------------------
def actor_collector(cfg: EasyDict, actor: int, incarnation: int) -> VectorCollector:
    """The vector env of ``actor`` (its ``incarnation``-th start), seeded apart from every other actor and
    start."""
    pipe = cfg.pipeline
    seed = component_seed(cfg.seed, actor + 1, "env", incarnation)
    return VectorCollector(EnvSpec.from_config(cfg), pipe.num_envs, seed, vector_mode=pipe.vector_mode)


def actor_main(
    cfg_plain: dict[str, Any], actor: int, incarnation: int, slots: UnrollSlots, board: WeightBoard,
    steps_done: torch.Tensor, conn: multiprocessing.connection.Connection,
) -> None:
    """An actor process: collect unrolls with the latest published weights into the slots the learner gives.

    Messages to the learner: ``("ready",)`` once its env and policy are built, ``("unroll", slot, env_steps,
    episodes)`` and ``("failed", one_line, fatal)`` (fatal: a ZooError, which a restart cannot fix); from the
    learner: a slot index to fill, or None to stop.
    """
    from ..plugins import import_modules, load_plugins

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    die_with_parent(signal.SIGKILL)  # nothing to save here; SIGKILL also ends an actor that is stopped (SIGSTOP)
    collector = None
    try:
        cfg = EasyDict(cfg_plain)
        load_plugins()  # no-ops after fork; a spawned actor starts with empty registries
        import_modules(list(cfg.get("import_names") or []), list(cfg.get("import_paths") or []))
        torch.set_num_threads(1)
        torch.manual_seed(component_seed(cfg.seed, actor + 1, "torch", incarnation))
        np.random.seed(component_seed(cfg.seed, actor + 1, "numpy", incarnation))
        collector = actor_collector(cfg, actor, incarnation)
        policy = build_policy(cfg, collector.observation_space, collector.action_space, "cpu", acting_only=True)
        conn.send(("ready",))
        steps = cfg.pipeline.unroll_length
        version = -1
        while True:
            latest = board.version()
            if latest != version:
                version, weights = board.read()
                policy.load_actor_state_dict(weights)
            unroll = collector.rollout(policy, steps).to_unroll(version)
            episodes = collector.pop_finished()
            slot = conn.recv()
            if slot is None:
                break
            slots.write(slot, unroll)
            steps_done[actor] += steps * collector.num_envs
            conn.send(("unroll", slot, steps * collector.num_envs, episodes))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass  # the learner is gone or stopping
    except BaseException as error:
        try:
            fatal = isinstance(error, ZooError)
            conn.send(("failed", first_line(error, 300) if fatal else
                       f"{type(error).__name__}: {first_line(error, 300)}", fatal))
        except OSError:
            pass
        if os.environ.get("ZOO_DEBUG"):
            import traceback

            traceback.print_exc()
        os._exit(1)
    finally:
        if collector is not None:
            collector.close()
    os._exit(0)


# -- the learner's side ----------------------------------------------------------------------------------------
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


class ActorPool:
    """Starts and watches the actors, hands out free slots and collects filled ones (a dispatcher thread).

    ``take(n)`` blocks until ``n`` filled slots are ready (or raises ``ActorError``); ``release`` returns slots
    to the free list, which the dispatcher hands to waiting actors. The dispatcher also kills stalled actors
    (see the module docstring).
    """

    def __init__(self, cfg: EasyDict, slots: UnrollSlots, board: WeightBoard, incarnations: list[int]) -> None:
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
        for actor, incarnation in zip(self.actors, incarnations, strict=True):
            actor.incarnation = incarnation
        self.free: deque[int] = deque(range(slots.count))
        self.ready: deque[tuple[int, list[tuple[float, int]]]] = deque()
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
            args=(self.cfg_plain, actor.index, actor.incarnation, self.slots, self.board, self.steps_done, theirs),
        )
        process.start()
        theirs.close()
        actor.process, actor.conn, actor.holding, actor.delivered = process, ours, [], False
        actor.started_at, actor.ready_at = time.monotonic(), None
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
                        _, slot, _, episodes = message
                        actor.holding.remove(slot)
                        actor.delivered, actor.failures_in_a_row = True, 0
                        self.ready.append((slot, episodes))
                        self.lock.notify_all()
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

    def _stalled(self, actor: _Actor) -> str | None:
        # With the lock held: why a live actor is stalled, or None. Only an actor holding a slot owes an unroll, and
        # its clock starts once it is ready too: neither start-up nor a slow learner (no free slot) counts.
        now, why = time.monotonic(), None
        if actor.ready_at is None and now - actor.started_at > self.start_up_s:
            why = f"not ready {self.start_up_s:g} s after its start"
        elif actor.ready_at and actor.holding and now - max(actor.ready_at, actor.assigned_at) > self.timeout_s:
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
        try:  # its last words may still be in the pipe (the exit code can be seen first)
            while cause is None and actor.conn.poll():
                message = actor.conn.recv()
                if message[0] == "failed":
                    cause, fatal = f"failed: {message[1]}", message[2]
        except (EOFError, OSError):
            pass
        if cause is None:
            if code is not None and code < 0:
                cause = f"was killed by {signal.Signals(-code).name}"
            else:
                cause = f"exited with code {code}"
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

    def take(self, count: int, stop: Callable[[], bool] | None = None
             ) -> tuple[list[int], list[list[tuple[float, int]]], float]:
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
        return [slot for slot, _ in taken], [episodes for _, episodes in taken], time.perf_counter() - start

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


# -- the pipeline --------------------------------------------------------------------------------------------
class _PoolState:
    """The actors' part of a checkpoint: how often each was started (so resumed actors get new seeds)."""

    def __init__(self, pipeline: ParallelAsyncPipeline) -> None:
        self.pipeline = pipeline

    def state_dict(self) -> dict[str, Any]:
        pool = self.pipeline.pool
        return {"incarnations": pool.incarnations, "restarts": pool.restarts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pipeline.restore_pool(list(state["incarnations"]), int(state["restarts"]))


class ParallelAsyncPipeline(TrainingLoop):
    """IMPALA's pipeline: actor processes and one learner (see the module docstring).

    An iteration is one learner update from ``batch_unrolls`` unrolls of ``unroll_length`` steps of
    ``num_envs`` envs; ``env_steps`` counts the steps the learner consumed.
    """

    actor_learner: ClassVar[bool] = True
    default_config: ClassVar[dict[str, Any]] = {
        **TrainingLoop.default_config,
        "num_actors": 2,  # actor processes (torchrun: WORLD_SIZE - 1)
        "num_envs": 8,  # sub-envs per actor
        "unroll_length": 32,  # steps per actor unroll (T)
        "batch_unrolls": 4,  # unrolls per learner update
        "queue_size": 16,  # shared-memory unroll slots (bounds memory and policy lag)
        "restart_actors": True,  # restart an actor that dies or stalls (one machine; never after a ZooError)
        "start_method": "auto",  # how actor processes start (auto: fork on Linux)
        "actor_timeout_s": 10.0,  # an actor silent this long is stalled: killed, as if crashed (torchrun: learner too)
        "vector_mode": "auto",  # vector env mode of each actor
        "eval_every": 100,  # evaluate every N learner updates (0: never)
        "checkpoint_every": 500,  # checkpoint every N learner updates
    }
    config_ranges: ClassVar[dict[str, Any]] = {
        **TrainingLoop.config_ranges,
        "num_actors": (1, 4096),
        "num_envs": (1, 65_536),
        "unroll_length": (1, None),
        "batch_unrolls": (1, 4096),
        "queue_size": (1, 65_536),
        "actor_timeout_s": (2.0, None),
    }
    config_choices: ClassVar[dict[str, tuple[Any, ...]]] = {
        "vector_mode": VECTOR_MODES, "start_method": ("auto", "fork", "spawn", "forkserver"),
    }
    # num_envs as on every pipeline (the README promises it). unroll_length, batch_unrolls, queue_size and
    # vector_mode may change on resume: they shape only the slots, batches and actors' envs, all rebuilt at every
    # start, not the learner's saved state.
    frozen_keys: ClassVar[tuple[str, ...]] = ("num_actors", "num_envs")

    def build(self) -> None:
        cfg, pipe = self.cfg, self.cfg.pipeline
        if self.world_size == 1:  # under torchrun the actors run on other machines, and are running already
            check_processes("IMPALA actors", pipe.num_actors, "lower pipeline.num_actors")
        if pipe.queue_size < pipe.batch_unrolls:
            raise ConfigError(
                f"pipeline.queue_size ({pipe.queue_size}) is smaller than pipeline.batch_unrolls "
                f"({pipe.batch_unrolls}): the learner could never fill a batch; raise queue_size"
            )
        observation_space, action_space = EnvSpec.from_config(cfg).spaces()  # checked before any actor starts
        self.policy = build_policy(cfg, observation_space, action_space, self.device)
        template = template_unroll(cfg, observation_space, action_space)
        specs = UnrollSlots.specs(template)
        per_slot = sum(math.prod(shape) * torch.empty((), dtype=dtype).element_size()
                       for shape, dtype in specs.values())
        check_memory(f"{pipe.queue_size} unroll slots of {pipe.unroll_length} steps x {pipe.num_envs} envs",
                     per_slot * pipe.queue_size, "use fewer pipeline.queue_size, unroll_length or num_envs")
        self.slots = UnrollSlots(pipe.queue_size, specs)
        self.board = WeightBoard(self.policy.actor_state_dict())
        self.version = 0
        self.board.publish(self.policy.actor_state_dict(), self.version)
        if self.world_size > 1:  # under torchrun: the other ranks are the actors
            from .remote_actors import RemoteActorPool

            self.pool: Any = RemoteActorPool(cfg, self.slots, self.board)
        else:
            self.pool = ActorPool(cfg, self.slots, self.board, [0] * pipe.num_actors)
        self._restarts_before = 0
        self._started = False
        self._learner_seconds = 0.0
        self._wait_seconds = 0.0
        self._samples = 0
        self._lags: list[int] = []

    def restore_pool(self, incarnations: list[int], restarts: int) -> None:
        """Continue the actors' start counts and restart total of a checkpoint (before the actors start)."""
        if self.world_size > 1:  # remote actors take their seeds from the learner's version
            self.pool.restarts = self._restarts_before = restarts
            return
        if len(incarnations) != len(self.pool.actors):
            raise ConfigError(f"the checkpoint has {len(incarnations)} actors, the config {len(self.pool.actors)}")
        for actor, incarnation in zip(self.pool.actors, incarnations, strict=True):
            actor.incarnation = incarnation
        self.pool.restarts = self._restarts_before = restarts

    def components(self) -> dict[str, Any]:
        return {"actors": _PoolState(self)}

    def close(self) -> None:
        self.pool.close()
        super().close()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is None:  # nothing saved yet (a resume of a run killed before its first checkpoint)
            return
        super().load_state_dict(state)
        self.version = int(state.get("learner_version", self.iteration))
        self.board.publish(self.policy.actor_state_dict(), self.version)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["learner_version"] = self.version
        return state

    def iterate(self) -> dict[str, float]:
        pipe = self.cfg.pipeline
        if not self._started:
            self.pool.start()
            self._started = True
            self._clock = time.perf_counter()
        slots, episodes, waited = self.pool.take(pipe.batch_unrolls, stop=self.stop_requested)
        depth = self.pool.queue_depth()
        begin = time.perf_counter()
        versions = self.slots.version[torch.as_tensor(slots)].tolist()
        batch = self.slots.read(slots)
        self.pool.release(slots)
        for part in episodes:
            self.record_episodes(part)
        steps = batch.steps * int(batch.reward.shape[1])
        self.env_steps += steps
        metrics = self.policy.learn(batch, self.learn_context())
        self.version += 1
        self.board.publish(self.policy.actor_state_dict(), self.version)
        lags = [self.version - 1 - v for v in versions]
        self._learner_seconds += time.perf_counter() - begin
        self._wait_seconds += waited
        self._samples += steps
        wall = max(time.perf_counter() - self._clock, 1e-9)
        metrics.update(
            policy_lag_mean=float(np.mean(lags)), policy_lag_max=float(max(lags)),
            actor_sps=float(self.pool.steps_done.sum()) / wall,
            learner_sps=self._samples / max(self._learner_seconds, 1e-9),
            learner_idle=self._wait_seconds / max(self._wait_seconds + self._learner_seconds, 1e-9),
            queue_depth=float(depth), actor_restarts=float(self.pool.restarts),
        )
        return metrics

    def run(self, run_dir: Any) -> dict[str, Any]:
        try:
            return super().run(run_dir)
        except ActorError as exc:
            where = "" if run_dir is None else (f"; the last checkpoint in {run_dir.path} is intact: "
                                                f"zoo run --resume {run_dir.path}")
            raise ActorError(f"{exc}; the run was stopped{where}") from None
