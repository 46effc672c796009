"""``zoo config POLICY [--pipeline P]``: every config key with its default, allowed values and meaning.

Everything comes from the classes' declared schema (``zoo.config.schema.Field``: default, range or choices,
meaning), so it works from an installed wheel. For a plugin class that declares plain ``default_config`` values
instead, the meaning is the comment written beside the key in its source (when the source is there).
"""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

from .config import Range
from .errors import ConfigError
from .registry import PIPELINE_REGISTRY, POLICY_REGISTRY

_BLOCK_START = re.compile(r"^\s*(default_config|common_config|BASE_CONFIG)\b.*=\s*\{")
_KEY_COMMENT = re.compile(r"""^\s*["'](\w+)["']\s*:\s*[^#]*#\s*(.+?)\s*$""")


def key_docs(owner: Any) -> dict[str, str]:
    """The meaning of each key of ``owner``'s section: its declared ``Field`` docs, else the comment beside the key
    in the ``default_config``/``common_config`` blocks of its classes' source."""
    declared = getattr(owner, "config_docs", None)
    docs: dict[str, str] = {}
    classes = reversed(owner.__mro__) if isinstance(owner, type) else [owner]
    for klass in classes:
        try:
            lines = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        depth = 0  # brace depth inside a config block (0: outside)
        for line in lines:
            code = line.split("#", 1)[0]
            if depth == 0:
                if _BLOCK_START.match(line):
                    depth = code.count("{") - code.count("}")
                continue
            match = _KEY_COMMENT.match(line)
            if match:
                docs[match.group(1)] = match.group(2)
            depth += code.count("{") - code.count("}")
    return {**docs, **(declared or {})}


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _allowed(key: str, value: Any, ranges: dict[str, Any], choices: dict[str, Any]) -> str:
    if key in choices:
        return "one of " + ", ".join(str(choice) for choice in choices[key])
    if key in ranges:
        rule = Range.of(ranges[key])
        low = "-inf" if rule.low is None else _number(rule.low)
        high = "inf" if rule.high is None else _number(rule.high)
        return f"{'[' if rule.low_inclusive else '('}{low}, {high}{']' if rule.high_inclusive else ')'}" + (
            " each" if isinstance(value, list) else "")
    if isinstance(value, bool):
        return "true or false"
    return ""


def _section(title: str, owner: Any, defaults: dict[str, Any], ranges: dict[str, Any] | None = None,
             choices: dict[str, Any] | None = None, docs: dict[str, str] | None = None) -> list[str]:
    docs = key_docs(owner) if docs is None else docs
    ranges = ranges if ranges is not None else getattr(owner, "config_ranges", {}) or {}
    choices = choices if choices is not None else getattr(owner, "config_choices", {}) or {}
    lines = [f"[{title}]"]
    for key, value in defaults.items():
        shown = json.dumps(value) if not isinstance(value, str) else repr(value)
        lines.append(f"  {key:<24} {shown:<14} {_allowed(key, value, ranges, choices):<26} {docs.get(key, '')}"
                     .rstrip())
    return lines


def describe(policy: str, pipeline: str | None = None) -> str:
    """The text ``zoo config`` prints (see the module docstring)."""
    from .config.resolve import BASE_CONFIG, BASE_DOCS, BASE_RANGES
    from .plugins import load_plugins

    load_plugins()
    policy_cls = POLICY_REGISTRY.get(policy)
    supported = tuple(getattr(policy_cls, "pipelines", ()) or ())
    pipeline = pipeline or (supported[0] if supported else None)
    if pipeline not in supported:
        raise ConfigError(f"policy '{policy}' does not run on pipeline '{pipeline}': it supports "
                          f"{', '.join(supported)}")
    pipeline_cls = PIPELINE_REGISTRY.get(pipeline)
    top = {key: value for key, value in BASE_CONFIG.items() if not isinstance(value, dict)}
    lines = [f"policy {policy} ({policy_cls.__module__}.{policy_cls.__qualname__}) on pipeline {pipeline} "
             f"({pipeline_cls.__module__}.{pipeline_cls.__qualname__}); runs on: {', '.join(supported)}",
             "key                      default        allowed                    meaning"]
    def within(section: str, table: dict[str, Any]) -> dict[str, Any]:
        return {k.split(".", 1)[1]: v for k, v in table.items() if k.startswith(f"{section}.")}

    lines += _section("top level", None, top, {k: v for k, v in BASE_RANGES.items() if "." not in k}, {}, BASE_DOCS)
    for section in ("env", "logger", "accel"):
        lines += _section(section, None, BASE_CONFIG[section], within(section, BASE_RANGES), {},
                          within(section, BASE_DOCS))
    lines += _section(f"policy (type={policy})", policy_cls, dict(policy_cls.default_config))
    lines += _section(f"pipeline (type={pipeline})", pipeline_cls, dict(pipeline_cls.default_config))
    return "\n".join(lines)
