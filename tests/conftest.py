"""Fixtures shared by the test modules."""

from __future__ import annotations

import logging

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
