"""The floors of docs/layout.md as declared (issue 28, item 6): the suites below the commands import no command module,
and what moved down stays importable where it was (the same objects, not copies)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ZOO = Path(__file__).resolve().parents[1] / "zoo"
COMMANDS = ("zoo.cli", "zoo.describe", "zoo.plot", "zoo.video", "zoo.agent")


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (at any depth), relative imports resolved against its package."""
    package = ".".join(path.relative_to(ZOO.parent).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("wing", ["bench", "tune", "export", "run"])
def test_the_wings_below_the_commands_import_no_command_module(wing):
    above = sorted(f"{path.relative_to(ZOO.parent)} -> {name}" for path in (ZOO / wing).rglob("*.py")
                   for name in _imports(path) if any(name == c or name.startswith(c + ".") for c in COMMANDS))
    assert above == []


def test_what_moved_down_is_still_importable_where_it_was():
    import zoo.agent
    import zoo.bench.aggregate
    import zoo.bench.figures
    import zoo.bench.runs
    import zoo.plot
    import zoo.run.load
    import zoo.run.view

    assert zoo.agent.Agent is zoo.run.load.Agent
    assert zoo.agent.load is zoo.run.load.load_agent
    assert zoo.plot.aggregate_runs is zoo.bench.aggregate.aggregate_runs
    assert (zoo.plot.pyplot, zoo.plot.save_figure, zoo.plot.mean_band) == (
        zoo.bench.figures.pyplot, zoo.bench.figures.save_figure, zoo.bench.figures.mean_band)
    assert zoo.plot.find_runs is zoo.run.view.find_runs
    assert zoo.bench.runs.read_final_returns is zoo.run.view.read_final_returns
    assert (zoo.bench.runs.FINAL_EVAL_FILE, zoo.bench.runs.FINAL_EVAL_EPISODES) == ("final_eval.json", 10)


ALGORITHMS = ("sac", "td3", "dqn", "ppo", "a2c", "impala", "dppo", "ace")
ABOVE_ACCEL = ("zoo.policies", "zoo.pipelines", "zoo.run", "zoo.bench", "zoo.tune", "zoo.export", *COMMANDS)


def test_the_acceleration_wing_sits_below_the_policies():
    """zoo/accel/ is a floor of its own under zoo/policies/ (docs/layout.md): the family bases and the networks apply
    it; it imports nothing above it."""
    above = sorted(f"{path.relative_to(ZOO.parent)} -> {name}" for path in (ZOO / "accel").rglob("*.py")
                   for name in _imports(path) if any(name == a or name.startswith(a + ".") for a in ABOVE_ACCEL))
    assert above == []


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_an_algorithm_module_imports_nothing_of_the_acceleration_wing_and_reads_no_flag(algorithm):
    """One seam for speed: the algorithm modules stay the readable eager maths; what makes them fast is applied by
    their family base (zoo.policies.off_policy, zoo.policies.onpolicy) and declared by their networks."""
    path = ZOO / "policies" / f"{algorithm}.py"
    wing = sorted(name for name in _imports(path) if name == "zoo.accel" or name.startswith("zoo.accel."))
    assert wing == []
    text = path.read_text(encoding="utf-8")
    assert "ZOO_" not in text and "os.environ" not in text
