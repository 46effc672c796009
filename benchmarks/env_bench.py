"""Environment stepping throughput of zoo's vector env modes and of its two env backends (no torch, random numpy
actions).

Run: ``python benchmarks/env_bench.py [--env-steps 20000] [--num-envs 8] [--repeats 3]`` (the gymnasium modes), or
``taskset -c 1 python benchmarks/env_bench.py --backends [--repeats 5] [--scale 1.0]`` (gymnasium against EnvPool
on Hopper-v5, HalfCheetah-v5, CartPole-v1 and Pong at 1, 8 and 16 envs; needs the mujoco, atari and envpool extras),
or ``taskset -c 1 python benchmarks/env_bench.py --rollouts [--repeats 5]`` (one ppo_hopper iteration's collection,
2048 steps of one Hopper-v5 through zoo's collector with PPO acting, against its learning step), or
``taskset -c 1 python benchmarks/env_bench.py --whole-runs [--repeats 2] [--only ppo]`` (whole ``zoo run``
processes, same seed, alternating backends: configs/ppo_hopper.py for 200k env steps, the same with 8 envs of
256-step rollouts, and SAC on Hopper-v5, configs/sac_ace_hopper.py with policy.type=sac, for 20k; ``--only`` keeps
the runs whose label starts with it; the wall-clock of each process, start-up, evaluations and checkpoints
included). Without ``taskset`` the same cases
show the backends on the whole machine (EnvPool's threads then run on other cores).

``python benchmarks/env_bench.py --raw [--repeats 5]`` (with or without ``taskset``) steps one Hopper-v5 as each
library makes it, with none of zoo's wrappers: the per-step cost of the physics and of each library itself.

Prints env steps per second (sub-env steps, i.e. ``num_envs`` per vector step; median of the repeats) and ratios,
all measured in this one run. The backend cases are interleaved (every case once per repeat, in turn), so that a
change in the machine's load falls on both backends alike; each case steps its envs as zoo's collector builds them
(``EnvSpec.make_vector``: the env-call guard included, zoo's bookkeeping wrappers not), with the default vector
mode (``vector_entry_point`` for CartPole, ``sync`` for the others) on gymnasium. Pong is zoo's ``atari`` env
(gymnasium's ALE with AtariPreprocessing and a 4-frame stack) against EnvPool's ``Pong-v5`` (the same processing
in C++).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np

from zoo.envs import EnvSpec, make_vector_env, wrap_vector_env


def _random_actions(venv: gym.vector.VectorEnv, vector_steps: int, seed: int) -> np.ndarray:
    """Pre-drawn actions so that sampling cost is not part of the timing."""
    rng = np.random.default_rng(seed)
    space = venv.single_action_space
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(space.start, space.start + space.n, size=(vector_steps, venv.num_envs))
    shape = (vector_steps, venv.num_envs, *space.shape)
    return rng.uniform(space.low, space.high, size=shape).astype(space.dtype)


def steps_per_second(build: Callable[[], gym.vector.VectorEnv], env_steps: int, repeats: int) -> float:
    """Median sub-env steps per second over ``repeats`` timed runs of ``env_steps`` steps each."""
    venv = build()
    vector_steps = max(1, env_steps // venv.num_envs)
    actions = _random_actions(venv, vector_steps, seed=0)
    venv.reset(seed=0)
    for step in range(min(100, vector_steps)):  # warm-up: worker start, caches
        venv.step(actions[step])
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for step in range(vector_steps):
            venv.step(actions[step])
        rates.append(vector_steps * venv.num_envs / (time.perf_counter() - start))
    venv.close()
    return statistics.median(rates)


# (label, gymnasium spec, EnvPool spec, env steps per timed run at scale 1)
BACKEND_ENVS = (
    ("Hopper-v5", EnvSpec("Hopper-v5"), EnvSpec("Hopper-v5", backend="envpool"), 6000),
    ("HalfCheetah-v5", EnvSpec("HalfCheetah-v5"), EnvSpec("HalfCheetah-v5", backend="envpool"), 6000),
    ("CartPole-v1", EnvSpec("CartPole-v1"), EnvSpec("CartPole-v1", backend="envpool"), 40000),
    ("Pong", EnvSpec("atari", {"game": "Pong"}), EnvSpec("Pong-v5", backend="envpool"), 1500),
)


class _Timed:
    """One case: a vector env built once, stepped ``vector_steps`` steps per timed run with pre-drawn actions."""

    def __init__(self, spec: EnvSpec, num_envs: int, env_steps: int) -> None:
        self.venv = spec.make_vector(num_envs, seed=0)
        self.vector_steps = max(1, env_steps // num_envs)
        self.actions = _random_actions(self.venv, self.vector_steps, seed=0)
        self.venv.reset(seed=0)
        for step in range(min(50, self.vector_steps)):  # warm-up: caches, EnvPool's threads
            self.venv.step(self.actions[step])
        self.rates: list[float] = []

    def run(self) -> None:
        step, actions = self.venv.step, self.actions
        start = time.perf_counter()
        for index in range(self.vector_steps):
            step(actions[index])
        self.rates.append(self.vector_steps * self.venv.num_envs / (time.perf_counter() - start))


def compare_backends(repeats: int, scale: float, sizes: tuple[int, ...] = (1, 8, 16)) -> None:
    """Print env steps/s of both backends for ``BACKEND_ENVS`` at ``sizes`` envs, interleaved over ``repeats``."""
    cases: list[tuple[str, int, _Timed, _Timed]] = []
    for label, gymnasium_spec, envpool_spec, env_steps in BACKEND_ENVS:
        for num_envs in sizes:
            steps = max(num_envs, int(env_steps * scale))
            cases.append(
                (label, num_envs, _Timed(gymnasium_spec, num_envs, steps), _Timed(envpool_spec, num_envs, steps))
            )
    for _ in range(repeats):
        for _, _, gymnasium_case, envpool_case in cases:
            gymnasium_case.run()
            envpool_case.run()
    print(f"env steps/s, median of {repeats} interleaved repeats (random actions, EnvSpec.make_vector)")
    print(f"{'env':<16} {'envs':>5} {'gymnasium':>12} {'envpool':>12} {'envpool/gym':>12}")
    for label, num_envs, gymnasium_case, envpool_case in cases:
        gymnasium_rate, envpool_rate = statistics.median(gymnasium_case.rates), statistics.median(envpool_case.rates)
        print(
            f"{label:<16} {num_envs:>5} {gymnasium_rate:>12,.0f} {envpool_rate:>12,.0f} "
            f"{envpool_rate / gymnasium_rate:>12.2f}"
        )
        gymnasium_case.venv.close()
        envpool_case.venv.close()


# (label, config, overrides): the whole runs of ``--whole-runs``
WHOLE_RUNS = (
    ("ppo_hopper 200k", "configs/ppo_hopper.py", ("pipeline.max_env_steps=200000",)),
    # the same 2,048-step rollouts from 8 envs of 256 steps: where EnvPool batches (not the config's learning)
    ("ppo_hopper 8x256 200k", "configs/ppo_hopper.py",
     ("pipeline.max_env_steps=200000", "pipeline.num_envs=8", "pipeline.rollout_steps=256")),
    ("sac hopper 20k", "configs/sac_ace_hopper.py", ("policy.type=sac", "pipeline.max_env_steps=20000")),
)


def _whole_run(config: str, overrides: tuple[str, ...], backend: str, runs_dir: str) -> tuple[float, float]:
    """Wall-clock and CPU seconds (user + system, EnvPool's threads included) of one ``zoo run`` process (seed 0,
    quiet). On a shared machine the CPU seconds are the steadier figure: other processes' load lengthens the
    wall-clock, not them."""
    command = [
        sys.executable,
        "-m",
        "zoo",
        "run",
        "--config",
        config,
        "-q",
        "--set",
        f"env.backend={backend}",
        "--set",
        f"runs_dir={runs_dir}",
        "--set",
        "seed=0",
    ]
    for override in overrides:
        command += ["--set", override]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compare_whole_runs(repeats: int, only: str | None = None) -> None:
    """Print the wall-clock and CPU seconds of ``WHOLE_RUNS`` (those whose label starts with ``only``, if given) on
    both backends, alternating, ``repeats`` times each (every run in a fresh runs directory)."""
    runs = [run for run in WHOLE_RUNS if only is None or run[0].startswith(only)]
    if not runs:
        raise SystemExit(f"--only {only!r} names none of the whole runs ({', '.join(run[0] for run in WHOLE_RUNS)})")
    seconds: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as runs_dir:
        for repeat in range(repeats):
            for label, config, overrides in runs:
                for backend in ("gymnasium", "envpool"):
                    fresh = f"{runs_dir}/{repeat}-{backend}-{label.replace(' ', '_')}"
                    seconds.setdefault((label, backend), []).append(_whole_run(config, overrides, backend, fresh))
    print(f"whole zoo run processes, wall-clock (CPU) seconds, each run; ratios of the medians of {repeats}; seed 0")
    print(f"{'run':<18} {'gymnasium':>28} {'envpool':>28} {'wall ratio':>10} {'CPU ratio':>9}")
    for label, _, _ in runs:
        gymnasium_runs, envpool_runs = seconds[(label, "gymnasium")], seconds[(label, "envpool")]
        ratios = [statistics.median(e[k] for e in envpool_runs) / statistics.median(g[k] for g in gymnasium_runs)
                  for k in (0, 1)]
        print(f"{label:<18} {' '.join(f'{w:.1f} ({c:.1f})' for w, c in gymnasium_runs):>28} "
              f"{' '.join(f'{w:.1f} ({c:.1f})' for w, c in envpool_runs):>28} {ratios[0]:>10.3f} {ratios[1]:>9.3f}")


def compare_rollouts(repeats: int) -> None:
    """Print the seconds of one ppo_hopper iteration's rollout (2048 steps, one env, PPO acting, every wrapper) on
    both backends, interleaved, beside that iteration's learning step: the share of a run the backend can change."""
    import torch

    from zoo.config import load_config_file
    from zoo.config.resolve import resolve_config
    from zoo.pipelines.collector import VectorCollector
    from zoo.policies.base import LearnContext
    from zoo.policies.build import build_policy

    torch.set_num_threads(1)
    cfg = resolve_config(load_config_file("configs/ppo_hopper.py"))
    collectors = {backend: VectorCollector(EnvSpec("Hopper-v5", backend=backend), 1, seed=0, normalize_obs=True,
                                           normalize_reward=True) for backend in ("gymnasium", "envpool")}
    policy = build_policy(cfg, collectors["gymnasium"].observation_space, collectors["gymnasium"].action_space)
    seconds: dict[str, list[float]] = {"gymnasium": [], "envpool": [], "learn": []}
    for _ in range(repeats):
        for backend, collector in collectors.items():
            start = time.perf_counter()
            rollout = collector.rollout(policy, 2048)
            seconds[backend].append(time.perf_counter() - start)
        start = time.perf_counter()
        policy.learn(policy.process_rollout(rollout), LearnContext(0.0, 0, 2048, 0, 1, 1))
        seconds["learn"].append(time.perf_counter() - start)
    print(f"one ppo_hopper iteration, seconds (median of {repeats}, interleaved)")
    for name, values in seconds.items():
        print(f"{name:<28} {statistics.median(values):8.3f}")


