"""Policy plugins: one module per algorithm, all on the contract in ``base.py``. Public for plugin authors: ``Policy``
(the contract), ``ActorCriticPolicy`` (the on-policy actor-critic base), ``OffPolicyPolicy`` (the off-policy base, with
``soft_update`` and ``BoxActions``), ``CollectOutput``, ``LearnContext``,
``ActingGraph`` (for ``export_module``), ``build_policy``, the advantage helpers (``normalize_advantage``,
``advantage_moments``, ``normalize_with``), ``sync_parameter_gradients`` (a policy with its own torch optimiser on
data-parallel learners) and the batch types re-exported from ``zoo.data``.
"""

from ..data import Rollout, Samples, Transitions, Unroll
from .a2c import A2CPolicy
from .ace import SACACEPolicy
from .actor_critic import ActorCriticPolicy, advantage_moments, normalize_advantage, normalize_with
from .base import ActingGraph, CollectOutput, LearnContext, Policy, RolloutActor
from .build import build_policy
from .dppo import DPPOPolicy
from .dqn import DQNPolicy
from .impala import ImpalaPolicy
from .off_policy import BoxActions, OffPolicyPolicy, soft_update
from .optim import sync_parameter_gradients
from .ppo import PPOPolicy
from .sac import SACPolicy
from .td3 import TD3Policy

__all__ = [
    "A2CPolicy",
    "ActingGraph",
    "ActorCriticPolicy",
    "BoxActions",
    "CollectOutput",
    "DPPOPolicy",
    "ImpalaPolicy",
    "LearnContext",
    "OffPolicyPolicy",
    "PPOPolicy",
    "Policy",
    "Rollout",
    "RolloutActor",
    "SACACEPolicy",
    "SACPolicy",
    "Samples",
    "TD3Policy",
    "DQNPolicy",
    "Transitions",
    "Unroll",
    "advantage_moments",
    "build_policy",
    "normalize_advantage",
    "normalize_with",
    "soft_update",
    "sync_parameter_gradients",
]
