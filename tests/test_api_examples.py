"""Every name on the plugin contract's API page (docs/api/plugins.md) shows an example, and every example runs.

The names are ``contract_sections()`` of tools/api_contract.py, the list the page is written from. A class's or
function's docstring must hold an ``Examples:`` section (doctest lines) or a ``::`` code block (the hooks show a
``@hookimpl`` function that way), so a new contract name without an example fails here. The doctests of every
module (its own docstring), class and function on the page run as the page shows them, with ``ELLIPSIS`` (a long
error message may end in ``...``); a failure names the object, the line and what the example gave instead.
Constants (the registries) and the ``hookimpl`` marker are documented by attribute docstrings that Python does not
keep at run time: they are not checked here.
"""

from __future__ import annotations

import doctest
import inspect
import re
from pathlib import Path
from typing import Any

import torch
from helpers import load_tool

ROOT = Path(__file__).resolve().parents[1]
api_contract = load_tool("api_contract")

# An "Examples:" section title, or a line ending a paragraph with "::" (a literal block follows).
_EXAMPLE = re.compile(r"^\s*Examples:\s*$|::\s*$", re.M)


def _documented() -> list[tuple[str, Any]]:
    """(dotted path, object) of every module, class and function on the page, in page order."""
    found = []
    for _title, _intro, paths in api_contract.contract_sections():
        for path in paths:
            obj = api_contract.resolve(path)
            if inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isfunction(obj):
                found.append((path, obj))
    return found


DOCUMENTED = _documented()


def _has_example(obj: Any) -> bool:
    return bool(_EXAMPLE.search(obj.__doc__ or ""))  # its own docstring, not one inherited (inspect.getdoc)


class _Collecting(doctest.DocTestRunner):
    """A runner that keeps one line per failing example instead of printing a report."""

    def __init__(self) -> None:
        super().__init__(optionflags=doctest.ELLIPSIS)
        self.failed: list[str] = []

    def _where(self, test: doctest.DocTest, example: doctest.Example) -> str:
        where = test.name
        if test.filename and test.lineno is not None:
            where += f" ({Path(test.filename).resolve().relative_to(ROOT)}:{test.lineno + example.lineno + 1})"
        return f"{where}: >>> {example.source.strip()}"

    def report_failure(self, out: Any, test: doctest.DocTest, example: doctest.Example, got: str) -> None:
        self.failed.append(f"{self._where(test, example)}\n    expected {example.want!r}, got {got!r}")

    def report_unexpected_exception(self, out: Any, test: doctest.DocTest, example: doctest.Example,
                                    exc_info: Any) -> None:
        error = exc_info[1]
        self.failed.append(f"{self._where(test, example)}\n    raised {type(error).__name__}: {error}")


def _failing_examples(path: str, obj: Any) -> list[str]:
    """The failing examples of ``obj``'s own docstring, one line each."""
    module = obj if inspect.ismodule(obj) else inspect.getmodule(obj)
    runner = _Collecting()
    for test in doctest.DocTestFinder(recurse=False).find(obj, path, module=module):
        runner.run(test, out=lambda _text: None, clear_globs=True)
    return runner.failed


def test_every_contract_name_has_an_example():
    missing = [path for path, obj in DOCUMENTED if not inspect.ismodule(obj) and not _has_example(obj)]
    assert not missing, (f"these names on the API page (tools/api_contract.py) have no example: "
                         f"{', '.join(missing)}; add an 'Examples:' section of doctest lines (or, for a hook, a '::' "
                         f"block of a @hookimpl function) to each docstring")


def test_every_example_on_the_page_runs():
    failed: list[str] = []
    with torch.random.fork_rng(devices=[]):  # the examples that sample must not move other tests' generator
        torch.manual_seed(0)
        for path, obj in DOCUMENTED:
            failed += _failing_examples(path, obj)
    assert not failed, f"{len(failed)} example(s) on the API page fail:\n" + "\n".join(failed)

