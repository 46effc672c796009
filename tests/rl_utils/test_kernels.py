"""The optional compiled loops (zoo.rl_utils._ckernels): same results as plain float64 loops, and bad buffers
are refused with a ValueError instead of being read out of bounds."""

from __future__ import annotations

import numpy as np
import pytest

from zoo.rl_utils import _scan

ck = _scan._ckernels
pytestmark = pytest.mark.skipif(ck is None, reason="zoo.rl_utils._ckernels was not built")


def loop(coeff: np.ndarray, x: np.ndarray) -> np.ndarray:
    out = np.zeros(x.shape, dtype=np.float64)
    acc = np.zeros(x.shape[1:], dtype=np.float64)
    for t in range(x.shape[0] - 1, -1, -1):
        acc = x[t] + coeff[t] * acc
        out[t] = acc
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (7, 1), (33, 4), (3, 2, 3)])
def test_recurrence_matches_loop(dtype, shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    coeff = (rng.random(shape) * (rng.random(shape) > 0.2)).astype(dtype)  # zeros: episode ends
    expected = loop(coeff.astype(np.float64), x.astype(np.float64))
    out = x.copy()
    ck.recurrence(coeff, out, shape[0], out.size // shape[0], dtype == np.float64)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)


def test_float64_gae_is_the_plain_loop_bit_for_bit():
    rng = np.random.default_rng(1)
    v, nv, r = (rng.standard_normal((50, 3)) for _ in range(3))
    done = (rng.random((50, 3)) < 0.1).astype(np.float64)
    flag = np.maximum(done, (rng.random((50, 3)) < 0.1).astype(np.float64))
    gamma, lam = 0.99, 0.9
    expected = np.zeros_like(v)
    acc = np.zeros(3)
    for t in range(49, -1, -1):
        delta = r[t] + gamma * (1.0 - done[t]) * nv[t] - v[t]
        acc = delta + (gamma * lam) * (1.0 - flag[t]) * acc
        expected[t] = acc
    out = _scan.fused_gae(v, nv, r, done, flag, gamma, lam)
    assert np.array_equal(out, expected)


def test_bad_buffers_are_refused():
    x = np.zeros((4, 3), dtype=np.float32)
    with pytest.raises(ValueError, match="float32 buffer of 15 items"):
        ck.recurrence(np.zeros((5, 3), np.float32), x, 5, 3, False)  # x is too short for T=5
    with pytest.raises(ValueError, match="float64"):
        ck.recurrence(np.zeros((4, 3)), x, 4, 3, True)  # x is float32
    with pytest.raises(ValueError, match="C-contiguous|contiguous"):
        ck.recurrence(np.zeros((3, 4), np.float32).T, x, 4, 3, False)
    with pytest.raises(ValueError, match="bootstrap_values"):
        ck.vtrace(*(np.zeros((4, 3), np.float32) for _ in range(4)), x, 4, 3, 0.9, 0.9, False)
    with pytest.raises((ValueError, TypeError)):
        ck.recurrence(x, np.zeros((4, 3), np.float32)[:, ::-1], 4, 3, False)  # not writable/contiguous


def test_scan_falls_back_to_numpy_for_mismatched_inputs():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((9, 4))
    coeff = rng.random((9, 4)).astype(np.float32)  # dtype differs from x: numpy scan path
    expected = loop(coeff.astype(np.float64), x)
    np.testing.assert_allclose(_scan.scan_numpy_inplace(coeff.copy(), x.copy()), expected, rtol=1e-6)


def test_a_stale_build_is_ignored_with_a_warning(monkeypatch):
    import importlib
    import sys
    import types

    stale = types.ModuleType("zoo.rl_utils._ckernels")
    stale.VERSION = _scan._CKERNELS_VERSION - 1
    monkeypatch.setitem(sys.modules, "zoo.rl_utils._ckernels", stale)
    monkeypatch.delattr("zoo.rl_utils._ckernels", raising=False)
    try:
        with pytest.warns(RuntimeWarning, match="stale build.*pip install -e"):
            importlib.reload(_scan)
        assert not _scan.kernels_available()
    finally:
        monkeypatch.undo()
        importlib.reload(_scan)
    assert _scan.kernels_available()
