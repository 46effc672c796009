"""Benchmark suites from plugins (issue 53): a plugin's suite (``tests/bench_suite_plugin``, installed through a faked
``zoo`` entry point) is listed with its source, trained, resumed and reported as the built-in ones are; a name already
taken is refused as in every registry; an unknown suite is one line listing the known ones (exit 2)."""

from __future__ import annotations

import importlib.metadata
import json
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from zoo import plugins
from zoo.bench import report
from zoo.bench.suites import BUILTIN_SUITES, SUITES
from zoo.cli import main
from zoo.plugins import PluginReport, ZooPluginWarning, load_plugins
from zoo.registry import SUITE_REGISTRY

TESTS = Path(__file__).resolve().parent
PLUGIN_ENTRY = "suite_plugin_cartpole"


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., PluginReport]]:
    """``install(("name", "module"), ...)``: load these modules of tests/bench_suite_plugin as if pip-installed (entry
    points of group 'zoo', loaded after the built-in plugin); whatever they registered is removed afterwards."""
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setattr(plugins, "_report", None)
    monkeypatch.setattr(plugins, "_manager", None)
    for module in [name for name in sys.modules if name.startswith("bench_suite_plugin")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(report, "_figure", lambda *args: False)  # the figure has tests of its own (test_plot.py)
    before = set(SUITE_REGISTRY.names())

    def load(*plugins_: tuple[str, str]) -> PluginReport:
        points = [importlib.metadata.EntryPoint(name, f"bench_suite_plugin.{module}", "zoo")
                  for name, module in plugins_]
        monkeypatch.setattr(importlib.metadata, "entry_points", lambda *, group: points if group == "zoo" else [])
        return load_plugins(force=True)

    try:
        yield load
    finally:
        for name in set(SUITE_REGISTRY.names()) - before:
            SUITE_REGISTRY.unregister(name)


def _run_bench(args: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    code = main(["bench", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_zoo_bench_list_shows_every_suite_with_its_source(install, capsys):
    assert install(("suite_plugin", "plugin")).ok
    code, out, _ = _run_bench(["--list"], capsys)
    assert code == 0
    rows = {line.split()[0]: line.split(None, 2) for line in out.splitlines()[1:]}
    assert rows["suite_plugin"] == ["suite_plugin", "suite_plugin", PLUGIN_ENTRY]
    assert set(BUILTIN_SUITES) <= set(rows) and rows["classic"][1] == "built-in"
    assert out.splitlines()[0].split() == ["suite", "source", "entries"]


@pytest.mark.slow  # trains and evaluates one real run (child processes): about 15 s
def test_a_plugin_suite_trains_resumes_and_reports_like_a_built_in_one(install, tmp_path, capsys):
    install(("suite_plugin", "plugin"))
    runs = tmp_path / "runs"
    code, _, err = _run_bench(["suite_plugin", "--seeds", "1", "--runs-dir", str(runs)], capsys)
    assert code == 0, err
    run = runs / "bench" / PLUGIN_ENTRY / "seed_0"
    final = json.loads((run / "final_eval.json").read_text())
    assert final["episodes"] == 10 and len(final["returns"]) == 10
    assert "max_env_steps: 256" in (run / "config.yaml").read_text()  # the entry's budget, from its overrides
    # Resumed as the built-ins are: the final evaluation alone is done again, the training is not.
    trained = (run / "model.pt").stat().st_mtime_ns
    (run / "final_eval.json").unlink()
    code, _, err = _run_bench(["suite_plugin", "--seeds", "1", "--runs-dir", str(runs)], capsys)
    assert code == 0, err
    assert (run / "final_eval.json").is_file() and (run / "model.pt").stat().st_mtime_ns == trained
    out = tmp_path / "benchmarks.md"
    code, _, err = _run_bench(["suite_plugin", "--seeds", "1", "--runs-dir", str(runs), "--report", str(out)], capsys)
    assert code == 0, err
    text = out.read_text()
    (row,) = [line for line in text.splitlines() if line.startswith(f"| {PLUGIN_ENTRY} |")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1:5] == ["CartPole-v1", "ppo", "256", "1/1"]
    mean = sum(json.loads((run / "final_eval.json").read_text())["returns"]) / 10
    assert cells[6].startswith(f"{mean:,.1f} +- ")
    assert cells[8].startswith("Example lib: 123.4 +- 5.6 (CartPole-v1, 256 steps, final evaluation)")
    assert "## suite_plugin" in text


def test_a_suite_name_already_taken_is_refused_with_both_sources(install):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = install(("suite_plugin", "plugin"), ("clash_builtin", "clash_builtin"),
                         ("clash_plugin", "clash_plugin"))
    assert loaded.loaded[-1] == "suite_plugin"
    assert [failure.name for failure in loaded.failures] == ["clash_builtin", "clash_plugin"]
    messages = [str(w.message) for w in caught if issubclass(w.category, ZooPluginWarning)]
    assert messages == [
        "zoo plugin 'clash_builtin' failed to load: benchmark suite 'classic' is registered twice: by built-in and "
        "by clash_builtin; rename one of them",
        "zoo plugin 'clash_plugin' failed to load: benchmark suite 'suite_plugin' is registered twice: by "
        "suite_plugin and by clash_plugin; rename one of them"]
    assert SUITES["classic"] == BUILTIN_SUITES["classic"] and SUITE_REGISTRY.source("classic") == "built-in"
    assert SUITES["suite_plugin"][0].name == PLUGIN_ENTRY
    assert "clash_first" not in SUITES  # a refused plugin is not half loaded


def test_an_unknown_suite_is_one_line_listing_the_known_ones(install, capsys):
    install(("suite_plugin", "plugin"))
    code, out, err = _run_bench(["suite_plugn", "--seeds", "1"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("zoo: error: unknown benchmark suite 'suite_plugn': choose from ")
    known = err.split("choose from ")[1].split(" (did you mean")[0].split(", ")
    assert {"classic", "memory", "suite_plugin"} <= set(known)
    assert err.endswith(" (did you mean 'suite_plugin'?)\n")


def test_a_suite_zoo_bench_cannot_use_is_one_line_naming_it_and_its_plugin(install, tmp_path, capsys):
    install(("broken", "broken"))
    code, _, err = _run_bench(["broken_not_entries", "--runs-dir", str(tmp_path)], capsys)
    assert (code, err) == (2, "zoo: error: benchmark suite 'broken_not_entries' (of the plugin 'broken') is not a "
                              "non-empty tuple of zoo.bench.suites.Entry (got tuple): fix its register_bench_suites\n")
    code, _, err = _run_bench(["broken_missing_config", "--runs-dir", str(tmp_path)], capsys)
    missing = TESTS / "bench_suite_plugin" / "no_such_config.py"
    assert (code, err) == (2, f"zoo: error: the config file of benchmark entry 'broken_missing', '{missing}', does "
                              "not exist: reinstall the plugin whose suite declares it (zoo bench --list names it)\n")
    code, _, err = _run_bench(["broken_shared_name", "--runs-dir", str(tmp_path)], capsys)
    assert (code, err) == (2, "zoo: error: entry 'ppo_cartpole' of benchmark suite 'broken_shared_name' (of the plugin "
                              "'broken') differs from the entry of that name in suite 'classic' (built-in): their "
                              "runs would share runs/bench/ppo_cartpole/; rename one\n")
    code, out, _ = _run_bench(["--list", "broken_not_entries"], capsys)
    assert code == 0 and "broken_not_entries  broken  not usable: benchmark suite" in out
    assert not (tmp_path / "bench" / "broken_missing").exists()
