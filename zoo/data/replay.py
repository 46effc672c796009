"""A preallocated numpy replay buffer: uniform sampling, terminated and truncated kept apart, exact state.

Memory is allocated once at construction (``nbytes`` says how much), so a buffer that does not fit fails at the
start of a run, not hours into it. ``next_obs`` is stored explicitly rather than derived from the following
row: with vector envs and episode ends, the row after a transition is not in general its successor, and a
truncated transition needs its own final observation to bootstrap from. Each row also keeps the index of the
sub-env it came from (-1 when unknown), which is what lets ``windows`` read n-step sequences back. Where the env
gives action masks (``mask_width`` > 0) each row also keeps the mask of its ``next_obs`` (``next_action_mask``:
the actions a Q-learning target may take its max over); without masks there is no such column and no cost.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .batches import Transitions

_FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated", "env")
MASK_FIELD = "next_action_mask"
"""The column of the next observations' action masks, where the buffer has one (``mask_width`` > 0)."""


class ReplayBuffer:
    """A ring buffer of transitions.

    Arguments:
        capacity: the most transitions held; the oldest are overwritten first.
        obs_shape, action_shape: shapes of one observation and one action.
        obs_dtype, action_dtype: storage dtypes (float32 by default; uint8 images stay uint8).
        mask_width: the length of an action mask (``zoo.envs.masks.mask_width``) where the env gives masks: the
            buffer then keeps each transition's ``next_action_mask``; 0 (the default): no mask column.
    Examples:
        >>> buffer = ReplayBuffer(3, (2,), (1,))  # room for 3 transitions of 2-d observations and 1-d actions
        >>> obs, action, flags = np.zeros((4, 2), np.float32), np.zeros((4, 1), np.float32), np.zeros(4, bool)
        >>> buffer.add(Transitions(obs, action, np.arange(4, dtype=np.float32), obs, flags, flags))  # rewards 0 to 3
        >>> len(buffer), buffer.recent(3).reward  # the 4th overwrote the oldest
        (3, array([1., 2., 3.], dtype=float32))
        >>> buffer.sample(256, np.random.default_rng(0)).action.shape  # uniform, with replacement
        (256, 1)
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        obs_dtype: Any = np.float32,
        action_dtype: Any = np.float32,
        mask_width: int = 0,
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
        self.env = np.full(capacity, -1, dtype=np.int32)  # sub-env index of each row; -1: unknown
        # the mask of each row's next_obs (True: valid), where the env gives masks
        self.next_action_mask = np.ones((capacity, mask_width), dtype=bool) if mask_width else None
        self.fields = (*_FIELDS, MASK_FIELD) if mask_width else _FIELDS  # the arrays a row is stored in
        self.num_envs = 0  # one more than the largest sub-env index added: the widest a vector step can be
        self.position = 0  # the row the next transition goes to
        self.size = 0
        # For copies kept elsewhere (a GPU mirror): rows ever added, and a count of changes made in place.
        self.added = 0
        self.generation = 0

    @staticmethod
    def estimate_nbytes(
        capacity: int, obs_shape: tuple[int, ...], action_shape: tuple[int, ...], obs_itemsize: int = 4,
        action_itemsize: int = 4, mask_width: int = 0,
    ) -> int:
        """Bytes a buffer of these sizes allocates (to refuse one that cannot fit before allocating it)."""
        flags_reward_env = 2 + 4 + 4 + mask_width
        per_row = 2 * int(np.prod(obs_shape)) * obs_itemsize + int(np.prod(action_shape)) * action_itemsize
        return int(capacity) * (per_row + flags_reward_env)

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffer's arrays."""
        return sum(getattr(self, name).nbytes for name in self.fields)

    def __len__(self) -> int:
        return self.size

    def add(self, transitions: Transitions) -> None:
        """Append transitions in order, overwriting the oldest when full (``env`` None: sub-envs unknown). A buffer
        with a mask column takes only transitions with ``next_action_mask``, one without only transitions without."""
        count = len(transitions)
        if count == 0:
            return
        if (transitions.next_action_mask is None) != (self.next_action_mask is None):
            have = "has no" if self.next_action_mask is None else "has a"
            raise ValueError(f"this replay buffer {have} next_action_mask column and the transitions disagree: build "
                             f"it with mask_width > 0 exactly when the env gives action masks")
        if transitions.env is None:
            transitions = dataclasses.replace(transitions, env=np.full(count, -1, dtype=np.int32))
        self.num_envs = max(self.num_envs, int(transitions.env.max()) + 1)
        if count > self.capacity:  # only the newest capacity rows survive anyway
            keep = slice(count - self.capacity, count)
            transitions = Transitions(**{name: getattr(transitions, name)[keep] for name in self.fields})
            count = self.capacity
        rows = (self.position + np.arange(count)) % self.capacity
        for name in self.fields:
            getattr(self, name)[rows] = getattr(transitions, name)
        self.position = int((self.position + count) % self.capacity)
        self.size = min(self.size + count, self.capacity)
        self.added += count

    def take(self, rows: np.ndarray) -> Transitions:
        """The transitions at ``rows`` (indices into the filled part, ``0 <= row < len(self)``), as copies."""
        return Transitions(**{name: getattr(self, name)[rows] for name in self.fields})

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
        return {"capacity": self.capacity, **{name: getattr(ordered, name) for name in self.fields}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict``: shapes must match this buffer's; a smaller capacity keeps the newest rows. Rows
        saved without masks load into a buffer with a mask column as all valid (what they were learned as), and a
        saved mask column is dropped by a buffer without one (``env.action_mask`` changed between runs)."""
        for name in ("obs", "action"):
            have, want = np.shape(state[name])[1:], getattr(self, name).shape[1:]
            if tuple(have) != tuple(want):
                raise ValueError(f"saved replay {name} rows have shape {tuple(have)}, this buffer's {tuple(want)}")
        self.position, self.size, self.num_envs = 0, 0, 0
        self.changed_in_place()
        # Buffers saved before sub-env indices were kept load with -1 (unknown): no n-step window crosses them.
        saved = {name: np.asarray(state[name]) for name in _FIELDS if name in state}
        if self.next_action_mask is not None:
            width = self.next_action_mask.shape[1]
            saved[MASK_FIELD] = np.asarray(state.get(MASK_FIELD, np.ones((len(saved["reward"]), width), bool)))
        self.add(Transitions(**saved))

    def changed_in_place(self) -> None:
        """Say that rows changed other than by ``add`` (restored, flags rewritten), so copies refresh them all."""
        self.generation += 1

    # -- n-step sequences -----------------------------------------------------------------------------------
    def windows(self, rows: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows of up to ``steps`` successive transitions of one sub-env's episode starting at each of ``rows``.

        Returns ``(window, valid)``, both ``(steps, B)``: ``window[0] = rows`` and ``window[k]`` the row of the
        transition after ``window[k - 1]`` in the same sub-env; ``valid[k]`` is False once the window has ended:
        after a terminated or truncated transition, past the newest row, or where the sub-env is unknown (-1).
        The successor of a row is the next row of the same sub-env at most ``num_envs`` rows on, since a vector
        step adds at most one row per sub-env. Rows ended invalid repeat the last valid row.
        """
        rows = np.asarray(rows, dtype=np.int64)
        window = np.empty((steps, len(rows)), dtype=np.int64)
        valid = np.zeros((steps, len(rows)), dtype=bool)
        if steps == 0:
            return window, valid
        window[0], valid[0] = rows, True
        oldest = (self.position - self.size) % self.capacity
        age = (rows - oldest) % self.capacity  # 0 for the oldest row held
        env = self.env[rows]
        alive = env >= 0
        offsets = np.arange(1, max(self.num_envs, 1) + 1)
        for k in range(1, steps):
            previous = window[k - 1]
            alive &= ~(self.terminated[previous] | self.truncated[previous])
            candidate_age = age[:, None] + offsets
            candidate = (oldest + candidate_age) % self.capacity
            match = (candidate_age < self.size) & (self.env[candidate] == env[:, None])
            alive &= match.any(1)
            first = match.argmax(1)
            age = np.where(alive, candidate_age[np.arange(len(rows)), first], age)
            window[k] = np.where(alive, candidate[np.arange(len(rows)), first], previous)
            valid[k] = alive
        return window, valid

    def window_batch(self, rows: np.ndarray, steps: int) -> dict[str, np.ndarray]:
        """The n-step minibatch of the windows starting at ``rows`` (``windows``): ``obs`` and ``action`` of each start
        row ``(B, ...)``; ``reward``, ``terminated``, ``truncated`` per step of its window ``(steps, B)`` (0 and False
        after the window's end); ``next_obs`` (and ``next_action_mask`` where the buffer keeps masks) of the window's
        last transition: what its target bootstraps from. A window cut short by the newest row (or an unknown
        sub-env) rather than by an episode end is marked truncated at its last step, so it bootstraps from there."""
        window, valid = self.windows(rows, steps)
        length = valid.sum(0)
        columns = np.arange(len(rows))
        last = window[length - 1, columns]
        terminated = valid & self.terminated[window]
        truncated = valid & self.truncated[window]
        cut = ~(terminated | truncated).any(0) & (length < steps)
        truncated[length[cut] - 1, columns[cut]] = True
        batch = {"obs": self.obs[rows], "action": self.action[rows],
                 "reward": np.where(valid, self.reward[window], np.float32(0.0)), "terminated": terminated,
                 "truncated": truncated, "next_obs": self.next_obs[last]}
        if self.next_action_mask is not None:
            batch[MASK_FIELD] = self.next_action_mask[last]
        return batch

    def end_sequences(self) -> None:
        """Mark the newest row of each sub-env truncated: its episode was cut there (the envs restarted fresh
        episodes, e.g. after an inexact resume), so no n-step window runs on into the next episode. A truncated
        transition still bootstraps from its own next observation, so one-step targets are unchanged."""
        newest = self.recent(2 * max(self.num_envs, 1))
        rows = (self.position - len(newest) + np.arange(len(newest))) % self.capacity
        for env in np.unique(newest.env[newest.env >= 0]):
            last = rows[newest.env == env][-1]
            if not self.terminated[last]:
                self.truncated[last] = True
        self.changed_in_place()
