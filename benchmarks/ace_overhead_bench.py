"""What SAC-ACE's background causal fits cost: the same run with and without causal weights, one run each.

Usage:
    python benchmarks/ace_overhead_bench.py [--env HalfCheetah-v5] [--steps 40000]

Runs configs/sac_ace_halfcheetah.py (MuJoCo extra needed; ``--env Pendulum-v1`` works without it) for ``--steps``
env steps with ACE's default causal interval (10k env steps, 10k transitions of 17 + 6 + 1 columns for
HalfCheetah), once with ``causal_weights`` on and once off (resets off in both), and prints both wall-clocks, their
ratio, and the time one DirectLiNGAM fit takes on the same data outside training.
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
from zoo.experiment import train  # noqa: E402
from zoo.rl_utils import causal_action_weights  # noqa: E402


def run(env: str, steps: int, causal: bool) -> float:
    overrides = [f"env.id={env}", f"pipeline.max_env_steps={steps}", "pipeline.learning_starts=5000",
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
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    data = [rng.uniform(-1, 1, (10_000, 17)), rng.uniform(-1, 1, (10_000, 6)), rng.normal(size=10_000)]
    start = time.perf_counter()
    causal_action_weights(*data)
    fit = time.perf_counter() - start
    with_fits = run(args.env, args.steps, True)
    without = run(args.env, args.steps, False)
    fits = args.steps // 10_000
    print(f"{args.env}, {args.steps} env steps, {fits} causal fits: with {with_fits:.1f} s, without {without:.1f} s, "
          f"ratio {with_fits / without:.3f} ({(with_fits - without) / with_fits:+.1%} of the run)")
    print(f"one DirectLiNGAM fit on 10000 x 24 outside training: {fit:.2f} s "
          f"({fits * fit / with_fits:.1%} of the run if it had blocked training)")


if __name__ == "__main__":
    main()
