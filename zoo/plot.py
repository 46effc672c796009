"""``zoo plot RUN_OR_GLOB... [--x env_steps|wall_time] [--y KEY] [--out FILE.png]``: learning curves of runs.

Runs whose configs differ only in ``seed`` (and ``exp_name``/``runs_dir``) are one group: drawn as the mean over
seeds with a band of one standard deviation, on a common x grid (each run's curve interpolated, within the range
every run of the group covers). A folder holding run directories (``runs/<exp>/`` from ``zoo run --seeds``) stands
for all of them. Without ``--out`` (or without the ``plot`` extra) a table summarises each group in the terminal.

``aggregate_runs`` (``zoo plot --aggregate``) reports each group's final evaluation over seeds as rliable does
(zoo.bench.stats): IQM, mean, median and optimality gap with stratified-bootstrap 95% CIs, on normalised scores
where the environment has a NORMALISATION entry, as a table, a JSON file and a figure. A run whose final_eval.json is
damaged (zoo.bench.runs.read_final_returns) is refused in one line naming the file, as ``zoo bench --report`` does:
a published figure never silently drops a seed. A write the system refuses is one line naming the file, and leaves
no temporary file.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any

import numpy as np

from .bench.output import refused_write, write_text
from .bench.stats import NORMALISATION, aggregate, iqm, normalise, performance_profile, stratified_bootstrap_ci
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


PLOT_HINT = "zoo plot --out needs matplotlib: pip install 'zoo-rl[plot]' (without --out, zoo plot prints a table)"


def pyplot(missing: str = PLOT_HINT) -> Any:
    """matplotlib's pyplot on the Agg backend (no display); a ZooError saying ``missing`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ZooError(missing) from None
    return plt


def save_figure(figure: Any, path: Path) -> None:
    """Save ``figure`` to ``path`` (PNG, SVG or PDF by its suffix) through a temporary file, so that a reader never
    sees half a figure, and close it; a refused write (a full disk) is one ZooError line and leaves no file."""
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
    try:
        with refused_write(path):
            figure.savefig(tmp)
            tmp.replace(path)
    finally:
        pyplot().close(figure)
        tmp.unlink(missing_ok=True)


def _check_out(out: str) -> Path:
    path = Path(out)
    if not path.parent.is_dir():
        raise ZooError(f"cannot write '{out}': the folder '{path.parent}' does not exist")
    return path


def render(path: Path, x: str, y: str, groups: list[dict[str, Any]]) -> None:
    """Draw the groups' mean curves and bands into ``path`` (PNG, SVG or PDF by its suffix)."""
    plt = pyplot()
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
    save_figure(figure, path)


def plot(patterns: list[str], x: str = "env_steps", y: str | None = None, out: str | None = None) -> str:
    """Find the runs, print nothing, return the table; with ``out`` also write the figure there."""
    if x not in ("env_steps", "wall_time"):
        raise ZooError(f"--x must be env_steps or wall_time, got {x!r}")
    runs = find_runs(patterns)
    y, groups = load_curves(runs, x, y)
    if out is not None:
        render(_check_out(out), x, y, groups)
    return table(y, groups)


# zoo plot --aggregate: one final score per seed, the group's statistics over seeds.
STATISTIC_TITLES = {"iqm": "IQM", "median": "median", "mean": "mean", "optimality_gap": "optimality gap"}
EVAL_SOURCES = {"final": "final_eval.json's mean", "last": "the last eval_return_mean of metrics.jsonl"}


def _final_return(run: Path, rows: list[dict[str, Any]]) -> tuple[float, str]:
    """The run's final evaluation return and its source: ``final_eval.json``'s mean (the benchmark runner's final
    evaluation), else the last ``eval_return_mean`` of metrics.jsonl."""
    from .bench.runs import FINAL_EVAL_FILE, read_final_returns

    if (run / FINAL_EVAL_FILE).is_file():
        return float(np.mean(read_final_returns(run, episodes=None))), "final"
    evaluations = [row["eval_return_mean"] for row in rows if row.get("eval_return_mean") is not None]
    if not evaluations:
        raise ZooError(f"run '{run}' has no evaluation (no {FINAL_EVAL_FILE}, no eval_return_mean in metrics.jsonl): "
                       "set pipeline.eval_every, or run the benchmark's final evaluation (zoo bench)")
    return float(evaluations[-1]), "last"


