"""zoo's FlatOptimizer against torch.optim on the same flat parameter buffer, and against torch.optim per tensor.

Overview:
    For the networks zoo trains (PPO's 64x64 actor-critic, SAC's 256x256 critics), times one optimiser step of
    Adam and RMSprop three ways in one run: ``FlatOptimizer`` (zoo's fused maths on one buffer), ``torch.optim``
    given the same flat buffer as a single parameter (``foreach=False``, the single-tensor implementation), and
    ``torch.optim`` on the module's own parameters (its default multi-tensor path). It also checks that torch's
    single-tensor step on the flat buffer gives bit-identical parameters to FlatOptimizer over 50 steps, and prints
    the step's share of one whole PPO minibatch update (forward, backward, clip, step) for scale.

    python benchmarks/optim_bench.py
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

import torch  # noqa: E402
from torch import nn  # noqa: E402

from zoo.policies.optim import FlatOptimizer  # noqa: E402


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def _time(step, repeats: int = 2000) -> float:
    for _ in range(50):
        step()
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - start) / repeats * 1e6


def _torch_on_flat(module: nn.Module, algorithm: str, lr: float) -> tuple[torch.optim.Optimizer, FlatOptimizer]:
    # A FlatOptimizer only to lay the parameters out flat; torch.optim then steps the flat buffer as one parameter.
    flat_layout = FlatOptimizer(module, algorithm, lr)
    holder = nn.Parameter(flat_layout.flat, requires_grad=True)
    holder.grad = flat_layout.grad
    cls = torch.optim.Adam if algorithm == "adam" else torch.optim.RMSprop
    return cls([holder], lr=lr, eps=1e-8, foreach=False), flat_layout


def main() -> None:
    torch.set_num_threads(1)
    print(f"{'network':<22} {'algo':<8} {'params':>8} {'Flat us':>8} {'torch flat us':>14} {'torch per-tensor us':>20} "
          f"{'identical':>9}")
    for name, sizes in (("ppo 4-64-64-2 (x2)", [4, 64, 64, 2]), ("sac 17-256-256-1 (x2)", [23, 256, 256, 1])):
        for algorithm in ("adam", "rmsprop"):
            torch.manual_seed(0)
            nets = [nn.ModuleList([_mlp(sizes), _mlp(sizes)]) for _ in range(3)]
            nets[1].load_state_dict(nets[0].state_dict())
            nets[2].load_state_dict(nets[0].state_dict())
            flat = FlatOptimizer(nets[0], algorithm, 1e-3)
            torch_flat, layout = _torch_on_flat(nets[1], algorithm, 1e-3)
            cls = torch.optim.Adam if algorithm == "adam" else torch.optim.RMSprop
            per_tensor = cls(nets[2].parameters(), lr=1e-3, eps=1e-8)
            for p in nets[2].parameters():
                p.grad = torch.zeros_like(p)
            identical = True
            for step in range(50):
                g = torch.Generator().manual_seed(step)
                grad = torch.randn(flat.grad.shape, generator=g)
                flat.grad.copy_(grad)
                layout.grad.copy_(grad)
                flat.step()
                torch_flat.step()
                identical &= bool(torch.equal(flat.flat, layout.flat))
            count = flat.flat.numel()
            flat_us = _time(flat.step)
            torch_flat_us = _time(torch_flat.step)
            per_tensor_us = _time(per_tensor.step)
            print(f"{name:<22} {algorithm:<8} {count:>8,} {flat_us:>8.1f} {torch_flat_us:>14.1f} "
                  f"{per_tensor_us:>20.1f} {str(identical):>9}")
    # Scale: one whole PPO minibatch update (64 samples) on CartPole-sized networks.
    torch.manual_seed(0)
    net = nn.ModuleList([_mlp([4, 64, 64, 2]), _mlp([4, 64, 64, 1])])
    opt = FlatOptimizer(net, "adam", 3e-4)
    obs = torch.randn(64, 4)

    def update() -> None:
        loss = net[0](obs).logsumexp(-1).mean() + net[1](obs).pow(2).mean()
        opt.backward_and_step(loss, 0.5, lambda grad: None)

    whole = _time(update, 1000)
    print(f"\none PPO minibatch update (64 samples, forward + backward + clip + Adam step): {whole:.1f} us")


if __name__ == "__main__":
    main()
