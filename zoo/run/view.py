"""A read-only view of a run directory (``RunView``): its config, metrics rows, final evaluation and whether it
finished, as ``zoo plot``, ``zoo bench``, ``zoo tune`` and ``zoo run --seeds`` read them; and finding run directories
by path or glob (``find_runs``).

A run directory may be someone else's: everything here reads data (safe YAML, JSON, bounded files), runs no code
from it and never writes. A damaged file is one ZooError line naming it; a FIFO, device or socket in a file's place
is refused before it is opened (``zoo.run.state_files.open_regular``), so no read ever blocks; metrics rows are
bounded and typed (``zoo.run.metrics_files.read_rows``).
"""

from __future__ import annotations

import functools
import glob
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from easydict import EasyDict

from ..config import load_config_file, to_plain
from ..errors import RunDirectoryError, ZooError
from .metrics_files import METRICS_JSONL, METRICS_JSONL_GZ, read_rows
from .run_dir import CHECKPOINT_FILE, CONFIG_FILE, ENVIRONMENT_FILE, MODEL_FILE
from .state_files import RefusedFile, check_regular, read_regular

# What ``zoo eval --json`` writes and ``zoo bench`` keeps as a run's final evaluation.
FINAL_EVAL_FILE = "final_eval.json"
FINAL_EVAL_EPISODES = 10
# No environment zoo benchmarks comes near: MuJoCo's returns are below 1e5. Below this bound the sums and squares that
# the statistics take over seeds and bootstrap resamples stay finite and exact enough; above it a value is damage.
RETURN_LIMIT = 1e12
_FINAL_EVAL_MAX_BYTES = 1 << 20  # ten returns take a few hundred bytes
_RECORD_MAX_BYTES = 1 << 20  # environment.json: a few KB per session
log = logging.getLogger("zoo")
# Keys by which the runs of one config (its seeds) differ: left out of ``group_key``.
GROUP_IGNORES = ("seed", "exp_name", "runs_dir")
# The folder of one seed in a folder of seeds (zoo run --seeds, bench, tune): seed_<k>, or seed_<k>_<n> as zoo run
# --seeds named a seed trained again before it refused to (``zoo.run.seeds_parent``).
SEED_FOLDER = re.compile(r"seed_(-?\d+)(?:_\d+)?")


def is_run(path: Path) -> bool:
    """Whether ``path`` looks like a run directory that has trained (config.yaml and metrics.jsonl), or the results
    kept of one (``zoo.bench.results``: config.yaml and metrics.jsonl.gz). A metrics name that is no regular file
    still counts: reading it is refused in one line (``RunView.rows``), never silently skipped."""
    return (path / CONFIG_FILE).is_file() and any(os.path.lexists(path / name) for name in (METRICS_JSONL,
                                                                                            METRICS_JSONL_GZ))


def find_runs(patterns: list[str]) -> list[Path]:
    """Run directories named by ``patterns`` (paths or globs; a folder of run directories gives all of them, a run
    directory also the ``seed_<k>`` runs inside it, said in a warning). A pattern that names an existing path is that
    path, never a glob: ``res[1]`` is the folder of that name even where a folder ``res1`` exists."""
    found: list[Path] = []
    for pattern in patterns:
        matches = [pattern] if os.path.lexists(pattern) else sorted(glob.glob(pattern))
        if not matches:
            raise ZooError(f"'{pattern}' matches no run directory: give a run directory (runs/NAME) or a glob")
        for match in map(Path, matches):
            if is_run(match):
                found += [match, *_seeds_inside(match)]
                continue
            children = sorted(child for child in match.iterdir() if child.is_dir()) if match.is_dir() else []
            runs = [child for child in children if is_run(child)]  # each child listed and checked once
            if runs:
                found += runs
                kept = set(runs)
                _say_untrained([child for child in children if child not in kept])
            elif len(matches) == 1:
                raise ZooError(_holds_no_run(match, children))
            else:
                _say_untrained([match])
    if not found:
        raise ZooError(f"no run directories in {patterns}: give run directories (runs/NAME) or a glob")
    return list(dict.fromkeys(found))


