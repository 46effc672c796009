"""Which process-group backend DPPO's workers use (fast; CUDA faked): nccl only when each worker on the machine has
a GPU of its own (NCCL refuses two ranks on one GPU; found by a device=cuda run on a one-GPU machine)."""

from __future__ import annotations

import pytest
import torch
from easydict import EasyDict

from zoo.errors import ConfigError
from zoo.pipelines.parallel_sync import ParallelSyncPipeline

TORCHRUN = {"RANK": "0", "WORLD_SIZE": "8", "MASTER_ADDR": "h", "MASTER_PORT": "1", "LOCAL_RANK": "0"}


def _cfg(device: str, world_size: int, backend: str = "auto") -> EasyDict:
    return EasyDict(device=device, pipeline=dict(backend=backend, world_size=world_size))


@pytest.fixture
def gpus(monkeypatch):
    def set_count(count: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    return set_count


@pytest.mark.parametrize(("device", "workers", "count", "expected"), [
    ("cpu", 2, 0, "gloo"), ("cpu", 2, 4, "gloo"),
    ("cuda", 1, 1, "nccl"), ("cuda", 2, 1, "gloo"), ("cuda", 2, 2, "nccl"), ("cuda", 4, 2, "gloo"),
    ("cuda:0", 2, 4, "gloo"), ("cuda:1", 1, 4, "nccl"),
])
def test_auto_picks_nccl_only_with_a_gpu_per_worker(gpus, device, workers, count, expected):
    gpus(count)
    assert ParallelSyncPipeline.backend(_cfg(device, workers), environ={}) == expected


def test_explicit_nccl_with_shared_gpus_is_one_line(gpus):
    gpus(1)
    with pytest.raises(ConfigError) as refused:
        ParallelSyncPipeline.backend(_cfg("cuda", 2, "nccl"), environ={})
    assert str(refused.value) == ("pipeline.backend 'nccl' needs a GPU per worker: 2 workers on this machine share "
                                  "1 GPU(s) (device 'cuda'): use pipeline.backend=gloo (or auto), or fewer workers")
    assert ParallelSyncPipeline.backend(_cfg("cuda", 2, "gloo"), environ={}) == "gloo"


def test_under_torchrun_the_workers_of_this_machine_count(gpus):
    gpus(2)
    assert ParallelSyncPipeline.backend(_cfg("cuda", 8), {**TORCHRUN, "LOCAL_WORLD_SIZE": "2"}) == "nccl"
    assert ParallelSyncPipeline.backend(_cfg("cuda", 8), {**TORCHRUN, "LOCAL_WORLD_SIZE": "4"}) == "gloo"


def test_nccl_on_the_cpu_is_refused(gpus):
    gpus(0)
    with pytest.raises(ConfigError, match="needs CUDA"):
        ParallelSyncPipeline.backend(_cfg("cpu", 2, "nccl"), environ={})
