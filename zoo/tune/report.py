"""What a study found: the trials table (``--show``), the best trial's config (``--best-config``) and a figure of
the optimisation history and the parameters' importances (``--out``).

A study may come from anyone (a shared database): its base config and rows are data. Reading one imports nothing
its base config names (``import_names``, an env id's ``module:``) unless ``trust_imports`` (``zoo tune
--trust-imports``), as ``zoo eval`` does for run directories (``zoo.run.load``); the best trial's parameters are
only the space's, each checked against its distribution.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..bench.figures import pyplot, save_figure
from ..config import dump_config, to_plain
from ..config.resolve import resolve_config
from ..errors import ConfigError, ZooError, first_line
from ..run.state_files import atomic_write_text
from .space import TuneSettings, parse_settings
from .study import BASE_CONFIG_ATTR, optuna_module
from .trials import ERROR_ATTR, RUN_DIR_ATTR


def _number(value: Any) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def study_settings(study: Any) -> tuple[dict[str, Any], TuneSettings]:
    """The base config a study was created from and its parsed ``tune`` section; one line for a study that zoo
    tune did not create."""
    base = study.user_attrs.get(BASE_CONFIG_ATTR)
    if not isinstance(base, dict):
        raise ZooError(f"study '{study.study_name}' was not created by zoo tune (it records no base config)")
    policy = base.get("policy")
    if not isinstance(policy, dict) or not isinstance(policy.get("type"), str):
        raise ZooError(f"study '{study.study_name}' records a base config without policy.type: it was not created "
                       f"by zoo tune, or its database was damaged")
    return base, parse_settings(base.get("tune"), policy["type"])


def _params(trial: Any, settings: TuneSettings) -> str:
    try:
        values = settings.config_values(trial.params)
    except ZooError:  # shown as stored: a table runs nothing
        values = dict(trial.params)
    return " ".join(f"{key}={_number(value) if not isinstance(value, list) else value}"
                    for key, value in values.items()) or "-"


def best_trial(study: Any) -> Any | None:
    """The best completed trial, or None while there is none."""
    state = optuna_module().trial.TrialState
    if not study.get_trials(deepcopy=False, states=(state.COMPLETE,)):
        return None
    return study.best_trial


def table(study: Any) -> str:
    """Every trial (number, state, value, parameters, run directory) and the best parameters."""
    _, settings = study_settings(study)
    trials = study.get_trials(deepcopy=False)
    lines = [f"study {study.study_name}: {settings.direction} {settings.metric} ({settings.objective} per run"
             f"{f', mean of {settings.seeds} seeds' if settings.seeds > 1 else ''})",
             f"{'trial':>5} {'state':>8} {'value':>10}  params  run_dir"]
    for trial in trials:
        where = trial.user_attrs.get(RUN_DIR_ATTR, "-")
        error = trial.user_attrs.get(ERROR_ATTR)
        value = "-" if trial.value is None else _number(trial.value)
        lines.append(f"{trial.number:>5} {trial.state.name:>8} {value:>10}  {_params(trial, settings)}  {where}"
                     f"{f'  ({error})' if error else ''}")
    counts: dict[str, int] = {}
    for trial in trials:
        counts[trial.state.name.lower()] = counts.get(trial.state.name.lower(), 0) + 1
    lines.append(", ".join(f"{count} {name}" for name, count in counts.items()) or "no trials yet")
    best = best_trial(study)
    if best is None:
        lines.append("best: none yet (no completed trial)")
    else:
        lines.append(f"best: trial {best.number} {settings.metric} {_number(best.value)}: {_params(best, settings)}")
    return "\n".join(lines)


def _refuse_imports(study: Any, base: dict[str, Any]) -> None:
    names = base.get("import_names")
    env = base.get("env")
    env_id = env.get("id") if isinstance(env, dict) else None
    if names:
        what = f"names import_names {names!r}"
    elif isinstance(env_id, str) and ":" in env_id:
        what = f"has the env id '{env_id}', whose module gymnasium would import"
    else:
        return
    raise ConfigError(f"the base config of study '{study.study_name}' {what}: zoo imports no code a study names "
                      f"(it could come from anyone); if you trust this study, pass --trust-imports")


def write_best_config(study: Any, path: str | Path, trust_imports: bool = False) -> Path:
    """Write the study's base config with the best trial's parameters applied (YAML, or JSON for ``.json``), as
    ``zoo run --config PATH`` runs it; the run is named ``<study>_best``. Without ``trust_imports``, a base config
    that needs code imported is refused in one line (see the module docstring)."""
    path = Path(path)
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise ConfigError(f"--best-config '{path}': write a .yaml (or .json) file, which zoo run --config reads")
    if not path.parent.is_dir():
        raise ConfigError(f"cannot write '{path}': the folder '{path.parent}' does not exist")
    base, settings = study_settings(study)
    if not trust_imports:
        _refuse_imports(study, base)
    best = best_trial(study)
    if best is None:
        raise ZooError(f"study '{study.study_name}' has no completed trial yet: run zoo tune first")
    try:
        values = settings.config_values(best.params)
    except ZooError as exc:
        raise ZooError(f"the best trial {best.number} of study '{study.study_name}': {exc}") from None
    overrides = [*values.items(), ("exp_name", f"{study.study_name}_best")]
    try:
        # Resolved here, as zoo run will resolve it: what is written runs as it is.
        cfg = resolve_config(base, overrides, trusted=trust_imports)
    except ZooError as exc:
        raise ZooError(f"the best config of study '{study.study_name}' does not resolve on this machine: "
                       f"{first_line(exc, 200)}") from None
    try:
        if path.suffix.lower() == ".json":
            atomic_write_text(path, json.dumps(to_plain(cfg), indent=1) + "\n")
        else:
            dump_config(cfg, path)
    except OSError as exc:  # the writers leave no temporary file behind
        raise ZooError(f"cannot write '{path}' ({exc.strerror or first_line(exc)}): free space or choose another "
                       f"--best-config") from None
    return path


def _importances(study: Any) -> tuple[dict[str, float], str]:
    """The parameters' importances (fANOVA when scikit-learn is installed, else PED-ANOVA, which needs nothing
    more) and the evaluator's name; empty with the reason when the study has too few trials."""
    importance = optuna_module().importance
    try:
        import sklearn  # noqa: F401

        evaluator, name = importance.FanovaImportanceEvaluator(seed=0), "fANOVA"
    except ImportError:
        evaluator, name = importance.PedAnovaImportanceEvaluator(), "PED-ANOVA"
    try:
        return importance.get_param_importances(study, evaluator=evaluator), name
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        return {}, first_line(exc, 80)


