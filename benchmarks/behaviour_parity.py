"""Did a change alter what zoo computes? Every algorithm at a small budget and a fixed seed, at two versions of code.

``record`` trains each case (a config of every algorithm, at a few thousand env steps, seed 0, one torch thread)
with the code of a git revision or a folder and writes each run's metrics rows (timing keys left out) to a JSON
file; IMPALA's learner, whose actors run asynchronously, is fed the same synthetic unrolls in-process instead.
``compare`` reads two such files: with ``--exact`` (eager runs) every row must be equal to the last bit; otherwise
within a relative tolerance (compiled runs: float rounding of fused kernels). Example, the commit before a change
against the working tree, eager, then compiled::

    python benchmarks/behaviour_parity.py record --rev HEAD~1 --out before.json
    python benchmarks/behaviour_parity.py record --src . --out after.json
    python benchmarks/behaviour_parity.py compare before.json after.json --exact
    python benchmarks/behaviour_parity.py record --rev HEAD~1 --compile on --out before_c.json
    python benchmarks/behaviour_parity.py record --src . --compile on --out after_c.json
    python benchmarks/behaviour_parity.py compare before_c.json after_c.json --rtol 1e-3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Keys of a metrics row that measure time, not what was computed.
TIMING = {"wall_time", "sps", "learner_seconds", "wait_seconds", "learner_share", "collect_seconds", "allreduce_ms"}

# name -> (config file, overrides): every algorithm, discrete and continuous actions, and the options that take
# other code paths (gSDE, a shared trunk, MultiDiscrete-free defaults, n-step DQN, delayed TD3, ACE's resets).
CASES: dict[str, tuple[str, list[str]]] = {
    "a2c_cartpole": ("configs/a2c_cartpole.py", ["pipeline.max_env_steps=6000", "pipeline.stop_return=null"]),
    "a2c_pendulum": ("configs/a2c_pendulum.py", ["pipeline.max_env_steps=6000", "policy.normalize_advantage=true"]),
    "ppo_cartpole": ("configs/ppo_cartpole.py", ["pipeline.max_env_steps=6000", "pipeline.stop_return=null",
                                                 "policy.target_kl=0.01"]),
    "ppo_pendulum": ("configs/ppo_pendulum.py", ["pipeline.max_env_steps=6000"]),
    "ppo_pendulum_sde": ("configs/ppo_pendulum.py", ["pipeline.max_env_steps=4000", "policy.use_sde=true",
                                                     "policy.shared_network=true"]),
    "dppo_cartpole": ("configs/dppo_cartpole.py", ["pipeline.max_env_steps=6000", "pipeline.stop_return=null"]),
    "sac_pendulum": ("configs/sac_pendulum.py", ["pipeline.max_env_steps=2500", "pipeline.learning_starts=500",
                                                 "pipeline.steps_per_iteration=500", "pipeline.eval_every=2",
                                                 "pipeline.eval_episodes=2"]),
    "sac_ace_pendulum": ("configs/sac_ace_pendulum.py", [
        "pipeline.max_env_steps=2500", "pipeline.learning_starts=500", "pipeline.steps_per_iteration=500",
        "pipeline.eval_every=2", "pipeline.eval_episodes=2", "policy.causal_interval=1000",
        "policy.causal_sample_size=800", "policy.reset_start=300", "policy.reset_interval=700"]),
    "td3_pendulum": ("configs/td3_pendulum.py", ["pipeline.max_env_steps=2500", "pipeline.learning_starts=500",
                                                 "pipeline.steps_per_iteration=500", "pipeline.eval_every=2",
                                                 "pipeline.eval_episodes=2"]),
    "dqn_cartpole": ("configs/dqn_cartpole.py", [
        "pipeline.max_env_steps=3000", "pipeline.learning_starts=500", "pipeline.steps_per_iteration=500",
        "policy.target_update_interval=250", "pipeline.eval_every=2", "pipeline.eval_episodes=2"]),
    "dqn_cartpole_nstep": ("configs/dqn_cartpole.py", [
        "pipeline.max_env_steps=2000", "pipeline.learning_starts=500", "pipeline.steps_per_iteration=500",
        "policy.nstep=3", "policy.dueling=true", "policy.double_dqn=true", "policy.tau=0.5",
        "policy.target_update_interval=100"]),
}
# Data-parallel learners always run eager (their all-reduce is a collective): recorded eager only.
EAGER_ONLY = {"dppo_cartpole"}
# IMPALA's learner in-process (its actors are asynchronous): config file, learn calls.
LEARNER_CASES = {"impala_cartpole": "configs/impala_cartpole.py", "impala_pendulum": "configs/impala_pendulum.py"}

# Every child imports zoo from the folder recorded, not from an editable install of this checkout (whose import hook
# would win over PYTHONPATH): the hook is taken out first, and the folder checked.
ISOLATE = r"""
import os, sys
sys.meta_path[:] = [finder for finder in sys.meta_path if "__editable__" not in type(finder).__module__
                    and "__editable__" not in getattr(finder, "__name__", "")]
