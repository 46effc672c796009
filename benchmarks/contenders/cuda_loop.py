"""One contender of the GPU check, in one process: SAC on Hopper-v5 through ``zoo run``, timed and profiled inside.

The off-policy pipeline's iterations (``steps_per_iteration`` env steps each, one update per step) are timed one by
one, the device synchronised at each end: after ``--random`` random steps and ``--warmup`` learning steps (the
compile), ``--timed`` learning steps give the loop's rate (env step + acting + update, steps per second). Then,
with ``--profile``, one iteration under cProfile (the host's time per function) and one under torch's profiler
(each operator's host time and each kernel's device time); last, ``--updates`` learning calls of one update each on
the run's final replay, back to back with no env step (updates per second: the learning step alone, its per-call
work included). Prints one JSON line; appends the profiles to ``--report``.

With ``--config FILE`` the run is that config's (its env, networks, batch, update intervals: say ACE at its
authors' settings, ``configs/sac_ace_official_hopper.py``) with the same phases: the file's random steps, replay
size, evaluations and checkpoints give way to the phases above.

    python benchmarks/cuda_loop.py --name cuda_graphs --device cuda --compile on [--zoo PATH] [--profile]
        [--config configs/sac_ace_official_hopper.py]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEPS_PER_ITERATION = 250


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--compile", default="on", choices=("on", "off"))
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--graphs", default="1", help="1: CUDA graphs (accel.cuda_graphs), 0: none")
    parser.add_argument("--zoo", default=str(ROOT), help="the checkout whose zoo package to time")
    parser.add_argument("--random", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--timed", type=int, default=1000)
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--report", default=None, help="text file the profiles are appended to")
    parser.add_argument("--config", default=None, help="an off-policy config file to time instead of SAC 256x256")
    args = parser.parse_args()
    os.environ["ZOO_CUDA_GRAPHS"] = args.graphs  # what a checkout before the accel section read (--zoo)
    sys.path.insert(0, args.zoo)
    import torch

    from zoo.cli import main as zoo_main
    from zoo.pipelines.serial_offpolicy import SerialOffPolicyPipeline

    cuda = args.device == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    phases = (["random"] * (args.random // STEPS_PER_ITERATION) + ["warmup"] * (args.warmup // STEPS_PER_ITERATION)
              + ["timed"] * (args.timed // STEPS_PER_ITERATION) + (["cprofile", "torchprof"] if args.profile else []))
    result: dict = {"contender": args.name, "zoo": args.zoo, "timed_seconds": 0.0, "timed_steps": 0}
    report: list[str] = []
    original = SerialOffPolicyPipeline.iterate
    count = [0]

    def iterate(self: SerialOffPolicyPipeline) -> dict:
        phase = phases[count[0]]
        count[0] += 1
        sync()
        start = time.perf_counter()
        if phase == "cprofile":
            profiler = cProfile.Profile()
            profiler.enable()
            out = original(self)
            sync()
            profiler.disable()
            text = io.StringIO()
            stats = pstats.Stats(profiler, stream=text)
            stats.sort_stats("cumulative").print_stats(45)
            stats.sort_stats("tottime").print_stats(30)
            report.append(f"== {args.name}: cProfile of {STEPS_PER_ITERATION} loop steps\n{text.getvalue()}")
        elif phase == "torchprof":
            activities = [torch.profiler.ProfilerActivity.CPU]
            if cuda:
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            with torch.profiler.profile(activities=activities) as profiler:
                out = original(self)
                sync()
            averages = profiler.key_averages()
            on_device = [e for e in averages if str(getattr(e, "device_type", "")).endswith("CUDA")]
            device_us = sum(getattr(e, "self_device_time_total", 0) or 0 for e in on_device)
            kernels = sum(e.count for e in on_device)
            result["profile_device_us_per_step"] = round(device_us / STEPS_PER_ITERATION, 1)
            result["profile_kernels_per_step"] = round(kernels / STEPS_PER_ITERATION, 1)
            for key in ("self_device_time_total", "self_cpu_time_total"):
                try:
                    table = averages.table(sort_by=key, row_limit=35, max_name_column_width=70)
                except Exception as exc:  # noqa: BLE001 - a key this torch does not know
                    table = f"({key}: {exc})"
                report.append(f"== {args.name}: torch profiler, {STEPS_PER_ITERATION} loop steps, by {key}\n{table}")
        else:
            out = original(self)
            sync()
        seconds = time.perf_counter() - start
        result.setdefault("iterations", []).append([phase, round(seconds, 3)])
        if phase == "timed":
            result["timed_seconds"] += seconds
            result["timed_steps"] += STEPS_PER_ITERATION
        if count[0] == len(phases):
            learn_rates(self)
        return out

    def learn_rates(pipeline: SerialOffPolicyPipeline) -> None:
        policy, replay = pipeline.policy, pipeline.replay
        for _ in range(20):
            policy.learn(replay, pipeline.learn_context(1))
        sync()
        start = time.perf_counter()
        for _ in range(args.updates):
            policy.learn(replay, pipeline.learn_context(1))
        sync()
        result["updates_per_s"] = round(args.updates / (time.perf_counter() - start), 1)
        start = time.perf_counter()
        policy.learn(replay, pipeline.learn_context(args.updates))
        sync()
        result["updates_per_s_one_call"] = round(args.updates / (time.perf_counter() - start), 1)

    SerialOffPolicyPipeline.iterate = iterate
    runs = Path(tempfile.mkdtemp(prefix="zoo_cuda_loop_"))
    steps = len(phases) * STEPS_PER_ITERATION
    config = {"env": {"id": "Hopper-v5"}, "policy": {"type": "sac", "hidden_sizes": [256, 256], "batch_size": 256}}
    if args.config:
        from zoo.config import load_config_file

        config = json.loads(json.dumps(load_config_file(args.config)))
    config.update({"exp_name": args.name, "seed": 0, "runs_dir": str(runs), "device": args.device, "torch_threads": 1})
    config["policy"].update({"compile": args.compile, "precision": args.precision})
    if (Path(args.zoo) / "zoo" / "accel").is_dir():  # the config key, where the checkout has it
        config["accel"] = {"cuda_graphs": args.graphs != "0"}
    config.setdefault("pipeline", {}).update({
        "buffer_size": steps, "learning_starts": args.random, "random_steps": None,  # random until learning_starts
        "steps_per_iteration": STEPS_PER_ITERATION,
        "max_env_steps": steps, "eval_every": 0, "checkpoint_every": 0, "save_replay": False})
    path = runs / "config.json"
    path.write_text(json.dumps(config))
    code = zoo_main(["run", "--config", str(path), "-q"])
    result["exit"] = code
    if result["timed_steps"]:
        result["loop_steps_per_s"] = round(result["timed_steps"] / result["timed_seconds"], 1)
    environment = runs / args.name / "environment.json"
    if environment.exists():
        session = json.loads(environment.read_text())["sessions"][-1]
        result.update({key: session.get(key) for key in ("compile", "compile_seconds", "cuda_graphs",
                                                         "compile_failure", "precision")})
    if args.report and report:
        with open(args.report, "a", encoding="utf-8") as file:
            file.write("\n\n".join(report) + "\n\n")
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
