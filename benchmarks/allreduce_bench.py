"""Flat-buffer gradient all-reduce (``zoo.rl_utils.allreduce_grads``) against one all_reduce call per parameter.

Overview:
    Spawns ``--world-size`` gloo ranks on loopback. For each MLP, every rank fills its gradients with the same
    seeded random values per iteration and times both methods, alternating them iteration by iteration so that
    machine noise hits both alike; a barrier precedes every timed call. Rank 0 prints the median time per call
    of each method and the ratio (per-parameter / flat, > 1 means the flat buffer is faster), and checks that
    both methods give the same averaged gradients.

    python benchmarks/allreduce_bench.py --iters 200
"""

from __future__ import annotations

import argparse
import functools
import os
import socket
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from zoo.rl_utils.distributed import allreduce_grads  # noqa: E402

MODELS = {
    "mlp 64-64-64-64": [64, 64, 64, 64],
    "mlp 256-1024-1024-1024-256": [256, 1024, 1024, 1024, 256],
}


def _mlp(sizes: list[int]) -> nn.Module:
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(fan_in, fan_out), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def _allreduce_per_parameter(model: nn.Module, world_size: int) -> None:
    for param in model.parameters():
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
        param.grad.div_(world_size)


def _fill_grads(model: nn.Module, rank: int, iteration: int) -> None:
    generator = torch.Generator().manual_seed(1000 * iteration + rank)
    for param in model.parameters():
        param.grad = torch.randn(param.shape, generator=generator)


def _timed(fn) -> float:
    dist.barrier()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _worker(rank: int, world_size: int, init_method: str, iters: int, warmup: int) -> None:
    torch.set_num_threads(1)  # the ranks share the machine's cores
    dist.init_process_group(
        "gloo", init_method=init_method, rank=rank, world_size=world_size, timeout=timedelta(seconds=120)
    )
    try:
        for name, sizes in MODELS.items():
            model = _mlp(sizes)
            times: dict[str, list[float]] = {"flat": [], "per-parameter": []}
            methods = {
                "flat": functools.partial(allreduce_grads, model),
                "per-parameter": functools.partial(_allreduce_per_parameter, model, world_size),
            }
            for iteration in range(warmup + iters):
                order = list(methods) if iteration % 2 == 0 else list(reversed(methods))
                for method in order:
                    _fill_grads(model, rank, iteration)
                    elapsed = _timed(methods[method])
                    if iteration >= warmup:
                        times[method].append(elapsed)
            # Same inputs through both methods must give the same averaged gradients.
            _fill_grads(model, rank, 0)
            allreduce_grads(model)
            flat_result = [p.grad.clone() for p in model.parameters()]
            _fill_grads(model, rank, 0)
            _allreduce_per_parameter(model, world_size)
            same = all(torch.allclose(a, p.grad, rtol=1e-6, atol=1e-7) for a, p in zip(flat_result, model.parameters()))
            if rank == 0:
                flat_ms = 1e3 * statistics.median(times["flat"])
                per_param_ms = 1e3 * statistics.median(times["per-parameter"])
                num_params = sum(p.numel() for p in model.parameters())
                num_tensors = len(list(model.parameters()))
                print(
                    f"{name:28s} {num_params:>9,d} params in {num_tensors:2d} tensors | "
                    f"flat {flat_ms:8.3f} ms | per-parameter {per_param_ms:8.3f} ms | "
                    f"ratio {per_param_ms / flat_ms:5.2f}x | results equal: {same}",
                    flush=True,
                )
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200, help="timed iterations per method and model")
    parser.add_argument("--warmup", type=int, default=20, help="untimed iterations first")
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    print(
        f"gloo, {args.world_size} ranks on loopback, torch {torch.__version__}, "
        f"{args.iters} timed iterations (median per call)"
    )
    mp.spawn(
        _worker,
        args=(args.world_size, f"tcp://127.0.0.1:{port}", args.iters, args.warmup),
        nprocs=args.world_size,
        join=True,
    )


if __name__ == "__main__":
    main()
