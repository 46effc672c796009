"""Two builds of the compiled SAC update in one process, timed in interleaved rounds: an A/B without the 5%
process-to-process noise of this machine.

Overview:
    Builds one SAC policy per value of an environment variable that the compiled step reads when it is built
    (``--variable ZOO_CPP_WRAPPER --values 0 1``, the default), Hopper's sizes (11 observations, 3 actions, 256x256,
    batch 256), ``policy.compile=on``, on a replay of random transitions; compiles each, then times ``--rounds``
    rounds of ``--updates`` updates per policy, alternating, and prints each one's median ms per update and the
    ratio. Each build is its own graph in dynamo's cache (its own closure), so one process holds both. Separate
    processes of the same build differ by up to 5% here (memory placement, the other core); rounds inside one
    process by 1-3%.

    taskset -c 1 python benchmarks/step_ab.py [--precision bf16] [--variable ZOO_CPP_WRAPPER --values 0 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from precision_bench import BOX3, _policy, _replay  # noqa: E402

from zoo.plugins import load_plugins  # noqa: E402
from zoo.policies.base import LearnContext  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--variable", default="ZOO_CPP_WRAPPER")
    parser.add_argument("--values", nargs=2, default=["0", "1"])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--updates", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_plugins()
    replay = _replay((11,), BOX3)
    policies = {}
    for value in args.values:
        os.environ[args.variable] = value
        policy = _policy("sac", (11,), BOX3, [256, 256], 256, args.precision)
        policy.cfg.compile = "on"
        policy.plan_learning(10**6)
        policy.learn(replay, LearnContext(updates=30))  # the compile, and a warm-up
        if policy.compiled_step is None or not policy.compiled_step.active:
            raise SystemExit(f"{args.variable}={value}: the step did not compile")
        policies[value] = policy
    times: dict[str, list[float]] = {value: [] for value in args.values}
    for _ in range(args.rounds):
        for value, policy in policies.items():
            policy.learn(replay, LearnContext(updates=10))
            start = time.perf_counter()
            policy.learn(replay, LearnContext(updates=args.updates))
            times[value].append((time.perf_counter() - start) / args.updates * 1e3)
    medians = {value: statistics.median(rounds) for value, rounds in times.items()}
    for value, rounds in times.items():
        print(f"{args.precision} {args.variable}={value}: {medians[value]:.3f} ms per update (rounds "
              f"{', '.join(f'{t:.3f}' for t in rounds)})")
    first, second = args.values
    print(f"{args.variable}={second} takes {medians[second] / medians[first]:.3f}x the time of {first}")


if __name__ == "__main__":
    main()
