"""``policy.compile=auto`` for the off-policy family, decided by what the compile costs and saves on this machine.

A cold compile takes 20-50 s per graph on a fast idle CPU and 150 s or more on a slow, busy one, while what it saves
is the run's remaining updates times what each saves. So ``auto`` (where a compiler and a cache folder work, and the
run plans at least ``AUTO_MIN_UPDATES`` updates) first trains eager and times ``AUTO_PROBE_UPDATES`` updates (after
``AUTO_PROBE_WARMUP`` more), then compiles only where

    remaining updates x eager seconds per update x (1 - AUTO_COMPILED_FRACTION) >= AUTO_MARGIN x graphs x compile

with the compile's seconds per graph as last measured on this machine kind for this step (kept beside inductor's
cache, which is one folder per CPU kind: ``compile_costs.json``), or ``AUTO_DEFAULT_COMPILE_SECONDS`` before the
first. The decision is part of the policy's state: a resumed run keeps it, and so its numbers.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time

from .settings import inductor_cache_dir

log = logging.getLogger("zoo")

AUTO_PROBE_WARMUP = 8  # eager updates not timed first (allocations, caches)
AUTO_PROBE_UPDATES = 64  # eager updates timed before auto decides
# A compiled update's time as a share of the eager one's: 0.4-0.5 measured for SAC, TD3 and DQN (docs/speed.md);
# the larger share, so that auto errs towards eager.
AUTO_COMPILED_FRACTION = 0.5
AUTO_DEFAULT_COMPILE_SECONDS = 60.0  # per graph, before this machine kind measured one
AUTO_MARGIN = 2.0  # the saving must pay the compile twice over
COSTS_FILE = "compile_costs.json"


def compile_seconds(what: str) -> float:
    """The longest compile of ``what`` measured on this machine kind (seconds per graph), else the default."""
    try:
        known = json.loads((inductor_cache_dir() / COSTS_FILE).read_text())
        value = known.get(what) if isinstance(known, dict) else None
        if isinstance(value, (int, float)) and 0 < value < 1e6:
            return float(value)
    except (OSError, ValueError):
        pass
    return AUTO_DEFAULT_COMPILE_SECONDS


def record_compile_seconds(what: str, seconds: float) -> None:
    """Keep ``seconds`` as ``what``'s compile cost here where it is the longest seen (a cold compile; one from
    inductor's cache is short). Written whole (a file renamed over the old); a folder that refuses it changes
    nothing."""
    path = inductor_cache_dir() / COSTS_FILE
    try:
        known = json.loads(path.read_text()) if path.is_file() else {}
        known = {k: v for k, v in known.items() if isinstance(v, (int, float))} if isinstance(known, dict) else {}
        if seconds <= known.get(what, 0.0):
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(f".{COSTS_FILE}.{os.getpid()}")
        staged.write_text(json.dumps({**known, what: round(seconds, 1)}, indent=1) + "\n")
        os.replace(staged, path)
    except (OSError, ValueError):
        pass


class AutoDecision:
    """Times the first eager updates of a run under ``auto`` and decides whether to compile (see the module
    docstring). ``graphs``: how many graphs the step compiles into (one per combination of its cadences)."""

    def __init__(self, what: str, planned_updates: int, graphs: int) -> None:
        self.what, self.planned, self.graphs = what, planned_updates, graphs
        self.seconds: list[float] = []
        self._seen = 0
        self._start = 0.0

    def start(self) -> None:
        """Before an eager update."""
        self._start = time.perf_counter()

    def stop(self) -> None:
        """After it."""
        self._seen += 1
        if self._seen > AUTO_PROBE_WARMUP:
            self.seconds.append(time.perf_counter() - self._start)

    @property
    def ready(self) -> bool:
        """Whether enough updates were timed to decide."""
        return len(self.seconds) >= AUTO_PROBE_UPDATES

    def decide(self, updates_done: int) -> tuple[bool, str]:
        """Whether to compile from here on, and why (for the log and the run's environment record)."""
        eager = statistics.median(self.seconds)
        remaining = max(self.planned - updates_done, 0)
        saving = remaining * eager * (1.0 - AUTO_COMPILED_FRACTION)
        cost = self.graphs * compile_seconds(self.what)
        compile_step = saving >= AUTO_MARGIN * cost
        reason = (f"auto: {remaining:,} updates left at {eager * 1e3:.2f} ms eager would save about {saving:,.0f} s "
                  f"compiled, against about {cost:,.0f} s of compiling here")
        log.info(f"{reason}: {'compiling' if compile_step else 'staying eager'}")
        return compile_step, reason if compile_step else reason + " (under twice that: eager)"
