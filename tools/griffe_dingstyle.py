"""A griffe extension for the docs site: reads zoo's DI-engine-style docstrings as Google-style ones.

zoo's docstrings follow DI-engine's layout (``Overview:``, ``Arguments:``, ``Returns:``, ``Shapes:``,
``Examples:``, items written ``- name: meaning``, sections with no blank line between them). Griffe's Google
parser wants a blank line before each section and items without the dash. This rewrites the docstring text that
the site renders (never the source): a blank line before each section title, the dash dropped from the items of
``Arguments``/``Returns``/``Raises`` (their continuation lines moved right to stay under the item), and
``Overview:`` folded into the description, since it is one; a qualified title such as ``Attributes (read-only):``
becomes a note titled ``Read-only attributes``.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension

_TITLE = re.compile(r"^(\s*)(Overview|Arguments|Args|Returns|Raises|Shapes|Examples|Attributes|Notes?)"
                    r"(?: \((?P<qualifier>[\w -]+)\))?:\s*$")
_ITEM_SECTIONS = {"Arguments", "Args", "Returns", "Raises"}


def rewrite(text: str) -> str:
    """The docstring ``text`` in the layout griffe's Google parser reads (see the module docstring)."""
    out: list[str] = []
    section, title_indent, dedent, item_indent = None, 0, 0, 0
    for line in text.splitlines():
        match = _TITLE.match(line)
        if match:
            section, title_indent = match.group(2), len(match.group(1))
            if out and out[-1].strip():
                out.append("")
            if match.group("qualifier"):  # "Attributes (read-only):" -> a "Read-only attributes" note
                line = f"{match.group(1)}{match.group('qualifier').capitalize()} {section.lower()}:"
                section = "Note"
            if section == "Overview":  # the body of the description: its lines move left by one level
                dedent = 4
                continue
            dedent = 0
            out.append(line)
            continue
        indent = len(line) - len(line.lstrip())
        if section is not None and line.strip() and indent <= title_indent:
            section, dedent = None, 0  # back to prose at the section's own level
        if section == "Overview" and line.startswith(" " * dedent):
            line = line[dedent:]
        elif section in _ITEM_SECTIONS and line.lstrip().startswith("- "):
            line, item_indent = line.replace("- ", "", 1), indent
        elif section in _ITEM_SECTIONS and line.strip() and indent > item_indent:
            line = "  " + line  # a continuation was indented under the dash: keep it deeper than its item
        out.append(line)
    return "\n".join(out)


class DingStyleDocstrings(Extension):
    """Rewrites each object's docstring with ``rewrite`` as griffe loads it."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
