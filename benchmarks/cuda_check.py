"""The GPU check of the learning step: SAC on Hopper-v5 on one CUDA GPU against one CPU thread of the same machine,
then every algorithm's config for a short run on CUDA with evaluation and resume. Written for a lent GPU machine
(the device tool: one command of at most 8 minutes); nothing in zoo depends on it.

Overview:
    Part 1, speed: ``zoo run`` of SAC (256x256, batch 256, one update per env step, Adam 3e-4) on Hopper-v5 for
    ``--random`` uniformly random steps, ``--warmup`` learning steps (compiles included), then ``--measured``
    learning steps, for each contender: CPU eager, CPU compiled (one thread), CUDA eager, CUDA compiled without
    and with CUDA graphs (``ZOO_CUDA_GRAPHS``), CUDA compiled with graphs under bf16. The rate is the learning
    steps per second between the warm-up's last metrics row and the run's last (env step + update each), read
    from ``metrics.jsonl``; the compile seconds from ``environment.json``.
    Part 2, smoke: each algorithm's config (A2C, PPO, DPPO, IMPALA, SAC, SAC-ACE, TD3, DQN) on ``device=cuda``
    with a small budget and an evaluation, then ``--resume`` with a larger budget; each must finish.

    python benchmarks/cuda_check.py [--device cuda] [--out DIR] [--measured 2000]
    (``--device cpu`` runs the same harness without a GPU, for a dry run of the script itself)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def zoo(args: list[str], env: dict[str, str] | None = None, timeout: float = 300) -> tuple[int, str, float]:
    """``python -m zoo ARGS`` from the checkout: exit code, the output's tail, seconds."""
    start = time.perf_counter()
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               **(env or {})}
    try:
        done = subprocess.run([sys.executable, "-m", "zoo", *args, "-q"], capture_output=True, text=True,
                              timeout=timeout, env=environ, cwd=ROOT)
        code, out = done.returncode, (done.stdout + done.stderr)[-1500:]
    except subprocess.TimeoutExpired as exc:
        code, out = -9, f"timed out after {timeout:.0f} s: {str(exc.stdout or '')[-500:]}"
    return code, out, time.perf_counter() - start


def speed_config(runs: Path, name: str, device: str, compile_mode: str, precision: str, args: argparse.Namespace,
                 ) -> Path:
    steps = args.random + args.warmup + args.measured
    config = {"exp_name": name, "seed": 0, "runs_dir": str(runs), "device": device, "torch_threads": 1,
              "env": {"id": "Hopper-v5"},
              "policy": {"type": "sac", "hidden_sizes": [256, 256], "batch_size": 256, "compile": compile_mode,
                         "precision": precision},
              "pipeline": {"buffer_size": steps, "learning_starts": args.random, "steps_per_iteration": 250,
                           "max_env_steps": steps, "eval_every": 0, "checkpoint_every": 0, "save_replay": False}}
    path = runs / f"{name}.json"
    path.write_text(json.dumps(config))
    return path


def speed(runs: Path, args: argparse.Namespace) -> list[dict]:
    contenders = [("cpu_eager", "cpu", "off", "fp32", "1"), ("cpu_compiled", "cpu", "on", "fp32", "1")]
    if args.device == "cuda":
        contenders += [("cuda_eager", "cuda", "off", "fp32", "1"), ("cuda_compiled", "cuda", "on", "fp32", "0"),
                       ("cuda_graphs", "cuda", "on", "fp32", "1"), ("cuda_graphs_bf16", "cuda", "on", "bf16", "1")]
    results = []
    for name, device, compile_mode, precision, graphs in contenders:
        if args.contenders and name not in args.contenders:
            continue
        config = speed_config(runs, name, device, compile_mode, precision, args)
        code, out, seconds = zoo(["run", "--config", str(config)], {"ZOO_CUDA_GRAPHS": graphs}, args.part_timeout)
        result = {"contender": name, "exit": code, "seconds": round(seconds, 1)}
        if code == 0:
            rows = [json.loads(line) for line in (runs / name / "metrics.jsonl").read_text().splitlines()]
            start = next(r for r in rows if r["env_steps"] >= args.random + args.warmup)
            end = rows[-1]
            result["steps_per_s"] = round((end["env_steps"] - start["env_steps"]) /
                                          (end["wall_time"] - start["wall_time"]), 1)
            session = json.loads((runs / name / "environment.json").read_text())["sessions"][-1]
            result.update({key: session.get(key) for key in ("compile", "compile_seconds", "compile_graphs",
                                                             "cuda_graphs", "compile_failure", "precision")})
        else:
            result["output"] = out
        print(json.dumps(result), flush=True)
        results.append(result)
    return results


