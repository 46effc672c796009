"""SAC on Hopper-v5, zoo against its peers, side by side: one pinned CPU, one thread, every contender interleaved.

Overview:
    Each contender is a fresh process pinned to the same CPU (``--cpu``), one thread (torch, XLA, BLAS), at the
    same settings: Hopper-v5, actor and twin critics 256x256, batch 256, Adam 3e-4, automatic temperature (target
    -|A|), gamma 0.99, tau 0.005, one update per env step (actor, temperature and targets every update),
    ``--random`` uniformly random steps first, then ``--warmup`` learning steps (compiles happen there) and
    ``--measured`` learning steps on the clock. Contenders:

    - zoo fp32 / bf16, eager / compiled (``policy.compile``): ``zoo run`` of such a config, timed from its
      metrics rows (wall time per row of 250 env steps);
    - ``ref`` fp32 / bf16: ``compiled_sac_reference.py``, a LeanRL-style one-graph compiled SAC of our own;
    - SB3 2.9.2's SAC and SBX's (SB3's API in JAX, one ``jax.jit`` update), each in its own virtualenv
      (``--sb3-python``, ``--sbx-python``; skipped with a line when absent), timed by a callback.

    With ``--base CHECKOUT`` every zoo contender runs a second time as ``base_<name>`` with the zoo of that checkout
    (another commit, e.g. a ``git worktree``): old against new, interleaved in the same rounds.

    For each: ms per loop step (env step, acting, storing, one update) after the warm-up, ms per step of the random
    phase (the env and the loop's bookkeeping without learning), their difference (the update and acting, per
    step), the compile (or JIT) seconds, and the ratio of loop steps per second to zoo fp32 eager's (and, with
    ``--base``, each zoo contender's to its base). Rounds are interleaved (contender order rotates) and each
    contender's median round is reported.

    python benchmarks/sac_speed.py [--rounds 3] [--measured 3000] [--contenders zoo_fp32 sbx ...] [--base DIR]
    (docs/speed.md quotes its runs)
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

ROOT = Path(__file__).resolve().parents[1]
ZOO_CONTENDERS = {"zoo_fp32": ("off", "fp32"), "zoo_bf16": ("off", "bf16"), "zoo_fp32_compiled": ("on", "fp32"),
                  "zoo_bf16_compiled": ("on", "bf16")}
CONTENDERS = [*ZOO_CONTENDERS, "ref_fp32", "ref_bf16", "sb3", "sbx"]
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
              "JAX_PLATFORMS": "cpu"}


def run_child(command: list[str], cpu: int, timeout: float, zoo: Path = ROOT,
              extra: dict[str, str] | None = None) -> dict:
    """Run ``command`` pinned to ``cpu`` with the zoo of the checkout ``zoo`` (and the variables ``extra``); its last
    stdout line is its JSON result."""
    environ = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(zoo), "SAC_SPEED_ZOO": str(zoo), **(extra or {})}
    done = subprocess.run(["taskset", "-c", str(cpu), *command], capture_output=True, text=True, timeout=timeout,
                          env=environ, cwd=ROOT)
    if done.returncode != 0:
        return {"error": (done.stdout + done.stderr).strip().splitlines()[-1][:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def zoo_child(name: str, args: argparse.Namespace, runs: Path) -> list[str]:
    compile_mode, precision = ZOO_CONTENDERS[name.removeprefix("base_")]
    steps = args.random + args.warmup + args.measured
    config = {"exp_name": name, "seed": 0, "runs_dir": str(runs), "torch_threads": 1, "env": {"id": "Hopper-v5"},
              "policy": {"type": "sac", "hidden_sizes": [256, 256], "batch_size": 256, "actor_learning_rate": 3e-4,
                         "critic_learning_rate": 3e-4, "alpha_learning_rate": 3e-4, "compile": compile_mode,
                         "precision": precision},
              "pipeline": {"buffer_size": steps, "learning_starts": args.random, "steps_per_iteration": 250,
                           "max_env_steps": steps, "eval_every": 0, "checkpoint_every": 0, "save_replay": False}}
    if not name.startswith("base_"):  # --zoo-set: keys of this checkout's config (an older one may not know them)
        for item in args.zoo_set or []:
            key, value = item.split("=", 1)
            *sections, last = key.split(".")
            node = config
            for section in sections:
                node = node.setdefault(section, {})
            node[last] = json.loads(value) if value[:1] in "[{0123456789-tfn" else value
    path = runs / f"{name}.json"
    path.write_text(json.dumps(config))
    return [sys.executable, __file__, "--zoo-child", str(path)]


def zoo_result(config_path: str) -> None:
    """In the child: run zoo on the config, then time it from its metrics rows."""
    # the checkout asked for, not an editable install of this one (whose import hook would win over PYTHONPATH)
    sys.meta_path[:] = [finder for finder in sys.meta_path if "__editable__" not in type(finder).__module__
                        and "__editable__" not in getattr(finder, "__name__", "")]
    sys.path.insert(0, os.environ["SAC_SPEED_ZOO"])
    import zoo
    from zoo.run import train

    assert os.path.realpath(zoo.__file__).startswith(os.path.realpath(os.environ["SAC_SPEED_ZOO"])), zoo.__file__

    config = json.loads(Path(config_path).read_text())
    run = Path(train(config)["run_dir"])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # the last row before the one that holds the first learning call (its compile with it)
    random_end = [r for r in rows if r["env_steps"] < config["pipeline"]["learning_starts"]][-1]
    first = rows[0]
    warm = next(r for r in rows if r["env_steps"] >= int(os.environ["SAC_SPEED_TIMED_FROM"]))
    end = rows[-1]
    session = json.loads((run / "environment.json").read_text())["sessions"][-1]
    per_row = (random_end["wall_time"] - first["wall_time"]) / max(random_end["env_steps"] - first["env_steps"], 1)
    print(json.dumps({"random_ms": per_row * 1e3,
                      "loop_ms": (end["wall_time"] - warm["wall_time"]) / (end["env_steps"] - warm["env_steps"]) * 1e3,
                      "compile_s": session.get("compile_seconds") or 0.0}))


def peer_result(kind: str, args: argparse.Namespace) -> None:
    """In the child (the peer's virtualenv): SB3's or SBX's SAC, timed by a callback."""
    import gymnasium as gym

    if kind == "sbx":
        from sbx import SAC
    else:
        import torch
        from stable_baselines3 import SAC

        torch.set_num_threads(1)
    from stable_baselines3.common.callbacks import BaseCallback

    marks: dict[int, float] = {}
    wanted = {1, args.random, args.random + 1, args.random + args.warmup, args.random + args.warmup + args.measured}

    class Marks(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps in wanted:
                marks[self.num_timesteps] = time.perf_counter()
            return True

    steps = args.random + args.warmup + args.measured
    model = SAC("MlpPolicy", gym.make("Hopper-v5"), learning_rate=3e-4, buffer_size=steps, learning_starts=args.random,
                batch_size=256, tau=0.005, gamma=0.99, train_freq=1, gradient_steps=1,
                policy_kwargs=dict(net_arch=[256, 256]), seed=0, verbose=0, **({} if kind == "sbx" else
                                                                                {"device": "cpu"}))
    model.learn(steps, callback=Marks())
    start, timed = args.random + args.warmup, args.measured
    print(json.dumps({"random_ms": (marks[args.random] - marks[1]) / (args.random - 1) * 1e3,
                      "loop_ms": (marks[start + timed] - marks[start]) / timed * 1e3,
                      "compile_s": marks[args.random + 1] - marks[args.random]}))


def command_for(name: str, args: argparse.Namespace, runs: Path) -> list[str] | None:
    common = ["--random", str(args.random), "--warmup", str(args.warmup), "--measured", str(args.measured)]
    if name.removeprefix("base_") in ZOO_CONTENDERS:
        return zoo_child(name, args, runs)
    if name.startswith("ref"):
        script = ROOT / "benchmarks" / "contenders" / "compiled_sac_reference.py"
        return [sys.executable, str(script), "--learning-starts",
                str(args.random), "--warmup", str(args.warmup), "--steps", str(args.measured),
                *(["--bf16"] if name == "ref_bf16" else [])]
    python = args.sb3_python if name == "sb3" else args.sbx_python
    if not python or not Path(python).exists():
        return None
    return [python, __file__, "--peer-child", name, *common]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--random", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=250)
    parser.add_argument("--measured", type=int, default=3000)
    parser.add_argument("--cpu", type=int, default=max(os.cpu_count() - 1, 0), help="the CPU every child runs on")
    parser.add_argument("--contenders", nargs="*", default=CONTENDERS, choices=CONTENDERS)
    parser.add_argument("--sb3-python", default=os.environ.get("ZOO_SB3_PYTHON", "python"),
                        help="the Python of a venv with stable-baselines3 (default: $ZOO_SB3_PYTHON, else python)")
    parser.add_argument("--sbx-python", default=os.environ.get("ZOO_SBX_PYTHON", "python"),
                        help="the Python of a venv with sbx-rl (default: $ZOO_SBX_PYTHON, else python)")
    parser.add_argument("--json", help="write every round's results here")
    parser.add_argument("--base", type=Path, help="a checkout whose zoo runs each zoo contender again (base_<name>)")
    parser.add_argument("--child-env", nargs="*", default=[], metavar="KEY=VALUE",
                        help="environment variables of every contender (e.g. ATEN_CPU_CAPABILITY=avx2 to run as on an "
                             "AVX2-only CPU)")
    parser.add_argument("--base-env", nargs="*", default=[], metavar="KEY=VALUE",
                        help="environment variables of the base_ contenders only")
    parser.add_argument("--zoo-set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config keys of this checkout's zoo contenders (e.g. accel.fp32_products=default)")
    parser.add_argument("--zoo-child", help=argparse.SUPPRESS)
    parser.add_argument("--peer-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.zoo_child:
        return zoo_result(args.zoo_child)
    if args.peer_child:
        return peer_result(args.peer_child, args)
    os.environ["SAC_SPEED_TIMED_FROM"] = str(args.random + args.warmup)
    runs = Path(tempfile.mkdtemp(prefix="zoo_sac_speed_"))
    if args.base is not None:
        args.contenders = [*args.contenders, *(f"base_{name}" for name in args.contenders if name in ZOO_CONTENDERS)]
    results: dict[str, list[dict]] = {name: [] for name in args.contenders}
    cpu_model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "unknown CPU")
    print(f"{cpu_model}, CPU {args.cpu}, one thread; {args.random} random steps, {args.warmup} warm-up and "
          f"{args.measured} timed learning steps", flush=True)
    for round_index in range(args.rounds):
        order = args.contenders[round_index % len(args.contenders):] + args.contenders[:round_index %
                                                                                      len(args.contenders)]
        (runs / f"round{round_index}").mkdir()
        for name in order:
            command = command_for(name, args, runs / f"round{round_index}")
            if command is None:
                print(f"  {name}: skipped (no virtualenv with it; see --sb3-python / --sbx-python)", flush=True)
                continue
            zoo = args.base.resolve() if name.startswith("base_") else ROOT
            extra = dict(item.split("=", 1) for item in args.child_env)
            if name.startswith("base_"):
                extra.update(item.split("=", 1) for item in args.base_env)
            result = run_child(command, args.cpu, timeout=1800, zoo=zoo, extra=extra)
            results[name].append(result)
            print(f"  round {round_index + 1} {name}: {json.dumps(result)}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    report(results)


def report(results: dict[str, list[dict]]) -> None:
    median = {name: {key: statistics.median(r[key] for r in rounds) for key in ("loop_ms", "random_ms", "compile_s")}
              for name, rounds in results.items() if rounds and all("error" not in r for r in rounds)}
    base = median.get("zoo_fp32", {}).get("loop_ms")
    print(f"\n{'contender':<19} {'ms/step':>8} {'random':>7} {'update':>7} {'compile s':>9} {'steps/s':>8} "
          f"{'vs zoo fp32':>11}")
    for name, m in median.items():
        ratio = f"{base / m['loop_ms']:10.2f}x" if base else ""
        print(f"{name:<19} {m['loop_ms']:8.2f} {m['random_ms']:7.2f} {m['loop_ms'] - m['random_ms']:7.2f} "
              f"{m['compile_s']:9.1f} {1e3 / m['loop_ms']:8.1f} {ratio}")
    pairs = [(name, f"base_{name}") for name in median if f"base_{name}" in median]
    for name, old in pairs:  # each round's new against the same round's old, then their median
        ratios = [b["loop_ms"] / a["loop_ms"] for a, b in zip(results[name], results[old])
                  if "error" not in a and "error" not in b]
        print(f"{name} against its base: {statistics.median(ratios):.3f}x loop steps/s (rounds: "
              f"{', '.join(f'{r:.3f}' for r in ratios)})")
    for name, rounds in results.items():
        errors = [r["error"] for r in rounds if "error" in r]
        if errors:
            print(f"{name}: failed: {errors[0]}")


if __name__ == "__main__":
    main()
