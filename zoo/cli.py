"""`zoo run | list | eval`: parse arguments, load the config, call a pipeline.

Exit codes: 0 done; 2 bad input or a run that cannot go on (one line ``zoo: error: ...`` on stderr, naming the
problem and the fix; ``--debug`` or ``ZOO_DEBUG=1`` adds the traceback); 1 a bug in zoo (one line ``zoo: internal
error: ...`` asking for a report; the traceback with ``ZOO_DEBUG=1``); 128 + N after signal N saved the run
(130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
"""

from __future__ import annotations

import argparse
import errno
import gc
import json
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import __version__
from .config.flags import debug, env_flag
from .errors import REFUSED_WRITES, ZooError, first_line, refused_write


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (argparse's own print the usage too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"zoo: error: {message}: see `{self.prog} --help`\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="zoo", description="A plugin-based reinforcement-learning algorithm zoo.")
    parser.add_argument("--version", action="version", version=f"zoo {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = commands.add_parser("run", help="train from a config file (or resume a run directory)")
    run.add_argument("--config", help="config file: .py defining `config`, .yaml or .json")
    run.add_argument("--seed", type=int, help="override the config's seed")
    run.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a key: policy.learning_rate=1e-3"
    )
    run.add_argument("--exp-name", help="name of the run directory under runs_dir")
    run.add_argument("--device", help="cpu or cuda")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress line, only warnings and errors")
    run.add_argument("-v", "--verbose", action="store_true", help="also log every metrics row (debug)")
    run.add_argument("--tensorboard", action="store_true",
                     help="also write the metrics as TensorBoard scalars in RUN/tensorboard (logger.tensorboard)")
    run.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    run.add_argument("--repair", action="store_true",
                     help="with --resume: restore a damaged config.yaml from the checkpoint and keep the readable "
                          "metrics rows (says what it changed)")
    run.add_argument("--seeds", type=int, nargs="+", metavar="SEED",
                     help="train each seed into runs_dir/exp_name/seed_<k>/ (a folder of seeds only) and print a table "
                          "of the results; with --resume RUNS/EXP: continue those seeds")
    run.add_argument("--jobs", type=int, default=1, help="with --seeds: how many seeds train at once (processes)")
    run.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    listing = commands.add_parser("list", help="show registered policies, envs, pipelines, suites and plugins")
    listing.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    evaluation = commands.add_parser("eval", help="evaluate a run's saved policy deterministically")
    evaluation.add_argument("run_dir", help="the run directory (contains config.yaml and checkpoint.pt)")
    evaluation.add_argument("--episodes", type=int, default=10)
    evaluation.add_argument("--seed", type=int, default=None, help="evaluation seed (default: derived from the run's)")
    evaluation.add_argument("--step-limit", type=int, default=100_000,
                            help="fail when an episode has not ended after this many steps (default 100000)")
    evaluation.add_argument("--render", action="store_true", help="render with render_mode='human'")
    evaluation.add_argument("--which", choices=("last", "best"), default="last",
                            help="the latest checkpoint, or best_model.pt (the best evaluation during training)")
    evaluation.add_argument("--stochastic", action="store_true", help="sample actions instead of the policy's mode")
    evaluation.add_argument("--device", default="cpu", help="cpu or cuda")
    evaluation.add_argument("--json", metavar="FILE", default=None,
                            help="also write the episodes' returns, the seed and the protocol to FILE (JSON)")
    evaluation.add_argument("--trust-imports", action="store_true",
                            help="import the modules the run's config names (import_names, an env id's module:): "
                                 "only for run directories you trust")
    evaluation.add_argument("--video", metavar="DIR", default=None,
                            help="record the episodes as videos in DIR (rgb_array rendering; the video extra)")
    evaluation.add_argument("--video-format", choices=("mp4", "gif"), default="mp4")
    evaluation.add_argument("--fps", type=int, default=30, help="frames per second of --video")
    evaluation.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    configuring = commands.add_parser("config", help="every config key of a policy and pipeline: default, range, "
                                                     "meaning")
    configuring.add_argument("policy", help="a registered policy name (see zoo list)")
    configuring.add_argument("--pipeline", default=None, help="a pipeline it runs on (default: its own)")
    configuring.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    from .bench.command import add_parser as add_bench_parser  # light: the runner is imported when it runs

    add_bench_parser(commands)
    from .tune import add_parser as add_tune_parser  # light: optuna is imported only when a study runs

    add_tune_parser(commands)
    from .export import add_parser as add_export_parser  # light: onnx is imported only when a file is written

    add_export_parser(commands)

    plotting = commands.add_parser("plot", help="learning curves of runs (seeds as mean and band), or a table")
    plotting.add_argument("runs", nargs="+", metavar="RUN_OR_GLOB", help="run directories, folders of them, globs")
    plotting.add_argument("--x", default="env_steps", choices=("env_steps", "wall_time"))
    plotting.add_argument("--y", default=None, help="metric (default: eval_return_mean, else episode_return_mean)")
    plotting.add_argument("--out", default=None, help="write the figure (PNG, SVG, PDF); needs the plot extra")
    plotting.add_argument("--aggregate", action="store_true",
                          help="per algorithm x env: final eval IQM, mean, median, optimality gap with stratified-"
                               "bootstrap 95%% CIs over seeds (with --out: intervals, profiles, IQM curves)")
    plotting.add_argument("--json", metavar="FILE", default=None, help="with --aggregate: also write the numbers")
    plotting.add_argument("--reps", type=int, default=2000, help="with --aggregate: bootstrap resamples")
    plotting.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return parser


def _plot(args: argparse.Namespace) -> int:
    from .plot import aggregate_runs, plot
    from .run import ensure_logging

    ensure_logging(logging.WARNING)  # "zoo: left out ..." lines of run directories not yet trained

    if args.aggregate:
        if not 100 <= args.reps <= 1_000_000:
            raise ZooError(f"--reps must be between 100 and 1000000, got {args.reps}")
        print(aggregate_runs(list(args.runs), args.json, args.out, reps=args.reps))
        if args.json:
            print(f"wrote {args.json}")
        if args.out:
            print(f"wrote {args.out}")
        return 0
    if args.json:
        raise ZooError("--json goes with --aggregate: zoo plot RUNS --aggregate --json FILE")
    print(plot(list(args.runs), args.x, args.y, args.out))
    if args.out:
        print(f"wrote {args.out}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from .run import train
    from .run.children import write_summary

    if not args.config and not args.resume:
        raise ZooError("zoo run needs --config FILE or --resume RUN_DIR: e.g. zoo run --config configs/ppo_cartpole.py")
    if args.config and args.resume:
        raise ZooError("use either --config or --resume, not both: a resumed run uses its own config.yaml "
                       "(change keys with --set)")
    overrides: list[Any] = list(args.set)
    for flag, key in ((args.seed, "seed"), (args.exp_name, "exp_name"), (args.device, "device")):
        if flag is not None:
            overrides.append((key, flag))
    if args.tensorboard:
        overrides.append(("logger.tensorboard", True))
    if args.quiet and args.verbose:
        raise ZooError("use -q (quiet) or -v (verbose), not both")
    if args.quiet:
        overrides.append(("logger.progress", False))
    from .run import ensure_logging

    ensure_logging(logging.WARNING if args.quiet else logging.DEBUG if args.verbose else logging.INFO)
    if args.seeds:
        return _run_seeds(args, overrides)
    if args.jobs != 1:
        raise ZooError("--jobs goes with --seeds: e.g. zoo run --config FILE --seeds 0 1 2 --jobs 2")
    if args.repair and not args.resume:
        raise ZooError("--repair goes with --resume: zoo run --resume RUN_DIR --repair")
    summary = train(args.config, overrides, resume=args.resume, repair=args.repair)
    write_summary(summary)  # for a runner that started this run (zoo run --seeds, bench, tune): read, not parsed
    print(
        f"run_dir={summary['run_dir']} reason={summary['reason']} env_steps={summary['env_steps']} "
        f"wall_time={summary['wall_time']:.1f}s episode_return_mean={_rounded(summary['episode_return_mean'])} "
        f"eval_return_mean={_rounded(summary.get('eval_return_mean'))}"
    )
    if summary["reason"] == "interrupted":
        if summary["run_dir"] is not None:
            print(f"interrupted: checkpoint saved; continue with: zoo run --resume {summary['run_dir']}")
        else:  # a worker or actor rank under torchrun: rank 0 owns the run directory and says where it is
            print("interrupted: rank 0 saved the checkpoint")
        return int(summary.get("exit_code", 130))
    return 0


def _plural(kind: str) -> str:
    return kind[:-1] + "ies" if kind.endswith("y") else kind + "s"


def _rounded(value: float | None) -> str:
    return "None" if value is None else f"{value:.2f}"


def _run_seeds(args: argparse.Namespace, overrides: list[Any]) -> int:
    from .lifetime import check_counts
    from .run.seeds import failed, run_seeds, table

    check_counts(len(args.seeds), args.jobs)
    if args.seed is not None:
        raise ZooError("--seeds gives the seeds: drop --seed (e.g. zoo run --config FILE --seeds 0 1 2)")
    if args.repair:
        raise ZooError("--repair continues one damaged run: zoo run --resume RUNS/EXP/seed_K --repair, no --seeds")
    results = run_seeds(args.config, overrides, list(args.seeds), args.jobs, resume=args.resume)
    print(table(results))
    if failed(results):
        return 1
    interrupted = [row for row in results if row["reason"] == "interrupted"]
    return int(interrupted[0].get("exit_code", 130)) if interrupted else 0


def _list() -> int:
    from .plugins import load_plugins
    from .registry import ENV_REGISTRY, MODEL_REGISTRY, PIPELINE_REGISTRY, POLICY_REGISTRY, SUITE_REGISTRY

    report = load_plugins()
    for registry in (POLICY_REGISTRY, PIPELINE_REGISTRY, ENV_REGISTRY, MODEL_REGISTRY):
        print(f"{_plural(registry.kind)}:")
        rows = list(registry.items())
        if not rows:
            print("  (none)" + ("  — any Gymnasium id also works" if registry is ENV_REGISTRY else ""))
        for name, obj, source in rows:
            where = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
            line = f"  {name:<20} {source:<16} {where}"
            if registry is POLICY_REGISTRY:
                line += f"  pipelines: {', '.join(getattr(obj, 'pipelines', ()))}"
            print(line)
    print("benchmark suites:  (zoo bench --list shows their entries)")
    for name, entries, source in SUITE_REGISTRY.items():
        print(f"  {name:<20} {source:<16} {len(entries)} entries")
    print("plugins:")
    for line in report.lines():
        print(f"  {line}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    import numpy as np

    from .envs import EnvSpec
    from .pipelines.evaluator import evaluate_policy
    from .pipelines.process import component_seed
    from .run.load import load_agent

    if not 1 <= args.episodes <= 1_000_000:
        raise ZooError(f"--episodes must be between 1 and 1000000, got {args.episodes}")
    if args.seed is not None and not 0 <= args.seed < 2**63:
        raise ZooError(f"--seed must be an integer from 0 to 2**63 - 1, got {args.seed}")
    if args.step_limit < 1:
        raise ZooError(f"--step-limit must be at least 1, got {args.step_limit}")
    agent = load_agent(args.run_dir, args.device, args.which, args.trust_imports)
    cfg, policy, normalize = agent.config, agent.policy, agent.normalize
    seed = component_seed(cfg.seed, 0, "eval") if args.seed is None else args.seed
    env = EnvSpec.from_config(cfg)
    if args.video is not None:
        from .video import record_episodes

        if not 1 <= args.fps <= 1000:
            raise ZooError(f"--fps must be between 1 and 1000, got {args.fps}")
        written = record_episodes(
            policy, env, args.video, args.episodes, seed, normalize_obs=normalize, deterministic=not args.stochastic,
            fmt=args.video_format, fps=args.fps, step_limit=args.step_limit,
        )
        for path, episode_return in written:
            print(f"{path} return={episode_return:.4f}")
        returns = [episode_return for _, episode_return in written]
        print(f"mean_return={float(np.mean(returns)):.4f} std_return={float(np.std(returns)):.4f} "
              f"episodes={len(returns)}")
        return 0
    returns = evaluate_policy(
        policy, env, args.episodes, seed, normalize_obs=normalize, vector_mode=cfg.pipeline.get("vector_mode", "auto"),
        step_limit=args.step_limit, render=args.render,
        deterministic=not args.stochastic,
    )
    if args.json is not None:
        from .run.state_files import atomic_write_text

        report = {"returns": [float(r) for r in returns], "episodes": len(returns), "seed": seed,
                  "deterministic": not args.stochastic, "which": args.which, "env": cfg.env.id}
        try:
            atomic_write_text(Path(args.json), json.dumps(report) + "\n")
        except OSError as error:
            raise ZooError(refused_write(args.json, error, "choose another --json")) from None
    print(f"mean_return={float(np.mean(returns)):.4f} std_return={float(np.std(returns)):.4f} episodes={len(returns)}")
    return 0


def _show_warning(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    # zoo's own warnings (a plugin that failed to load) are one line for the user, without zoo's file and line.
    from .plugins import ZooPluginWarning

    if issubclass(category, ZooPluginWarning):
        print(f"zoo: warning: {message}", file=sys.stderr)
    else:
        _ORIGINAL_SHOWWARNING(message, category, *args, **kwargs)


_ORIGINAL_SHOWWARNING = warnings.showwarning


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point of ``zoo``."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        env_flag("ZOO_DEBUG")
    except ZooError as error:  # a misspelt switch: said before anything runs
        print(f"zoo: error: {error}", file=sys.stderr)
        return 2
    previous = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "list":
            return _list()
        if args.command == "plot":
            return _plot(args)
        if args.command == "tune":
            from .tune import main as tune_main

            return tune_main(args)
        if args.command == "export":
            from .export import main as export_main

            return export_main(args)
        if args.command == "bench":
            from .bench.command import main as bench_main

            return bench_main(args)
        if args.command == "config":
            from .describe import describe

            print(describe(args.policy, args.pipeline))
            return 0
        return _eval(args)
    except ZooError as error:
        if args.debug or debug():
            traceback.print_exc()
        print(f"zoo: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:  # a name that no file can have (given, or found in a run directory)
            return _error(args, f"a path is too long for this system ('{str(error.filename or '')[:80]}...'): use "
                                "shorter names")
        if error.errno not in REFUSED_WRITES:
            return _internal_error(args, error)
        # The system refused a write (a full disk, a quota, a read-only place): the user's to fix, not a bug.
        return _error(args, refused_write(error.filename, error, "free space or choose another place"))
    except Exception as error:  # not the user's input: a bug in zoo (or in a plugin it called)
        return _internal_error(args, error)
    except KeyboardInterrupt:
        print("zoo: interrupted: the last checkpoint is kept", file=sys.stderr)
        return 130
    finally:
        warnings.showwarning = previous


def _error(args: argparse.Namespace, line: str) -> int:
    if args.debug or debug():
        traceback.print_exc()
    print(f"zoo: error: {line}", file=sys.stderr)
    return 2


def _internal_error(args: argparse.Namespace, error: BaseException) -> int:
    if args.debug or debug():
        traceback.print_exc()
    print(f"zoo: internal error: {type(error).__name__}: {first_line(error, 300)}: this is a bug; please "
          f"report it with the command you ran (ZOO_DEBUG=1 shows the traceback)", file=sys.stderr)
    return 1


def console_main() -> None:
    """``zoo`` and ``python -m zoo``: ``main``, then exit without the interpreter's final garbage collection.

    ``gc.freeze()`` moves every live object out of the collector's reach, so the shutdown does not traverse the
    hundreds of thousands of objects torch creates (about 0.3 s of every command here); files, handlers and
    ``atexit`` hooks are closed and run as usual. Only for the process-ending entry points: ``main`` itself may
    be called many times in one process (tests) and leaves the collector alone.

    Before anything imports numpy, numpy's BLAS gets one thread unless ``OPENBLAS_NUM_THREADS`` is set (worker and
    job processes inherit it). It serves only zoo's numpy forwards of small networks (acting, valuing a rollout),
    where a second BLAS thread gains nothing, and with two zoo processes on this 2-core machine (``--jobs 2``,
    DPPO's workers) the threads oversubscribe the cores: two PPO CartPole runs side by side took 7.5 s each with
    OpenBLAS's default threads against 3.0 s with one. torch's ``torch_threads`` defaults to 1 for the same reason.
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    code = main()
    sys.stdout.flush()
    launch = sys.modules.get("zoo.run.launch")  # imported only by a command that runs a pipeline
    if launch is not None:
        launch.end_rank(code)  # a torchrun rank ends here, without the interpreter's teardown
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    console_main()
