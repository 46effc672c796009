"""``VectorEnvPipeline``: the part of the serial pipelines that owns a ``VectorCollector`` and the policy.

It adds to the shared loop the env-side config keys (number of envs, vector mode, normalisation), builds the
collector and the policy (checking the policy's spaces and the pipeline's memory needs before anything large is
allocated) and exposes the collector's state and observation normalisation to the loop. A pipeline built on it
implements ``check_sizes`` (optional) and ``iterate``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym

from ..config.schema import Field
from ..envs import VECTOR_MODES
from ..policies.build import build_policy, policy_class
from .collector import VectorCollector
from .loop import TrainingLoop


class VectorEnvPipeline(TrainingLoop):
    """Base of single-process pipelines that step a vector env (see the module docstring)."""

    fields: ClassVar[dict[str, Field]] = {
        **TrainingLoop.fields,
        "num_envs": Field(8, "sub-envs of the vector env", range=(1, 65_536), frozen=True),
        "vector_mode": Field("auto", "auto, sync, async (one process per sub-env; its resume is not exact) or "
                             "vector_entry_point (numpy-vectorised)", choices=VECTOR_MODES, frozen=True),
        "normalize_obs": Field(False, "running mean/std observation normalisation", frozen=True),
        "normalize_reward": Field(False, "scale rewards by a running return std", frozen=True),
        "reward_gamma": Field(None, "discount of the reward normaliser's return; None: the policy's gamma",
                              type=float, range=(0.0, 1.0)),
        "clip_obs": Field(10.0, "clip normalised observations to +-this", range=(1e-6, None)),
        "clip_reward": Field(10.0, "clip scaled rewards to +-this", range=(1e-6, None)),
    }

    def check_sizes(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        """Refuse (ConfigError) buffers that would not fit, before the policy and the buffers are built."""

    def build_buffers(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        """Allocate the pipeline's own buffers once the policy exists (default: none)."""

    def build(self) -> None:
        cfg, pipe = self.cfg, self.cfg.pipeline
        reward_gamma = pipe.reward_gamma if pipe.reward_gamma is not None else cfg.policy.get("gamma")
        self.collector = VectorCollector.from_config(cfg, self.seeds["env"], reward_gamma)
        self.collector.report = self.rank == 0
        try:
            obs_space, action_space = self.collector.observation_space, self.collector.action_space
            policy_class(cfg).check_spaces(obs_space, action_space)  # before the sizes: the clearer refusal first
            self.check_sizes(obs_space, action_space)
            self.policy = build_policy(cfg, obs_space, action_space, self.device)
            self.collector.check_masks(self.policy)  # an env's action masks, refused by a policy that cannot take them
            self.build_buffers(obs_space, action_space)
        except BaseException:
            self.collector.close()
            raise

    def components(self) -> dict[str, Any]:
        return {"collector": self.collector}

    def iteration_mark(self) -> dict[str, Any]:
        return {**super().iteration_mark(), "collector": self.collector.mark()}

    def abandon_iteration(self, mark: dict[str, Any]) -> None:
        super().abandon_iteration(mark)
        self.collector.abandon(mark["collector"])

    def observation_normalizer(self) -> Any:
        return self.collector.normalize_observation()

    def observation_normalizer_state(self) -> dict[str, Any] | None:
        return self.collector.obs_normalizer_state()
