"""Cheap argument checks shared by the rl_utils functions (private)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def check_shape(field: str, tensor: torch.Tensor, expected: Sequence[int | None], expected_text: str) -> None:
    """Raise ValueError naming ``field`` when ``tensor.shape`` does not match ``expected``.

    ``expected`` holds one entry per dimension; ``None`` accepts any size. ``expected_text`` is the
    human-readable form used in the message, e.g. ``"(T, B)"``.
    """
    shape = tuple(tensor.shape)
    if len(shape) != len(expected) or any(e is not None and e != s for e, s in zip(expected, shape)):
        raise ValueError(f"{field} has shape {shape}, expected {expected_text}")


def check_same_shape(field: str, tensor: torch.Tensor, like_field: str, like: torch.Tensor) -> None:
    """Raise ValueError when ``tensor`` and ``like`` differ in shape."""
    if tensor.shape != like.shape:
        raise ValueError(
            f"{field} has shape {tuple(tensor.shape)}, expected the shape of {like_field} {tuple(like.shape)}"
        )


def check_ndim(field: str, tensor: torch.Tensor, ndims: Sequence[int], expected_text: str) -> None:
    """Raise ValueError when ``tensor.ndim`` is not one of ``ndims``."""
    if tensor.ndim not in ndims:
        raise ValueError(f"{field} has shape {tuple(tensor.shape)}, expected {expected_text}")
