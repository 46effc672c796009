"""Several seeds of one config: ``zoo run --config X --seeds 0 1 2 [--jobs N]``.

Each seed trains into ``<runs_dir>/<exp_name>/seed_<k>/`` (the usual run directory, resumable on its own), one
after another in this process, or ``--jobs N`` at a time as separate ``zoo run`` processes (``zoo.run.children``:
they die with this process, a stop signal reaches each of them once, and each one's summary is read from a file).
The result is a table of each seed's outcome (why it stopped, steps, wall time, the last training and evaluation
means) and their mean. ``zoo run --resume RUNS/EXP --seeds 0 1 2`` continues those seeds' run directories the same
way (each as ``zoo run --resume RUNS/EXP/seed_<k>``, with the same ``--set``). Which folder may be a parent of seeds
is decided before anything trains (``zoo.run.seeds_parent``).
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import load_config_file
from ..config.resolve import resolve_config
from ..errors import ConfigError
from .children import ChildRuns, Ended
from .seeds_parent import check_new_seeds_parent, resumed_seed_runs
from .train import train
from .view import RunView

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _last_eval(run_dir: str | None) -> float | None:
    return None if run_dir is None else RunView(run_dir).last("eval_return_mean")


def _seed_overrides(overrides: list[Any], seed: int, parent: Path) -> list[Any]:
    return [*overrides, ("seed", seed), ("runs_dir", str(parent)), ("exp_name", f"seed_{seed}")]


def run_seeds(config: str | None, overrides: list[Any], seeds: list[int], jobs: int = 1,
              resume: str | None = None) -> list[dict[str, Any]]:
    """Train ``config`` once per seed, or with ``resume`` (a folder of seeds) continue each seed's run directory
    there (see the module docstring); returns one result per seed, in seed order.

    A result holds ``seed``, ``run_dir``, ``reason`` (or ``failed`` with ``error``), ``env_steps``, ``wall_time``,
    ``episode_return_mean`` and ``eval_return_mean`` (the last evaluation, if any).
    """
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds has repeated seeds {seeds}: give each seed once")
    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}")
    if resume is not None:
        runs = resumed_seed_runs(Path(resume), seeds)

        def train_seed(seed: int) -> dict[str, Any]:
            return train(None, overrides, resume=runs[seed])

        def command(seed: int) -> list[str]:
            return [*_zoo_run(), "--resume", str(runs[seed]), *_set_args(overrides)]
    else:
        if config is None:
            raise ConfigError("--seeds needs --config FILE (new seeds) or --resume RUNS/EXP (continue them)")
        cfg = resolve_config(load_config_file(config), overrides, Path(config).parent)  # one-line errors up front
        for seed in seeds:
            resolve_config(load_config_file(config), [*overrides, ("seed", seed)], Path(config).parent)
        parent = Path(cfg.runs_dir) / cfg.exp_name
        check_new_seeds_parent(parent, cfg, seeds)  # nothing written yet

        def train_seed(seed: int) -> dict[str, Any]:
            return train(config, _seed_overrides(overrides, seed, parent))

        def command(seed: int) -> list[str]:
            return [*_zoo_run(), "--config", config, *_set_args(_seed_overrides(overrides, seed, parent))]
    if jobs == 1:
        results = []
        for seed in seeds:
            summary = train_seed(seed)
            results.append({"seed": seed, **summary, "eval_return_mean": _last_eval(summary["run_dir"])})
            if summary["reason"] == "interrupted":
                break
        return results
    return _in_processes(command, seeds, jobs)


def _zoo_run() -> list[str]:
    return [sys.executable, "-m", "zoo", "run"]


def _set_args(overrides: list[Any]) -> list[str]:
    args = []
    for item in overrides:
        key, value = item if isinstance(item, tuple) else str(item).split("=", 1)
        args += ["--set", f"{key}={value}"]
    return args


def _in_processes(command: Callable[[int], list[str]], seeds: list[int], jobs: int) -> list[dict]:
    """The seeds as ``zoo run`` children (``command(seed)``; ``ChildRuns``: they die with this process); a stop
    signal goes on to the running ones, which save, and no further seed starts: the results then hold the seeds that
    ran."""
    stopped: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        stopped.append(signum)
        children.send(signum)  # each run saves its checkpoint and ends as interrupted

    waiting, results, children = list(seeds), {}, ChildRuns()
    previous = {signum: signal.signal(signum, on_signal) for signum in _SIGNALS}
    try:
        while waiting or len(children):
            while waiting and len(children) < jobs and not stopped:
                seed = waiting.pop(0)
                children.start(seed, command(seed))
            if stopped:
                waiting = []
            time.sleep(0.1)
            for seed, ended in children.ended():
                results[seed] = _result(seed, ended, stopped)
                print(f"zoo: seed {seed}: {results[seed]['reason']}", file=sys.stderr, flush=True)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for seed, ended in children.stop():
            results[seed] = _result(seed, ended, stopped)
    for seed in seeds:  # stopped before they started: interrupted, with the signal's exit code
        if seed not in results:
            results[seed] = {**_result(seed, None), "reason": "interrupted", "error": "not started",
                             "exit_code": 128 + int(stopped[0])}
    return [results[seed] for seed in seeds]


def _result(seed: int, ended: Ended | None, stopped: list[int] | None = None) -> dict[str, Any]:
    summary = None if ended is None else ended.summary
    if summary is None and ended is not None and stopped and ended.code in (-stopped[0], 128 + stopped[0]):
        # Our stop signal reached it while it was still starting (before it handles signals): nothing to save.
        return {**_result(seed, None), "reason": "interrupted", "error": "stopped while starting",
                "exit_code": 128 + int(stopped[0])}
    if summary is None:
        error = None if ended is None else ended.error or f"exit code {ended.code}"
        return {"seed": seed, "reason": "failed", "error": error,
                "run_dir": None, "env_steps": None, "wall_time": None, "episode_return_mean": None,
                "eval_return_mean": None}
    result = {"seed": seed, "run_dir": summary["run_dir"], "reason": summary["reason"],
              "env_steps": summary["env_steps"], "wall_time": summary["wall_time"],
              "episode_return_mean": summary["episode_return_mean"],
              "eval_return_mean": _last_eval(summary["run_dir"])}
    if "exit_code" in summary:
        result["exit_code"] = summary["exit_code"]
    return result


def table(results: list[dict[str, Any]]) -> str:
    """The per-seed table and the mean row (of the seeds that have a value)."""
    def cell(value: Any, spec: str) -> str:
        return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)

    lines = [f"{'seed':>6} {'reason':>14} {'env_steps':>10} {'wall_s':>8} {'train_return':>13} {'eval_return':>12}  "
             f"run_dir"]
    for row in results:
        lines.append(f"{row['seed']:>6} {row['reason']:>14} {cell(row['env_steps'], ',d'):>10} "
                     f"{cell(row['wall_time'], '.1f'):>8} {cell(row['episode_return_mean'], '.2f'):>13} "
                     f"{cell(row['eval_return_mean'], '.2f'):>12}  {row.get('run_dir') or row.get('error', '')}")

    def mean(key: str) -> float | None:
        values = [row[key] for row in results if row.get(key) is not None]
        return sum(values) / len(values) if values else None

    lines.append(f"{'mean':>6} {'':>14} {cell(mean('env_steps'), ',.0f'):>10} {cell(mean('wall_time'), '.1f'):>8} "
                 f"{cell(mean('episode_return_mean'), '.2f'):>13} {cell(mean('eval_return_mean'), '.2f'):>12}")
    return "\n".join(lines)


def failed(results: list[dict[str, Any]]) -> bool:
    """Whether any seed failed."""
    return any(row["reason"] == "failed" for row in results)

