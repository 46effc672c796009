"""The on-policy learners eager and compiled (``policy.compile``), side by side: one pinned CPU, one thread.

Overview:
    ``--updates``: in this process, one thread, for each learner on its config's shapes -- PPO on Hopper-v5's
    (obs 11, actions 3, 64x64, a 2048-step rollout of one env with two autoreset steps, 10 epochs of 64-sample
    minibatches), A2C on a2c_pendulum's (8 envs x 8 steps, gSDE), IMPALA on impala_pendulum's (2 unrolls of 16 steps
    x 8 envs), and PPO with memory on ppo_lstm_cartpole_novel's (8 envs x 32 steps of CartPoleNoVel-v1 collected by
    the policy, episode starts inside the chunks; 20 epochs of one 256-sample minibatch) with an LSTM, a GRU and no
    core -- two policies built alike, one eager and one compiled, call ``learn`` on the same batches in turn
    (``--rounds`` rounds of ``--calls`` calls each); prints the compile seconds and the median ms per gradient
    update of each, and their ratio.

    ``--runs``: whole training runs of ``configs/ppo_hopper.py``, ``impala_pendulum.py`` and ``a2c_pendulum.py``
    (or ``--configs``), ``policy.compile=off`` and ``on`` in turn (pair k: seed k for both, the order alternating), each
    a fresh process pinned to ``--cpu`` with one torch thread (IMPALA's learner and actors all on that CPU),
    ``--steps`` env steps (default: the config's); prints each run's wall-clock seconds (``zoo.train``: compile and
    evaluations included), the seconds spent in the policy's ``learn`` (compile included), the compile seconds,
    the last 10-episode training return and evaluation, then the medians and the wall-clock ratio eager / compiled.
    The rest (collection, evaluation) depends on what was learned (episode lengths), which differs between runs
    once rounding has made them diverge: the seconds in ``learn`` are the like-for-like part.

    taskset -c 1 python benchmarks/onpolicy_compile_bench.py --updates [--cases ppo_lstm_novel ppo_none_novel]
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

CONFIGS = {name: ROOT / "configs" / f"{name}.py"
           for name in ("ppo_hopper", "impala_pendulum", "a2c_pendulum", "ppo_lstm_cartpole_novel")}


# -- per update, in this process ---------------------------------------------------------------------------------
def build(cls: type, config: Path, compile_mode: str, obs_dim: int, action_dim: int, calls: int,
          samples: int, **overrides: object) -> object:
    """A policy of ``config``'s policy section on Box spaces (``action_dim`` 0: two discrete actions), planned for
    ``calls`` learn calls of ``samples``."""
    cfg = resolve_config(load_config_file(config)).policy
    cfg = EasyDict({**cfg, "compile": compile_mode, **overrides})
    torch.manual_seed(0)
    actions = gym.spaces.Discrete(2) if action_dim == 0 else gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)
    policy = cls(cfg, gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32), actions, torch.device("cpu"))
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


def collected_rollout(policy: object, steps: int, envs: int) -> Rollout:
    """A rollout of CartPoleNoVel-v1 collected by ``policy`` (memory and episode starts included), processed."""
    from zoo.pipelines.collector import VectorCollector

    collector = VectorCollector("CartPoleNoVel-v1", envs, seed=1, vector_mode="sync")
    try:
        return policy.process_rollout(collector.rollout(policy, steps))
    finally:
        collector.close()


UPDATE_CASES = ("ppo_hopper", "a2c_pendulum", "impala_pendulum", "ppo_lstm_novel", "ppo_gru_novel", "ppo_none_novel")


def time_updates(rounds: int, calls: int, names: list[str]) -> None:
    torch.set_num_threads(1)
    novel = ROOT / "configs" / "ppo_lstm_cartpole_novel.py"
    cases = {
        # name: (class, config, obs dim, action dim, batch maker, updates per learn call)
        "ppo_hopper": (PPOPolicy, ROOT / "configs" / "ppo_hopper.py", 11, 3,
                       lambda p: synthetic_rollout(p, 2048, 1, 11, 2), None),
        "a2c_pendulum": (A2CPolicy, ROOT / "configs" / "a2c_pendulum.py", 3, 1,
                         lambda p: synthetic_rollout(p, 8, 8, 3, 0), 1),
        "impala_pendulum": (ImpalaPolicy, ROOT / "configs" / "impala_pendulum.py", 3, 1,
                            lambda p: synthetic_unroll(p, 16, 16, 3), 1),
        **{f"ppo_{kind}_novel": (PPOPolicy, novel, 2, 0, lambda p: collected_rollout(p, 32, 8), None, kind)
           for kind in ("lstm", "gru", "none")},
    }
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, cpu: {cpu_model()}")
    for name, (cls, config, obs_dim, action_dim, make, per_call, *kind) in cases.items():
        if name not in names:
            continue
        memory = {"recurrent": kind[0]} if kind else {}
        batch = make(build(cls, config, "off", obs_dim, action_dim, 1, 1, **memory))
        samples = int(batch.reward.numel())
        policies = {mode: build(cls, config, mode, obs_dim, action_dim, 10**4, samples, **memory)
                    for mode in ("off", "on")}
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


def child_run(config: str, mode: str, steps: int | None, seed: int, runs: str, tag: str) -> dict:
    """One ``zoo.train`` of ``config`` in this process (the learner's; IMPALA's actors are its children), its
    policy class's ``learn`` timed: wall seconds of ``train``, seconds inside ``learn`` (the compile included),
    the compile seconds, the last 10-episode training return and the last evaluation."""
    from zoo.run import train

    spent = [0.0]
    for cls in (PPOPolicy, ImpalaPolicy, A2CPolicy):
        original = cls.learn

        def timed(self, batch, ctx, original=original):
            begin = time.perf_counter()
            try:
                return original(self, batch, ctx)
            finally:
                spent[0] += time.perf_counter() - begin

        cls.learn = timed
    overrides = [f"runs_dir={runs}", f"policy.compile={mode}", "torch_threads=1", f"seed={seed}", f"exp_name={tag}"]
    if steps is not None:
        overrides.append(f"pipeline.max_env_steps={steps}")
    if "novel" in str(config):  # the whole budget, solved or not
        overrides.append("pipeline.stop_return=null")
    begin = time.perf_counter()
    summary = train(config, overrides)
    wall = time.perf_counter() - begin
    run_dir = Path(summary["run_dir"])
    session = json.loads((run_dir / "environment.json").read_text())["sessions"][-1]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [row["eval_return_mean"] for row in rows if row.get("eval_return_mean") is not None]
    return {"wall": round(wall, 2), "learn": round(spent[0], 2), "compile": session.get("compile_seconds", 0.0),
            "compiled": session.get("compile"), "return": rows[-1].get("episode_return_mean"),
            "eval": evals[-1] if evals else None, "env_steps": rows[-1]["env_steps"]}


def one_run(config: Path, mode: str, steps: int | None, seed: int, cpu: int, runs: Path, tag: str,
            cold: bool) -> dict:
    """``child_run`` in a fresh process pinned to ``cpu``, one thread; its JSON result."""
    command = ["taskset", "-c", str(cpu), sys.executable, str(Path(__file__).resolve()), "--child", str(config),
               mode, str(steps or 0), str(seed), str(runs), tag]
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    if cold:  # an empty inductor cache: the compile a first run on a machine pays
        environ["TORCHINDUCTOR_CACHE_DIR"] = str(runs / f"{tag}_inductor")
    done = subprocess.run(command, capture_output=True, text=True, env=environ, cwd=ROOT)
    if done.returncode != 0:
        return {"error": (done.stdout + done.stderr).strip().splitlines()[-1][:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def time_runs(configs: list[str], steps: int | None, pairs: int, cpu: int, cold: bool) -> None:
    cache = "an empty inductor cache per run" if cold else "the user's inductor cache (warm after a first run)"
    print(f"cpu: {cpu_model()}, pinned to CPU {cpu}, one torch thread, {pairs} pairs per config (pair k: seed k, "
          f"eager and compiled in turn), {cache}")
    with tempfile.TemporaryDirectory() as folder:
        runs = Path(folder)
        for name in configs:
            results: dict[str, list[dict]] = {"off": [], "on": []}
            for pair in range(pairs):
                for mode in (("off", "on") if pair % 2 == 0 else ("on", "off")):
                    result = one_run(CONFIGS[name], mode, steps, pair, cpu, runs, f"{name}_{mode}_{pair}", cold)
                    results[mode].append(result)
                    print(f"{name} compile={mode} seed {pair}: {json.dumps(result)}", flush=True)
            ok = {mode: [r for r in rs if "wall" in r] for mode, rs in results.items()}
            if ok["off"] and ok["on"]:
                wall = {mode: statistics.median(r["wall"] for r in rs) for mode, rs in ok.items()}
                learn = {mode: statistics.median(r["learn"] for r in rs) for mode, rs in ok.items()}
                rest = {mode: statistics.median(r["wall"] - r["learn"] for r in rs) for mode, rs in ok.items()}
                print(f"{name}: median wall eager {wall['off']:.1f} s, compiled {wall['on']:.1f} s, eager / compiled "
                      f"{wall['off'] / wall['on']:.2f}x; in learn {learn['off']:.1f} s vs {learn['on']:.1f} s "
                      f"(compile included); the rest {rest['off']:.1f} s vs {rest['on']:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", action="store_true", help="ms per gradient update, eager and compiled")
    parser.add_argument("--runs", action="store_true", help="whole runs, eager and compiled, interleaved")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5, help="about this many x 320 updates per round (--updates)")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--cases", nargs="+", default=list(UPDATE_CASES), choices=UPDATE_CASES,
                        help="the learners timed by --updates")
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (default: the config's)")
    parser.add_argument("--pairs", type=int, default=2, help="eager/compiled pairs per config (--runs)")
    parser.add_argument("--cpu", type=int, default=1)
    parser.add_argument("--cold-cache", action="store_true", help="compile every run from an empty inductor cache")
    parser.add_argument("--child", nargs=6, metavar=("CONFIG", "MODE", "STEPS", "SEED", "RUNS", "TAG"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        config, mode, steps, seed, runs, tag = args.child
        print(json.dumps(child_run(config, mode, int(steps) or None, int(seed), runs, tag)))
        return
    if not (args.updates or args.runs):
        parser.error("say --updates, --runs or both")
    if args.updates:
        time_updates(args.rounds, args.calls, args.cases)
    if args.runs:
        time_runs(args.configs, args.steps, args.pairs, args.cpu, args.cold_cache)


if __name__ == "__main__":
    main()
