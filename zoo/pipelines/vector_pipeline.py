"""``VectorEnvPipeline``: the part of the serial pipelines that owns a ``VectorCollector`` and the policy.

It adds to the shared loop the env-side config keys (number of envs, vector mode, normalisation), builds the
collector and the policy (checking the policy's spaces and the pipeline's memory needs before anything large is
allocated) and exposes the collector's state and observation normalisation to the loop. A pipeline built on it
implements ``check_sizes`` (optional) and ``iterate``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym

from ..envs import VECTOR_MODES
from ..policies.build import build_policy, policy_class
from .collector import VectorCollector
from .loop import TrainingLoop


class VectorEnvPipeline(TrainingLoop):
    """Base of single-process pipelines that step a vector env (see the module docstring)."""

    default_config: ClassVar[dict[str, Any]] = {
        **TrainingLoop.default_config,
        "num_envs": 8,  # sub-envs of the vector env
        "vector_mode": "auto",  # auto, sync, async or vector_entry_point (numpy-vectorised)
        "normalize_obs": False,  # running mean/std observation normalisation
        "normalize_reward": False,  # scale rewards by a running return std
        "reward_gamma": None,  # discount of the reward normaliser's return; None: the policy's gamma
        "clip_obs": 10.0,  # clip normalised observations to +-this
        "clip_reward": 10.0,  # clip scaled rewards to +-this
    }
    config_ranges: ClassVar[dict[str, Any]] = {
        **TrainingLoop.config_ranges,
        "num_envs": (1, 65_536),
        "reward_gamma": (0.0, 1.0),
        "clip_obs": (1e-6, None),
        "clip_reward": (1e-6, None),
    }
    config_choices: ClassVar[dict[str, tuple[Any, ...]]] = {"vector_mode": VECTOR_MODES}
    frozen_keys: ClassVar[tuple[str, ...]] = ("num_envs", "vector_mode", "normalize_obs", "normalize_reward")

    def check_sizes(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        """Refuse (ConfigError) buffers that would not fit, before the policy and the buffers are built."""

    def build_buffers(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        """Allocate the pipeline's own buffers once the policy exists (default: none)."""

    def build(self) -> None:
        cfg, pipe = self.cfg, self.cfg.pipeline
        reward_gamma = pipe.reward_gamma if pipe.reward_gamma is not None else cfg.policy.get("gamma")
        self.collector = VectorCollector.from_config(cfg, self.seeds["env"], reward_gamma)
        try:
            obs_space, action_space = self.collector.observation_space, self.collector.action_space
            policy_class(cfg).check_spaces(obs_space, action_space)  # before the sizes: the clearer refusal first
            self.check_sizes(obs_space, action_space)
            self.policy = build_policy(cfg, obs_space, action_space, self.device)
            self.build_buffers(obs_space, action_space)
        except BaseException:
            self.collector.close()
            raise

    def components(self) -> dict[str, Any]:
        return {"collector": self.collector}

    def observation_normalizer(self) -> Any:
        return self.collector.normalize_observation()

    def observation_normalizer_state(self) -> dict[str, Any] | None:
        return self.collector.obs_normalizer_state()
