"""Serial off-policy pipeline (SAC, SAC-ACE): vector collector -> Transitions -> replay buffer -> learn.

Until ``learning_starts`` env steps the envs take uniformly random actions. Then every ``train_freq`` steps of
each env the policy learns from the replay buffer with ``gradient_steps`` updates (the update-to-data ratio is
``gradient_steps / (train_freq * num_envs)``). One iteration (one metrics row) covers ``steps_per_iteration``
env steps. Transitions keep terminated and truncated apart; a truncated one carries its final observation and
autoreset steps are never stored (``VectorCollector.transitions``). The replay buffer is saved with every
checkpoint in a file of its own, unless ``save_replay`` is off: a resumed run then refills an empty buffer.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

import numpy as np

from ..data import ReplayBuffer
from ..envs import VECTOR_MODES
from ..registry import POLICY_REGISTRY
from ..sizes import check_memory
from .collector import VectorCollector
from .loop import TrainingLoop


class SerialOffPolicyPipeline(TrainingLoop):
    """One process: collect transitions into a replay buffer and learn from it at a fixed update-to-data ratio."""

    default_config: ClassVar[dict[str, Any]] = {
        **TrainingLoop.default_config,
        "num_envs": 1,
        "vector_mode": "auto",
        "buffer_size": 1_000_000,
        "learning_starts": 5_000,
        "train_freq": 1,  # steps of every env between learning calls
        "gradient_steps": 1,  # updates per learning call
        "steps_per_iteration": 1_000,
        "save_replay": True,
        "normalize_obs": False,
        "normalize_reward": False,
        "reward_gamma": None,
        "clip_obs": 10.0,
        "clip_reward": 10.0,
        "eval_every": 5,
        "checkpoint_every": 10,
    }
    config_ranges: ClassVar[dict[str, Any]] = {
        **TrainingLoop.config_ranges,
        "num_envs": (1, 65_536),
        "buffer_size": (1, None),
        "learning_starts": (0, None),
        "train_freq": (1, None),
        "gradient_steps": (0, 100_000),
        "steps_per_iteration": (1, None),
        "reward_gamma": (0.0, 1.0),
        "clip_obs": (1e-6, None),
        "clip_reward": (1e-6, None),
    }
    config_choices: ClassVar[dict[str, tuple[Any, ...]]] = {"vector_mode": VECTOR_MODES}
    frozen_keys: ClassVar[tuple[str, ...]] = ("num_envs", "vector_mode", "normalize_obs", "normalize_reward",
                                              "buffer_size")

    def build(self) -> None:
        cfg, pipe = self.cfg, self.cfg.pipeline
        policy_cls = POLICY_REGISTRY.get(cfg.policy.type)
        reward_gamma = pipe.reward_gamma if pipe.reward_gamma is not None else cfg.policy.get("gamma")
        self.collector = VectorCollector.from_config(cfg, self.seeds["env"], reward_gamma)
        try:
            obs_space, action_space = self.collector.observation_space, self.collector.action_space
            policy_cls.check_spaces(obs_space, action_space)
            action_shape = tuple(action_space.shape or ())
            nbytes = ReplayBuffer.estimate_nbytes(pipe.buffer_size, obs_space.shape, action_shape)
            check_memory(f"a replay buffer of {pipe.buffer_size:,} transitions", nbytes,
                         "use a smaller pipeline.buffer_size")
            self.policy = policy_cls(cfg.policy, obs_space, action_space, self.device)
            self.replay = ReplayBuffer(pipe.buffer_size, obs_space.shape, action_shape,
                                       action_dtype=np.asarray(action_space.sample()).dtype)
        except BaseException:
            self.collector.close()
            raise
        if self.rank == 0:
            saved = "saved with each checkpoint" if pipe.save_replay else (
                "NOT saved (pipeline.save_replay=False): a resumed run starts with an empty buffer")
            print(f"zoo: replay buffer of {pipe.buffer_size:,} transitions, {self.replay.nbytes / 2**20:,.1f} MiB "
                  f"allocated, {saved}", file=sys.stderr)

    def components(self) -> dict[str, Any]:
        return {"collector": self.collector}

    def separate_components(self) -> dict[str, Any]:
        return {"replay": self.replay} if self.cfg.pipeline.save_replay else {}

    def observation_normalizer(self) -> Any:
        return self.collector.normalize_observation()

    def observation_normalizer_state(self) -> dict[str, Any] | None:
        return self.collector.obs_normalizer_state()

    def iterate(self) -> dict[str, float]:
        pipe = self.cfg.pipeline
        end = self.env_steps + pipe.steps_per_iteration
        totals: dict[str, list[float]] = {}
        while self.env_steps < end:
            exploring = self.env_steps < pipe.learning_starts  # uniformly random actions
            self.replay.add(self.collector.transitions(None if exploring else self.policy, pipe.train_freq))
            self.env_steps += pipe.train_freq * pipe.num_envs
            self.record_episodes(self.collector.pop_finished())
            if self.env_steps < pipe.learning_starts or len(self.replay) == 0 or pipe.gradient_steps == 0:
                continue
            ctx = self.learn_context()
            ctx.updates = pipe.gradient_steps
            for key, value in self.policy.learn(self.replay, ctx).items():
                totals.setdefault(key, []).append(value)
        return {key: sum(values) / len(values) for key, values in totals.items()}  # each over the calls reporting it
