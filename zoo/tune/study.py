"""The study's storage: opening an Optuna RDB (SQLite by default), creating or loading a study, and telling the
study of another config apart.

The default storage is ``sqlite:///<runs_dir>/<study>/study.db``; ``--storage`` takes any Optuna RDB URL
(``postgresql://user:pass@host/db``, ``mysql+pymysql://...``) so that several machines share one study. Problems
(an unknown dialect, a missing driver, an unreachable server, a file that is not a database) are one ZooError line
with the password hidden; nothing is written before the storage has opened. A study records the resolved config it
was created from and the hash of that config without the keys that only say where and how one machine runs it
(``MACHINE_KEYS``), in its user attributes: a ``zoo tune`` of another config under the same study name is refused,
naming the first key that differs.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import to_plain
from ..config.resolve import config_differences
from ..errors import ConfigError, ZooError, first_line
from .space import TuneSettings

STUDY_DB = "study.db"
BASE_CONFIG_ATTR = "zoo_base_config"
HASH_ATTR = "zoo_base_config_hash"
# Keys that say where and how one machine runs the study, not what it searches: they may differ between the
# machines (and sessions) of one study.
MACHINE_KEYS = ("runs_dir", "import_paths", "exp_name", "logger", "device", "torch_threads", "accel")
# SQLite waits this long for a lock held by another process (the trials report while the parent tells).
_SQLITE_TIMEOUT_S = 60


def optuna_module() -> Any:
    """optuna, imported; one ZooError line naming the extra when it is not installed."""
    try:
        import optuna
    except ImportError:
        raise ZooError("zoo tune needs optuna: pip install 'zoo-rl[tune]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # zoo tune prints its own progress lines
    return optuna


def storage_errors() -> tuple[type[BaseException], ...]:
    """The exceptions of a study database that failed under a running study (SQLAlchemy's: a disk I/O error, a
    lock held beyond the timeout, a read-only file; Optuna's own wrapper of them)."""
    import sqlalchemy.exc

    return sqlalchemy.exc.SQLAlchemyError, optuna_module().exceptions.StorageInternalError


def check_study_name(name: Any) -> str:
    """A study name, which is also a folder under runs_dir: refused in one line unless a plain folder name."""
    bad = (not isinstance(name, str) or name.strip() in ("", ".", "..") or name != name.strip()
           or any(ch in name for ch in "/\\\0") or len(name) > 200 or name.startswith("."))
    if bad:
        raise ConfigError(f"study name {name!r} must be a plain folder name (no '/', not empty, not starting with "
                          f"'.'): use e.g. --study ppo_cartpole")
    return name


def default_storage(runs_dir: str | Path, study: str) -> str:
    """The SQLite URL of a study's default database, under ``runs_dir/<study>/``."""
    return f"sqlite:///{(Path(runs_dir) / study / STUDY_DB).resolve()}"


def redact(url: str) -> str:
    """``url`` with its password hidden, for messages."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def sqlite_path(url: str) -> Path | None:
    """The database file of a SQLite URL (None for other dialects; refused for an in-memory database, which
    would lose the study when the command ends and cannot be shared with the trials)."""
    if not url.startswith("sqlite"):
        return None
    path = url.split("://", 1)[1][1:] if "://" in url else ""
    if path in ("", ":memory:") or path.startswith(":memory:"):
        raise ConfigError(f"storage '{url}' is an in-memory database: the trials (child processes) cannot reach it; "
                          f"give a file, e.g. sqlite:///study.db")
    return Path(path.split("?", 1)[0])


def open_storage(url: str, create: bool) -> Any:
    """Optuna's RDB storage at ``url``. ``create=False`` (reading a study) creates no table and, for SQLite, no
    file: a missing database is one line. Every failure is one ZooError line."""
    optuna = optuna_module()
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"storage {url!r} is not a database URL: e.g. sqlite:///study.db or "
                          f"postgresql://user:password@host/database")
    database = sqlite_path(url)
    if database is not None:
        if not create and not database.is_file():
            raise ZooError(f"no study database at '{database}': check --storage (or --runs-dir), or run zoo tune "
                           f"--config FILE first")
        if create and not database.parent.is_dir():
            raise ConfigError(f"cannot create the study database '{database}': the folder '{database.parent}' does "
                              f"not exist")
    engine = {"connect_args": {"timeout": _SQLITE_TIMEOUT_S}} if database is not None else None
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=engine, skip_table_creation=not create)
    except ModuleNotFoundError as exc:
        raise ZooError(f"storage '{redact(url)}' needs the database driver '{exc.name}': pip install it (e.g. "
                       f"psycopg2-binary for PostgreSQL, pymysql for mysql+pymysql://)") from None
    except Exception as exc:  # SQLAlchemy's and the driver's errors: a bad URL, a refused connection...
        raise ZooError(f"cannot open the study storage '{redact(url)}': {type(exc).__name__}: "
                       f"{first_line(exc, 200)}") from None


def machine_free(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config without ``MACHINE_KEYS``: what the study's hash covers."""
    return {key: value for key, value in to_plain(cfg).items() if key not in MACHINE_KEYS}


def config_hash(cfg: Mapping[str, Any]) -> str:
    """The hash of a base config (see ``machine_free``), as a study records it."""
    text = json.dumps(machine_free(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def make_pruner(settings: TuneSettings) -> Any:
    """The Optuna pruner ``tune.pruner`` names, with its options; a bad option is one ConfigError line."""
    pruners = optuna_module().pruners
    classes = {"median": pruners.MedianPruner, "percentile": pruners.PercentilePruner,
               "successive_halving": pruners.SuccessiveHalvingPruner, "hyperband": pruners.HyperbandPruner,
               "threshold": pruners.ThresholdPruner, "none": pruners.NopPruner}
    kwargs = dict(settings.pruner_kwargs)
    if settings.pruner == "percentile":
        kwargs.setdefault("percentile", 25.0)
    try:
        return classes[settings.pruner](**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"tune.pruner {settings.pruner} with {kwargs}: {first_line(exc, 200)}: see Optuna's "
                          f"{classes[settings.pruner].__name__}") from None


def make_sampler(settings: TuneSettings) -> Any:
    """The Optuna sampler ``tune.sampler`` names."""
    samplers = optuna_module().samplers
    return samplers.RandomSampler() if settings.sampler == "random" else samplers.TPESampler()


def load_study(storage: Any, name: str, url: str, pruner: Any = None, sampler: Any = None) -> Any:
    """An existing study; one line naming the studies the storage holds when it has no ``name``."""
    optuna = optuna_module()
    try:
        return optuna.load_study(study_name=name, storage=storage, pruner=pruner, sampler=sampler)
    except KeyError:
        names = optuna.get_all_study_names(storage)
        held = f"it holds {', '.join(names)}" if names else "it holds none"
        raise ZooError(f"no study '{name}' in '{redact(url)}' ({held})") from None


def _refuse_other_config(study: Any, name: str, url: str, base: Mapping[str, Any]) -> None:
    differs = config_differences(machine_free(study.user_attrs.get(BASE_CONFIG_ATTR) or {}), machine_free(base))
    where = f" (first difference: {differs[0]})" if differs else ""
    raise ConfigError(f"study '{name}' in '{redact(url)}' was created from another config{where}: use another "
                      f"--study name, or the config (and --set, --seeds) it was created with")


def open_study(storage: Any, name: str, url: str, settings: TuneSettings, base: Mapping[str, Any]) -> Any:
    """Create the study ``name`` from the base config ``base``, or load it and check it was created from the same
    config (its hash): one ConfigError line, with nothing written, otherwise."""
    optuna = optuna_module()
    digest = config_hash(base)
    exists = name in optuna.get_all_study_names(storage)
    study = optuna.create_study(storage=storage, study_name=name, direction=settings.direction,
                                pruner=make_pruner(settings), sampler=make_sampler(settings), load_if_exists=True)
    recorded = study.user_attrs.get(HASH_ATTR)
    if recorded is not None and recorded != digest:
        _refuse_other_config(study, name, url, base)
    if recorded is None:
        if exists and study.get_trials(deepcopy=False):
            raise ConfigError(f"study '{name}' in '{redact(url)}' was not created by zoo tune: use another --study "
                              f"name")
        # A new study, or one another zoo tune is creating this instant (it writes the same values).
        study.set_user_attr(BASE_CONFIG_ATTR, to_plain(base))
        study.set_user_attr(HASH_ATTR, digest)
    if study.direction.name.lower() != settings.direction:
        _refuse_other_config(study, name, url, base)
    return study
