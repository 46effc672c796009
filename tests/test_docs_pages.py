"""The documentation site's generated parts are fresh, complete and agree with ``zoo config``.

A stale part fails here with the one command that regenerates it (``python tools/docs_pages.py``). The site itself
is built by ``mkdocs build --strict`` in .ci/run (the ``docs`` extra); these tests need only the ``dev`` extra.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from helpers import load_tool

from zoo.describe import describe

ROOT = Path(__file__).resolve().parents[1]
COMMAND = "python tools/docs_pages.py"
docs_pages = load_tool("docs_pages")


def _builtin_names(hook: str) -> list[str]:
    from zoo import builtin_plugin

    names: list[str] = []
    getattr(builtin_plugin, hook)(lambda name, _cls: names.append(name))
    return names


def _page(name: str, folder: str) -> Path:
    return ROOT / "docs" / folder / f"{name.replace('_', '-')}.md"


def _table_defaults(page: Path, spec: str) -> dict[str, str]:
    """The ``key -> default`` cells of the key table in ``page``'s region ``spec``."""
    text = page.read_text(encoding="utf-8")
    region = re.search(rf"<!-- generated: {spec} -->\n(.*?)<!-- end generated -->", text, re.S)
    assert region, f"{page.relative_to(ROOT)} has no '<!-- generated: {spec} -->' region"
    rows = re.findall(r"^\| `([^`]+)` \| `?(.*?)`? \| ", region.group(1), re.M)
    return {key: default.replace("\\|", "|") for key, default in rows}


def _zoo_config_defaults(policy: str, pipeline: str | None, section: str) -> dict[str, str]:
    """``key -> default`` of one section as ``zoo config`` prints it (the text, read back)."""
    out: dict[str, str] = {}
    inside = False
    for line in describe(policy, pipeline).splitlines():
        if line.startswith("["):
            inside = line.startswith(f"[{section} ")
            continue
        if inside:
            key = line.split()[0]
            out[key] = line[2:].removeprefix(key).lstrip()
    return out


def _same_default(shown: str, printed: str) -> bool:
    """Whether ``printed`` (the rest of a ``zoo config`` line) starts with exactly the default ``shown``."""
    return re.match(re.escape(shown) + r"(\s|$)", printed) is not None


def test_generated_parts_are_fresh():
    stale = docs_pages.stale_files()
    assert not stale, (f"generated docs are stale: {', '.join(stale)}; regenerate with `{COMMAND}` and commit "
                       f"the result")


def test_a_stale_page_is_caught_and_a_new_key_appears_after_regeneration(monkeypatch):
    page = ROOT / "docs" / "algorithms" / "ppo.md"
    text = page.read_text(encoding="utf-8")
    edited = text.replace("| `clip_ratio` | `0.2` |", "| `clip_ratio` | `0.3` |")
    assert edited != text
    assert docs_pages.render_regions(edited, "ppo.md") == text  # regeneration restores the declared default

    from zoo.policies import PPOPolicy

    # (a key PPO does not declare: ``compile`` served here until PPO declared it)
    monkeypatch.setattr(PPOPolicy, "default_config", {**PPOPolicy.default_config, "late_switch": False})
    monkeypatch.setattr(PPOPolicy, "config_docs", {**PPOPolicy.config_docs, "late_switch": "a key added later"})
    regenerated = docs_pages.render_regions(text, "ppo.md")
    assert "| `late_switch` | `false` | true or false |  | a key added later |" in regenerated
    assert regenerated != text  # so the freshness test would name ppo.md until the page is regenerated


@pytest.mark.parametrize("policy", _builtin_names("register_policies"))
def test_every_algorithm_has_its_page_with_the_defaults_of_zoo_config(policy):
    page = _page(policy, "algorithms")
    assert page.exists(), f"algorithm '{policy}' has no page {page.relative_to(ROOT)}"
    shown = _table_defaults(page, f"keys policy {policy}")
    expected = _zoo_config_defaults(policy, None, "policy")
    assert list(shown) == list(expected), f"{page.name}: keys differ from `zoo config {policy}`; run {COMMAND}"
    for key, default in shown.items():
        assert _same_default(default, expected[key]), (
            f"{page.name}: {key} shows {default}, `zoo config {policy}` prints {expected[key]!r}; run {COMMAND}")
    assert f"<!-- generated: configs {policy} -->" in page.read_text(encoding="utf-8")
    assert f"<!-- generated: bench {policy} -->" in page.read_text(encoding="utf-8")


