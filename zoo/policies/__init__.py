"""Policy plugins: one module per algorithm, all on the contract in ``base.py``."""

from .a2c import A2CPolicy
from .base import CollectOutput, Policy, Rollout
from .ppo import PPOPolicy

__all__ = ["A2CPolicy", "CollectOutput", "PPOPolicy", "Policy", "Rollout"]
