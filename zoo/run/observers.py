"""The observers a run attaches to its training loop (rank 0): the run directory's files, TensorBoard, the progress
line and plugins' callback hooks. See ``zoo.pipelines.observers`` for the events; ``run_observers`` puts them in
their order (evaluation first, so that every other one sees the eval return in the row).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from easydict import EasyDict

from ..config import to_plain
from ..errors import ZooError, first_line
from ..pipelines.loop import TrainingLoop
from ..pipelines.observers import Evaluation, Observer
from ..plugins import callback_manager
from .progress import Progress
from .run_dir import RunDirectory

log = logging.getLogger("zoo")


class RunFiles(Observer):
    """metrics.jsonl and metrics.csv (one row per iteration), checkpoint.pt (with its separately saved components),
    model.pt at the end and best_model.pt after each best evaluation."""

    def __init__(self, run_dir: RunDirectory) -> None:
        self.run_dir = run_dir
        self.facts: dict[str, Any] | None = None  # this session's environment facts as environment.json has them

    def start(self, loop: TrainingLoop) -> None:
        self.facts = loop.environment_record()

    def row(self, loop: TrainingLoop, row: dict[str, Any]) -> None:
        self.run_dir.append_metrics(row)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("row %s", row)
        facts = loop.environment_record()  # learnt while training, e.g. how long the learning step took to compile
        if facts != self.facts:
            self.run_dir.update_environment(facts)
            self.facts = facts

    def best_model(self, loop: TrainingLoop, state: dict[str, Any]) -> None:
        self.run_dir.save_best_model(state)

    def checkpoint(self, loop: TrainingLoop, state: dict[str, Any], final: bool, separate_unchanged: bool) -> None:
        self.run_dir.save_checkpoint(state, loop.separate_components(), separate_unchanged)
        if final:
            self.run_dir.save_model({key: state[key] for key in ("format", "policy", "obs_normalizer")})


class TensorBoard(Observer):
    """Every key of every metrics row as a TensorBoard scalar in ``RUN/tensorboard`` against env steps. A resumed run
    purges the events after its checkpoint, as its metrics rows are cut back; events are flushed with every
    checkpoint, so they always cover at least what it covers."""

    def __init__(self, run_dir: RunDirectory) -> None:
        self.run_dir = run_dir
        self.writer: Any = None

    def start(self, loop: TrainingLoop) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # TensorBoard reads a folder's event files in name order, "events.out.tfevents.<seconds>.<host>.<pid>": a
        # session started in the same second as an earlier one could sort before it. Wait for the next second then.
        folder = self.run_dir.root / "tensorboard"  # the locked directory, wherever it was moved
        stamps = [int(p.name.split(".")[3]) for p in folder.glob("events.out.tfevents.*")
                  if p.name.split(".")[3].isdigit()]
        while stamps and max(stamps) >= int(time.time()):
            time.sleep(0.05)
        self.writer = SummaryWriter(str(folder), purge_step=loop.env_steps + 1 if loop.env_steps else None)

    def row(self, loop: TrainingLoop, row: dict[str, Any]) -> None:
        for key, value in row.items():
            if value is not None and key not in ("iteration", "env_steps"):
                self.writer.add_scalar(key, value, loop.env_steps)

    def checkpoint(self, loop: TrainingLoop, state: dict[str, Any], final: bool, separate_unchanged: bool) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self, loop: TrainingLoop) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class ProgressLine(Observer):
    """The progress line on stderr (``logger.progress``; ``zoo run -q`` turns it off)."""

    def __init__(self) -> None:
        self.progress: Progress | None = None

    def start(self, loop: TrainingLoop) -> None:
        pipe = loop.cfg.pipeline
        self.progress = Progress(pipe.max_env_steps, pipe.log_every_s, window=pipe.stats_window)

    def row(self, loop: TrainingLoop, row: dict[str, Any]) -> None:
        self.progress.update(loop.env_steps, row)

    def close(self, loop: TrainingLoop) -> None:
        if self.progress is not None:
            self.progress.close()


class PluginCallbacks(Observer):
    """Plugins' callback hooks (``zoo.hookspecs``: ``on_metrics_row``, ``on_evaluation``, ``should_stop``,
    ``on_run_end``), called with the run directory and config; a hook that raises stops the run in one line."""

    def __init__(self, manager: Any, cfg: EasyDict, run_dir: RunDirectory) -> None:
        self.hooks = manager.hook
        self.cfg = to_plain(cfg)
        self.run_dir = str(run_dir.path)

    def _call(self, name: str, **kwargs: Any) -> list[Any]:
        extra = {"run_dir": self.run_dir} if name != "should_stop" else {}
        try:
            return getattr(self.hooks, name)(**kwargs, **extra, cfg=self.cfg)
        except Exception as exc:
            raise ZooError(f"a plugin's {name} callback failed: {type(exc).__name__}: {first_line(exc, 200)}; "
                           f"the last checkpoint is kept: fix or remove that plugin") from None

    def evaluated(self, loop: TrainingLoop, returns: list[float], row: dict[str, Any]) -> None:
        self._call("on_evaluation", returns=returns, row=row)

    def row(self, loop: TrainingLoop, row: dict[str, Any]) -> None:
        self._call("on_metrics_row", row=row)

    def should_stop(self, loop: TrainingLoop, row: dict[str, Any]) -> bool:
        return any(answer is True for answer in self._call("should_stop", row=row))

    def end(self, loop: TrainingLoop, summary: dict[str, Any]) -> None:
        self._call("on_run_end", summary={**summary, "run_dir": self.run_dir})


def run_observers(cfg: EasyDict, run_dir: RunDirectory | None) -> list[Observer]:
    """The observers of a run's loop: evaluation, the files, TensorBoard and the progress line as the config asks,
    plugins' callbacks when a plugin (or a module in ``import_names``) has any. None on ranks without a run
    directory (rank 0 alone evaluates and writes)."""
    if run_dir is None:
        return []
    observers: list[Observer] = [Evaluation(), RunFiles(run_dir)]
    logger = cfg.get("logger", {})
    if logger.get("tensorboard"):
        observers.append(TensorBoard(run_dir))
    if logger.get("progress", True):
        observers.append(ProgressLine())
    manager = callback_manager(list(cfg.get("import_names") or []))
    if manager is not None:
        observers.append(PluginCallbacks(manager, cfg, run_dir))
    return observers
