"""The ``tune`` section of a config: the search space, the objective and the pruner, parsed and checked.

A config's top-level ``tune`` section (ignored by ``zoo run``) says what ``zoo tune`` searches::

    tune = dict(
        space={"policy.learning_rate": dict(log_uniform=[1e-5, 1e-2]),
               "policy.gae_lambda": dict(uniform=[0.8, 1.0]),
               "policy.epochs": dict(int=[1, 20]),
               "policy.activation": dict(categorical=["tanh", "relu"])},
        metric="eval_return_mean", direction="maximize", objective="best",   # or "final"
        seeds=1, pruner="median", budget=None, sampler="tpe",
    )

Every key of the space must be a key the resolved config has (not a section), and every value a distribution can
take must be one the config accepts: each bound (and each category) is put through zoo's own config validation, so
a learning rate above its declared range or a float for an integer key is refused here, before any trial runs.
Without a ``space``, the built-in policies have a default one (``DEFAULT_SPACES``). Nothing here imports optuna:
a ``Parameter`` asks the trial it is given for its value.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import to_plain
from ..config.resolve import resolve_config
from ..errors import ConfigError, ZooError, first_line

DISTRIBUTIONS = ("uniform", "log_uniform", "int", "log_int", "categorical")
PRUNERS = ("median", "percentile", "successive_halving", "hyperband", "threshold", "none")
SAMPLERS = ("tpe", "random")
DIRECTIONS = ("maximize", "minimize")
OBJECTIVES = ("best", "final")
# The keys every pipeline's metrics rows carry (zoo.pipelines.loop.TrainingLoop._row) that make an objective;
# a policy's own update metrics (losses, KL) differ from one algorithm to the next.
METRICS = ("eval_return_mean", "eval_return_std", "episode_return_mean", "episode_length_mean", "sps")
# Keys that say where and under which name a trial runs: zoo tune sets them itself.
NOT_TUNABLE = ("exp_name", "runs_dir", "import_names", "import_paths", "tune")
SETTINGS = {"space": None, "metric": "eval_return_mean", "direction": "maximize", "objective": "best", "seeds": 1,
            "pruner": "median", "budget": None, "sampler": "tpe"}


def _log(low: float, high: float) -> dict[str, list[float]]:
    return {"log_uniform": [low, high]}


_ON_POLICY = {
    "policy.learning_rate": _log(1e-5, 1e-2),
    "policy.gamma": {"uniform": [0.9, 0.9999]},
    "policy.gae_lambda": {"uniform": [0.8, 1.0]},
    "policy.entropy_coef": {"uniform": [0.0, 0.02]},
    "policy.max_grad_norm": {"uniform": [0.3, 5.0]},
    "policy.activation": {"categorical": ["tanh", "relu"]},
}
_PPO = {**_ON_POLICY, "policy.clip_ratio": {"uniform": [0.1, 0.4]}, "policy.epochs": {"int": [1, 20]}}
_SAC = {
    "policy.actor_learning_rate": _log(1e-5, 3e-3),
    "policy.critic_learning_rate": _log(1e-5, 3e-3),
    "policy.gamma": {"uniform": [0.9, 0.9999]},
    "policy.tau": _log(1e-3, 0.05),
    "policy.batch_size": {"categorical": [64, 128, 256, 512]},
}
# The search space of a built-in policy whose config has no ``tune.space``: the hyper-parameters rl-baselines3-zoo's
# samplers vary for the same algorithms, minus those that change the rollout's size (the pruner compares trials
# at equal env steps) or the network's (a categorical of lists is allowed in a config's own space).
DEFAULT_SPACES: dict[str, dict[str, dict[str, list[Any]]]] = {
    "ppo": _PPO,
    "dppo": _PPO,
    "a2c": {**_ON_POLICY, "policy.value_coef": {"uniform": [0.2, 1.0]}},
    "impala": {
        "policy.learning_rate": _log(1e-5, 3e-3),
        "policy.gamma": {"uniform": [0.9, 0.9999]},
        "policy.entropy_coef": {"uniform": [0.0, 0.05]},
        "policy.vtrace_lambda": {"uniform": [0.9, 1.0]},
        "policy.value_coef": {"uniform": [0.2, 1.0]},
        "policy.max_grad_norm": {"uniform": [1.0, 80.0]},
    },
    "sac": _SAC,
    "sac_ace": _SAC,
    # rl-zoo's TD3 sampler also varies the exploration noise's std (uniform in [0, 1], in [-1, 1] action units).
    "td3": {**_SAC, "policy.exploration_noise": {"uniform": [0.0, 1.0]}},
    "dqn": {"policy.learning_rate": _log(1e-5, 1e-2), "policy.gamma": {"uniform": [0.9, 0.9999]},
            "policy.batch_size": {"categorical": [32, 64, 128, 256]},
            "policy.exploration_fraction": {"uniform": [0.0, 0.5]},
            "policy.exploration_final_eps": {"uniform": [0.0, 0.2]},
            "policy.target_update_interval": {"categorical": [1, 10, 100, 1000, 5000, 10000]},
            "policy.nstep": {"categorical": [1, 3, 5]}},
}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class Parameter:
    """One key of the search space: its distribution (``kind``), bounds or choices. Categorical choices that are
    not plain scalars (lists, such as ``hidden_sizes``) travel through Optuna as their JSON text (``encoded``)."""

    key: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    choices: tuple[Any, ...] = ()
    encoded: bool = False

    def suggest(self, trial: Any) -> Any:
        """Ask an Optuna trial for this parameter's value (what Optuna stores)."""
        if self.kind in ("uniform", "log_uniform"):
            return trial.suggest_float(self.key, float(self.low), float(self.high), log=self.kind == "log_uniform")
        if self.kind in ("int", "log_int"):
            return trial.suggest_int(self.key, int(self.low), int(self.high), log=self.kind == "log_int")
        return trial.suggest_categorical(self.key, list(self.stored_choices()))

    def stored_choices(self) -> tuple[Any, ...]:
        """The choices as Optuna stores them (JSON text when ``encoded``)."""
        return tuple(json.dumps(choice) for choice in self.choices) if self.encoded else self.choices

    def config_value(self, stored: Any) -> Any:
        """The config value of what Optuna stored for this parameter."""
        return json.loads(stored) if self.encoded else stored

    def accepts(self, stored: Any) -> bool:
        """Whether ``stored`` (a value read from a study, which may come from anyone) is one this parameter's
        distribution can yield: a number of the right type within the bounds, or exactly one of the choices."""
        if self.kind in ("uniform", "log_uniform", "int", "log_int"):
            whole = self.kind in ("int", "log_int")
            if not _number(stored) or (whole and not isinstance(stored, int)) or not math.isfinite(stored):
                return False
            return self.low <= stored <= self.high
        # Type and value both: True == 1 == 1.0 in Python, but they are different config values.
        return any(type(choice) is type(stored) and choice == stored for choice in self.stored_choices())

    def probes(self) -> list[Any]:
        """Values that must all be valid config values: the bounds (as the type the distribution yields) or every
        choice."""
        if self.kind in ("uniform", "log_uniform"):
            return [float(self.low), float(self.high)]
        if self.kind in ("int", "log_int"):
            return [int(self.low), int(self.high)]
        return list(self.choices)

    def describe(self) -> str:
        """``log_uniform=[1e-05, 0.01]``: the distribution as a config writes it."""
        values = list(self.choices) if self.kind == "categorical" else [self.low, self.high]
        return f"{self.kind}={values}"


