"""The replay buffer's columns as tensors on the learner's device, for the learning step to gather minibatches from.

On the CPU these are views of the buffer's own numpy arrays (``torch.from_numpy``: no copy, always current). On a
GPU they are a mirror on the device, brought up to date before each learning call by copying only the rows added
since the last one (``ReplayBuffer.added``; a buffer changed in place, ``ReplayBuffer.generation``, is copied whole):
a minibatch is then gathered on the device, with no host-to-device copy per update. The mirror holds the buffer's
capacity (for SAC on Hopper with a million rows, about 110 MB).
"""

from __future__ import annotations

import numpy as np
import torch

from ..data import ReplayBuffer

# The columns a minibatch holds (``env``, the sub-env index, is bookkeeping for n-step windows).
COLUMNS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")


class ReplayStorage:
    """``of(replay)``: the replay's columns as tensors on ``device``, current as of the call."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._replay: ReplayBuffer | None = None
        self._columns: dict[str, torch.Tensor] = {}
        self._synced = (0, 0)  # (generation, rows added) the device mirror holds

    def of(self, replay: ReplayBuffer) -> dict[str, torch.Tensor]:
        """The columns of ``replay`` (views on the CPU; the device mirror brought up to date elsewhere)."""
        if replay is not self._replay:
            self._replay = replay
            if self.device.type == "cpu":
                self._columns = {name: torch.from_numpy(getattr(replay, name)) for name in COLUMNS}
            else:
                self._columns = {name: torch.empty(getattr(replay, name).shape, device=self.device,
                                                   dtype=torch.from_numpy(getattr(replay, name)[:0]).dtype)
                                 for name in COLUMNS}
                self._synced = (-1, 0)
        if self.device.type != "cpu":
            self._sync(replay)
        return self._columns

    def columns(self) -> list[torch.Tensor]:
        """The column tensors of the current replay (none before the first ``of``)."""
        return list(self._columns.values())

    def _sync(self, replay: ReplayBuffer) -> None:
        generation, synced = self._synced
        new = replay.added - synced
        if generation != replay.generation or new < 0 or new >= replay.capacity:
            rows = None  # everything held
        elif new == 0:
            return
        else:
            rows = (replay.position - new + np.arange(new)) % replay.capacity
        for name, column in self._columns.items():
            source = getattr(replay, name)
            if rows is None:
                column[: len(replay)].copy_(torch.from_numpy(source[: len(replay)]))
            else:  # through pinned memory, asynchronously: no wait for the step queued before it
                index = torch.from_numpy(rows).pin_memory().to(self.device, non_blocking=True)
                values = torch.from_numpy(np.ascontiguousarray(source[rows])).pin_memory()
                column.index_copy_(0, index, values.to(self.device, non_blocking=True))
        self._synced = (replay.generation, replay.added)
