"""From a config file to a running pipeline: load, import plugins, merge defaults, validate, make the run dir."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import torch
from easydict import EasyDict

from .config import (
    Range,
    apply_overrides,
    check_choices,
    check_ranges,
    deep_merge,
    load_config_file,
    validate_keys_and_types,
)
from .errors import ConfigError, ZooError
from .pipelines.run_dir import CONFIG_FILE, RunDirectory, new_run_directory
from .plugins import import_modules, load_plugins
from .registry import PIPELINE_REGISTRY, POLICY_REGISTRY

BASE_CONFIG: dict[str, Any] = {
    "exp_name": "run",
    "seed": 0,
    "device": "cpu",
    "torch_threads": 1,
    "runs_dir": "runs",
    "import_names": [],
    # Directories searched for import_names (relative ones from the config file's folder); the config file's
    # own folder is added when resolving, as an absolute path, so a run's config.yaml finds them again.
    "import_paths": [],
    "env": {"id": "CartPole-v1", "kwargs": {}, "max_episode_steps": None},
    "policy": {"type": "ppo"},
    "pipeline": {},
}
BASE_RANGES = {"torch_threads": Range(low=1), "env.max_episode_steps": Range(low=1)}


def resolve_config(
    user_cfg: dict[str, Any], overrides: list[str] | None = None, config_dir: str | Path | None = None
) -> EasyDict:
    """Merge the policy's and pipeline's defaults under ``user_cfg`` (plus ``--set`` overrides) and validate.

    ``config_dir`` is the folder of the config file, if any: ``import_names`` are also looked up there.
    """
    user_cfg = apply_overrides(EasyDict(copy.deepcopy(dict(user_cfg))), overrides or [])
    names = list(user_cfg.get("import_names", []) or [])
    if names:
        user_cfg.import_paths = _import_paths(user_cfg.get("import_paths"), config_dir)
    import_modules(names, user_cfg.get("import_paths") or [])
    load_plugins()
    policy_type = (user_cfg.get("policy") or {}).get("type")
    if not policy_type:
        raise ConfigError("config has no policy.type: add policy = dict(type='ppo', ...) (see `zoo list`)")
    policy_cls = POLICY_REGISTRY.get(policy_type)
    pipeline_cls = PIPELINE_REGISTRY.get(policy_cls.pipeline)
    schema = deep_merge(BASE_CONFIG, {"policy": {**policy_cls.default_config, "type": policy_type},
                                      "pipeline": pipeline_cls.default_config})
    validate_keys_and_types(user_cfg, schema)
    cfg = deep_merge(schema, user_cfg)
    ranges, choices = dict(BASE_RANGES), {}
    for section, owner in (("policy", policy_cls), ("pipeline", pipeline_cls)):
        for key, (low, high) in getattr(owner, "config_ranges", {}).items():
            ranges[f"{section}.{key}"] = Range(low=low, high=high)
        for key, allowed in getattr(owner, "config_choices", {}).items():
            choices[f"{section}.{key}"] = allowed
    check_ranges(cfg, ranges)
    check_choices(cfg, choices)
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device '{cfg.device}' requested but CUDA is not available: use --device cpu")
    if cfg.device != "cpu" and not cfg.device.startswith("cuda"):
        raise ConfigError(f"device '{cfg.device}' is not supported: use 'cpu' or 'cuda'")
    return cfg


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


def train(
    config: str | Path | dict[str, Any],
    overrides: list[str] | None = None,
    resume: str | Path | None = None,
) -> dict[str, Any]:
    """Train from a config file or dict (or resume a run directory); returns the pipeline's summary."""
    if resume is not None:
        run_path = Path(resume)
        if not (run_path / CONFIG_FILE).exists():
            raise ZooError(f"cannot resume '{run_path}': it has no {CONFIG_FILE}; pass a run directory from runs/")
        cfg = resolve_config(load_config_file(run_path / CONFIG_FILE), overrides)
    else:
        is_file = isinstance(config, (str, Path))
        user_cfg = load_config_file(config) if is_file else config
        cfg = resolve_config(user_cfg, overrides, Path(config).parent if is_file else None)
        run_path = new_run_directory(cfg.runs_dir, cfg.exp_name)
    torch.set_num_threads(cfg.torch_threads)
    run_dir = RunDirectory(run_path)
    run_dir.write_config(cfg)
    pipeline_cls = PIPELINE_REGISTRY.get(POLICY_REGISTRY.get(cfg.policy.type).pipeline)
    try:
        pipeline = pipeline_cls(cfg, run_dir, resume=resume is not None)
    except BaseException:
        if resume is None:  # a new run that could not start (e.g. bad env kwargs) leaves no directory behind
            shutil.rmtree(run_path, ignore_errors=True)
        raise
    summary = pipeline.run()
    summary["run_dir"] = str(run_path)
    return summary


def load_run(run_dir: str | Path) -> tuple[EasyDict, Any, Any]:
    """Config, policy (weights loaded) and observation normaliser state of a finished or running run."""
    from .envs import make_env

    run_path = Path(run_dir)
    if not (run_path / CONFIG_FILE).exists():
        raise ZooError(f"'{run_path}' is not a run directory (no {CONFIG_FILE}): pass a directory under runs/")
    cfg = resolve_config(load_config_file(run_path / CONFIG_FILE))
    state = RunDirectory(run_path).load_checkpoint()
    env = make_env(cfg.env.id, **dict(cfg.env.kwargs))  # only its spaces are needed
    policy = POLICY_REGISTRY.get(cfg.policy.type)(
        cfg.policy, env.observation_space, env.action_space, torch.device("cpu")
    )
    env.close()
    policy.load_state_dict(state["policy"])
    return cfg, policy, state.get("obs_normalizer")
