"""Configs: files (``files``), values and their checks (``checks``), the declared schema of every key
(``schema``) and the resolution of a user's config into a validated one (``resolve``).

The names most code needs are re-exported here: ``from zoo.config import load_config_file, to_plain, Field``.
"""

from .checks import (
    Range,
    apply_overrides,
    check_choices,
    check_exp_name,
    check_finite_numbers,
    check_ranges,
    deep_merge,
    parse_override,
    validate_keys_and_types,
)
from .files import dump_config, load_config_file, to_plain

__all__ = [
    "Range",
    "apply_overrides",
    "check_choices",
    "check_exp_name",
    "check_finite_numbers",
    "check_ranges",
    "deep_merge",
    "dump_config",
    "load_config_file",
    "parse_override",
    "to_plain",
    "validate_keys_and_types",
]
