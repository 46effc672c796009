"""``zoo plot --aggregate`` (``aggregate_runs``): each group's final evaluation over seeds as rliable reports it
(zoo.bench.stats): IQM, mean, median and optimality gap with stratified-bootstrap 95% CIs, on normalised scores
where the environment has a NORMALISATION entry, as a table, a JSON file and a figure. A run whose final_eval.json is
damaged (zoo.run.view.read_final_returns) is refused in one line naming the file, as ``zoo bench --report`` does:
a published figure never silently drops a seed. A run with no evaluation yet (or no metrics rows) is left out with a
line saying so, and the rest are plotted. A write the system refuses is one line naming the file, and leaves
no temporary file. Here, below the commands, because ``zoo bench --report`` draws the same figure.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from ..config import to_plain
from ..errors import ZooError
from ..run.view import FINAL_EVAL_FILE, RunView, find_runs
from .figures import check_out, pyplot, save_figure
from .output import write_text
from .stats import NORMALISATION, aggregate, iqm, normalise, performance_profile, stratified_bootstrap_ci

log = logging.getLogger("zoo")

# zoo plot --aggregate: one final score per seed, the group's statistics over seeds.
STATISTIC_TITLES = {"iqm": "IQM", "median": "median", "mean": "mean", "optimality_gap": "optimality gap"}
EVAL_SOURCES = {"final": "final_eval.json's mean", "last": "the last eval_return_mean of metrics.jsonl"}


def _final_return(view: RunView) -> tuple[float, str] | None:
    """The run's final evaluation return and its source: ``final_eval.json``'s mean (the benchmark runner's final
    evaluation), else the last ``eval_return_mean`` of metrics.jsonl; None for a run with neither."""
    if view.evaluated:
        return float(np.mean(view.final_returns(episodes=None))), "final"
    evaluations = [row["eval_return_mean"] for row in view.rows if row.get("eval_return_mean") is not None]
    return (float(evaluations[-1]), "last") if evaluations else None


def load_finals(runs: list[Path]) -> list[dict[str, Any]]:
    """One group per config (seeds together): ``label`` (``<policy.type> x <env.id>``, with the run folder's name
    when two groups would share it), ``policy``, ``env``, ``runs``, ``finals`` (each run's final evaluation
    return), ``sources`` ('final' or 'last'), ``env_steps`` (each run's last) and ``curves`` (each run's
    ``(env_steps, eval_return_mean)`` arrays; empty arrays for a run without periodic evaluations)."""
    groups: dict[str, dict[str, Any]] = {}
    left_out = []
    for run in runs:
        view = RunView(run)
        rows = view.rows
        evaluation = _final_return(view)
        if evaluation is None:  # left out and said, as a run with no metrics rows is (find_runs)
            log.warning(f"left out '{run}': a run with no evaluation yet (no {FINAL_EVAL_FILE}, no eval_return_mean "
                        f"in its metrics; set pipeline.eval_every, or run the benchmark's final evaluation)")
            left_out.append(run)
            continue
        final, source = evaluation
        cfg = to_plain(view.config)
        policy, env = (cfg.get("policy") or {}).get("type"), (cfg.get("env") or {}).get("id")
        group = groups.setdefault(view.group_key(), {
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
    if not groups:
        raise ZooError(f"no run with an evaluation among {len(left_out)} run directories (no {FINAL_EVAL_FILE}, no "
                       "eval_return_mean in their metrics): set pipeline.eval_every, or run the benchmark's final "
                       "evaluation (zoo bench)")
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
    figure_path = None if out is None else check_out(out)
    json_file = None if json_path is None else check_out(json_path)
    groups = load_finals(find_runs(patterns))
    results = summarise(groups, reps, seed)
    if json_file is not None:
        write_text(json_file, json.dumps(results, indent=2) + "\n")
    if figure_path is not None:
        render_aggregate(figure_path, groups, results, reps, seed)
    return aggregate_table(results, reps, seed)
