"""The replay buffer's columns as tensors on the learner's device, for the learning step to gather minibatches from.

On the CPU these are views of the buffer's own numpy arrays (``torch.from_numpy``: no copy, always current). On a
GPU they are a mirror on the device, brought up to date before each learning call by copying only the rows added
since the last one (``ReplayBuffer.added``; a buffer changed in place, ``ReplayBuffer.generation``, is copied whole):
a minibatch is then gathered on the device, with no host-to-device copy per update. The mirror holds the buffer's
capacity (for SAC on Hopper with a million rows, about 110 MB).

The new rows of a learning call (one per env step in SAC's loop) go up through pinned staging buffers, one per
column and two in turn, each reused only once the copy that last read it is done (a CUDA event): per column one
host copy into the staging buffer and one asynchronous copy per contiguous run of rows (two where the ring buffer
wraps), nothing waiting for the learning steps queued before them. It replaced pinning the row indices and the
values anew on every call followed by an indexed copy (five operations per column), at a lower host cost per call
(``benchmarks/cuda_check.py --profile``; docs/speed.md).
"""

from __future__ import annotations

import numpy as np
import torch

from ..data import ReplayBuffer
from ..data.replay import MASK_FIELD

# The columns a minibatch holds (``env``, the sub-env index, is bookkeeping for n-step windows); ``next_action_mask``
# too where the replay keeps the env's action masks (``minibatch_columns``).
COLUMNS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")


def minibatch_columns(replay: ReplayBuffer) -> tuple[str, ...]:
    """``COLUMNS``, and ``next_action_mask`` where ``replay`` keeps the next observations' action masks."""
    return (*COLUMNS, MASK_FIELD) if replay.next_action_mask is not None else COLUMNS
# Rows a staging buffer holds: more new rows than this in one call go up in several copies.
STAGING_ROWS = 1024


class _Staging:
    """Two pinned host buffers per column (pinned where CUDA is present), each with the event of the last copy
    that read it."""

    def __init__(self, columns: dict[str, torch.Tensor], rows: int) -> None:
        pin = torch.cuda.is_available()
        self.rows = rows
        self.buffers = [{name: torch.empty((rows, *column.shape[1:]), dtype=column.dtype, pin_memory=pin)
                         for name, column in columns.items()} for _ in range(2)]
        self.arrays = [{name: tensor.numpy() for name, tensor in buffers.items()} for buffers in self.buffers]
        self.events: list[torch.cuda.Event | None] = [None, None]
        self.turn = 0

    def next(self) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray]]:
        """The staging buffers whose turn it is (as tensors and as numpy views of them), once the copy that last
        read them has finished."""
        self.turn ^= 1
        event = self.events[self.turn]
        if event is not None:
            event.synchronize()
        return self.buffers[self.turn], self.arrays[self.turn]

    def copied(self, device: torch.device) -> None:
        """Mark the copies just queued from the current buffers (their reuse waits for these)."""
        if device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
            self.events[self.turn] = event


class ReplayStorage:
    """``of(replay)``: the replay's columns as tensors on ``device``, current as of the call.

    ``mirror=True`` keeps a device-side copy even on the CPU (what a GPU gets; for tests of the copying itself).
    """

    def __init__(self, device: torch.device, mirror: bool | None = None) -> None:
        self.device = device
        self.mirror = device.type != "cpu" if mirror is None else mirror
        self._replay: ReplayBuffer | None = None
        self._columns: dict[str, torch.Tensor] = {}
        self._staging: _Staging | None = None
        self._synced = (0, 0)  # (generation, rows added) the device mirror holds

    def of(self, replay: ReplayBuffer) -> dict[str, torch.Tensor]:
        """The columns of ``replay`` (views on the CPU; the device mirror brought up to date elsewhere)."""
        if replay is not self._replay:
            self._replay = replay
            names = minibatch_columns(replay)
            if not self.mirror:
                self._columns = {name: torch.from_numpy(getattr(replay, name)) for name in names}
            else:
                self._columns = {name: torch.empty(getattr(replay, name).shape, device=self.device,
                                                   dtype=torch.from_numpy(getattr(replay, name)[:0]).dtype)
                                 for name in names}
                self._staging = _Staging(self._columns, min(STAGING_ROWS, replay.capacity))
                self._synced = (-1, 0)
        if self.mirror:
            self._sync(replay)
        return self._columns

    def columns(self) -> list[torch.Tensor]:
        """The column tensors of the current replay (none before the first ``of``)."""
        return list(self._columns.values())

    def _sync(self, replay: ReplayBuffer) -> None:
        generation, synced = self._synced
        new = replay.added - synced
        if generation != replay.generation or new < 0 or new >= replay.capacity:
            for name, column in self._columns.items():  # everything held, in one (waiting) copy per column
                column[: len(replay)].copy_(torch.from_numpy(getattr(replay, name)[: len(replay)]))
        else:
            # the newest `new` rows, oldest first: a run of rows that may wrap around the end of the ring
            start = (replay.position - new) % replay.capacity
            done = 0
            while done < new:
                count = min(new - done, self._staging.rows)
                self._copy_rows(replay, (start + done) % replay.capacity, count)
                done += count
        self._synced = (replay.generation, replay.added)

    def _copy_rows(self, replay: ReplayBuffer, first: int, count: int) -> None:
        """Rows ``first .. first + count - 1`` (modulo the capacity) up through a staging buffer."""
        staging, arrays = self._staging.next()
        head = min(count, replay.capacity - first)  # rows before the end of the ring; the rest from row 0
        for name, column in self._columns.items():
            source, stage, stage_np = getattr(replay, name), staging[name], arrays[name]
            stage_np[:head] = source[first: first + head]
            if head < count:
                stage_np[head:count] = source[: count - head]
            column[first: first + head].copy_(stage[:head], non_blocking=True)
            if head < count:
                column[: count - head].copy_(stage[head:count], non_blocking=True)
        self._staging.copied(self.device)
