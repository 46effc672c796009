"""A preallocated numpy replay buffer: uniform sampling, terminated and truncated kept apart, exact state.

Memory is allocated once at construction (``nbytes`` says how much), so a buffer that does not fit fails at the
start of a run, not hours into it. ``next_obs`` is stored explicitly rather than derived from the following
row: with vector envs and episode ends, the row after a transition is not in general its successor, and a
truncated transition needs its own final observation to bootstrap from.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .batches import Transitions

_FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")


class ReplayBuffer:
    """A ring buffer of transitions.

    Arguments:
        capacity: the most transitions held; the oldest are overwritten first.
        obs_shape, action_shape: shapes of one observation and one action.
        obs_dtype, action_dtype: storage dtypes (float32 by default; uint8 images stay uint8).
    Examples:
        >>> buffer = ReplayBuffer(1000, (3,), (1,))
        >>> buffer.add(transitions)
        >>> batch = buffer.sample(256, np.random.default_rng(0))
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        obs_dtype: Any = np.float32,
        action_dtype: Any = np.float32,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        self.obs = np.zeros((capacity, *obs_shape), dtype=obs_dtype)
        self.next_obs = np.zeros((capacity, *obs_shape), dtype=obs_dtype)
        self.action = np.zeros((capacity, *action_shape), dtype=action_dtype)
        self.reward = np.zeros(capacity, dtype=np.float32)
        self.terminated = np.zeros(capacity, dtype=bool)
        self.truncated = np.zeros(capacity, dtype=bool)
        self.position = 0  # the row the next transition goes to
        self.size = 0

    @staticmethod
    def estimate_nbytes(
        capacity: int, obs_shape: tuple[int, ...], action_shape: tuple[int, ...], obs_itemsize: int = 4,
        action_itemsize: int = 4,
    ) -> int:
        """Bytes a buffer of these sizes allocates (to refuse one that cannot fit before allocating it)."""
        per_row = 2 * int(np.prod(obs_shape)) * obs_itemsize + int(np.prod(action_shape)) * action_itemsize + 4 + 2
        return int(capacity) * per_row

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffer's arrays."""
        return sum(getattr(self, name).nbytes for name in _FIELDS)

    def __len__(self) -> int:
        return self.size

    def add(self, transitions: Transitions) -> None:
        """Append transitions in order, overwriting the oldest when full."""
        count = len(transitions)
        if count == 0:
            return
        if count > self.capacity:  # only the newest capacity rows survive anyway
            keep = slice(count - self.capacity, count)
            transitions = Transitions(**{name: getattr(transitions, name)[keep] for name in _FIELDS})
            count = self.capacity
        rows = (self.position + np.arange(count)) % self.capacity
        for name in _FIELDS:
            getattr(self, name)[rows] = getattr(transitions, name)
        self.position = int((self.position + count) % self.capacity)
        self.size = min(self.size + count, self.capacity)

    def take(self, rows: np.ndarray) -> Transitions:
        """The transitions at ``rows`` (indices into the filled part, ``0 <= row < len(self)``), as copies."""
        return Transitions(**{name: getattr(self, name)[rows] for name in _FIELDS})

    def sample(self, batch_size: int, rng: np.random.Generator) -> Transitions:
        """``batch_size`` transitions drawn uniformly with replacement with ``rng`` (copies)."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        return self.take(rng.integers(0, self.size, size=batch_size))

    def recent(self, count: int) -> Transitions:
        """The newest ``min(count, len(self))`` transitions, oldest first (copies)."""
        count = min(int(count), self.size)
        return self.take((self.position - count + np.arange(count)) % self.capacity)

    def state_dict(self) -> dict[str, Any]:
        """The filled rows in insertion order (numpy arrays) and the capacity; ``load_state_dict`` restores it."""
        ordered = self.recent(self.size)
        return {"capacity": self.capacity, **{name: getattr(ordered, name) for name in _FIELDS}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict``: shapes must match this buffer's; a smaller capacity keeps the newest rows."""
        for name in ("obs", "action"):
            have, want = np.shape(state[name])[1:], getattr(self, name).shape[1:]
            if tuple(have) != tuple(want):
                raise ValueError(f"saved replay {name} rows have shape {tuple(have)}, this buffer's {tuple(want)}")
        self.position, self.size = 0, 0
        self.add(Transitions(**{name: np.asarray(state[name]) for name in _FIELDS}))