@dataclass(frozen=True)
class TuneSettings:
    """The parsed ``tune`` section (see the module docstring); ``section()`` is its normalised form, which a
    study records (its hash tells the configs of two studies apart)."""

    parameters: tuple[Parameter, ...]
    metric: str
    direction: str
    objective: str
    seeds: int
    pruner: str
    pruner_kwargs: dict[str, Any]
    budget: int | None
    sampler: str

    def section(self) -> dict[str, Any]:
        """The normalised ``tune`` section: every setting, the space in full."""
        return {
            "space": {p.key: {p.kind: list(p.choices) if p.kind == "categorical" else [p.low, p.high]}
                      for p in self.parameters},
            "metric": self.metric, "direction": self.direction, "objective": self.objective, "seeds": self.seeds,
            "pruner": {self.pruner: dict(self.pruner_kwargs)} if self.pruner_kwargs else self.pruner,
            "budget": self.budget, "sampler": self.sampler,
        }

    def parameter(self, key: str) -> Parameter | None:
        """The parameter of ``key``, or None."""
        return next((p for p in self.parameters if p.key == key), None)

    def config_values(self, stored: Mapping[str, Any]) -> dict[str, Any]:
        """Config values (dotted key -> value) of the parameters Optuna stored for a trial: exactly the space's
        keys, each value checked (``accepts``); anything else the trial holds (a ``runs_dir``, a ``seed``) is left
        out. A missing parameter or a value outside its distribution is one ZooError line: a study's rows are
        data, and a trial run with them would not be a trial of this space."""
        values = {}
        for parameter in self.parameters:
            if parameter.key not in stored:
                raise ZooError(f"the trial has no value for {parameter.key} (not a trial of this search space)")
            value = stored[parameter.key]
            if not parameter.accepts(value):
                raise ZooError(f"the trial's {parameter.key} = {value!r} is outside the search space "
                               f"({parameter.describe()})")
            values[parameter.key] = parameter.config_value(value)
        return values


