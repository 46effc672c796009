"""``ParallelAsyncPipeline`` (``parallel_async``): IMPALA's learner, fed by an ``ActorPool``.

An iteration takes ``batch_unrolls`` filled slots, learns from them side by side (``policy.learn(Unroll, ctx)``:
V-trace for IMPALA), frees the slots and publishes the actor weights on the ``WeightBoard`` under the next version
(one per update, saved as ``learner_version``); actors pick up new weights before each unroll. The slots' versions
give the policy lag (how many updates behind the learner the behaviour policy was), which ``queue_size`` bounds.

The pipeline also knows its process layout (``launch``): alone, ``zoo run`` makes this process the learner with a
``LocalActorPool``; under torchrun rank 0 learns with a ``RemoteActorPool`` and every other rank runs
``remote_actor_main``. Resume restores the learner (policy, optimiser, counters, RNGs) and the pool's counts;
actors start fresh episodes with new seeds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from easydict import EasyDict

from ...config.schema import Field
from ...envs import VECTOR_MODES
from ...errors import ConfigError
from ...policies.build import build_policy
from ...rl_utils.distributed import under_torchrun
from ...sizes import check_memory, check_processes
from ..loop import TrainingLoop
from .actor import remote_actor_main
from .local_pool import LocalActorPool
from .pool import ActorError, ActorPool
from .remote_pool import RemoteActorPool
from .transport import UnrollSlots, WeightBoard, actor_layout


class ParallelAsyncPipeline(TrainingLoop):
    """IMPALA's pipeline: actor processes and one learner (see ``zoo.pipelines.actor_learner``).

    An iteration is one learner update from ``batch_unrolls`` unrolls of ``unroll_length`` steps of
    ``num_envs`` envs; ``env_steps`` counts the steps the learner consumed.
    """

    # unroll_length, batch_unrolls, queue_size and vector_mode may change on resume: they shape only the slots,
    # batches and actors' envs, all rebuilt at every start, not the learner's saved state.
    fields: ClassVar[dict[str, Field]] = {
        **TrainingLoop.fields,
        "num_actors": Field(2, "actor processes (torchrun: WORLD_SIZE - 1)", range=(1, 4096), frozen=True),
        "num_envs": Field(8, "sub-envs per actor", range=(1, 65_536), frozen=True),
        "unroll_length": Field(32, "steps per actor unroll (T)", range=(1, None)),
        "batch_unrolls": Field(4, "unrolls per learner update", range=(1, 4096)),
        "queue_size": Field(16, "shared-memory unroll slots (bounds memory and policy lag)", range=(1, 65_536)),
        "restart_actors": Field(True, "restart an actor that dies or stalls (one machine; never after a ZooError)"),
        "start_method": Field("auto", "how actor processes start (auto: fork on Linux)",
                              choices=("auto", "fork", "spawn", "forkserver")),
        "actor_timeout_s": Field(10.0, "an actor silent this long is stalled: killed, as if crashed (torchrun: the "
                                 "learner too)", range=(2.0, None)),
        "vector_mode": Field("auto", "vector env mode of each actor", choices=VECTOR_MODES),
        "lockstep": Field(False, "reproducible runs on one machine: every update learns from batch_unrolls / "
                          "num_actors unrolls of each actor, collected with the previous update's weights, in actor "
                          "order; the same seed writes the same rows, and --resume continues exactly (the actors' "
                          "episodes, memory and RNGs in the checkpoint); actors wait while the learner learns",
                          frozen=True),
        "eval_every": TrainingLoop.fields["eval_every"].but(100, "evaluate every N learner updates (0: never)"),
        "checkpoint_every": TrainingLoop.fields["checkpoint_every"].but(500, "checkpoint every N learner updates"),
    }

    # -- how its processes start (called by zoo.run.launch) ---------------------------------------------------
    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> dict[str, Any]:
        """Under torchrun, rank 0 learns and every other rank acts: ``num_actors`` is WORLD_SIZE - 1."""
        if not under_torchrun(environ):
            return {}
        world_size = int(environ["WORLD_SIZE"])
        if world_size < 2:
            raise ConfigError(f"pipeline 'parallel_async' under torchrun needs a learner and at least one actor, "
                              f"but WORLD_SIZE is {world_size}: start 2 or more processes, or use `zoo run` alone")
        return {"num_actors": world_size - 1}

    @classmethod
    def launch(cls, cfg: EasyDict, processes: Any) -> dict[str, Any]:
        """Learn here (the actors are this process's children, or the other torchrun ranks), or act under
        torchrun on ranks other than 0. An ``ActorError`` names the run directory to resume."""
        if processes.torchrun and processes.join_group("gloo") != 0:
            return remote_actor_main(cfg)
        run_path: list[Path | None] = [processes.resume]
        try:
            return processes.entry(cfg, None if processes.resume is None else str(processes.resume),
                                   lambda path: run_path.__setitem__(0, path), processes.repair)
        except ActorError as exc:
            where = "" if run_path[0] is None else (f"; the last checkpoint in {run_path[0]} is intact: "
                                                    f"zoo run --resume {run_path[0]}")
            raise ActorError(f"{exc}; the run was stopped{where}") from None

    # -- the loop's hooks ---------------------------------------------------------------------------------------
    def build(self) -> None:
        cfg, pipe = self.cfg, self.cfg.pipeline
        if self.world_size == 1:  # under torchrun the actors run on other machines, and are running already
            check_processes("IMPALA actors", pipe.num_actors, "lower pipeline.num_actors")
        if pipe.lockstep and self.world_size > 1:
            raise ConfigError("pipeline.lockstep runs on one machine: its actors' states travel with their unrolls "
                              "over local pipes; set pipeline.lockstep=false under torchrun")
        if pipe.lockstep and pipe.batch_unrolls % pipe.num_actors:
            raise ConfigError(f"pipeline.lockstep: pipeline.batch_unrolls ({pipe.batch_unrolls}) must be a multiple "
                              f"of pipeline.num_actors ({pipe.num_actors}), each actor's share of every update")
        if pipe.queue_size < pipe.batch_unrolls:
            raise ConfigError(
                f"pipeline.queue_size ({pipe.queue_size}) is smaller than pipeline.batch_unrolls "
                f"({pipe.batch_unrolls}): the learner could never fill a batch; raise queue_size"
            )
        layout = actor_layout(cfg)  # the env is checked before any actor starts; the global RNGs are untouched
        self.policy = build_policy(cfg, layout.observation_space, layout.action_space, self.device)
        plan = getattr(self.policy, "plan_learning", None)  # IMPALA: decide policy.compile from the run's plan
        if plan is not None:
            samples = pipe.unroll_length * pipe.batch_unrolls * pipe.num_envs
            plan(math.ceil(pipe.max_env_steps / samples), samples)
        check_memory(f"{pipe.queue_size} unroll slots of {pipe.unroll_length} steps x {pipe.num_envs} envs",
                     layout.slot_bytes * pipe.queue_size, "use fewer pipeline.queue_size, unroll_length or num_envs")
        self.slots = UnrollSlots(pipe.queue_size, layout.fields)
        self.board = WeightBoard(self.policy.actor_state_dict())
        self.version = 0
        self.board.publish(self.policy.actor_state_dict(), self.version)
        self.pool: ActorPool = (RemoteActorPool(cfg, self.slots, self.board) if self.world_size > 1
                                else LocalActorPool(cfg, self.slots, self.board))
        self._started = False
        self._learner_seconds = 0.0
        self._wait_seconds = 0.0
        self._samples = 0

    def components(self) -> dict[str, Any]:
        return {"actors": self.pool}  # the loop saves, restores and closes it

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
        if pipe.lockstep:
            self.pool.published()
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
