"""The on-policy learners eager and compiled (``policy.compile``), side by side: one pinned CPU, one thread.

Overview:
    ``--updates``: in this process, one thread, for each learner on its config's shapes -- PPO on Hopper-v5's
    (obs 11, actions 3, 64x64, a 2048-step rollout of one env with two autoreset steps, 10 epochs of 64-sample
    minibatches), A2C on a2c_pendulum's (8 envs x 8 steps, gSDE), IMPALA on impala_pendulum's (2 unrolls of 16 steps
    x 8 envs) -- two policies built alike, one eager and one compiled, call ``learn`` on the same batches in turn
    (``--rounds`` rounds of ``--calls`` calls each); prints the compile seconds and the median ms per gradient
    update of each, and their ratio.

    ``--runs``: whole ``zoo run`` processes of ``configs/ppo_hopper.py`` and ``configs/impala_pendulum.py`` (or
    ``--configs``), ``policy.compile=off`` and ``on`` alternating (A B B A ...), each pinned to ``--cpu`` with one
    torch thread (IMPALA's learner and actors all on that CPU), ``--steps`` env steps (default: the config's); prints
    each run's wall-clock seconds (the process, compile and start-up included), its compile seconds and its last
    10-episode training return, then the median wall-clock ratio eager / compiled per config.

    taskset -c 1 python benchmarks/onpolicy_compile_bench.py --updates
    python benchmarks/onpolicy_compile_bench.py --runs --steps 200000 --pairs 2 --cpu 1
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

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zoo.config import load_config_file  # noqa: E402
from zoo.config.resolve import resolve_config  # noqa: E402
from zoo.data import Rollout, Unroll  # noqa: E402
from zoo.policies import A2CPolicy, ImpalaPolicy, LearnContext, PPOPolicy  # noqa: E402

CONFIGS = {"ppo_hopper": ROOT / "configs" / "ppo_hopper.py", "impala_pendulum": ROOT / "configs" / "impala_pendulum.py"}


# -- per update, in this process ---------------------------------------------------------------------------------
def build(cls: type, config: Path, compile_mode: str, obs_dim: int, action_dim: int, calls: int,
          samples: int) -> object:
    """A policy of ``config``'s policy section on Box spaces, planned for ``calls`` learn calls of ``samples``."""
    cfg = resolve_config(load_config_file(config)).policy
    cfg = EasyDict({**cfg, "compile": compile_mode})
    torch.manual_seed(0)
    policy = cls(cfg, gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
                 gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32), torch.device("cpu"))
    policy.plan_learning(calls, samples)
    return policy


def synthetic_rollout(policy: object, steps: int, envs: int, obs_dim: int, invalid: int) -> Rollout:
    """A rollout acted by ``policy`` on Gaussian observations, ``invalid`` autoreset steps, processed (GAE)."""
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(steps, envs, obs_dim, generator=g)
    with torch.no_grad():
        out = policy.model.policy_output(obs)
        packed = torch.cat([out["mu"], out["sigma"]], -1)
        action = out["mu"] + out["sigma"] * torch.randn(out["mu"].shape, generator=g)
    valid = torch.ones(steps, envs, dtype=torch.bool)
    terminated = torch.zeros(steps, envs, dtype=torch.bool)
    for k in range(invalid):
        t = (k + 1) * steps // (invalid + 1)
        terminated[t - 1, 0], valid[t, 0] = True, False
    rollout = Rollout(obs, action, torch.randn(steps, envs, generator=g), terminated,
                      torch.zeros(steps, envs, dtype=torch.bool), valid, torch.randn(envs, obs_dim, generator=g),
                      {"policy_output": packed})
    return policy.process_rollout(rollout)