def _close(word: str, options: tuple[str, ...] | list[str]) -> str:
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'?" if match else f"choose from {', '.join(options)}"


def _choice(section: Mapping[str, Any], name: str, options: tuple[str, ...]) -> str:
    value = section[name]
    if not isinstance(value, str) or value not in options:
        hint = _close(value, options) if isinstance(value, str) else f"choose from {', '.join(options)}"
        raise ConfigError(f"tune.{name} = {value!r} is not one of {', '.join(options)}: {hint}")
    return value


def _parameter(key: Any, spec: Any) -> Parameter:
    where = f"tune.space[{key!r}]"
    if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"{where}: a search-space key must be a dotted config key such as 'policy.learning_rate'")
    example = "e.g. dict(log_uniform=[1e-5, 1e-2])"
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise ConfigError(f"{where} must be one distribution, {example}; got {spec!r}")
    ((kind, values),) = spec.items()
    if kind not in DISTRIBUTIONS:
        raise ConfigError(f"{where}: unknown distribution '{kind}': {_close(str(kind), DISTRIBUTIONS)}")
    if kind == "categorical":
        if not isinstance(values, list | tuple) or len(values) < 2:
            raise ConfigError(f"{where}: categorical needs a list of at least two values, got {values!r}")
        plain = [to_plain(value) for value in values]
        texts = [json.dumps(value, sort_keys=True) for value in plain]
        if len(set(texts)) != len(texts):
            raise ConfigError(f"{where}: categorical {plain!r} repeats a value: give each choice once")
        if any(isinstance(value, float) and not math.isfinite(value) for value in plain):
            raise ConfigError(f"{where}: categorical {plain!r} holds a value that is not finite")
        encoded = any(not (value is None or isinstance(value, bool | int | float | str)) for value in plain)
        return Parameter(key, kind, choices=tuple(plain), encoded=encoded)
    if not isinstance(values, list | tuple) or len(values) != 2 or not all(_number(v) for v in values):
        raise ConfigError(f"{where}: {kind} needs [low, high] (two numbers), got {values!r}")
    low, high = values
    if not all(math.isfinite(v) for v in values):
        raise ConfigError(f"{where}: {kind}={list(values)} must have finite bounds")
    if kind in ("int", "log_int") and not all(isinstance(v, int) for v in values):
        raise ConfigError(f"{where}: {kind}={list(values)} needs whole-number bounds (write them without a point)")
    if not low < high:
        raise ConfigError(f"{where}: {kind}={list(values)} is an empty range: low must be below high (a fixed "
                          f"value goes in the config itself, or --set)")
    if kind.startswith("log") and low <= 0:
        raise ConfigError(f"{where}: {kind}={list(values)} needs a positive low bound (a log scale never reaches "
                          f"{low}): use uniform, or a low such as 1e-6")
    return Parameter(key, kind, low, high)


def _integer_setting(section: Mapping[str, Any], name: str, allow_none: bool) -> int | None:
    value = section[name]
    if value is None and allow_none:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"tune.{name} must be a whole number of at least 1{' or None' if allow_none else ''}, "
                          f"got {value!r}")
    return value


def _pruner(value: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(value, Mapping) and len(value) == 1:
        ((name, kwargs),) = value.items()
        if not isinstance(kwargs, Mapping):
            raise ConfigError(f"tune.pruner = {value!r}: the options of a pruner are a mapping, e.g. "
                              f"dict(median=dict(n_startup_trials=5, n_warmup_steps=0))")
        value, kwargs = name, dict(to_plain(kwargs))
    else:
        kwargs = {}
    if not isinstance(value, str) or value not in PRUNERS:
        hint = _close(value, PRUNERS) if isinstance(value, str) else f"choose from {', '.join(PRUNERS)}"
        raise ConfigError(f"tune.pruner = {value!r} is not one of {', '.join(PRUNERS)} (or dict(NAME=dict(...)) "
                          f"with that pruner's options): {hint}")
    return value, kwargs


def parse_settings(section: Any, policy_type: str, seeds: int | None = None) -> TuneSettings:
    """The ``tune`` section of a resolved config, parsed (one ConfigError line per problem). ``seeds`` (from the
    command line) replaces ``tune.seeds``; without ``space``, the policy's default space is used."""
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"config section 'tune' must be a mapping, got {section!r}: write tune=dict(space=...)")
    unknown = [key for key in section if key not in SETTINGS]
    if unknown:
        raise ConfigError(f"unknown key 'tune.{unknown[0]}': {_close(str(unknown[0]), list(SETTINGS))}")
    merged = {**SETTINGS, **{key: value for key, value in section.items()}}
    if seeds is not None:
        merged["seeds"] = seeds
    space = merged["space"]
    if space is None or (isinstance(space, Mapping) and not space):
        if policy_type not in DEFAULT_SPACES:
            raise ConfigError(f"policy '{policy_type}' has no default search space: give one in the config, "
                              f"tune=dict(space={{'policy.learning_rate': dict(log_uniform=[1e-5, 1e-2])}})")
        space = DEFAULT_SPACES[policy_type]
    if not isinstance(space, Mapping):
        raise ConfigError(f"tune.space must be a mapping of config keys to distributions, got {space!r}")
    metric = merged["metric"]
    if not isinstance(metric, str) or metric not in METRICS:
        hint = _close(metric, METRICS) if isinstance(metric, str) else f"choose from {', '.join(METRICS)}"
        raise ConfigError(f"tune.metric = {metric!r} is not a metric every pipeline writes ({', '.join(METRICS)}): "
                          f"{hint}")
    pruner, pruner_kwargs = _pruner(merged["pruner"])
    return TuneSettings(
        parameters=tuple(_parameter(key, spec) for key, spec in space.items()),
        metric=metric, direction=_choice(merged, "direction", DIRECTIONS),
        objective=_choice(merged, "objective", OBJECTIVES), seeds=int(_integer_setting(merged, "seeds", False)),
        pruner=pruner, pruner_kwargs=pruner_kwargs, budget=_integer_setting(merged, "budget", True),
        sampler=_choice(merged, "sampler", SAMPLERS),
    )