@pytest.mark.parametrize("pipeline", _builtin_names("register_pipelines"))
def test_every_pipeline_has_its_page_with_the_defaults_of_zoo_config(pipeline):
    from zoo.plugins import load_plugins
    from zoo.registry import POLICY_REGISTRY

    load_plugins()
    page = _page(pipeline, "pipelines")
    assert page.exists(), f"pipeline '{pipeline}' has no page {page.relative_to(ROOT)}"
    policy = next(name for name in _builtin_names("register_policies")
                  if pipeline in POLICY_REGISTRY.get(name).pipelines)
    shown = _table_defaults(page, f"keys pipeline {pipeline}")
    expected = _zoo_config_defaults(policy, pipeline, "pipeline")
    assert list(shown) == list(expected), f"{page.name}: keys differ from `zoo config`; run {COMMAND}"
    for key, default in shown.items():
        assert _same_default(default, expected[key]), f"{page.name}: {key} shows {default}; run {COMMAND}"


def test_the_base_keys_table_lists_every_top_level_env_logger_and_accel_key():
    from zoo.config.resolve import BASE_CONFIG

    text = (ROOT / "docs" / "configs.md").read_text(encoding="utf-8")
    for key, value in BASE_CONFIG.items():
        for name, default in (value.items() if isinstance(value, dict) else [(key, value)]):
            if key in ("policy", "pipeline"):
                continue
            shown = json.dumps(default) if not isinstance(default, str) else repr(default)
            assert f"| `{name}` | `{shown}` |" in text, f"docs/configs.md lacks {name}; run {COMMAND}"


@pytest.mark.parametrize("package, page", [("zoo", "docs/api/zoo.md"), ("zoo.rl_utils", "docs/api/rl_utils.md")])
def test_the_api_reference_lists_every_public_name_with_a_docstring(package, page):
    text = (ROOT / page).read_text(encoding="utf-8")
    names = docs_pages.public_names(package)  # raises for a public name without a docstring
    assert {name for name, _, _ in names} == set(__import__(package, fromlist=["__all__"]).__all__)
    for name, module, doc in names:
        assert f"::: {module}.{name}\n" in text, f"{page} lacks {package}.{name}; run {COMMAND}"
        assert doc.strip()


def test_the_site_navigation_holds_every_page():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r"([\w/.-]+\.md)\s*$", nav, re.M))
    pages = {str(path.relative_to(ROOT / "docs")) for path in (ROOT / "docs").rglob("*.md")}
    assert pages == listed, f"pages outside mkdocs.yml's nav: {pages - listed}; nav entries without a page: " \
                            f"{listed - pages}"
    assert yaml.safe_load(nav.replace("!!python", "")).get("strict") is True


def test_the_readme_is_a_front_door_with_the_two_commands_near_the_top():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    top = lines[:30]
    install = ('python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && pip install -e ".[dev]" '
               '&& zoo run --config configs/ppo_cartpole.py')
    assert install in top
    assert "python -m pytest -q" in top
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move detail into docs/ (the site) and link it"
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", "\n".join(lines)):  # the site does not check these
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def test_the_readme_restates_every_comparison_of_the_benchmarks_page_with_its_verdicts():
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    section = benchmarks.split("\n## Comparisons\n", 1)[1].split("\n## ", 1)[0]
    questions = re.findall(r"^\| (\S+ vs \S+) \| (.*) \|$", section, re.M)
    assert questions, "docs/benchmarks.md has no comparison rows"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    region = re.search(r"<!-- generated: comparisons -->\n(.*?)<!-- end generated -->", readme, re.S)
    assert region, "README.md has no '<!-- generated: comparisons -->' region"
    for question, cells in questions:
        assert f"| {question} | {cells} |" in region.group(1), question
