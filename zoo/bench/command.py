"""``zoo bench``: its arguments and what it runs (``zoo.bench.runner.bench``, with ``--report``
``zoo.bench.report.report``, with ``--list`` ``zoo.bench.suites.listing``). Importing this module costs nothing (the
CLI builds its parser from it).

The arguments are checked before anything is read or written: ``--seeds`` and ``--jobs`` are bounded
(``zoo.lifetime.check_counts``) (a 23-digit ``--seeds`` would otherwise try to plan that many runs), and a path
(``--runs-dir``, ``--report``, ``--results``) that no file can have on this system is one line, not the system's
``ENAMETOOLONG`` from deep inside.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import ConfigError, ZooError
from ..lifetime import check_counts

NAME_MAX, PATH_MAX = 255, 4096  # bytes of one path component and of a whole path (Linux)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add ``bench`` to ``zoo``'s sub-commands; the parser added."""
    benching = commands.add_parser("bench", help="run benchmark suites (every entry x seed, resumable)")
    benching.add_argument("suites", nargs="*", metavar="SUITE",
                          help="classic, mujoco, ace, memory, hl_gauss, masks, or a plugin's (zoo bench --list)")
    benching.add_argument("--list", action="store_true",
                          help="list every suite (or the SUITEs given) with its source (built-in or the plugin's "
                               "name) and entries, and train nothing")
    benching.add_argument("--seeds", type=int, default=None,
                          help="seeds 0 .. N-1 of every entry (default: each entry's own, 5 or 10)")
    benching.add_argument("--jobs", type=int, default=1, help="runs at once (processes)")
    benching.add_argument("--runs-dir", default="runs", help="runs go to RUNS_DIR/bench/<entry>/seed_<k>")
    benching.add_argument("--report", metavar="FILE.md", default=None,
                          help="train nothing: write the suites' table from their finished runs (docs/benchmarks.md)")
    benching.add_argument("--results", metavar="DIR", default=None,
                          help="keep each evaluated run's small files in DIR/<entry>/seed_<k>/ (to commit); with "
                               "--report: read the table from DIR instead of run directories")
    benching.add_argument("--shard", metavar="K/M", default=None,
                          help="train only the K-th of M disjoint slices of the runs (one per machine, e.g. a SLURM "
                               "array task, into one shared --runs-dir); --report combines them")
    benching.add_argument("--entries", nargs="+", metavar="ENTRY", default=None,
                          help="train only these entries of the suites (e.g. sac_hopper td3_hopper), to choose "
                               "what finishes first")
    benching.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return benching


def check_path(flag: str, value: str | None) -> None:
    """One ZooError line when the path ``value`` of ``flag`` cannot name a file on Linux: a component over
    ``NAME_MAX`` bytes or a path over ``PATH_MAX``."""
    if value is None:
        return
    encoded = os.fsencode(value)
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > NAME_MAX or len(encoded) > PATH_MAX:
        what = (f"a name of {len(longest)} bytes" if len(longest) > NAME_MAX else f"{len(encoded)} bytes in all")
        raise ZooError(f"{flag} '{value[:40]}...' is too long for a path ({what}; the system allows {NAME_MAX} per "
                       f"name and {PATH_MAX} in all): choose a shorter one")


def main(args: argparse.Namespace) -> int:
    """Run ``zoo bench`` with parsed ``args``; its exit code."""
    if args.list:
        from .suites import listing

        print("\n".join(listing(list(args.suites))))
        return 0
    if not args.suites:
        raise ConfigError("zoo bench needs a SUITE to train or report, e.g. zoo bench classic: zoo bench --list "
                          "shows every suite")
    for flag, value in (("--runs-dir", args.runs_dir), ("--report", args.report), ("--results", args.results)):
        check_path(flag, value)
    check_counts(args.seeds, args.jobs)
    if args.report is not None:
        if args.shard is not None or args.entries is not None:
            dropped = "--shard" if args.shard is not None else "--entries"
            raise ConfigError(f"--report tables whole suites from every finished run, whichever runner trained it: "
                              f"drop {dropped}")
        from .report import report

        written = report(list(args.suites), args.runs_dir, args.report, args.seeds, results=args.results)
        print(f"wrote {written}")
        return 0
    from .runner import bench, parse_shard

    shard = None if args.shard is None else parse_shard(args.shard)
    return bench(list(args.suites), args.seeds, args.jobs, args.runs_dir, shard=shard, results=args.results,
                 only=args.entries)
