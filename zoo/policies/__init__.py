"""Policy plugins: one module per algorithm, all on the contract in ``base.py``. Public for plugin authors: ``Policy``
(the contract), ``ActorCriticPolicy`` (the on-policy actor-critic base), ``CollectOutput``, ``LearnContext``,
``ActingGraph`` (for ``export_module``), ``build_policy``, the advantage helpers (``normalize_advantage``,
``advantage_moments``, ``normalize_with``), ``sync_parameter_gradients`` (a policy with its own torch optimiser on
data-parallel learners) and the batch types re-exported from ``zoo.data``.
"""

from ..data import Rollout, Samples, Transitions, Unroll
from .a2c import A2CPolicy
from .actor_critic import ActorCriticPolicy, advantage_moments, normalize_advantage, normalize_with
from .base import ActingGraph, CollectOutput, LearnContext, Policy, RolloutActor
from .build import build_policy
from .dppo import DPPOPolicy
from .impala import ImpalaPolicy
from .optim import sync_parameter_gradients
from .ppo import PPOPolicy
from .sac import SACACEPolicy, SACPolicy

__all__ = [
    "A2CPolicy",
    "ActingGraph",
    "ActorCriticPolicy",
    "CollectOutput",
    "DPPOPolicy",
    "ImpalaPolicy",
    "LearnContext",
    "PPOPolicy",
    "Policy",
    "Rollout",
    "RolloutActor",
    "SACACEPolicy",
    "SACPolicy",
    "Samples",
    "Transitions",
    "Unroll",
    "advantage_moments",
    "build_policy",
    "normalize_advantage",
    "normalize_with",
    "sync_parameter_gradients",
]
