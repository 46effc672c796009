"""A config, resolved: the base keys, the policy's and pipeline's defaults merged under the user's values, every
value validated (one ConfigError line each); and the pipeline it names, built.

``trusted=False`` resolves a config without importing the modules it names (``import_names``): what loading a run
directory for evaluation does, since the run directory may come from someone else.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from easydict import EasyDict

from ..errors import ConfigError, ZooError
from ..plugins import load_plugins, load_run_plugins
from ..registry import PIPELINE_REGISTRY, POLICY_REGISTRY
from .checks import (
    Range,
    apply_overrides,
    check_choices,
    check_exp_name,
    check_finite_numbers,
    check_ranges,
    deep_merge,
    validate_keys_and_types,
)
from .files import to_plain
from .schema import Field, derived, plain_defaults

log = logging.getLogger("zoo")

# The keys every config has besides the policy's and the pipeline's sections (see zoo.config.schema).
BASE_FIELDS: dict[str, Any] = {
    "exp_name": Field("run", "the run directory's name under runs_dir (made unique: name_2, name_3...)",
                      frozen=True),
    "seed": Field(0, "every random stream of the run derives from it", range=Range(0, 2**63 - 1), frozen=True),
    "device": Field("cpu", "cpu, cuda or cuda:N"),
    "torch_threads": Field(1, "torch intra-op threads (1 is fastest for small networks on CPU)", range=(1, 1024)),
    "runs_dir": Field("runs", "where run directories are created"),
    "import_names": Field([], "modules to import first (your registered policies, envs, callbacks)"),
    # The config file's own folder is added when resolving, as an absolute path, so that a run's config.yaml
    # finds the modules again.
    "import_paths": Field([], "folders searched for import_names (the config file's own is added)"),
    "env.id": Field("CartPole-v1", "a gymnasium id (module:EnvId imports module first) or a name in zoo's env "
                    "registry", frozen=True),
    "env.kwargs": Field({}, "keyword arguments for gymnasium.make or the registered factory", frozen=True),
    "env.max_episode_steps": Field(None, "a time limit (truncation) on every episode; None: the env's own",
                                   type=int, range=Range(1, None, integer=True), frozen=True),
    "env.backend": Field("gymnasium", "what steps the envs: gymnasium (Python) or envpool (EnvPool's C++ threads, its "
                         "own ids and env.kwargs: pip install 'zoo-rl[envpool]')", choices=("gymnasium", "envpool"),
                         frozen=True),
    "env.action_mask": Field("none", "where the env's action masks come from (Discrete, MultiDiscrete): auto (its "
                             "action_masks() method, else info['action_mask']), method, info, obs:<key> (a key of "
                             "its Dict observations), or none (no masks); with masks invalid actions are never "
                             "taken (docs/action-masks.md)"),
    "env.call_timeout_s": Field(600.0, "an env step() or reset() that has not returned after this many seconds stops "
                                "the run with an error naming the env (0: no limit)", range=(0.0, None)),
    "policy": {"type": "ppo"},
    "pipeline": {},
    "logger.tensorboard": Field(False, "also write every metrics row as TensorBoard scalars (the tensorboard "
                                "extra)"),
    "logger.progress": Field(True, "the progress line on stderr (zoo run -q turns it off)"),
    "tune": Field({}, "zoo tune's search space and objective (an open mapping, like env.kwargs); ignored by zoo run"),
    # How this process computes (zoo.accel.settings), never what it learns: a resumed run may change them.
    "accel.cuda_graphs": Field(True, "on CUDA, capture the compiled learning step as a CUDA graph (false: launch its "
                               "kernels one by one)"),
    "accel.cpp_wrapper": Field(True, "on the CPU, inductor writes a compiled step's host code as C++ (false: Python; "
                               "a compiler that cannot build the C++ falls back by itself)"),
    "accel.fp32_products": Field("auto", "float32 products of the off-policy networks on the CPU: auto (oneDNN where "
                                 "the CPU has AVX-512 and MKL does not use it), onednn, or default (torch's own)",
                                 choices=("auto", "onednn", "default")),
    "accel.recurrent_kernel": Field(True, "on the CPU, a small recurrent core's float32 unroll runs zoo's compiled "
                                    "loops with the episode resets inside (zoo.accel.recurrent_scan, LOOP_LIMITS; "
                                    "false: torch's LSTM/GRU modules on padded segments)"),
    "accel.inductor_cache": Field(None, "the folder of inductor's compiled kernels (None: TORCHINDUCTOR_CACHE_DIR when "
                                  "set, else zoo/inductor/<CPU kind> in the user's cache folder)", type=str),
}
_BASE = derived({key: f for key, f in BASE_FIELDS.items() if isinstance(f, Field)})
BASE_CONFIG: dict[str, Any] = plain_defaults(BASE_FIELDS)
BASE_RANGES: dict[str, Any] = {key: Range.of(rule) for key, rule in _BASE["config_ranges"].items()}
BASE_DOCS: dict[str, str] = _BASE["config_docs"]
SECTIONS = ("env", "policy", "pipeline", "logger", "accel")
# Keys a resumed run may never change, besides the policy's and the pipeline's own frozen_keys.
FROZEN_KEYS = ("policy.type", "pipeline.type", *_BASE["frozen_keys"])


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
    user_cfg: Mapping[str, Any], overrides: list[Any] | None = None, config_dir: str | Path | None = None,
    trusted: bool = True, environ: Mapping[str, str] | None = None,
) -> EasyDict:
    """Merge the policy's and pipeline's defaults under ``user_cfg`` (plus ``--set`` overrides) and validate.

    ``config_dir`` is the folder of the config file, if any: ``import_names`` are also looked up there.
    ``pipeline.type`` defaults to the policy's first supported pipeline. Every problem is a one-line ConfigError.
    ``trusted=False``: the ``import_names`` modules are not imported (only installed plugins are loaded).
    ``environ`` (a process about to train): the pipeline keys it decides (``TrainingLoop.from_environment``:
    torchrun's WORLD_SIZE) override the user's, before validation, so that config.yaml holds what runs.
    """
    user_cfg = apply_overrides(EasyDict(copy.deepcopy(to_plain(user_cfg))), overrides or [])
    _check_sections(user_cfg)
    names = user_cfg.get("import_names", []) or []
    if names and trusted:
        user_cfg.import_paths = _import_paths(user_cfg.get("import_paths"), config_dir)
    if trusted:
        load_run_plugins(user_cfg)
    else:
        load_plugins()
    policy_section = user_cfg.get("policy") or {}
    if "type" not in policy_section:
        raise ConfigError("config has no policy.type: add policy = dict(type='ppo', ...) (see `zoo list`)")
    policy_type = _named_type(policy_section, "policy", None)
    policy_cls = POLICY_REGISTRY.get(policy_type)
    supported = tuple(getattr(policy_cls, "pipelines", ()) or ())
    if not supported:
        raise ConfigError(f"policy '{policy_type}' declares no pipelines: its class must set `pipelines`, e.g. "
                          f"pipelines = ('serial_onpolicy',) (or ('serial_offpolicy',) for a replay-based policy)")
    user_cfg = _drop_retired_keys(user_cfg, policy_type, policy_cls)
    pipeline_type = _named_type(user_cfg.get("pipeline") or {}, "pipeline", supported[0])
    pipeline_cls = PIPELINE_REGISTRY.get(pipeline_type)
    if pipeline_type not in supported:
        raise ConfigError(
            f"policy '{policy_type}' does not run on pipeline '{pipeline_type}': it supports "
            f"{', '.join(supported)}; set pipeline.type to one of them or remove it"
        )
    if environ is not None:
        user_cfg = _from_environment(user_cfg, pipeline_cls, environ)
    schema = deep_merge(BASE_CONFIG, {"policy": {**policy_cls.default_config, "type": policy_type},
                                      "pipeline": {**pipeline_cls.default_config, "type": pipeline_type}})
    types = dict(_BASE["config_types"])
    for section, owner in (("policy", policy_cls), ("pipeline", pipeline_cls)):
        types.update({f"{section}.{key}": kind for key, kind in getattr(owner, "config_types", {}).items()})
    validate_keys_and_types(user_cfg, schema, types=types)
    cfg = deep_merge(schema, user_cfg)
    ranges: dict[str, Any] = dict(BASE_RANGES)
    choices: dict[str, Any] = dict(_BASE["config_choices"])
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


def _drop_retired_keys(user_cfg: EasyDict, policy_type: str, policy_cls: type) -> EasyDict:
    # Keys a policy no longer declares but older run directories hold (sac's ACE keys, now sac_ace's): dropped
    # where their value changes nothing (None: any value does), so old runs still load and resume.
    retired = getattr(policy_cls, "retired_fields", {})
    section = user_cfg.get("policy") or {}
    if not retired or not any(key in section for key in retired):
        return user_cfg
    for key, harmless in retired.items():
        if key in section and harmless is not None and section[key] != harmless:
            raise ConfigError(f"policy.{key}={section[key]!r} is no longer a key of policy '{policy_type}': "
                              f"{getattr(policy_cls, 'retired_hint', 'remove it')}")
    cfg = EasyDict(to_plain(user_cfg))
    cfg.policy = {key: value for key, value in section.items() if key not in retired}
    return cfg


def _from_environment(user_cfg: EasyDict, pipeline_cls: type, environ: Mapping[str, str]) -> EasyDict:
    derived = pipeline_cls.from_environment(environ)
    given = user_cfg.get("pipeline") or {}
    for key, value in derived.items():
        before = given.get(key, pipeline_cls.default_config.get(key))
        if before != value and environ.get("RANK", "0") == "0":
            log.info(f"pipeline.{key} is {before} in the config; the launcher's environment makes it {value}")
    return apply_overrides(user_cfg, [(f"pipeline.{key}", value) for key, value in derived.items()])


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

def config_differences(reference: Mapping[str, Any], other: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys of ``reference`` whose values ``other`` does not hold (keys only ``other`` has, such as
    defaults added by a later zoo version, are not differences)."""
    found = []
    for key, value in reference.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and isinstance(other.get(key), Mapping) and value:
            found += config_differences(value, other[key], f"{dotted}.")
        elif key not in other or to_plain(other[key]) != to_plain(value):
            found.append(dotted)
    if not prefix and isinstance(reference.get("policy"), Mapping) and reference["policy"].get("type"):
        try:  # a retired key (see _drop_retired_keys) is gone from the newer config, which is no difference
            retired = getattr(POLICY_REGISTRY.get(reference["policy"]["type"]), "retired_fields", {})
        except ZooError:
            retired = {}
        found = [key for key in found if key.removeprefix("policy.") not in retired or key.count(".") != 1]
    return found


def check_frozen(saved: EasyDict, new: EasyDict, run_path: Path) -> None:
    """Refuse (ConfigError) a resumed config ``new`` that changes a key a resume may not change."""
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
                f"zoo run --config {run_path / 'config.yaml'} --set ..."
            )
