"""Fixtures shared by the test modules."""

from __future__ import annotations

import logging
import os

import pytest
import torch


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny networks: intra-op threads only add synchronisation (tens of ms per backward on a busy machine).
    Use it with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _zoo_logger_as_found():
    """``zoo run -q`` (``main([...])`` in this process) sets up and quietens zoo's logger: every test gets the logger
    the previous one found, so that a test reading zoo's INFO lines does not depend on which tests ran before it."""
    logger = logging.getLogger("zoo")
    found = (logger.level, list(logger.handlers), logger.propagate)
    yield
    logger.setLevel(found[0])
    logger.handlers[:] = found[1]
    logger.propagate = found[2]


@pytest.fixture(autouse=True)
def _accel_settings_as_found():
    """``main(["run", ...])`` in this process takes the run's ``accel`` section for the process (as ``zoo run`` does):
    every test gets the settings and inductor's cache folder the previous one found (a run given an unusable cache
    folder broke every compile after it on the same pytest worker)."""
    from zoo.accel import settings

    found = (settings.settings(), os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    yield
    if settings.settings() != found[0]:
        settings.configure(vars(found[0]))
    if found[1] is None:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    else:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = found[1]


@pytest.fixture(autouse=True)
def _compile_everything(monkeypatch):
    """``ZOO_TEST_COMPILE=on python -m pytest ...`` (or 1, true, yes): every off-policy policy built in this process
    compiles its learning step whatever its budget (``policy.compile`` as ``on``), so that the learning tests show the
    compiled step learns as the eager one does. Unset (the default, and CI): nothing changes."""
    from zoo.config.flags import env_flag

    if not env_flag("ZOO_TEST_COMPILE"):
        yield
        return
    from zoo.accel import compiled

    original = compiled.resolve_compile
    monkeypatch.setattr(compiled, "resolve_compile",
                        lambda requested, *args: original("on" if requested == "auto" else requested, *args))
    from zoo.policies import off_policy

    monkeypatch.setattr(off_policy, "resolve_compile", compiled.resolve_compile)
    yield
