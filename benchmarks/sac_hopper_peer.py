"""zoo's SAC (fp32 and bf16) against Stable-Baselines3's SAC on Hopper-v5: update speed, and SB3's learning curves.

Overview (``--speed``):
    Updates per second and CPU seconds of three contenders at the same settings (256x256 networks, batch 256,
    Adam 3e-4, automatic temperature, one update per env step, ``--learning-starts`` random steps first, then
    ``--updates`` updates; no evaluation): zoo's SAC with ``policy.precision=fp32``, zoo's with ``bf16``, and SB3's
    SAC. Each run is a fresh process (one torch thread) timed around its training call; the contenders are
    interleaved round by round and the best of ``--rounds`` kept. Prints each one's updates/s (updates over the
    wall time after the random steps, measured from the rate of the whole call) and the ratios.

    python benchmarks/sac_hopper_peer.py --speed [--updates 2000] [--rounds 2]

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
import time

import gymnasium as gym
import torch


def speed_child(contender: str, learning_starts: int, updates: int) -> dict[str, float]:
    """One contender's training call in this (fresh) process: wall and CPU seconds, and how many updates."""
    torch.set_num_threads(1)
    steps = learning_starts + updates
    if contender == "sb3":
        from stable_baselines3 import SAC
        from stable_baselines3.common.logger import Logger

        model = SAC("MlpPolicy", gym.make("Hopper-v5"), learning_starts=learning_starts, batch_size=256,
                    policy_kwargs=dict(net_arch=[256, 256]), seed=0, device="cpu", verbose=0)
        model.set_logger(Logger(folder=None, output_formats=[]))
        train = lambda: model.learn(steps)  # noqa: E731
    else:
        import sys
        import tempfile
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
        from zoo.run import train as zoo_train

        runs = tempfile.mkdtemp()
        config = {"exp_name": "speed", "seed": 0, "runs_dir": runs, "env": {"id": "Hopper-v5"},
                  "policy": {"type": "sac", "hidden_sizes": [256, 256], "batch_size": 256, "precision": contender},
                  "pipeline": {"buffer_size": steps, "learning_starts": learning_starts, "steps_per_iteration": 100,
                               "max_env_steps": steps, "eval_every": 0, "checkpoint_every": 0,
                               "save_replay": False, "log_every_s": 1e9}}
        train = lambda: zoo_train(config)  # noqa: E731
    wall, cpu = time.perf_counter(), time.process_time()
    train()
    return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, "updates": updates}


def speed(learning_starts: int, updates: int, rounds: int) -> None:
    import json
    import subprocess
    import sys

    if learning_starts % 100 or updates % 100:
        raise SystemExit("--learning-starts and --updates must be multiples of 100 (zoo's iterations here)")
    contenders = ("fp32", "bf16", "sb3")
    best: dict[str, dict[str, float]] = {}
    for round_index in range(rounds):
        for contender in contenders:
            done = subprocess.run([sys.executable, __file__, "--speed-child", contender, "--learning-starts",
                                   str(learning_starts), "--updates", str(updates)],
                                  check=True, capture_output=True, text=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"round {round_index + 1} {contender:>4}: {result['wall']:6.1f} s wall, {result['cpu']:6.1f} s CPU",
                  flush=True)
            if contender not in best or result["wall"] < best[contender]["wall"]:
                best[contender] = result
    rate = {c: best[c]["updates"] / best[c]["wall"] for c in contenders}
    print(f"\nHopper-v5 SAC, 256x256, batch 256, {learning_starts} random steps then {updates} updates "
          f"(1 per step), one thread, best of {rounds}:")
    for contender in contenders:
        name = "SB3 SAC" if contender == "sb3" else f"zoo SAC {contender}"
        print(f"  {name:<13} {rate[contender]:7.1f} updates/s (whole call)   CPU {best[contender]['cpu']:6.1f} s")
    print(f"  ratios: zoo bf16 / zoo fp32 {rate['bf16'] / rate['fp32']:.2f}x, zoo fp32 / SB3 "
          f"{rate['fp32'] / rate['sb3']:.2f}x, zoo bf16 / SB3 {rate['bf16'] / rate['sb3']:.2f}x (updates/s); "
          f"CPU seconds zoo fp32 / SB3 {best['fp32']['cpu'] / best['sb3']['cpu']:.2f}x, "
          f"zoo bf16 / SB3 {best['bf16']['cpu'] / best['sb3']['cpu']:.2f}x")


def td3_peer(env: gym.Env, seed: int, **overrides: object):  # noqa: ANN201 (SB3 is an optional import)
    """SB3's TD3 on ``env`` at configs/td3_hopper.py's settings, read from that file (one source for zoo's runs
    and the peer's); ``overrides`` replace SB3 keyword arguments."""
    import sys
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
    parser.add_argument("--speed", action="store_true", help="updates/s of zoo fp32, zoo bf16 and SB3")
    parser.add_argument("--speed-child", choices=("fp32", "bf16", "sb3"), help=argparse.SUPPRESS)
    parser.add_argument("--learning-starts", type=int, default=1000)
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.speed_child:
        import json

        print(json.dumps(speed_child(args.speed_child, args.learning_starts, args.updates)))
        return
    if args.speed:
        speed(args.learning_starts, args.updates, args.rounds)
        return
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
