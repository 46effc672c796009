"""Terminal progress: a live line on a TTY, plain log lines (every few seconds) otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class Progress:
    """Shows env steps, SPS, the recent training return, the latest eval, elapsed time and the ETA (at the current
    steps/s); ``close`` ends the live line."""

    def __init__(self, total_steps: int, log_every_s: float = 2.0, stream: TextIO | None = None,
                 window: int = 100) -> None:
        self.window = window  # episodes in the training-return window (pipeline.stats_window): the label says it
        self.total = total_steps
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.log_every_s = log_every_s
        self._last = 0.0
        self._eval: float | None = None  # the latest evaluation, shown until the next one

    def update(self, env_steps: int, row: dict[str, Any]) -> None:
        now = time.monotonic()
        forced = row.get("eval_return_mean") is not None
        if forced:
            self._eval = row["eval_return_mean"]
        if not self.live and not forced and now - self._last < self.log_every_s:
            return
        self._last = now
        fraction = min(env_steps / self.total, 1.0)
        sps = row.get("sps", 0) or 0
        text = f"steps {env_steps:>9,d}/{self.total:,d} ({fraction:5.1%})  sps {sps:>8,.0f}"
        if row.get("episode_return_mean") is not None:
            text += f"  return({self.window}) {row['episode_return_mean']:8.2f}"
        if self._eval is not None:
            text += f"  eval {self._eval:8.2f}"
        elapsed = float(row.get("wall_time", 0.0) or 0.0)
        text += f"  elapsed {_clock(elapsed)}"
        if sps > 0 and env_steps < self.total:
            text += f"  eta {_clock((self.total - env_steps) / sps)}"
        if self.live:
            self.stream.write("\r" + text.ljust(100))
            if forced:
                self.stream.write("\n")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.live:
            self.stream.write("\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"

