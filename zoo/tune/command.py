"""``zoo tune``: its arguments (``add_parser``) and what it does with them (``main``).

Searching: ``zoo tune --config CFG [--trials N] [--jobs J] [--storage URL] [--study NAME] [--set KEY=VALUE ...]
[--seeds K]``. Everything is checked before anything is written (the config, its ``tune`` section against the
resolved config, the pruner's options, the study name, the runs directory, the storage, the study's own config):
a problem is one ZooError line and not even the study database is created. Reading a study: ``--show STUDY``,
``--best-config FILE --study STUDY``, ``--out FILE.png --study STUDY`` (any of them together).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ZooError
from ..lifetime import MAX_JOBS, MAX_SEEDS

# The rest is imported when the command runs: ``zoo``'s parser imports this module for every command, and the
# config and run packages bring torch.

DEFAULT_TRIALS = 20
CALLBACKS_MODULE = "zoo.tune.trial_callbacks"


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add ``tune`` to ``zoo``'s sub-commands (argparse's ``add_subparsers()`` object); the parser added."""
    tune = commands.add_parser("tune", help="hyper-parameter search (Optuna): each trial an ordinary run directory")
    tune.add_argument("--config", help="the base config; its `tune` section holds the search space and objective")
    tune.add_argument("--trials", type=int, default=None,
                      help=f"completed + pruned trials the study ends with (default {DEFAULT_TRIALS})")
    tune.add_argument("--jobs", type=int, default=None, help="trials at once (processes; default 1)")
    tune.add_argument("--storage", metavar="URL",
                      help="an Optuna RDB URL (default sqlite:///RUNS_DIR/STUDY/study.db; PostgreSQL or MySQL for "
                           "several machines)")
    tune.add_argument("--study", metavar="NAME", help="the study's name (default: the config's exp_name)")
    tune.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="override a key of the base config: pipeline.max_env_steps=50000")
    tune.add_argument("--seeds", type=int, default=None,
                      help="seeds per trial (trial_<k>/seed_<s>/; the objective is their mean; default tune.seeds)")
    tune.add_argument("--runs-dir", default=None,
                      help="where the study's folder is (default: the config's runs_dir, else runs)")
    tune.add_argument("--show", metavar="STUDY", help="print the study's trials and its best parameters")
    tune.add_argument("--best-config", metavar="FILE",
                      help="write the base config with the best parameters (.yaml or .json) for zoo run --config")
    tune.add_argument("--out", metavar="FILE.png",
                      help="draw the optimisation history and parameter importances (matplotlib)")
    tune.add_argument("--trust-imports", action="store_true",
                      help="--best-config: import the modules the study's base config names (import_names, an env "
                           "id's module:): only for studies you trust")
    tune.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return tune


def main(args: argparse.Namespace) -> int:
    """Run ``zoo tune`` with parsed ``args``; the exit code. Bad input raises ZooError (one line: the CLI prints
    it and exits with 2)."""
    from .study import optuna_module

    optuna_module()
    if args.show or args.best_config or args.out:
        return _read(args)
    if not args.config:
        raise ZooError("zoo tune needs --config FILE (to search), or --show STUDY, --best-config FILE --study STUDY, "
                       "--out FILE.png --study STUDY (to read a study)")
    return _search(args)


def _at_least_one(value: int | None, flag: str, default: int, most: int | None = None, what: str = "") -> int:
    if value is None:
        return default
    if value < 1 or (most is not None and value > most):
        bound = "at least 1" if most is None else f"at least 1 and at most {most}{what}"
        raise ConfigError(f"{flag} must be {bound}, got {value}")
    return value


