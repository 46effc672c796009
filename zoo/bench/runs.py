"""The run folders of ``zoo bench``: where the suites' configs are, whose run a ``seed_<k>`` folder holds, and what a
final evaluation (``final_eval.json``) must hold before anything reads a score from it (``zoo.run.view``, re-exported
here).

Everything here reads data that someone else may have made (a copied or replaced folder, a hand-edited file): it runs
no code from it and refuses what is not a run of the entry and seed in one line naming the folder or file.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ZooError
from ..run.run_dir import CONFIG_FILE
from ..run.view import FINAL_EVAL_EPISODES, FINAL_EVAL_FILE, RETURN_LIMIT, read_final_returns
from .suites import BUILTIN_SUITES, Entry

__all__ = ["FINAL_EVAL_EPISODES", "FINAL_EVAL_FILE", "RETURN_LIMIT", "check_eval_seed", "check_own",
           "config_difference", "configs_dir", "expected_config", "read_final_returns"]

# What a run's config.yaml may hold differently from its entry's config: where the folder is, and the configs'
# folder as this clone sees it; and how the learning step ran (compiled or eager: the same updates within float
# rounding), which does not change what a run learns.
IGNORED_KEYS = ("runs_dir", "exp_name", "import_paths", "policy.compile", "accel")
# Keys whose value is an open mapping (any names inside): compared whole, not key by key.
OPEN_MAPPINGS = ("env.kwargs", "policy.encoder_kwargs", "tune")
# What a run's config.yaml must hold to be a run of an entry and seed at all (a key zoo added since may be missing,
# these never are): without them a ``{}`` would match every entry, and a copy without ``seed`` every seed.
REQUIRED_KEYS = ("seed", "env.id", "policy.type", "pipeline.type", "pipeline.max_env_steps")
# A clone's configs/ beside the package (an editable install, or zoo run from the clone's root).
PACKAGE_CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def configs_dir(entries: list[Entry] | None = None) -> Path:
    """The ``configs/`` folder holding the config files of ``entries`` (default: of the built-in suites) given by a
    relative path: the current directory's ``configs/`` (the clone the user is in), else the one beside the zoo
    package (an editable install); a ConfigError saying where it looked and what was missing otherwise. An entry's
    absolute path (a plugin's own config file) is used as it is: it must exist, and needs no ``configs/`` folder."""
    entries = entries if entries is not None else [e for suite in BUILTIN_SUITES.values() for e in suite]
    for entry in entries:
        if Path(entry.config).is_absolute() and not Path(entry.config).is_file():
            raise ConfigError(f"the config file of benchmark entry '{entry.name}', '{entry.config}', does not exist: "
                              f"reinstall the plugin whose suite declares it (zoo bench --list names it)")
    names = sorted({entry.config for entry in entries if not Path(entry.config).is_absolute()})
    candidates = list(dict.fromkeys([Path.cwd() / "configs", PACKAGE_CONFIGS]))
    looked = []
    for folder in candidates:
        missing = [name for name in names if not (folder / name).is_file()]
        if not missing:
            return folder
        looked.append(f"'{folder}' ({'no such folder' if not folder.is_dir() else 'lacks ' + ', '.join(missing)})")
    raise ConfigError(f"zoo bench trains the configs of a zoo clone, and found no configs/ folder holding "
                      f"{', '.join(names)}: looked in {' and '.join(looked)}; run it from the root of a zoo clone")


@functools.lru_cache(maxsize=64)
def _resolved(entry: Entry, configs: Path) -> str:
    from ..config import load_config_file, to_plain
    from ..config.resolve import resolve_config

    path = configs / entry.config
    # The overrides of the runner's `zoo run` command (its -q is logger.progress=False); the seed is set per run.
    cfg = resolve_config(load_config_file(path), [*entry.overrides, ("logger.progress", False)], path.parent,
                         environ=os.environ)
    return json.dumps(to_plain(cfg))


def expected_config(entry: Entry, seed: int, configs: Path) -> dict[str, Any]:
    """The config (plain values) that ``zoo bench`` trains ``entry``'s seed ``seed`` with, resolved here."""
    cfg = json.loads(_resolved(entry, configs))
    cfg["seed"] = seed
    return cfg


def _difference(expected: Any, found: Any, prefix: str = "") -> str | None:
    # The first key whose value differs. A key the run lacks is left out (a key added to zoo since the run, at its
    # default); a key only the run has is one this zoo does not know (a newer zoo's run, or a hand-edited file): it
    # differs, whatever it meant. Open mappings (env.kwargs) are compared whole.
    if isinstance(expected, dict) and isinstance(found, dict) and prefix[:-1] not in OPEN_MAPPINGS:
        for key in expected:
            if key in found and f"{prefix}{key}" not in IGNORED_KEYS:
                difference = _difference(expected[key], found[key], f"{prefix}{key}.")
                if difference is not None:
                    return difference
        for key in found:
            if key not in expected and f"{prefix}{key}" not in IGNORED_KEYS:
                return f"{prefix}{key} is set there, a key this zoo does not know (a newer zoo's run?)"
        return None
    if expected == found and isinstance(expected, bool) == isinstance(found, bool):  # True == 1 in Python
        return None
    return f"{prefix[:-1]} is {json.dumps(found, default=str)[:60]} there, {json.dumps(expected, default=str)[:60]} " \
           f"for the entry"


def _missing(found: Any) -> str | None:
    # The first of REQUIRED_KEYS that ``found`` lacks.
    for dotted in REQUIRED_KEYS:
        value = found
        for part in dotted.split("."):
            if not isinstance(value, dict) or part not in value:
                return dotted
            value = value[part]
    return None


def config_difference(path: Path, entry: Entry, seed: int, configs: Path) -> str | None:
    """None when ``path``'s config.yaml is the one ``zoo bench`` trains ``entry``'s seed ``seed`` with, else the
    first key that differs or is missing (``REQUIRED_KEYS``); a ZooError naming ``path`` when its config.yaml
    cannot be read."""
    from ..config import load_config_file, to_plain
    from ..run.state_files import check_regular

    try:
        check_regular(path / CONFIG_FILE)
        found = to_plain(load_config_file(path / CONFIG_FILE))
    except ZooError as exc:
        raise ZooError(f"'{path}' is not a run of {entry.name} seed {seed} (its config.yaml cannot be read: {exc}): "
                       f"move it away, zoo bench neither trains into nor reports it") from None
    missing = _missing(found)
    if missing is not None:
        return f"{missing} is missing there"
    return _difference(expected_config(entry, seed, configs), found)


# What makes a kept run one of this entry and seed at all; a kept run that matches them but differs elsewhere was
# trained with an older config of the entry (a file or a default changed since): stale, trained again.
IDENTITY_KEYS = ("seed", "env.id", "policy.type")


def stale_difference(path: Path, entry: Entry, seed: int, configs: Path) -> str | None:
    """For a kept seed folder whose config differs from the entry's (``config_difference``): the difference when
    its seed, env and policy type are the entry's (an older config of this very entry: the runner trains it
    again), else None (a run of another entry or seed, or one that does not say: refused)."""
    from ..config import load_config_file, to_plain

    found = to_plain(load_config_file(path / CONFIG_FILE))
    expected = expected_config(entry, seed, configs)
    if _missing(found) is not None or any(_lookup(found, key) != _lookup(expected, key) for key in IDENTITY_KEYS):
        return None
    return _difference(expected, found)


def _lookup(config: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config


def eval_seed(seed: int) -> int:
    """The evaluation seed of the final evaluation of a run of ``seed`` (``zoo eval``'s default, which the runner
    uses): what its ``final_eval.json`` records as ``seed``."""
    from ..pipelines.process import component_seed

    return component_seed(seed, 0, "eval")


def check_eval_seed(path: Path, entry: Entry, seed: int, required: bool = False) -> None:
    """A ZooError naming ``path`` unless its ``final_eval.json`` (checked by ``read_final_returns`` first) records the
    evaluation seed of a run of ``seed`` (``eval_seed``); ``required``: also when it records none (kept results,
    which ``zoo bench`` always evaluates itself)."""
    from ..run.state_files import read_regular

    read_final_returns(path, episodes=None)  # a ZooError line for a damaged file, before it is parsed here
    data = json.loads(read_regular(path / FINAL_EVAL_FILE, 1 << 20))
    recorded = data.get("seed") if isinstance(data, dict) else None
    if recorded is None and not required:
        return
    if recorded != eval_seed(seed) or isinstance(recorded, bool):
        shown = "no seed" if recorded is None else f"seed {json.dumps(recorded)[:30]}"
        raise ZooError(f"'{path / FINAL_EVAL_FILE}' records {shown}, not {eval_seed(seed)}, the evaluation seed of a "
                       f"run of seed {seed}: not a final evaluation of {entry.name} seed {seed}; move it away, zoo "
                       f"bench neither trains into nor reports it")


def check_own(path: Path, entry: Entry, seed: int, configs: Path) -> None:
    """A ZooError naming ``path`` unless its config.yaml is the one ``zoo bench`` trains ``entry``'s seed ``seed``
    with (a folder replaced by, or copied from, a run of another config or seed)."""
    difference = config_difference(path, entry, seed, configs)
    if difference is not None:
        raise ZooError(f"'{path}' holds a run of another config or seed, not {entry.name} seed {seed} ({difference}): "
                       f"move it away, zoo bench neither trains into nor reports it")
