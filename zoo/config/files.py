"""Config files: load (.py / .yaml / .json) and dump (YAML), with one YAML schema everywhere.

A config is a nested mapping returned as an ``EasyDict``. Every problem is a ConfigError whose message is one
line naming the problem and its fix, because the CLI prints it as is.

YAML is read and written with one schema everywhere (config files, ``--set`` values, resolved-config dumps):
PyYAML's safe schema with YAML 1.2-style scalars, so ``1e-3`` is a float (PyYAML's YAML 1.1 reads it as a
string), ``010`` is the int 10, only ``true``/``false`` are booleans (``on``/``no`` stay strings) and dates
stay strings.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import sys
import traceback
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from easydict import EasyDict

from ..errors import ConfigError

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


# Bounds on what reading one config may cost. A run directory may come from anyone: a 1.5 KB YAML file of nested
# aliases ("billion laughs") composes to a few nodes that expand to 10^9 values, and every walk of the loaded
# config (key checks, to_plain, the resume comparison) would visit them all. Real configs hold a few hundred.
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_VALUES = 100_000


class ConfigTooLargeError(ConfigError):
    """A config file or ``--set`` value too large or too deeply nested to read (see ``MAX_CONFIG_VALUES``)."""


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """How many values ``root`` stands for once its aliases are expanded, counting up to just past ``limit``.

    Memoised per node, so it costs one visit per distinct node however many times aliases repeat it; iterative,
    so deep nesting cannot exhaust the stack. An alias cycle (a node that contains itself) counts as too large.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes and not children_done:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        if not children_done:
            if key in on_path:
                return limit + 1
            on_path.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        on_path.discard(key)
        sizes[key] = min(limit + 1, 1 + sum(sizes.get(id(child), limit + 1) for child in children))
    return sizes[id(root)]


def _yaml_load(text: str, source: str = "the YAML text") -> Any:
    """Parse ``text`` with the one schema (safe), refusing what would expand past ``MAX_CONFIG_VALUES`` values."""
    loader = _Loader(text)  # safe: _Loader is a SafeLoader subclass
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise ConfigTooLargeError(f"{source} is nested too deeply to read: flatten it") from None
        if node is None:
            return None
        if _expanded_size(node, MAX_CONFIG_VALUES) > MAX_CONFIG_VALUES:
            raise ConfigTooLargeError(
                f"{source} expands to more than {MAX_CONFIG_VALUES} values (YAML aliases repeated, or one that "
                f"contains itself): refusing to read it; write the values out without anchors and aliases"
            )
        try:
            return loader.construct_document(node)
        except RecursionError:
            raise ConfigTooLargeError(f"{source} is nested too deeply to read: flatten it") from None
    finally:
        loader.dispose()


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
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigTooLargeError(f"config file '{path}' is larger than {MAX_CONFIG_BYTES >> 20} MiB: a config "
                                      f"holds settings, not data; refusing to read it")
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file '{path}' cannot be read ({exc}): check that it is a UTF-8 text file") from exc
    if suffix == ".py":
        loaded = _run_python_config(path, text)
    elif suffix == ".json":
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"syntax error in config file '{path}:{exc.lineno}': {exc.msg}: fix the JSON") from exc
        except RecursionError:
            raise ConfigTooLargeError(f"config file '{path}' is nested too deeply to read: flatten it") from None
    else:
        try:
            loaded = _yaml_load(text, f"config file '{path}'")
        except ConfigError:
            raise
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


def _describe_value(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


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
