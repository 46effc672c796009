"""IMPALA's policy-lag metric, exactly: the learner's version minus the version that collected each unroll of the
batch (a missing test found by a mutation audit: the metric was only checked to exist)."""

from __future__ import annotations

from pathlib import Path

import torch

from zoo.config.resolve import resolve_config
from zoo.run import build_pipeline


class ScriptedPool:
    """An ActorPool that hands out slots whose unrolls were (said to be) collected by given policy versions."""

    def __init__(self, slots, versions_per_take: list[list[int]]) -> None:
        self.slots, self.plan = slots, list(versions_per_take)
        self.restarts, self.steps_done = 0, torch.zeros(1, dtype=torch.int64)

    def start(self) -> None:
        pass

    def take(self, count: int, stop=None):
        versions = self.plan.pop(0)
        assert len(versions) == count
        for slot, version in enumerate(versions):
            self.slots.version[slot] = version
        return list(range(count)), [[] for _ in range(count)], 0.0

    def release(self, slots) -> None:
        pass

    def queue_depth(self) -> int:
        return 0

    def close(self) -> None:
        pass

    def state_dict(self) -> dict:
        return {"incarnations": [0], "restarts": 0}

    def load_state_dict(self, state: dict) -> None:
        pass


def test_the_policy_lag_is_the_learner_version_minus_each_unrolls_version(tmp_path: Path):
    cfg = resolve_config({
        "exp_name": "lag", "runs_dir": str(tmp_path), "env": {"id": "CartPole-v1"},
        "policy": {"type": "impala", "hidden_sizes": [8]},
        "pipeline": {"num_actors": 1, "num_envs": 2, "unroll_length": 4, "batch_unrolls": 3, "queue_size": 3,
                     "eval_every": 0}})
    pipeline = build_pipeline(cfg)
    try:
        # Updates 1, 2, 3: the learner is at version 0, 1, 2 when it learns (it publishes version + 1 after).
        pipeline.pool = ScriptedPool(pipeline.slots, [[0, 0, 0], [0, 1, 1], [0, 2, 1]])
        first, second, third = (pipeline.iterate() for _ in range(3))
        assert (first["policy_lag_mean"], first["policy_lag_max"]) == (0.0, 0.0)
        assert (second["policy_lag_mean"], second["policy_lag_max"]) == (1 / 3, 1.0)  # lags 1, 0, 0
        assert (third["policy_lag_mean"], third["policy_lag_max"]) == (1.0, 2.0)  # lags 2, 0, 1
        assert pipeline.version == 3 and pipeline.board.version() == 3
    finally:
        pipeline.close()
