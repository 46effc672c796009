"""Batch types and the replay buffer: filled by pipelines, read by policies."""

from .batches import Rollout, Samples, Transitions, Unroll
from .replay import ReplayBuffer

__all__ = ["ReplayBuffer", "Rollout", "Samples", "Transitions", "Unroll"]
