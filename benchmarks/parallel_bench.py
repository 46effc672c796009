"""DPPO scaling: env steps/s, learner updates/s and all-reduce time per update for 1, 2, 4 ... workers.

Overview:
    Runs ``configs/dppo_pendulum.py`` (or ``--config``) through ``zoo.train`` once per worker count, with the same
    per-worker settings (envs, rollout length, minibatch size, epochs) and ``--iterations`` iterations each, no
    evaluation and no periodic checkpoints, in one benchmark run (compare ratios within it, never seconds across
    runs). One worker runs in-process on ``parallel_sync``; more are spawned on loopback gloo by ``zoo run``'s
    own launcher. Times are the training loop's (from the first iteration on: process start-up excluded, and
    shown apart). Prints one row per count and the throughput ratio against the first count, the machine's own
    ceiling for each count up to its cores (N plain CPU-bound Python processes at once against one alone: no
    communication, so no worker count can scale better), then what the measured per-update costs predict for
    ``--predict`` workers (default 64 on 8 machines).

    python benchmarks/parallel_bench.py --workers 1 2 4 --iterations 30

    IMPALA (``--actors 1 2 4``, ``--impala-config``, default ``configs/impala_cartpole.py``): one run per actor
    count with the same per-actor settings and ``--impala-steps`` env steps, printing the actors' env steps/s
    (the ratio against the first count), the learner's samples/s (while it learns), the learner's idle fraction
    (waiting for unrolls) and the mean policy lag, from the last metrics row of each run.

    python benchmarks/parallel_bench.py --workers --actors 1 2 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

import zoo  # noqa: E402
from zoo.config import load_config_file  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _measure(config: dict, workers: int, iterations: int, runs_dir: str) -> dict[str, float]:
    pipe = config["pipeline"]
    per_iteration = pipe["num_envs"] * pipe["rollout_steps"] * workers
    overrides = [
        f"pipeline.world_size={workers}", f"pipeline.max_env_steps={per_iteration * iterations}",
        "pipeline.eval_every=0", "pipeline.checkpoint_every=0", "pipeline.stop_return=None",
        "pipeline.log_every_s=1000000", f"runs_dir={runs_dir}", f"exp_name=w{workers}",
    ]
    start = time.perf_counter()
    summary = zoo.train(config, overrides)
    total = time.perf_counter() - start
    rows = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    loop = summary["wall_time"]
    updates = sum(row.get("updates", 0.0) for row in rows)
    allreduce = [row["allreduce_ms"] for row in rows if "allreduce_ms" in row]
    return {
        "workers": workers, "env_steps": summary["env_steps"], "loop_s": loop, "startup_s": total - loop,
        "sps": summary["env_steps"] / loop, "updates_per_s": updates / loop,
        "allreduce_ms": sum(allreduce) / len(allreduce) if allreduce else 0.0,
        "iteration_ms": 1000.0 * loop / len(rows), "updates_per_iteration": updates / len(rows),
    }


_PYTHON_WORK = "s = 0\nfor i in range(8_000_000):\n    s += i"  # CPU-bound interpreter work, no imports


def _corun_ceiling(copies: int, rounds: int = 3) -> float:
    """How much work ``copies`` CPU-bound Python processes do at once, against one alone (``copies`` = linear).

    No communication at all: what the machine itself allows N workers (cores that share a physical core or its
    caches slow each other down). Alternating rounds, medians.
    """
    def wall(n: int) -> float:
        start = time.perf_counter()
        for process in [subprocess.Popen([sys.executable, "-c", _PYTHON_WORK]) for _ in range(n)]:
            process.wait()
        return time.perf_counter() - start

    alone, together = [], []
    for _ in range(rounds):
        alone.append(wall(1))
        together.append(wall(copies))
    return copies * statistics.median(alone) / statistics.median(together)


def _measure_impala(config: dict, actors: int, steps: int, runs_dir: str) -> dict[str, float]:
    overrides = [
        f"pipeline.num_actors={actors}", f"pipeline.max_env_steps={steps}", "pipeline.eval_every=0",
        "pipeline.checkpoint_every=0", "pipeline.stop_return=None", "pipeline.log_every_s=1000000",
        f"runs_dir={runs_dir}", f"exp_name=a{actors}",
    ]
    start = time.perf_counter()
    summary = zoo.train(config, overrides)
    total = time.perf_counter() - start
    rows = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    return {"actors": actors, "actor_sps": last["actor_sps"], "learner_sps": last["learner_sps"],
            "idle": last["learner_idle"], "lag": sum(row["policy_lag_mean"] for row in rows) / len(rows),
            "lag_max": max(row["policy_lag_max"] for row in rows), "startup_s": total - summary["wall_time"]}


def _impala(args: argparse.Namespace) -> None:
    config = load_config_file(args.impala_config)
    with tempfile.TemporaryDirectory() as runs_dir:
        results = [_measure_impala(config, actors, args.impala_steps, runs_dir) for actors in args.actors]
    base = results[0]
    print(f"\nIMPALA ({Path(args.impala_config).name}, {args.impala_steps:,} env steps per count)")
    print(f"{'actors':>6} {'actor env steps/s':>18} {'ratio':>6} {'learner samples/s':>18} {'learner idle':>13} "
          f"{'lag mean':>9} {'lag max':>8} {'start-up s':>11}")
    for row in results:
        print(f"{row['actors']:>6} {row['actor_sps']:>18,.0f} {row['actor_sps'] / base['actor_sps']:>6.2f} "
              f"{row['learner_sps']:>18,.0f} {row['idle']:>13.2f} {row['lag']:>9.2f} {row['lag_max']:>8.0f} "
              f"{row['startup_s']:>11.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "dppo_pendulum.py"))
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 4], help="DPPO worker counts (none: skip)")
    parser.add_argument("--actors", type=int, nargs="*", default=[], help="IMPALA actor counts (none: skip)")
    parser.add_argument("--impala-config", default=str(ROOT / "configs" / "impala_cartpole.py"))
    parser.add_argument("--impala-steps", type=int, default=300_000)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--predict", type=int, nargs=2, default=[64, 8], metavar=("WORKERS", "MACHINES"))
    args = parser.parse_args()
    if args.actors:
        _impala(args)
    if not args.workers:
        return
    config = load_config_file(args.config)
    results = []
    with tempfile.TemporaryDirectory() as runs_dir:
        for workers in args.workers:
            results.append(_measure(config, workers, args.iterations, runs_dir))
    base = results[0]
    print(f"{'workers':>7} {'env steps/s':>12} {'ratio':>6} {'updates/s':>10} {'allreduce ms':>13} "
          f"{'iteration ms':>13} {'start-up s':>11}")
    for row in results:
        print(f"{row['workers']:>7} {row['sps']:>12,.0f} {row['sps'] / base['sps']:>6.2f} "
              f"{row['updates_per_s']:>10.1f} {row['allreduce_ms']:>13.3f} {row['iteration_ms']:>13.1f} "
              f"{row['startup_s']:>11.1f}")
    for workers in sorted({row["workers"] for row in results if 1 < row["workers"] <= (os.cpu_count() or 1)}):
        print(f"machine ceiling for {workers} workers: {_corun_ceiling(workers):.2f}x ({workers} CPU-bound Python "
              f"processes at once against one alone, no communication: the most the ratio above can reach here)")
    # A prediction from this machine's numbers: each worker's iteration costs its own compute (what one worker
    # takes) plus one all-reduce per update, whose cost grows like a ring's, ~2 (W - 1) / W of the buffer's
    # transfer plus a latency term per hop; across machines the per-hop latency is the network's.
    # Counts above this machine's cores measure oversubscription, not communication: predict from the others.
    multi = [row for row in results if 1 < row["workers"] <= (os.cpu_count() or 1)]
    if multi:
        workers, machines = args.predict
        measured = max(multi, key=lambda row: row["workers"])
        compute_ms = base["iteration_ms"]
        per_update = measured["allreduce_ms"]
        updates = base["updates_per_iteration"]
        hops = 2 * (workers - 1)
        network_hop_ms = 0.05  # a 10-25 GbE round trip on one rack, for a 0.1-0.4 MB gradient
        ring_ms = per_update + hops * network_hop_ms
        iteration_ms = compute_ms + updates * ring_ms
        steps = config["pipeline"]["num_envs"] * config["pipeline"]["rollout_steps"]
        print(f"\nprediction for {workers} workers on {machines} machines (one core each, this machine's speed): "
              f"iteration {compute_ms:.0f} ms of compute + {updates:.0f} all-reduces x ~{ring_ms:.1f} ms "
              f"(measured {per_update:.2f} ms at {measured['workers']} workers + {hops} ring hops x "
              f"{network_hop_ms} ms) = {iteration_ms:.0f} ms -> ~{workers * steps / iteration_ms * 1000:,.0f} "
              f"env steps/s, {compute_ms / iteration_ms:.0%} of linear scaling")


if __name__ == "__main__":
    main()
