"""Several seeds of one config: ``zoo run --config X --seeds 0 1 2 [--jobs N]``.

Each seed trains into ``<runs_dir>/<exp_name>/seed_<k>/`` (the usual run directory, resumable on its own), one
after another in this process, or ``--jobs N`` at a time as separate ``zoo run`` processes. The result is a table of
each seed's outcome (why it stopped, steps, wall time, the last training and evaluation means) and their mean.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..config import load_config_file
from ..config.resolve import resolve_config
from ..errors import ConfigError
from .train import train


def _last_eval(run_dir: str | None) -> float | None:
    if run_dir is None or not (Path(run_dir) / "metrics.jsonl").exists():
        return None
    found = None
    for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines():
        value = json.loads(line).get("eval_return_mean") if line.strip() else None
        if value is not None:
            found = value
    return found


def _seed_overrides(overrides: list[Any], seed: int, parent: Path) -> list[Any]:
    return [*overrides, ("seed", seed), ("runs_dir", str(parent)), ("exp_name", f"seed_{seed}")]


def run_seeds(config: str, overrides: list[Any], seeds: list[int], jobs: int = 1) -> list[dict[str, Any]]:
    """Train ``config`` once per seed (see the module docstring); returns one result per seed, in seed order.

    A result holds ``seed``, ``run_dir``, ``reason`` (or ``failed`` with ``error``), ``env_steps``, ``wall_time``,
    ``episode_return_mean`` and ``eval_return_mean`` (the last evaluation, if any).
    """
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds has repeated seeds {seeds}: give each seed once")
    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}")
    cfg = resolve_config(load_config_file(config), overrides, Path(config).parent)  # one-line errors up front
    for seed in seeds:
        resolve_config(load_config_file(config), [*overrides, ("seed", seed)], Path(config).parent)
    parent = Path(cfg.runs_dir) / cfg.exp_name
    if jobs == 1:
        results = []
        for seed in seeds:
            summary = train(config, _seed_overrides(overrides, seed, parent))
            results.append({"seed": seed, **summary, "eval_return_mean": _last_eval(summary["run_dir"])})
            if summary["reason"] == "interrupted":
                break
        return results
    return _in_processes(config, overrides, seeds, jobs, parent)


def _in_processes(config: str, overrides: list[Any], seeds: list[int], jobs: int, parent: Path) -> list[dict]:
    def command(seed: int) -> list[str]:
        args = [sys.executable, "-m", "zoo", "run", "--config", config]
        for item in _seed_overrides(overrides, seed, parent):
            key, value = item if isinstance(item, tuple) else str(item).split("=", 1)
            args += ["--set", f"{key}={value}"]
        return args

    waiting, running, results = list(seeds), {}, {}
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                seed = waiting.pop(0)
                running[seed] = subprocess.Popen(command(seed), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                 text=True)
            time.sleep(0.1)
            for seed, process in list(running.items()):
                if process.poll() is None:
                    continue
                out, err = process.communicate()
                del running[seed]
                results[seed] = _parse(seed, process.returncode, out, err)
                print(f"zoo: seed {seed}: {results[seed]['reason']}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:  # the children got the Ctrl-C too: they save and stop
        for process in running.values():
            process.wait()
        raise
    return [results[seed] for seed in seeds]


def _parse(seed: int, code: int, out: str, err: str) -> dict[str, Any]:
    last = next((line for line in reversed(out.splitlines()) if line.startswith("run_dir=")), None)
    if last is None:
        errors = [line for line in err.splitlines() if line.startswith("zoo: error:")]
        return {"seed": seed, "reason": "failed", "error": errors[-1] if errors else f"exit code {code}",
                "run_dir": None, "env_steps": None, "wall_time": None, "episode_return_mean": None,
                "eval_return_mean": None}
    fields = dict(part.split("=", 1) for part in last.split())
    mean = fields["episode_return_mean"]
    return {"seed": seed, "run_dir": fields["run_dir"], "reason": fields["reason"],
            "env_steps": int(fields["env_steps"]), "wall_time": float(fields["wall_time"].rstrip("s")),
            "episode_return_mean": None if mean == "None" else float(mean),
            "eval_return_mean": _last_eval(fields["run_dir"])}


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