import zoo
assert os.path.realpath(zoo.__file__).startswith(os.path.realpath(os.environ["PARITY_SRC"])), zoo.__file__
"""
RUN_ZOO = ISOLATE + r"""
import runpy
sys.argv = ["zoo", *sys.argv[1:]]
runpy.run_module("zoo", run_name="__main__", alter_sys=True)
"""

LEARNER_SCRIPT = ISOLATE + r"""
import json
import numpy as np, torch
from zoo.config.files import load_config_file
from zoo.config.resolve import resolve_config
from zoo.envs import EnvSpec
from zoo.data import Rollout
from zoo.policies import LearnContext, build_policy

path, compile_mode, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
cfg = resolve_config(load_config_file(path), [f"policy.compile={compile_mode}"], config_dir=None)
torch.manual_seed(0)
torch.set_num_threads(1)
spec = EnvSpec.from_config(cfg)
obs_space, act_space = spec.spaces()
policy = build_policy(cfg, obs_space, act_space)
if hasattr(policy, "plan_learning"):
    policy.plan_learning(calls, 32 * 4)
gen = np.random.default_rng(0)
rows = []
for call in range(calls):
    steps, envs = 32, 4
    obs = torch.as_tensor(gen.normal(size=(steps + 1, envs, *obs_space.shape)), dtype=torch.float32)
    outs = [policy.collect(obs[t]) for t in range(steps)]
    action = torch.stack([o.raw_action if o.raw_action is not None else torch.as_tensor(o.action) for o in outs])
    extras = {k: torch.stack([o.extras[k] for o in outs]) for k in outs[0].extras}
    terminated = torch.as_tensor(gen.random((steps, envs)) < 0.04)
    truncated = torch.as_tensor(gen.random((steps, envs)) < 0.02) & ~terminated
    ended = terminated | truncated
    valid = torch.ones(steps, envs, dtype=torch.bool)
    valid[1:] = ~ended[:-1]
    reward = torch.as_tensor(gen.normal(size=(steps, envs)), dtype=torch.float32)
    rollout = Rollout(obs[:-1], action, reward, terminated, truncated, valid, obs[-1], extras)
    metrics = policy.learn(rollout, LearnContext(progress=call / calls, iteration=call, env_steps=call * 128))
    rows.append({k: float(v) for k, v in metrics.items()})
json.dump(rows, sys.stdout)
"""


def _environment(src: Path) -> dict[str, str]:
    # MKL_CBWR: MKL's products otherwise depend on the memory alignment of their operands, which differs from one
    # process to the next (IMPALA's learner case gave other last bits in two runs of the same code without it).
    env = dict(os.environ, PYTHONPATH=str(src), PARITY_SRC=str(src), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               MKL_CBWR="AUTO,STRICT")
    env.pop("ZOO_TEST_COMPILE", None)
    return env


def _run_case(src: Path, name: str, config: str, overrides: list[str], compile_mode: str, runs: Path) -> list[dict]:
    sets = [*overrides, f"policy.compile={compile_mode}", f"runs_dir={runs}", f"exp_name={name}", "seed=0",
            "torch_threads=1"]
    command = [sys.executable, "-c", RUN_ZOO, "run", "--config", str(src / config), "-q"]
    for item in sets:
        command += ["--set", item]
    done = subprocess.run(command, cwd=runs, env=_environment(src), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name}: zoo run failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    lines = (runs / name / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]


def _run_learner(src: Path, config: str, compile_mode: str, runs: Path, calls: int = 12) -> list[dict]:
    done = subprocess.run([sys.executable, "-c", LEARNER_SCRIPT, str(src / config), compile_mode, str(calls)],
                          cwd=runs, env=_environment(src), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{config}: the learner script failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def _build_kernels(src: Path) -> None:
    """Build rl_utils' compiled loops in ``src`` where they are not (an exported revision): without them GAE and
    V-trace take the numpy scan, whose last bits differ from the loops', and the comparison would show that."""
    if list((src / "zoo" / "rl_utils").glob("_ckernels*.so")):
        return
    done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], cwd=src, capture_output=True,
                          text=True)
    if done.returncode != 0 or not list((src / "zoo" / "rl_utils").glob("_ckernels*.so")):
        raise SystemExit(f"building zoo.rl_utils._ckernels in {src} failed: {done.stderr.strip()[-1000:]}")


