"""``zoo run --resume RUN``: continue a run directory from its last checkpoint exactly, or refuse in one line.

Before anything in the run directory changes, a resume checks:

- config.yaml against the config the checkpoint was trained with (the checkpoint keeps it): a difference that no
  ``--set`` asked for (an edited or truncated config.yaml) is refused, so a damaged file can never swap a buffer
  size or a learning rate for a default; ``--repair`` restores config.yaml from the checkpoint instead;
- ``--set`` against the keys a resume may not change (they shape the saved state);
- the metrics rows the checkpoint covers: iterations 1..N, in order (``--repair`` keeps the readable ones).

Then, in this order: lock, build, restore, remove what killed writers left, write the metrics back to exactly the
covered rows, save a checkpoint with the new config when ``--set`` changed it (a checkpoint also remembers the
config it replaced, so a kill before config.yaml is rewritten leaves a config.yaml the next resume recognises),
write config.yaml, and train.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from easydict import EasyDict

from ..config import load_config_file, parse_override, to_plain
from ..config.resolve import check_frozen, config_differences, resolve_config
from ..errors import ConfigError, RunDirectoryError, ZooError, first_line
from ..pipelines.loop import TrainingLoop
from ..rl_utils.distributed import world_info
from .build import build_pipeline
from .metrics_files import METRICS_JSONL, repair_rows, rows_for_resume
from .observers import run_observers
from .run_dir import CHECKPOINT_FILE, CONFIG_FILE, LOCK_FILE, RunDirectory
from .state_files import check_regular

log = logging.getLogger("zoo")
REPAIR_HINT = "resume with --repair to restore config.yaml from the checkpoint"


def _trained_config(run_path: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The config the checkpoint was trained with and the one it replaced (None, None without a checkpoint or in
    a checkpoint older than this check)."""
    if not (run_path / CHECKPOINT_FILE).exists():
        return None, None
    state = RunDirectory(run_path).load_checkpoint(separate=False)
    return state.get("config"), state.get("config_replaced")


def _overridden(overrides: list[Any] | None) -> list[str]:
    keys = []
    for override in overrides or []:
        keys.append(parse_override(override)[0] if isinstance(override, str) else str(override[0]))
    return keys


def resume_config(run_path: Path, overrides: list[Any] | None, repair: bool = False,
                  environ: Mapping[str, str] | None = None) -> EasyDict:
    """The config to continue ``run_path`` with: its own (checked against its checkpoint's) plus ``overrides``."""
    for name in (CONFIG_FILE, LOCK_FILE, METRICS_JSONL):  # a FIFO or device there: one line, before anything opens it
        check_regular(run_path / name)
    trained, replaced = _trained_config(run_path)
    base: Any = None
    if not (run_path / CONFIG_FILE).is_file():
        if repair and trained is not None:
            log.warning(f"{run_path / CONFIG_FILE} is missing: restored from the checkpoint")
            base = trained
        elif (run_path / LOCK_FILE).exists() and trained is None:
            raise RunDirectoryError(
                f"cannot resume '{run_path}': zoo created it but was stopped before it wrote its {CONFIG_FILE} "
                f"(nothing was trained): remove it and start the run again with zoo run --config ...")
        else:
            extra = f" ({REPAIR_HINT})" if trained is not None else ": pass a directory under runs/"
            raise RunDirectoryError(f"cannot resume '{run_path}': it is not a run directory (no {CONFIG_FILE}){extra}")
    else:
        try:
            base = resolve_config(load_config_file(run_path / CONFIG_FILE))
        except ZooError as exc:
            if not (repair and trained is not None):
                raise ConfigError(f"{exc}{f' (or {REPAIR_HINT})' if trained is not None else ''}") from None
            log.warning(f"{run_path / CONFIG_FILE} cannot be used ({first_line(exc, 120)}): restored from the "
                        f"checkpoint")
            base = trained
    if trained is not None and base is not trained:
        differs = config_differences(trained, base)
        asked = _overridden(overrides)
        unasked = [key for key in differs if not any(key == k or key.startswith(f"{k}.") for k in asked)]
        if unasked and replaced is not None and not config_differences(replaced, base):
            base = trained  # config.yaml was still the previous one when a resume with --set was stopped
        elif unasked and repair:
            log.warning(f"{run_path / CONFIG_FILE} restored from the checkpoint ({len(unasked)} key(s) differed: "
                        f"{', '.join(unasked[:5])}{'...' if len(unasked) > 5 else ''})")
            base = trained
        elif unasked:
            key = unasked[0]
            mine, theirs = _value(base, key), _value(trained, key)
            more = f" and {len(unasked) - 1} more key(s)" if len(unasked) > 1 else ""
            raise ConfigError(
                f"cannot resume '{run_path}': its {CONFIG_FILE} does not match the config its checkpoint was trained "
                f"with at {key} ({mine!r} in {CONFIG_FILE}, {theirs!r} in the checkpoint){more}: it was edited or "
                f"damaged; change keys on resume with --set KEY=VALUE, or {REPAIR_HINT}")
        else:
            base = trained if differs else base
    cfg = resolve_config(base, overrides, environ=environ)
    check_frozen(resolve_config(base), cfg, run_path)
    return cfg


