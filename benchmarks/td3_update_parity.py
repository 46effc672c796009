"""zoo's TD3 update against Stable-Baselines3's ``TD3.train``, step for step, on identical weights and batches.

Builds zoo's TD3 and SB3's TD3 for Hopper-v5 at configs/td3_hopper.py's settings (256x256, Adam 3e-4, batch 256,
policy delay 2; SB3's through ``sac_hopper_peer.td3_peer``), copies zoo's actor,
twin critics and targets into SB3's networks, then feeds both the same random minibatches (about 10% terminal)
for ``--updates`` gradient updates, with the target smoothing noise at 0 (its draws are the only randomness in an
update). Prints the largest absolute difference of every network's weights afterwards, beside a control: zoo
against zoo started from every weight moved one float32 step. After 20 updates (torch 2.13): actor 1.9e-6
(control 4.4e-7), critic 2.4e-4 (1.6e-4), targets 1.5e-7 (3.0e-8) and 6.0e-6 (3.7e-6). The critics' figure is
rounding that Adam amplifies (where a gradient element is tiny, its normalised step turns a rounding difference
into a step-sized one), as the control's shows. So the two updates are the same algorithm (critic loss, clipped
double-Q target, delayed actor step, Polyak targets, Adam); ``td3_loop_parity.py`` compares the whole training
loops. ``zoo_networks``/``sb3_networks`` (TD3 and SAC) give both libraries' weights in one layout.

    python benchmarks/td3_update_parity.py [--updates 20]

Needs ``stable-baselines3`` and ``mujoco`` (for the spaces); one torch thread.
"""

from __future__ import annotations

import argparse
import math
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


def zoo_networks(algo: str, policy: TD3Policy) -> dict[str, list[torch.Tensor]]:
    """zoo's TD3 (``algo="td3"``) or SAC parameters per network, as views shaped and ordered as SB3's
    (``sb3_networks``): zoo's ensemble weights are ``(E, in, out)``, its SAC actor has one output layer (mean rows,
    then log-std rows) where SB3's has two."""
    def critic(ensemble: torch.nn.Module) -> list[torch.Tensor]:
        return [t for e in range(ensemble.ensemble) for w, b in zip(ensemble.weights, ensemble.biases)
                for t in (w[e].T, b[e, 0])]

    def layers(modules: list[torch.nn.Linear]) -> list[torch.Tensor]:
        return [t for layer in modules for t in (layer.weight, layer.bias)]

    if algo == "td3":
        return {"actor": layers(policy.actor.layers), "critic": critic(policy.critic),
                "actor target": layers(policy.actor_target.layers), "critic target": critic(policy.critic_target)}
    last, dim = policy.actor.layers[-1], policy.action_dim
    actor = [*layers(policy.actor.layers[:-1]), last.weight[:dim], last.bias[:dim], last.weight[dim:], last.bias[dim:]]
    return {"actor": actor, "critic": critic(policy.critic), "critic target": critic(policy.target)}


def sb3_networks(algo: str, model) -> dict[str, list[torch.Tensor]]:  # noqa: ANN001 (SB3 is an optional import)
    """SB3's TD3 or SAC parameters per network, in ``zoo_networks``' order."""
    def tensors(*modules: torch.nn.Module) -> list[torch.Tensor]:
        return [t for module in modules for linear in linears(module) for t in (linear.weight, linear.bias)]

    critic, target = tensors(*model.critic.q_networks), tensors(*model.critic_target.q_networks)
    if algo == "td3":
        return {"actor": tensors(model.actor.mu), "critic": critic, "actor target": tensors(model.actor_target.mu),
                "critic target": target}
    return {"actor": tensors(model.actor.latent_pi, model.actor.mu, model.actor.log_std), "critic": critic,
            "critic target": target}


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
    torch.manual_seed(0)
    nudged = TD3Policy(cfg, env.observation_space, env.action_space, torch.device("cpu"))  # the control
    with torch.no_grad():
        for flat in (nudged.actor_optimizer.flat, nudged.critic_optimizer.flat):
            flat.copy_(torch.nextafter(flat, torch.full_like(flat, math.inf)))
        nudged.actor_target_flat.copy_(nudged.actor_optimizer.flat)
        nudged.critic_target_flat.copy_(nudged.critic_optimizer.flat)
    mine, theirs = zoo_networks("td3", zoo), sb3_networks("td3", peer)
    with torch.no_grad():
        for name in mine:
            for source, target in zip(mine[name], theirs[name], strict=True):
                target.copy_(source)
    rng = np.random.default_rng(0)
    size, obs_dim, act_dim = cfg.batch_size, env.observation_space.shape[0], env.action_space.shape[0]
    for _ in range(args.updates):
        obs = torch.as_tensor(rng.normal(size=(size, obs_dim)), dtype=torch.float32)
        next_obs = torch.as_tensor(rng.normal(size=(size, obs_dim)), dtype=torch.float32)
        action = torch.as_tensor(rng.uniform(-1, 1, (size, act_dim)), dtype=torch.float32)  # Hopper's bounds
        reward = torch.as_tensor(rng.normal(size=size), dtype=torch.float32)
        terminated = torch.as_tensor(rng.random(size) < 0.1)
        for policy in (zoo, nudged):
            policy.updates += 1  # as OffPolicyPolicy.learn counts before each update
            policy.update({"obs": obs, "action": action, "reward": reward, "next_obs": next_obs,
                           "terminated": terminated, "truncated": torch.zeros(size, dtype=torch.bool)}, LearnContext())
        sample = ReplayBufferSamples(obs, action, next_obs, terminated.float()[:, None], reward[:, None])
        peer.replay_buffer.sample = lambda *_, _s=sample, **__: _s
        peer.train(gradient_steps=1, batch_size=size)
    print(f"after {args.updates} updates (policy delay {cfg.policy_delay}), largest weight difference of zoo against "
          f"SB3, and (control) against zoo started from its weights moved one float32 step:")
    control = zoo_networks("td3", nudged)
    for name in mine:
        diff = max((a - b).abs().max().item() for a, b in zip(mine[name], theirs[name]))
        rounding = max((a - b).abs().max().item() for a, b in zip(mine[name], control[name]))
        print(f"  {name:<14} {diff:.2e}   control {rounding:.2e}")
    moved = (zoo.actor.layers[0].weight - zoo.actor_target.layers[0].weight).abs().max().item()
    print(f"  (how far the actor moved from its target meanwhile: {moved:.2e})")


if __name__ == "__main__":
    main()
