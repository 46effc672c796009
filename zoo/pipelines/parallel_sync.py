"""Synchronous data-parallel on-policy pipeline (DPPO): ``world_size`` workers on torch.distributed.

Every worker is one process running this pipeline with its own rank: its own vector env (seeded apart through
the rank), its own rollout and GAE, and its own gradients, which ``ctx.sync_gradients`` averages with rl_utils'
``allreduce_grads`` between backward and the optimiser step. As every worker starts from rank 0's policy state
and applies the same averaged gradient, the parameters stay identical on every worker after every step.

Per iteration, besides the gradient all-reduces of ``learn`` (one per minibatch; PPO adds one small sum per
iteration for the advantage moments of every minibatch over all workers, and one min for the minibatch count),
the workers exchange, in four collectives:
- the running observation and reward statistics each collected since the last iteration (classic DPPO: every
  worker normalises with the statistics of all workers' data), one ``all_gather``;
- finished episodes and learner metrics (one ``all_gather_object``), so every rank holds the same episode window
  and rank 0's metrics rows describe the whole run;
- the stop decisions (``stop_return``, signals) through ``agree``: one all-reduce of two flags. The budget needs
  none: every rank holds the same counters.

On a machine with few cores the collectives' latency is the limit: see ``benchmarks/parallel_bench.py``.

Only rank 0 evaluates and writes the run directory; a checkpoint (a collective: every rank calls ``save``) holds
the common state plus each worker's env snapshot and RNG streams under ``workers``, and a resume hands each rank
its own part. ``env_steps`` counts the steps of all workers.

Processes are started by ``zoo.run.launch`` (``zoo run`` spawns them locally) or by ``torchrun``; this module only
uses the initialised default process group.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from easydict import EasyDict

from ..config.schema import Field
from ..envs.calls import EnvCallInterrupted
from ..errors import ConfigError
from ..policies.base import LearnContext
from ..rl_utils.distributed import allreduce_grads, sync_running_mean_std, under_torchrun, world_info
from .loop import IterationAbandoned
from .serial_onpolicy import SerialOnPolicyPipeline


class Collectives:
    """The collectives of one worker over the default process group, with the time spent averaging gradients.

    Arguments:
        device: where collective tensors live (the CUDA device under nccl, else the CPU).
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.world_size = world_info()[1]
        self.sync_seconds, self.sync_calls = 0.0, 0
        self._holders: dict[int, torch.nn.Parameter] = {}

    def average_gradients(self, grad: torch.Tensor) -> None:
        """Replace the flat gradient buffer ``grad`` by its mean over the workers (rl_utils' allreduce_grads)."""
        key = grad.data_ptr()
        holder = self._holders.get(key)
        if holder is None or holder.grad is not grad:  # a parameter whose .grad is the flat buffer itself
            holder = torch.nn.Parameter(grad.detach(), requires_grad=True)
            holder.grad = grad
            self._holders[key] = holder
        start = time.perf_counter()
        allreduce_grads([holder])
        self.sync_seconds += time.perf_counter() - start
        self.sync_calls += 1

    def reduce_scalar(self, value: float, op: Any) -> float:
        """``value`` reduced with ``op`` (a ``dist.ReduceOp``) over the workers (``value`` with one worker)."""
        if self.world_size == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=op)
        return float(tensor[0])

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """The element-wise sum of ``values`` over the workers (a new tensor on ``values``' device)."""
        if self.world_size == 1:
            return values.detach().clone()
        out = values.detach().clone().to(self.device)
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out.to(values.device)


class DistributedContext(LearnContext):
    """``LearnContext`` whose hooks are ``collectives`` over the workers (see ``LearnContext``)."""

    def __init__(self, collectives: Collectives, **counters: Any) -> None:
        super().__init__(**counters)
        self.collectives = collectives

    def sync_gradients(self, grad: torch.Tensor) -> None:
        self.collectives.average_gradients(grad)

    def mean(self, value: float) -> float:
        return self.collectives.reduce_scalar(float(value), dist.ReduceOp.SUM) / self.world_size

    def min(self, value: int) -> int:
        return int(self.collectives.reduce_scalar(value, dist.ReduceOp.MIN))

    def any(self, flag: bool) -> bool:
        return bool(self.collectives.reduce_scalar(int(flag), dist.ReduceOp.MAX))

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        return self.collectives.sum(values)


