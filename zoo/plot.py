"""``zoo plot RUN_OR_GLOB... [--x env_steps|wall_time] [--y KEY] [--out FILE.png]``: learning curves of runs.

Runs whose configs differ only in ``seed`` (and ``exp_name``/``runs_dir``) are one group: drawn as the mean over
seeds with a band of one standard deviation, on a common x grid (each run's curve interpolated, within the range
every run of the group covers). A folder holding run directories (``runs/<exp>/`` from ``zoo run --seeds``) stands
for all of them. Without ``--out`` (or without the ``plot`` extra) a table summarises each group in the terminal.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any

import numpy as np

from .config import load_config_file, to_plain
from .errors import ZooError
from .run.metrics_files import read_rows

GROUP_IGNORES = ("seed", "exp_name", "runs_dir")


def _is_run(path: Path) -> bool:
    return (path / "config.yaml").is_file() and (path / "metrics.jsonl").is_file()


def find_runs(patterns: list[str]) -> list[Path]:
    """Run directories named by ``patterns`` (paths or globs; a folder of run directories gives all of them)."""
    found: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) or []
        if not matches:
            raise ZooError(f"'{pattern}' matches no run directory: give a run directory (runs/NAME) or a glob")
        for match in map(Path, matches):
            if _is_run(match):
                found.append(match)
            elif match.is_dir() and any(_is_run(child) for child in match.iterdir()):
                found += sorted(child for child in match.iterdir() if _is_run(child))
            elif len(matches) == 1:
                raise ZooError(f"'{match}' is not a run directory (no config.yaml and metrics.jsonl) and holds none")
    if not found:
        raise ZooError(f"no run directories in {patterns}: give run directories (runs/NAME) or a glob")
    return list(dict.fromkeys(found))


def _group_key(run: Path) -> str:
    cfg = to_plain(load_config_file(run / "config.yaml"))
    for key in GROUP_IGNORES:
        cfg.pop(key, None)
    return json.dumps(cfg, sort_keys=True, default=str)


def load_curves(runs: list[Path], x: str, y: str | None) -> tuple[str, list[dict[str, Any]]]:
    """The y key used and one group per config: ``label``, ``runs``, ``curves`` (list of ``(xs, ys)``)."""
    rows = {run: read_rows(run / "metrics.jsonl") for run in runs}  # a damaged file: one line naming its line
    if y is None:
        y = "eval_return_mean" if any(r.get("eval_return_mean") is not None for rs in rows.values() for r in rs) \
            else "episode_return_mean"
    groups: dict[str, dict[str, Any]] = {}
    for run in runs:
        points = [(r[x], r[y]) for r in rows[run] if r.get(x) is not None and r.get(y) is not None]
        if not points:
            keys = sorted({key for r in rows[run] for key in r})
            raise ZooError(f"run '{run}' has no rows with both '{x}' and '{y}': choose --y from {', '.join(keys)}")
        group = groups.setdefault(_group_key(run), {"label": run.parent.name if run.name.startswith("seed_")
                                                    else run.name, "runs": [], "curves": []})
        if not group["runs"]:  # a new group: keep labels apart when two configs share a name
            taken = [g["label"] for g in groups.values() if g is not group]
            if group["label"] in taken:
                group["label"] = f"{group['label']} #{taken.count(group['label']) + 1}"
        group["runs"].append(run)
        group["curves"].append((np.array([p[0] for p in points], float), np.array([p[1] for p in points], float)))
    return y, list(groups.values())


def mean_band(curves: list[tuple[np.ndarray, np.ndarray]], points: int = 200) -> tuple[np.ndarray, ...]:
    """``(grid, mean, std)`` of the curves interpolated on a grid spanning the x range all of them cover."""
    low = max(float(xs[0]) for xs, _ in curves)
    high = min(float(xs[-1]) for xs, _ in curves)
    grid = np.linspace(low, high, points) if high > low else np.array([high])
    values = np.stack([np.interp(grid, xs, ys) for xs, ys in curves])
    return grid, values.mean(0), values.std(0)


def table(y: str, groups: list[dict[str, Any]]) -> str:
    """One line per group: runs, the x reached, the last and best value of ``y`` (mean +- std over runs)."""
    lines = [f"{'group':<28} {'runs':>4} {'last x':>12} {'last ' + y:>28} {'best':>10}"]
    for group in groups:
        last = np.array([ys[-1] for _, ys in group["curves"]])
        best = np.array([ys.max() for _, ys in group["curves"]])
        reach = min(float(xs[-1]) for xs, _ in group["curves"])
        lines.append(f"{group['label'][:28]:<28} {len(group['runs']):>4} {reach:>12,.0f} "
                     f"{f'{last.mean():.2f} +- {last.std():.2f}':>28} {best.mean():>10.2f}")
    return "\n".join(lines)


def render(path: Path, x: str, y: str, groups: list[dict[str, Any]]) -> None:
    """Draw the groups' mean curves and bands into ``path`` (PNG, SVG or PDF by its suffix)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ZooError("zoo plot --out needs matplotlib: pip install 'zoo-rl[plot]' (without --out, zoo plot "
                       "prints a table)") from None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for group in groups:
        grid, mean, std = mean_band(group["curves"])
        runs = len(group["runs"])
        axes.plot(grid, mean, label=f"{group['label']} ({runs} run{'s' if runs > 1 else ''})")
        if runs > 1:
            axes.fill_between(grid, mean - std, mean + std, alpha=0.25)
    axes.set_xlabel(x)
    axes.set_ylabel(y)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
    figure.savefig(tmp)
    plt.close(figure)
    tmp.replace(path)


def plot(patterns: list[str], x: str = "env_steps", y: str | None = None, out: str | None = None) -> str:
    """Find the runs, print nothing, return the table; with ``out`` also write the figure there."""
    if x not in ("env_steps", "wall_time"):
        raise ZooError(f"--x must be env_steps or wall_time, got {x!r}")
    runs = find_runs(patterns)
    y, groups = load_curves(runs, x, y)
    if out is not None:
        path = Path(out)
        if not path.parent.is_dir():
            raise ZooError(f"cannot write '{out}': the folder '{path.parent}' does not exist")
        render(path, x, y, groups)
    return table(y, groups)
