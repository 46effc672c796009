"""``zoo export``: a run's deterministic policy as one ONNX or TorchScript graph, from raw env observations to
env actions (what ``zoo.load(run).predict`` returns), checked against zoo.load before it is written.

``graph`` builds the graph (inputs and flattening, the saved observation normalisation, the policy's
``export_module``), ``formats`` writes and runs the files, ``command`` holds ``export_run``. The top floor, beside
``zoo.agent``: nothing in zoo imports it but the CLI. Importing this package costs nothing (the CLI builds its
parser from it); ``onnx`` (export) and ``onnxruntime`` (the check) are the ``export`` extra, imported only when an
ONNX file is written or checked.

Examples:
    >>> from zoo.export.command import export_run
    >>> export_run("runs/ppo_cartpole", "onnx").path
    PosixPath('runs/ppo_cartpole/export/policy.onnx')
"""

from __future__ import annotations

import argparse
from typing import Any

FORMATS = ("onnx", "torchscript")
SUFFIXES = {"onnx": ".onnx", "torchscript": ".pt"}
# The check: |exported - zoo.load's| <= CHECK_TOLERANCE + CHECK_RELATIVE * |zoo.load's| per action element. The
# relative part is float32's own: a NatureCNN on 0-255 images (SAC, actions up to 3) ran 1.1e-5 from its float64
# forward in torch and 0.6e-5 in onnxruntime 1.32 on an AVX-512 Xeon, so the two differed by up to 2.6e-5.
CHECK_TOLERANCE = 1e-5
CHECK_RELATIVE = 1e-4
DEFAULT_CHECK = 256


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add ``export`` to ``zoo``'s sub-commands; the parser added."""
    export = commands.add_parser("export", help="a run's deterministic policy as one ONNX or TorchScript file, "
                                                "checked against zoo.load")
    export.add_argument("run_dir", help="the run directory (e.g. runs/ppo_cartpole)")
    export.add_argument("--format", required=True, choices=FORMATS, help="onnx (needs the onnx package) or "
                                                                         "torchscript")
    export.add_argument("--which", choices=("last", "best"), default="last",
                        help="last: the latest checkpoint; best: best_model.pt (the best evaluation during training)")
    export.add_argument("--out", metavar="FILE", help="where to write (default RUN/export/policy.onnx or .pt)")
    export.add_argument("--check", type=int, default=DEFAULT_CHECK, metavar="N",
                        help=f"compare the file's actions with zoo.load's on N env observations (default "
                             f"{DEFAULT_CHECK}; 0: no check)")
    export.add_argument("--trust-imports", action="store_true",
                        help="import the modules the run's config names (only for run directories you trust)")
    export.add_argument("--while-training", action="store_true",
                        help="export a run that is still training (its latest checkpoint); refused without it")
    export.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return export


def main(args: argparse.Namespace) -> int:
    """Run ``zoo export`` with parsed ``args`` (see ``command.run_command``)."""
    from .command import run_command

    return run_command(args)


__all__ = ["CHECK_RELATIVE", "CHECK_TOLERANCE", "DEFAULT_CHECK", "FORMATS", "add_parser", "main"]
