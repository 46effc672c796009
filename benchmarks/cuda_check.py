"""The GPU check of the learning step: SAC on Hopper-v5 on one CUDA GPU against one CPU thread of the same machine,
then every algorithm's config for a short run on CUDA with evaluation and resume. Written for a lent GPU machine
(the device tool: one command of at most 8 minutes); nothing in zoo depends on it.

Overview:
    Part 1, speed: SAC (256x256, batch 256, one update per env step, Adam 3e-4) on Hopper-v5 through
    ``benchmarks/contenders/cuda_loop.py``, one process per contender: CPU eager, CPU compiled (one thread), CUDA eager,
    CUDA compiled without and with CUDA graphs (``accel.cuda_graphs``), CUDA compiled with graphs under bf16; with
    ``--base CHECKOUT`` each CUDA contender again on that checkout's zoo (``base_NAME``: a commit compared against in
    the same run). ``--random`` random steps, ``--warmup`` learning steps (compiles included), ``--measured``
    timed learning steps: the loop's steps per second (env step + acting + update), then learning calls alone
    (updates per second); ``--profile`` adds a cProfile and a torch-profiler iteration of ``cuda_graphs`` (and
    its base) to ``OUT/profiles.txt``.
    Part 2, smoke: each algorithm's config (A2C, PPO, DPPO, IMPALA, SAC, SAC-ACE, TD3, DQN) on ``device=cuda``
    with a small budget and an evaluation, then ``--resume`` with a larger budget; each must finish.

    python benchmarks/cuda_check.py [--device cuda] [--out DIR] [--measured 1000] [--base DIR] [--profile]
    (``--device cpu`` runs the same harness without a GPU, for a dry run of the script itself)

    ACE at its authors' settings (3 x 1024, batch 512; its cost per env step and for 1M steps), part 1 alone:
    python benchmarks/cuda_check.py --config configs/sac_ace_official_hopper.py --skip-smoke \
        --contenders cuda_eager cuda_graphs cuda_graphs_bf16 --measured 2000
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


# (name, device, compile, precision, CUDA graphs 1/0, profiled)
CONTENDERS = [("cpu_eager", "cpu", "off", "fp32", "1", False), ("cpu_compiled", "cpu", "on", "fp32", "1", False),
              ("cuda_eager", "cuda", "off", "fp32", "1", False), ("cuda_compiled", "cuda", "on", "fp32", "0", False),
              ("cuda_graphs", "cuda", "on", "fp32", "1", True), ("cuda_graphs_bf16", "cuda", "on", "bf16", "1", False)]


def speed(out: Path, args: argparse.Namespace) -> list[dict]:
    """Each contender through ``benchmarks/contenders/cuda_loop.py`` in a process of its own (``base_`` ones with the
    zoo of ``--base``, the commit compared against): loop steps/s, updates/s, compile seconds; profiles into
    ``OUT/profiles.txt``."""
    contenders = [c for c in CONTENDERS if args.device == "cuda" or c[1] == "cpu"]
    if args.base:
        contenders += [("base_" + c[0], *c[1:]) for c in contenders if c[1] == "cuda"]
    if args.contenders:  # these, in the order given
        order = args.contenders
        contenders = sorted((c for c in contenders if c[0] in order), key=lambda c: order.index(c[0]))
    results = []
    for name, device, compile_mode, precision, graphs, profiled in contenders:
        loop = ROOT / "benchmarks" / "contenders" / "cuda_loop.py"
        command = [sys.executable, str(loop), "--name", name, "--device", device,
                   "--compile", compile_mode, "--precision", precision, "--graphs", graphs,
                   "--zoo", args.base if name.startswith("base_") else str(ROOT), "--random", str(args.random),
                   "--warmup", str(args.warmup), "--timed", str(args.measured), "--report", str(out / "profiles.txt")]
        if args.config:
            command += ["--config", args.config]
        if profiled and args.profile:
            command.append("--profile")
        start = time.perf_counter()
        try:
            # perf_hints: inductor says there why it did not capture a CUDA graph
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.part_timeout, cwd=ROOT,
                                  env={**os.environ, "TORCH_LOGS": "perf_hints"} if device == "cuda" else None)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            result = json.loads(lines[-1][7:]) if lines else {"contender": name, "exit": done.returncode,
                                                               "output": (done.stdout + done.stderr)[-1500:]}
            result["cudagraph_notes"] = [line[:300] for line in done.stderr.splitlines()
                                         if "cudagraph" in line.lower()][:4]
            if result.get("exit") not in (0, None):
                result["output"] = (done.stdout + done.stderr)[-1500:]
        except subprocess.TimeoutExpired as exc:
            result = {"contender": name, "exit": -9, "output": f"timed out: {str(exc.stdout or '')[-500:]}"}
        result["seconds"] = round(time.perf_counter() - start, 1)
        print(json.dumps({k: v for k, v in result.items() if k != "iterations"}), flush=True)
        results.append(result)
    return results


SMOKE = [("a2c_cartpole.py", 4000), ("ppo_cartpole.py", 4000), ("dppo_cartpole.py", 4000),
         ("impala_cartpole.py", 4000), ("sac_pendulum.py", 1500), ("sac_ace_pendulum.py", 1500),
         ("td3_pendulum.py", 1500), ("dqn_cartpole.py", 3000)]


def smoke(runs: Path, args: argparse.Namespace) -> list[dict]:
    results = []
    for config, budget in SMOKE:
        if args.smoke_configs and config not in args.smoke_configs:
            continue
        name = config.removesuffix(".py")
        common = [f"runs_dir={runs}", f"exp_name=smoke_{name}", f"device={args.device}", "pipeline.eval_every=1",
                  "pipeline.eval_episodes=2", "pipeline.checkpoint_every=1", *args.smoke_set]
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
            sessions = json.loads((runs / f"smoke_{name}" / "environment.json").read_text())["sessions"]
            result["compiled"] = [session.get("compile") for session in sessions]
            result["cuda_graphs"] = [session.get("cuda_graphs") for session in sessions]
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
    parser.add_argument("--measured", type=int, default=1000)
    parser.add_argument("--part-timeout", type=float, default=240.0)
    parser.add_argument("--contenders", nargs="*", help="only these speed contenders (default: all)")
    parser.add_argument("--base", default=None, help="a checkout to compare against (its contenders: base_NAME)")
    parser.add_argument("--profile", action="store_true", help="profile the profiled contenders (cuda_graphs)")
    parser.add_argument("--config", default=None, help="time this off-policy config in part 1 instead of SAC "
                        "256x256 (e.g. configs/sac_ace_official_hopper.py: ACE at its authors' settings)")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-smoke", action="store_true")
    parser.add_argument("--smoke-configs", nargs="*", help="only these smoke configs (default: all)")
    parser.add_argument("--smoke-set", nargs="*", default=[], help="KEY=VALUE overrides for every smoke run "
                        "(e.g. policy.compile=on)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))  # run from a checkout
    import torch

    from zoo.accel.compiled import compiler_status

    facts = {"torch": torch.__version__, "cuda": torch.cuda.is_available(), "compiler": compiler_status() or "ok"}
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
    print(json.dumps(facts), flush=True)
    runs = Path(tempfile.mkdtemp(prefix="zoo_cuda_check_"))
    out = Path(args.out) if args.out else runs
    out.mkdir(parents=True, exist_ok=True)
    results = {"facts": facts, "speed": [] if args.skip_speed else speed(out, args),
               "smoke": [] if args.skip_smoke else smoke(runs, args)}
    (out / "cuda_check.json").write_text(json.dumps(results, indent=1))
    timed = args.config or "SAC Hopper-v5 (256x256, batch 256, 1 update per env step)"
    print(f"\n{timed}: loop = learning steps (env step + update) per second; updates = learning calls of one update "
          "per second, no env step")
    base = {key: next((r.get(key) for r in results["speed"] if r["contender"] == "cpu_eager"), None)
            for key in ("loop_steps_per_s", "updates_per_s")}
    for r in results["speed"]:
        cells = []
        for key in ("loop_steps_per_s", "updates_per_s"):
            value = r.get(key)
            ratio = f" ({value / base[key]:.2f}x)" if value and base[key] else ""
            cells.append(f"{value if value is not None else 'failed':>8}{ratio:<9}")
        extra = f"compile {r.get('compile_seconds')} s" if r.get("compile_seconds") else ""
        if r.get("loop_steps_per_s"):  # the loop's rate alone: no evaluations, no causal fits
            extra += f" (1M steps: {1e6 / r['loop_steps_per_s'] / 3600:.1f} h)"
        print(f"  {r['contender']:<22} loop {cells[0]} updates {cells[1]} {extra}")
    print("smoke:", " ".join(f"{r['config']}:{'ok' if r.get('resume_exit') == 0 else 'FAIL'}"
                             for r in results["smoke"]))


if __name__ == "__main__":
    main()
