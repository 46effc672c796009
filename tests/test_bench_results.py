"""Kept metrics rows are thinned (``zoo.bench.results.thinned``) so that a campaign's results stay a few MB: every
evaluation row, the first and the last row survive byte for byte, training rows keep covering the whole run, and
thinning again changes nothing (committed files stay quiet when a run is kept twice)."""

from __future__ import annotations

import json

from zoo.bench.results import KEPT_TRAINING_ROWS, thinned

STEPS_PER_ROW = 64  # a 1M-step A2C run on 8 envs x 8 steps logs 15,625 rows


def _rows(count: int, eval_every: int, extra: dict | None = None) -> list[bytes]:
    rows = []
    for index in range(count):
        row = {"iteration": index + 1, "env_steps": (index + 1) * STEPS_PER_ROW, "policy_loss": 0.5 / (index + 1),
               "eval_return_mean": float(index) if (index + 1) % eval_every == 0 else None, **(extra or {})}
        rows.append((json.dumps(row) + "\n").encode())
    return rows


def test_every_evaluation_the_first_and_the_last_row_are_kept_byte_for_byte():
    lines = _rows(15_625, eval_every=503)  # the last row is no evaluation
    kept = thinned(b"".join(lines)).splitlines(keepends=True)
    evaluations = [line for line in lines if json.loads(line)["eval_return_mean"] is not None]
    assert [line for line in kept if json.loads(line)["eval_return_mean"] is not None] == evaluations
    assert kept[0] == lines[0] and kept[-1] == lines[-1]
    assert set(kept) <= set(lines) and kept == sorted(kept, key=lines.index)  # whole lines, in order
    assert len(kept) <= KEPT_TRAINING_ROWS + len(evaluations) + 2


def test_the_training_rows_kept_cover_the_whole_run_evenly():
    lines = _rows(15_625, eval_every=10**9)
    steps = [json.loads(line)["env_steps"] for line in thinned(b"".join(lines)).splitlines()]
    cell = 15_625 * STEPS_PER_ROW / KEPT_TRAINING_ROWS
    assert len(steps) >= KEPT_TRAINING_ROWS  # about one per cell, not a handful
    assert max(b - a for a, b in zip(steps, steps[1:])) <= cell + STEPS_PER_ROW  # no stretch of the run left out


def test_thinning_again_changes_nothing_and_short_runs_are_kept_whole():
    data = b"".join(_rows(15_625, eval_every=97))
    once = thinned(data)
    assert len(once) < len(data) / 10 and thinned(once) == once
    short = b"".join(_rows(KEPT_TRAINING_ROWS, eval_every=7))
    assert thinned(short) == short


def test_rows_without_env_steps_are_kept():
    lines = _rows(3_000, eval_every=10**9)
    lines[1_234] = b'{"note": "no env_steps"}\n'
    assert lines[1_234] in thinned(b"".join(lines)).splitlines(keepends=True)


def test_the_last_row_is_kept_where_it_repeats_the_env_steps_of_the_row_before():
    lines = _rows(3_000, eval_every=10**9)
    last = json.loads(lines[-2])
    lines[-1] = (json.dumps({**last, "iteration": last["iteration"] + 1, "wall_time": 99.0}) + "\n").encode()
    assert thinned(b"".join(lines)).splitlines(keepends=True)[-1] == lines[-1]  # the report's minutes come from it
