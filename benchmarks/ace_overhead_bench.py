"""What SAC-ACE's background causal fits cost: the same run with and without causal weights, one run each.

Usage:
    python benchmarks/ace_overhead_bench.py [--env HalfCheetah-v5] [--steps 40000] [--hidden 256] [--repeats 2]

Runs configs/sac_ace_halfcheetah.py (MuJoCo extra needed; ``--env Pendulum-v1`` works without it) for ``--steps``
env steps with ACE's default causal interval (10k env steps, 10k transitions of 17 + 6 + 1 columns for
HalfCheetah), with ``causal_weights`` on and off (resets off in both), alternating the order over ``--repeats``
pairs because this machine's speed drifts by several percent between runs; prints each pair, the median ratio, and
the time one DirectLiNGAM fit takes on the same data outside training. Smaller ``--hidden`` networks make every
update cheaper, so the fits weigh more: a conservative check.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from zoo.rl_utils import causal_action_weights  # noqa: E402
from zoo.run import train  # noqa: E402


def run(env: str, steps: int, causal: bool, hidden: int) -> float:
    overrides = [f"env.id={env}", f"pipeline.max_env_steps={steps}", "pipeline.learning_starts=5000",
                 f"policy.hidden_sizes=[{hidden}, {hidden}]",
                 "pipeline.eval_every=0", "pipeline.checkpoint_every=1000", "pipeline.log_every_s=1000",
                 f"policy.causal_weights={causal}", "policy.dormant_reset=false", "torch_threads=1"]
    with tempfile.TemporaryDirectory() as runs:
        start = time.perf_counter()
        train(ROOT / "configs" / "sac_ace_halfcheetah.py", [f"runs_dir={runs}", *overrides])
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--steps", type=int, default=40_000)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    data = [rng.uniform(-1, 1, (10_000, 17)), rng.uniform(-1, 1, (10_000, 6)), rng.normal(size=10_000)]
    start = time.perf_counter()
    causal_action_weights(*data)
    fit = time.perf_counter() - start
    fits = args.steps // 10_000
    ratios = []
    for repeat in range(args.repeats):
        order = (True, False) if repeat % 2 == 0 else (False, True)
        seconds = {causal: run(args.env, args.steps, causal, args.hidden) for causal in order}
        ratios.append(seconds[True] / seconds[False])
        print(f"{args.env}, {args.steps} env steps, {fits} causal fits, {args.hidden}x{args.hidden}: with fits "
              f"{seconds[True]:.1f} s, without {seconds[False]:.1f} s, ratio {ratios[-1]:.3f}", flush=True)
    print(f"median ratio {float(np.median(ratios)):.3f}; one DirectLiNGAM fit on 10000 x 24 outside training: "
          f"{fit:.2f} s ({fits * fit / seconds[True]:.1%} of the last run had it blocked training)")


if __name__ == "__main__":
    main()
