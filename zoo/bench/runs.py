"""The run folders of ``zoo bench``: where the suites' configs are, whose run a ``seed_<k>`` folder holds, and what a
final evaluation (``final_eval.json``) must hold before anything reads a score from it.

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
from .suites import SUITES, Entry

FINAL_EVAL_FILE = "final_eval.json"
FINAL_EVAL_EPISODES = 10
# No environment zoo benchmarks comes near: MuJoCo's returns are below 1e5. Below this bound the sums and squares that
# the statistics take over seeds and bootstrap resamples stay finite and exact enough; above it a value is damage.
RETURN_LIMIT = 1e12
_FINAL_EVAL_MAX_BYTES = 1 << 20  # ten returns take a few hundred bytes
# What a run's config.yaml may hold differently from its entry's config: where the folder is, and the configs'
# folder as this clone sees it.
IGNORED_KEYS = ("runs_dir", "exp_name", "import_paths")
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


def read_final_returns(run: Path, episodes: int | None = FINAL_EVAL_EPISODES) -> list[float]:
    """The episode returns of ``run``'s ``final_eval.json`` (the runner's final evaluation, ``zoo eval --json``): a
    JSON object whose ``returns`` is a list of ``episodes`` finite numbers (not bools, not strings) each within
    +-RETURN_LIMIT, as many as its own ``episodes`` field says; ``episodes=None`` (``zoo plot --aggregate`` of any
    runs, evaluated with any ``zoo eval --episodes``) takes any count of one or more. A ZooError naming the file and
    what is wrong otherwise."""
    path = run / FINAL_EVAL_FILE
    problem = _final_eval_problem(path, episodes)
    if isinstance(problem, str):
        what = f"of {episodes} episodes" if episodes is not None else "(zoo eval --json)"
        raise ZooError(f"'{path}' is not a final evaluation {what}: {problem}; delete it and evaluate the run again "
                       f"(zoo bench, or zoo eval RUN --json FILE)")
    return problem


def _final_eval_problem(path: Path, episodes: int | None) -> str | list[float]:
    # What is wrong with the file (a string), or its returns.
    try:
        if path.stat().st_size > _FINAL_EVAL_MAX_BYTES:
            return f"it is larger than {_FINAL_EVAL_MAX_BYTES} bytes"
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return f"it cannot be read as JSON ({type(exc).__name__})"
    returns = data.get("returns") if isinstance(data, dict) else None
    if not isinstance(returns, list):
        return "it has no list of 'returns'"
    for index, value in enumerate(returns):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"returns[{index}] is {json.dumps(value)[:40]}, not a number"
        if not abs(value) < RETURN_LIMIT:  # also NaN; JSON's 1e999 reads as inf
            return f"returns[{index}] is {value:.6g}, not a finite return within +-{RETURN_LIMIT:.0e}"
    if not returns or (episodes is not None and len(returns) != episodes):
        return f"it holds {len(returns)} returns"
    if data.get("episodes", len(returns)) != len(returns):
        return f"its 'episodes' says {json.dumps(data.get('episodes'))[:40]}"
    return [float(value) for value in returns]


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
            if key in found and not (not prefix and key in IGNORED_KEYS):
                difference = _difference(expected[key], found[key], f"{prefix}{key}.")
                if difference is not None:
                    return difference
        return None
    if expected == found and isinstance(expected, bool) == isinstance(found, bool):  # True == 1 in Python
        return None
    return f"{prefix[:-1]} is {json.dumps(found, default=str)[:60]} there, {json.dumps(expected, default=str)[:60]} " \
           f"for the entry"


def check_own(path: Path, entry: Entry, seed: int, configs: Path) -> None:
    """A ZooError naming ``path`` unless its config.yaml is the one ``zoo bench`` trains ``entry``'s seed ``seed``
    with (a folder replaced by, or copied from, a run of another config or seed)."""
    from ..config import load_config_file, to_plain

    try:
        found = to_plain(load_config_file(path / CONFIG_FILE))
    except ZooError as exc:
        raise ZooError(f"'{path}' is not a run of {entry.name} seed {seed} (its config.yaml cannot be read: {exc}): "
                       f"move it away, zoo bench neither trains into nor reports it") from None
    difference = _difference(expected_config(entry, seed, configs), found)
    if difference is not None:
        raise ZooError(f"'{path}' holds a run of another config or seed, not {entry.name} seed {seed} ({difference}): "
                       f"move it away, zoo bench neither trains into nor reports it")
