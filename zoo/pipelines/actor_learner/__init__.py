"""IMPALA's wing: actors ship unrolls, one learner learns from them (the ``parallel_async`` pipeline).

Actors run acting-only CPU copies of the policy on vector envs and ship fixed-length unrolls (observations
``(T + 1, B)``, actions, behaviour outputs, rewards, terminated, truncated, valid, policy version) to a learner,
which corrects for their policy lag with V-trace and publishes new actor weights. Neither side waits for the
other: actors act with weights that may be a few updates old (the lag is measured, ``policy_lag_mean``/``_max``,
and bounded by ``queue_size``), and the learner learns from whatever unrolls are ready.

Modules, from the bottom up (none imports one above it):

- ``pool``: the ``ActorPool`` protocol the pipeline talks to, and ``ActorError``.
- ``transport``: the layout learner and actors agree on (``actor_layout``), shared-memory ``UnrollSlots`` and the
  ``WeightBoard`` (one machine), ``UnrollPacker`` packets and ``Heartbeats`` (torchrun).
- ``actor``: the one actor loop (``run_actor``), over a pipe and shared memory (``actor_main``) or over
  torch.distributed packets (``remote_actor_main``).
- ``local_pool``: ``LocalActorPool``, actor processes on this machine: slots, restarts, stalls.
- ``remote_pool``: ``RemoteActorPool``, rank 0's side under torchrun.
- ``pipeline``: ``ParallelAsyncPipeline``, the learner's loop and the process layout.
"""

from .actor import actor_main, remote_actor_main, run_actor
from .local_pool import LocalActorPool
from .pipeline import ParallelAsyncPipeline
from .pool import ActorError, ActorPool
from .remote_pool import RemoteActorPool
from .transport import Heartbeats, UnrollPacker, UnrollSlots, WeightBoard, actor_layout, unroll_fields

__all__ = [
    "ActorError", "ActorPool", "Heartbeats", "LocalActorPool", "ParallelAsyncPipeline", "RemoteActorPool",
    "UnrollPacker", "UnrollSlots", "WeightBoard", "actor_layout", "actor_main", "remote_actor_main", "run_actor",
    "unroll_fields",
]
