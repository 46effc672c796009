"""From a config to a running pipeline: load, import plugins, merge defaults, validate, build, run, resume.

Order matters for "nothing half-made": a new run builds its pipeline (envs, policy: everything that can fail on
bad input) before its run directory exists; a resumed run restores the checkpoint into a freshly built pipeline
before it touches the run directory (metrics cut back to the checkpoint, config.yaml rewritten).
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import os
import pickle
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from easydict import EasyDict

from . import launcher
from .config import (
    Range,
    apply_overrides,
    check_choices,
    check_finite_numbers,
    check_ranges,
    deep_merge,
    load_config_file,
    to_plain,
    validate_keys_and_types,
)
from .errors import ConfigError, RunDirectoryError, ZooError, first_line
from .pipelines.loop import TrainingLoop
from .pipelines.run_dir import (
    BEST_MODEL_FILE,
    CHECKPOINT_FILE,
    CONFIG_FILE,
    RunDirectory,
    check_exp_name,
    load_weights_only,
    new_run_directory,
)
from .plugins import import_modules, load_plugins
from .registry import PIPELINE_REGISTRY, POLICY_REGISTRY
from .rl_utils.distributed import world_info

BASE_CONFIG: dict[str, Any] = {
    "exp_name": "run",  # the run directory's name under runs_dir (made unique: name_2, name_3...)
    "seed": 0,  # every random stream of the run derives from it
    "device": "cpu",  # cpu, cuda or cuda:N
    "torch_threads": 1,  # torch intra-op threads (1 is fastest for small networks on CPU)
    "runs_dir": "runs",  # where run directories are created
    "import_names": [],  # modules to import first (your registered policies, envs, callbacks)
    # Directories searched for import_names (relative ones from the config file's folder); the config file's
    # own folder is added when resolving, as an absolute path, so a run's config.yaml finds them again.
    "import_paths": [],  # folders searched for import_names (the config file's own is added)
    "env": {
        "id": "CartPole-v1",  # a gymnasium id or a name registered in zoo's env registry
        "kwargs": {},  # keyword arguments for gymnasium.make or the registered factory
        "max_episode_steps": None,  # a time limit (truncation) on every episode; None: the env's own
    },
    "policy": {"type": "ppo"},
    "pipeline": {},
    "logger": {
        "tensorboard": False,  # also write every metrics row as TensorBoard scalars (the tensorboard extra)
        "progress": True,  # the progress line on stderr (zoo run -q turns it off)
    },
}
BASE_RANGES = {
    "seed": Range(0, 2**63 - 1),
    "torch_threads": Range(1, 1024),
    "env.max_episode_steps": Range(1, None, integer=True),
}
SECTIONS = ("env", "policy", "pipeline", "logger")
# Keys a resumed run may never change, besides the policy's and the pipeline's own frozen_keys.
FROZEN_KEYS = ("policy.type", "pipeline.type", "env", "seed", "exp_name")


def _check_sections(user_cfg: Mapping) -> None:
    for section in SECTIONS:
        value = user_cfg.get(section)
        if value is not None and not isinstance(value, Mapping):
            raise ConfigError(
                f"config section '{section}' must be a mapping, got {type(value).__name__} {value!r}: "
                f"write {section}=dict(...)"
            )


def _named_type(section: Mapping, section_name: str, default: str | None) -> str:
    value = section.get("type", default)
    if not isinstance(value, str) or not value:
        raise ConfigError(
            f"{section_name}.type must be a registered name (a string), got {value!r}: see `zoo list`"
        )
    return value


def resolve_config(
    user_cfg: Mapping[str, Any], overrides: list[Any] | None = None, config_dir: str | Path | None = None
) -> EasyDict:
    """Merge the policy's and pipeline's defaults under ``user_cfg`` (plus ``--set`` overrides) and validate.

    ``config_dir`` is the folder of the config file, if any: ``import_names`` are also looked up there.
    ``pipeline.type`` defaults to the policy's first supported pipeline. Every problem is a one-line ConfigError.
    """
    user_cfg = apply_overrides(EasyDict(copy.deepcopy(to_plain(user_cfg))), overrides or [])
    _check_sections(user_cfg)
    names = user_cfg.get("import_names", []) or []
    if names:
        user_cfg.import_paths = _import_paths(user_cfg.get("import_paths"), config_dir)
    import_modules(names, user_cfg.get("import_paths") or [])
    load_plugins()
    policy_section = user_cfg.get("policy") or {}
    if "type" not in policy_section:
        raise ConfigError("config has no policy.type: add policy = dict(type='ppo', ...) (see `zoo list`)")
    policy_type = _named_type(policy_section, "policy", None)
    policy_cls = POLICY_REGISTRY.get(policy_type)
    supported = tuple(getattr(policy_cls, "pipelines", ()) or ())
    if not supported:
        raise ConfigError(f"policy '{policy_type}' declares no pipelines: its class must set `pipelines`")
    pipeline_type = _named_type(user_cfg.get("pipeline") or {}, "pipeline", supported[0])
    pipeline_cls = PIPELINE_REGISTRY.get(pipeline_type)
    if pipeline_type not in supported:
        raise ConfigError(
            f"policy '{policy_type}' does not run on pipeline '{pipeline_type}': it supports "
            f"{', '.join(supported)}; set pipeline.type to one of them or remove it"
        )
    schema = deep_merge(BASE_CONFIG, {"policy": {**policy_cls.default_config, "type": policy_type},
                                      "pipeline": {**pipeline_cls.default_config, "type": pipeline_type}})
    validate_keys_and_types(user_cfg, schema)
    cfg = deep_merge(schema, user_cfg)
    ranges: dict[str, Any] = dict(BASE_RANGES)
    choices: dict[str, Any] = {}
    for section, owner in (("policy", policy_cls), ("pipeline", pipeline_cls)):
        for key, rule in getattr(owner, "config_ranges", {}).items():
            ranges[f"{section}.{key}"] = Range.of(rule)
        for key, allowed in getattr(owner, "config_choices", {}).items():
            choices[f"{section}.{key}"] = allowed
    check_ranges(cfg, ranges)
    check_choices(cfg, choices)
    check_finite_numbers(cfg, skip=("env.kwargs",))
    check_exp_name(cfg.exp_name)
    if not isinstance(cfg.env.id, str) or not cfg.env.id:
        raise ConfigError(f"env.id must be an env name, got {cfg.env.id!r}: e.g. env=dict(id='CartPole-v1')")
    _check_device(cfg.device)
    if cfg.logger.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError("logger.tensorboard needs the tensorboard package: pip install 'zoo-rl[tensorboard]' "
                          "(or drop --tensorboard)")
    return cfg


def _check_device(name: Any) -> None:
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ConfigError(f"device {name!r} is not supported: use 'cpu', 'cuda' or 'cuda:N'")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device '{name}' requested but CUDA is not available: use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device '{name}' does not exist: this machine has {torch.cuda.device_count()} GPU(s)")


def _import_paths(paths: Any, config_dir: str | Path | None) -> list[str]:
    if paths is None:
        paths = []
    if isinstance(paths, str) or not isinstance(paths, (list, tuple)):
        raise ConfigError(f"import_paths must be a list of directories, e.g. ['plugins'], got {paths!r}")
    base = Path(config_dir) if config_dir is not None else Path.cwd()
    resolved = [str((base / str(path)).resolve()) for path in paths]
    if config_dir is not None and str(Path(config_dir).resolve()) not in resolved:
        resolved.append(str(Path(config_dir).resolve()))
    return resolved


def build_pipeline(cfg: EasyDict) -> TrainingLoop:
    """The pipeline named by ``cfg.pipeline.type``, built (envs and policy) but not run; in a worker of a
    multi-process pipeline, with this process's rank and the world size of its process group."""
    rank, world_size = world_info()
    return PIPELINE_REGISTRY.get(cfg.pipeline.type)(cfg, rank, world_size)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of each message (it may be replaced after set-up)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def ensure_logging(level: int | None = None) -> None:
    """Messages that are not the progress line go through the ``zoo`` logger; unless the application configured
    it, they go to stderr as ``zoo: message`` at INFO (``level`` changes that: ``zoo run -q``/``-v``)."""
    logger = logging.getLogger("zoo")
    if not logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("zoo: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
    if level is not None:
        logger.setLevel(level)


def train(
    config: str | Path | Mapping[str, Any] | None = None,
    overrides: list[Any] | None = None,
    resume: str | Path | None = None,
) -> dict[str, Any]:
    """Train from a config file or dict, or continue a run directory (``resume``); returns the summary.

    A multi-process pipeline (``parallel_sync`` with ``world_size > 1``) spawns its workers here and supervises
    them (see ``zoo.launcher``), or, under torchrun, joins the process group torchrun describes.

    Arguments:
        config: a ``.py``/``.yaml``/``.json`` config file or a config mapping (None with ``resume``).
        overrides: ``--set``-style ``"a.b=value"`` strings (or ``(key, value)`` pairs), applied in order.
        resume: a run directory to continue from its last checkpoint (its config.yaml plus ``overrides``).
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
        cfg = _resume_config(run_path, overrides)
    else:
        if config is None:
            raise ConfigError("nothing to train: give a config file or dict (zoo run --config FILE)")
        is_file = isinstance(config, (str, Path))
        user_cfg = load_config_file(config) if is_file else config
        cfg = resolve_config(user_cfg, overrides, Path(config).parent if is_file else None)
        run_path = None
    if launcher.under_torchrun() and launcher.is_actor_learner(cfg):
        rank = launcher.join_actor_learner(cfg)
        if rank != 0:  # an actor; the learner (rank 0) owns the run
            from .pipelines.remote_actors import remote_actor_main

            return remote_actor_main(cfg)
        return run_worker(cfg, None if run_path is None else str(run_path))
    if launcher.under_torchrun() and not launcher.is_distributed(cfg) and int(os.environ["WORLD_SIZE"]) > 1:
        raise ConfigError(
            f"pipeline '{cfg.pipeline.type}' does not run under torchrun (each of its {os.environ['WORLD_SIZE']} "
            f"processes would train a run of its own): start it with `zoo run` alone"
        )
    if launcher.is_distributed(cfg):
        if launcher.under_torchrun():
            launcher.check_backend(cfg)
            launcher.join_from_environment(cfg)
        elif cfg.pipeline.world_size > 1:
            launcher.check_backend(cfg)
            return launcher.spawn(cfg, run_path, run_worker)
    return run_worker(cfg, None if run_path is None else str(run_path))


def run_worker(
    cfg: EasyDict, resume: str | None = None, on_run_dir: Callable[[Path], None] | None = None
) -> dict[str, Any]:
    """Build the pipeline of a resolved ``cfg`` in this process and run it (a new run, or ``resume``).

    In a multi-process pipeline every worker calls this once its process group is up (plugins and
    ``import_names`` loaded); rank 0 alone creates, locks and writes the run directory (``on_run_dir`` hears its
    path). Serially it is the whole of ``train``.
    """
    rank = world_info()[0]
    if resume is not None:
        return _resume(Path(resume), cfg, rank, on_run_dir)
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
                if on_run_dir is not None:
                    on_run_dir(run_path)
            pipeline.save(run_dir)  # iteration 0: a run killed at once can still be resumed
        except BaseException:
            if run_dir is not None:
                run_dir.unlock()
                shutil.rmtree(run_path, ignore_errors=True)
                if not runs_root_existed:
                    shutil.rmtree(runs_root, ignore_errors=True)
            raise
        try:
            summary = pipeline.run(run_dir)
        finally:
            if run_dir is not None:
                run_dir.unlock()
    finally:
        pipeline.close()
    summary["run_dir"] = None if run_path is None else str(run_path)
    return summary


def _check_frozen(saved: EasyDict, new: EasyDict, run_path: Path) -> None:
    policy_cls = POLICY_REGISTRY.get(new.policy.type)
    pipeline_cls = PIPELINE_REGISTRY.get(new.pipeline.type)
    keys = [*FROZEN_KEYS, *(f"policy.{key}" for key in getattr(policy_cls, "frozen_keys", ())),
            *(f"pipeline.{key}" for key in getattr(pipeline_cls, "frozen_keys", ()))]
    for dotted in keys:
        before, after = saved, new
        for part in dotted.split("."):
            before, after = before.get(part), after.get(part)
        if to_plain(before) != to_plain(after):
            raise ConfigError(
                f"--resume cannot change {dotted} (the run was trained with {to_plain(before)!r}, got "
                f"{to_plain(after)!r}): drop that --set, or start a new run from "
                f"zoo run --config {run_path / CONFIG_FILE} --set ..."
            )


def _resume_config(run_path: Path, overrides: list[Any] | None) -> EasyDict:
    if not (run_path / CONFIG_FILE).is_file():
        raise RunDirectoryError(
            f"cannot resume '{run_path}': it is not a run directory (no {CONFIG_FILE}): pass a directory under runs/"
        )
    saved_cfg = load_config_file(run_path / CONFIG_FILE)
    cfg = resolve_config(saved_cfg, overrides)
    _check_frozen(resolve_config(saved_cfg), cfg, run_path)
    return cfg


def _resume(run_path: Path, cfg: EasyDict, rank: int, on_run_dir: Callable[[Path], None] | None) -> dict[str, Any]:
    world_size = world_info()[1]
    run_dir = RunDirectory(run_path) if rank == 0 else None
    if run_dir is not None:
        run_dir.lock()
    try:
        state = None
        if run_dir is not None and ((run_path / CHECKPOINT_FILE).exists() or run_dir.metrics_rows()):
            state = run_dir.load_checkpoint()  # metrics without a checkpoint: a damaged run, refused in one line
        # else: killed between writing config.yaml and its first checkpoint; it starts again in place
        pipeline = build_pipeline(cfg)
        try:
            if state is not None or world_size > 1:  # several workers: every rank takes part in the restore
                _restore(pipeline, state, run_path)
            # The run really starts now: only from here on does the run directory change.
            if run_dir is not None:
                run_dir.clean_temporaries()
                run_dir.truncate_metrics(int(state["metrics_rows"]) if state is not None else 0)
                run_dir.write_config(cfg)
                if on_run_dir is not None:
                    on_run_dir(run_path)
            summary = pipeline.run(run_dir)
        finally:
            pipeline.close()
    finally:
        if run_dir is not None:
            run_dir.unlock()
    summary["run_dir"] = str(run_path) if rank == 0 else None
    return summary


def _restore(pipeline: TrainingLoop, state: dict[str, Any] | None, run_path: Path) -> None:
    try:
        pipeline.load_state_dict(state)
    except ZooError as exc:
        raise ConfigError(f"cannot resume '{run_path}': {exc}") from None
    except (KeyError, ValueError, RuntimeError, TypeError, pickle.UnpicklingError, EOFError, AttributeError) as exc:
        detail = first_line(exc, 200)
        raise ConfigError(
            f"cannot resume '{run_path}': its checkpoint does not fit this config ({detail}): resume without "
            f"overrides that change the model or env, or start a new run"
        ) from None


def load_run(
    run_dir: str | Path, device: str = "cpu", which: str = "last"
) -> tuple[EasyDict, Any, dict[str, Any] | None]:
    """Config, acting-only policy (weights loaded) and observation-normaliser state of a run directory.

    ``which``: ``last`` (the latest checkpoint) or ``best`` (``best_model.pt``: the best evaluation during
    training). Reads weights-only: a run directory from elsewhere cannot run code through it.
    """
    if which not in ("last", "best"):
        raise ZooError(f"which must be 'last' or 'best', got {which!r}")
    from .envs import make_env

    run_path = Path(run_dir)
    if not (run_path / CONFIG_FILE).is_file():
        raise RunDirectoryError(f"'{run_path}' is not a run directory (no {CONFIG_FILE}): pass a directory under runs/")
    cfg = resolve_config(load_config_file(run_path / CONFIG_FILE), [("device", device)])
    source = BEST_MODEL_FILE if which == "best" else CHECKPOINT_FILE
    if which == "best":
        best = run_path / BEST_MODEL_FILE
        if not best.is_file():
            raise RunDirectoryError(
                f"no {BEST_MODEL_FILE} in '{run_path}': the run has made no evaluation yet (pipeline.eval_every "
                f"is {cfg.pipeline.get('eval_every')}): use --which last"
            )
        state = load_weights_only(best)
    else:
        state = RunDirectory(run_path).load_checkpoint(separate=False)
    env = make_env(cfg.env.id, **dict(cfg.env.kwargs))  # only its spaces are needed
    observation_space, action_space = env.observation_space, env.action_space
    env.close()
    policy_cls = POLICY_REGISTRY.get(cfg.policy.type)
    policy = policy_cls(cfg.policy, observation_space, action_space, torch.device(device), acting_only=True)
    try:
        policy.load_state_dict(state["policy"])
    except (KeyError, ValueError, RuntimeError, TypeError) as exc:
        detail = first_line(exc, 200)
        raise RunDirectoryError(
            f"the weights in '{run_path / source}' do not fit the run's config.yaml ({detail}): "
            f"was config.yaml edited? restore it or train again"
        ) from None
    return cfg, policy, state.get("obs_normalizer")
