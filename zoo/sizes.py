"""Refuse sizes that would exhaust memory, before allocating anything (one clear line instead of an OOM kill)."""

from __future__ import annotations

import os

from .errors import ConfigError


def physical_memory_bytes() -> int:
    """This machine's physical memory (a large constant where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return 1 << 40


def check_memory(what: str, nbytes: int, fix: str, fraction: float = 0.5) -> None:
    """Raise ConfigError when ``nbytes`` exceeds ``fraction`` of physical memory; ``fix`` says what to change."""
    limit = fraction * physical_memory_bytes()
    if nbytes > limit:
        raise ConfigError(
            f"{what} would need {nbytes / 2**30:.1f} GiB, more than {fraction:.0%} of this machine's "
            f"{physical_memory_bytes() / 2**30:.1f} GiB: {fix}"
        )


def check_parameter_memory(key: str, sizes: list[int], trunks: int, out_dim: int, with_optimizer: bool) -> None:
    """Check an MLP of layer ``sizes`` (``trunks`` copies) plus heads: weights, gradients and Adam moments."""
    params = trunks * sum((a + 1) * b for a, b in zip(sizes[:-1], sizes[1:])) + (sizes[-1] + 1) * (out_dim + 1)
    copies = 4 if with_optimizer else 1  # weights, gradients, two moment buffers
    check_memory(f"a network with {key}={sizes[1:]} ({params:,} parameters)", 4 * copies * params,
                 f"use smaller {key}")


# What one zoo worker or actor process holds once torch, gymnasium and its env are imported: about 200 MB of
# resident memory measured here (DPPO workers and IMPALA actors on the classic-control envs).
PROCESS_BYTES = 200 * 2**20


def check_processes(what: str, count: int, fix: str) -> None:
    """Refuse (ConfigError) ``count`` extra processes on this machine when their memory alone
    (``PROCESS_BYTES`` each) would exceed half of it; warn on the ``zoo`` logger when there are more of them than
    cores (they then share cores and each runs slower)."""
    check_memory(f"{count:,} {what} (about {PROCESS_BYTES // 2**20} MB each)", count * PROCESS_BYTES, fix)
    cores = os.cpu_count() or 1
    if count > cores:
        import logging

        logging.getLogger("zoo").warning(
            f"{count} {what} on {cores} cores: they share the cores and each runs slower ({fix} to avoid it)")