def record(src: Path, out: Path, compile_mode: str, only: list[str] | None) -> None:
    _build_kernels(src)
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="zoo-parity-") as tmp:
        for name, (config, overrides) in CASES.items():
            if (only and name not in only) or (compile_mode != "off" and name in EAGER_ONLY):
                continue
            results[name] = _run_case(src, name, config, overrides, compile_mode, Path(tmp))
            print(f"{name}: {len(results[name])} rows", flush=True)
        for name, config in LEARNER_CASES.items():
            if only and name not in only:
                continue
            results[name] = _run_learner(src, config, compile_mode, Path(tmp))
            print(f"{name}: {len(results[name])} rows", flush=True)
    out.write_text(json.dumps({"compile": compile_mode, "cases": results}, indent=1) + "\n")


def _differences(a: object, b: object, rtol: float | None, where: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{where}: keys {sorted(set(a) ^ set(b))} in one only"]
        return [d for key in a for d in _differences(a[key], b[key], rtol, f"{where}.{key}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} rows against {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, rtol, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, float) and rtol is not None:
        same = (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rtol, abs_tol=rtol)
        return [] if same else [f"{where}: {a!r} against {b!r}"]
    return [] if a == b else [f"{where}: {a!r} against {b!r}"]


def compare(first: Path, second: Path, exact: bool, rtol: float) -> int:
    a, b = json.loads(first.read_text())["cases"], json.loads(second.read_text())["cases"]
    missing = sorted(set(a) ^ set(b))
    if missing:
        print(f"cases recorded in one file only (not compared): {', '.join(missing)}")
    a, b = {name: a[name] for name in a if name in b}, {name: b[name] for name in a if name in b}
    differences = _differences(a, b, None if exact else rtol, "")
    for name in a:
        bad = [d for d in differences if d.startswith(f".{name}")]
        print(f"{name}: {'equal' if not bad else f'{len(bad)} differences, first: {bad[0]}'}")
    print("all equal" + (" to the bit" if exact else f" within {rtol}") if not differences
          else f"{len(differences)} differences")
    return 1 if differences else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="train every case with one version of the code")
    where = rec.add_mutually_exclusive_group(required=True)
    where.add_argument("--rev", help="a git revision of this repository (exported to a temporary folder)")
    where.add_argument("--src", type=Path, help="a folder holding zoo/ and configs/ (e.g. '.')")
    rec.add_argument("--out", type=Path, required=True)
    rec.add_argument("--compile", default="off", choices=("off", "on"))
    rec.add_argument("--only", nargs="*", help="case names (default: all)")
    cmp = commands.add_parser("compare", help="compare two recordings")
    cmp.add_argument("first", type=Path)
    cmp.add_argument("second", type=Path)
    cmp.add_argument("--exact", action="store_true", help="every value equal to the bit (eager)")
    cmp.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance otherwise (compiled)")
    args = parser.parse_args()
    if args.command == "compare":
        return compare(args.first, args.second, args.exact, args.rtol)
    if args.src is not None:
        record(args.src.resolve(), args.out.resolve(), args.compile, args.only)
        return 0
    with tempfile.TemporaryDirectory(prefix="zoo-rev-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.rev], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        record(Path(tmp), args.out.resolve(), args.compile, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
