"""Serial on-policy pipeline (A2C, PPO): vector collector -> ``Rollout (T, B)`` -> policy.process_rollout -> learn.

The rollout's autoreset steps are marked ``valid = False`` and its last observation travels with it, so the
policy's own sample processing (GAE for actor-critics) bootstraps truncated steps from their final observations.
"""

from __future__ import annotations

import math
from typing import ClassVar

import gymnasium as gym
import numpy as np

from ..config.schema import Field
from ..sizes import check_memory
from .vector_pipeline import VectorEnvPipeline


class SerialOnPolicyPipeline(VectorEnvPipeline):
    """One process: collect ``rollout_steps`` steps of ``num_envs`` envs, then one ``learn`` call."""

    fields: ClassVar[dict[str, Field]] = {
        **VectorEnvPipeline.fields,
        "rollout_steps": Field(128, "steps of every env per rollout (one learn call each)", range=(1, None)),
    }

    def check_sizes(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        pipe = self.cfg.pipeline
        per_step = 4 * (2 * int(np.prod(observation_space.shape or (1,))) + 16)  # observations, actions, extras
        check_memory(f"a rollout of {pipe.rollout_steps} steps x {pipe.num_envs} envs",
                     per_step * pipe.rollout_steps * pipe.num_envs, "use fewer pipeline.rollout_steps or num_envs")

    def build_buffers(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        check = getattr(self.policy, "check_rollout_steps", None)  # a recurrent policy's chunks: before any run dir
        if check is not None:
            check(self.cfg.pipeline.rollout_steps)
        plan = getattr(self.policy, "plan_learning", None)  # PPO, A2C: decide policy.compile from the run's plan
        if plan is not None:
            pipe = self.cfg.pipeline
            samples = pipe.rollout_steps * pipe.num_envs
            plan(math.ceil(pipe.max_env_steps / samples), samples)

    def iterate(self) -> dict[str, float]:
        rollout = self.collector.rollout(self.policy, self.cfg.pipeline.rollout_steps)
        self.env_steps += rollout.steps * rollout.num_envs
        self.record_episodes(self.collector.pop_finished())
        batch = self.policy.process_rollout(rollout)
        return self.policy.learn(batch, self.learn_context())
