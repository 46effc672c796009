"""Observers: the training loop's side jobs, each told about each metrics row (as SB3's callbacks are).

The loop itself only trains, counts, decides when to stop and when to checkpoint. Everything else watches it
through events, called in the observers' order on the process that writes the run directory (rank 0):

- ``start(loop)`` once, before the first iteration;
- ``row(loop, row)`` for every metrics row; an observer may add keys (``Evaluation`` adds the eval return, so
  it comes first and every later observer sees them);
- ``evaluated(loop, returns, row)`` after an evaluation; ``best_model(loop, state)`` when it beat every earlier one;
- ``should_stop(loop, row) -> bool`` (any True stops the run after this iteration, on every process);
- ``checkpoint(loop, state, final, separate_unchanged)`` whenever the loop saves (``state``: its ``state_dict``);
- ``end(loop, summary)`` after the last save; ``close(loop)`` always, last (also after an error).

An observer implements the events it needs (``Observer`` gives the others as no-ops). The run package attaches
the ones that write files (metrics, checkpoints, TensorBoard, the progress line, plugins' callbacks).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from ..envs.calls import EnvCallInterrupted
from .process import component_seed

if TYPE_CHECKING:
    from .loop import TrainingLoop

log = logging.getLogger("zoo")


class Observer:
    """Base of the loop's observers: every event is a no-op here (see the module docstring)."""

    def start(self, loop: TrainingLoop) -> None:
        """Before the first iteration of ``run``."""

    def row(self, loop: TrainingLoop, row: dict[str, Any]) -> None:
        """A metrics row (iteration, counters, the update's metrics); may add keys."""

    def evaluated(self, loop: TrainingLoop, returns: list[float], row: dict[str, Any]) -> None:
        """An evaluation's episode returns, with the row it belongs to."""

    def best_model(self, loop: TrainingLoop, state: dict[str, Any]) -> None:
        """The policy of the best evaluation so far (``TrainingLoop.model_state``)."""

    def should_stop(self, loop: TrainingLoop, row: dict[str, Any]) -> bool:
        """True to stop the run after this iteration (reason ``callback``)."""
        return False

    def checkpoint(self, loop: TrainingLoop, state: dict[str, Any], final: bool, separate_unchanged: bool) -> None:
        """The loop's whole state, to save (``final``: the run ended without a stop signal)."""

    def end(self, loop: TrainingLoop, summary: dict[str, Any]) -> None:
        """The run's summary, after the last save."""

    def close(self, loop: TrainingLoop) -> None:
        """Release resources; called last, also when the run failed."""


class Evaluation(Observer):
    """Every ``pipeline.eval_every`` iterations: deterministic returns of ``pipeline.eval_episodes`` episodes on
    fresh envs (seeded per iteration), as ``eval_return_mean``/``eval_return_std`` in the row; the best mean so far
    (``loop.best_eval_return``, kept in checkpoints) is announced with ``best_model``."""

    def row(self, loop: TrainingLoop, row: dict[str, Any]) -> None:
        pipe = loop.cfg.pipeline
        if not pipe.eval_every or loop.iteration % pipe.eval_every:
            return
        try:
            returns = loop.evaluate(pipe.eval_episodes,
                                    component_seed(loop.cfg.seed, loop.rank, "eval", loop.iteration))
        except EnvCallInterrupted:  # the iteration itself is complete: its row goes without an evaluation
            log.warning(f"a stop signal interrupted the evaluation of iteration {loop.iteration}: its row has none")
            return
        mean = float(np.mean(returns))
        row.update(eval_return_mean=mean, eval_return_std=float(np.std(returns)))
        loop.last_eval_return = mean
        if loop.best_eval_return is None or mean > loop.best_eval_return:
            loop.best_eval_return = mean
            loop.emit("best_model", state={**loop.model_state(), "eval_return_mean": mean,
                                           "iteration": loop.iteration, "env_steps": loop.env_steps})
        loop.emit("evaluated", returns=[float(r) for r in returns], row=row)
