"""Every public name of the plugin contract has an entry on an API page (docs/api/*.md, written by
``tools/docs_pages.py``): ``zoo.__all__``, ``zoo.policies.__all__``, ``zoo.rl_utils.__all__``, every hook of
``zoo.hookspecs`` and every name the example plugins import from zoo. A new public name without an entry fails here;
that the pages are current is tests/test_docs_pages.py's check."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from helpers import load_tool

from zoo import hookspecs

ROOT = Path(__file__).resolve().parents[1]
api_contract = load_tool("api_contract")
ENTRY = re.compile(r"^::: (\S+)$", re.M)


def _documented() -> dict[int, str]:
    """id of each object with an entry on an API page -> its entry's path."""
    out = {}
    for page in sorted((ROOT / "docs" / "api").glob("*.md")):
        for path in ENTRY.findall(page.read_text(encoding="utf-8")):
            out[id(api_contract.resolve(path))] = path
    return out


def _example_imports() -> list[tuple[str, str]]:
    """(module, name) of every ``from zoo... import name`` in examples/."""
    out = []
    for source in sorted((ROOT / "examples").rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "zoo":
                out += [(node.module, alias.name) for alias in node.names]
    return out


def _group(group: str) -> list[tuple[str, object]]:
    """The public names of one part of the contract, as (dotted path, object)."""
    if group == "examples":
        return [(f"{m}.{n}", getattr(importlib.import_module(m), n)) for m, n in _example_imports()]
    if group == "zoo.hookspecs":
        return [(f"zoo.hookspecs.{n}", o) for n, o in vars(hookspecs).items() if hasattr(o, "zoo_spec")]
    module = importlib.import_module(group)
    return [(f"{group}.{name}", getattr(module, name)) for name in module.__all__]


def test_the_examples_import_names_from_zoo():
    assert {"OffPolicyPolicy", "ActorCriticPolicy", "Field", "hookimpl", "POLICY_REGISTRY"} <= {
        name for _, name in _example_imports()}


@pytest.mark.parametrize("group", ["zoo", "zoo.policies", "zoo.rl_utils", "zoo.hookspecs", "examples"])
def test_every_public_name_of_the_contract_has_an_api_entry(group):
    documented = _documented()
    names = _group(group)
    assert len(names) >= 3
    missing = sorted(path for path, obj in names if id(obj) not in documented and not isinstance(obj, str))
    assert not missing, f"no entry on any docs/api page for: {', '.join(missing)} (add it to tools/api_contract.py)"


def test_the_contract_page_names_the_five_rl_utils_names_once_missing():
    page = (ROOT / "docs" / "api" / "rl_utils.md").read_text(encoding="utf-8")
    for name in ("tanh_log_det_jacobian", "hl_gauss_probs", "two_hot", "vtrace_advantage", "vtrace_nstep_return"):
        assert re.search(rf"^::: zoo\.rl_utils\.\w+\.{name}$", page, re.M), name
