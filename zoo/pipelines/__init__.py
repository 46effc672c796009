"""Pipelines: the shared training loop, the vector collector, and the small pipelines built on them."""

from .actor_learner import ParallelAsyncPipeline
from .collector import VectorCollector
from .loop import TrainingLoop
from .parallel_sync import ParallelSyncPipeline
from .serial_offpolicy import SerialOffPolicyPipeline
from .serial_onpolicy import SerialOnPolicyPipeline
from .vector_pipeline import VectorEnvPipeline

__all__ = [
    "ParallelAsyncPipeline", "ParallelSyncPipeline", "SerialOffPolicyPipeline", "SerialOnPolicyPipeline",
    "TrainingLoop", "VectorCollector", "VectorEnvPipeline",
]
