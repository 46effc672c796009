"""``policy.compile`` for the on-policy learners (PPO, A2C, IMPALA): their update as one compiled, sync-free step.

Each learner keeps its readable eager ``learn`` (the reference, and what runs with ``policy.compile=off``,
data-parallel learners included) and shares its maths with a sync-free update: the same loss function, then
``FlatOptimizer.minimize`` (gradient by ``torch.autograd.grad``, clipping, a step masked on the device where the loss
or the gradient is not finite), metrics returned as a tensor row and read once per ``learn`` call. ``CompiledStep``
(``zoo.policies.compiled``) runs that update as one graph: PPO's minibatch update (the minibatch indexed out of the
rollout's columns, advantage normalisation, forward, clipped losses, gradient, Adam), A2C's rollout update,
IMPALA's V-trace update (its scan in torch operations inside the graph).

What differs from eager: a non-finite loss or gradient skips the step and makes the learn call's metrics NaN, which
stops the run at its metrics row (eager raises ``NonFiniteError`` at once). Data-parallel learners (DPPO,
``parallel_sync``: the gradient all-reduce is a gloo collective) always run eager. One graph per run: the rollout's
columns are padded to the planned number of samples (``pad_rows``), and only batches of the planned size run
compiled (PPO: minibatches of ``minibatch_size``; A2C: rollouts without autoreset steps; IMPALA: every batch); the
rest (PPO's shorter last minibatch of an epoch) run the same update eager.

Why, measured (``benchmarks/onpolicy_compile_bench.py``; one thread pinned to one core of a 2-core AMD EPYC, eager
and compiled in turn; docs/speed.md has the figures): one update ran 2.2-3x faster compiled, but what a whole run
gains depends on the share of time spent learning and on the compile (10-100 s on a busy machine with an empty
inductor cache, a few seconds from a warm one). A 200k-step ``ppo_hopper`` run was 1.11x faster compiled from an
empty cache and 1.46x from a warm one; ``impala_pendulum`` (1M) 1.27x warm but 0.38x cold (a 97 s first
compile); ``a2c_pendulum`` (1M) 1.11-1.16x, within the noise. ``auto`` compiles a learner only where whole runs got
faster whatever the cache: it needs the class's ``compile_auto_min_updates`` (PPO: 30,000; None, A2C's and
IMPALA's: ``auto`` keeps the learner eager) and an MLP model (an encoder's step is not measured), besides what
``resolve_compile`` asks (a compiler, a cpu or cuda device).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import torch

from ..config.schema import Field
from ..errors import ConfigError
from .base import LearnContext
from .compiled import COMPILE_FIELD, CompiledStep, resolve_compile

ONPOLICY_COMPILE_FIELD: Field = COMPILE_FIELD.but(
    "auto", "run each gradient update as one compiled graph (torch.compile): on, off, or auto (on for long runs of "
    "the learners where whole runs measured faster: see docs/speed.md); how the step runs, not what it learns")


def resolve_onpolicy_compile(requested: str, compilable: bool, planned_updates: int | None,
                             auto_min_updates: int | None, has_encoder: bool, device: torch.device,
                             what: str) -> tuple[bool, str]:
    """Whether to compile ``what``'s update for ``policy.compile = requested``, and why: ``resolve_compile`` (which
    refuses ``on`` where it cannot work), then ``auto``'s own rule for the on-policy learners -- at least
    ``auto_min_updates`` planned updates (None: never under ``auto``) and no observation encoder."""
    compile_step, reason = resolve_compile(requested, compilable, None, device, what)
    if not compile_step or requested != "auto":
        return compile_step, reason
    if auto_min_updates is None:
        return False, f"auto: {what}'s compiled step did not make whole runs faster (docs/speed.md)"
    if has_encoder:
        return False, "auto: measured for MLP models only (set policy.compile=on to compile an encoder's step)"
    if planned_updates is None or planned_updates < auto_min_updates:
        planned = "unknown" if planned_updates is None else f"{planned_updates:,}"
        return False, f"auto: {planned} planned updates, fewer than {auto_min_updates:,}"
    return True, "auto"


class CompiledLearning:
    """Mixin for an ``ActorCriticPolicy`` subclass whose update can run compiled (see the module docstring).

    The subclass (``class MyPolicy(CompiledLearning, ActorCriticPolicy)``) declares ``"compile":
    ONPOLICY_COMPILE_FIELD`` among its fields, sets ``compilable = True`` (and ``compile_auto_min_updates`` where it
    measured whole runs getting faster), writes ``learning_step(*tensors)`` -- one sync-free update returning a row
    of metric tensors whose last value is ``FlatOptimizer.minimize``'s -- and ``planned_updates(calls, samples)``,
    and in ``learn``, when ``compiling(ctx)``, calls ``run_update(full, *tensors)`` where the eager path would
    update and ``mean_rows(rows, names)`` for the metrics. The pipeline calls ``plan_learning`` once it is built.
    """

    compilable: ClassVar[bool] = False
    # ``auto`` compiles runs planning at least this many updates; None: never (measured not to pay for this learner).
    compile_auto_min_updates: ClassVar[int | None] = None
    compiled_step: CompiledStep | None = None
    compile_reason: str = "not planned (a pipeline that plans calls plan_learning)"
    planned_samples: int | None = None

    # Provided by ActorCriticPolicy.
    cfg: Any
    device: torch.device
    acting_only: bool
    model: torch.nn.Module
    optimizer: Any

    def planned_updates(self, calls: int, samples: int) -> int:
        """Gradient updates of ``calls`` learn calls on ``samples`` samples each (default: one per call)."""
        return calls

    def plan_learning(self, calls: int | None, samples: int) -> None:
        """Called by the pipeline once it knows the run's plan: ``calls`` learn calls (None: unknown), each on
        ``samples`` samples (a rollout's, or a batch of unrolls'); decides ``policy.compile``."""
        self.planned_samples = samples
        requested = self.cfg.get("compile", "off")
        name = type(self).__name__
        updates = None if calls is None else self.planned_updates(calls, samples)
        compile_step, self.compile_reason = resolve_onpolicy_compile(
            requested, self.compilable and not self.acting_only, updates, self.compile_auto_min_updates,
            getattr(self.model, "encoder", None) is not None, self.device, name)
        self.compiled_step = CompiledStep(self.learning_step, f"{name}'s learning step", requested == "on",
                                          self.device, self.state_tensors) if compile_step else None

    def compiling(self, ctx: LearnContext) -> bool:
        """Whether this ``learn`` call runs the sync-free update (compiled where the shapes are the planned ones):
        the step is compiled and the gradients are this learner's own (``ctx.sync_gradients`` is the serial no-op;
        data-parallel learners all-reduce through a collective, eagerly). An IMPALA learner under torchrun is alone
        in this sense although its ``world_size`` counts the actors."""
        alone = type(ctx).sync_gradients is LearnContext.sync_gradients
        if self.cfg.get("compile") == "on" and (self.compiled_step is None or not alone):
            raise ConfigError(f"policy.compile=on, but {type(self).__name__}'s learning step runs eager here (data-"
                              f"parallel learners, parallel_sync, all-reduce their gradients eagerly; a pipeline "
                              f"that does not call plan_learning): set policy.compile=off or auto")
        return self.compiled_step is not None and alone

    def run_update(self, full: bool, *tensors: Any) -> Any:
        """``learning_step(*tensors)``: compiled where ``full`` (the batch has the shape the graph is made for),
        else eager (the same function; one graph per shape would recompile for every odd size)."""
        assert self.compiled_step is not None
        if full:
            return self.compiled_step("update", *tensors)
        return self.learning_step(*tensors)

    def learning_step(self, *tensors: Any) -> Any:
        """One sync-free update (no ``.item()``, no branch on a tensor's value); returns its metrics as tensors."""
        raise NotImplementedError

    def state_tensors(self) -> Iterator[torch.Tensor]:
        """The tensors the step reads and writes in place (a CUDA graph keeps their addresses): the model's
        parameters and buffers and the optimiser's state."""
        yield from self.model.parameters()
        yield from self.model.buffers()
        yield from self.optimizer.tensors()

    def environment_record(self) -> dict[str, Any]:
        """Whether the learning step ran compiled and why, with the compile's facts (``CompiledStep.record``)."""
        if self.acting_only:
            return {}
        record: dict[str, Any] = {"compile": self.compiled_step is not None and self.compiled_step.active,
                                  "compile_reason": self.compile_reason}
        if self.compiled_step is not None:
            record.update(self.compiled_step.record())
        return record


def pad_rows(column: torch.Tensor, rows: int | None) -> torch.Tensor:
    """``column`` with zero rows appended up to ``rows`` (None or fewer: as it is): a compiled step's inputs keep
    one shape whatever number of autoreset steps a rollout dropped (a new shape would compile the graph again);
    the minibatch indices never reach the padding."""
    if rows is None or column.shape[0] >= rows:
        return column
    padded = column.new_zeros((rows, *column.shape[1:]))
    padded[: column.shape[0]] = column
    return padded


def mean_rows(rows: list[torch.Tensor], names: tuple[str, ...]) -> dict[str, float]:
    """The mean of per-update metric rows, read on the host once. Each row holds ``len(names)`` values and then the
    update's total loss as ``FlatOptimizer.minimize`` returned it, NaN where the step was skipped: every metric is
    then NaN, so the run stops at its metrics row."""
    means = torch.stack(rows).mean(0)
    values = torch.where(torch.isnan(means[-1]), torch.nan, means[:-1])
    return dict(zip(names, values.tolist(), strict=True))
