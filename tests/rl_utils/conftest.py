"""Shared fixtures for the rl_utils tests."""

from __future__ import annotations

import pytest

from zoo.rl_utils import _scan


@pytest.fixture(params=["compiled", "numpy"])
def recurrence_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test twice: with the compiled loops (skipped when the extension was not built; .ci/run checks that
    it was) and with the numpy doubling scan that replaces them when no C compiler is available."""
    if request.param == "compiled":
        if not _scan.kernels_available():
            pytest.skip("zoo.rl_utils._ckernels was not built")
    else:
        monkeypatch.setattr(_scan, "_ckernels", None)
    return request.param
