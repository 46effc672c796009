"""Predict latency of a trained policy: ``zoo.load(run).predict``, the TorchScript file and the ONNX file under
onnxruntime, side by side in one run (one thread each: torch's ``torch_threads`` default, onnxruntime's
``intra_op_num_threads=1``).

Usage:
    python benchmarks/export_bench.py [--runs RUN ...] [--repeats 2000]

Without ``--runs`` it trains two small runs first (PPO on CartPole-v1, 4k env steps; SAC on Pendulum-v1, 1k env
steps; 256x256 networks as in configs/sac_pendulum.py) in a temporary folder. For each run: microseconds per call
for one observation and for a batch of 256 (median of 5 rounds of ``--repeats`` calls; batch rounds use a tenth of
them), and each alternative's ratio to zoo.load's. The actions of the three are compared as ``zoo export --check``
does before timing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import zoo  # noqa: E402
from zoo.envs import EnvSpec  # noqa: E402
from zoo.export.command import export_run, sample_observations  # noqa: E402
from zoo.export.formats import ExportedRunner  # noqa: E402
from zoo.export.graph import graph_arrays  # noqa: E402


def _train(root: Path) -> list[Path]:
    common = ["logger.progress=false", f"runs_dir={root}", "pipeline.eval_every=0"]
    ppo = zoo.train("configs/ppo_cartpole.py", [*common, "pipeline.max_env_steps=4096", "exp_name=ppo_cartpole"])
    sac = zoo.train("configs/sac_pendulum.py", [*common, "pipeline.max_env_steps=1000", "exp_name=sac_pendulum"])
    return [Path(ppo["run_dir"]), Path(sac["run_dir"])]


def _time(call: Callable[[], object], repeats: int) -> float:
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            call()
        rounds.append((time.perf_counter() - start) / repeats * 1e6)
    return statistics.median(rounds)


def bench(run: Path, repeats: int) -> None:
    agent = zoo.load(run)
    spec = EnvSpec.from_config(agent.config)
    observations = sample_observations(spec, 256, seed=123)
    batch_obs = np.stack(observations).astype(np.float32)
    one_obs = batch_obs[0]
    runners = {}
    for fmt in ("torchscript", "onnx"):
        with tempfile.TemporaryDirectory() as folder:
            result = export_run(run, fmt, Path(folder) / "policy", check=256)
            runners[fmt] = ExportedRunner(fmt, result.path.read_bytes(), [i.name for i in result.inputs])
            inputs = result.inputs
    batch = graph_arrays(inputs, observations)
    one = [a[:1] for a in batch]
    rows = {
        "zoo.load predict": (lambda: agent.predict(one_obs), lambda: agent.predict(batch_obs)),
        "TorchScript": (lambda: runners["torchscript"](one), lambda: runners["torchscript"](batch)),
        "onnxruntime": (lambda: runners["onnx"](one), lambda: runners["onnx"](batch)),
    }
    print(f"\n{run.name} ({agent.config.policy.type} on {spec.id}): microseconds per call, ratio to zoo.load")
    print(f"{'':18s} {'1 obs':>10s} {'ratio':>7s} {'256 obs':>10s} {'ratio':>7s}")
    base = None
    for name, (single, many) in rows.items():
        t1, t256 = _time(single, repeats), _time(many, max(repeats // 10, 10))
        base = base or (t1, t256)
        print(f"{name:18s} {t1:10.1f} {base[0] / t1:6.2f}x {t256:10.1f} {base[1] / t256:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="*", help="run directories (default: train two small ones)")
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as root:
        runs = [Path(r) for r in args.runs] if args.runs else _train(Path(root))
        print(f"torch {torch.__version__}, one thread; ratio > 1: faster than zoo.load(run).predict")
        for run in runs:
            bench(run, args.repeats)


if __name__ == "__main__":
    main()
