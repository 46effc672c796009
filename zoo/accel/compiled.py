"""One compiled learning step: ``torch.compile`` of a policy's sync-free update, with eager as reference and fallback.

``policy.compile`` (``on``, ``off`` or ``auto``) decides whether the off-policy family (SAC, SAC-ACE, TD3, DQN)
runs each gradient update -- minibatch gather from the replay's storage, targets, losses, gradients, optimiser
steps, target networks, finite checks -- as one graph. The algorithm's ``update`` is written once, as readable
eager code with no host sync (no ``.item()``, no branch on a tensor's value, metrics returned as tensors,
``FlatOptimizer.minimize`` for the steps); eager runs it as it reads, compiled runs it as one graph traced from it.
Both draw the same random numbers in the same order (on the CPU, inductor's ``fallback_random`` calls torch's own
generator), so they agree within float rounding, and each resumes exactly within its mode.

Why: for networks of this size the eager update is bound by per-operator overhead, not arithmetic (docs/speed.md has
the figures, ``benchmarks/sac_speed.py`` measures them).

``auto`` is on where the compile time pays: the policy's update is compile-ready (``OffPolicyPolicy.compilable``), a
working compiler and cache folder are present (``compiler_status``, ``settings.cache_problem``), the run plans at least
``AUTO_MIN_UPDATES`` gradient updates, and -- timed on the run's first eager updates -- the rest would save at least
twice what compiling costs on this machine kind (``zoo.accel.auto_compile``). A cold compile takes tens of seconds per
graph (one per combination of the update's cadences: SAC with every-update actor steps has one, TD3's delayed actor
two); inductor's cache (``settings.inductor_cache_dir``, kept across runs) brings a repeated or resumed run's compile
down to a few seconds. A compile that fails says so in one line and trains eager (``auto``) or stops the run before
anything changed (``on``).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import torch

from ..config.schema import Field
from ..errors import ConfigError
from . import torch_internals
from .auto_compile import record_compile_seconds
from .settings import cache_problem, inductor_cache_dir, prepare_compiler, settings

log = logging.getLogger("zoo")

COMPILE_MODES = ("auto", "on", "off")
# Below this many gradient updates in a run, a cold compile costs about what it saves.
AUTO_MIN_UPDATES = 20_000

COMPILE_FIELD = Field(
    "auto", "run each gradient update as one compiled graph (torch.compile): on, off, or auto (where a compiler "
    f"works and the run plans {AUTO_MIN_UPDATES:,} updates or more, on when its first updates' cost here says the "
    "rest would save twice the compile); how the step runs, not what it learns", choices=COMPILE_MODES)


@functools.cache
def compiler_status() -> str | None:
    """None when ``torch.compile`` can build the learning step here, else why not (one phrase).

    Needs dynamo's tracing of ``torch.autograd.grad`` (``torch_internals.MIN_TORCH``, pyproject's torch floor) and,
    for the CPU, a C++ compiler (inductor writes C++; ``CXX`` or g++/clang++ on the PATH).
    """
    if sys.platform == "win32":
        return "torch.compile's CPU backend is not set up on Windows here"
    problem = torch_internals.compile_support()
    if problem is not None:
        return problem
    compilers = [os.environ.get("CXX")] if os.environ.get("CXX") else ["g++", "c++", "clang++"]
    if not any(shutil.which(name) for name in compilers if name):
        return "no C++ compiler found (inductor needs g++ or clang++ on the PATH, or CXX)"
    return None


def resolve_compile(requested: str, compilable: bool, planned_updates: int | None, device: torch.device,
                    what: str) -> tuple[bool, str]:
    """Whether to compile ``what``'s learning step for ``policy.compile = requested``, and why (for the log and
    the run's environment record). ``on`` where it cannot work raises ConfigError naming the reason."""
    if requested == "off":
        return False, "policy.compile=off"
    problem = None if compilable else f"{what}'s update is not compile-ready (its class sets compilable = False)"
    if problem is None and device.type not in ("cpu", "cuda"):
        problem = f"the learning step compiles for cpu and cuda devices, not {device.type}"
    few = requested == "auto" and planned_updates is not None and planned_updates < AUTO_MIN_UPDATES
    if problem is None and few:  # known without the compiler, which a run kept eager never imports
        return False, f"auto: {planned_updates:,} planned updates, fewer than {AUTO_MIN_UPDATES:,}"
    fault = False  # a problem of this machine (no compiler, an unusable cache), not of the policy or the device
    if problem is None:
        problem = compiler_status() or cache_problem()
        fault = problem is not None
    if problem is not None:
        if requested == "on":
            raise ConfigError(f"policy.compile=on, but {problem}: set policy.compile=off (or auto) to train eager")
        if fault:  # auto is a speed choice: it never stops a run that eager can train
            log.warning(f"policy.compile=auto, but {problem}: training eager")
        return False, problem
    return True, "policy.compile=on" if requested == "on" else "auto"


