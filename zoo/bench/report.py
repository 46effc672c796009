"""``zoo bench SUITE... --report docs/benchmarks.md``: the benchmark table, generated from the runs alone.

Per entry of the suites: env id, algorithm, budget, seeds finished, the evaluation protocol, the final evaluation's
IQM with its stratified-bootstrap 95% CI and mean +- std over seeds (raw returns, so that they stand beside the
published figures), the wall-clock time per run here, and the published figures of CleanRL, rl-baselines3-zoo and
Tianshou for the same algorithm and env (``zoo.bench.published``, with their budgets and caveats). Comparisons
(SAC-ACE against SAC, the HL-Gauss critic against MSE) get the difference of their IQMs with a bootstrap CI, on the
final evaluation and on the mean of each run's last ``LATE_EVALS`` periodic evaluations (one checkpoint's score
swings on envs such as Hopper, where an agent near 3,000 falls to 1,000 between evaluations; the late mean is
steadier, and the two together say whether a verdict rests on one checkpoint). The
figures (``zoo plot --aggregate``'s: interval estimates, performance profiles, IQM over env steps) go beside the
file, one per suite. An entry still running shows what has finished; nothing is invented for what has not. A seed
folder with a final evaluation that holds a run of another config or seed (its config.yaml must name the seed, and
its final_eval.json, where it records one, that seed's evaluation seed), or a damaged final_eval.json or metrics
file, is refused in one line naming it (never reported), as ``zoo plot --aggregate`` refuses a damaged
final_eval.json. A seed folder that is not whole (a final evaluation without metrics rows; in a results folder,
anything but a whole kept seed, ``zoo.bench.results.kept_state``: half-written, a symbolic link, a FIFO in a file's
place) is left out of the table, and a line on ``stream`` says so; so is a kept seed of this entry (its seed, env and
policy type) trained with an older config of it (``zoo.bench.runs.stale_difference``), which the runner trains
again.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..errors import ZooError
from ..run.metrics_files import METRICS_JSONL
from ..run.view import RunView
from .output import refused_write, write_text
from .published import published_for
from .results import kept_state
from .runner import entries_of
from .runs import (
    FINAL_EVAL_EPISODES,
    FINAL_EVAL_FILE,
    check_eval_seed,
    check_own,
    configs_dir,
    expected_config,
    stale_difference,
)
from .stats import aggregate, iqm
from .suites import Entry, suite_entries

# The comparisons the suites were built for: (suite, entry, baseline entry).
LATE_EVALS = 5  # the periodic evaluations (eval_return_mean rows) whose mean is a comparison's second measure
COMPARISONS = (("ace", "sac_ace_hopper", "sac_hopper"), ("ace", "sac_ace_halfcheetah", "sac_halfcheetah"),
               ("ace", "sac_ace_halfcheetah", "sac_ace_noreset_halfcheetah"),
               ("hl_gauss", "sac_hl_gauss_pendulum", "sac_pendulum"),
               ("masks", "ppo_masked_knapsack", "ppo_unmasked_knapsack"))


def _whole(path: Path, kept: bool) -> str | None:
    """None when the seed folder ``path`` is whole (see the module docstring); "" when it holds no final
    evaluation (not finished: pending); else why it is left out."""
    if kept:
        return kept_state(path)
    if not os.path.lexists(path / FINAL_EVAL_FILE):
        return ""
    if path.is_symlink():
        return f"'{path}' is a symbolic link, not a run directory of zoo bench"
    if not os.path.lexists(path / METRICS_JSONL):
        return f"'{path}' has a {FINAL_EVAL_FILE} but no {METRICS_JSONL}"
    return None


def _finished(root: Path, entry: Entry, seeds: int, configs: Path, kept: bool, stream: IO[str]) -> list[dict]:
    """What the report reads (``_read``) of the entry's seed folders (0 .. seeds-1) with a final evaluation; a
    ZooError naming one that holds a run of another config or seed, or a damaged file (the report refuses, as
    ``zoo plot --aggregate`` does a damaged final_eval.json); a folder that is not whole (no metrics rows among
    them) is left out, said on ``stream``. ``kept``: a results folder's kept seeds."""
    finished = []
    for seed in range(seeds):
        path = root / entry.name / f"seed_{seed}"
        problem = _whole(path, kept)
        stale = stale_difference(path, entry, seed, configs) if problem is None and kept else None
        if stale is not None:
            problem = (f"'{path}' was trained with an older config of {entry.name} ({stale}): `zoo bench` trains it "
                       f"again")
        elif problem is None:
            check_own(path, entry, seed, configs)
            check_eval_seed(path, entry, seed, required=kept)
            result = _read(path)
            problem = (f"'{path}' holds a final evaluation but no metrics rows" if result is None
                       else RunView(path).order_problem())
        if problem:
            print(f"zoo bench: left out of the report: {problem}", file=stream, flush=True)
        elif problem is None:
            finished.append(result)
    return finished


