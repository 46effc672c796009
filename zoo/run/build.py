"""A resolved config's pipeline, built in this process (with this process's rank in its process group)."""

from __future__ import annotations

from easydict import EasyDict

from ..pipelines.loop import TrainingLoop
from ..registry import PIPELINE_REGISTRY
from ..rl_utils.distributed import world_info


def build_pipeline(cfg: EasyDict) -> TrainingLoop:
    """The pipeline named by ``cfg.pipeline.type``, built (envs and policy) but not run; in a worker of a
    multi-process pipeline, with this process's rank and the world size of its process group."""
    rank, world_size = world_info()
    return PIPELINE_REGISTRY.get(cfg.pipeline.type).create(cfg, rank, world_size)
