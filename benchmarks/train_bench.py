"""Wall-clock time to train, zoo vs Stable-Baselines3, measured side by side in one run.

- ppo, a2c: time to solve CartPole-v1 (100-episode training mean >= 475).
- sac: a whole 20k-step Pendulum-v1 run, zoo's configs/sac_ace_pendulum.py (one update per env step) vs SB3 SAC
  with the rl-zoo settings (learning rate 1e-3, everything else SB3's defaults), with each one's 10-episode
  deterministic eval mean at the end.

Usage:
    python benchmarks/train_bench.py [--algos ppo a2c sac] [--seeds 0 1 2] [--whole-process]

With ``--whole-process`` each ppo/a2c run is a fresh process timed from its start to its exit (interpreter,
imports, set-up, training, saving): zoo as ``python -m zoo run --config configs/ALGO_cartpole.py --seed S``, SB3
as this script's ``--sb3-child`` (which imports no zoo module). Without it the times are the training loops'
(zoo's ``wall_time``; SB3's ``learn``), both in this process. The last row of each algorithm sums the seeds.

Stable-Baselines3 is optional (never a zoo dependency): when importable, it trains with the rl-zoo
hyper-parameters for CartPole-v1 and stops at the same criterion, in the same process, one torch thread each.
Also printed: zoo's collection throughput (the collector alone, and with the policy's sample processing; the
config's number of envs) as a fraction of the raw vector env stepped with random actions, timed in alternating
rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `zoo run` sets it (zoo.cli.console_main), before numpy loads

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = 475.0


def zoo_time(algo: str, seed: int) -> tuple[float, int, bool]:
    from zoo.run import train

    # The config's own budget: its learning-rate schedule anneals over it, so changing it changes the run.
    with tempfile.TemporaryDirectory() as runs:
        summary = train(ROOT / "configs" / f"{algo}_cartpole.py", [f"runs_dir={runs}", f"seed={seed}"])
    return summary["wall_time"], summary["env_steps"], summary["reason"] == "stop_return"


def sb3_time(algo: str, seed: int) -> tuple[float, int, bool] | None:
    try:
        from stable_baselines3 import A2C, PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.logger import Logger
    except ImportError:
        return None

    class StopAtTarget(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.returns: deque[float] = deque(maxlen=100)
            self.solved = False

        def _on_step(self) -> bool:
            for info in self.locals.get("infos", []):
                if "episode" in info:
                    self.returns.append(info["episode"]["r"])
            self.solved = len(self.returns) == 100 and float(np.mean(self.returns)) >= TARGET
            return not self.solved

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    # rl-zoo budgets (n_timesteps): the linear schedules anneal over them.
    budget = 100_000 if algo == "ppo" else 500_000
    if algo == "ppo":  # rl-zoo hyperparams/ppo.yml, CartPole-v1
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                    ent_coef=0.0, learning_rate=lambda f: 1e-3 * f, clip_range=lambda f: 0.2 * f, seed=seed,
                    device="cpu", verbose=0)
    else:  # rl-zoo hyperparams/a2c.yml, CartPole-v1
        model = A2C("MlpPolicy", env, ent_coef=0.0, seed=seed, device="cpu", verbose=0)
    model.set_logger(Logger(folder=None, output_formats=[]))  # SB3's default logger leaves a folder in /tmp
    callback = StopAtTarget()
    start = time.perf_counter()
    model.learn(total_timesteps=budget, callback=callback)
    return time.perf_counter() - start, model.num_timesteps, callback.solved


def zoo_process_time(algo: str, seed: int) -> tuple[float, int, bool]:
    """``python -m zoo run`` in a fresh process, timed from start to exit; its env steps and whether it solved."""
    with tempfile.TemporaryDirectory() as runs:
        command = [sys.executable, "-m", "zoo", "run", "--config", str(ROOT / "configs" / f"{algo}_cartpole.py"),
                   "--seed", str(seed), "-q", "--set", f"runs_dir={runs}"]
        start = time.perf_counter()
        subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)  # OMP_NUM_THREADS: main's
        elapsed = time.perf_counter() - start
        (metrics,) = Path(runs).glob("*/metrics.jsonl")
        last = json.loads(metrics.read_text().splitlines()[-1])
    return elapsed, int(last["env_steps"]), (last["episode_return_mean"] or 0.0) >= TARGET


def sb3_process_time(algo: str, seed: int) -> tuple[float, int, bool] | None:
    """SB3 (``sb3_time``) in a fresh process of this script that imports no zoo module, timed from start to exit."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--sb3-child", algo, str(seed)],
                          check=True, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return None if result is None else (elapsed, result[1], result[2])


