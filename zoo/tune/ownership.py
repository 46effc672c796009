"""Which of a study's rows zoo tune may act on, and the one deletion it ever makes.

A study's rows are data, never instructions: anyone who can write to a shared database (or a damaged file) can put
anything in them. So a trial's recorded run directory (``zoo_run_dir``) is never used as a path to act on: it only
tells whether the trial is this study folder's own, by being exactly ``<study_dir>/trial_<number>`` for the trial's
own number; the path zoo works in is always rebuilt from ``study_dir`` and the number. A row zoo tune could never have
written (a run directory that is not ``<...>/<study>/trial_<number>`` of its own number: ``/``, ``<study>/..``,
another trial's folder) is ``malformed``: it is nobody's trial, and the tuner fails it.

The one deletion: a seed's run directory that a ``zoo run`` killed before it wrote ``config.yaml`` (it trained
nothing, and ``zoo run`` would not reuse the name), removed by ``clear_unconfigured`` only when it is exactly
``<study_dir>/trial_<n>`` or ``<study_dir>/trial_<n>/seed_<k>`` of the job's own n and seeds, no folder on the way is
a symbolic link, and it holds nothing but what ``zoo run`` creates before its config (``zoo.run.train``: the folder,
its ``.lock``, the config's temporary ``.config.yaml.<pid>.<id>.tmp``). Anything else is refused (``Refused``) and
the trial fails with that line, its folder left as it is.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any

from ..errors import ZooError
from ..run.run_dir import CONFIG_FILE, LOCK_FILE

_BEFORE_CONFIG = re.compile(rf"\.{re.escape(CONFIG_FILE)}\.\d+\.[0-9a-f]+\.tmp")


class Refused(ZooError):
    """A trial's folder that zoo tune will not use or delete: the trial fails with this line."""


def trial_folder(study_dir: Path, number: int) -> Path:
    """Where trial ``number`` of the study in ``study_dir`` (resolved) trains: the only folder it may use."""
    return study_dir / f"trial_{number}"


def malformed(recorded: Any, study_name: str, number: int) -> bool:
    """Whether ``recorded`` (a trial's ``zoo_run_dir``) is a run directory zoo tune never writes for trial
    ``number`` of study ``study_name``: not an absolute, normalised ``.../<study_name>/trial_<number>``."""
    if not isinstance(recorded, str):
        return True
    path = Path(recorded)
    return (not path.is_absolute() or str(path) != recorded or ".." in path.parts
            or path.name != f"trial_{number}" or path.parent.name != study_name)


def own(recorded: Any, host: Any, study_dir: Path, number: int, this_host: str) -> bool:
    """Whether a trial recording run directory ``recorded`` on ``host`` is this study folder's own trial
    ``number``: exactly its folder here, recorded by this host (or a folder this machine sees)."""
    folder = trial_folder(study_dir, number)
    return recorded == str(folder) and (host == this_host or os.path.lexists(folder))


def _not_a_link(path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise Refused(f"'{path}' is a symbolic link: zoo tune follows no link out of the study folder; move it away")
    if not stat.S_ISDIR(mode):
        raise Refused(f"'{path}' is not a folder: move it away")


def check_folders(study_dir: Path, number: int, path: Path) -> None:
    """Refuse (``Refused``) a seed's run directory ``path`` of trial ``number`` unless it is the trial's folder or
    one ``seed_<k>`` in it, with no symbolic link on the way (those that exist)."""
    folder = trial_folder(study_dir, number)
    if path != folder and (path.parent != folder or not re.fullmatch(r"seed_-?\d+", path.name)):
        raise Refused(f"'{path}' is not the folder of trial {number} ({folder})")
    _not_a_link(folder)
    if path != folder:
        _not_a_link(path)


def clear_unconfigured(study_dir: Path, number: int, seeds: list[int], path: Path) -> None:
    """Remove ``path``, a seed's run directory killed before its config (see the module docstring), or refuse."""
    folder = trial_folder(study_dir, number)
    allowed = [folder] if len(seeds) == 1 else [folder / f"seed_{seed}" for seed in seeds]
    if path not in allowed:
        raise Refused(f"'{path}' is not a run directory of trial {number}: not removed")
    check_folders(study_dir, number, path)
    strange = sorted(entry.name for entry in path.iterdir()
                     if not (entry.name == LOCK_FILE or _BEFORE_CONFIG.fullmatch(entry.name)) or entry.is_symlink()
                     or not entry.is_file())
    if strange:
        raise Refused(f"'{path}' has no {CONFIG_FILE} but holds {strange[0]}, which zoo run does not create before "
                      f"its config: not removed; move it away")
    shutil.rmtree(path)
