"""Policy plugins: one module per algorithm, all on the contract in ``base.py``.

Public for plugin authors: ``Policy`` (the contract), ``ActorCriticPolicy`` (the on-policy actor-critic base),
``CollectOutput``, ``LearnContext``, ``normalize_advantage`` and the batch types re-exported from ``zoo.data``.
"""

from ..data import Rollout, Samples, Transitions, Unroll
from .a2c import A2CPolicy
from .actor_critic import ActorCriticPolicy, normalize_advantage
from .base import CollectOutput, LearnContext, Policy, RolloutActor
from .dppo import DPPOPolicy
from .impala import ImpalaPolicy
from .ppo import PPOPolicy
from .sac import SACACEPolicy, SACPolicy

__all__ = [
    "A2CPolicy",
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
    "normalize_advantage",
]