class CompiledStep:
    """``fn(*args)`` compiled as one graph per variant (a hashable key naming the cadences due in this call);
    ``what`` names it in messages ("SACPolicy's learning step"); ``eager`` (default ``fn``) is what runs after a
    failed compile (the off-policy base compiles its step with the networks' parameters as views of their flat
    buffers, ``zoo.accel.flat_views``, and falls back to the plain step).

    The first call of each variant compiles it (timed into ``seconds``); a failure there is one log line and eager
    from then on (``required=False``), or a ConfigError (``required=True``) raised before the step changed
    anything. ``fn`` must be sync-free: see the module docstring. The graph is traced with gradients off at its
    boundary and (``gradients``) on inside: ``fn`` takes its gradients itself, so it is one inference graph with no
    autograd around it. Calls run under ``torch.no_grad()``, the eager fallback too.

    On CUDA the graph is also captured as a CUDA graph (``mode="reduce-overhead"``) unless ``accel.cuda_graphs`` is off:
    ``static()`` names the tensors the step reads and writes in place (weights, optimiser state, the replay's
    device mirror), whose addresses the captured graph keeps; the step's outputs are copied out after each replay.

    On the CPU the graph runs with denormal floats flushed to zero (FTZ/DAZ, as XLA runs its CPU code): values
    below 1.2e-38 in float32 (Adam's second moments of near-zero gradients, bf16 products) otherwise take a slow
    path per operation (about a tenth of a bf16 SAC update; docs/speed.md). Eager keeps them (no change above that
    size, so both modes still agree within float tolerance); the flag is reset after each call.
    """

    def __init__(self, fn: Callable[..., Any], what: str, required: bool, device: torch.device,
                 static: Callable[[], Iterable[torch.Tensor]] = tuple, gradients: bool = True,
                 eager: Callable[..., Any] | None = None) -> None:
        self.eager = fn if eager is None else eager  # the fallback: fn itself, or its plain eager form
        self.what, self.required = what, required
        self.variants: set[Hashable] = set()
        self.seconds = 0.0
        self.failure: str | None = None
        self.gradients = gradients
        self.cuda_graphs = device.type == "cuda" and settings().cuda_graphs
        self._static = static
        # On the CPU random ops call torch's own generator in program order, as eager does (same numbers, exact
        # resume); on CUDA inductor's own Philox generator, which graph capture supports.
        options = {"fallback_random": device.type == "cpu", "triton.cudagraphs": self.cuda_graphs}
        # On the CPU the graph's host code (allocating each buffer, calling each kernel and oneDNN product) is C++
        # rather than Python (a few per cent more updates per second; docs/speed.md), unless accel.cpp_wrapper is
        # off or a first compile's C++ cannot be built by this machine's compiler (retried once with the Python
        # wrapper, said in the log).
        if device.type == "cpu" and settings().cpp_wrapper:
            options["cpp_wrapper"] = True

        def graph(*args: Any) -> Any:
            with torch.set_grad_enabled(gradients):
                return fn(*args)

        self._graph, self._options = graph, options
        self.compiled: Callable[..., Any] | None = None
        try:
            prepare_compiler()  # once per process: the cache folder, dynamo's settings, the oneDNN lowering
            self.compiled = self._build()
        except Exception as exc:  # a cache folder that broke since it was checked, a torch that cannot: one line
            self._give_up(exc)

    @property
    def cpp_wrapper(self) -> bool:
        """Whether inductor writes the graph's host code as C++ (see ``__init__``)."""
        return bool(self._options.get("cpp_wrapper"))

    def _build(self) -> Callable[..., Any]:
        # cudagraphs in the options: as mode="reduce-overhead" does (torch.compile takes a mode or options, not both)
        return torch.compile(self._graph, fullgraph=True, dynamic=False, options=self._options)

    def _run(self, args: tuple[Any, ...]) -> Any:
        if not self.cuda_graphs:
            torch.set_flush_denormal(True)  # see the class docstring
            try:
                with torch.no_grad():
                    return self.compiled(*args)
            finally:
                torch.set_flush_denormal(False)
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            result = self.compiled(*args)
        # the captured graph's outputs are overwritten by its next replay: keep copies
        return torch_internals.clone_tensors(result)

    @property
    def active(self) -> bool:
        """Whether calls run compiled (False after a failed compile)."""
        return self.failure is None

    def __call__(self, variant: Hashable, *args: Any) -> Any:
        if self.failure is not None:
            with torch.set_grad_enabled(self.gradients):
                return self.eager(*args)
        if variant in self.variants:
            try:
                return self._run(args)
            except Exception as exc:  # a recompile that failed (a guard no variant foresaw): nothing ran yet
                return self._failed(exc, args)
        log.info(f"compiling {self.what} (graph {len(self.variants) + 1}): seconds from inductor's cache, else tens of "
                 f"seconds to minutes on a busy CPU; training goes on after it")
        start = time.perf_counter()
        try:
            if self.cuda_graphs and not self.variants:
                for tensor in self._static():
                    torch_internals.mark_static_address(tensor)
            result = self._run(args)
        except Exception as exc:  # compile errors come in many types; each is reported in one line
            if not (self.cpp_wrapper and _cpp_compile_error(exc)):
                return self._failed(exc, args)
            # C++ this machine's compiler cannot build: inductor's Python wrapper before giving up
            log.info(f"compiling {self.what} with a C++ wrapper failed ({_one_line(exc)}): trying the Python one")
            self._options.pop("cpp_wrapper")
            self.compiled = self._build()
            try:
                result = self._run(args)
            except Exception as again:
                return self._failed(again, args)
        seconds = time.perf_counter() - start
        self.seconds += seconds
        self.variants.add(variant)
        record_compile_seconds(self.what, seconds)  # what auto weighs the next compile of it here by
        log.info(f"compiled {self.what} (graph {len(self.variants)}) in {seconds:.1f} s; inductor "
                 f"cache {inductor_cache_dir()}")
        return result

    def _failed(self, exc: Exception, args: tuple[Any, ...]) -> Any:
        """A compile that failed: ConfigError under ``required``, else one line and eager from now on."""
        self._give_up(exc)
        with torch.set_grad_enabled(self.gradients):
            return self.eager(*args)

    def _give_up(self, exc: Exception) -> None:
        """Compiling failed (building the step or compiling a graph): a ConfigError line under ``required``, before
        anything changed; else one log line, and every call runs eager from now on."""
        self.failure = _one_line(exc)
        if self.required:
            raise ConfigError(f"policy.compile=on: compiling {self.what} failed ({self.failure}); "
                              f"set policy.compile=off (or auto) to train eager") from exc
        log.warning(f"compiling {self.what} failed ({self.failure}): training eager")

    def record(self) -> dict[str, Any]:
        """Facts for the run's environment record: graphs, compile seconds, the cache, CUDA graphs, the C++ wrapper,
        a failure."""
        record: dict[str, Any] = {"compile_graphs": len(self.variants), "compile_seconds": round(self.seconds, 2),
                                  "inductor_cache": str(inductor_cache_dir()),
                                  "cuda_graphs": self.cuda_graphs, "cpp_wrapper": self.cpp_wrapper}
        if self.failure is not None:
            record["compile_failure"] = self.failure
        return record


def _one_line(exc: Exception) -> str:
    """A compile error in one line: its type and first line (dynamo reports an error of the traced code, a
    fake-tensor call, inside its own: that inner one is named)."""
    text = str(exc)
    inner = re.search(r"got (\w+(?:Error|Exception))\((['\"])(.*?)\2\)", text, re.DOTALL)
    if inner is not None:
        return f"{inner.group(1)}: {inner.group(3).splitlines()[0][:300]}"
    return f"{type(exc).__name__}: {(text.strip().splitlines() or [''])[0][:300]}"


def _cpp_compile_error(exc: BaseException) -> bool:
    """Whether a compile failed in the C++ compiler (inductor's CppCompileError, possibly wrapped by dynamo)."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        if type(error).__name__ == "CppCompileError":
            return True
        pending += [error.__cause__, error.__context__, getattr(error, "inner_exception", None)]
    return False