def zoo_sac(seed: int) -> tuple[float, float]:
    """Wall-clock of zoo's whole 20k-step SAC-ACE Pendulum run (set-up included) and its final eval mean."""
    from zoo.run import train

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as runs:
        summary = train(ROOT / "configs" / "sac_ace_pendulum.py", [f"runs_dir={runs}", f"seed={seed}",
                                                                 "pipeline.log_every_s=1000"])
        rows = (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()
    elapsed = time.perf_counter() - start
    return elapsed, json.loads(rows[-1])["eval_return_mean"]


def sb3_sac(seed: int) -> tuple[float, float] | None:
    """SB3 SAC, rl-zoo's Pendulum-v1 settings, 20k steps: wall-clock (set-up included) and a 10-episode eval."""
    try:
        import gymnasium as gym
        from stable_baselines3 import SAC
        from stable_baselines3.common.evaluation import evaluate_policy
        from stable_baselines3.common.logger import Logger
    except ImportError:
        return None
    start = time.perf_counter()
    model = SAC("MlpPolicy", "Pendulum-v1", learning_rate=1e-3, seed=seed, device="cpu", verbose=0)
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.learn(total_timesteps=20_000)
    elapsed = time.perf_counter() - start
    mean, _ = evaluate_policy(model, gym.make("Pendulum-v1"), n_eval_episodes=10, deterministic=True)
    return elapsed, float(mean)


def collection_vs_raw(algo: str, rounds: int = 40, steps: int = 4096) -> dict[str, float]:
    """zoo's collection with the config's envs against the raw vector env with the same copies stepped with
    pre-drawn random actions, in alternating rounds of ``steps`` env steps each (a slow spell of the machine weighs
    on all alike), timed two ways: the collector alone (``VectorCollector.rollout``: policy forward, sampling, env
    steps, episode bookkeeping, rollout arrays, behaviour log-probs) and with the policy's sample processing
    (``process_rollout``: the rollout's values and GAE).

    Returns the medians of steps/s (``raw``, ``collect``, ``processed``) and the medians of the rounds' ratios to
    the raw env (``collect_ratio``, ``processed_ratio``: per round, so that drift between rounds cancels out)."""
    from zoo.config import load_config_file
    from zoo.config.resolve import resolve_config
    from zoo.envs import make_vector_env
    from zoo.pipelines.serial_onpolicy import SerialOnPolicyPipeline

    cfg = resolve_config(load_config_file(ROOT / "configs" / f"{algo}_cartpole.py"))
    pipeline = SerialOnPolicyPipeline.create(cfg)
    num_envs = cfg.pipeline.num_envs
    venv = make_vector_env("CartPole-v1", num_envs, seed=0)
    venv.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, size=(steps // num_envs, num_envs))
    rates: dict[str, list[float]] = {"raw": [], "collect": [], "processed": []}
    try:
        collector, policy, per_rollout_steps = pipeline.collector, pipeline.policy, cfg.pipeline.rollout_steps
        rollouts = max(steps // (num_envs * per_rollout_steps), 1)
        zoo_steps = rollouts * num_envs * per_rollout_steps
        policy.process_rollout(collector.rollout(policy, per_rollout_steps))  # warm-up
        for _ in range(rounds):
            start = time.perf_counter()
            for action in actions:
                venv.step(action)
            rates["raw"].append(len(actions) * num_envs / (time.perf_counter() - start))
            start = time.perf_counter()
            for _ in range(rollouts):
                collector.rollout(policy, per_rollout_steps)
            rates["collect"].append(zoo_steps / (time.perf_counter() - start))
            start = time.perf_counter()
            for _ in range(rollouts):
                policy.process_rollout(collector.rollout(policy, per_rollout_steps))
            rates["processed"].append(zoo_steps / (time.perf_counter() - start))
    finally:
        pipeline.close()
        venv.close()
    raw = np.asarray(rates["raw"])
    result = {name: float(np.median(values)) for name, values in rates.items()}
    for name in ("collect", "processed"):
        result[f"{name}_ratio"] = float(np.median(np.asarray(rates[name]) / raw))
    result["num_envs"] = num_envs
    return result


def _summed(runs: list) -> tuple[float, int, bool]:
    """Seconds and env steps of several runs added up, and whether every one reached the target."""
    return sum(run[0] for run in runs), sum(run[1] for run in runs), all(run[2] for run in runs)


def _row_text(zoo_s: float, zoo_steps: int, zoo_ok: bool, sb3: tuple[float, int, bool] | None) -> str:
    sb3_text, ratio = f"{'n/a':>8} {'n/a':>10} {'n/a':>8}", "n/a"
    if sb3 is not None:
        sb3_s, sb3_steps, sb3_ok = sb3
        sb3_text = f"{sb3_s:8.1f}{'' if sb3_ok else '*'} {sb3_steps:>10,d} {sb3_steps / sb3_s:8,.0f}"
        ratio = f"{zoo_s / sb3_s:.2f}"
    return f"{zoo_s:8.1f}{'' if zoo_ok else '*'} {zoo_steps:>10,d} {zoo_steps / zoo_s:8,.0f} {sb3_text} {ratio:>8}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=["ppo", "a2c", "sac"], choices=["ppo", "a2c", "sac"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--whole-process", action="store_true", help="time ppo/a2c runs as whole processes")
    parser.add_argument("--sb3-child", nargs=2, metavar=("ALGO", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.sb3_child:  # one SB3 run for --whole-process: its result as JSON on the last line
        print(json.dumps(sb3_time(args.sb3_child[0], int(args.sb3_child[1]))))
        return
    zoo_run, sb3_run = (zoo_process_time, sb3_process_time) if args.whole_process else (zoo_time, sb3_time)
    print("times: " + ("whole processes, start to exit" if args.whole_process else "training loops, in-process"))
    print(f"{'algo':<5} {'seed':>4} {'zoo s':>8} {'zoo steps':>10} {'zoo sps':>8} {'sb3 s':>8} {'sb3 steps':>10} "
          f"{'sb3 sps':>8} {'zoo/sb3':>8}")
    on_policy = [algo for algo in args.algos if algo != "sac"]
    for algo in on_policy:
        zoo_runs, sb3_runs = [], []
        for seed in args.seeds:
            zoo_runs.append(zoo_run(algo, seed))
            sb3_runs.append(sb3_run(algo, seed))
            print(f"{algo:<5} {seed:>4} {_row_text(*zoo_runs[-1], sb3_runs[-1])}")
        if len(args.seeds) > 1:
            sb3_total = None if None in sb3_runs else _summed(sb3_runs)
            print(f"{algo:<5} {'all':>4} {_row_text(*_summed(zoo_runs), sb3_total)}")
    print("(* = did not reach the target within the budget)\n")
    if "sac" in args.algos:
        print(f"{'sac 20k Pendulum':<17} {'seed':>4} {'zoo s':>8} {'zoo eval':>9} {'sb3 s':>8} {'sb3 eval':>9} "
              f"{'zoo/sb3':>8}")
        for seed in args.seeds:
            zoo_s, zoo_eval = zoo_sac(seed)
            sb3 = sb3_sac(seed)
            sb3_text = f"{'n/a':>8} {'n/a':>9} {'n/a':>8}" if sb3 is None else (
                f"{sb3[0]:8.1f} {sb3[1]:9.1f} {zoo_s / sb3[0]:8.2f}")
            print(f"{'sac_ace / SAC':<17} {seed:>4} {zoo_s:8.1f} {zoo_eval:9.1f} {sb3_text}")
        print()
    for algo in on_policy:
        r = collection_vs_raw(algo)
        print(f"{algo}: zoo collection {r['collect']:,.0f} steps/s = {r['collect_ratio']:.0%} of the raw CartPole-v1 "
              f"vector env ({r['num_envs']} copies, random actions: {r['raw']:,.0f} steps/s); with sample processing "
              f"(values, GAE) {r['processed']:,.0f} steps/s = {r['processed_ratio']:.0%} (medians of 40 alternating "
              f"rounds' ratios)")


if __name__ == "__main__":
    main()
