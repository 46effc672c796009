"""The built documentation site names no path of a machine, and every link of its changelog resolves.

The site is built once, as CI builds it (``mkdocs build --strict``, the ``docs`` extra), into a temporary folder; the
test is skipped where that extra is not installed. Then every built page and data file (HTML, the search index, the
sitemap) is read for absolute paths under /work/, /home/, /tmp/, /Users/ or /root/: a figure's run folder, a
developer's checkout or a scratch file named in a page says where one machine kept it, not where a reader's is. A
path inside a URL (``https://host/home/...``) or relative to something (``runs/tmp/``, ``~/``) is not one.

The changelog page includes CHANGELOG.md from the repository root (pymdownx.snippets), where a link written relative
to the root (``README.md#section``, ``docs/speed.md``) means nothing on the site: every link of the built page must
name a page of the site, and an anchor that exists there. The two checks are plain functions, tested on a small
hand-made site first, so that each is seen to fail on what it is meant to catch.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]

# An absolute path on a machine: /work/, /home/, /tmp/, /Users/ or /root/ at the start of a path, i.e. not after a
# host, a word, a dot, a tilde or another slash (``https://example.org/home/``, ``runs/tmp/``, ``~/tmp/`` are not
# machine paths); ``file:///tmp/`` is.
MACHINE_PATH = re.compile(r"(?:(?<![\w.~:/\\-])|(?<=file://))/(?:work|home|tmp|Users|root)/[^\s\"'<>)]*")
SCANNED_SUFFIXES = {".html", ".json", ".xml", ".txt"}
LINK = re.compile(r"""<(?:a|img|link)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)
ARTICLE = re.compile(r"<article\b.*?</article>", re.DOTALL | re.IGNORECASE)


def machine_paths(site: Path, suffixes: set[str] = SCANNED_SUFFIXES) -> list[str]:
    """``'FILE: path'`` for every machine path in the built site's pages and data files (theme assets left out), or
    in the files of ``suffixes`` below another folder."""
    found = []
    for path in sorted(site.rglob("*")):
        if path.suffix not in suffixes or not path.is_file() or "assets" in path.relative_to(site).parts:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{path.relative_to(site)}: {match.group(0)}" for match in MACHINE_PATH.finditer(text)]
    return found


def _ids(page: Path, cache: dict[Path, set[str]]) -> set[str]:
    if page not in cache:
        cache[page] = set(re.findall(r"""\bid\s*=\s*["']([^"']+)["']""", page.read_text(encoding="utf-8")))
    return cache[page]


def broken_links(site: Path, page: str) -> list[str]:
    """Every link in the content of ``page`` (a path under ``site``, e.g. ``changelog/index.html``) that names no
    file of the site, or an anchor its target lacks; links to other hosts and mailto: are not followed."""
    source = site / page
    html = source.read_text(encoding="utf-8")
    content = "\n".join(ARTICLE.findall(html)) or html
    page_url = "/" + page
    broken, ids = [], {}
    for href in LINK.findall(content):
        parts = urlsplit(href)
        if parts.scheme or parts.netloc:  # http(s), mailto: another host's to answer for
            continue
        target_url = urlsplit(urljoin(page_url, href))
        relative = unquote(target_url.path).lstrip("/")
        target = (site / relative) if relative else site
        if target.is_dir() or relative.endswith("/") or not relative:
            target = target / "index.html"
        if not target.resolve().is_relative_to(site.resolve()) or not target.is_file():
            broken.append(f"{href}: no {target.relative_to(site) if target.is_relative_to(site) else target}")
            continue
        anchor = unquote(target_url.fragment)
        if anchor and target.suffix == ".html" and anchor not in _ids(target, ids):
            broken.append(f"{href}: no anchor #{anchor} in {target.relative_to(site)}")
    return broken


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_checks_catch_a_machine_path_and_a_broken_changelog_link(tmp_path):
    site = tmp_path / "site"
    _write(site / "speed" / "index.html", '<article><h2 id="on-a-gpu">On a GPU</h2>'
           "<code>python benchmarks/behaviour_parity.py --out /tmp/before.json</code>"
           '<a href="https://example.org/home/user/">a URL</a> runs/tmp/x ~/tmp/y</article>')
    _write(site / "search" / "search_index.json", '{"docs": [{"text": "kept in /work/main/runs/sac"}]}')
    _write(site / "assets" / "javascripts" / "bundle.js", 'var a = "/home/";')  # the theme's, not ours
    assert machine_paths(site) == ["search/search_index.json: /work/main/runs/sac",
                                   "speed/index.html: /tmp/before.json"]

    _write(site / "index.html", "<article>home</article>")
    _write(site / "changelog" / "index.html", '<nav><a href="../nowhere/">the nav is not the content</a></nav>'
           '<article><h2 id="speed-history">Speed history</h2>'
           '<a href="../speed/">ok</a> <a href="../speed/#on-a-gpu">ok</a> <a href="#speed-history">ok</a> '
           '<a href="../">ok</a> <a href="https://github.com/x/y">external</a> '
           '<a href="README.md#export">repo-relative</a> <a href="../docs/speed.md">repo-relative</a> '
           '<a href="../speed/#moonshot">gone anchor</a> <a href="#nowhere">gone anchor</a></article>')
    assert broken_links(site, "changelog/index.html") == [
        "README.md#export: no changelog/README.md",
        "../docs/speed.md: no docs/speed.md",
        "../speed/#moonshot: no anchor #moonshot in speed/index.html",
        "#nowhere: no anchor #nowhere in changelog/index.html",
    ]


def _docs_extra_missing() -> str | None:
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "pymdownx"):
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except ModuleNotFoundError:
            return module
    return None


def test_built_site_has_no_machine_path_and_its_changelog_links_resolve(tmp_path):
    missing = _docs_extra_missing()
    if missing is not None:
        pytest.skip(f"the docs extra is not installed ({missing} missing: pip install -e '.[docs]'), so the site "
                    "cannot be built here; .ci/run installs it")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    # mkdocs writes the pages before it aborts on a strict warning, so the checks below still say what they find.
    problems = []
    if build.returncode != 0:
        problems.append(f"mkdocs build --strict failed ({build.returncode}):\n{build.stdout}{build.stderr}")
    if not (site / "changelog" / "index.html").is_file():
        pytest.fail("\n".join(problems + ["the build wrote no changelog page"]))
    paths = machine_paths(site)
    if paths:
        problems.append("machine paths in the built site (write them relative, e.g. before.json, runs/NAME):\n  "
                        + "\n  ".join(paths))
    links = broken_links(site, "changelog/index.html")
    if links:
        problems.append("changelog links that do not resolve on the site (CHANGELOG.md is included into "
                        "docs/changelog.md: link pages as speed.md, benchmarking.md#on-a-cluster):\n  "
                        + "\n  ".join(links))
    content = "\n".join(ARTICLE.findall((site / "changelog" / "index.html").read_text(encoding="utf-8")))
    if len(LINK.findall(content)) < 10:  # the snippet include itself failing would leave nothing to check
        problems.append("the changelog page holds fewer than 10 links: is CHANGELOG.md still included?")
    assert not problems, "\n\n".join(problems)


def test_the_committed_benchmark_records_hold_no_machine_path():
    """benchmarks/ (kept results, device and speed records, scripts) is committed as it is: no runs folder, home or
    temporary path of the machine that wrote it (zoo.bench.results.portable keeps results so)."""
    assert machine_paths(ROOT / "benchmarks", {".json", ".txt", ".yaml", ".md", ".py", ".csv"}) == []
