"""``zoo tune``: hyper-parameter search with Optuna over ordinary run directories.

Each trial is a run directory (``<runs_dir>/<study>/trial_<k>/``) trained by a ``zoo run`` child process; the study
lives in a real database (SQLite under the study's folder by default, any Optuna RDB URL for several machines);
pruning goes through the trial run's own callbacks (``trial_callbacks``); a killed study continues where it stopped
(``trials``). The search space and objective are the config's ``tune`` section (``space``). Optuna is an extra
(``pip install 'zoo-rl[tune]'``), imported only when the command runs: importing this package costs nothing more.

The top floor: it builds on ``zoo.run`` and ``zoo.config``; nothing in zoo imports it but the CLI.
"""

from .command import add_parser, main

__all__ = ["add_parser", "main"]
