"""zoo's environment flags read as switches: the usual spellings of on and off, anything else refused in one line.

Configuration goes in config keys; the few flags zoo reads where no key fits (docs/contributing.md lists them) are
switches. ``ZOO_DEBUG=false`` means off, as ``0``, ``no`` and ``off`` do, and an empty or unset flag is off;
``1``, ``true``, ``yes`` and ``on`` mean on, in any case; any other value is a ``ConfigError`` naming the flag and
the spellings, never a silent guess.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import ConfigError

ON = ("1", "true", "yes", "on")
OFF = ("", "0", "false", "no", "off")


def env_flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the switch ``name`` is on in ``environ`` (default: the process's environment); ConfigError for a
    value that is neither on nor off."""
    raw = (os.environ if environ is None else environ).get(name, "")
    value = raw.strip().lower()
    if value in ON:
        return True
    if value in OFF:
        return False
    raise ConfigError(f"{name}={raw!r} is not a switch: set {name} to 1 (or true, yes, on), to 0 (or false, no, "
                      f"off), or unset it")


def debug() -> bool:
    """``ZOO_DEBUG``: one-line errors keep their traceback. An invalid value counts as off here (``zoo`` itself
    refuses it in one line when it starts: ``env_flag``)."""
    try:
        return env_flag("ZOO_DEBUG")
    except ConfigError:
        return False
