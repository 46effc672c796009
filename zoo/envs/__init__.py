"""Environments: ``EnvSpec`` (what every part of zoo builds envs from), construction (single and NEXT_STEP vector
envs) and vector wrappers.

Wrap order, innermost first: ``EpisodeStats`` (raw rewards) -> ``NormalizeObservation`` -> ``NormalizeReward``;
``wrap_vector_env`` applies it.
"""

from .factory import VECTOR_MODES, make_env, make_vector_env
from .spec import EnvSpec
from .wrappers import EpisodeStats, NormalizeObservation, NormalizeReward, wrap_vector_env

__all__ = [
    "VECTOR_MODES",
    "EnvSpec",
    "EpisodeStats",
    "NormalizeObservation",
    "NormalizeReward",
    "make_env",
    "make_vector_env",
    "wrap_vector_env",
]
