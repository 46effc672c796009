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


def check_broadcasts_to(field: str, tensor: torch.Tensor, like_field: str, like: torch.Tensor) -> None:
    """Raise ValueError unless ``tensor`` broadcasts (numpy rules: trailing dimensions aligned) to the shape of
    ``like`` without enlarging it, e.g. a ``(D,)`` or ``(1, D)`` standard deviation shared by a ``(B, D)`` batch."""
    try:
        fits = torch.broadcast_shapes(tensor.shape, like.shape) == like.shape and tensor.ndim <= like.ndim
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"{field} has shape {tuple(tensor.shape)}, expected the shape of {like_field} {tuple(like.shape)} or one "
            "that broadcasts to it"
        )


def check_gaussian_action(action: torch.Tensor, mu: torch.Tensor, mu_field: str) -> None:
    """Raise ValueError unless a Gaussian policy's ``action`` has the shape of its mean ``mu`` ``(..., D)`` or
    broadcasts to it keeping the last (action) dimension ``D``, as torch's ``Independent(Normal, 1)`` requires."""
    check_broadcasts_to("action", action, mu_field, mu)
    if action.ndim == 0 or action.shape[-1] != mu.shape[-1]:
        raise ValueError(f"action has shape {tuple(action.shape)}, expected the shape of {mu_field} {tuple(mu.shape)}")
