"""What the learner asks of its actors, wherever they run: the ``ActorPool`` protocol and ``ActorError``.

Two pools implement it: ``LocalActorPool`` (actor processes on this machine, shared-memory slots) and
``RemoteActorPool`` (torchrun ranks, packets over torch.distributed). The pipeline holds one of them and never asks
which: it starts it, takes filled slots, releases them, reads its counters and saves its ``state_dict`` in the
checkpoint under ``"actors"`` (``{"incarnations": [...], "restarts": n}``, the same keys for both pools).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch

from ...errors import ZooError

# Finished episodes ``(return, length)``, as the collector reports them.
Episodes = list[tuple[float, int]]


class ActorError(ZooError):
    """An actor process failed and was not (or could not be) restarted; the run was stopped."""


@runtime_checkable
class ActorPool(Protocol):
    """The learner's side of a set of actors that fill the shared ``UnrollSlots``.

    ``restarts``: actors restarted so far (the ``actor_restarts`` metric); ``steps_done``: env steps each actor
    has delivered (an int64 tensor, one entry per actor: the ``actor_sps`` metric).
    """

    restarts: int
    steps_done: torch.Tensor

    def start(self) -> None:
        """Start the actors (or the threads that serve them)."""

    def take(self, count: int, stop: Callable[[], bool] | None = None) -> tuple[list[int], list[Episodes], float]:
        """Wait for ``count`` filled slots: ``(slots, their finished episodes, seconds spent waiting)``. Raises
        ``ActorError`` when the run must stop, ``IterationAbandoned`` when ``stop()`` turns true while it waits."""

    def release(self, slots: list[int]) -> None:
        """Give read slots back to be filled again."""

    def queue_depth(self) -> int:
        """Filled slots waiting for the learner."""

    def close(self) -> None:
        """Stop every actor; idempotent."""

    def state_dict(self) -> dict[str, Any]:
        """The pool's part of a checkpoint: ``incarnations`` (starts per actor) and ``restarts``."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict`` output, before ``start``."""
