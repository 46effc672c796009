"""Config files: load (.py / .yaml / .json), merge over defaults, validate, override from the command line, dump.

A config is a nested mapping returned as an ``EasyDict``. Every problem is a ConfigError whose message is one
line naming the problem and its fix, because the CLI prints it as is.

YAML is read and written with one schema everywhere (config files, ``--set`` values, resolved-config dumps):
PyYAML's safe schema with YAML 1.2-style scalars, so ``1e-3`` is a float (PyYAML's YAML 1.1 reads it as a
string), ``010`` is the int 10, only ``true``/``false`` are booleans (``on``/``no`` stay strings) and dates
stay strings.
"""

from __future__ import annotations

import builtins
import copy
import difflib
import json
import math
import os
import re
import sys
import traceback
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from easydict import EasyDict

from .errors import ConfigError

_INT = re.compile(r"^[-+]?[0-9]+$")
_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]+)?
       |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""",
    re.X,
)
_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_REPLACED_TAGS = {"tag:yaml.org,2002:" + tag for tag in ("bool", "int", "float", "timestamp")}


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2-style booleans and numbers (see the module docstring)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _REPLACED_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
# PyYAML's int constructor reads a leading 0 as octal; decimal is what a config author means.
_Loader.add_constructor("tag:yaml.org,2002:int", lambda loader, node: int(loader.construct_scalar(node), 10))


class _Dumper(yaml.SafeDumper):
    """SafeDumper that also quotes strings _Loader reads as floats (``'1e-3'``); YAML 1.1 quoting is kept."""


_Dumper.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # safe: _Loader is a SafeLoader subclass


def load_config_file(path: str | os.PathLike[str]) -> EasyDict:
    """Load a config from a ``.py`` file (which must define ``config``), ``.yaml``/``.yml`` or ``.json`` file.

    A Python config runs in a fresh namespace with ``__file__`` set to its path, so it may build paths
    relative to itself. Raises ConfigError for a missing file, a syntax error (with file:line), a Python file
    without ``config``, a top level that is not a mapping, non-string keys, or an unsupported extension.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".py", ".yaml", ".yml", ".json"):
        raise ConfigError(
            f"unsupported config file extension '{path.suffix}' for '{path}': use .py, .yaml, .yml or .json"
        )
    if not path.is_file():
        raise ConfigError(f"config file '{path}' not found: check the path")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file '{path}' cannot be read ({exc}): check that it is a UTF-8 text file") from exc
    if suffix == ".py":
        loaded = _run_python_config(path, text)
    elif suffix == ".json":
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"syntax error in config file '{path}:{exc.lineno}': {exc.msg}: fix the JSON") from exc
    else:
        try:
            loaded = _yaml_load(text)
        except ValueError as exc:  # e.g. an integer of more digits than Python converts
            raise ConfigError(f"config file '{path}' holds a value that cannot be read ({exc}): fix the YAML") from exc
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(f"syntax error in config file '{where}': {problem}: fix the YAML") from exc
    if not isinstance(loaded, Mapping):
        raise ConfigError(
            f"config in '{path}' must be a mapping (dict / EasyDict / YAML mapping), got {type(loaded).__name__}: "
            f"make the top level a mapping of sections such as env, policy"
        )
    _check_string_keys(loaded, "", path)
    return EasyDict(to_plain(loaded))


def _run_python_config(path: Path, text: str) -> Any:
    try:
        code = compile(text, str(path), "exec")
    except SyntaxError as exc:
        raise ConfigError(f"syntax error in config file '{path}:{exc.lineno}': {exc.msg}") from exc
    namespace: dict[str, Any] = {"__file__": str(path), "__name__": "__zoo_config__", "__builtins__": builtins}
    try:
        exec(code, namespace)
    except SystemExit as exc:
        raise ConfigError(
            f"config file '{path}' called sys.exit({exc.code}): a config must only define `config`"
        ) from None
    except Exception as exc:
        # Point at the config's own line, not at zoo's exec call or a library frame.
        lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == str(path)]
        where = f"{path}:{lines[-1]}" if lines else str(path)
        raise ConfigError(f"config file '{where}' raised {type(exc).__name__}: {exc}: fix the config file") from exc
    if "config" not in namespace:
        raise ConfigError(f"config file '{path}' does not define a variable named 'config': add `config = dict(...)`")
    return namespace["config"]


