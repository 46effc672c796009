"""``zoo plot RUN_OR_GLOB... [--x env_steps|wall_time] [--y KEY] [--out FILE.png]``: learning curves of runs.

Runs whose configs differ only in ``seed`` (and ``exp_name``/``runs_dir``) are one group: drawn as the mean over
seeds with a band of one standard deviation, on a common x grid (each run's curve interpolated, within the range
every run of the group covers), and each seed's own curve thin behind it. A folder holding run directories
(``runs/<exp>/`` from ``zoo run --seeds``) stands for all of them. Without ``--out`` (or without the ``plot`` extra) a
table summarises each group in the terminal, each seed on a line of its own under it.

``aggregate_runs`` (``zoo plot --aggregate``, in ``zoo.bench.aggregate``, re-exported here) reports each group's
final evaluation over seeds as rliable does. The figure helpers (``pyplot``, ``save_figure``, ``mean_band``) live in
``zoo.bench.figures`` and the run view (``find_runs``) in ``zoo.run.view``: below the report modules that use them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .bench.aggregate import aggregate_runs, aggregate_table, load_finals, render_aggregate, summarise
from .bench.figures import PLOT_HINT, check_out, mean_band, pyplot, save_figure
from .errors import ZooError
from .run.view import GROUP_IGNORES, RunView, find_runs

__all__ = ["GROUP_IGNORES", "PLOT_HINT", "aggregate_runs", "aggregate_table", "find_runs", "load_curves", "load_finals",
           "mean_band", "plot", "pyplot", "render", "render_aggregate", "run_labels", "save_figure", "summarise",
           "table"]


def load_curves(runs: list[Path], x: str, y: str | None) -> tuple[str, list[dict[str, Any]]]:
    """The y key used and one group per config: ``label``, ``runs``, ``curves`` (list of ``(xs, ys)``)."""
    views = {run: RunView(run) for run in runs}
    rows = {run: view.rows for run, view in views.items()}  # a damaged file: one line naming its line
    if y is None:
        y = "eval_return_mean" if any(r.get("eval_return_mean") is not None for rs in rows.values() for r in rs) \
            else "episode_return_mean"
    groups: dict[str, dict[str, Any]] = {}
    for run in runs:
        points = [(r[x], r[y]) for r in rows[run] if r.get(x) is not None and r.get(y) is not None]
        if not points:
            keys = sorted({key for r in rows[run] for key in r})
            raise ZooError(f"run '{run}' has no rows with both '{x}' and '{y}': choose --y from {', '.join(keys)}")
        group = groups.setdefault(views[run].group_key(), {"label": run.parent.name if run.name.startswith("seed_")
                                                           else run.name, "runs": [], "curves": []})
        if not group["runs"]:  # a new group: keep labels apart when two configs share a name
            taken = [g["label"] for g in groups.values() if g is not group]
            if group["label"] in taken:
                group["label"] = f"{group['label']} #{taken.count(group['label']) + 1}"
        group["runs"].append(run)
        group["curves"].append((np.array([p[0] for p in points], float), np.array([p[1] for p in points], float)))
    return y, list(groups.values())


def run_labels(runs: list[Path]) -> list[str]:
    """How the table and the figure name each run of a group: its folder's name (``seed_3``), with its parent's
    where two runs of the group share a name."""
    names = [run.name for run in runs]
    return [name if names.count(name) == 1 else f"{run.parent.name}/{name}" for run, name in zip(runs, names)]


def table(y: str, groups: list[dict[str, Any]]) -> str:
    """One line per group: runs, the x reached, the last and best value of ``y`` (mean +- std over runs); under a
    group of several runs (the seeds of a config), one indented line per run with its own."""
    lines = [f"{'group':<28} {'runs':>4} {'last x':>12} {'last ' + y:>28} {'best':>10}"]
    for group in groups:
        last = np.array([ys[-1] for _, ys in group["curves"]])
        best = np.array([ys.max() for _, ys in group["curves"]])
        reach = min(float(xs[-1]) for xs, _ in group["curves"])
        lines.append(f"{group['label'][:28]:<28} {len(group['runs']):>4} {reach:>12,.0f} "
                     f"{f'{last.mean():.2f} +- {last.std():.2f}':>28} {best.mean():>10.2f}")
        if len(group["runs"]) > 1:
            for label, (xs, ys) in zip(run_labels(group["runs"]), group["curves"]):
                lines.append(f"  {label[:26]:<26} {'':>4} {float(xs[-1]):>12,.0f} {float(ys[-1]):>28.2f} "
                             f"{float(ys.max()):>10.2f}")
    return "\n".join(lines)


def render(path: Path, x: str, y: str, groups: list[dict[str, Any]]) -> None:
    """Draw the groups' mean curves and bands into ``path`` (PNG, SVG or PDF by its suffix); a group of several
    runs also each run's own curve, thin, in its colour (an SVG names each ``run:<its path>``)."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for group in groups:
        grid, mean, std = mean_band(group["curves"])
        runs = len(group["runs"])
        (line,) = axes.plot(grid, mean, label=f"{group['label']} ({runs} run{'s' if runs > 1 else ''})")
        if runs > 1:
            axes.fill_between(grid, mean - std, mean + std, alpha=0.25)
            for run, (xs, ys) in zip(group["runs"], group["curves"]):
                axes.plot(xs, ys, color=line.get_color(), alpha=0.35, linewidth=0.8, gid=f"run:{run}")
    axes.set_xlabel(x)
    axes.set_ylabel(y)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    save_figure(figure, path)


def plot(patterns: list[str], x: str = "env_steps", y: str | None = None, out: str | None = None) -> str:
    """Find the runs, print nothing, return the table; with ``out`` also write the figure there."""
    if x not in ("env_steps", "wall_time"):
        raise ZooError(f"--x must be env_steps or wall_time, got {x!r}")
    runs = find_runs(patterns)
    y, groups = load_curves(runs, x, y)
    if out is not None:
        render(check_out(out), x, y, groups)
    return table(y, groups)