def _seeds_inside(run: Path) -> list[Path]:
    # Seed runs inside a run directory: what zoo run --seeds wrote into a finished run of the same name before it
    # refused to. Plotted too, and said, so that they are not hidden behind the run that holds them.
    seeds = sorted(child for child in run.iterdir() if SEED_FOLDER.fullmatch(child.name) and child.is_dir()
                   and is_run(child))
    if seeds:
        log.warning(f"'{run}' is a run and also holds the seed runs {', '.join(seed.name for seed in seeds)} "
                    f"(zoo run --seeds wrote them inside it): shown with it; move them into a folder of their own")
    return seeds


def _holds_no_run(folder: Path, children: list[Path]) -> str:
    # Why a folder named alone gives nothing to read: a folder of seeds none of which has a metrics row yet, an
    # empty folder, or anything else.
    seeds = [child.name for child in children if SEED_FOLDER.fullmatch(child.name)]
    if seeds:
        return (f"'{folder}' holds {', '.join(seeds[:4])}{' ...' if len(seeds) > 4 else ''} but no seed has trained "
                f"yet (no metrics rows): plot it once a seed has written its first row")
    if folder.is_dir() and not any(folder.iterdir()):
        return f"'{folder}' is an empty folder: no run has trained into it yet"
    return f"'{folder}' is not a run directory (no config.yaml and metrics.jsonl) and holds none"


def _say_untrained(folders: list[Path]) -> None:
    # A run directory stopped before its first metrics row is left out, and said so: a seed missing from an
    # aggregate changes its statistics. Other folders (no config.yaml) are not runs and pass unmentioned.
    for folder in folders:
        if (folder / CONFIG_FILE).is_file():
            log.warning(f"left out '{folder}': a run directory with no metrics yet (stopped before its first row)")


def read_final_returns(run: Path, episodes: int | None = FINAL_EVAL_EPISODES) -> list[float]:
    """The episode returns of ``run``'s ``final_eval.json`` (the runner's final evaluation, ``zoo eval --json``): a
    JSON object whose ``returns`` is a list of ``episodes`` finite numbers (not bools, not strings) each within
    +-RETURN_LIMIT, as many as its own ``episodes`` field says; ``episodes=None`` (``zoo plot --aggregate`` of any
    runs, evaluated with any ``zoo eval --episodes``) takes any count of one or more. A ZooError naming the file and
    what is wrong otherwise."""
    path = run / FINAL_EVAL_FILE
    problem = _final_eval_problem(path, episodes)
    if isinstance(problem, str):
        what = f"of {episodes} episodes" if episodes is not None else "(zoo eval --json)"
        raise ZooError(f"'{path}' is not a final evaluation {what}: {problem}; delete it and evaluate the run again "
                       f"(zoo bench, or zoo eval RUN --json FILE)")
    return problem


def _final_eval_problem(path: Path, episodes: int | None) -> str | list[float]:
    # What is wrong with the file (a string), or its returns.
    try:
        data = json.loads(read_regular(path, _FINAL_EVAL_MAX_BYTES).decode("utf-8"))
    except RefusedFile as exc:  # larger than the bound, or not a regular file
        return f"it {exc.reason}"
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return f"it cannot be read as JSON ({type(exc).__name__})"
    returns = data.get("returns") if isinstance(data, dict) else None
    if not isinstance(returns, list):
        return "it has no list of 'returns'"
    for index, value in enumerate(returns):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"returns[{index}] is {json.dumps(value)[:40]}, not a number"
        if not abs(value) < RETURN_LIMIT:  # also NaN; JSON's 1e999 reads as inf
            shown = f"an integer of {len(str(abs(value)))} digits" if isinstance(value, int) else f"{value:.6g}"
            return f"returns[{index}] is {shown}, not a finite return within +-{RETURN_LIMIT:.0e}"
    if not returns or (episodes is not None and len(returns) != episodes):
        return f"it holds {len(returns)} returns"
    if data.get("episodes", len(returns)) != len(returns):
        return f"its 'episodes' says {json.dumps(data.get('episodes'))[:40]}"
    return [float(value) for value in returns]


