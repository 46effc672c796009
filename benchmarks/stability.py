"""Does a run that has solved its env stay solved? Dips and collapses after the first solved evaluation, by variant.

Overview:
    Reads groups of run directories (``zoo run --config C --set ... --exp-name NAME --seeds ...`` writes
    ``RUNS/NAME/seed_<k>/``) trained with periodic evaluations, and prints per run: the env step of the first
    evaluation at or above ``--solved``, how many later evaluations fell below it, the worst of them, the last
    evaluation, and the mean policy lag (actor-learner pipelines); then per group the same summed over seeds. A run
    that dips and recovers has a transient forgetting; one whose last evaluation is below ``--solved`` collapsed.

    python benchmarks/stability.py --runs /work/runs/impala2 --groups base lr1e-3 clip05 --solved 475

    How /work/runs/impala2 was trained (IMPALA CartPole left running for 3M steps, the budget's learning-rate
    annealing included, evaluations of 5 episodes every 50 learner updates):

    zoo run --config configs/impala_cartpole.py --set pipeline.stop_return=None \\
        --set pipeline.max_env_steps=3000000 --set pipeline.eval_every=50 --set pipeline.eval_episodes=5 \\
        --set runs_dir=/work/runs/impala2 --exp-name base --seeds 0 1 2 3 -q   # and --set ... per variant
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from zoo.run.view import RunView  # noqa: E402


def stability(rows: list[dict[str, Any]], solved: float) -> dict[str, Any]:
    """What one run's metrics rows say: the first solved evaluation's env step (None if never), the evaluations
    after it that fell below ``solved`` (count and worst), how many evaluations came after it, the last one."""
    evals = [(int(row["env_steps"]), float(row["eval_return_mean"])) for row in rows
             if row.get("eval_return_mean") is not None]
    first = next((i for i, (_, value) in enumerate(evals) if value >= solved), None)
    after = [value for _, value in evals[first + 1:]] if first is not None else []
    dips = [value for value in after if value < solved]
    lags = [float(row["policy_lag_mean"]) for row in rows if row.get("policy_lag_mean") is not None]
    return {"first_solved": evals[first][0] if first is not None else None, "dips": len(dips),
            "after": len(after), "worst_after": min(dips) if dips else None,
            "last": evals[-1][1] if evals else None, "lag": sum(lags) / len(lags) if lags else None}


def _fmt(value: Any, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", required=True, help="folder holding one folder per group")
    parser.add_argument("--groups", nargs="+", required=True, help="group folders under --runs")
    parser.add_argument("--solved", type=float, required=True, help="the evaluation return that counts as solved")
    args = parser.parse_args(argv)
    print(f"{'group/seed':22s} {'env steps':>10s} {'1st solved':>10s} {'dips':>8s} {'worst dip':>9s} {'last':>7s} "
          f"{'lag':>5s}")
    for group in args.groups:
        found = [RunView(path) for path in sorted((Path(args.runs) / group).glob("seed_*"))]
        runs = [view for view in found if view.finished]
        total = {"dips": 0, "after": 0, "collapsed": 0, "never": 0}
        for view in runs:
            s = stability(view.rows, args.solved)
            total["dips"] += s["dips"]
            total["after"] += s["after"]
            total["never"] += s["first_solved"] is None
            total["collapsed"] += s["first_solved"] is not None and (s["last"] or 0.0) < args.solved
            print(f"{group + '/' + view.path.name:22s} {view.rows[-1]['env_steps']:>10,} "
                  f"{_fmt(s['first_solved']):>10s} {s['dips']:>3d}/{s['after']:<4d} {_fmt(s['worst_after']):>9s} "
                  f"{_fmt(s['last']):>7s} {_fmt(s['lag'], '.1f'):>5s}")
        print(f"{group}: {len(runs)} finished runs ({len(found) - len(runs)} unfinished left out), "
              f"{total['never']} never solved, {total['collapsed']} ended below {args.solved:g}, "
              f"{total['dips']} of {total['after']} evaluations after the first solved one below it\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
