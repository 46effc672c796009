"""The replay's device mirror (``zoo.accel.replay_storage``): after any sequence of additions (one row, many,
more than a staging buffer holds, wrapping around the ring, more than the capacity) and in-place changes, the
mirror equals the buffer. Exercised on the CPU with ``mirror=True``: the same copying a GPU gets, without one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from zoo.accel import replay_storage
from zoo.accel.replay_storage import COLUMNS, ReplayStorage
from zoo.data import ReplayBuffer, Transitions


def _transitions(rng: np.random.Generator, count: int) -> Transitions:
    return Transitions(obs=rng.normal(size=(count, 3)).astype(np.float32),
                       action=rng.normal(size=(count, 2)).astype(np.float32),
                       reward=rng.normal(size=count).astype(np.float32),
                       next_obs=rng.normal(size=(count, 3)).astype(np.float32),
                       terminated=rng.random(count) < 0.3, truncated=rng.random(count) < 0.3)


def _check(storage: ReplayStorage, replay: ReplayBuffer) -> None:
    columns = storage.of(replay)
    assert set(columns) == set(COLUMNS)
    for name in COLUMNS:
        np.testing.assert_array_equal(columns[name][: len(replay)].numpy(), getattr(replay, name)[: len(replay)],
                                      err_msg=name)


@pytest.mark.parametrize("staging_rows", [1, 4, 1024])
def test_the_mirror_follows_every_kind_of_addition(monkeypatch: pytest.MonkeyPatch, staging_rows: int) -> None:
    monkeypatch.setattr(replay_storage, "STAGING_ROWS", staging_rows)
    rng = np.random.default_rng(0)
    replay = ReplayBuffer(10, (3,), (2,))
    storage = ReplayStorage(torch.device("cpu"), mirror=True)
    _check(storage, replay)  # empty
    for count in [1, 1, 3, 0, 4, 2, 7, 9, 10, 1, 13, 5, 1, 1, 6]:  # wraps, a whole ring, more than the capacity
        replay.add(_transitions(rng, count))
        _check(storage, replay)
    # a change in place (a restored buffer, rewritten flags) is copied whole
    replay.terminated[:] = ~replay.terminated
    replay.changed_in_place()
    _check(storage, replay)
    saved = ReplayBuffer(10, (3,), (2,))
    saved.add(_transitions(rng, 6))
    replay.load_state_dict(saved.state_dict())  # a restored buffer
    _check(storage, replay)
    assert len(replay) == 6


def test_the_mirror_is_not_refreshed_from_stale_rows_only() -> None:
    """Rows added between two reads are copied at the second read, and only then (a read with nothing new leaves
    the mirror as it was: a dropped sync or a sync of the wrong rows shows here)."""
    rng = np.random.default_rng(1)
    replay = ReplayBuffer(8, (3,), (2,))
    storage = ReplayStorage(torch.device("cpu"), mirror=True)
    replay.add(_transitions(rng, 5))
    columns = storage.of(replay)
    before = columns["obs"].clone()
    replay.obs[:5] += 1.0  # changed behind the buffer's back, without changed_in_place: not a new row
    assert torch.equal(storage.of(replay)["obs"], before)
    replay.add(_transitions(rng, 2))
    after = storage.of(replay)["obs"]
    torch.testing.assert_close(after[5:7], torch.from_numpy(replay.obs[5:7]))
    assert torch.equal(after[:5], before[:5])


def test_a_new_replay_gets_a_new_mirror() -> None:
    rng = np.random.default_rng(2)
    storage = ReplayStorage(torch.device("cpu"), mirror=True)
    first, second = ReplayBuffer(6, (3,), (2,)), ReplayBuffer(6, (3,), (2,))
    first.add(_transitions(rng, 4))
    second.add(_transitions(rng, 3))
    _check(storage, first)
    _check(storage, second)
    assert storage.of(second)["obs"].shape[0] == 6


def test_on_the_cpu_without_a_mirror_the_columns_are_the_buffer_itself() -> None:
    replay = ReplayBuffer(4, (3,), (2,))
    columns = ReplayStorage(torch.device("cpu")).of(replay)
    replay.add(_transitions(np.random.default_rng(3), 2))
    assert np.shares_memory(columns["obs"].numpy(), replay.obs)