def load_finals(runs: list[Path]) -> list[dict[str, Any]]:
    """One group per config (seeds together): ``label`` (``<policy.type> x <env.id>``, with the run folder's name
    when two groups would share it), ``policy``, ``env``, ``runs``, ``finals`` (each run's final evaluation
    return), ``sources`` ('final' or 'last'), ``env_steps`` (each run's last) and ``curves`` (each run's
    ``(env_steps, eval_return_mean)`` arrays; empty arrays for a run without periodic evaluations)."""
    groups: dict[str, dict[str, Any]] = {}
    for run in runs:
        rows = read_rows(run / "metrics.jsonl")
        final, source = _final_return(run, rows)
        cfg = to_plain(load_config_file(run / "config.yaml"))
        policy, env = (cfg.get("policy") or {}).get("type"), (cfg.get("env") or {}).get("id")
        group = groups.setdefault(_group_key(run), {
            "label": f"{policy} x {env}", "folder": run.parent.name if run.name.startswith("seed_") else run.name,
            "policy": policy, "env": env, "runs": [], "finals": [], "sources": [], "env_steps": [], "curves": []})
        points = [(row["env_steps"], row["eval_return_mean"]) for row in rows
                  if row.get("env_steps") is not None and row.get("eval_return_mean") is not None]
        group["runs"].append(run)
        group["finals"].append(final)
        group["sources"].append(source)
        group["env_steps"].append(max((row["env_steps"] for row in rows if row.get("env_steps") is not None),
                                      default=None))
        group["curves"].append((np.array([p[0] for p in points], float), np.array([p[1] for p in points], float)))
    labels = [group["label"] for group in groups.values()]
    for group in groups.values():  # two configs of one policy and env (other hyper-parameters): name the folder
        if labels.count(group["label"]) > 1:
            group["label"] = f"{group['label']} ({group['folder']})"
    taken: list[str] = []
    for group in groups.values():
        taken.append(group["label"])
        if taken.count(group["label"]) > 1:
            group["label"] = f"{group['label']} #{taken.count(group['label'])}"
    return list(groups.values())


def _scores(group: dict[str, Any], returns: Any) -> Any:
    entry = NORMALISATION.get(group["env"])
    return returns if entry is None else normalise(returns, entry.random, entry.reference)


def summarise(groups: list[dict[str, Any]], reps: int = 2000, seed: int = 0) -> dict[str, dict[str, Any]]:
    """``{label: zoo.bench.stats.aggregate(...) of the group's final scores + normalised, env_steps, ...}``."""
    results: dict[str, dict[str, Any]] = {}
    for group in groups:
        entry = NORMALISATION.get(group["env"])
        summary = aggregate(np.asarray(_scores(group, np.array(group["finals"]))), reps=reps, seed=seed)
        if entry is None:  # gamma = 1 is the reference return only on the normalised scale
            summary["optimality_gap"] = summary["optimality_gap_ci"] = None
        steps = [s for s in group["env_steps"] if s is not None]
        summary.update(policy=group["policy"], env=group["env"], normalised=entry is not None,
                       env_steps=min(steps) if steps else None, final_returns=group["finals"],
                       sources={source: group["sources"].count(source) for source in sorted(set(group["sources"]))},
                       run_dirs=[str(run) for run in group["runs"]])
        if entry is not None:
            summary.update(random=entry.random, reference=entry.reference)
        results[group["label"]] = summary
    return results


def _number(value: float) -> str:
    return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"


def aggregate_table(results: dict[str, dict[str, Any]], reps: int, seed: int) -> str:
    """One line per group: seeds, env steps, the evaluation's source and the four statistics with their CIs."""
    lines = [f"{'group':<36} {'seeds':>5} {'env steps':>11} {'eval':>5}  "
             + "  ".join(f"{title + ' [95% CI]':<27}" for title in STATISTIC_TITLES.values())]
    for label, summary in results.items():
        cells = []
        for name in STATISTIC_TITLES:
            value, interval = summary[name], summary[f"{name}_ci"]
            cells.append("n/a" if value is None else f"{_number(value)} [{_number(interval[0])}, "
                                                     f"{_number(interval[1])}]")
        sources = list(summary["sources"])
        steps = "?" if summary["env_steps"] is None else f"{summary['env_steps']:,}"
        name = label + (" *" if summary["normalised"] else "")
        lines.append(f"{name[:36]:<36} {summary['seeds']:>5} {steps:>11} "
                     f"{sources[0] if len(sources) == 1 else 'mixed':>5}  " + "  ".join(f"{c:<27}" for c in cells))
    lines += [f"eval: final = {EVAL_SOURCES['final']}, last = {EVAL_SOURCES['last']}",
              f"95% CIs: stratified bootstrap over seeds ({reps} resamples, seed {seed}); IQM, mean and median over "
              "the seeds (rliable's definitions for one task, but the median of the runs)",
              "* normalised: (return - random) / (reference - random), zoo.bench.stats.NORMALISATION; optimality gap "
              "(gamma = 1, the reference) only for these"]
    return "\n".join(line.rstrip() for line in lines)


def _iqm_curve(group: dict[str, Any], reps: int, seed: int, points: int = 50) -> tuple[np.ndarray, ...] | None:
    # IQM over seeds at each point of the grid all runs cover; None when a run has no periodic evaluation.
    curves = group["curves"]
    if any(len(xs) == 0 for xs, _ in curves):
        return None
    low, high = max(float(xs[0]) for xs, _ in curves), min(float(xs[-1]) for xs, _ in curves)
    grid = np.linspace(low, high, points) if high > low else np.array([high])
    values = np.asarray(_scores(group, np.stack([np.interp(grid, xs, ys) for xs, ys in curves])))
    intervals = np.array([stratified_bootstrap_ci(values[:, k], iqm, reps, seed=seed) for k in range(len(grid))])
    return grid, np.array([iqm(values[:, k]) for k in range(len(grid))]), intervals[:, 0], intervals[:, 1]


