"""How the on-policy family learns: one sync-free update per minibatch, driven by the family base, eager or compiled.

An on-policy learner (PPO, A2C, IMPALA, a plugin on ``ActorCriticPolicy``) writes one function,
``update(batch, ctx) -> metrics``: the maths of one gradient update on one minibatch, in order, ending in
``self.optimizer.minimize(loss, max_grad_norm, ctx.sync_gradients)``, with no host sync (no ``.item()``, no branch on
a tensor's value) and its metrics returned as 0-d tensors, ``loss`` among them (what ``minimize`` returned: NaN where
the step was skipped). ``OnPolicyLearning.learn`` does the rest, the same for every learner:

- the batch's columns (``learning_columns``: a rollout's valid samples; IMPALA's unroll tensors), the learning-rate
  schedule, and the scheduled scalars of ``schedule(ctx)`` (PPO's annealed clip);
- the minibatches (``minibatches``: the whole batch once by default; PPO's epochs of shuffled minibatches), drawn
  before the first update, their number agreed by every data-parallel learner;
- the minibatch: the columns at its rows (``gather``), advantages normalised where ``normalize_advantage`` (over
  every learner's samples on ``parallel_sync``: one ``ctx.sum`` for all minibatches);
- each update eager, or compiled where ``policy.compile`` says so (``zoo.accel.onpolicy``): one graph for batches of
  the planned size (``learning_rows``: samples, or a recurrent learner's chunks, whose count of valid steps the
  graph takes as a traced size), the rest eager; data-parallel learners always eager, their gradients averaged by
  the ``sync`` hook of ``minimize``;
- an early stop after any update (``stop_updates``: PPO's target KL);
- the metrics, read once per call: the mean of each over the updates, then ``learn_metrics``.

One rule for a non-finite loss or gradient, eager and compiled alike: ``minimize`` skips that step (the weights and
the optimiser stay as they were) and ``learn`` raises ``NonFiniteError`` naming the loss or the gradient, which
stops the run with its last checkpoint kept. Eager steps take torch.optim's arithmetic exactly (the optimiser's
``eager_host_step``); the compiled step its device-masked form (the same within float rounding).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from ..accel.compiled import CompiledStep
from ..accel.onpolicy import ONPOLICY_COMPILE_FIELD, mean_rows, pad_rows, resolve_onpolicy_compile
from ..accel.torch_internals import mark_dynamic
from ..errors import ConfigError, NonFiniteError
from .base import LearnContext

# ONPOLICY_COMPILE_FIELD: the ``compile`` key a compilable learner declares among its fields.
__all__ = ["ONPOLICY_COMPILE_FIELD", "OnPolicyLearning", "advantage_moments", "normalize_advantage", "normalize_with"]


def normalize_advantage(advantage: torch.Tensor, ctx: LearnContext | None = None) -> torch.Tensor:
    """Zero mean, unit std (left unchanged for a single sample, whose std is undefined).

    With data-parallel learners (``ctx.world_size > 1``) the mean and std are those of every learner's
    samples together (one ``ctx.sum`` of count, sum and sum of squares), so that W learners with B samples each
    normalise exactly as one learner with W x B samples. ``advantage_moments`` does the same for many minibatches
    in one collective.

    Examples:
        >>> normalize_advantage(torch.tensor([1.0, 2.0, 3.0]))
        tensor([-1.,  0.,  1.])
        >>> normalize_advantage(torch.tensor([4.0]))  # one sample: unchanged
        tensor([4.])
    """
    if ctx is not None and ctx.world_size > 1:
        return normalize_with(advantage, advantage_moments(advantage, [None], ctx)[0])
    if torch.compiler.is_compiling():  # the count may be a traced size (a recurrent minibatch's valid steps)
        normalized = normalize_with(advantage, (advantage.mean(), advantage.std()))
        return torch.where(torch.full((), advantage.numel()) < 2, advantage, normalized)
    if advantage.numel() < 2:
        return advantage
    return normalize_with(advantage, (advantage.mean(), advantage.std()))


def advantage_moments(
    advantage: torch.Tensor, minibatches: list[torch.Tensor | None], ctx: LearnContext
) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
    """Mean and std (unbiased) of each minibatch of ``advantage`` over all learners, in one ``ctx.sum``.

    ``minibatches`` holds index tensors (None: all of ``advantage``); learner k's i-th minibatch joins every
    other learner's i-th. An entry is None where the learners hold fewer than 2 samples in all (left as is).

    Examples:
        >>> advantage = torch.tensor([1.0, 2.0, 3.0, 5.0])
        >>> advantage_moments(advantage, [torch.tensor([0, 1, 2]), torch.tensor([3])], LearnContext())
        [(tensor(2.), tensor(1.)), None]
    """
    rows = []
    for index in minibatches:
        chunk = (advantage if index is None else advantage[index]).reshape(-1)
        rows.append(torch.stack([chunk.new_tensor(float(chunk.numel())), chunk.sum(), chunk.square().sum()]))
    totals = ctx.sum(torch.stack(rows)) if rows else advantage.new_zeros((0, 3))
    moments: list[tuple[torch.Tensor, torch.Tensor] | None] = []
    for count_t, total, squares in totals:
        count = float(count_t)
        if count < 2:
            moments.append(None)
            continue
        mean = total / count
        var = (squares - count * mean * mean).clamp(min=0.0) / (count - 1)
        moments.append((mean, var.sqrt()))
    return moments


def normalize_with(advantage: torch.Tensor, moments: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """``(advantage - mean) / (std + 1e-8)`` with moments from ``advantage_moments`` (None: unchanged).

    Examples:
        >>> advantage = torch.tensor([1.0, 2.0, 3.0, 5.0])
        >>> first, second = advantage_moments(advantage, [torch.tensor([0, 1, 2]), torch.tensor([3])], LearnContext())
        >>> normalize_with(advantage[:3], first), normalize_with(advantage[3:], second)
        (tensor([-1.,  0.,  1.]), tensor([5.]))
    """
    if moments is None:
        return advantage
    mean, std = moments
    return (advantage - mean) / (std + 1e-8)


class OnPolicyLearning:
    """The on-policy family's ``learn`` (see the module docstring), mixed into ``ActorCriticPolicy``.

    A learner writes ``update``; it may override ``learning_columns``, ``minibatches``, ``schedule``,
    ``stop_updates``, ``learn_metrics`` and ``planned_updates``. ``policy.compile`` needs ``compilable = True`` and
    the ``compile`` key among the fields; the pipeline calls ``plan_learning`` once it is built.
    """

    compilable: ClassVar[bool] = False
    # ``auto`` compiles runs planning at least this many updates; None: never (measured not to pay for this learner).
    compile_auto_min_updates: ClassVar[int | None] = None
    compiled_step: CompiledStep | None = None
    compile_reason: str = "not planned (a pipeline that plans calls plan_learning)"
    planned_rows: int | None = None  # the learning columns' rows in a planned learn call (plan_learning)

    # Provided by ActorCriticPolicy (and Policy).
    cfg: Any
    device: torch.device
    acting_only: bool
    model: torch.nn.Module
    optimizer: Any
    learner_state: Any
    update_learning_rate: Any
    memory_compile_problem: Any

    # -- what a learner writes or overrides -----------------------------------------------------------------
    def update(self, batch: dict[str, Any], ctx: LearnContext) -> dict[str, torch.Tensor]:
        """One gradient update on one minibatch (see the module docstring): metrics as 0-d tensors, ``loss`` last."""
        raise NotImplementedError(f"{type(self).__name__} defines neither update nor learn")

    def learning_columns(self, batch: Any) -> dict[str, torch.Tensor]:
        """The batch as columns whose first axis is the sample (a rollout's valid samples: autoreset steps dropped,
        their action was ignored by the env)."""
        samples = batch.valid_samples()
        columns = {"obs": samples.obs, "action": samples.action, "policy_output": samples.policy_output,
                   "value": samples.value, "advantage": samples.advantage, "returns": samples.returns}
        if "action_mask" in samples:  # the env's action masks: the update masks its logits alike
            columns["action_mask"] = samples["action_mask"]
        return columns

    def learning_rows(self, samples: int) -> int:
        """How many rows ``learning_columns`` holds for a batch of ``samples`` samples when none is dropped (default:
        ``samples``; a recurrent learner's chunks): the compiled step's planned shape."""
        return samples

    def compiled_columns(self, columns: dict[str, torch.Tensor],
                         index: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """The columns the compiled update reads for the minibatch at ``index``, with what cannot be traced done
        eagerly before it (default: the columns as they are; a recurrent learner's burn-in)."""
        return columns

    def samples_in(self, columns: dict[str, torch.Tensor]) -> int:
        """How many samples the columns hold (default: the length of their first axis)."""
        return len(next(iter(columns.values())))

    def minibatches(self, count: int, ctx: LearnContext) -> list[torch.Tensor | None]:
        """The row indices of each update of this call, drawn up front (None: every row). Default: the whole batch
        once, unless a learner holds no sample (then no update on any learner)."""
        return [None] if ctx.min(count) > 0 else []

    def schedule(self, ctx: LearnContext) -> dict[str, float]:
        """Scalars the update reads from ``batch`` that change with the progress (PPO's annealed clip); eager they
        are floats, compiled 0-d tensors (a changing float would recompile the graph)."""
        return {}

    def stop_updates(self, metrics: torch.Tensor, names: tuple[str, ...], ctx: LearnContext) -> bool:
        """Whether to stop this call's updates after one whose metrics row is ``metrics`` (named by ``names``);
        every data-parallel learner must decide alike (through ``ctx``). Default: never."""
        return False

    def learn_metrics(self, updates: int) -> dict[str, float]:
        """Metrics reported once per call after the means (``updates``: how many updates ran). None by default."""
        return {}

    def planned_updates(self, calls: int, samples: int) -> int:
        """Gradient updates of ``calls`` learn calls on ``samples`` samples each (default: one per call)."""
        return calls

    # -- the family's learn ---------------------------------------------------------------------------------
    def gather(self, columns: dict[str, torch.Tensor], index: torch.Tensor | None,
               moments: tuple[torch.Tensor, torch.Tensor] | None, scheduled: dict[str, Any]) -> dict[str, Any]:
        """The minibatch: the columns at ``index`` (None: all), advantages normalised where configured (with the
        data-parallel ``moments`` where given), and the scheduled scalars."""
        batch = {name: column if index is None else column[index] for name, column in columns.items()}
        if "advantage" in batch and self.cfg.get("normalize_advantage", False):
            advantage = batch["advantage"]
            batch["advantage"] = normalize_with(advantage, moments) if moments is not None else (
                normalize_advantage(advantage))
        return {**batch, **scheduled}

    def _step(self, columns: dict[str, torch.Tensor], index: torch.Tensor | None, scheduled: dict[str, Any],
              ctx: LearnContext, moments: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        return self.update(self.gather(columns, index, moments, scheduled), ctx)

    def learn(self, batch: Any, ctx: LearnContext) -> dict[str, float]:
        """Every update of one call on ``batch`` (see the module docstring); the mean of each metric."""
        columns = self.learning_columns(batch)
        count = self.samples_in(columns)
        lr = self.update_learning_rate(ctx)
        minibatches = self.minibatches(count, ctx)
        if not minibatches:  # only autoreset steps (possible with tiny rollouts): nothing to learn from
            return {"learning_rate": lr, **self.learn_metrics(0)}
        shared = None  # data-parallel learners: every minibatch's advantage moments over all learners, at once
        if "advantage" in columns and self.cfg.get("normalize_advantage", False) and ctx.world_size > 1:
            shared = advantage_moments(columns["advantage"], minibatches, ctx)
        compiling = self.compiling(ctx) and shared is None  # the compiled step (zoo.accel.onpolicy)
        scheduled = self.schedule(ctx)
        if compiling:  # the graph's inputs: one shape in every call, scheduled scalars as tensors
            padded = {name: pad_rows(column, self.planned_rows) for name, column in columns.items()}
            step_scheduled = {key: torch.tensor(value, device=self.device) for key, value in scheduled.items()}
        names: tuple[str, ...] = ()
        rows = []
        for position, index in enumerate(minibatches):
            if compiling and self._planned_shape(index, count):
                assert self.compiled_step is not None
                if index is not None:  # one graph for every minibatch size (an epoch's shorter last one too)
                    mark_dynamic(index, 0)
                step_columns = self.compiled_columns(padded if index is not None else columns, index)
                metrics = self.compiled_step("update", step_columns, index, step_scheduled, ctx)
            else:
                metrics = self._step(columns, index, scheduled, ctx, None if shared is None else shared[position])
            names = tuple(metrics)
            rows.append(torch.stack(list(metrics.values())).detach())
            if self.stop_updates(rows[-1], names, ctx):
                break
        means, skipped = mean_rows(rows, names[:-1])
        if skipped is not None:
            losses = rows[skipped][:-1].tolist()
            what = "loss" if not all(math.isfinite(value) for value in losses) else "gradient"
            raise NonFiniteError(f"the {what} is not finite in update {skipped + 1} of {len(rows)} (metrics "
                                 f"{dict(zip(names[:-1], losses))}); that step was skipped")
        return {**means, "learning_rate": lr, **self.learn_metrics(len(rows))}

    def _planned_shape(self, index: torch.Tensor | None, count: int) -> bool:
        """Whether a minibatch runs in the compiled graph: the whole batch of the planned rows (a batch with dropped
        autoreset steps runs eager), or a minibatch of at least 2 rows of any size (its size is a dynamic dimension
        of the one graph: a rollout's valid samples, an epoch's shorter last minibatch)."""
        if index is None:
            return count == self.planned_rows
        return len(index) >= 2

    # -- compiling ------------------------------------------------------------------------------------------
    def plan_learning(self, calls: int | None, samples: int) -> None:
        """Called by the pipeline once it knows the run's plan: ``calls`` learn calls (None: unknown), each on
        ``samples`` samples (a rollout's, or a batch of unrolls'); decides ``policy.compile``."""
        self.planned_rows = self.learning_rows(samples)
        requested = self.cfg.get("compile", "off")
        name = type(self).__name__
        problem = self.memory_compile_problem() if requested != "off" else None  # zoo.policies.memory
        if problem is not None:
            if requested == "on":
                raise ConfigError(f"policy.compile=on, but {problem}: set policy.compile=off or auto")
            self.compiled_step, self.compile_reason = None, f"auto: {problem}"
            return
        if requested == "auto" and getattr(self, "recurrent", False):
            # measured: whole recurrent runs of 30k+ updates level with eager from a cold cache (docs/speed.md)
            self.compiled_step, self.compile_reason = None, ("auto: a recurrent update's compiled step did not make "
                                                             "whole runs faster (docs/speed.md)")
            return
        updates = None if calls is None else self.planned_updates(calls, samples)
        compile_step, self.compile_reason = resolve_onpolicy_compile(
            requested, self.compilable and not self.acting_only, updates, self.compile_auto_min_updates,
            getattr(self.model, "encoder", None) is not None, self.device, name)
        if "compile" not in self.cfg:  # a class that withdrew the key, or one written before fields were inherited
            self.compile_reason = f"{name} offers no policy.compile key: its update runs eager"
        self.compiled_step = CompiledStep(self._step, f"{name}'s learning step", requested == "on", self.device,
                                          self.learner_state.state_tensors) if compile_step else None

    def compiling(self, ctx: LearnContext) -> bool:
        """Whether this ``learn`` call runs the compiled step (where the shapes are the planned ones): the step is
        compiled and the gradients are this learner's own (``ctx.sync_gradients`` is the serial no-op;
        data-parallel learners all-reduce through a collective, eagerly). An IMPALA learner under torchrun is alone
        in this sense although its ``world_size`` counts the actors."""
        alone = type(ctx).sync_gradients is LearnContext.sync_gradients
        if self.cfg.get("compile") == "on" and (self.compiled_step is None or not alone):
            raise ConfigError(f"policy.compile=on, but {type(self).__name__}'s learning step runs eager here (data-"
                              f"parallel learners, parallel_sync, all-reduce their gradients eagerly; a pipeline "
                              f"that does not call plan_learning): set policy.compile=off or auto")
        return self.compiled_step is not None and alone

    def environment_record(self) -> dict[str, Any]:
        """Whether the learning step ran compiled and why, with the compile's facts (``CompiledStep.record``)."""
        if self.acting_only:
            return {}
        record: dict[str, Any] = {"compile": self.compiled_step is not None and self.compiled_step.active,
                                  "compile_reason": self.compile_reason}
        if self.compiled_step is not None:
            record.update(self.compiled_step.record())
        return record