def compare_raw(repeats: int, env_steps: int = 4000) -> None:
    """Print microseconds per step of one Hopper-v5 as gymnasium makes it (``gym.make``, no vector env, none of zoo's
    wrappers) and of EnvPool's one-env pool stepped directly, interleaved: the physics and each library's own
    per-step cost, without zoo's adapters. EnvPool steps in a worker thread; with another core free the hand-off
    crosses cores."""
    import envpool

    actions = np.random.default_rng(0).uniform(-1, 1, (env_steps, 1, 3)).astype(np.float32)
    env = gym.make("Hopper-v5")
    env.reset(seed=0)
    pool = envpool.make_gymnasium("Hopper-v5", num_envs=1, batch_size=1, seed=0)
    pool.reset()
    timings: dict[str, list[float]] = {"gymnasium": [], "envpool": []}
    for _ in range(repeats):
        start = time.perf_counter()
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action[0])
            if terminated or truncated:
                env.reset()
        timings["gymnasium"].append((time.perf_counter() - start) / env_steps * 1e6)
        start = time.perf_counter()
        for action in actions:
            pool.step(action)  # EnvPool resets a finished episode at its next step itself
        timings["envpool"].append((time.perf_counter() - start) / env_steps * 1e6)
    gymnasium_us, envpool_us = (statistics.median(timings[name]) for name in ("gymnasium", "envpool"))
    print(f"one Hopper-v5, us per step (median of {repeats}, interleaved): gymnasium.make {gymnasium_us:.1f}, "
          f"EnvPool's pool {envpool_us:.1f}, envpool/gymnasium time {envpool_us / gymnasium_us:.2f}")


