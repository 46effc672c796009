"""The committed benchmark table is data, not prose: docs/benchmarks.md is exactly what
``zoo bench classic hl_gauss ace mujoco memory masks --report docs/benchmarks.md --results benchmarks/results`` writes
from the committed results (benchmarks/results/<entry>/seed_<k>/), on a clone with no run directory at all.

Fails when someone edits the table by hand, commits results without regenerating it, changes a suite's config
under its committed runs (the report refuses a run of another config), or changes how the report reads them.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from zoo.bench.report import report
from zoo.bench.results import thinned
from zoo.bench.suites import SUITES
from zoo.run.view import RunView

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
TABLE = REPO / "docs" / "benchmarks.md"
# The suites in the order of the command that wrote the committed table (its header names it).
REPORTED = ["classic", "hl_gauss", "ace", "mujoco", "memory", "masks"]
COMMAND = f"zoo bench {' '.join(REPORTED)} --report docs/benchmarks.md --results benchmarks/results"


def test_the_committed_table_says_how_it_was_made():
    assert f"`{COMMAND}`" in TABLE.read_text().splitlines()[2]


@pytest.mark.slow  # trains real runs: tens of seconds (the quick loop stays under 3 minutes)
def test_the_committed_table_is_its_regeneration_from_the_committed_results(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")  # the figures' links are part of the text (dev installs it)
    # A clone's layout with the same relative paths as the command, the results read in place.
    (tmp_path / "docs").mkdir()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "results").symlink_to(RESULTS, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    written = report(REPORTED, out="docs/benchmarks.md", results="benchmarks/results", configs=REPO / "configs")
    assert Path(written).read_text() == TABLE.read_text(), (
        "docs/benchmarks.md is not what the committed results give: run `" + COMMAND + "` from the repository root")


def test_every_committed_result_is_whole_and_of_a_suite_entry():
    entries = {entry.name for suite in SUITES.values() for entry in suite}
    kept = sorted(RESULTS.glob("*/seed_*"))
    assert kept, "no committed results under benchmarks/results"
    for folder in kept:
        assert folder.parent.name in entries, f"{folder} is not an entry of a suite"
        names = sorted(p.name for p in folder.iterdir())
        assert names == ["config.yaml", "environment.json", "final_eval.json", "metrics.jsonl.gz"], folder
        view = RunView(folder)  # reads the kept files as the report does (bounded, damage is one line)
        assert len(view.final_returns()) == 10, folder  # the bench's final evaluation: 10 deterministic episodes
        assert view.rows[-1]["env_steps"] >= view.config.pipeline.max_env_steps, folder  # the whole budget trained
        data = gzip.decompress((folder / "metrics.jsonl.gz").read_bytes())
        assert thinned(data) == data, f"{folder}: metrics kept whole; `zoo bench --results` thins them"


def test_the_committed_results_stay_a_few_mb():
    size = sum(path.stat().st_size for path in RESULTS.glob("*/seed_*/*"))
    assert size < 8 * 2**20, f"benchmarks/results holds {size / 2**20:.1f} MB"  # 4 suites x 5 seeds, thinned
