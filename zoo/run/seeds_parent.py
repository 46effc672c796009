"""Where ``zoo run --seeds`` puts its seeds, and what may go there: a seeds parent (``<runs_dir>/<exp_name>/``) holds
only ``seed_<k>`` run directories of one config, and no run ever goes inside another run.

Why: the seeds of one config are plotted and aggregated from their parent (``zoo plot runs/EXP``). Seeds written
inside a finished single run of the same name were hidden by it (``zoo plot`` saw the run and looked no further),
and a single run among seeds would be averaged in with them. So, before anything trains or is written:

- ``zoo run --seeds`` refuses a parent that holds a run (``RUN_MARKERS``), anything but ``seed_<k>`` folders, seeds
  trained with another config (the first differing key named; ``SEED_IGNORES`` may differ), or a seed it was asked
  to train again (each seed trains once into ``seed_<k>``; resume it instead). A missing or empty parent, or one
  holding other seeds of the same config, takes the new seeds.
- ``zoo run --resume PARENT --seeds K...`` continues each ``PARENT/seed_<k>``, which must exist.
- A single new run (``zoo run``, ``zoo.train``) is never created inside a run directory, nor inside a seeds parent
  unless it is one of its seeds (``exp_name`` ``seed_<its seed>``: how ``--seeds``, ``zoo bench`` and ``zoo tune``
  name their children); ``zoo run --resume`` of a seeds parent says how to resume its seeds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import to_plain
from ..config.resolve import config_differences
from ..errors import ConfigError, RunDirectoryError
from .metrics_files import METRICS_JSONL, METRICS_JSONL_GZ
from .run_dir import CHECKPOINT_FILE, CONFIG_FILE, MODEL_FILE
from .view import SEED_FOLDER, RunView

# Files that only a run that trained (or is training) writes: metrics rows, a checkpoint (iteration 0 is saved at
# once), the final model. A config.yaml alone is not one: it may be the user's config beside their runs.
RUN_MARKERS = (METRICS_JSONL, METRICS_JSONL_GZ, CHECKPOINT_FILE, MODEL_FILE)
# Keys the seeds of one config may hold differently: which seed and where, and how the machine ran them (as zoo tune's
# study hash leaves them out), never what they learn.
SEED_IGNORES = ("seed", "exp_name", "runs_dir", "import_paths", "logger", "device", "torch_threads", "accel")
_NAMES_SHOWN = 4


def run_markers(path: Path) -> list[str]:
    """The names of ``RUN_MARKERS`` (and config.yaml beside one) present in ``path``: a run's files, or []."""
    found = [name for name in RUN_MARKERS if os.path.lexists(path / name)]
    return [CONFIG_FILE, *found] if found and os.path.lexists(path / CONFIG_FILE) else found


def seed_number(name: str) -> int | None:
    """The seed a ``seed_<k>`` (or ``seed_<k>_<n>``) folder name stands for, else None."""
    matched = SEED_FOLDER.fullmatch(name)
    return int(matched.group(1)) if matched else None


def seed_folders(path: Path) -> list[Path]:
    """The ``seed_<k>`` folders in ``path``, by seed."""
    if not path.is_dir():
        return []
    found = [child for child in path.iterdir() if seed_number(child.name) is not None and child.is_dir()]
    return sorted(found, key=lambda child: (seed_number(child.name), child.name))


def _others(path: Path) -> list[str]:
    # What a seeds parent may not hold: any visible entry but a seed_<k> folder (hidden ones are the system's).
    return sorted(child.name for child in path.iterdir() if not child.name.startswith(".")
                  and (seed_number(child.name) is None or not child.is_dir()))


def is_seeds_parent(path: Path) -> bool:
    """Whether ``path`` is a folder of seeds: no run of its own, one ``seed_<k>`` folder or more, nothing else."""
    return path.is_dir() and not run_markers(path) and bool(seed_folders(path)) and not _others(path)


def _shown(names: list[str]) -> str:
    more = f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
    return ", ".join(names[:_NAMES_SHOWN]) + more


