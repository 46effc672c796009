"""The schema of config keys: each key declared once, as a ``Field``, with everything zoo needs to know about it.

A ``Field`` holds a key's default, its type (read from the default, or given where the default is None), its
range or choices, whether a resumed run may change it (``frozen``) and its meaning. Validation, ``zoo config``,
the resume check and the docs all read that one declaration. A policy or pipeline declares its section as

    fields = {**Parent.fields, "clip_ratio": Field(0.2, "PPO's clip range", range=(0.0, 1.0))}

(or only the new and changed keys: a class's ``fields`` extend its bases', see ``declare_fields``), and
``declare_fields`` (called by the base classes for every subclass) derives from them the attributes the rest of
zoo reads: ``default_config`` (the plain defaults), ``config_ranges``, ``config_choices``, ``frozen_keys`` and
``config_docs``. A class that declares those attributes by hand instead of ``fields`` (plugins written before
``Field`` existed) keeps working as it did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .checks import Range


@dataclass(frozen=True)
class Field:
    """One config key: ``default``, ``doc`` (its meaning, one line), ``type`` (what a value must be when the
    default is None: e.g. ``float`` for an optional number), ``range`` (``(low, high)`` inclusive, None open, or
    a ``Range``; applied to each element of a list), ``choices`` (allowed values) and ``frozen`` (a resumed run
    may not change it: it shapes the saved state).

    Examples:
        >>> clip = Field(0.2, "PPO's clip range", range=(0.0, 1.0))
        >>> clip.default, clip.range, clip.frozen
        (0.2, (0.0, 1.0), False)
        >>> clip.but(0.1).default  # a subclass's other default, same meaning and range
        0.1
    """

    default: Any
    doc: str
    type: type | tuple[type, ...] | None = None
    range: Range | tuple[Any, Any] | None = None
    choices: tuple[Any, ...] | None = None
    frozen: bool = False

    def __post_init__(self) -> None:
        if not self.doc:
            raise ValueError("a Field needs its meaning (doc)")
        if self.range is not None and self.choices is not None:
            raise ValueError("a Field has a range or choices, not both")

    def but(self, default: Any, doc: str | None = None) -> Field:
        """This field with another default (and meaning): a subclass changing what its parent declared."""
        return replace(self, default=default, doc=doc or self.doc)


def plain_defaults(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults of ``fields`` (dotted keys become nested sections; plain values stay as they are)."""
    out: dict[str, Any] = {}
    for dotted, field in fields.items():
        node = out
        *parents, key = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[key] = field.default if isinstance(field, Field) else field
    return out


def derived(fields: Mapping[str, Field]) -> dict[str, Any]:
    """What ``fields`` declare, in the attributes zoo reads (see the module docstring)."""
    return {
        "default_config": plain_defaults(fields),
        "config_ranges": {key: f.range for key, f in fields.items() if f.range is not None},
        "config_choices": {key: tuple(f.choices) for key, f in fields.items() if f.choices is not None},
        "frozen_keys": tuple(key for key, f in fields.items() if f.frozen),
        "config_docs": {key: f.doc for key, f in fields.items()},
        "config_types": {key: f.type for key, f in fields.items() if f.type is not None},
    }


def inherited_fields(cls: type) -> dict[str, Any]:
    """The fields ``cls``'s bases offer (the first base wins a key two of them declare)."""
    out: dict[str, Any] = {}
    for base in reversed(cls.__bases__):
        out.update(getattr(base, "fields", None) or {})
    return out


def declare_fields(cls: type) -> None:
    """Make ``cls.fields`` every key the class offers and derive its config attributes from them (a no-op for a
    class that declares no ``fields``: its own or inherited attributes stay).

    A class's ``fields`` extend its bases': a key it does not mention is inherited as its base declares it (so that
    a plugin on a family base gets the keys the base honours, such as ``compile`` and ``precision``, without
    declaring them); a key it declares replaces the base's. Inherited keys it does not mention come first, in the
    base's order, then its own. A key named in the class's ``withdrawn_fields`` (a tuple of names, e.g. a base's
    key that this class cannot honour) is not offered; naming a key no base or the class declares is an error.

    Examples:
        >>> class Base:
        ...     fields = {"gamma": Field(0.99, "discount factor")}
        >>> class Mine(Base):
        ...     fields = {"my_coef": Field(0.5, "what my_coef weighs")}
        >>> declare_fields(Base); declare_fields(Mine)  # Policy and the pipelines call it for every subclass
        >>> Mine.default_config  # the base's key first, then its own
        {'gamma': 0.99, 'my_coef': 0.5}
    """
    own = cls.__dict__.get("fields")
    if own is None:
        return
    inherited = inherited_fields(cls)
    withdrawn = tuple(cls.__dict__.get("withdrawn_fields", ()))
    unknown = [key for key in withdrawn if key not in inherited and key not in own]
    if unknown:
        raise TypeError(f"{cls.__name__}.withdrawn_fields names {', '.join(map(repr, unknown))}, which neither it "
                        f"nor its bases declare: remove the name")
    fields = {key: field for key, field in inherited.items() if key not in own}
    fields.update(own)
    for key in withdrawn:
        fields.pop(key, None)
    cls.fields = fields
    for name, value in derived(fields).items():
        setattr(cls, name, value)
