"""``zoo config POLICY [--pipeline P]``: every config key with its default, allowed values and meaning.

Everything comes from the classes themselves: the defaults from ``default_config``, the bounds from
``config_ranges``, the choices from ``config_choices``, and the meaning from the comment written beside the key
in the class's ``default_config`` (or ``common_config``) source, the most derived class that comments it winning.
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
    """The comment beside each key in the ``default_config``/``common_config`` blocks of ``owner``'s classes."""
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
    return docs


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
             choices: dict[str, Any] | None = None) -> list[str]:
    docs = key_docs(owner)
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
    from .plugins import load_plugins
    from .resolve import BASE_CONFIG

    load_plugins()
    policy_cls = POLICY_REGISTRY.get(policy)
    supported = tuple(getattr(policy_cls, "pipelines", ()) or ())
    pipeline = pipeline or (supported[0] if supported else None)
    if pipeline not in supported:
        raise ConfigError(f"policy '{policy}' does not run on pipeline '{pipeline}': it supports "
                          f"{', '.join(supported)}")
    pipeline_cls = PIPELINE_REGISTRY.get(pipeline)
    import zoo.resolve as experiment

    top = {key: value for key, value in BASE_CONFIG.items() if not isinstance(value, dict)}
    lines = [f"policy {policy} ({policy_cls.__module__}.{policy_cls.__qualname__}) on pipeline {pipeline} "
             f"({pipeline_cls.__module__}.{pipeline_cls.__qualname__}); runs on: {', '.join(supported)}",
             "key                      default        allowed                    meaning"]
    ranges = experiment.BASE_RANGES
    lines += _section("top level", experiment, top, {k: v for k, v in ranges.items() if "." not in k}, {})
    lines += _section("env", experiment, BASE_CONFIG["env"],
                      {k.split(".", 1)[1]: v for k, v in ranges.items() if k.startswith("env.")}, {})
    lines += _section("logger", experiment, BASE_CONFIG["logger"], {}, {})
    lines += _section(f"policy (type={policy})", policy_cls, dict(policy_cls.default_config))
    lines += _section(f"pipeline (type={pipeline})", pipeline_cls, dict(pipeline_cls.default_config))
    return "\n".join(lines)