def _read(run: Path) -> dict[str, Any] | None:
    # What the table takes from one finished run; None for a run without metrics rows (not whole).
    view = RunView(run)
    returns = view.final_returns()
    rows = view.rows
    if not rows:
        return None
    last = rows[-1]
    cfg = view.config
    evaluations = [row["eval_return_mean"] for row in rows if row.get("eval_return_mean") is not None]
    late = float(np.mean(evaluations[-LATE_EVALS:])) if evaluations else None
    return {"run": run, "final": float(np.mean(returns)), "late": late, "episodes": len(returns),
            "env_steps": last.get("env_steps"), "minutes": float(last.get("wall_time", 0.0)) / 60.0,
            "env": cfg.env.id, "policy": cfg.policy.type, "budget": cfg.pipeline.max_env_steps,
            "started": view.started}


def _ci(values: list[float], reps: int, seed: int) -> dict[str, Any]:
    return aggregate(np.asarray(values, dtype=float)[:, None], reps=reps, seed=seed)


def _fmt(value: float) -> str:
    return f"{value:,.1f}"


def _difference(a: list[float], b: list[float], reps: int, seed: int) -> tuple[float, float, float]:
    """IQM(a) - IQM(b) and a 95% bootstrap interval, resampling each side's seeds independently."""
    rng = np.random.RandomState(seed)
    x, y = np.asarray(a), np.asarray(b)
    draws = [iqm(x[rng.randint(0, len(x), len(x))]) - iqm(y[rng.randint(0, len(y), len(y))]) for _ in range(reps)]
    return float(iqm(x) - iqm(y)), float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))


def _compared(a: list[float | None], b: list[float | None], reps: int, seed: int) -> tuple[str, str]:
    """``_difference`` as table cells, ``("difference [low, high]", verdict)``: better or worse only when the whole
    CI is; ("no periodic evaluations", "") where a run has none."""
    if None in a or None in b:
        return "no periodic evaluations", ""
    diff, low, high = _difference(a, b, reps, seed)  # type: ignore[arg-type]
    verdict = ("better" if low > 0 else "worse" if high < 0 else "no difference shown at 95%")
    return f"{_fmt(diff)} [{_fmt(low)}, {_fmt(high)}]", verdict


def _published(p: Any) -> str:
    spread = f" +- {_fmt(p.return_std)}" if p.return_std is not None else ""
    budget = f"{p.budget_steps:,} steps, " if p.budget_steps else ""
    return f"{p.library}: {_fmt(p.return_mean)}{spread} ({p.env_id}, {budget}{p.measure})"


def _figure(entries: list[Entry], results: dict[str, list[dict[str, Any]]], path: Path, reps: int,
            seed: int) -> bool:
    """The suite's aggregate figure (zoo plot --aggregate --out) over the runs of its table; False without any."""
    from .aggregate import aggregate_runs

    runs = [str(result["run"]) for entry in entries for result in results[entry.name]]
    if not runs:
        return False
    aggregate_runs(runs, out=str(path), reps=reps, seed=seed)
    return True