def synthetic_unroll(policy: object, steps: int, envs: int, obs_dim: int) -> Unroll:
    g = torch.Generator().manual_seed(2)
    obs = torch.randn(steps + 1, envs, obs_dim, generator=g)
    with torch.no_grad():
        out = policy._bounded(policy.model.policy_output(obs[:steps]))
        action = out["mu"] + out["sigma"] * torch.randn(out["mu"].shape, generator=g)
    terminated = torch.zeros(steps, envs, dtype=torch.bool)
    truncated = torch.zeros(steps, envs, dtype=torch.bool)
    valid = torch.ones(steps, envs, dtype=torch.bool)
    truncated[steps // 2, 0], valid[steps // 2 + 1, 0] = True, False
    packed = torch.cat([out["mu"], out["sigma"]], -1)
    return Unroll(obs=obs, action=action, reward=torch.randn(steps, envs, generator=g), terminated=terminated,
                  truncated=truncated, valid=valid, behaviour={"policy_output": packed}, policy_version=0)


def time_updates(rounds: int, calls: int) -> None:
    torch.set_num_threads(1)
    cases = {
        # name: (class, config, obs dim, action dim, batch maker, updates per learn call)
        "ppo_hopper": (PPOPolicy, ROOT / "configs" / "ppo_hopper.py", 11, 3,
                       lambda p: synthetic_rollout(p, 2048, 1, 11, 2), None),
        "a2c_pendulum": (A2CPolicy, ROOT / "configs" / "a2c_pendulum.py", 3, 1,
                         lambda p: synthetic_rollout(p, 8, 8, 3, 0), 1),
        "impala_pendulum": (ImpalaPolicy, ROOT / "configs" / "impala_pendulum.py", 3, 1,
                            lambda p: synthetic_unroll(p, 16, 16, 3), 1),
    }
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, cpu: {cpu_model()}")
    for name, (cls, config, obs_dim, action_dim, make, per_call) in cases.items():
        batch = make(build(cls, config, "off", obs_dim, action_dim, 1, 1))
        samples = int(batch.reward.numel())
        policies = {mode: build(cls, config, mode, obs_dim, action_dim, 10**4, samples) for mode in ("off", "on")}
        start = time.perf_counter()
        first = policies["on"].learn(batch, LearnContext(progress=0.0))  # compiles
        compile_seconds = time.perf_counter() - start
        updates = int(first.get("updates", per_call))
        count = max(1, calls * 320 // updates)  # learn calls per round: about calls x 320 updates
        times: dict[str, list[float]] = {"off": [], "on": []}
        for round_ in range(rounds):
            for mode in (("off", "on") if round_ % 2 == 0 else ("on", "off")):
                policy = policies[mode]
                begin = time.perf_counter()
                for call in range(count):
                    policy.learn(batch, LearnContext(progress=0.5 * call / count))
                times[mode].append((time.perf_counter() - begin) / (count * updates) * 1e3)
        eager, compiled = statistics.median(times["off"]), statistics.median(times["on"])
        print(f"{name:16s} {updates:4d} updates/call  eager {eager:.3f} ms/update  compiled {compiled:.3f} "
              f"ms/update  ratio {eager / compiled:.2f}x  first compiled call {compile_seconds:.1f} s "
              f"(rounds eager {', '.join(f'{t:.3f}' for t in times['off'])}; "
              f"compiled {', '.join(f'{t:.3f}' for t in times['on'])})")


# -- whole runs --------------------------------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def one_run(config: Path, mode: str, steps: int | None, cpu: int, runs: Path, tag: str) -> dict:
    command = ["taskset", "-c", str(cpu), sys.executable, "-m", "zoo", "run", "--config", str(config), "-q",
               "--exp-name", tag, "--set", f"runs_dir={runs}", "--set", f"policy.compile={mode}",
               "--set", "torch_threads=1"]
    if steps is not None:
        command += ["--set", f"pipeline.max_env_steps={steps}"]
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    begin = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=environ, cwd=ROOT)
    wall = time.perf_counter() - begin
    if done.returncode != 0:
        return {"error": (done.stdout + done.stderr).strip().splitlines()[-1][:300]}
    run_dir = runs / tag
    session = json.loads((run_dir / "environment.json").read_text())["sessions"][-1]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [row["eval_return_mean"] for row in rows if row.get("eval_return_mean") is not None]
    return {"wall": wall, "compile": session.get("compile_seconds", 0.0), "compiled": session.get("compile"),
            "return": rows[-1].get("episode_return_mean"), "eval": evals[-1] if evals else None,
            "env_steps": rows[-1]["env_steps"]}


def time_runs(configs: list[str], steps: int | None, pairs: int, cpu: int) -> None:
    print(f"cpu: {cpu_model()}, pinned to CPU {cpu}, one torch thread, {pairs} pairs per config")
    with tempfile.TemporaryDirectory() as folder:
        runs = Path(folder)
        for name in configs:
            results: dict[str, list[dict]] = {"off": [], "on": []}
            for pair in range(pairs):
                for mode in (("off", "on") if pair % 2 == 0 else ("on", "off")):
                    result = one_run(CONFIGS[name], mode, steps, cpu, runs, f"{name}_{mode}_{pair}")
                    results[mode].append(result)
                    print(f"{name} compile={mode} pair {pair}: {json.dumps(result)}", flush=True)
            walls = {mode: [r["wall"] for r in rs if "wall" in r] for mode, rs in results.items()}
            if walls["off"] and walls["on"]:
                eager, compiled = statistics.median(walls["off"]), statistics.median(walls["on"])
                print(f"{name}: median wall eager {eager:.1f} s, compiled {compiled:.1f} s, eager / compiled "
                      f"{eager / compiled:.2f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", action="store_true", help="ms per gradient update, eager and compiled")
    parser.add_argument("--runs", action="store_true", help="whole runs, eager and compiled, interleaved")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5, help="about this many x 320 updates per round (--updates)")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (default: the config's)")
    parser.add_argument("--pairs", type=int, default=2, help="eager/compiled pairs per config (--runs)")
    parser.add_argument("--cpu", type=int, default=1)
    args = parser.parse_args()
    if not (args.updates or args.runs):
        parser.error("say --updates, --runs or both")
    if args.updates:
        time_updates(args.rounds, args.calls)
    if args.runs:
        time_runs(args.configs, args.steps, args.pairs, args.cpu)


if __name__ == "__main__":
    main()
