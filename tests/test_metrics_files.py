"""The metrics files' readers and writer on hand-made files: what a kill leaves, what a resume accepts, what
--repair keeps (fast: no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zoo.errors import RunDirectoryError
from zoo.run.metrics_files import MetricsWriter, csv_text, read_rows, repair_rows, rows_for_resume


def _write(path: Path, rows: list[dict], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + tail)
    return path


def _rows(count: int, start: int = 1) -> list[dict]:
    return [{"iteration": k, "env_steps": 8 * k} for k in range(start, start + count)]


@pytest.mark.parametrize("tail", ['{"iteration": 3, "env_st', '{"iteration": 3, "env_steps": 24}'])
def test_a_last_line_without_its_newline_is_a_row_cut_by_a_kill(tmp_path, tail):
    path = _write(tmp_path / "metrics.jsonl", _rows(2), tail)
    assert read_rows(path) == _rows(2)
    assert rows_for_resume(path, 2) == _rows(2)
    with pytest.raises(RunDirectoryError, match="holds 2 rows but the checkpoint covers 3 iterations"):
        rows_for_resume(path, 3)


def test_blank_lines_are_skipped_and_garbage_is_named_by_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 1}\n\n{"iteration": 2}\nnot json\n')
    with pytest.raises(RunDirectoryError, match="line 4 is not a metrics row"):
        read_rows(path)
    path.write_text('{"iteration": 1}\n\n{"iteration": 2}\n[1, 2]\n')
    with pytest.raises(RunDirectoryError, match="line 4 is not a metrics row"):
        read_rows(path)


@pytest.mark.parametrize("count", [1, 4, 5])
def test_resume_takes_exactly_the_rows_the_checkpoint_covers(tmp_path, count):
    # Rows past the checkpoint (written before a kill, the checkpoint not yet saved) are not the resume's.
    path = _write(tmp_path / "metrics.jsonl", _rows(5))
    assert rows_for_resume(path, count) == _rows(count)
    assert rows_for_resume(path, 0) == []


def test_resume_refuses_one_row_short(tmp_path):
    path = _write(tmp_path / "metrics.jsonl", _rows(4))
    with pytest.raises(RunDirectoryError) as short:
        rows_for_resume(path, 5)
    assert str(short.value).startswith(f"'{path}' holds 4 rows but the checkpoint covers 5 iterations")


@pytest.mark.parametrize(("rows", "line", "found", "expected"), [
    ([*_rows(2), {"iteration": 4}], 3, 4, 3),  # a deleted row
    ([_rows(1)[0], _rows(1)[0], *_rows(2, 2)], 2, 1, 2),  # a duplicated row
    ([*_rows(1, 2), *_rows(1)], 1, 2, 1),  # reordered
    ([{"env_steps": 8}], 1, None, 1),  # no iteration
])
def test_resume_refuses_rows_that_are_not_iterations_one_to_n(tmp_path, rows, line, found, expected):
    path = _write(tmp_path / "metrics.jsonl", rows)
    with pytest.raises(RunDirectoryError) as damaged:
        rows_for_resume(path, 3)
    assert (f"damaged at line {line}: it holds iteration {found!r} where iteration {expected} belongs"
            in str(damaged.value))


def test_repair_keeps_the_first_readable_row_of_each_covered_iteration_only(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"iteration": 2, "v": "first"}), "garbage", json.dumps({"iteration": 1}),
             json.dumps({"iteration": 2, "v": "second"}), json.dumps({"iteration": 5}), json.dumps({"iteration": 0}),
             json.dumps({"iteration": True}), json.dumps({"iteration": "3"}), json.dumps({"iteration": 4})]
    path.write_text("\n".join(lines) + "\n" + '{"iteration": 3')  # the last one cut by a kill
    kept, report = repair_rows(path, 4)
    assert kept == [{"iteration": 1}, {"iteration": 2, "v": "first"}, {"iteration": 4}]
    assert report == ("metrics.jsonl: kept 3 rows of iterations 1-4, dropped 3 unreadable line(s); 1 iteration(s) "
                      "have no row")


def test_the_csv_widens_once_and_drops_a_row_cut_by_a_kill(tmp_path):
    written: dict[str, str] = {}

    def write_text(path: Path, text: str) -> None:
        written[path.name] = text
        path.write_text(text)

    writer = MetricsWriter(lambda: tmp_path, write_text)
    writer.append({"iteration": 1, "a": 1.5})
    writer.close()
    with open(tmp_path / "metrics.csv", "a") as stream:
        stream.write("2,2.")  # a kill in the middle of the next row
    writer.append({"iteration": 2, "a": 2.5, "b": None})
    writer.append({"iteration": 3, "b": 7})
    writer.close()
    assert (tmp_path / "metrics.csv").read_text().splitlines() == ["iteration,a,b", "1,1.5,", "2,2.5,", "3,,7"]
    assert "metrics.csv" in written  # widened through the atomic writer, not in place
    assert read_rows(tmp_path / "metrics.jsonl") == [{"iteration": 1, "a": 1.5}, {"iteration": 2, "a": 2.5, "b": None},
                                                     {"iteration": 3, "b": 7}]


def test_csv_text_orders_columns_by_first_appearance():
    assert csv_text([{"b": 1}, {"a": 2, "b": None}]).splitlines() == ["b,a", "1,", ",2"]
    assert csv_text([]) == ""
