"""Recurrent PPO's speed beside sb3-contrib's RecurrentPPO and beside zoo's own feed-forward PPO, in one run.

Each contender is a whole process timed from its start to its exit (interpreter, imports, set-up, training), one
torch thread, on CartPole without velocities, at rl-baselines3-zoo's RecurrentPPO settings for that task (8 envs x
32 steps, 20 epochs of one 256-sample minibatch, an LSTM of 64 for each of actor and critic, 64-unit ReLU heads,
normalised observations):

- ``zoo_lstm``: ``zoo run --config configs/ppo_lstm_cartpole_novel.py`` (stop_return off, the same budget);
- ``zoo_gru``: the same with ``policy.recurrent=gru``;
- ``zoo_lstm_torch``: ``zoo_lstm`` with ``accel.recurrent_kernel=false`` (torch's LSTM module on padded segments
  instead of zoo's compiled loops with the resets inside, ``zoo.accel.recurrent_scan``);
- ``zoo_ff``: the same with ``policy.recurrent=none`` (zoo's feed-forward PPO at the same sizes);
- ``sb3_lstm``: sb3-contrib's ``RecurrentPPO("MlpLstmPolicy")`` in its own venv (``--sb3-python``; the env the
  same CartPole with velocities dropped, defined in the child).

The contenders run one after another in each round, the order rotated each round; the ratios are each round's,
then their median, of wall-clock time (the goals') and, beside it, of the CPU time each process used (user +
system: a process kept waiting for the CPU is not charged for the wait; a CPU slowed by other load moves both
alike). Usage::

    python benchmarks/memory_speed.py --sb3-python /path/to/sb3-venv/bin/python [--steps 20000] [--rounds 3]
    python benchmarks/memory_speed.py --contenders zoo_lstm zoo_ff --rounds 8   # one ratio, more rounds
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "ppo_lstm_cartpole_novel.py"

SB3_CHILD = """
import sys
import gymnasium as gym
import numpy as np
import torch
from torch import nn

torch.set_num_threads(1)
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

steps, seed = int(sys.argv[1]), int(sys.argv[2])


class NoVelocity(gym.ObservationWrapper):
    def __init__(self, env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(space.low[[0, 2]], space.high[[0, 2]], dtype=space.dtype)

    def observation(self, observation):
        return observation[[0, 2]]


env = VecNormalize(make_vec_env(lambda: NoVelocity(gym.make("CartPole-v1")), n_envs=8, seed=seed), norm_obs=True,
                   norm_reward=False)
linear = lambda start: (lambda progress: progress * start)
model = RecurrentPPO("MlpLstmPolicy", env, n_steps=32, batch_size=256, n_epochs=20, learning_rate=linear(1e-3),
                     clip_range=linear(0.2), gamma=0.98, gae_lambda=0.8, ent_coef=0.0, seed=seed, device="cpu",
                     policy_kwargs=dict(ortho_init=False, activation_fn=nn.ReLU, lstm_hidden_size=64,
                                        enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64])))
model.learn(steps)
"""


def _environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def _zoo(kind: str, steps: int, seed: int, runs: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "zoo", "run", "--config", str(CONFIG), "-q", "--exp-name", f"{kind}-{time.time_ns()}",
            "--set", f"runs_dir={runs}", "--set", f"seed={seed}", "--set", f"pipeline.max_env_steps={steps}",
            "--set", "pipeline.stop_return=None", "--set", "torch_threads=1", "--set", f"policy.recurrent={kind}",
            *extra]


def timed(command: list[str], cwd: Path) -> tuple[float, float]:
    """The command's wall-clock seconds and the CPU seconds (user + system) it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=_environment(), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{command[:4]} failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sb3-python", help="python of a venv with sb3-contrib 2.9.2 (left out when not given)")
    parser.add_argument("--steps", type=int, default=20_480)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--contenders", nargs="+", metavar="NAME",
                        help="run only these (of zoo_lstm, zoo_gru, zoo_lstm_torch, zoo_ff, sb3_lstm): more rounds of "
                             "a pair in the same time, on a noisy machine")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as runs:
        script = Path(runs) / "sb3_child.py"
        script.write_text(SB3_CHILD)
        contenders = {"zoo_lstm": _zoo("lstm", args.steps, args.seed, runs),
                      "zoo_gru": _zoo("gru", args.steps, args.seed, runs),
                      "zoo_lstm_torch": _zoo("lstm", args.steps, args.seed, runs, "--set",
                                             "accel.recurrent_kernel=false"),
                      "zoo_ff": _zoo("none", args.steps, args.seed, runs)}
        if args.sb3_python:
            contenders["sb3_lstm"] = [args.sb3_python, str(script), str(args.steps), str(args.seed)]
        unknown = set(args.contenders or ()) - set(contenders)
        if unknown:
            raise SystemExit(f"--contenders: {', '.join(sorted(unknown))} not among {', '.join(contenders)} "
                             f"(sb3_lstm needs --sb3-python)")
        names = [name for name in contenders if not args.contenders or name in args.contenders]
        rates: dict[str, list[float]] = {name: [] for name in names}
        cpu_rates: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(args.rounds):
            order = names[round_ % len(names):] + names[: round_ % len(names)]
            for name in order:
                wall, cpu = timed(contenders[name], Path(runs))
                rates[name].append(args.steps / wall)
                cpu_rates[name].append(args.steps / cpu)
            print(f"round {round_}: " + "  ".join(f"{name} {rates[name][-1]:,.0f}" for name in names), flush=True)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU")
    print(f"\n{cpu}; {args.steps:,} env steps per process, whole process, one thread, {args.rounds} rounds")
    for name in names:
        print(f"  {name:14s} {statistics.median(rates[name]):8,.0f} env steps/s (median)")

    def ratio(a: str, b: str, of: dict[str, list[float]]) -> str:
        values = [x / y for x, y in zip(of[a], of[b], strict=True)]
        return f"{statistics.median(values):.2f}x (rounds {min(values):.2f}-{max(values):.2f})"

    for a, b, note in (("zoo_lstm", "sb3_lstm", "   (goal: at least 5x)"), ("zoo_gru", "sb3_lstm", ""),
                       ("zoo_lstm", "zoo_ff", "   (goal: at least 0.6x)"), ("zoo_gru", "zoo_ff", ""),
                       ("zoo_lstm", "zoo_lstm_torch", "   (the compiled loops' gain)")):
        if a in rates and b in rates:
            print(f"{a} / {b}: {ratio(a, b, rates)}; by CPU time {ratio(a, b, cpu_rates)}{note}")


if __name__ == "__main__":
    main()
