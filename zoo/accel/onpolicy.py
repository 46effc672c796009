"""``policy.compile`` for the on-policy learners (PPO, A2C, IMPALA): the decision, and the shapes one graph needs.

The on-policy family base (``zoo.policies.onpolicy``) runs each learner's one sync-free update, eager or as one
compiled graph (``CompiledStep``): PPO's minibatch update (the minibatch indexed out of the rollout's columns,
advantage normalisation, forward, clipped losses, gradient, Adam), A2C's rollout update, IMPALA's V-trace update.
Data-parallel learners (DPPO, ``parallel_sync``: the gradient all-reduce is a gloo collective) always run eager. One
graph per run: the rollout's columns are padded to the planned number of samples (``pad_rows``); PPO's minibatches
run in it whatever their size (its index's length a dynamic dimension: an epoch's shorter last minibatch, one
minibatch of a rollout's valid samples), except a minibatch of one sample (dynamo specialises that size); a whole
batch runs compiled at the planned size (A2C: rollouts without autoreset steps; IMPALA: every batch); the rest run
the same update eager.

One update ran 2-3x faster compiled, but what a whole run gains depends on the share of time spent learning and on
the compile (``benchmarks/onpolicy_compile_bench.py``; docs/speed.md has the figures). ``auto`` compiles a learner
only where whole runs got faster whatever the cache: it needs the class's ``compile_auto_min_updates`` (PPO's is
set; None, A2C's and IMPALA's, keeps them eager under ``auto``) and an MLP model (an encoder's step is not
measured), besides what ``resolve_compile`` asks (a compiler, a cpu or cuda device).
"""

from __future__ import annotations

import torch

from ..config.schema import Field
from .compiled import COMPILE_FIELD, resolve_compile

ONPOLICY_COMPILE_FIELD: Field = COMPILE_FIELD.but(
    "auto", "run each gradient update as one compiled graph (torch.compile): on, off, or auto (on for long runs of "
    "the learners where whole runs measured faster: see docs/speed.md); how the step runs, not what it learns")


def resolve_onpolicy_compile(requested: str, compilable: bool, planned_updates: int | None,
                             auto_min_updates: int | None, has_encoder: bool, device: torch.device,
                             what: str) -> tuple[bool, str]:
    """Whether to compile ``what``'s update for ``policy.compile = requested``, and why: ``auto``'s own rule for the
    on-policy learners -- at least ``auto_min_updates`` planned updates (None: never under ``auto``) and no
    observation encoder -- then ``resolve_compile`` (which refuses ``on`` where it cannot work)."""
    if requested == "auto" and compilable and device.type in ("cpu", "cuda"):
        # auto's own rule first: a run it keeps eager never imports the compiler (torch._dynamo: about 1 s of a
        # process's start-up here)
        if auto_min_updates is None:
            return False, f"auto: {what}'s compiled step did not make whole runs faster (docs/speed.md)"
        if has_encoder:
            return False, "auto: measured for MLP models only (set policy.compile=on to compile an encoder's step)"
        if planned_updates is None or planned_updates < auto_min_updates:
            planned = "unknown" if planned_updates is None else f"{planned_updates:,}"
            return False, f"auto: {planned} planned updates, fewer than {auto_min_updates:,}"
    return resolve_compile(requested, compilable, None, device, what)


def pad_rows(column: torch.Tensor, rows: int | None) -> torch.Tensor:
    """``column`` with zero rows appended up to ``rows`` (None or fewer: as it is): a compiled step's inputs keep
    one shape whatever number of autoreset steps a rollout dropped (a new shape would compile the graph again);
    the minibatch indices never reach the padding."""
    if rows is None or column.shape[0] >= rows:
        return column
    padded = column.new_zeros((rows, *column.shape[1:]))
    padded[: column.shape[0]] = column
    return padded


def mean_rows(rows: list[torch.Tensor], names: tuple[str, ...]) -> tuple[dict[str, float], int | None]:
    """The mean of per-update metric rows, read on the host once, and the index of the first row whose last value
    (the update's loss as ``FlatOptimizer.minimize`` returned it) is NaN: a step skipped for a non-finite loss or
    gradient (None where every step was taken). Each row holds ``len(names)`` values and then that loss."""
    stacked = torch.stack(rows)
    means = stacked.mean(0)
    skipped = torch.isnan(stacked[:, -1]).nonzero()
    first = int(skipped[0, 0]) if len(skipped) else None
    return dict(zip(names, means[:-1].tolist(), strict=True)), first