def render_aggregate(path: Path, groups: list[dict[str, Any]], results: dict[str, dict[str, Any]], reps: int,
                     seed: int) -> None:
    """Draw the interval estimates (as rliable's ``plot_interval_estimates``), the performance profiles and the IQM
    over env steps with CI bands into ``path``: of the normalised groups when there are any (one scale for all;
    the others stay in the table), else of all groups on their raw returns."""
    plt = pyplot()
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    shown = [group for group in groups if results[group["label"]]["normalised"]] or groups
    scale = "normalised score" if results[shown[0]["label"]]["normalised"] else "return"
    labels = [group["label"] for group in shown]
    colours = [palette[k % len(palette)] for k in range(len(shown))]
    figure = plt.figure(figsize=(16, 5 + 0.4 * len(shown)))
    layout = figure.add_gridspec(2, 4, height_ratios=[max(1.0, 0.4 * len(shown)), 4.0])
    for column, (name, title) in enumerate(STATISTIC_TITLES.items()):
        axes = figure.add_subplot(layout[0, column])
        for row, label in enumerate(labels):
            value, interval = results[label][name], results[label][f"{name}_ci"]
            if value is not None:
                axes.barh(row, interval[1] - interval[0], left=interval[0], height=0.6, color=colours[row], alpha=0.75)
                axes.vlines(value, row - 0.3, row + 0.3, color="black", linewidth=1.5)
        axes.set_yticks(range(len(labels)), labels if column == 0 else [""] * len(labels))
        axes.set_ylim(len(labels) - 0.5, -0.5)
        axes.set_title(title)
        axes.set_xlabel(scale)
        axes.grid(axis="x", alpha=0.3)
    profile = figure.add_subplot(layout[1, :2])
    scores = [np.asarray(_scores(group, np.array(group["finals"]))) for group in shown]
    pooled = np.concatenate(scores)
    taus = np.linspace(min(pooled.min(), 0.0), max(pooled.max(), 1.0), 101) if scale != "return" \
        else np.linspace(pooled.min(), pooled.max(), 101)
    for k, group_scores in enumerate(scores):
        curve = performance_profile(group_scores, taus, reps, seed=seed)
        profile.plot(taus, curve.fraction, color=colours[k], label=labels[k])
        profile.fill_between(taus, curve.lower, curve.upper, color=colours[k], alpha=0.2)
    profile.set(xlabel=f"{scale} τ", ylabel="fraction of runs with score > τ", title="performance profiles, 95% CI")
    over_steps = figure.add_subplot(layout[1, 2:])
    for k, group in enumerate(shown):
        curve = _iqm_curve(group, reps, seed)
        if curve is not None:
            over_steps.plot(curve[0], curve[1], color=colours[k], label=labels[k])
            over_steps.fill_between(curve[0], curve[2], curve[3], color=colours[k], alpha=0.2)
    steps = [x for line in over_steps.lines for x in line.get_xdata() if x > 0]
    if steps and max(steps) > 100 * min(steps):  # budgets of different envs (1e5 and 1e6 steps) side by side
        over_steps.set_xscale("log")
    over_steps.set(xlabel="env_steps", ylabel=f"IQM of eval_return_mean ({scale})", title="IQM over seeds, 95% CI")
    for axes in (profile, over_steps):
        axes.grid(alpha=0.3)
        if axes.lines:
            axes.legend(fontsize="small")
    if len(shown) < len(groups):
        figure.suptitle(f"{len(groups) - len(shown)} group(s) without a normalisation (zoo.bench.stats."
                        "NORMALISATION) are in the table only", fontsize="small")
    figure.tight_layout()
    save_figure(figure, path)


def aggregate_runs(patterns: list[str], json_path: str | None = None, out: str | None = None, reps: int = 2000,
                   seed: int = 0) -> str:
    """``zoo plot --aggregate``: each group's final evaluation over seeds (IQM, mean, median, optimality gap with
    stratified-bootstrap 95% CIs, normalised where NORMALISATION knows the env); returns the table, writes
    ``json_path`` (``{label: {"iqm": x, "iqm_ci": [lo, hi], ..., "seeds", "env_steps", "normalised"}}``) and the
    figure ``out`` when given."""
    if reps < 1:
        raise ZooError(f"the bootstrap needs at least 1 resample, got reps={reps}")
    figure_path = None if out is None else _check_out(out)
    json_file = None if json_path is None else _check_out(json_path)
    groups = load_finals(find_runs(patterns))
    results = summarise(groups, reps, seed)
    if json_file is not None:
        write_text(json_file, json.dumps(results, indent=2) + "\n")
    if figure_path is not None:
        render_aggregate(figure_path, groups, results, reps, seed)
    return aggregate_table(results, reps, seed)
