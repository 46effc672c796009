"""Stable-Baselines3 beside zoo on Hopper-v5: the side-by-side speed comparison (``--speed``), SB3's learning curves.

Overview (``--speed``): runs ``benchmarks/sac_speed.py`` (its arguments follow ``--speed``): zoo's SAC fp32/bf16,
    eager and compiled, a LeanRL-style compiled SAC of our own, SB3's and SBX's SAC, side by side on one pinned CPU,
    one thread, interleaved; ms per loop step after the warm-up, and the ratios.

    python benchmarks/sac_hopper_peer.py --speed [--rounds 3]

Overview (learning curve):
    Trains SB3's SAC (256x256, lr 3e-4, batch 256, 10k random steps first, one update per step, automatic
    temperature) for ``--steps`` env steps and prints a 10-episode deterministic eval mean every ``--eval-every``
    steps, so zoo's SAC-ACE curve (``zoo run --config configs/sac_ace_hopper.py``, eval every 5k) can be read
    beside it. Needs ``stable-baselines3`` and ``mujoco``; one torch thread.

    python benchmarks/sac_hopper_peer.py --seed 0 --steps 100000

    ``--algo td3`` trains SB3's TD3 instead, at configs/td3_hopper.py's settings (256x256, Adam 3e-4, batch 256,
    10k random steps, Gaussian exploration noise 0.1, policy delay 2, smoothing noise 0.2 clipped at 0.5, one update
    per step), to be read beside zoo's td3_hopper bench rows (`zoo bench mujoco --entries td3_hopper`, 200k):

    python benchmarks/sac_hopper_peer.py --algo td3 --seed 0 --steps 200000
"""

from __future__ import annotations

import argparse
import sys
import time

import gymnasium as gym
import torch


def td3_peer(env: gym.Env, seed: int, **overrides: object):  # noqa: ANN201 (SB3 is an optional import)
    """SB3's TD3 on ``env`` at configs/td3_hopper.py's settings, read from that file (one source for zoo's runs
    and the peer's); ``overrides`` replace SB3 keyword arguments."""
    from pathlib import Path

    import numpy as np
    from stable_baselines3 import TD3
    from stable_baselines3.common.noise import NormalActionNoise

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))  # run from a checkout
    from zoo.config.files import load_config_file

    config = load_config_file(root / "configs" / "td3_hopper.py")
    policy, pipe = config.policy, config.pipeline
    if policy.actor_learning_rate != policy.critic_learning_rate:
        raise SystemExit("configs/td3_hopper.py: SB3's TD3 takes one learning rate; the actor's and critics' differ")
    dim = env.action_space.shape[0]
    kwargs = dict(learning_rate=policy.actor_learning_rate, buffer_size=pipe.buffer_size,
                  learning_starts=pipe.learning_starts, batch_size=policy.batch_size, tau=policy.tau,
                  gamma=policy.gamma, train_freq=pipe.train_freq, gradient_steps=pipe.gradient_steps,
                  policy_delay=policy.policy_delay, target_policy_noise=policy.policy_noise,
                  target_noise_clip=policy.noise_clip,
                  action_noise=NormalActionNoise(np.zeros(dim), policy.exploration_noise * np.ones(dim)),
                  policy_kwargs=dict(net_arch=list(policy.hidden_sizes)), seed=seed, device="cpu", verbose=0)
    return TD3("MlpPolicy", env, **{**kwargs, **overrides})


def peer_model(algo: str, seed: int):  # noqa: ANN201 (SB3 is an optional import)
    """SB3's SAC (its defaults, 10k random steps) or TD3 at configs/td3_hopper.py's settings, on Hopper-v5."""
    env = gym.make("Hopper-v5")
    if algo == "sac":
        from stable_baselines3 import SAC

        return SAC("MlpPolicy", env, learning_starts=10_000, seed=seed, verbose=0)
    return td3_peer(env, seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--eval-every", type=int, default=10_000)
    parser.add_argument("--algo", choices=("sac", "td3"), default="sac", help="which SB3 learning curve")
    parser.add_argument("--speed", action="store_true", help="the side-by-side speed comparison (sac_speed.py)")
    args, rest = parser.parse_known_args()
    if args.speed:
        import sac_speed

        sys.argv = [sac_speed.__file__, *rest]
        sac_speed.main()
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(1)
    model = peer_model(args.algo, args.seed)
    start = time.perf_counter()

    class Report(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % args.eval_every == 0:
                mean, std = evaluate_policy(self.model, gym.make("Hopper-v5"), n_eval_episodes=10,
                                            deterministic=True, warn=False)
                print(f"sb3 {args.algo} seed {args.seed}: {self.num_timesteps:>7} steps  eval {mean:8.1f} "
                      f"+- {std:6.1f}  ({time.perf_counter() - start:.0f} s)", flush=True)
            return True

    model.learn(args.steps, callback=Report())


if __name__ == "__main__":
    main()
