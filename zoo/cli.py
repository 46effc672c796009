"""`zoo run | list | eval`: parse arguments, load the config, call a pipeline. Bad input: one line, exit 2."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from . import __version__
from .errors import ZooError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zoo", description="A plugin-based reinforcement-learning algorithm zoo.")
    parser.add_argument("--version", action="version", version=f"zoo {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser("run", help="train from a config file (or resume a run directory)")
    run.add_argument("--config", help="config file: .py defining `config`, .yaml or .json")
    run.add_argument("--seed", type=int, help="override the config's seed")
    run.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a key: policy.learning_rate=1e-3"
    )
    run.add_argument("--exp-name", help="name of the run directory under runs_dir")
    run.add_argument("--device", help="cpu or cuda")
    run.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    run.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    listing = commands.add_parser("list", help="show registered policies, envs, pipelines and plugins")
    listing.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    evaluation = commands.add_parser("eval", help="evaluate a run's saved policy deterministically")
    evaluation.add_argument("run_dir", help="the run directory (contains config.yaml and checkpoint.pt)")
    evaluation.add_argument("--episodes", type=int, default=10)
    evaluation.add_argument("--seed", type=int, default=None, help="evaluation seed (default: config seed + 1)")
    evaluation.add_argument("--render", action="store_true", help="render with render_mode='human'")
    evaluation.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return parser


def _run(args: argparse.Namespace) -> int:
    from .experiment import train

    if not args.config and not args.resume:
        raise ZooError("zoo run needs --config FILE or --resume RUN_DIR: e.g. zoo run --config configs/ppo_cartpole.py")
    overrides = list(args.set)
    for flag, key in ((args.seed, "seed"), (args.exp_name, "exp_name"), (args.device, "device")):
        if flag is not None:
            overrides.append((key, flag))
    summary = train(args.config, overrides, resume=args.resume)
    print(
        f"run_dir={summary['run_dir']} reason={summary['reason']} env_steps={summary['env_steps']} "
        f"wall_time={summary['wall_time']:.1f}s episode_return_mean={summary['episode_return_mean']}"
    )
    if summary["reason"] == "interrupted":
        print(f"interrupted: checkpoint saved; continue with: zoo run --resume {summary['run_dir']}")
        return 130
    return 0


def _list() -> int:
    from .plugins import load_plugins
    from .registry import ENV_REGISTRY, MODEL_REGISTRY, PIPELINE_REGISTRY, POLICY_REGISTRY

    report = load_plugins()
    for registry in (POLICY_REGISTRY, PIPELINE_REGISTRY, ENV_REGISTRY, MODEL_REGISTRY):
        print(f"{registry.kind}s:")
        rows = list(registry.items())
        if not rows:
            print("  (none)" + ("  — any Gymnasium id also works" if registry is ENV_REGISTRY else ""))
        for name, obj, source in rows:
            print(f"  {name:<20} {source:<16} {getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}")
    print("plugins:")
    for line in report.lines():
        print(f"  {line}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    import numpy as np

    from .experiment import load_run
    from .pipelines.evaluator import evaluate_policy

    if args.episodes < 1:
        raise ZooError(f"--episodes must be at least 1, got {args.episodes}")
    cfg, policy, obs_state = load_run(args.run_dir)
    normalizer = None
    if obs_state is not None:
        from .envs import NormalizeObservation

        normalizer = NormalizeObservation.frozen(obs_state, cfg.pipeline.clip_obs)
    seed = cfg.seed + 1 if args.seed is None else args.seed
    returns = evaluate_policy(cfg, policy, normalizer, args.episodes, seed=seed, render=args.render)
    print(f"mean_return={float(np.mean(returns)):.4f} std_return={float(np.std(returns)):.4f} episodes={len(returns)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point of ``zoo``."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "list":
            return _list()
        return _eval(args)
    except ZooError as error:
        if args.debug:
            traceback.print_exc()
        print(f"zoo: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("zoo: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
