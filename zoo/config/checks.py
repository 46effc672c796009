"""Config values: merge over defaults, check keys, types, ranges and choices, apply ``--set`` overrides.

Every problem is a ConfigError whose message is one line naming the key, the problem and its fix.
"""

from __future__ import annotations

import copy
import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from easydict import EasyDict

from ..errors import ConfigError
from .files import _describe_value, _items, _join, _plain, _yaml_load


def deep_merge(base: Mapping, override: Mapping) -> EasyDict:
    """Return a new EasyDict: ``override`` over ``base``; nested mappings merge, everything else is replaced.

    Neither argument is modified, and the result shares no mutable values with them.

    Examples:
        >>> deep_merge({"policy": {"gamma": 0.99, "lr": 1e-3}}, {"policy": {"lr": 3e-4}})
        {'policy': {'gamma': 0.99, 'lr': 0.0003}}
    """
    return EasyDict(_merge(base, override))


def _merge(base: Mapping, override: Mapping) -> dict:
    merged = {key: copy.deepcopy(value) for key, value in _items(base)}
    for key, value in _items(override):
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


_TYPE_NAMES = ((bool, "a bool (true/false)"), (int, "an int"), (float, "a float"), (str, "a str"))
_TYPE_NAMES += (((list, tuple), "a list"), (Mapping, "a mapping (section)"))  # bool before int: it subclasses it


def _type_name(expected: Any) -> str:
    names = [name for kind, name in _TYPE_NAMES if isinstance(expected, kind)]
    return names[0] if names else f"a {type(expected).__name__}"


def _type_matches(value: Any, default: Any) -> bool:
    if default is None:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        # bool is an int subclass in Python; in a config, True for a learning rate is always a mistake.
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, int | float)
    if isinstance(default, int):
        return isinstance(value, int)
    if isinstance(default, list | tuple):
        return isinstance(value, list | tuple)
    if isinstance(default, Mapping):
        return isinstance(value, Mapping)
    return isinstance(value, type(default))


# What a declared type (``Field.type``, for keys whose default is None) is checked against: a value of it.
_EXAMPLES = {float: 0.0, int: 0, bool: False, str: "", list: [], tuple: [], dict: {}}


def validate_keys_and_types(user_cfg: Mapping, schema_cfg: Mapping, path: str = "",
                            types: Mapping[str, Any] | None = None) -> None:
    """Check that every key of ``user_cfg`` exists in ``schema_cfg`` and its value has the default's type.

    Rules: an int is accepted where a float is expected; a bool is not accepted for an int/float, nor a
    number for a bool; a default of None accepts anything, unless ``types`` (dotted key -> type) declares the
    key's type (then None or that type); list and tuple are interchangeable; a mapping default requires a mapping
    and is checked recursively, except that an empty mapping default (such as
    ``env.kwargs = {}``) is open and accepts any keys.

    Raises:
        ConfigError: e.g. "unknown config key 'policy.learnig_rate': did you mean 'policy.learning_rate'?"
            or "config key 'policy.gamma' must be a float, got str 'abc'".
    """
    for key, value in _items(user_cfg):
        dotted = _join(path, key)
        if key not in schema_cfg:
            valid = [str(k) for k in schema_cfg]
            close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
            if close:
                hint = f"did you mean '{_join(path, close[0])}'?"
            else:
                where = f"under '{path}'" if path else "at the top level"
                hint = f"valid keys {where}: {', '.join(valid) or '(none)'}"
            raise ConfigError(f"unknown config key '{dotted}': {hint}")
        default = schema_cfg[key]
        if default is None and value is not None and types and dotted in types:
            default = _EXAMPLES.get(types[dotted], None)  # a None default with a declared type: None or that type
        if not _type_matches(value, default):
            message = f"config key '{dotted}' must be {_type_name(default)}, got {_describe_value(value)}"
            if isinstance(default, int) and isinstance(value, float) and value.is_integer():
                message += f": write {int(value)}"
            raise ConfigError(message)
        if isinstance(default, list | tuple) and len(default) > 0:
            for index, item in enumerate(value):
                if not _type_matches(item, default[0]):
                    raise ConfigError(
                        f"config key '{dotted}' must be a list of {_type_name(default[0]).split(' ', 1)[1]}s, got "
                        f"{_describe_value(item)} at position {index}: e.g. {list(default)}"
                    )
        if isinstance(default, Mapping) and len(default) > 0:
            validate_keys_and_types(value, default, dotted, types)


@dataclass(frozen=True)
class Range:
    """Allowed interval for a numeric config value; a bound of None means unbounded on that side.

    Examples:
        >>> Range(0.0, 1.0, low_inclusive=False).violation(0.0)
        'must be > 0.0'
        >>> Range(1, None, integer=True).violation(2.5), Range(1, None, integer=True).violation(3)
        ('must be a whole number', None)
    """

    low: float | None = None
    high: float | None = None
    low_inclusive: bool = True
    high_inclusive: bool = True
    integer: bool = False

    def __post_init__(self) -> None:
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"Range low {self.low} is greater than high {self.high}")

    def violation(self, value: float) -> str | None:
        """The bound ``value`` breaks, as "must be <= 1", or None when it is inside the range."""
        if value != value:  # NaN compares false with every bound
            return "must be a number, not NaN"
        if isinstance(value, float) and not math.isfinite(value):  # ints are finite, however large
            return "must be a finite number"
        if self.integer and not isinstance(value, int):
            return "must be a whole number"
        if self.low is not None and (value < self.low or (value == self.low and not self.low_inclusive)):
            return f"must be {'>=' if self.low_inclusive else '>'} {self.low}"
        if self.high is not None and (value > self.high or (value == self.high and not self.high_inclusive)):
            return f"must be {'<=' if self.high_inclusive else '<'} {self.high}"
        return None

    @classmethod
    def of(cls, rule: Any) -> Range:
        """A Range from a Range or a ``(low, high)`` pair (inclusive bounds, None = open)."""
        return rule if isinstance(rule, Range) else cls(low=rule[0], high=rule[1])


