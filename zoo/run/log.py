"""zoo's messages: everything that is not the progress line goes through the ``zoo`` logger, to stderr as
``zoo: message`` unless the application configured that logger itself."""

from __future__ import annotations

import logging
import sys
from typing import Any


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of each message (it may be replaced after set-up)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def ensure_logging(level: int | None = None) -> None:
    """Messages that are not the progress line go through the ``zoo`` logger; unless the application configured
    it, they go to stderr as ``zoo: message`` at INFO (``level`` changes that: ``zoo run -q``/``-v``)."""
    logger = logging.getLogger("zoo")
    if not logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("zoo: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
    if level is not None:
        logger.setLevel(level)