class ParallelSyncPipeline(SerialOnPolicyPipeline):
    """DPPO's pipeline: ``world_size`` synchronous data-parallel workers (see the module docstring).

    Config keys besides the serial on-policy ones: ``world_size`` (workers; ``zoo run`` spawns them, ``torchrun``
    sets them from WORLD_SIZE), ``backend`` (``auto``: gloo on CPU, nccl on CUDA) and ``timeout_s`` (how long a
    collective may wait for a silent peer). Observation and reward normalisation default to on, as in DPPO.
    """

    fields: ClassVar[dict[str, Field]] = {
        **SerialOnPolicyPipeline.fields,
        "world_size": Field(2, "worker processes (torchrun: WORLD_SIZE)", range=(1, 65_536), frozen=True),
        "backend": Field("auto", "auto (gloo on CPU, nccl on CUDA), gloo or nccl", choices=("auto", "gloo", "nccl")),
        "timeout_s": Field(300.0, "seconds a collective may wait for a silent peer", range=(1.0, None)),
        "normalize_obs": SerialOnPolicyPipeline.fields["normalize_obs"].but(
            True, "running mean/std observation normalisation, statistics merged across workers"),
        "normalize_reward": SerialOnPolicyPipeline.fields["normalize_reward"].but(
            True, "scale rewards by a running return std, statistics merged across workers"),
    }

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> dict[str, Any]:
        """Under torchrun the workers are its processes: ``world_size`` is its WORLD_SIZE."""
        if under_torchrun(environ):
            return {"world_size": int(environ["WORLD_SIZE"])}
        return {}

    @classmethod
    def backend(cls, cfg: EasyDict, environ: Mapping[str, str] | None = None) -> str:
        """The process group's backend (``auto``: nccl when every worker on this machine has a GPU of its own, else
        gloo); ConfigError for one the device or this torch build cannot use, before any process starts.

        NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), which is what several workers on a one-GPU
        machine would be; gloo all-reduces CUDA tensors too, so ``auto`` picks it there."""
        backend = cfg.pipeline.backend
        cuda = str(cfg.device).startswith("cuda")
        if backend == "nccl" and not cuda:
            raise ConfigError(f"pipeline.backend 'nccl' needs CUDA but device is '{cfg.device}': "
                              f"set device=cuda, or pipeline.backend=gloo (or auto)")
        environ = os.environ if environ is None else environ
        local_workers = (int(environ.get("LOCAL_WORLD_SIZE", 1)) if under_torchrun(environ)
                         else int(cfg.pipeline.world_size))
        gpus = 0
        if cuda and torch.cuda.is_available():
            gpus = 1 if torch.device(str(cfg.device)).index is not None else torch.cuda.device_count()
        if backend == "auto":
            backend = "nccl" if cuda and local_workers <= gpus else "gloo"
        if backend == "nccl" and local_workers > gpus:
            raise ConfigError(f"pipeline.backend 'nccl' needs a GPU per worker: {local_workers} workers on this "
                              f"machine share {gpus} GPU(s) (device '{cfg.device}'): use pipeline.backend=gloo "
                              f"(or auto), or fewer workers")
        if backend == "nccl" and not dist.is_nccl_available():
            raise ConfigError("pipeline.backend 'nccl' is not available in this torch build: use pipeline.backend=gloo")
        return backend

    @classmethod
    def launch(cls, cfg: EasyDict, processes: Any) -> dict[str, Any]:
        """torchrun's processes join its group; ``zoo run`` spawns ``world_size`` workers (one: this process)."""
        backend = cls.backend(cfg)
        if processes.torchrun:
            processes.join_group(backend, float(cfg.pipeline.timeout_s))
            return processes.run_here()
        if cfg.pipeline.world_size > 1:
            return processes.spawn_workers(backend)
        return processes.run_here()

    def __init__(self, cfg: EasyDict, rank: int = 0, world_size: int = 1) -> None:
        rank, world_size = world_info()
        if world_size != cfg.pipeline.world_size:
            raise ConfigError(
                f"pipeline parallel_sync has world_size {cfg.pipeline.world_size} but this process group has "
                f"{world_size} process(es): start it with `zoo run` or zoo.train (they spawn the workers), or "
                f"under torchrun, which sets WORLD_SIZE"
            )
        self._common: list[dict[str, Any]] = []  # the normalisers' statistics as of the last synchronisation
        super().__init__(cfg, rank, world_size)

    def build(self) -> None:
        super().build()
        nccl = dist.is_initialized() and dist.get_backend() == "nccl"
        self.collectives = Collectives(self.device if nccl else "cpu")
        if self.world_size > 1:  # every worker starts from rank 0's weights and optimiser state
            box = [self.policy.state_dict() if self.rank == 0 else None]
            dist.broadcast_object_list(box, src=0)
            if self.rank != 0:
                self.policy.load_state_dict(box[0])
        self._remember_normalizers()

    # -- collectives ---------------------------------------------------------------------------------------
    def agree(self, *flags: bool) -> tuple[bool, ...]:
        if self.world_size == 1:
            return flags
        tensor = torch.tensor([int(flag) for flag in flags], dtype=torch.int32, device=self.collectives.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return tuple(bool(value) for value in tensor.tolist())

    def learn_context(self, updates: int = 1) -> LearnContext:
        if self.world_size == 1:
            return super().learn_context(updates)
        return DistributedContext(self.collectives, progress=self.progress(), iteration=self.iteration,
                                  env_steps=self.env_steps, rank=self.rank, world_size=self.world_size,
                                  updates=updates)

    def _normalizer_statistics(self) -> list[Any]:
        collector = self.collector
        found = []
        if collector.obs_normalizer is not None:
            found.append(collector.obs_normalizer.obs_rms)
        if collector.reward_normalizer is not None:
            found.append(collector.reward_normalizer.normalizer.return_rms)
        return found

    def _remember_normalizers(self) -> None:
        self._common = [statistics.state_dict() for statistics in self._normalizer_statistics()]

    def _sync_normalizers(self) -> None:
        statistics = self._normalizer_statistics()
        if statistics:  # observations and rewards in one all_gather
            self._common = sync_running_mean_std(statistics, self._common, device=self.collectives.device)

    # -- one iteration ------------------------------------------------------------------------------------
    def iterate(self) -> dict[str, float]:
        try:
            rollout = self.collector.rollout(self.policy, self.cfg.pipeline.rollout_steps)
        except EnvCallInterrupted:
            rollout = None
        # Every worker abandons the iteration when one was interrupted in an env call (the others' next
        # collectives would not match its save's): one flag, before this iteration's first collective.
        (abandoned,) = self.agree(rollout is None)
        if rollout is None or abandoned:
            raise IterationAbandoned("a stop signal interrupted a worker's env call")
        self.env_steps += rollout.steps * rollout.num_envs * self.world_size
        self._sync_normalizers()
        batch = self.policy.process_rollout(rollout)
        sync = self.collectives
        calls, seconds = sync.sync_calls, sync.sync_seconds
        metrics = self.policy.learn(batch, self.learn_context())
        if sync.sync_calls > calls:
            metrics["allreduce_ms"] = 1000.0 * (sync.sync_seconds - seconds) / (sync.sync_calls - calls)
        episodes = self.collector.pop_finished()
        if self.world_size == 1:
            self.record_episodes(episodes)
            return metrics
        parts: list[Any] = [None] * self.world_size
        dist.all_gather_object(parts, (episodes, metrics))
        totals: dict[str, list[float]] = {}
        for worker_episodes, worker_metrics in parts:  # rank order: every rank records the same window
            self.record_episodes(worker_episodes)
            for key, value in worker_metrics.items():
                totals.setdefault(key, []).append(float(value))
        return {key: sum(values) / len(values) for key, values in totals.items()}

    # -- state --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The common state plus ``workers``: each rank's components and RNG streams (a collective; complete
        on rank 0 only)."""
        state = super().state_dict()
        own = {"components": state["components"], "rng": state["rng"]}
        if self.world_size == 1:
            state["workers"] = [own]
            return state
        gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(own, gathered, dst=0)
        state["workers"] = gathered
        return state

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore a checkpoint read by rank 0 (other ranks pass None and receive it; a collective)."""
        if self.world_size > 1:
            box = [state if self.rank == 0 else None]
            dist.broadcast_object_list(box, src=0)
            state = box[0]
        if state is None:  # nothing saved yet: every rank starts afresh
            return
        workers = state.get("workers")
        if not isinstance(workers, list) or len(workers) != self.world_size:
            count = len(workers) if isinstance(workers, list) else "no"
            raise ConfigError(f"the checkpoint holds {count} workers' state, this run has {self.world_size}")
        own = workers[self.rank]
        super().load_state_dict({**state, "components": own["components"], "rng": own["rng"]})
        self._remember_normalizers()
