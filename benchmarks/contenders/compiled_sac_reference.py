"""A compiled PyTorch SAC of our own, the way LeanRL builds its ``*_torchcompile`` scripts, as a speed reference.

Overview:
    What a careful practitioner writes without zoo: CleanRL's single-file SAC (an actor with mean and log-std heads,
    log-std squashed by tanh into [-5, 2]; two Q networks), with LeanRL's speed-ups: the two critics evaluated in
    one ``torch.vmap`` over stacked parameters, the replay as preallocated tensors, and the whole update --
    minibatch gather, target, critic, actor and temperature losses, gradients (``torch.autograd.grad``), a
    functional ``torch._foreach`` Adam, Polyak targets -- as one ``torch.compile``'d function with no host sync;
    acting through a compiled forward. Optional bf16 autocast around the update. It is a contender in
    ``benchmarks/sac_speed.py``, never used by zoo itself.

    python benchmarks/compiled_sac_reference.py --steps 3000 [--bf16] [--eager]
    (prints one JSON line: ms per loop step in the random phase and after the warm-up, compile seconds)
"""

from __future__ import annotations

import argparse
import json
import math
import time

import gymnasium as gym
import numpy as np
import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state


class Actor(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(obs_dim, 256), nn.Linear(256, 256)
        self.mean, self.log_std = nn.Linear(256, act_dim), nn.Linear(256, act_dim)
        self.register_buffer("scale", torch.as_tensor((high - low) / 2, dtype=torch.float32))
        self.register_buffer("bias", torch.as_tensor((high + low) / 2, dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.fc2(F.relu(self.fc1(obs))))
        log_std = -5.0 + 3.5 * (torch.tanh(self.log_std(x).float()) + 1.0)
        return self.mean(x).float(), log_std

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised squashed sample in [-1, 1] and its log-probability (tanh-corrected)."""
        mean, log_std = self(obs)
        noise = torch.randn_like(mean)
        pre = mean + log_std.exp() * noise
        action = torch.tanh(pre)
        log_prob = -0.5 * noise.square() - log_std - 0.5 * math.log(2 * math.pi)
        log_prob = log_prob - torch.log(1.0 - action.square() + 1e-6)
        return action, log_prob.sum(-1)


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(obs_dim + act_dim, 256), nn.Linear(256, 256), nn.Linear(256, 1)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.fc2(F.relu(self.fc1(torch.cat([obs, action], -1)))))
        return self.fc3(x).float().squeeze(-1)


def adam_(params: list[torch.Tensor], grads: list[torch.Tensor], state: dict, lr: float) -> None:
    """Adam (torch.optim's arithmetic, betas 0.9/0.999, eps 1e-8) on lists of tensors, the step count a tensor."""
    state["step"].add_(1)
    torch._foreach_lerp_(state["m"], grads, 0.1)
    torch._foreach_mul_(state["v"], 0.999)
    torch._foreach_addcmul_(state["v"], grads, grads, value=0.001)
    correction1 = 1.0 - torch.pow(0.9, state["step"])
    correction2 = 1.0 - torch.pow(0.999, state["step"])
    denom = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(state["v"]), correction2.sqrt()), 1e-8)
    torch._foreach_addcdiv_(params, torch._foreach_mul(state["m"], -lr / correction1), denom)


def adam_state(params: list[torch.Tensor]) -> dict:
    return {"step": torch.zeros(()), "m": [torch.zeros_like(p) for p in params],
            "v": [torch.zeros_like(p) for p in params]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--learning-starts", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=200, help="learning steps before the clock starts")
    parser.add_argument("--steps", type=int, default=3000, help="learning steps timed")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--eager", action="store_true", help="no torch.compile (the same code, eager)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    env = gym.make(args.env)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    low, high = env.action_space.low, env.action_space.high
    actor = Actor(obs_dim, act_dim, low, high)
    critics = [QNetwork(obs_dim, act_dim) for _ in range(2)]
    q_params, _ = stack_module_state(critics)  # {name: (2, ...)}
    q_params = {k: v.detach().requires_grad_() for k, v in q_params.items()}
    q_target = {k: v.clone() for k, v in q_params.items()}
    q_template = QNetwork(obs_dim, act_dim).to("meta")
    actor_params = list(actor.parameters())
    log_alpha = torch.zeros(1)
    states = {"actor": adam_state(actor_params), "q": adam_state(list(q_params.values())),
              "alpha": adam_state([log_alpha])}
    target_entropy = -float(act_dim)
    capacity = args.learning_starts + args.warmup + args.steps + 1
    buffers = {"obs": torch.zeros(capacity, obs_dim), "next_obs": torch.zeros(capacity, obs_dim),
               "action": torch.zeros(capacity, act_dim), "reward": torch.zeros(capacity),
               "terminated": torch.zeros(capacity, dtype=torch.bool)}

    def q_values(params: dict, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return torch.vmap(lambda p: functional_call(q_template, p, (obs, action)))(params)  # (2, B)

    def update(rows: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            obs, next_obs = buffers["obs"][rows], buffers["next_obs"][rows]
            action, reward = buffers["action"][rows], buffers["reward"][rows]
            not_done = (~buffers["terminated"][rows]).float()
            alpha = log_alpha.exp()
            with torch.no_grad():
                next_action, next_log_prob = actor.sample(next_obs)
                next_q = q_values(q_target, next_obs, next_action).min(0).values - alpha * next_log_prob
                target = reward + 0.99 * not_done * next_q
            q_loss = 0.5 * (q_values(q_params, obs, action) - target).pow(2).mean(1).sum()
            q_grads = torch.autograd.grad(q_loss, list(q_params.values()))
            with torch.no_grad():
                adam_(list(q_params.values()), list(q_grads), states["q"], 3e-4)
            new_action, log_prob = actor.sample(obs)
            q_pi = q_values({k: v.detach() for k, v in q_params.items()}, obs, new_action).min(0).values
            actor_loss = (alpha * log_prob - q_pi).mean()
            actor_grads = torch.autograd.grad(actor_loss, actor_params)
            with torch.no_grad():
                adam_(actor_params, list(actor_grads), states["actor"], 3e-4)
                alpha_grad = -(log_prob.detach().mean() + target_entropy).reshape(1)
                adam_([log_alpha], [alpha_grad], states["alpha"], 3e-4)
                torch._foreach_lerp_(list(q_target.values()), list(q_params.values()), 0.005)
            return q_loss.detach() + actor_loss.detach()

    def act(obs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            action, _ = actor.sample(obs)
            return action * actor.scale + actor.bias

    compile_s = 0.0
    if not args.eager:
        torch._dynamo.config.trace_autograd_ops = True
        update = torch.compile(update, fullgraph=True)
        act = torch.compile(act, fullgraph=True)
        everything = [*actor_params, *q_params.values(), *q_target.values(), log_alpha,
                      *[t for state in states.values() for t in (state["step"], *state["m"], *state["v"])]]
        saved = [t.detach().clone() for t in everything]
        start = time.perf_counter()
        update(torch.zeros(256, dtype=torch.long))  # the compile, on the zeroed buffers (excluded from timing)
        act(torch.zeros(1, obs_dim))
        compile_s = time.perf_counter() - start
        with torch.no_grad():  # undo that trial update
            for tensor, value in zip(everything, saved):
                tensor.copy_(value)

    obs, _ = env.reset(seed=args.seed)
    size = 0
    total = args.learning_starts + args.warmup + args.steps
    marks = {}
    for step in range(total):
        if step in (0, args.learning_starts, args.learning_starts + args.warmup):
            marks[step] = time.perf_counter()
        if step < args.learning_starts:
            action = env.action_space.sample()
        else:
            action = act(torch.as_tensor(obs, dtype=torch.float32)[None])[0].numpy()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        buffers["obs"][size] = torch.as_tensor(obs)
        buffers["next_obs"][size] = torch.as_tensor(next_obs)
        buffers["action"][size] = torch.as_tensor((action - (high + low) / 2) / ((high - low) / 2))
        buffers["reward"][size] = float(reward)
        buffers["terminated"][size] = bool(terminated)
        size += 1
        obs = next_obs if not (terminated or truncated) else env.reset()[0]
        if step >= args.learning_starts:
            update(torch.randint(size, (256,)))
    end = time.perf_counter()
    random_ms = (marks[args.learning_starts] - marks[0]) / args.learning_starts * 1e3
    learning_ms = (end - marks[args.learning_starts + args.warmup]) / args.steps * 1e3
    print(json.dumps({"random_ms": random_ms, "loop_ms": learning_ms, "compile_s": compile_s}))


if __name__ == "__main__":
    main()