def _check_string_keys(value: Any, path: str, file: Path, parents: tuple[int, ...] = ()) -> None:
    # Also refuses containers that contain themselves, which no config format can write and every walk loops on.
    if isinstance(value, Mapping | list | tuple):
        if id(value) in parents:
            raise ConfigError(f"config key '{path}' in '{file}' contains itself: use plain values")
        parents = (*parents, id(value))
    if isinstance(value, list | tuple):
        for index, child in enumerate(value):
            _check_string_keys(child, f"{path}[{index}]", file, parents)
    if not isinstance(value, Mapping):
        return
    for key, child in _items(value):
        if not isinstance(key, str):
            where = f" under '{path}'" if path else ""
            raise ConfigError(f"config key {key!r}{where} in '{file}' must be a string: quote it")
        _check_string_keys(child, _join(path, key), file, parents)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)


def _items(mapping: Mapping) -> Iterable[tuple[Any, Any]]:
    # dict.items, because an EasyDict key named "items" shadows the method on the instance.
    return dict.items(mapping) if isinstance(mapping, dict) else mapping.items()


def to_plain(cfg: Any) -> Any:
    """Recursively convert EasyDicts/mappings to dicts, tuples to lists and numpy scalars/arrays to Python values.

    Other objects are returned unchanged. The input is not modified.
    """
    return _plain(cfg, keep_tuples=False)


def _plain(value: Any, keep_tuples: bool) -> Any:
    if isinstance(value, Mapping):
        return {key: _plain(child, keep_tuples) for key, child in _items(value)}
    if isinstance(value, list | tuple):
        children = [_plain(child, keep_tuples) for child in value]
        return tuple(children) if keep_tuples and isinstance(value, tuple) else children
    numpy = sys.modules.get("numpy")  # no numpy objects can exist unless someone imported numpy
    if numpy is not None and isinstance(value, numpy.generic | numpy.ndarray):
        return _plain(value.tolist(), keep_tuples)
    return value


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


def _describe_value(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def validate_keys_and_types(user_cfg: Mapping, schema_cfg: Mapping, path: str = "") -> None:
    """Check that every key of ``user_cfg`` exists in ``schema_cfg`` and its value has the default's type.

    Rules: an int is accepted where a float is expected; a bool is not accepted for an int/float, nor a
    number for a bool; a default of None accepts anything; list and tuple are interchangeable; a mapping
    default requires a mapping and is checked recursively, except that an empty mapping default (such as
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
            validate_keys_and_types(value, default, dotted)


@dataclass(frozen=True)
class Range:
    """Allowed interval for a numeric config value; a bound of None means unbounded on that side."""

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
        value = _yaml_load(raw)
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


def _check_dumpable(value: Any, path: str) -> None:
    if isinstance(value, dict):
        for key, child in value.items():
            if not isinstance(key, str):
                raise ConfigError(f"config key {key!r} under '{path}' must be a string to be written as YAML")
            _check_dumpable(child, _join(path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            _check_dumpable(child, f"{path}[{index}]")
    elif value is not None and not isinstance(value, bool | int | float | str):
        raise ConfigError(
            f"config key '{path}' holds {_describe_value(value)}, which cannot be written to YAML: "
            f"use a plain value (number, string, bool, list, mapping) or a registered name"
        )


def dump_config(cfg: Mapping, path: str | os.PathLike[str]) -> Path:
    """Write ``cfg`` as block-style YAML (keys in insertion order) atomically; return the path.

    The file is written to a temporary file in the same directory, flushed, fsync-ed and renamed over
    ``path``, so a crash never leaves a half-written config. ``load_config_file`` reads it back equal to
    ``to_plain(cfg)``.
    """
    path = Path(path)
    plain = to_plain(cfg)
    _check_dumpable(plain, "")
    text = yaml.dump(plain, Dumper=_Dumper, default_flow_style=False, sort_keys=False, allow_unicode=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    # os.open with 0o666 honours the umask, unlike mkstemp's 0o600, so the config stays readable by others.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path
