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
from .suites import SUITES, Entry

__all__ = ["FINAL_EVAL_EPISODES", "FINAL_EVAL_FILE", "RETURN_LIMIT", "check_own", "config_difference", "configs_dir",
           "expected_config", "read_final_returns"]

# What a run's config.yaml may hold differently from its entry's config: where the folder is, and the configs'
# folder as this clone sees it; and how the learning step ran (compiled or eager: the same updates within float
# rounding), which does not change what a run learns.
IGNORED_KEYS = ("runs_dir", "exp_name", "import_paths", "policy.compile")
# A clone's configs/ beside the package (an editable install, or zoo run from the clone's root).
PACKAGE_CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def configs_dir(entries: list[Entry] | None = None) -> Path:
    """The ``configs/`` folder holding the config files of ``entries`` (default: of every suite): the current
    directory's ``configs/`` (the clone the user is in), else the one beside the zoo package (an editable install);
    a ConfigError saying where it looked and what was missing otherwise."""
    names = sorted({entry.config for entry in (entries if entries is not None else
                                               [e for suite in SUITES.values() for e in suite])})
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
    # The first key whose value differs; keys only one side has are left out (a key added to zoo since the run).
    if isinstance(expected, dict) and isinstance(found, dict):
        for key in expected:
            if key in found and f"{prefix}{key}" not in IGNORED_KEYS:
                difference = _difference(expected[key], found[key], f"{prefix}{key}.")
                if difference is not None:
                    return difference
        return None
    if expected == found and isinstance(expected, bool) == isinstance(found, bool):  # True == 1 in Python
        return None
    return f"{prefix[:-1]} is {json.dumps(found, default=str)[:60]} there, {json.dumps(expected, default=str)[:60]} " \
           f"for the entry"


def config_difference(path: Path, entry: Entry, seed: int, configs: Path) -> str | None:
    """None when ``path``'s config.yaml is the one ``zoo bench`` trains ``entry``'s seed ``seed`` with, else the
    first key that differs; a ZooError naming ``path`` when its config.yaml cannot be read."""
    from ..config import load_config_file, to_plain

    try:
        found = to_plain(load_config_file(path / CONFIG_FILE))
    except ZooError as exc:
        raise ZooError(f"'{path}' is not a run of {entry.name} seed {seed} (its config.yaml cannot be read: {exc}): "
                       f"move it away, zoo bench neither trains into nor reports it") from None
    return _difference(expected_config(entry, seed, configs), found)


def check_own(path: Path, entry: Entry, seed: int, configs: Path) -> None:
    """A ZooError naming ``path`` unless its config.yaml is the one ``zoo bench`` trains ``entry``'s seed ``seed``
    with (a folder replaced by, or copied from, a run of another config or seed)."""
    difference = config_difference(path, entry, seed, configs)
    if difference is not None:
        raise ZooError(f"'{path}' holds a run of another config or seed, not {entry.name} seed {seed} ({difference}): "
                       f"move it away, zoo bench neither trains into nor reports it")
