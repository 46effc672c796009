"""Where one SAC update's time goes (Hopper's sizes: 256x256 networks, batch 256), in fp32 and bf16, and what
``torch.compile`` of the update step does to it.

Overview:
    Times ``learn`` per update without a profiler (the reference), then profiles 100 updates with
    ``torch.profiler`` and splits the time into: the minibatch draw (``sample_minibatch``: numpy indexing, tensor
    wrapping), the optimiser (``FlatOptimizer.step`` and the gradient norm), matmuls (``mm``, ``bmm``, ``addmm``,
    ``baddbmm`` forward and backward), casts (``copy_``/``_to_copy``: bf16 autocast's), other tensor operations
    (elementwise, reductions), and the rest the profiler records: autograd's engine and the dispatcher around the
    operators. Shares are of the profiler's total self time; the profiler's own cost inflates every operator a
    little, so the ms per update are measured without it (the profiled ms are printed for scale).
    ``--compile`` also times ``torch.compile(policy.update)`` (compile time included, then per update).

    python benchmarks/update_profile.py [--updates 100] [--compile]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from precision_bench import BOX3, _policy, _replay, time_updates  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from zoo.plugins import load_plugins  # noqa: E402
from zoo.policies.base import LearnContext  # noqa: E402

MATMULS = {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"}
CASTS = {"aten::copy_", "aten::_to_copy"}


def _labelled(policy) -> None:
    """Wrap the minibatch draw and the optimiser's work in named profiler ranges."""
    draw = policy.sample_minibatch

    def sample_minibatch(replay):
        with record_function("zoo::sampling"):
            return draw(replay)

    policy.sample_minibatch = sample_minibatch
    for optimizer in (policy.actor_optimizer, policy.critic_optimizer):
        step, norm = optimizer.step, optimizer.clip_grad_norm

        def labelled_step(step=step):
            with record_function("zoo::optimiser"):
                step()

        def labelled_norm(max_norm, norm=norm):
            with record_function("zoo::optimiser"):
                return norm(max_norm)

        optimizer.step, optimizer.clip_grad_norm = labelled_step, labelled_norm


def breakdown(precision: str, updates: int) -> dict[str, float]:
    replay = _replay((11,), BOX3)
    policy = _policy("sac", (11,), BOX3, [256, 256], 256, precision)
    per_update = min(time_updates(policy, replay, updates) for _ in range(2))
    _labelled(policy)
    with profile(activities=[ProfilerActivity.CPU]):  # the profiler's own first-use costs, not measured
        policy.learn(replay, LearnContext(updates=10))
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        policy.learn(replay, LearnContext(updates=updates))
    profiled = (time.perf_counter() - start) * 1e6  # microseconds, as the profiler's times
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)  # every recorded microsecond once
    inside = _ops_inside(prof, ("zoo::sampling", "zoo::optimiser"))
    sampling = sum(e.cpu_time_total for e in events if e.key == "zoo::sampling")
    optimiser = sum(e.cpu_time_total for e in events if e.key == "zoo::optimiser")
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMULS) - inside.get("matmul", 0.0)
    casts = sum(e.self_cpu_time_total for e in events if e.key in CASTS) - inside.get("casts", 0.0)
    other = sum(e.self_cpu_time_total for e in events if e.key.startswith("aten::") and e.key not in MATMULS
                and e.key not in CASTS) - inside.get("other", 0.0)
    parts = {"sampling": sampling, "optimiser": optimiser, "matmuls": matmul, "casts": casts,
             "other operators": other}
    parts["dispatcher, autograd, Python"] = total - sum(parts.values())  # autograd::* events, ranges' own time
    return {"ms per update": per_update * 1e3, **{key: value / total for key, value in parts.items()},
            "profiled ms per update": profiled / updates / 1e3}


def _ops_inside(prof, names: tuple[str, ...]) -> dict[str, float]:
    """Self times of operators that ran inside the named ranges, by kind."""
    totals: dict[str, float] = {}
    events = prof.events()
    ranges = [(e.time_range.start, e.time_range.end) for e in events if e.name in names]
    for event in events:
        if not event.name.startswith("aten::"):
            continue
        if any(start <= event.time_range.start and event.time_range.end <= end for start, end in ranges):
            kind = "matmul" if event.name in MATMULS else "casts" if event.name in CASTS else "other"
            totals[kind] = totals.get(kind, 0.0) + event.self_cpu_time_total
    return totals


def compiled(precision: str, updates: int) -> tuple[float, float, float]:
    """(compile seconds, ms per update eager, ms per update with the update step compiled)."""
    replay = _replay((11,), BOX3)
    eager = _policy("sac", (11,), BOX3, [256, 256], 256, precision)
    policy = _policy("sac", (11,), BOX3, [256, 256], 256, precision)
    policy.update = torch.compile(policy.update)
    start = time.perf_counter()
    policy.learn(replay, LearnContext(updates=3))
    compile_s = time.perf_counter() - start
    best_eager = best_compiled = float("inf")
    for _ in range(2):
        best_eager = min(best_eager, time_updates(eager, replay, updates))
        best_compiled = min(best_compiled, time_updates(policy, replay, updates))
    return compile_s, best_eager * 1e3, best_compiled * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_plugins()
    results = {precision: breakdown(precision, args.updates) for precision in ("fp32", "bf16")}
    print(f"SAC update, Hopper sizes (256x256, batch 256), one thread, torch {torch.__version__}")
    print(f"{'':<30} {'fp32':>8} {'bf16':>8}")
    for key in results["fp32"]:
        fp32, bf16 = results["fp32"][key], results["bf16"][key]
        cells = f"{fp32:8.2f} {bf16:8.2f}" if key.endswith("per update") else f"{fp32:8.0%} {bf16:8.0%}"
        print(f"{key:<30} {cells}")
    if args.compile:
        for precision in ("fp32", "bf16"):
            compile_s, eager_ms, compiled_ms = compiled(precision, args.updates)
            print(f"torch.compile(update), {precision}: {compile_s:.0f} s to compile, {compiled_ms:.2f} ms per update "
                  f"against {eager_ms:.2f} eager ({eager_ms / compiled_ms:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
