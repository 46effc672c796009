"""allreduce_grads / broadcast_params on two spawned gloo ranks, checked against gradients computed in the parent."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import end_spawned_worker, free_port
from torch import nn

from zoo.rl_utils.distributed import allreduce_grads, broadcast_params, world_info

WORLD_SIZE = 2
INIT_SEED = 100


class _Net(nn.Module):
    """float32 MLP, a float64 parameter between float32 ones, a head only rank 0 uses, an unused and a frozen one."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        self.scale = nn.Parameter(torch.randn(2, dtype=torch.float64))
        self.head = nn.Linear(8, 1)
        self.unused = nn.Parameter(torch.randn(3))
        self.frozen = nn.Parameter(torch.randn(2), requires_grad=False)
        self.register_buffer("running", torch.randn(2))
        self.register_buffer("steps", torch.randint(0, 1000, ()))
        self.register_buffer("mask", torch.rand(5) > 0.5)

    def loss(self, obs: torch.Tensor, use_head: bool) -> torch.Tensor:
        hidden = self.body[1](self.body[0](obs))
        loss = (self.body[2](hidden).double() * self.scale).pow(2).mean()
        if use_head:
            loss = loss + self.head(hidden).pow(2).mean().double()
        return loss


def _obs(seed: int) -> torch.Tensor:
    return torch.randn(16, 4, generator=torch.Generator().manual_seed(seed))


def _grads(net: nn.Module) -> dict[str, torch.Tensor | None]:
    return {name: None if p.grad is None else p.grad.detach().clone() for name, p in net.named_parameters()}


def _state(net: nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in net.state_dict().items()}


def _worker(rank: int, init_method: str, out_dir: str) -> None:
    dist.init_process_group(
        "gloo", init_method=init_method, rank=rank, world_size=WORLD_SIZE, timeout=timedelta(seconds=60)
    )
    try:
        torch.manual_seed(INIT_SEED + rank)  # deliberately different weights and buffers until the broadcast
        net = _Net()
        result = {"world_info": world_info(), "before": _state(net)}
        broadcast_params(net, src=0)
        result["after"] = _state(net)

        net.loss(_obs(rank), use_head=rank == 0).backward()
        result["local"] = _grads(net)
        allreduce_grads(net)
        result["synced"] = _grads(net)

        # Second round through the iterable path (a generator), with the head used by rank 1 only.
        net.zero_grad(set_to_none=True)
        net.loss(_obs(10 + rank), use_head=rank == 1).backward()
        allreduce_grads(p for p in net.parameters())
        result["synced_iterable"] = _grads(net)
    finally:
        dist.destroy_process_group()
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    end_spawned_worker()


@pytest.fixture(scope="module")
def rank_results(tmp_path_factory) -> list[dict]:
    out_dir = tmp_path_factory.mktemp("distributed")
    init_method = f"tcp://127.0.0.1:{free_port()}"
    mp.spawn(_worker, args=(init_method, str(out_dir)), nprocs=WORLD_SIZE, join=True)
    return [torch.load(out_dir / f"rank{rank}.pt") for rank in range(WORLD_SIZE)]


def _reference_mean_grads(obs_seeds: list[int], head_users: list[bool]) -> dict[str, torch.Tensor | None]:
    """Each rank's gradient computed independently from rank 0's initial weights, then averaged (None -> 0)."""
    torch.manual_seed(INIT_SEED)
    base = _Net()
    per_rank = []
    for seed, use_head in zip(obs_seeds, head_users):
        net = copy.deepcopy(base)
        net.loss(_obs(seed), use_head=use_head).backward()
        per_rank.append(_grads(net))
    expected = {}
    for name, param in base.named_parameters():
        if not param.requires_grad:
            expected[name] = None
            continue
        stacked = torch.stack([g[name] if g[name] is not None else torch.zeros_like(param) for g in per_rank])
        expected[name] = stacked.mean(dim=0)
    return expected


def _assert_grads_equal(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        if value is None:
            assert got[name] is None, name
            continue
        assert got[name].dtype == value.dtype, name
        tolerance = 1e-12 if value.dtype == torch.float64 else 1e-6
        torch.testing.assert_close(got[name], value, rtol=tolerance, atol=tolerance, msg=name)


def test_world_info_inside_the_group(rank_results):
    assert [r["world_info"] for r in rank_results] == [(0, 2), (1, 2)]


def test_broadcast_makes_every_rank_equal_rank_zero(rank_results):
    rank0_before, rank1_before = rank_results[0]["before"], rank_results[1]["before"]
    # The test can only fail if the ranks started different: check that they did, buffers included.
    for name in ("body.0.weight", "scale", "frozen", "running", "steps", "mask"):
        assert not torch.equal(rank0_before[name], rank1_before[name]), name
    for result in rank_results:
        assert result["after"].keys() == rank0_before.keys()
        for name, value in rank0_before.items():
            assert result["after"][name].dtype == value.dtype, name
            assert torch.equal(result["after"][name], value), name


def test_allreduce_averages_gradients_of_both_ranks(rank_results):
    expected = _reference_mean_grads([0, 1], [True, False])
    for result in rank_results:
        _assert_grads_equal(result["synced"], expected)
    # Rank 1 had no head gradient and nobody touched `unused`: zeros were materialised, then averaged.
    assert rank_results[1]["local"]["head.weight"] is None and rank_results[1]["local"]["unused"] is None
    assert torch.equal(rank_results[0]["synced"]["unused"], torch.zeros(3))
    assert rank_results[0]["synced"]["scale"].dtype == torch.float64
    # And the average really differs from each rank's own gradient.
    for result in rank_results:
        assert not torch.allclose(result["local"]["body.0.weight"], result["synced"]["body.0.weight"])


def test_allreduce_accepts_an_iterable_of_parameters(rank_results):
    expected = _reference_mean_grads([10, 11], [False, True])
    for result in rank_results:
        _assert_grads_equal(result["synced_iterable"], expected)


def test_no_op_without_a_process_group():
    assert not dist.is_initialized()
    assert world_info() == (0, 1)
    torch.manual_seed(0)
    net = _Net()
    net.loss(_obs(0), use_head=False).backward()
    grads, state = _grads(net), _state(net)
    allreduce_grads(net)
    broadcast_params(net)
    after = _grads(net)
    assert after["head.weight"] is None and after["unused"] is None  # no zero gradients created
    for name, value in grads.items():
        assert value is None or torch.equal(after[name], value), name
    for name, value in _state(net).items():
        assert torch.equal(value, state[name]), name


def test_no_op_with_a_single_rank_group():
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        assert world_info() == (0, 1)
        net = _Net()
        net.loss(_obs(0), use_head=False).backward()
        allreduce_grads(net)
        assert net.head.weight.grad is None  # returned before materialising zero gradients
    finally:
        dist.destroy_process_group()
