"""zoo's TD3 update against Stable-Baselines3's ``TD3.train``, step for step, on identical weights and batches.

Builds zoo's TD3 and SB3's TD3 for Hopper-v5 at configs/td3_hopper.py's settings (256x256, Adam 3e-4, batch 256,
policy delay 2; SB3's through ``sac_hopper_peer.td3_peer``), copies zoo's actor,
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

from zoo.config.files import load_config_file  # noqa: E402
from zoo.policies import LearnContext, TD3Policy  # noqa: E402


def linears(module: torch.nn.Module) -> list[torch.nn.Linear]:
    """The Linear layers of one of SB3's Sequential networks, in order."""
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]


def layer_pairs(zoo: TD3Policy, peer) -> dict[str, list]:  # noqa: ANN001 (SB3 is an optional import)
    """Per network, ``(weight, bias, linear)``: zoo's weight as an ``(out, in)`` view and bias as an ``(out,)`` view
    beside the SB3 ``nn.Linear`` that holds the same layer (zoo's ensemble weights are ``(E, in, out)``)."""
    pairs: dict[str, list] = {}
    for name, mine, theirs in (("actor", zoo.actor, peer.actor.mu), ("actor target", zoo.actor_target,
                                                                      peer.actor_target.mu)):
        pairs[name] = [(a.weight, a.bias, b) for a, b in zip(mine.layers, linears(theirs))]
    for name, mine, theirs in (("critic", zoo.critic, peer.critic), ("critic target", zoo.critic_target,
                                                                      peer.critic_target)):
        pairs[name] = [(w[e].T, bias[e, 0], b) for e, q in enumerate(theirs.q_networks)
                       for w, bias, b in zip(mine.weights, mine.biases, linears(q))]
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=20)
    args = parser.parse_args()
    from sac_hopper_peer import td3_peer
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    torch.set_num_threads(1)
    env = gym.make("Hopper-v5")
    torch.manual_seed(0)
    peer = td3_peer(env, 0, target_policy_noise=0.0)
    peer.set_logger(Logger(folder=None, output_formats=[]))
    settings = load_config_file(Path(__file__).resolve().parents[1] / "configs" / "td3_hopper.py").policy
    cfg = EasyDict({**TD3Policy.default_config, **{k: v for k, v in settings.items() if k in TD3Policy.default_config},
                    "policy_noise": 0.0})
    torch.manual_seed(0)
    zoo = TD3Policy(cfg, env.observation_space, env.action_space, torch.device("cpu"))
    pairs = layer_pairs(zoo, peer)
    with torch.no_grad():
        for weight, bias, linear in (pair for layers in pairs.values() for pair in layers):
            linear.weight.copy_(weight)
            linear.bias.copy_(bias)
    rng = np.random.default_rng(0)
    size, obs_dim, act_dim = cfg.batch_size, env.observation_space.shape[0], env.action_space.shape[0]
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
    print(f"after {args.updates} updates (policy delay {cfg.policy_delay}), largest |zoo - SB3| weight difference:")
    for name, layers in pairs.items():
        diff = max((weight - linear.weight).abs().max().item() for weight, _, linear in layers)
        print(f"  {name:<14} {diff:.2e}")
    moved = (zoo.actor.layers[0].weight - zoo.actor_target.layers[0].weight).abs().max().item()
    print(f"  (how far the actor moved from its target meanwhile: {moved:.2e})")


if __name__ == "__main__":
    main()
