"""The acceleration wing's process-wide settings: read once per process from the run's ``accel`` config section.

The section's keys are declared with the base keys (``zoo.config.resolve.BASE_FIELDS``, ``accel.*``).
``zoo.pipelines.process.setup_process`` calls ``configure(cfg.accel)`` in every process of a run (learner, DPPO
workers, IMPALA actors) before a policy is built; a process that builds policies without a run (a test, a benchmark)
gets the defaults. What the settings steer is how zoo computes, never what it learns: a resumed run may change them.

- ``cuda_graphs``: on CUDA the compiled learning step is captured as a CUDA graph (off: its kernels launch one by one).
- ``cpp_wrapper``: on the CPU inductor writes a compiled step's host code as C++ (off: inductor's Python wrapper).
- ``fp32_products``: how the off-policy networks take float32 products on the CPU (``zoo.accel.matmul``).
- ``recurrent_kernel``: a recurrent core's float32 CPU unroll runs compiled loops with its resets inside
  (``zoo.accel.recurrent_scan``; off: torch's modules).
- ``inductor_cache``: the folder of inductor's compiled kernels (``inductor_cache_dir``; by default one per CPU kind).

The torch settings that compiling needs (dynamo's tracing of autograd, the oneDNN lowering, the cache folder) are
made once, by ``prepare_compiler``, the first time a step compiles in the process.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import torch_internals


@dataclass
class Settings:
    """The values of the ``accel`` section in this process (see the module docstring)."""

    cuda_graphs: bool = True
    cpp_wrapper: bool = True
    fp32_products: str = "auto"
    inductor_cache: str | None = None
    recurrent_kernel: bool = True


_settings = Settings()
_compiler_prepared = False
# TORCHINDUCTOR_CACHE_DIR as the user set it before zoo first pointed it at its cache, and what zoo set it to: zoo's own
# value is never read back as the user's (a run's accel.inductor_cache would outlive it in this process)
_user_cache_env: str | None = None
_written_cache_env: str | None = None


def _point_inductor_at_cache() -> None:
    global _user_cache_env, _written_cache_env
    folder = str(inductor_cache_dir())
    if _written_cache_env is None:
        _user_cache_env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    _written_cache_env = folder
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder


def configure(section: Mapping[str, Any] | None) -> Settings:
    """Take this process's settings from a resolved config's ``accel`` section (None: the defaults)."""
    global _settings
    section = dict(section or {})
    _settings = Settings(bool(section.get("cuda_graphs", True)), bool(section.get("cpp_wrapper", True)),
                         str(section.get("fp32_products", "auto")), section.get("inductor_cache"),
                         bool(section.get("recurrent_kernel", True)))
    from . import matmul

    matmul.request_fp32_products(_settings.fp32_products)
    if _compiler_prepared:
        _point_inductor_at_cache()
    return _settings


def settings() -> Settings:
    """This process's settings."""
    return _settings


def inductor_cache_dir() -> Path:
    """Where inductor keeps compiled kernels: ``accel.inductor_cache`` when set; else ``TORCHINDUCTOR_CACHE_DIR`` when
    set to other than inductor's own default (a folder of the system's temporary folder, which a reboot may empty);
    else ``zoo/inductor/<cpu_kind()>`` in the user's cache folder (``XDG_CACHE_HOME``, default ``~/.cache``), so that a
    repeated or resumed run on this machine finds them."""
    if _settings.inductor_cache:
        return Path(_settings.inductor_cache).expanduser()
    value = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if _written_cache_env is not None and value == _written_cache_env:
        value = _user_cache_env
    configured = torch_internals.cache_dir_from_environment(value)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "zoo" / "inductor" / cpu_kind()


def cpu_kind() -> str:
    """A short name of this CPU's kind for the default cache folder: its model and instruction sets, and the
    instruction set torch is told to use (``ATEN_CPU_CAPABILITY``). Kernels compiled for one kind are never read on
    another (a home folder shared by machines of several kinds; inductor's cache key does not tell them apart: a
    kernel cached under AVX-512 failed when read back under ``ATEN_CPU_CAPABILITY=avx2``)."""
    from .precision import cpu_flags, cpu_model

    text = "|".join([cpu_model(), " ".join(sorted(cpu_flags())), os.environ.get("ATEN_CPU_CAPABILITY", "")])
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def cache_problem() -> str | None:
    """None where inductor can keep its kernels in ``inductor_cache_dir()`` (the folder made where missing, a file
    written in it and removed), else why not, in one phrase naming the folder and the fix."""
    folder = inductor_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".zoo-probe-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return (f"inductor's cache folder '{folder}' is not usable ({type(exc).__name__}: {reason}); set "
                f"accel.inductor_cache to a writable folder")
    return None


def prepare_compiler() -> None:
    """The torch settings every compiled step needs, made once per process: inductor's cache folder, dynamo's tracing
    of ``torch.autograd.grad`` and its recompile limits, and the oneDNN lowering (``zoo.accel.matmul``)."""
    global _compiler_prepared
    if _compiler_prepared:
        return
    _point_inductor_at_cache()
    torch_internals.configure_dynamo()
    from . import matmul, recurrent_ops

    recurrent_ops.register()  # a recurrent core's loops as custom ops, made before anything is traced
    matmul.lower_for_inductor()
    matmul.fp32_products()  # decided now, outside any traced code
    _compiler_prepared = True