SMOKE = [("a2c_cartpole.py", 4000), ("ppo_cartpole.py", 4000), ("dppo_cartpole.py", 4000),
         ("impala_cartpole.py", 4000), ("sac_pendulum.py", 1500), ("sac_ace_pendulum.py", 1500),
         ("td3_pendulum.py", 1500), ("dqn_cartpole.py", 3000)]


def smoke(runs: Path, args: argparse.Namespace) -> list[dict]:
    results = []
    for config, budget in SMOKE:
        name = config.removesuffix(".py")
        common = [f"runs_dir={runs}", f"exp_name=smoke_{name}", f"device={args.device}", "pipeline.eval_every=1",
                  "pipeline.eval_episodes=2", "pipeline.checkpoint_every=1"]
        if "learning_starts" in (ROOT / "configs" / config).read_text():
            common.append("pipeline.learning_starts=500")
        first = zoo(["run", "--config", f"configs/{config}", *[x for s in common for x in ("--set", s)],
                     "--set", f"pipeline.max_env_steps={budget}"], timeout=args.part_timeout)
        result = {"config": config, "first_exit": first[0], "first_s": round(first[2], 1)}
        if first[0] == 0:
            resumed = zoo(["run", "--resume", str(runs / f"smoke_{name}"), "--set",
                           f"pipeline.max_env_steps={2 * budget}"], timeout=args.part_timeout)
            result.update(resume_exit=resumed[0], resume_s=round(resumed[2], 1))
            rows = [json.loads(line) for line in (runs / f"smoke_{name}" / "metrics.jsonl").read_text().splitlines()]
            evals = [r["eval_return_mean"] for r in rows if r.get("eval_return_mean") is not None]
            result.update(env_steps=rows[-1]["env_steps"], evals=len(evals), last_eval=evals[-1] if evals else None)
            if resumed[0] != 0:
                result["output"] = resumed[1]
        else:
            result["output"] = first[1]
        print(json.dumps(result), flush=True)
        results.append(result)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--out", default=None, help="folder for the JSON results (default: a temporary one)")
    parser.add_argument("--random", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--measured", type=int, default=2000)
    parser.add_argument("--part-timeout", type=float, default=240.0)
    parser.add_argument("--contenders", nargs="*", help="only these speed contenders (default: all)")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-smoke", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))  # run from a checkout
    import torch

    from zoo.policies.compiled import compiler_status

    facts = {"torch": torch.__version__, "cuda": torch.cuda.is_available(), "compiler": compiler_status() or "ok"}
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
    print(json.dumps(facts), flush=True)
    runs = Path(tempfile.mkdtemp(prefix="zoo_cuda_check_"))
    results = {"facts": facts, "speed": [] if args.skip_speed else speed(runs, args),
               "smoke": [] if args.skip_smoke else smoke(runs, args)}
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "cuda_check.json").write_text(json.dumps(results, indent=1))
    rate = {r["contender"]: r.get("steps_per_s") for r in results["speed"]}
    base = rate.get("cpu_eager") or None
    print("\nSAC Hopper-v5 (256x256, batch 256, 1 update per env step), learning steps per second:")
    for name, value in rate.items():
        ratio = f"{value / base:5.2f}x cpu_eager" if value and base else ""
        print(f"  {name:<18} {value if value is not None else 'failed':>8}  {ratio}")
    print("smoke:", " ".join(f"{r['config']}:{'ok' if r.get('resume_exit') == 0 else 'FAIL'}"
                             for r in results["smoke"]))


if __name__ == "__main__":
    main()
