"""Serial on-policy pipeline (A2C, PPO): vector collector -> ``Rollout (T, B)`` -> policy.process_rollout -> learn.

The rollout's autoreset steps are marked ``valid = False`` and its last observation travels with it, so the
policy's own sample processing (GAE for actor-critics) bootstraps truncated steps from their final observations.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..envs import VECTOR_MODES
from ..registry import POLICY_REGISTRY
from ..sizes import check_memory
from .collector import VectorCollector
from .loop import TrainingLoop


class SerialOnPolicyPipeline(TrainingLoop):
    """One process: collect ``rollout_steps`` steps of ``num_envs`` envs, then one ``learn`` call."""

    default_config: ClassVar[dict[str, Any]] = {
        **TrainingLoop.default_config,
        "num_envs": 8,
        "rollout_steps": 128,
        "vector_mode": "auto",
        "normalize_obs": False,
        "normalize_reward": False,
        "reward_gamma": None,  # discount of the reward normaliser's return; None: the policy's gamma
        "clip_obs": 10.0,
        "clip_reward": 10.0,
    }
    config_ranges: ClassVar[dict[str, Any]] = {
        **TrainingLoop.config_ranges,
        "num_envs": (1, 65_536),
        "rollout_steps": (1, None),
        "reward_gamma": (0.0, 1.0),
        "clip_obs": (1e-6, None),
        "clip_reward": (1e-6, None),
    }
    config_choices: ClassVar[dict[str, tuple[Any, ...]]] = {"vector_mode": VECTOR_MODES}
    frozen_keys: ClassVar[tuple[str, ...]] = ("num_envs", "vector_mode", "normalize_obs", "normalize_reward")

    def build(self) -> None:
        cfg, pipe = self.cfg, self.cfg.pipeline
        policy_cls = POLICY_REGISTRY.get(cfg.policy.type)
        reward_gamma = pipe.reward_gamma if pipe.reward_gamma is not None else cfg.policy.get("gamma")
        self.collector = VectorCollector.from_config(cfg, self.seeds["env"], reward_gamma)
        try:
            obs_space, action_space = self.collector.observation_space, self.collector.action_space
            policy_cls.check_spaces(obs_space, action_space)
            per_step = 4 * (2 * int(np.prod(obs_space.shape or (1,))) + 16)  # observations, actions, extras
            check_memory(f"a rollout of {pipe.rollout_steps} steps x {pipe.num_envs} envs",
                         per_step * pipe.rollout_steps * pipe.num_envs, "use fewer pipeline.rollout_steps or num_envs")
            self.policy = policy_cls(cfg.policy, obs_space, action_space, self.device)
        except BaseException:
            self.collector.close()
            raise

    def components(self) -> dict[str, Any]:
        return {"collector": self.collector}

    def observation_normalizer(self) -> Any:
        return self.collector.normalize_observation()

    def observation_normalizer_state(self) -> dict[str, Any] | None:
        return self.collector.obs_normalizer_state()

    def iterate(self) -> dict[str, float]:
        rollout = self.collector.rollout(self.policy, self.cfg.pipeline.rollout_steps)
        self.env_steps += rollout.steps * rollout.num_envs
        self.record_episodes(self.collector.pop_finished())
        batch = self.policy.process_rollout(rollout)
        return self.policy.learn(batch, self.learn_context())
