"""Speed of zoo's gae and V-trace targets against plain loops, DI-engine and TorchRL, measured in one run.

Usage:
    python benchmarks/rl_utils_bench.py [--quick] [--numpy-scan]

DI-engine (0.5.3) and TorchRL are optional: each is timed when importable (e.g. run this file with the
interpreter of a separate virtualenv where they are installed). Everything runs with one torch thread, on
float32 (T, B) inputs with episode ends at random (~2% of steps). Printed: median milliseconds per call and
the speed-up of zoo over each peer (peer time / zoo time), plus whether the targets hold: >= 5x over DI-engine
and >= 2x over the best plain loop. The header says whether zoo's compiled loops or its numpy scan ran.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from zoo.rl_utils import gae, gae_data, vtrace_nstep_return  # noqa: E402

SIZES = [(128, 8), (2048, 8), (128, 256), (2048, 64), (16384, 1)]
GAMMA, LAMBDA = 0.99, 0.95


def median_ms(fn: Callable[[], object], budget_s: float, min_reps: int = 5) -> float:
    fn()  # warm up
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 2000:
            break
    return statistics.median(times) * 1e3


def torch_loop(coeff: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(inputs)
    acc = torch.zeros_like(inputs[0])
    for t in range(inputs.shape[0] - 1, -1, -1):
        acc = inputs[t] + coeff[t] * acc
        out[t] = acc
    return out


def numpy_loop(coeff: np.ndarray, inputs: np.ndarray) -> np.ndarray:
    out = np.empty_like(inputs)
    acc = np.zeros_like(inputs[0])
    for t in range(inputs.shape[0] - 1, -1, -1):
        acc = inputs[t] + coeff[t] * acc
        out[t] = acc
    return out


def gae_cases(value, next_value, reward, done):
    """name -> callable computing GAE advantages; plain loops precompute delta and the factor vectorised."""

    def plain_torch():
        delta = reward + GAMMA * (1 - done) * next_value - value
        return torch_loop(GAMMA * LAMBDA * (1 - done), delta)

    def plain_numpy():
        v, nv, r, d = (x.numpy() for x in (value, next_value, reward, done))
        delta = r + GAMMA * (1 - d) * nv - v
        return torch.from_numpy(numpy_loop(GAMMA * LAMBDA * (1 - d), delta))

    cases = {
        "zoo": lambda: gae(gae_data(value, next_value, reward, done, done), GAMMA, LAMBDA),
        "torch loop": plain_torch,
        "numpy loop": plain_numpy,
    }
    try:
        from ding.rl_utils import gae as ding_gae
        from ding.rl_utils import gae_data as ding_gae_data

        # DI-engine's gae overwrites next_value in place, so it gets a fresh copy each call.
        def ding() -> torch.Tensor:
            return ding_gae(ding_gae_data(value, next_value.clone(), reward, done, done), GAMMA, LAMBDA)

        cases["DI-engine"] = ding
    except ImportError:
        pass
    try:
        from torchrl.objectives.value.functional import (
            generalized_advantage_estimate,
            vec_generalized_advantage_estimate,
        )

        # TorchRL wants batch-first (B, T, 1) with boolean done/terminated.
        bt = [x.T.unsqueeze(-1).contiguous() for x in (value, next_value, reward)]
        done_bt = done.T.unsqueeze(-1).bool().contiguous()
        cases["TorchRL"] = lambda: generalized_advantage_estimate(GAMMA, LAMBDA, *bt, done_bt, done_bt)
        cases["TorchRL vec"] = lambda: vec_generalized_advantage_estimate(GAMMA, LAMBDA, *bt, done_bt, done_bt)
    except ImportError:
        pass
    return cases


def vtrace_cases(rhos, cs, reward, values):
    def plain_torch():
        delta = rhos * (reward + GAMMA * values[1:] - values[:-1])
        return values[:-1] + torch_loop(GAMMA * LAMBDA * cs, delta)

    def plain_numpy():
        r, c, rw, v = (x.numpy() for x in (rhos, cs, reward, values))
        delta = r * (rw + GAMMA * v[1:] - v[:-1])
        return torch.from_numpy(v[:-1] + numpy_loop(GAMMA * LAMBDA * c, delta))

    cases = {
        "zoo": lambda: vtrace_nstep_return(rhos, cs, reward, values, GAMMA, LAMBDA),
        "torch loop": plain_torch,
        "numpy loop": plain_numpy,
    }
    try:
        from ding.rl_utils.vtrace import vtrace_nstep_return as ding_vtrace

        cases["DI-engine"] = lambda: ding_vtrace(rhos, cs, reward, values, GAMMA, LAMBDA)
    except ImportError:
        pass
    return cases


def check_agreement(cases: dict, reference: torch.Tensor, name: str) -> None:
    for peer, fn in cases.items():
        out = fn()
        out = out[0] if isinstance(out, tuple) else out
        if out.dim() == 3:  # TorchRL's (B, T, 1)
            out = out.squeeze(-1).T
        err = (out.double() - reference.double()).abs().max().item()
        if err > 1e-3:
            print(f"  WARNING: {name} {peer} differs from zoo by {err:.2e}")


def run(budget_s: float) -> bool:
    torch.set_num_threads(1)
    from zoo.rl_utils._scan import kernels_available

    print("zoo backend:", "compiled loops (_ckernels)" if kernels_available() else "numpy scan (no _ckernels)")
    ok = True
    for title, builder in (("gae", "gae"), ("V-trace targets", "vtrace")):
        print(f"\n== {title}: median ms per call (speed-up of zoo = peer / zoo) ==")
        header = None
        for steps, batch in SIZES:
            gen = torch.Generator().manual_seed(steps * 7919 + batch)
            reward = torch.randn(steps, batch, generator=gen)
            if builder == "gae":
                value = torch.randn(steps, batch, generator=gen)
                next_value = torch.randn(steps, batch, generator=gen)
                done = (torch.rand(steps, batch, generator=gen) < 0.02).float()
                cases = gae_cases(value, next_value, reward, done)
            else:
                values = torch.randn(steps + 1, batch, generator=gen)
                ratio = torch.exp(0.3 * torch.randn(steps, batch, generator=gen))
                cases = vtrace_cases(ratio.clamp(max=1.0), ratio.clamp(max=1.0), reward, values)
            check_agreement(cases, cases["zoo"](), title)
            times = {name: median_ms(fn, budget_s) for name, fn in cases.items()}
            if header is None:
                header = list(times)
                print(f"{'(T, B)':>12} " + " ".join(f"{n:>12}" for n in header) + "   speed-ups")
            zoo = times["zoo"]
            speedups = {n: t / zoo for n, t in times.items() if n != "zoo"}
            best_loop = min(times["torch loop"], times["numpy loop"]) / zoo
            verdicts = [f"loop x{best_loop:.1f}{'' if best_loop >= 2 else ' (<2x!)'}"]
            if "DI-engine" in speedups:
                ding = speedups["DI-engine"]
                verdicts.append(f"DI-engine x{ding:.1f}{'' if ding >= 5 else ' (<5x!)'}")
                ok &= ding >= 5
            ok &= best_loop >= 2
            cells = " ".join(f"{times[n]:12.3f}" for n in header)
            extra = " ".join(f"{n}:x{s:.1f}" for n, s in speedups.items())
            print(f"{str((steps, batch)):>12} {cells}   {'; '.join(verdicts)} | {extra}")
    print("\nall targets met" if ok else "\nSOME TARGETS MISSED")
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter timing budget per case")
    parser.add_argument("--numpy-scan", action="store_true", help="time zoo's fallback without the C extension")
    args = parser.parse_args()
    if args.numpy_scan:
        from zoo.rl_utils import _scan

        _scan._ckernels = None
    run(0.05 if args.quick else 0.3)
