"""Speed of zoo's DirectLiNGAM (pwling) against lingam 1.13's DirectLiNGAM(measure='pwling'), measured in one run.

Usage:
    python benchmarks/causal_bench.py [--lingam-python <venv with lingam>/bin/python] [--repeats 5]

One 10000 x 24 linear non-Gaussian dataset (uniform noise, random DAG, shuffled columns) is fitted end to end
(causal order and adjacency) with one BLAS thread. lingam is timed in the interpreter given by --lingam-python
(it pins its own numpy/scipy/sklearn, so keep it in a separate virtualenv), or in this process when importable.
Printed: median seconds per fit, the speed-up (lingam time / zoo time, target >= 3x, aim 10x), whether the two
causal orders agree, the largest adjacency difference, and whether zoo's order respects the true DAG.
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"  # before numpy is imported, so BLAS starts with one thread

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from zoo.rl_utils.causal import direct_lingam  # noqa: E402

# Runs in the lingam interpreter: argv = data.npy, repeats, adjacency output .npy; prints JSON on the last line.
_LINGAM_SCRIPT = """
import os, sys, json, time
for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[name] = "1"
import numpy as np
import lingam
data = np.load(sys.argv[1])
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    model = lingam.DirectLiNGAM(measure="pwling").fit(data)
    times.append(time.perf_counter() - start)
np.save(sys.argv[3], model.adjacency_matrix_)
print(json.dumps({"version": lingam.__version__, "times": times, "order": [int(k) for k in model.causal_order_]}))
"""


def make_data(rows: int, dims: int, seed: int, edge_prob: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = rng.random((dims, dims)) < edge_prob
    adjacency = np.tril(rng.uniform(0.5, 1.5, (dims, dims)) * rng.choice([-1.0, 1.0], (dims, dims)) * mask, -1)
    data = np.linalg.solve(np.eye(dims) - adjacency, rng.uniform(-1, 1, (rows, dims)).T).T
    perm = rng.permutation(dims)
    return data[:, perm], adjacency[np.ix_(perm, perm)]


def time_lingam(data: np.ndarray, python: str | None, repeats: int) -> dict | None:
    with tempfile.TemporaryDirectory() as folder:
        data_path, adjacency_path = os.path.join(folder, "data.npy"), os.path.join(folder, "adjacency.npy")
        np.save(data_path, data)
        if python is None:
            try:
                import lingam  # noqa: F401
            except ImportError:
                return None
            python = sys.executable
        done = subprocess.run(
            [python, "-c", _LINGAM_SCRIPT, data_path, str(repeats), adjacency_path],
            capture_output=True, text=True, check=True,
        )
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["adjacency"] = np.load(adjacency_path)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lingam-python", default=None, help="interpreter with lingam installed")
    parser.add_argument("--repeats", type=int, default=5, help="zoo fits per precision")
    parser.add_argument("--lingam-repeats", type=int, default=1, help="lingam fits (~10-20 s each)")
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--dims", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--edge-prob", type=float, default=0.3)
    args = parser.parse_args()

    data, true_adjacency = make_data(args.rows, args.dims, args.seed, args.edge_prob)
    print(f"data {data.shape}, {np.count_nonzero(true_adjacency)} true edges, one BLAS thread")
    zoo = {}
    for precision in ("float32", "float64"):
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            zoo[precision] = direct_lingam(data, entropy_precision=precision)
            times.append(time.perf_counter() - start)
        zoo[precision + "_s"] = statistics.median(times)
        position = {variable: k for k, variable in enumerate(zoo[precision].causal_order)}
        respects = all(position[j] < position[i] for i, j in zip(*np.nonzero(true_adjacency)))
        print(f"zoo direct_lingam ({precision} entropies): median {zoo[precision + '_s']:.3f} s over "
              f"{args.repeats}, order respects true DAG: {respects}")
    same_precision_order = zoo["float32"].causal_order == zoo["float64"].causal_order
    print(f"zoo float32 and float64 orders agree: {same_precision_order}")

    peer = time_lingam(data, args.lingam_python, args.lingam_repeats)
    if peer is None:
        print("lingam not available: pass --lingam-python /path/to/venv/bin/python")
        return
    lingam_s = statistics.median(peer["times"])
    print(f"lingam {peer['version']} DirectLiNGAM(measure='pwling'): median {lingam_s:.3f} s over {len(peer['times'])}")
    for precision in ("float32", "float64"):
        speedup = lingam_s / zoo[precision + "_s"]
        agree = zoo[precision].causal_order == peer["order"]
        difference = np.abs(zoo[precision].adjacency - peer["adjacency"]).max()
        print(f"speed-up ({precision}): {speedup:.1f}x (target >= 3x: {'met' if speedup >= 3 else 'MISSED'}), "
              f"orders agree: {agree}, max |B_zoo - B_lingam| = {difference:.2e}")


if __name__ == "__main__":
    main()