def _search(args: argparse.Namespace) -> int:
    from ..config import dump_config, load_config_file, to_plain
    from ..config.checks import apply_overrides
    from ..config.resolve import resolve_config
    from ..run.run_dir import check_runs_dir
    from .space import check_settings, parse_settings
    from .study import check_study_name, default_storage, make_pruner, open_storage, open_study
    from .trials import BASE_CONFIG_FILE, Tuner

    trials = _at_least_one(args.trials, "--trials", DEFAULT_TRIALS)
    jobs = _at_least_one(args.jobs, "--jobs", 1, MAX_JOBS, " (trials at once, each a process)")
    seeds_flag = _at_least_one(args.seeds, "--seeds", 0, MAX_SEEDS, " (runs per trial)") or None
    overrides: list[Any] = list(args.set) + ([("runs_dir", args.runs_dir)] if args.runs_dir else [])
    config_dir = Path(args.config).parent
    cfg = resolve_config(load_config_file(args.config), overrides, config_dir)
    settings = parse_settings(cfg.get("tune"), cfg.policy.type, seeds_flag)
    check_settings(settings, cfg, config_dir)
    make_pruner(settings)  # its options, checked before the study exists
    base = apply_overrides(cfg, [("tune", settings.section())])
    name = check_study_name(args.study or cfg.exp_name)
    study_dir = check_runs_dir(cfg.runs_dir).resolve() / name
    url = args.storage or default_storage(cfg.runs_dir, name)
    created = [folder for folder in (*reversed(study_dir.parents), study_dir) if not folder.exists()]
    try:
        if args.storage is None:
            study_dir.mkdir(parents=True, exist_ok=True)  # the default database lives in the study's folder
        storage = open_storage(url, create=True)
        study = open_study(storage, name, url, settings, base)
    except BaseException:
        for folder in reversed(created):  # a refusal leaves nothing behind
            shutil.rmtree(folder, ignore_errors=True)
        raise
    study_dir.mkdir(parents=True, exist_ok=True)
    # What every trial starts from: the base config with the budget, and the callbacks that report and prune.
    names = [*to_plain(base.import_names or []), CALLBACKS_MODULE]
    trial_base = apply_overrides(base, [("import_names", list(dict.fromkeys(names)))])
    if settings.budget is not None:
        trial_base = apply_overrides(trial_base, [("pipeline.max_env_steps", settings.budget)])
    try:
        dump_config(trial_base, study_dir / BASE_CONFIG_FILE)  # atomic: no temporary file is left
    except OSError as exc:
        raise ZooError(f"cannot write '{study_dir / BASE_CONFIG_FILE}' ({exc.strerror or exc}): free space or make "
                       f"the folder writable, then run the same command again") from None
    print(f"zoo tune: study '{name}' ({settings.direction} {settings.metric}, {len(settings.parameters)} parameters, "
          f"{settings.pruner} pruner), trials in {study_dir}/trial_<k>", flush=True)
    seeds = [int(cfg.seed) + offset for offset in range(settings.seeds)]
    code = Tuner(study, storage, url, settings, study_dir, trials, jobs, seeds).run()
    from .report import table

    print(table(study))
    return code


def _read(args: argparse.Namespace) -> int:
    from ..config import load_config_file
    from ..config.resolve import resolve_config
    from .report import plot, table, write_best_config
    from .study import check_study_name, default_storage, load_study, open_storage

    searching = [flag for flag, value in (("--trials", args.trials), ("--jobs", args.jobs), ("--seeds", args.seeds),
                                          ("--set", args.set)) if value]
    if searching:
        raise ConfigError(f"{searching[0]} goes with a search (zoo tune --config FILE), not with --show, "
                          f"--best-config or --out")
    if args.show and args.study and args.show != args.study:
        raise ConfigError(f"--show {args.show} and --study {args.study} name two studies: give one")
    runs_dir, name = args.runs_dir, args.show or args.study
    if args.config:
        cfg = resolve_config(load_config_file(args.config), [], Path(args.config).parent)
        runs_dir, name = runs_dir or cfg.runs_dir, name or cfg.exp_name
    if not name:
        raise ConfigError("which study? --best-config and --out need --study STUDY (or --config FILE: its exp_name)")
    name = check_study_name(name)
    url = args.storage or default_storage(runs_dir or "runs", name)
    study = load_study(open_storage(url, create=False), name, url)
    if args.show:
        print(table(study))
    if args.best_config:
        path = write_best_config(study, args.best_config, getattr(args, "trust_imports", False))
        print(f"wrote {path}: train it with zoo run --config {path}")
    if args.out:
        print(f"wrote {plot(study, args.out)}")
    return 0