class RunView:
    """What a run directory holds, read lazily and once: ``config``, ``rows``, ``last(key)``, ``final_returns``,
    ``finished``. Never writes; a view of a run still training sees the rows written so far."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunView({str(self.path)!r})"

    @functools.cached_property
    def config(self) -> EasyDict:
        """config.yaml, read as data (a ZooError line when it is missing, damaged or not a regular file)."""
        check_regular(self.path / CONFIG_FILE)  # a FIFO would read as "not found"
        return load_config_file(self.path / CONFIG_FILE)

    @functools.cached_property
    def started(self) -> str | None:
        """The date (YYYY-MM-DD) the run's first session started, from environment.json (None if unreadable)."""
        try:
            data = read_regular(self.path / ENVIRONMENT_FILE, _RECORD_MAX_BYTES)
            started = json.loads(data.decode("utf-8"))["sessions"][0]["started"]
            return started[:10] if isinstance(started, str) and len(started) >= 10 else None
        except (ZooError, OSError, ValueError, KeyError, IndexError, TypeError, RecursionError):
            return None

    @functools.cached_property
    def rows(self) -> list[dict[str, Any]]:
        """The metrics rows (``read_rows``: bounded and typed, a damaged line is one ZooError naming it); [] before
        the first. A run directory's metrics.jsonl, or a results folder's metrics.jsonl.gz; a folder holding both
        is neither, and refused in one line (which of them would be the truth?)."""
        plain, packed = self.path / METRICS_JSONL, self.path / METRICS_JSONL_GZ
        if os.path.lexists(plain) and os.path.lexists(packed):
            raise RunDirectoryError(f"'{self.path}' holds both {METRICS_JSONL} and {METRICS_JSONL_GZ}: a run directory "
                                    f"holds the first, kept results the second; move the other away")
        return read_rows(packed if os.path.lexists(packed) else plain)

    def order_problem(self) -> str | None:
        """None when the metrics rows are one per iteration, in order (iterations rising, env steps never falling:
        what zoo writes, exactly once per iteration even across kills and resumes; kept results thin them, in
        order), else one line naming the file and the first fault (a row written twice, rows out of order)."""
        name = METRICS_JSONL_GZ if os.path.lexists(self.path / METRICS_JSONL_GZ) else METRICS_JSONL
        previous: dict[str, Any] | None = None
        for line, row in enumerate(self.rows, 1):
            if previous is not None:
                for key in ("iteration", "env_steps"):
                    before, now = previous.get(key), row.get(key)
                    if before is None or now is None or now > before or (key == "env_steps" and now == before):
                        continue
                    fault = "written twice" if now == before else "out of order"
                    return (f"'{self.path / name}' holds its rows {fault} (line {line}: {key} {now} after {before}): "
                            f"not the rows zoo writes")
            previous = row
        return None

    def last(self, key: str) -> Any:
        """The last value of ``key`` in the metrics rows that has one (None if none has)."""
        return next((row[key] for row in reversed(self.rows) if row.get(key) is not None), None)

    def group_key(self) -> str:
        """The config without what separates the seeds of one config (``GROUP_IGNORES``), as a comparable string."""
        cfg = to_plain(self.config)
        for key in GROUP_IGNORES:
            cfg.pop(key, None)
        return json.dumps(cfg, sort_keys=True, default=str)

    @property
    def has_config(self) -> bool:
        """Whether the run got as far as writing its config.yaml."""
        return (self.path / CONFIG_FILE).is_file()

    @property
    def has_checkpoint(self) -> bool:
        """Whether the run saved a checkpoint (a ``zoo run --resume`` can continue it)."""
        return (self.path / CHECKPOINT_FILE).is_file()

    @property
    def finished(self) -> bool:
        """Whether training finished (the final model is written)."""
        return (self.path / MODEL_FILE).is_file()

    @property
    def evaluated(self) -> bool:
        """Whether the run has a final evaluation file (checked only by ``final_returns``)."""
        return (self.path / FINAL_EVAL_FILE).is_file()

    def final_returns(self, episodes: int | None = FINAL_EVAL_EPISODES) -> list[float]:
        """The final evaluation's returns (``read_final_returns``)."""
        return read_final_returns(self.path, episodes)
