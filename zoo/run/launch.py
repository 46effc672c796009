"""Launching: each pipeline says how its processes start (``TrainingLoop.launch``), from the pieces ``Processes``
offers: train here, in this process; join the process group torchrun describes; spawn data-parallel workers on
this machine under a supervisor (``zoo.run.supervisor``).

Under torchrun (``torchrun ... -m zoo run --config FILE``) each process finds RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT in its environment. What a pipeline derives from that environment (DPPO's
``world_size``, IMPALA's ``num_actors``) is resolved into the config before it is validated and written into
config.yaml (``TrainingLoop.from_environment``); nothing changes the config afterwards. Each torchrun rank also
watches torchrun's agent: if the agent dies (SIGKILL, OOM), nothing else would stop the ranks, which would train on
with rank 0 holding the run directory's lock; their SIGTERM handling runs instead (every rank stops after the same
iteration, rank 0 saves and unlocks) and they exit, or are ended 30 s later. ``die_with_parent`` would not do: its
signal follows the agent's *thread* that started the rank, which need not live as long as the agent.
"""

from __future__ import annotations

import atexit
import datetime
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist
from easydict import EasyDict

from ..lifetime import stop_when_parent_dies
from ..registry import PIPELINE_REGISTRY
from ..rl_utils.distributed import under_torchrun
from . import supervisor

# How long a torchrun rank whose agent died may take to save and exit after its SIGTERM before it is ended.
ORPHAN_GRACE_S = 30.0


class Processes:
    """The ways a pipeline's processes can start, for its ``launch`` classmethod (see the module docstring).

    ``entry(cfg, resume, on_run_dir, repair)`` builds and runs the pipeline in one process (``run_worker``).
    """

    def __init__(self, cfg: EasyDict, resume: Path | None, repair: bool,
                 entry: Callable[..., dict[str, Any]]) -> None:
        self.cfg, self.resume, self.repair, self.entry = cfg, resume, repair, entry

    @property
    def torchrun(self) -> bool:
        """Whether torchrun started this process (its rank and world size are in the environment)."""
        return under_torchrun()

    @property
    def torchrun_world_size(self) -> int:
        """WORLD_SIZE under torchrun (1 otherwise)."""
        return int(os.environ["WORLD_SIZE"]) if self.torchrun else 1

    def run_here(self) -> dict[str, Any]:
        """Build and run the pipeline in this process; its summary."""
        return self.entry(self.cfg, None if self.resume is None else str(self.resume), None, self.repair)

    def join_group(self, backend: str, timeout_s: float = 1800.0) -> int:
        """Under torchrun: watch the agent, join the process group it describes (env://); this process's rank."""
        global _joined
        stop_when_parent_dies(ORPHAN_GRACE_S)
        if not dist.is_initialized():
            dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=timeout_s))
            atexit.register(_destroy_group)
            _joined = True
        return dist.get_rank()

    def spawn_workers(self, backend: str) -> dict[str, Any]:
        """Start ``pipeline.world_size`` workers on this machine under a supervisor; rank 0's summary."""
        return supervisor.spawn(self.cfg, self.resume, self.entry, self.repair, backend)


_joined = False  # whether join_group initialised a process group in this process


def end_rank(code: int) -> None:
    """End this process now if it joined a torchrun process group (``join_group``); otherwise return.

    Its ``atexit`` hooks run (the group is destroyed first), the standard streams are flushed, then ``os._exit(code)``
    skips the interpreter's teardown, as the supervisor's workers do. A teardown is unsafe here: gloo's worker
    threads release a collective's tensors some time after the collective has returned (the last one, the final
    checkpoint's ``gather_object``, just before the process exits), and a thread that needs the GIL to free a
    tensor while the interpreter finalises is ended by ``pthread_exit``, which C++ turns into an abort
    ("terminate called without an active exception", exit by SIGABRT) in about one exit in six after the rank had
    saved. Called by ``zoo``'s entry point (``zoo.cli.console_main``) once ``main`` has returned."""
    if not _joined:
        return
    _destroy_group()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing more can be said on it
            pass
    os._exit(code)


def _destroy_group() -> None:
    # A torchrun rank ends with its process group destroyed, as torch asks (first thing in ``end_rank``; an atexit
    # hook too, for a rank that ends another way). Destroying it alone did not stop the aborts at exit: gloo's
    # threads can still hold a finished collective's tensors; ``end_rank`` skips the teardown where they abort.
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # a broken group cannot always be torn down cleanly; the process ends anyway
            pass


def launch(cfg: EasyDict, resume: Path | None, repair: bool, entry: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """Start the processes of ``cfg``'s pipeline (its ``launch`` classmethod) and return rank 0's summary (a
    worker's or actor's own on the other ranks)."""
    return PIPELINE_REGISTRY.get(cfg.pipeline.type).launch(cfg, Processes(cfg, resume, repair, entry))
