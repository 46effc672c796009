"""zoo's TD3 update against Stable-Baselines3's ``TD3.train``, step for step, on identical weights and batches.

Builds zoo's TD3 and SB3's TD3 for Hopper-v5 (256x256, Adam 3e-4, batch 256, policy delay 2), copies zoo's actor,
twin critics and targets into SB3's networks, then feeds both the same random minibatches (about 10% terminal)
for ``--updates`` gradient updates, with the target smoothing noise at 0 (its draws are the only randomness in an
update). Prints the largest absolute difference of every network's weights afterwards: float32 rounding (about
1e-6) means the two updates are the same algorithm (critic loss, clipped double-Q target, delayed actor step,
Polyak targets, Adam), so a learning gap between the two libraries lies outside the update (seeds, collection).

    python benchmarks/td3_update_parity.py [--updates 20]

Needs ``stable-baselines3`` and ``mujoco`` (for the spaces); one torch thread.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from zoo.policies import LearnContext, TD3Policy  # noqa: E402


def linears(module: torch.nn.Module) -> list[torch.nn.Linear]:
    """The Linear layers of one of SB3's Sequential networks, in order."""
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=20)
    args = parser.parse_args()
    from stable_baselines3 import TD3
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    torch.set_num_threads(1)
    env = gym.make("Hopper-v5")
    cfg = EasyDict({**TD3Policy.default_config, "hidden_sizes": [256, 256], "actor_learning_rate": 3e-4,
                    "critic_learning_rate": 3e-4, "batch_size": 256, "policy_delay": 2, "policy_noise": 0.0})
    torch.manual_seed(0)
    zoo = TD3Policy(cfg, env.observation_space, env.action_space, torch.device("cpu"))
    peer = TD3("MlpPolicy", env, learning_rate=3e-4, batch_size=256, policy_delay=2, target_policy_noise=0.0,
               policy_kwargs=dict(net_arch=[256, 256]), device="cpu", seed=0)
    peer.set_logger(Logger(folder=None, output_formats=[]))
    pairs = [("actor", zoo.actor, peer.actor.mu), ("actor target", zoo.actor_target, peer.actor_target.mu)]
    critics = [("critic", zoo.critic, peer.critic), ("critic target", zoo.critic_target, peer.critic_target)]
    with torch.no_grad():
        for _, mine, theirs in pairs:
            for a, b in zip(mine.layers, linears(theirs)):
                b.weight.copy_(a.weight)
                b.bias.copy_(a.bias)
        for _, mine, theirs in critics:  # zoo's ensemble weights are (E, in, out); nn.Linear's (out, in)
            for e, q in enumerate(theirs.q_networks):
                for w, bias, b in zip(mine.weights, mine.biases, linears(q)):
                    b.weight.copy_(w[e].T)
                    b.bias.copy_(bias[e, 0])
    rng = np.random.default_rng(0)
    size, obs_dim, act_dim = 256, env.observation_space.shape[0], env.action_space.shape[0]
    for _ in range(args.updates):
        obs = torch.as_tensor(rng.normal(size=(size, obs_dim)), dtype=torch.float32)
        next_obs = torch.as_tensor(rng.normal(size=(size, obs_dim)), dtype=torch.float32)
        action = torch.as_tensor(rng.uniform(-1, 1, (size, act_dim)), dtype=torch.float32)  # Hopper's bounds
        reward = torch.as_tensor(rng.normal(size=size), dtype=torch.float32)
        terminated = torch.as_tensor(rng.random(size) < 0.1)
        zoo.updates += 1  # as OffPolicyPolicy.learn counts before each update
        zoo.update({"obs": obs, "action": action, "reward": reward, "next_obs": next_obs, "terminated": terminated,
                    "truncated": torch.zeros(size, dtype=torch.bool)}, LearnContext())
        sample = ReplayBufferSamples(obs, action, next_obs, terminated.float()[:, None], reward[:, None])
        peer.replay_buffer.sample = lambda *_, _s=sample, **__: _s
        peer.train(gradient_steps=1, batch_size=size)
    print(f"after {args.updates} updates (policy delay 2), largest |zoo - SB3| weight difference:")
    for name, mine, theirs in pairs:
        diff = max((a.weight - b.weight).abs().max().item() for a, b in zip(mine.layers, linears(theirs)))
        print(f"  {name:<14} {diff:.2e}")
    for name, mine, theirs in critics:
        diff = max((w[e].T - b.weight).abs().max().item()
                   for e, q in enumerate(theirs.q_networks) for w, b in zip(mine.weights, linears(q)))
        print(f"  {name:<14} {diff:.2e}")
    moved = (zoo.actor.layers[0].weight - zoo.actor_target.layers[0].weight).abs().max().item()
    print(f"  (how far the actor moved from its target meanwhile: {moved:.2e})")


if __name__ == "__main__":
    main()
