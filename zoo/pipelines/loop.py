"""``TrainingLoop``: everything every pipeline shares; a pipeline adds one unit of collect-and-learn.

Glossary (the loop levels, written once here):

- env step: one transition of one sub-env; ``env_steps`` counts them over all sub-envs (and all workers).
- iteration: one call of the pipeline's ``iterate`` (e.g. one rollout and the update from it); every iteration
  writes exactly one metrics row.
- update: one optimiser step, inside ``Policy.learn``; how many an iteration makes is the policy's business.

The loop owns: per-process set-up (plugins, threads, seeds derived per rank and component), counters, the
episode-statistics window (``pipeline.stats_window``), evaluation and checkpoint cadence, stop conditions
(budget, ``stop_return``, signals; the last two through ``agree`` so that several processes decide together),
metrics rows, progress, and save/restore composed from the components' ``state_dict``. A pipeline subclass
implements ``build`` (make the policy and its components), ``iterate`` and, when it has any, ``components``.

Resuming with a larger ``max_env_steps`` continues the schedule (``ctx.progress``) from where it was, without a
jump, to 1 at the new budget; a run that had completed its schedule restarts it over the extension. A run that
stopped because it reached ``stop_return`` does not stop again for the same target when extended.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
from easydict import EasyDict

from ..config import to_plain
from ..config.schema import Field, declare_fields
from ..envs import EnvSpec
from ..envs.calls import EnvCallInterrupted, watch_calls
from ..errors import ConfigError, NonFiniteError
from ..policies.base import LearnContext, Policy
from .evaluator import evaluate_policy
from .process import process_device, rng_state, set_rng_state, setup_process
from .signals import StopSignals

# The version of the checkpoint layout (``state_dict``); a checkpoint of another format is refused on resume.
CHECKPOINT_FORMAT = 2

log = logging.getLogger("zoo")


class IterationAbandoned(Exception):
    """Raised by a pipeline's ``iterate`` that was waiting for data (actors' unrolls) when a stop signal arrived,
    before it changed any state: the loop then stops as interrupted and saves the state of the last iteration."""


class TrainingLoop:
    """Base class of every pipeline; see the module docstring. ``run`` trains and returns a summary."""

    # The pipeline section's keys (see zoo.config.schema); default_config, config_ranges, config_choices,
    # frozen_keys and config_docs are derived from them for every subclass that declares its own.
    fields: ClassVar[dict[str, Field]] = {
        "max_env_steps": Field(1_000_000, "the budget: env steps over all envs (and workers)", range=(1, None)),
        "stop_return": Field(None, "stop when the training window's mean reaches it (None: off)", type=float),
        "stats_window": Field(100, "episodes in the training-return window", range=(1, 1_000_000)),
        "eval_every": Field(10, "evaluate every N iterations (0: never)", range=(0, None)),
        "eval_episodes": Field(10, "episodes per evaluation", range=(1, 100_000)),
        "eval_step_limit": Field(100_000, "an eval episode longer than this is an error", range=(1, None)),
        "checkpoint_every": Field(50, "checkpoint every N iterations (0: only at the end)", range=(0, None)),
        "log_every_s": Field(2.0, "seconds between progress lines", range=(0.0, None)),
    }
    default_config: ClassVar[dict[str, Any]]
    config_ranges: ClassVar[dict[str, Any]]
    config_choices: ClassVar[dict[str, tuple[Any, ...]]]
    frozen_keys: ClassVar[tuple[str, ...]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declare_fields(cls)

    def __init__(self, cfg: EasyDict, rank: int = 0, world_size: int = 1) -> None:
        self.cfg = cfg
        self.rank, self.world_size = rank, world_size
        self.seeds = setup_process(cfg, rank)
        self.device = process_device(cfg.device)
        self.iteration = 0
        self.env_steps = 0
        self.episodes = 0
        self.elapsed = 0.0
        window = cfg.pipeline.stats_window
        self.recent_returns: deque[float] = deque(maxlen=window)
        self.recent_lengths: deque[int] = deque(maxlen=window)
        # The schedule runs linearly from start_progress at start_steps to 1 at budget (see the module docstring).
        self.schedule = {"start_steps": 0, "start_progress": 0.0, "budget": cfg.pipeline.max_env_steps}
        self.reached_stop_return: float | None = None
        self.best_eval_return: float | None = None  # the best eval mean so far (its model is best_model.pt)
        self.last_eval_return: float | None = None  # the latest eval mean (the summary's eval_return_mean)
        self.saved_iteration: int | None = None
        self._signals: StopSignals | None = None  # while ``run`` is active
        self.config_replaced: dict[str, Any] | None = None  # see ``state_dict``
        self.observers: list[Any] = []  # zoo.pipelines.observers.Observer instances, called in order by ``emit``
        self.policy: Policy

    # -- how the pipeline's processes start (called by zoo.run.launch) -------------------------------------------
    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> dict[str, Any]:
        """Pipeline keys this process's environment decides (torchrun's WORLD_SIZE, say), resolved into the config
        before it is validated and saved; default: none."""
        return {}

    @classmethod
    def launch(cls, cfg: EasyDict, processes: Any) -> dict[str, Any]:
        """Start the pipeline's processes (``zoo.run.launch.Processes`` offers the ways) and return rank 0's
        summary. Default: this process alone; several processes under torchrun would each train a run of their
        own, so that is refused."""
        if processes.torchrun_world_size > 1:
            raise ConfigError(
                f"pipeline '{cfg.pipeline.type}' does not run under torchrun (each of its "
                f"{processes.torchrun_world_size} processes would train a run of its own): start it with `zoo run` "
                f"alone")
        return processes.run_here()

    @classmethod
    def create(cls, cfg: EasyDict, rank: int = 0, world_size: int = 1) -> TrainingLoop:
        """Construct and ``build``: two steps, so that ``build`` runs once the subclass's ``__init__`` is done."""
        loop = cls(cfg, rank, world_size)
        loop.build()
        return loop

    # -- what a pipeline implements -----------------------------------------------------------------------
    def build(self) -> None:
        """Create ``self.policy`` and the pipeline's components (collectors, buffers)."""
        raise NotImplementedError

    def iterate(self) -> dict[str, float]:
        """One unit of collect-and-learn: advance ``self.env_steps``, report finished episodes with
        ``record_episodes``, and return the update's metrics."""
        raise NotImplementedError

    def components(self) -> dict[str, Any]:
        """Stateful parts besides the policy, by name (each with ``state_dict``/``load_state_dict``)."""
        return {}

    def iteration_mark(self) -> dict[str, Any]:
        """What ``abandon_iteration`` needs to undo the iteration about to start (taken before every iteration:
        keep it cheap). A pipeline whose ``iterate`` changes more before its last env call extends it."""
        return {"loop": (self.env_steps, self.episodes, list(self.recent_returns), list(self.recent_lengths))}

    def abandon_iteration(self, mark: dict[str, Any]) -> None:
        """Undo the iteration that a stop signal interrupted (``EnvCallInterrupted``, ``IterationAbandoned``), back
        to ``mark``: the state as of the end of the last completed iteration, which the loop then saves."""
        self.env_steps, self.episodes, returns, lengths = mark["loop"]
        self.recent_returns.clear()
        self.recent_lengths.clear()
        self.recent_returns.extend(returns)
        self.recent_lengths.extend(lengths)

    def environment_record(self) -> dict[str, Any]:
        """What the run directory's environment record adds for this process: the policy's facts (its
        ``environment_record()``, e.g. the precision ``auto`` chose)."""
        policy = getattr(self, "policy", None)
        return policy.environment_record() if policy is not None else {}

    def separate_components(self) -> dict[str, Any]:
        """Large stateful parts (a replay buffer), each saved in a file of its own beside the checkpoint."""
        return {}

    def observation_normalizer(self) -> Callable[[Any], np.ndarray] | None:
        """The function evaluation applies to raw observations, or None (default)."""
        return None

    def observation_normalizer_state(self) -> dict[str, Any] | None:
        """The saved form of ``observation_normalizer`` (read by ``zoo eval`` and ``zoo.load``), or None."""
        return None

    def agree(self, *flags: bool) -> tuple[bool, ...]:
        """Decisions every process must share (stop, interrupt): each flag becomes true everywhere when it is true
        anywhere. The hook multi-process pipelines override (one collective for all the flags)."""
        return flags

    def close(self) -> None:
        """Release the policy's and the components' resources (envs, workers, background threads)."""
        for component in [getattr(self, "policy", None), *self.components().values()]:
            if hasattr(component, "close"):
                component.close()

    # -- helpers for pipelines ----------------------------------------------------------------------------
    def stop_requested(self) -> bool:
        """Whether a stop signal (Ctrl-C, SIGTERM, SIGHUP) arrived during ``run``: a pipeline that waits for data
        polls it and raises ``IterationAbandoned`` instead of waiting on."""
        return self._signals is not None and self._signals.received is not None

    def record_episodes(self, episodes: list[tuple[float, int]]) -> None:
        """Add finished episodes ``(return, length)`` to the statistics window."""
        for episode_return, length in episodes:
            self.recent_returns.append(episode_return)
            self.recent_lengths.append(length)
            self.episodes += 1

    def progress(self) -> float:
        """The schedule position in [0, 1] at the current ``env_steps``."""
        start, start_progress, budget = (self.schedule[k] for k in ("start_steps", "start_progress", "budget"))
        if budget <= start:
            return 1.0
        return min(start_progress + (1.0 - start_progress) * (self.env_steps - start) / (budget - start), 1.0)

    def learn_context(self, updates: int = 1) -> LearnContext:
        """The context for ``policy.learn`` at the current counters, asking for ``updates`` gradient updates
        (serial: the hooks are no-ops)."""
        return LearnContext(self.progress(), self.iteration, self.env_steps, self.rank, self.world_size, updates)

    # -- state --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The whole consistent state of the run: policy, components, counters, statistics, RNGs, and the config
        it was trained with (a resume checks config.yaml against it; ``config_replaced``, when a resume changed
        the config, is the one before)."""
        return {
            "format": CHECKPOINT_FORMAT,
            "config": to_plain(self.cfg),
            "config_replaced": self.config_replaced,
            "policy": self.policy.state_dict(),
            "obs_normalizer": self.observation_normalizer_state(),
            "components": {name: component.state_dict() for name, component in self.components().items()},
            "loop": {
                "iteration": self.iteration, "env_steps": self.env_steps, "episodes": self.episodes,
                "elapsed": self.elapsed, "recent_returns": list(self.recent_returns),
                "recent_lengths": list(self.recent_lengths), "schedule": dict(self.schedule),
                "reached_stop_return": self.reached_stop_return, "best_eval_return": self.best_eval_return,
                "last_eval_return": self.last_eval_return,
            },
            "rng": rng_state(),
            "metrics_rows": self.iteration,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict`` output; a changed budget re-anchors the schedule (see the module docstring)."""
        self.policy.load_state_dict(state["policy"])
        components = self.components()
        missing = set(components) - set(state["components"])
        if missing:
            raise KeyError(f"the checkpoint has no state for {sorted(missing)}")
        for name, component in components.items():
            component.load_state_dict(state["components"][name])
        for name, component in self.separate_components().items():
            if name not in state.get("separate", {}):
                raise KeyError(f"the checkpoint has no saved {name}")
            component.load_state_dict(state["separate"][name])
        loop = state["loop"]
        self.iteration, self.env_steps, self.episodes = loop["iteration"], loop["env_steps"], loop["episodes"]
        self.elapsed = loop["elapsed"]
        self.recent_returns.clear()
        self.recent_lengths.clear()
        self.recent_returns.extend(loop["recent_returns"])
        self.recent_lengths.extend(loop["recent_lengths"])
        self.schedule = dict(loop["schedule"])
        self.reached_stop_return = loop["reached_stop_return"]
        self.best_eval_return = loop.get("best_eval_return")
        self.last_eval_return = loop.get("last_eval_return")
        budget = self.cfg.pipeline.max_env_steps
        if budget != self.schedule["budget"]:
            reached = self.progress()
            self.schedule = {"start_steps": self.env_steps, "start_progress": 0.0 if reached >= 1.0 else reached,
                             "budget": budget}
        set_rng_state(state["rng"])
        self.saved_iteration = self.iteration

    def model_state(self) -> dict[str, Any]:
        """What acting needs (``zoo eval``, ``zoo.load``): the policy's weights and the observation normaliser."""
        return {"format": CHECKPOINT_FORMAT, "policy": self.policy.state_dict(),
                "obs_normalizer": self.observation_normalizer_state()}

    def save(self, final: bool = False, separate_unchanged: bool = False) -> None:
        """Checkpoint: the whole state goes to the observers' ``checkpoint`` (the run directory writes it, and
        model.pt when ``final``). Every rank calls it at the same points: a multi-process pipeline's
        ``state_dict`` gathers the workers' parts on rank 0. ``separate_unchanged``: the separately saved
        components are as their files on disk hold them (just restored), which are kept, not written again.
        """
        state = self.state_dict()
        if self.rank == 0:
            self.emit("checkpoint", state=state, final=final, separate_unchanged=separate_unchanged)
        self.saved_iteration = self.iteration

    def emit(self, event: str, **payload: Any) -> list[Any]:
        """Call ``event`` (see ``zoo.pipelines.observers``) on every observer, in order; their answers."""
        return [getattr(observer, event)(self, **payload) for observer in self.observers]

    # -- the loop -----------------------------------------------------------------------------------------
    def _stop_target(self) -> float | None:
        target = self.cfg.pipeline.stop_return
        return None if target is None or target == self.reached_stop_return else target

    def _solved(self) -> bool:
        target = self._stop_target()
        window = self.recent_returns
        return target is not None and len(window) == window.maxlen and float(np.mean(window)) >= target

    def _row(self, metrics: dict[str, float]) -> dict[str, Any]:
        for key, value in metrics.items():
            if not math.isfinite(float(value)):
                raise NonFiniteError(f"the metric '{key}' is {value}")
        row = {
            "iteration": self.iteration, "env_steps": self.env_steps, "wall_time": round(self.elapsed, 4),
            "sps": round(self.env_steps / max(self.elapsed, 1e-9), 1), "episodes": self.episodes,
            "episode_return_mean": float(np.mean(self.recent_returns)) if self.recent_returns else None,
            "episode_length_mean": float(np.mean(self.recent_lengths)) if self.recent_lengths else None,
            "eval_return_mean": None, "eval_return_std": None,
        }
        row.update({key: float(value) for key, value in metrics.items()})
        return row

    def evaluate(self, episodes: int, seed: int) -> list[float]:
        """Deterministic returns of ``episodes`` episodes of the current policy on fresh envs."""
        cfg = self.cfg
        return evaluate_policy(
            self.policy, EnvSpec.from_config(cfg), episodes, seed, normalize_obs=self.observation_normalizer(),
            vector_mode=cfg.pipeline.get("vector_mode", "auto"), step_limit=cfg.pipeline.eval_step_limit,
        )

    def _learning_rate_keys(self) -> str:
        # The hint after a non-finite loss names the keys this policy really has (SAC has three learning rates).
        keys = [f"policy.{key}" for key in self.cfg.policy if "learning_rate" in key]
        return " / ".join(keys) if keys else "the policy's learning rate"

    def summary(self, reason: str) -> dict[str, Any]:
        """What ``run`` returns: why it stopped, the counters and the recent training return."""
        return {
            "reason": reason, "iteration": self.iteration, "env_steps": self.env_steps, "wall_time": self.elapsed,
            "episode_return_mean": float(np.mean(self.recent_returns)) if self.recent_returns else None,
            "eval_return_mean": self.last_eval_return,
        }

    def run(self) -> dict[str, Any]:
        """Train until the budget, ``stop_return`` or a stop signal; save; return the summary.

        The summary's ``reason`` is ``max_env_steps``, ``stop_return``, ``callback`` (an observer's
        ``should_stop``) or ``interrupted`` (with ``exit_code`` 128 + signal). A signal that interrupts one of the
        user's env calls (``EnvCallInterrupted``) or a wait (``IterationAbandoned``) abandons the iteration:
        ``abandon_iteration`` undoes it and the state of the last completed iteration is saved. An env that raises
        or outlives ``env.call_timeout_s`` raises ``EnvError``, and the checkpoint on disk stays the last one.
        ``self.observers`` hear every row, evaluation and checkpoint (rank 0). A non-finite loss, gradient or env
        output raises NonFiniteError naming the iteration; the checkpoint on disk is then the last consistent one.
        """
        pipe = self.cfg.pipeline
        try:
            self.emit("start")
            if self.saved_iteration is None:
                self.save()  # a run killed at once can still be resumed
            start = time.perf_counter() - self.elapsed
            reason, current = None, self.iteration + 1
            with StopSignals() as signals, watch_calls(self.cfg.env.get("call_timeout_s") or None):
                self._signals = signals
                try:
                    while reason is None:
                        if self.env_steps >= pipe.max_env_steps:  # the same counters on every process
                            reason = "max_env_steps"
                            break
                        current = self.iteration + 1
                        mark = self.iteration_mark()
                        try:
                            metrics = self.iterate()
                        except (IterationAbandoned, EnvCallInterrupted) as exc:
                            self.abandon_iteration(mark)
                            if isinstance(exc, EnvCallInterrupted):
                                log.warning(f"{exc}: iteration {current} is abandoned and iteration "
                                            f"{self.iteration} saved")
                            reason = "interrupted"
                            break
                        self.iteration = current
                        self.elapsed = time.perf_counter() - start
                        row = self._row(metrics)
                        self.emit("row", row=row)
                        wanted = any(answer is True for answer in self.emit("should_stop", row=row))
                        solved, interrupted, wanted = self.agree(self._solved(), signals.received is not None, wanted)
                        if solved:
                            reason, self.reached_stop_return = "stop_return", pipe.stop_return
                        elif interrupted:
                            reason = "interrupted"
                        elif wanted:
                            reason = "callback"
                        elif pipe.checkpoint_every and self.iteration % pipe.checkpoint_every == 0:
                            self.save()
                except NonFiniteError as exc:
                    saved = "none" if self.saved_iteration is None else f"iteration {self.saved_iteration}"
                    raise NonFiniteError(
                        f"stopped at iteration {current}: {exc}; the last checkpoint ({saved}) is kept: "
                        f"lower {self._learning_rate_keys()} or check the env's rewards and observations"
                    ) from None
                finally:
                    self._signals = None
            self.save(final=reason != "interrupted")
            summary = self.summary(reason)
            if reason == "interrupted":
                summary["exit_code"] = signals.exit_code
            self.emit("end", summary=summary)
            return summary
        finally:
            self.emit("close")


declare_fields(TrainingLoop)
