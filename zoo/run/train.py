"""``zoo.train`` / ``zoo run``: from a config to a running pipeline (load, resolve, launch, build, run); resume
(``zoo.run.resume``) and load (``zoo.run.load``) live beside it.

Order matters for "nothing half-made": a new run builds its pipeline (envs, policy: everything that can fail on
bad input) before its run directory exists; a resumed run restores the checkpoint into a freshly built pipeline
before it touches the run directory (metrics cut back to the checkpoint, config.yaml rewritten).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from easydict import EasyDict

from ..config import load_config_file
from ..config.resolve import resolve_config
from ..errors import ConfigError
from ..rl_utils.distributed import world_info
from .build import build_pipeline
from .launch import launch
from .log import ensure_logging
from .observers import run_observers
from .resume import resume as _resume
from .resume import resume_config
from .run_dir import RunDirectory, new_run_directory
from .seeds_parent import check_not_seeds_parent, check_run_place


def train(
    config: str | Path | Mapping[str, Any] | None = None,
    overrides: list[Any] | None = None,
    resume: str | Path | None = None,
    repair: bool = False,
) -> dict[str, Any]:
    """Train from a config file or dict, or continue a run directory (``resume``); returns the summary.

    The pipeline starts its own processes (``TrainingLoop.launch``, see ``zoo.run.launch``): DPPO spawns and
    supervises its workers here, or, under torchrun, joins the process group torchrun describes.

    Arguments:
        config: a ``.py``/``.yaml``/``.json`` config file or a config mapping (None with ``resume``).
        overrides: ``--set``-style ``"a.b=value"`` strings (or ``(key, value)`` pairs), applied in order.
        resume: a run directory to continue from its last checkpoint (its config.yaml plus ``overrides``).
        repair: with ``resume``, continue a damaged run directory: config.yaml restored from the checkpoint's
            config, metrics reduced to their readable rows (each repair is logged); see ``zoo.run.resume``.
    Returns:
        ``reason`` (``max_env_steps``, ``stop_return`` or ``interrupted``, with ``exit_code``), ``iteration``,
        ``env_steps``, ``wall_time``, ``episode_return_mean`` and ``run_dir`` (None on ranks other than 0).
    """
    ensure_logging()
    if resume is not None:
        if config is not None:
            raise ConfigError("use either a config (--config) or a run directory (--resume), not both: "
                              "a resumed run always uses its own config.yaml plus --set overrides")
        run_path = Path(resume)
        check_not_seeds_parent(run_path)
        cfg = resume_config(run_path, overrides, repair, environ=os.environ)
    else:
        if config is None:
            raise ConfigError("nothing to train: give a config file or dict (zoo run --config FILE)")
        is_file = isinstance(config, (str, Path))
        user_cfg = load_config_file(config) if is_file else config
        cfg = resolve_config(user_cfg, overrides, Path(config).parent if is_file else None, environ=os.environ)
        check_run_place(cfg)  # never inside another run, nor among seeds it is not one of
        run_path = None
    return launch(cfg, run_path, repair, run_worker)


def run_worker(
    cfg: EasyDict, resume: str | None = None, on_run_dir: Callable[[Path], None] | None = None, repair: bool = False
) -> dict[str, Any]:
    """Build the pipeline of a resolved ``cfg`` in this process and run it (a new run, or ``resume``).

    In a multi-process pipeline every worker calls this once its process group is up (plugins and
    ``import_names`` loaded); rank 0 alone creates, locks and writes the run directory (``on_run_dir`` hears its
    path). Serially it is the whole of ``train``.
    """
    rank = world_info()[0]
    if resume is not None:
        return _resume(Path(resume), cfg, rank, on_run_dir, repair)
    runs_root = Path(cfg.runs_dir)
    runs_root_existed = runs_root.exists()
    pipeline = build_pipeline(cfg)
    run_dir, run_path = None, None
    try:
        if rank == 0:
            run_path = new_run_directory(cfg.runs_dir, cfg.exp_name)
            run_dir = RunDirectory(run_path)
        try:
            if run_dir is not None:
                run_dir.lock()
                run_dir.write_config(cfg)
                run_dir.record_environment(pipeline.environment_record())
                if on_run_dir is not None:
                    on_run_dir(run_path)
            pipeline.observers = run_observers(cfg, run_dir)
            pipeline.save()  # iteration 0: a run killed at once can still be resumed
        except BaseException:
            if run_dir is not None:
                run_dir.unlock()
                shutil.rmtree(run_path, ignore_errors=True)
                if not runs_root_existed:
                    shutil.rmtree(runs_root, ignore_errors=True)
            raise
        try:
            summary = pipeline.run()
        finally:
            if run_dir is not None:
                run_dir.unlock()
    finally:
        pipeline.close()
    summary["run_dir"] = None if run_path is None else str(run_path)
    return summary