def plot(study: Any, out: str | Path) -> Path:
    """Draw the optimisation history (each completed trial's value and the best so far) and the parameters'
    importances into ``out`` (PNG, SVG or PDF by its suffix)."""
    out = Path(out)
    if not out.parent.is_dir():
        raise ConfigError(f"cannot write '{out}': the folder '{out.parent}' does not exist")
    _, settings = study_settings(study)
    state = optuna_module().trial.TrialState
    done = [t for t in study.get_trials(deepcopy=False, states=(state.COMPLETE,)) if t.value is not None]
    plt = pyplot("zoo tune --out needs matplotlib: pip install 'zoo-rl[tune]'")
    figure, (history, bars) = plt.subplots(1, 2, figsize=(12, 4.5))
    numbers, values = [t.number for t in done], [t.value for t in done]
    history.scatter(numbers, values, s=18, label="trial")
    best, running = [], None
    for value in values:
        better = running is None or (value > running if settings.direction == "maximize" else value < running)
        running = value if better else running
        best.append(running)
    history.step(numbers, best, where="post", color="C3", label="best so far")
    history.set(xlabel="trial", ylabel=settings.metric, title=f"{study.study_name}: optimisation history")
    history.legend()
    importances, evaluator = _importances(study) if len(done) >= 2 else ({}, "needs two completed trials")
    if importances:
        names = list(importances)[::-1]
        bars.barh(names, [importances[name] for name in names])
        bars.set(xlabel=f"importance ({evaluator})", title="parameter importances")
    else:
        bars.text(0.5, 0.5, f"no importances: {evaluator}", ha="center", va="center", transform=bars.transAxes)
        bars.set_axis_off()
    figure.tight_layout()
    save_figure(figure, out)
    return out
