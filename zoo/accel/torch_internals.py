"""Every private torch API the acceleration wing uses, in one place, behind one version gate.

The compiled learning step needs dynamo's tracing of ``torch.autograd.grad`` (``trace_autograd_ops``, torch 2.11 and
later: ``MIN_TORCH``, the floor pyproject.toml states too); the rest of zoo runs on the same torch without it. What
is private here (names starting with ``_``, inductor's lowering API, dynamo's configuration) may change in any torch
release: each function below either works or says, in one phrase, why not, and its caller falls back to the public
path (eager, or a custom op instead of a lowering). Nothing outside ``zoo.accel`` imports a private torch name.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

# The oldest torch whose dynamo traces torch.autograd.grad into a graph; pyproject's torch floor (a test keeps the two
# equal).
MIN_TORCH = (2, 11)


def torch_version() -> tuple[int, int]:
    """``(major, minor)`` of the installed torch."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def compile_support() -> str | None:
    """None where dynamo can trace zoo's learning step on this torch, else why not (one phrase)."""
    if torch_version() < MIN_TORCH:
        return (f"torch {torch.__version__} cannot trace torch.autograd.grad into a graph (needs torch "
                f"{MIN_TORCH[0]}.{MIN_TORCH[1]} or later)")
    try:
        dynamo = importlib.import_module("torch._dynamo")  # the compiler's front end: absent on some builds
    except Exception as exc:  # pragma: no cover - depends on the torch build
        return f"torch._dynamo cannot be imported ({exc})"
    if not hasattr(dynamo.config, "trace_autograd_ops"):  # pragma: no cover - a build without it
        return f"torch {torch.__version__}'s dynamo has no trace_autograd_ops"
    return None


def configure_dynamo() -> None:
    """Let dynamo trace ``torch.autograd.grad`` (process-wide: a recompile must see it too) and raise its recompile
    limits: every compiled step's graphs are entries of one code object, a few per run (one per cadence combination,
    and acting), more in a process that builds many policies (tests, tuning)."""
    config = importlib.import_module("torch._dynamo").config
    config.trace_autograd_ops = True
    # a recurrent core's nn.LSTM / nn.GRU is read for its parameters only (the loops run as custom ops,
    # zoo.accel.recurrent_ops); without this dynamo refuses to wrap the module at all
    if hasattr(config, "allow_rnn"):
        config.allow_rnn = True
    config.recompile_limit = max(config.recompile_limit, 64)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 1024)


def inductor_default_cache_dir() -> str | None:
    """Inductor's own default cache folder (in the system's temporary folder), or None where this torch hides it."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # pragma: no cover - another torch layout
        return None
    return default_cache_dir()


def tag_cache_key(tag: str) -> None:
    """Add ``tag`` to inductor's cache key (once), so that graphs cached without what it names are not reused."""
    current = torch.compiler.config.cache_key_tag
    if tag not in current.split("+"):
        torch.compiler.config.cache_key_tag = f"{current}+{tag}" if current else tag


def mark_static_address(tensor: torch.Tensor) -> None:
    """Tell dynamo that ``tensor`` keeps its address between calls (a CUDA graph reads it in place)."""
    importlib.import_module("torch._dynamo").mark_static_address(tensor)


def mark_dynamic(tensor: torch.Tensor, dim: int) -> None:
    """Tell dynamo that ``tensor``'s size along ``dim`` changes between calls: one graph for every size (at least 2;
    dynamo specialises sizes 0 and 1)."""
    importlib.import_module("torch._dynamo").mark_dynamic(tensor, dim)


def clone_tensors(tree: Any) -> Any:
    """``tree`` (nested dicts, lists, tuples) with every tensor cloned."""
    return torch.utils._pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


@contextlib.contextmanager
def reparametrized(module: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> Iterator[None]:
    """``module``'s parameters replaced by ``tensors`` (by name) inside the block, in a way dynamo traces."""
    from torch.nn.utils.stateless import _reparametrize_module

    with _reparametrize_module(module, tensors):
        yield


def onednn_linear_available() -> bool:
    """Whether oneDNN's float32 linear (``mkldnn._linear_pointwise``) is in this torch build."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight.T + bias`` by oneDNN (2-D float32 on the CPU)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def register_onednn_lowering(op: Any, dense: Callable[[tuple[int, int], tuple[int, int]], bool]) -> str | None:
    """Register an inductor lowering of the custom op ``op`` (``x, weight, bias``) to a direct call of oneDNN's linear,
    its inputs first copied to a dense layout where ``dense(size, strides)`` is False. None when registered, else why
    not (this torch's inductor lacks what it needs: its lowering API is private)."""
    try:
        from torch._inductor.ir import ExternKernel
        from torch._inductor.lowering import fallback_handler, register_lowering
    except Exception as exc:  # pragma: no cover - another torch's private inductor API
        return f"inductor's lowering API is not importable ({type(exc).__name__})"
    onednn = fallback_handler(torch.ops.mkldnn._linear_pointwise.default, add_to_fallback_set=False)

    def realized(matrix: Any) -> Any:
        matrix = ExternKernel.realize_input(matrix)
        try:
            ok = dense(tuple(matrix.get_size()), tuple(matrix.get_stride()))
        except (AttributeError, NotImplementedError, TypeError):  # no fixed layout yet
            ok = False
        return matrix if ok else ExternKernel.require_contiguous(matrix)

    def lowering(x: Any, weight: Any, bias: Any = None) -> Any:
        return onednn(realized(x), realized(weight), bias, "none", [], "")

    register_lowering(op, type_promotion_kind=None)(lowering)
    return None


def cache_dir_from_environment(configured: str | None) -> str | None:
    """``configured`` (a ``TORCHINDUCTOR_CACHE_DIR`` value) where it is set to other than inductor's own default, else
    None."""
    if not configured:
        return None
    default = inductor_default_cache_dir()
    if default is not None and os.path.abspath(configured) == os.path.abspath(default):
        return None
    return configured
