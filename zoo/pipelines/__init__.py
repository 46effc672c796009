"""Pipelines: the loops that drive policies (serial on-policy now; off-policy and parallel to come)."""

from .serial_onpolicy import SerialOnPolicyPipeline

__all__ = ["SerialOnPolicyPipeline"]
