"""How many child runs one command may ask for: ``--seeds`` and ``--jobs`` of ``zoo run --seeds`` and ``zoo bench``.

A count past these is a typo, never a plan: ``--seeds 99999999999999999999999`` would try to plan that many runs
(a MemoryError), and ``--jobs 100000`` would start that many processes at once. Light: the CLI imports it.
"""

from __future__ import annotations

from ..errors import ConfigError

MAX_SEEDS = 1000  # seeds of one command: rliable's studies use at most 100
MAX_JOBS = 256  # runs at once, each a process


def check_counts(seeds: int, jobs: int) -> None:
    """One ConfigError line unless ``1 <= seeds <= MAX_SEEDS`` (how many seeds) and ``1 <= jobs <= MAX_JOBS``."""
    if not 1 <= seeds <= MAX_SEEDS:
        raise ConfigError(f"--seeds must be at least 1 and at most {MAX_SEEDS} seeds, got {seeds}")
    if not 1 <= jobs <= MAX_JOBS:
        raise ConfigError(f"--jobs must be at least 1 and at most {MAX_JOBS} (runs at once, each a process), got "
                          f"{jobs}")