_MISSING = object()


def _get_dotted(cfg: Mapping, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def check_ranges(cfg: Mapping, rules: Mapping[str, Any]) -> None:
    """Check numeric values against ``rules`` (dotted key -> Range or ``(low, high)``); absent keys and None values
    are skipped, and a list is checked element by element.

    Raises:
        ConfigError: e.g. "config key 'policy.gamma' = 1.5 is out of range: must be <= 1".
    """
    for dotted, rule in rules.items():
        value = _get_dotted(cfg, dotted)
        if value is _MISSING or value is None:
            continue
        items = list(enumerate(value)) if isinstance(value, list | tuple) else [(None, value)]
        for index, item in items:
            where = dotted if index is None else f"{dotted}[{index}]"
            if isinstance(item, bool) or not isinstance(item, int | float):
                raise ConfigError(f"config key '{where}' must be a number, got {_describe_value(item)}")
            problem = Range.of(rule).violation(item)
            if problem is not None:
                raise ConfigError(f"config key '{where}' = {item!r} is out of range: {problem}")


def check_finite_numbers(cfg: Mapping, skip: Sequence[str] = (), path: str = "") -> None:
    """Raise ConfigError for any NaN or infinite number in ``cfg`` (sections in ``skip`` are not visited)."""
    for key, value in _items(cfg):
        dotted = _join(path, key)
        if dotted in skip:
            continue
        if isinstance(value, Mapping):
            check_finite_numbers(value, skip, dotted)
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"config key '{dotted}' = {value!r} must be a finite number")
        elif isinstance(value, list | tuple) and any(isinstance(v, float) and not math.isfinite(v) for v in value):
            raise ConfigError(f"config key '{dotted}' = {list(value)!r} must hold finite numbers")


def check_choices(cfg: Mapping, rules: Mapping[str, Sequence[Any]]) -> None:
    """Check values against ``rules`` (dotted key -> allowed values); absent keys are skipped.

    Raises:
        ConfigError: e.g. "config key 'policy.optimizer' = 'sgd' is not one of 'adam', 'rmsprop'".
    """
    for dotted, allowed in rules.items():
        value = _get_dotted(cfg, dotted)
        if value is _MISSING or value in allowed:
            continue
        options = ", ".join(repr(option) for option in allowed)
        close = difflib.get_close_matches(str(value), [str(option) for option in allowed], n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"config key '{dotted}' = {value!r} is not one of {options}{hint}")


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one ``--set`` argument ``KEY=VALUE`` into ``(dotted_key, value)``.

    The value is read as YAML with numbers done right: ``1`` -> int, ``-2.5``/``1e-3`` -> float,
    ``true`` -> bool, ``[1, 2]`` -> list, ``null`` (or Python's ``None``) -> None, ``ppo`` -> str, and an empty
    value -> "".
    Text that is not valid YAML is kept as a string (type validation reports it if a string is wrong).

    Examples:
        >>> parse_override("policy.learning_rate=1e-3")
        ('policy.learning_rate', 0.001)
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part.strip() for part in key.split(".")):
        raise ConfigError(f"bad override '{text}': expected KEY=VALUE, e.g. --set policy.learning_rate=3e-4")
    raw = raw.strip()
    if raw == "":
        return key, ""
    if raw == "None":  # configs are Python files, so users write None as in Python
        return key, None
    try:
        value = _yaml_load(raw, f"the value of --set {key}")
    except (yaml.YAMLError, ValueError):  # not YAML, or a number Python will not convert: a string
        value = raw
    return key, value


def apply_overrides(cfg: Mapping, overrides: Iterable[str | tuple[str, Any]]) -> EasyDict:
    """Return a new EasyDict with each override (``"a.b=1"`` or ``("a.b", 1)``) applied in order.

    Missing intermediate sections are created; unknown keys are left for ``validate_keys_and_types``.

    Raises:
        ConfigError: bad ``KEY=VALUE`` syntax, or a path that runs through a value that is not a section.
    """
    result = _plain(cfg, keep_tuples=True)  # plain dicts: EasyDict.setdefault would not set the attribute
    for override in overrides:
        dotted, value = parse_override(override) if isinstance(override, str) else override
        parts = dotted.split(".")
        node = result
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                prefix = ".".join(parts[: depth + 1])
                raise ConfigError(
                    f"cannot set '{dotted}': '{prefix}' is {_describe_value(child)}, not a section: "
                    f"override '{prefix}' itself"
                )
            node = child
        node[parts[-1]] = _plain(value, keep_tuples=True)
    return EasyDict(result)


def check_exp_name(exp_name: Any) -> None:
    """Raise ConfigError unless ``exp_name`` is a plain directory name that stays inside ``runs_dir``."""
    bad = (
        not isinstance(exp_name, str) or exp_name.strip() in ("", ".", "..") or exp_name != exp_name.strip()
        or any(ch in exp_name for ch in "/\\\0") or len(exp_name) > 200 or exp_name.startswith(".")
    )
    if bad:
        raise ConfigError(
            f"exp_name {exp_name!r} must be a plain directory name (no '/', not empty, not starting with '.'): "
            f"use e.g. --exp-name my_run"
        )