def main() -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-steps", type=int, default=20000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backends", action="store_true", help="gymnasium against EnvPool (see the docstring)")
    parser.add_argument("--scale", type=float, default=1.0, help="scales the backend cases' steps per timed run")
    parser.add_argument("--whole-runs", action="store_true", help="whole zoo runs on both backends (see the docstring)")
    parser.add_argument("--rollouts", action="store_true", help="ppo_hopper's collection on each backend")
    parser.add_argument("--only", default=None, help="with --whole-runs: the runs whose label starts with this")
    parser.add_argument("--raw", action="store_true", help="one Hopper-v5 stepped directly on each backend")
    args = parser.parse_args()
    if args.raw:
        compare_raw(args.repeats)
        return
    if args.rollouts:
        compare_rollouts(args.repeats)
        return
    if args.whole_runs:
        compare_whole_runs(args.repeats, args.only)
        return
    if args.backends:
        compare_backends(args.repeats, args.scale)
        return
    n = args.num_envs

    def wrapped_cartpole() -> gym.vector.VectorEnv:
        venv = make_vector_env("CartPole-v1", n, seed=0, mode="vector_entry_point")
        return wrap_vector_env(venv, normalize_obs=True, normalize_reward=True)[0]

    cases: list[tuple[str, Callable[[], gym.vector.VectorEnv]]] = [
        ("CartPole-v1 vector_entry_point", lambda: make_vector_env("CartPole-v1", n, mode="vector_entry_point")),
        ("CartPole-v1 sync", lambda: make_vector_env("CartPole-v1", n, mode="sync")),
        ("CartPole-v1 async", lambda: make_vector_env("CartPole-v1", n, mode="async")),
        ("Pendulum-v1 sync", lambda: make_vector_env("Pendulum-v1", n, mode="sync")),
        ("CartPole-v1 vector_entry_point + stats/obs/reward wrappers", wrapped_cartpole),
    ]
    results = [(name, steps_per_second(build, args.env_steps, args.repeats)) for name, build in cases]
    reference = results[0][1]
    print(f"{args.env_steps} env steps, {n} envs, median of {args.repeats}")
    print(f"{'case':<60} {'steps/s':>12} {'ratio':>8}")
    for name, rate in results:
        print(f"{name:<60} {rate:>12,.0f} {rate / reference:>8.3f}")


if __name__ == "__main__":
    main()
