"""Figures shared by ``zoo plot``, ``zoo bench --report`` and ``zoo tune --out``: matplotlib on the Agg backend
(``pyplot``), a figure written whole or not at all (``save_figure``), a mean and band over curves (``mean_band``).

Here, below the commands, so that the report modules of bench and tune need not import the ``zoo plot`` command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ZooError
from .output import refused_write


def mean_band(curves: list[tuple[np.ndarray, np.ndarray]], points: int = 200) -> tuple[np.ndarray, ...]:
    """``(grid, mean, std)`` of the curves interpolated on a grid spanning the x range all of them cover."""
    low = max(float(xs[0]) for xs, _ in curves)
    high = min(float(xs[-1]) for xs, _ in curves)
    grid = np.linspace(low, high, points) if high > low else np.array([high])
    values = np.stack([np.interp(grid, xs, ys) for xs, ys in curves])
    return grid, values.mean(0), values.std(0)


PLOT_HINT = "zoo plot --out needs matplotlib: pip install 'zoo-rl[plot]' (without --out, zoo plot prints a table)"


def pyplot(missing: str = PLOT_HINT) -> Any:
    """matplotlib's pyplot on the Agg backend (no display); a ZooError saying ``missing`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ZooError(missing) from None
    return plt


def save_figure(figure: Any, path: Path) -> None:
    """Save ``figure`` to ``path`` (PNG, SVG or PDF by its suffix) through a temporary file, so that a reader never
    sees half a figure, and close it; a refused write (a full disk) is one ZooError line and leaves no file."""
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
    try:
        with refused_write(path):
            figure.savefig(tmp)
            tmp.replace(path)
    finally:
        pyplot().close(figure)
        tmp.unlink(missing_ok=True)


def check_out(out: str) -> Path:
    """``out`` as a path, or one ZooError line when its folder does not exist."""
    path = Path(out)
    if not path.parent.is_dir():
        raise ZooError(f"cannot write '{out}': the folder '{path.parent}' does not exist")
    return path