def _leaf_keys(cfg: Mapping[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in cfg.items():
        dotted = f"{prefix}{key}"
        keys += _leaf_keys(value, f"{dotted}.") if isinstance(value, Mapping) and value else [dotted]
    return keys


def _lookup(cfg: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _check_parameter(parameter: Parameter, cfg: Mapping[str, Any], config_dir: Path | None) -> None:
    where = f"tune.space['{parameter.key}']"
    if parameter.key.split(".")[0] in NOT_TUNABLE:
        raise ConfigError(f"{where}: {parameter.key} is set by zoo tune itself (each trial's name and place): "
                          f"tune other keys")
    found, current = _lookup(cfg, parameter.key)
    if not found:
        raise ConfigError(f"{where}: the config has no key '{parameter.key}': "
                          f"{_close(parameter.key, _leaf_keys(cfg))} (see zoo config POLICY)")
    if isinstance(current, Mapping):
        raise ConfigError(f"{where}: '{parameter.key}' is a section, not a value: tune one of its keys")
    if parameter.kind != "categorical":
        if current is not None and not _number(current):
            raise ConfigError(f"{where}: {parameter.key} holds {type(current).__name__} values ({current!r}), "
                              f"not numbers: a {parameter.kind} distribution needs a numeric key; use categorical")
        if parameter.kind in ("uniform", "log_uniform") and isinstance(current, int):
            raise ConfigError(f"{where}: {parameter.key} is a whole number ({current!r}): use int=[low, high] "
                              f"(or log_int)")
    for value in parameter.probes():
        try:
            resolve_config(cfg, [(parameter.key, value)], config_dir)
        except ZooError as exc:
            raise ConfigError(f"{where} = {parameter.describe()} reaches {value!r}, which the config refuses: "
                              f"{first_line(exc, 200)}") from None


def check_settings(settings: TuneSettings, cfg: Mapping[str, Any], config_dir: Path | None = None) -> None:
    """Check ``settings`` against the resolved config ``cfg`` (see the module docstring): every parameter's key and
    values, the budget, and that the metric and the pruner have the evaluations they need."""
    for parameter in settings.parameters:
        _check_parameter(parameter, cfg, config_dir)
    if settings.budget is not None:
        try:
            resolve_config(cfg, [("pipeline.max_env_steps", settings.budget)], config_dir)
        except ZooError as exc:
            raise ConfigError(f"tune.budget = {settings.budget}: {first_line(exc, 200)}") from None
    if not cfg["pipeline"].get("eval_every"):
        fix = "set pipeline.eval_every (e.g. --set pipeline.eval_every=10)"
        if settings.metric.startswith("eval_"):
            raise ConfigError(f"tune.metric '{settings.metric}' comes from evaluations, but pipeline.eval_every is "
                              f"0: {fix} or tune.metric='episode_return_mean'")
        if settings.pruner != "none":
            raise ConfigError(f"tune.pruner '{settings.pruner}' decides at each evaluation, but pipeline.eval_every "
                              f"is 0: {fix} or tune.pruner='none'")


def trial_overrides(settings: TuneSettings, values: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The ``(key, value)`` overrides that make a trial's config: its parameters' values and the budget."""
    overrides = [(key, value) for key, value in values.items()]
    if settings.budget is not None:
        overrides.append(("pipeline.max_env_steps", settings.budget))
    return overrides
