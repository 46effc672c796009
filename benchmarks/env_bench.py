"""Environment stepping throughput of zoo's vector env modes (no torch, random numpy actions).

Run: ``python benchmarks/env_bench.py [--env-steps 20000] [--num-envs 8] [--repeats 3]``

Prints env steps per second (sub-env steps, i.e. ``num_envs`` per vector step; median of the repeats) and the
ratio to CartPole's ``vector_entry_point`` mode, all measured in this one run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np

from zoo.envs import make_vector_env, wrap_vector_env


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


def main() -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-steps", type=int, default=20000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
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