def _value(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(cfg, dict) or part not in cfg:
            return "(missing)"
        cfg = cfg[part]
    return to_plain(cfg)


def _covered_rows(run_dir: RunDirectory, count: int, repair: bool) -> list[dict[str, Any]]:
    path = run_dir.root / METRICS_JSONL
    if not repair:
        return rows_for_resume(path, count)
    try:
        return rows_for_resume(path, count)
    except RunDirectoryError:
        rows, report = repair_rows(path, count)
        log.warning(f"repaired {report}")
        return rows


def resume(run_path: Path, cfg: EasyDict, rank: int, on_run_dir: Callable[[Path], None] | None,
           repair: bool = False) -> dict[str, Any]:
    """Continue ``run_path`` with the resolved ``cfg`` in this process (rank 0 owns the directory); the summary."""
    world_size = world_info()[1]
    run_dir = RunDirectory(run_path) if rank == 0 else None
    if run_dir is not None:
        run_dir.lock()
    try:
        state, rows = None, []
        if run_dir is not None:
            metrics = run_dir.root / METRICS_JSONL
            if (run_dir.root / CHECKPOINT_FILE).exists() or (metrics.exists() and metrics.stat().st_size):
                state = run_dir.load_checkpoint(separate=False)  # metrics without a checkpoint: refused here
                rows = _covered_rows(run_dir, int(state["metrics_rows"]), repair)
            # else: killed between writing config.yaml and its first checkpoint; it starts again in place
        pipeline = build_pipeline(cfg)
        try:
            if run_dir is not None and state is not None:
                run_dir.load_separate(state, pipeline.separate_components())
            if state is not None or world_size > 1:  # several workers: every rank takes part in the restore
                _restore(pipeline, state, run_path)
            changed = state is not None and to_plain(cfg) != state.get("config")
            (changed,) = pipeline.agree(changed)  # a save is a collective: every worker decides with rank 0
            # The run really starts now: only from here on does the run directory change.
            if run_dir is not None:
                run_dir.clean_temporaries((state or {}).get("separate_files", {}).values())
                run_dir.rewrite_metrics(rows)
            pipeline.observers = run_observers(cfg, run_dir)
            if changed:
                pipeline.config_replaced = None if state is None else state.get("config")
                pipeline.save(separate_unchanged=True)
                pipeline.config_replaced = None
            if run_dir is not None:
                run_dir.write_config(cfg)
                run_dir.record_environment(pipeline.environment_record())
                if on_run_dir is not None:
                    on_run_dir(run_path)
            summary = pipeline.run()
        finally:
            pipeline.close()
    finally:
        if run_dir is not None:
            run_dir.unlock()
    summary["run_dir"] = str(run_path) if rank == 0 else None
    return summary


# What a checkpoint that does not fit the config raises while it is loaded (besides zoo's own errors): missing or
# extra keys, tensors of other shapes (torch's load_state_dict), a snapshot that cannot be unpickled.
_MISFITS = ("state_dict", "size mismatch", "missing key", "unexpected key", "shape", "does not match")


def _restore(pipeline: TrainingLoop, state: dict[str, Any] | None, run_path: Path) -> None:
    """Load ``state`` into ``pipeline``: a checkpoint that does not fit the config is one ConfigError line; any
    other exception is a bug in zoo and goes up as it is (the CLI asks for a report)."""
    try:
        pipeline.load_state_dict(state)
    except ZooError as exc:
        raise ConfigError(f"cannot resume '{run_path}': {exc}") from None
    except (KeyError, ValueError, RuntimeError, pickle.UnpicklingError, EOFError) as exc:
        detail = first_line(exc, 200)
        misfit = isinstance(exc, (KeyError, pickle.UnpicklingError, EOFError)) or any(
            word in str(exc).lower() for word in _MISFITS)
        if not misfit:
            raise
        raise ConfigError(
            f"cannot resume '{run_path}': its checkpoint does not fit this config ({detail}): resume without "
            f"overrides that change the model or env, or start a new run"
        ) from None