def report(suites: list[str], runs_dir: str = "runs", out: str = "docs/benchmarks.md", seeds: int | None = None,
           reps: int = 2000, seed: int = 0, configs: str | Path | None = None,
           results: str | Path | None = None, stream: IO[str] | None = None) -> str:
    """Write the report (see the module docstring) for ``suites`` from ``runs_dir/bench``, or from the results
    folder ``results`` (``zoo.bench.results``: the same table from the kept files alone); returns its path.
    ``configs``: the folder of the suites' config files (default ``configs_dir``), whose runs alone are reported.
    The text depends on the runs only (its date is the newest run's start), so the same results give the same
    file. Seed folders left out (not whole) are named on ``stream`` (default stderr)."""
    entries = entries_of(suites)
    configs = Path(configs) if configs is not None else configs_dir(entries)
    root = Path(results) if results is not None else Path(runs_dir) / "bench"
    out_path = Path(out)
    if not out_path.parent.is_dir():
        raise ZooError(f"cannot write '{out}': the folder '{out_path.parent}' does not exist")
    stream = stream or sys.stderr
    found = {entry.name: _finished(root, entry, entry.seed_count(seeds), configs, results is not None, stream)
             for entry in entries}
    dates = [r["started"] for runs in found.values() for r in runs if r["started"]]
    command = (f"zoo bench {' '.join(suites)} --report {out}" + (f" --seeds {seeds}" if seeds is not None else "")
               + (f" --results {results}" if results is not None else ""))
    source = ("the results kept under" if results is not None else "the run directories under")
    lines = ["# Benchmarks", "",
             f"Generated by `{command}` from {source} `{root}` (one per entry and seed, `zoo bench` trains them"
             f"{'; the newest started ' + max(dates) if dates else ''}). Every score is a final "
             f"evaluation: {FINAL_EVAL_EPISODES} deterministic episodes on seeds disjoint from training, after the "
             f"whole budget (`pipeline.stop_return` off). IQM: interquartile mean over seeds with a "
             f"stratified-bootstrap 95% CI ({reps} resamples, zoo.bench.stats, equal to rliable's). Wall-clock: "
             "training time of one run on this machine (2 CPU cores; runs two at a time where the suite ran with "
             "`--jobs 2`).", ""]
    for suite in suites:
        lines += [f"## {suite}", "", "| entry | env | algorithm | budget | seeds | final eval IQM [95% CI] | "
                  "mean +- std | min/run | published (library: return, budget, measure) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for entry in suite_entries(suite):
            runs = found[entry.name]
            if runs:
                finals = [r["final"] for r in runs]
                stats = _ci(finals, reps, seed)
                env, policy, budget = runs[0]["env"], runs[0]["policy"], runs[0]["budget"]
                score = f"{_fmt(stats['iqm'])} [{_fmt(stats['iqm_ci'][0])}, {_fmt(stats['iqm_ci'][1])}]"
                spread = f"{_fmt(float(np.mean(finals)))} +- {_fmt(float(np.std(finals)))}"
                minutes = f"{np.mean([r['minutes'] for r in runs]):.1f}"
            else:  # what the entry will train, from its config as resolved here
                cfg = expected_config(entry, 0, configs)
                env, policy, budget = cfg["env"]["id"], cfg["policy"]["type"], cfg["pipeline"]["max_env_steps"]
                score, spread, minutes = "pending", "", ""
            figures = [*entry.published, *(published_for(policy, env) if env else ())]  # the entry's own first
            published = "; ".join(_published(p) for p in figures if p.return_mean is not None)
            lines.append(f"| {entry.name} | {env or ''} | {policy or ''} | {f'{budget:,}' if budget else ''} | "
                         f"{len(runs)}/{entry.seed_count(seeds)} | {score} | {spread} | {minutes} | "
                         f"{published or 'none found'} |")
        lines.append("")
        figure = out_path.parent / "benchmarks" / f"{suite}.png"
        with refused_write(figure.parent):
            figure.parent.mkdir(exist_ok=True)
        try:
            drawn = _figure(list(suite_entries(suite)), found, figure, reps, seed)
        except ZooError as exc:  # e.g. matplotlib missing: the table stands without the figure
            lines += [f"(no figure: {exc})", ""]
            drawn = False
        if drawn:
            lines += [f"![{suite}](benchmarks/{suite}.png)", ""]
    compared = [c for c in COMPARISONS if c[0] in suites]
    if compared:
        lines += ["## Comparisons", "", f"Final evaluation, and the mean of each run's last {LATE_EVALS} periodic "
                  "evaluations (5 episodes each, the bench's): IQM difference of the entry minus its baseline, with a "
                  "95% bootstrap CI over seeds (each side resampled independently).", "",
                  "| question | IQM difference [95% CI] | seeds | verdict | last "
                  f"{LATE_EVALS} evals: IQM difference [95% CI] | verdict |", "| --- | --- | --- | --- | --- | --- |"]
        for _, new, base in compared:
            runs_a, runs_b = found.get(new, []), found.get(base, [])
            if len(runs_a) < 2 or len(runs_b) < 2:
                lines.append(f"| {new} vs {base} | pending | {len(runs_a)} vs {len(runs_b)} | | | |")
                continue
            final, final_verdict = _compared([r["final"] for r in runs_a], [r["final"] for r in runs_b], reps, seed)
            late, late_verdict = _compared([r["late"] for r in runs_a], [r["late"] for r in runs_b], reps, seed)
            lines.append(f"| {new} vs {base} | {final} | {len(runs_a)} vs {len(runs_b)} | {final_verdict} | {late} | "
                         f"{late_verdict} |")
        lines.append("")
    lines += ["Published figures: `zoo/bench/published.py` says where each comes from and what it measures "
              "(rl-zoo: one agent's evaluation episodes; CleanRL: training returns averaged over the last 100 "
              "episodes, mean over seeds; Tianshou: the best test return within the budget). None is on v5 MuJoCo "
              "envs; compare like with like.", ""]
    if any(entry.published for entry in entries):  # a plugin's own figures (Entry.published), shown first in a row
        lines += ["An entry's own published figures (its suite's `Entry.published`, from the suite's plugin) come "
                  "first in its row; their sources are the plugin's to give.", ""]
    write_text(out_path, "\n".join(lines))
    return str(out_path)
