"""Stable-Baselines3 SAC on Hopper-v5 with rl-zoo settings: the peer figure for configs/sac_ace_hopper.py.

Overview:
    Trains SB3's SAC (256x256, lr 3e-4, batch 256, 10k random steps first, one update per step, automatic
    temperature) for ``--steps`` env steps and prints a 10-episode deterministic eval mean every ``--eval-every``
    steps, so zoo's SAC-ACE curve (``zoo run --config configs/sac_ace_hopper.py``, eval every 5k) can be read
    beside it. Needs ``stable-baselines3`` and ``mujoco``; one torch thread.

    python benchmarks/sac_hopper_peer.py --seed 0 --steps 100000
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--eval-every", type=int, default=10_000)
    args = parser.parse_args()
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(1)
    model = SAC("MlpPolicy", gym.make("Hopper-v5"), learning_starts=10_000, seed=args.seed, verbose=0)
    start = time.perf_counter()

    class Report(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % args.eval_every == 0:
                mean, std = evaluate_policy(self.model, gym.make("Hopper-v5"), n_eval_episodes=10,
                                            deterministic=True, warn=False)
                print(f"sb3 sac seed {args.seed}: {self.num_timesteps:>7} steps  eval {mean:8.1f} +- {std:6.1f}  "
                      f"({time.perf_counter() - start:.0f} s)", flush=True)
            return True

    model.learn(args.steps, callback=Report())


if __name__ == "__main__":
    main()
