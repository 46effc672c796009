"""Learning parity of ``policy.precision`` fp32 and bf16: final evaluations over seeds and the curves side by side.

Overview:
    Reads groups of run directories trained with the same config in each precision (``zoo run --config C --set
    policy.precision=P --seeds ...`` writes ``RUNS/<name>/seed_<k>/``), prints per group the last evaluation's IQM
    over seeds with its stratified-bootstrap 95% CI (zoo.bench.stats) and the IQM difference bf16 - fp32 with a
    bootstrap CI, and draws the evaluation curves (mean over seeds, +- one std) side by side into ``--out``.

    python benchmarks/precision_parity.py --runs /work/runs/parity_hopper --pairs sac_hopper \\
        --out docs/precision_parity.png

    A pair ``NAME`` reads ``RUNS/NAME_fp32/seed_*`` and ``RUNS/NAME_bf16/seed_*``; runs that have not finished are
    left out (and said so).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

import numpy as np  # noqa: E402

from zoo.bench.figures import mean_band, pyplot, save_figure  # noqa: E402
from zoo.bench.report import _difference  # noqa: E402
from zoo.bench.stats import aggregate  # noqa: E402
from zoo.run.view import RunView  # noqa: E402


def finished_runs(folder: Path) -> tuple[list[RunView], int]:
    """The finished runs (final model written) among ``folder/seed_*``, and how many seed folders there are."""
    seeds = sorted(folder.glob("seed_*"))
    return [RunView(path) for path in seeds if RunView(path).finished], len(seeds)


def curve(view: RunView) -> tuple[np.ndarray, np.ndarray]:
    rows = [row for row in view.rows if row.get("eval_return_mean") is not None]
    return np.array([row["env_steps"] for row in rows], float), np.array([row["eval_return_mean"] for row in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", required=True, help="the folder holding NAME_fp32/ and NAME_bf16/")
    parser.add_argument("--pairs", nargs="+", required=True)
    parser.add_argument("--out", default=None, help="figure path (PNG); none: the table only")
    args = parser.parse_args()
    root = Path(args.runs)
    figure = axes = None
    if args.out:
        plt = pyplot()
        figure, axes = plt.subplots(1, len(args.pairs), figsize=(5 * len(args.pairs), 3.6), squeeze=False)
    for index, name in enumerate(args.pairs):
        finals: dict[str, list[float]] = {}
        for precision, colour in (("fp32", "tab:blue"), ("bf16", "tab:orange")):
            runs, folders = finished_runs(root / f"{name}_{precision}")
            finals[precision] = [float(view.last("eval_return_mean")) for view in runs]
            if not runs:
                print(f"{name} {precision}: no finished run ({folders} seed folders)")
                continue
            stats = aggregate(np.asarray(finals[precision])[:, None], reps=2000, seed=0)
            values = ", ".join(f"{v:.1f}" for v in finals[precision])
            print(f"{name} {precision}: last eval IQM {stats['iqm']:.1f} [{stats['iqm_ci'][0]:.1f}, "
                  f"{stats['iqm_ci'][1]:.1f}] over {len(runs)}/{folders} seeds ({values})")
            if axes is not None:
                grid, mean, std = mean_band([curve(view) for view in runs])
                ax = axes[0][index]
                ax.plot(grid, mean, color=colour, label=f"{precision} ({len(runs)} seeds)")
                ax.fill_between(grid, mean - std, mean + std, color=colour, alpha=0.2)
        if len(finals.get("fp32", [])) >= 2 and len(finals.get("bf16", [])) >= 2:
            diff, low, high = _difference(finals["bf16"], finals["fp32"], 2000, 0)
            print(f"{name}: IQM bf16 - fp32 = {diff:.1f} [{low:.1f}, {high:.1f}]")
        if axes is not None:
            ax = axes[0][index]
            ax.set_title(name)
            ax.set_xlabel("env steps")
            ax.set_ylabel("eval return (10 episodes)")
            ax.legend(loc="lower right")
    if figure is not None:
        figure.tight_layout()
        save_figure(figure, Path(args.out))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