def _differences(trained: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    kept = [{k: v for k, v in to_plain(cfg).items() if k not in SEED_IGNORES} for cfg in (trained, new)]
    return config_differences(kept[0], kept[1])


def check_new_seeds_parent(parent: Path, cfg: Mapping[str, Any], seeds: list[int]) -> None:
    """Refuse (one ConfigError line naming ``parent`` and the fix) a parent that ``zoo run --seeds`` may not train
    ``seeds`` of ``cfg`` into (see the module docstring); reads only."""
    if not os.path.lexists(parent):
        return
    other_name = f"--exp-name {parent.name}_seeds"
    if not parent.is_dir():
        raise ConfigError(f"'{parent}' is a file, not a folder for the seeds: choose another --exp-name "
                          f"(e.g. {other_name}) or runs_dir")
    markers = run_markers(parent)
    if markers:
        raise ConfigError(f"'{parent}' is a run directory ({', '.join(markers)}): --seeds would write its seed_<k> "
                          f"folders inside that run; choose another --exp-name (e.g. {other_name}) or runs_dir")
    others = _others(parent)
    if others:
        raise ConfigError(f"'{parent}' holds other things than seed_<k> run directories ({_shown(others)}): --seeds "
                          f"trains into a folder of its own; choose another --exp-name (e.g. {other_name}) or runs_dir")
    folders = seed_folders(parent)
    for folder in folders:
        view = RunView(folder)
        differ = _differences(view.config, cfg) if view.has_config else []
        if differ:
            verb = "differs" if len(differ) == 1 else "differ"
            raise ConfigError(f"'{parent}' holds the seeds of another config ({folder.name}: {_shown(differ)} {verb}): "
                              f"choose another --exp-name (e.g. {other_name}) or runs_dir, or give the config its "
                              f"seeds were trained with")
    again = [folder for folder in folders if seed_number(folder.name) in seeds]
    if again:
        numbers = " ".join(str(k) for k in dict.fromkeys(seed_number(folder.name) for folder in again))
        raise ConfigError(f"'{parent}' already holds {_shown([folder.name for folder in again])}: each seed trains "
                          f"once; continue them with zoo run --resume {parent} --seeds {numbers}, or choose other "
                          f"seeds")


def resumed_seed_runs(parent: Path, seeds: list[int]) -> dict[int, Path]:
    """The run directory ``parent/seed_<k>`` of each seed that ``zoo run --resume PARENT --seeds ...`` continues; one
    RunDirectoryError line when ``parent`` is no seeds parent or lacks one of them."""
    if not parent.is_dir():
        raise RunDirectoryError(f"cannot resume the seeds of '{parent}': it is not a folder")
    if run_markers(parent):
        raise RunDirectoryError(f"'{parent}' is a single run, not a folder of seeds: resume it with zoo run --resume "
                                f"{parent} (without --seeds)")
    if not is_seeds_parent(parent):
        raise RunDirectoryError(f"'{parent}' is not a folder of seeds (zoo run --seeds writes RUNS/EXP/seed_<k>/): "
                                f"give the folder that holds the seed_<k> run directories")
    missing = [seed for seed in seeds if not (parent / f"seed_{seed}").is_dir()]
    if missing:
        held = [folder.name for folder in seed_folders(parent)]
        raise RunDirectoryError(f"'{parent}' has no {_shown([f'seed_{seed}' for seed in missing])} (it holds "
                                f"{_shown(held)}): resume the seeds it holds, or train new ones with zoo run --config "
                                f"FILE --seeds {' '.join(map(str, missing))}")
    return {seed: parent / f"seed_{seed}" for seed in seeds}


def check_run_place(cfg: Mapping[str, Any]) -> None:
    """Refuse (one ConfigError line) a new single run of ``cfg`` whose ``runs_dir`` is a run directory, or a seeds
    parent it is not a seed of (``exp_name`` other than ``seed_<its seed>``); reads only."""
    runs_dir = Path(str(cfg["runs_dir"]))
    if not runs_dir.is_dir():
        return
    markers = run_markers(runs_dir)
    if markers:
        raise ConfigError(f"runs_dir '{runs_dir}' is a run directory ({', '.join(markers)}): a new run never goes "
                          f"inside another run; choose another runs_dir")
    if is_seeds_parent(runs_dir) and cfg.get("exp_name") != f"seed_{cfg.get('seed')}":
        held = [folder.name for folder in seed_folders(runs_dir)]
        raise ConfigError(f"runs_dir '{runs_dir}' holds the seeds of zoo run --seeds ({_shown(held)}): a run named "
                          f"'{cfg.get('exp_name')}' would be plotted with them; choose another runs_dir, or add a seed "
                          f"there with --seed K --exp-name seed_K")


def check_not_seeds_parent(path: Path) -> None:
    """Refuse (one RunDirectoryError line saying how to resume its seeds) ``zoo run --resume`` of a seeds parent."""
    if is_seeds_parent(path):
        folders = seed_folders(path)
        numbers = " ".join(str(k) for k in dict.fromkeys(seed_number(folder.name) for folder in folders))
        raise RunDirectoryError(f"'{path}' is a folder of seeds ({_shown([folder.name for folder in folders])}), not "
                                f"a run: resume them with zoo run --resume {path} --seeds {numbers}, or one with zoo "
                                f"run --resume {folders[0]}")
