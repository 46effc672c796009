"""Files and values made by someone else are data, bounded and checked (issue 27: items 5, 8, 9 and the refused
writes of the commands that live in zoo/cli.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zoo.cli import main
from zoo.config import load_config_file
from zoo.config.checks import parse_override
from zoo.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]

# Nine levels of nine: 9**9 = 387 million strings from 1.5 KB; a walk of the expanded config never ends.
BILLION_LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n"
    for previous, name in zip("abcdefgh", "bcdefghi")
) + "policy: *i\n"


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("zoo: error: "), err
    return lines[0]


def _fake_run(folder: Path, config_text: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(config_text)
    (folder / "metrics.jsonl").write_text('{"iteration": 1, "env_steps": 8, "episode_return_mean": 1.0}\n')
    return folder


def test_billion_laughs_is_refused_by_the_config_reader_in_one_line(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(BILLION_LAUGHS)
    assert len(BILLION_LAUGHS) < 2000
    started = time.perf_counter()
    with pytest.raises(ConfigError) as refused:
        load_config_file(path)
    assert time.perf_counter() - started < 2.0
    assert str(refused.value) == (
        f"config file '{path}' expands to more than 100000 values (YAML aliases repeated, or one that contains "
        f"itself): refusing to read it; write the values out without anchors and aliases")


def test_aliases_within_the_bound_still_read(tmp_path):
    path = tmp_path / "config.yaml"
    # 3 levels of 9: 729 values, a legitimate use of anchors
    path.write_text('a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n'
                    'c: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n')
    loaded = load_config_file(path)
    assert loaded.c[8][8] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert sum(len(inner) for outer in loaded.c for inner in outer) == 729


def test_the_bound_counts_expanded_values_exactly(tmp_path, monkeypatch):
    import zoo.config.files as files

    # [*a]*k with a = 10 scalars plus its own sequence node: the document is 1 mapping + keys and values.
    text = "a: &a [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: [*a, *a, *a]\n"
    # nodes: mapping 1 + key 'a' 1 + seq a 11 + key 'b' 1 + seq b (1 + 3 * 11) = 48
    monkeypatch.setattr(files, "MAX_CONFIG_VALUES", 48)
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert load_config_file(path).b[2][9] == 9
    monkeypatch.setattr(files, "MAX_CONFIG_VALUES", 47)
    with pytest.raises(ConfigError, match="expands to more than 47 values"):
        load_config_file(path)


def test_an_alias_that_contains_itself_is_refused(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("policy: &p\n  type: ppo\n  again: *p\n")
    with pytest.raises(ConfigError, match="expands to more than"):
        load_config_file(path)


@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, "a:\n" + "".join(" " * k + "b:\n" for k in range(1, 3000))])
def test_deep_nesting_is_one_line(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError):
        load_config_file(path)


def test_deep_json_config_is_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_config_file(path)


def test_a_huge_config_file_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("policy:\n  type: ppo\n" + "# padding\n" * 200_000)
    with pytest.raises(ConfigError, match="larger than 1 MiB"):
        load_config_file(path)


def test_billion_laughs_in_a_set_value_is_refused():
    value = "{" + BILLION_LAUGHS.replace("\n", ", ").rstrip(", ").replace("policy: *i", "x: *i") + "}"
    with pytest.raises(ConfigError, match="the value of --set policy.x expands to more than 100000 values"):
        parse_override(f"policy.x={value}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", [["eval", "{run}"], ["plot", "{run}"], ["export", "{run}", "--format", "onnx"],
                                     ["run", "--resume", "{run}"]])
def test_every_reader_of_a_run_refuses_a_billion_laughs_config(tmp_path, capsys, command):
    run = _fake_run(tmp_path / "runs" / "laughs", BILLION_LAUGHS)
    code = main([part.replace("{run}", str(run)) for part in command])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2
    assert "expands to more than 100000 values" in line and str(run / "config.yaml") in line


@pytest.mark.timeout(60)
def test_zoo_load_refuses_a_billion_laughs_config(tmp_path):
    import zoo

    run = _fake_run(tmp_path / "laughs", BILLION_LAUGHS)
    with pytest.raises(ConfigError, match="expands to more than 100000 values"):
        zoo.load(run)


def test_a_metrics_line_nested_thousands_deep_is_a_damaged_row(tmp_path):
    from zoo.errors import RunDirectoryError
    from zoo.run.metrics_files import read_rows

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 1}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(RunDirectoryError, match="line 2 is not a metrics row"):
        read_rows(path)


# -- item 9: a string where a list of module names belongs -------------------------------------------------
def test_import_names_as_one_string_is_one_clear_line(tmp_path, capsys):
    code = main(["run", "--config", str(REPO / "configs" / "ppo_cartpole.py"), "--set", "import_names=some_module",
                 "--set", f"runs_dir={tmp_path}"])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2
    assert line == ("zoo: error: import_names must be a list of module names, got str 'some_module': write "
                    "['some_module'] (on the command line: --set 'import_names=[some_module]')")
    assert not list(tmp_path.iterdir())


def test_import_names_as_a_list_from_the_command_line_imports_it(tmp_path, capsys):
    (tmp_path / "zoo_test_marker_module.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    code = main(["run", "--config", str(REPO / "configs" / "ppo_cartpole.py"),
                 "--set", "import_names=[zoo_test_marker_module]", "--set", f"import_paths=[{tmp_path}]",
                 "--set", f"runs_dir={tmp_path / 'runs'}", "--set", "pipeline.max_env_steps=64",
                 "--set", "pipeline.eval_every=0", "-q"])
    sys.modules.pop("zoo_test_marker_module", None)
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "imported").is_file()


# -- item 6 (the CLI's own writers): a refused write is one line, exit 2, no temporary file ------------------
def test_eval_json_refused_by_the_system_is_one_line(tmp_path):
    run = tmp_path / "runs" / "tiny"
    done = subprocess.run([sys.executable, "-m", "zoo", "run", "--config", str(REPO / "configs" / "ppo_cartpole.py"),
                           "--set", f"runs_dir={tmp_path / 'runs'}", "--exp-name", "tiny", "-q",
                           "--set", "pipeline.max_env_steps=64", "--set", "pipeline.eval_every=0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    out.mkdir()
    # A real refusal: the file size limit (EFBIG: Python ignores SIGXFSZ), as a full disk would refuse.
    done = subprocess.run(["bash", "-c", f"ulimit -f 0; exec {sys.executable} -m zoo eval {run} --episodes 1 "
                           f"--json {out / 'e.json'}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"zoo: error: cannot write '{out / 'e.json'}' (File too large): choose another --json"]
    assert list(out.iterdir()) == []


def test_an_os_refusal_that_reaches_the_cli_is_one_line_not_a_bug(monkeypatch, capsys):
    import errno

    import zoo.cli as cli

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", "/data/x.png")

    monkeypatch.setattr(cli, "_list", lambda: full(None))
    assert main(["list"]) == 2
    assert capsys.readouterr().err.strip() == ("zoo: error: cannot write '/data/x.png' (No space left on device): "
                                               "free space or choose another place")

    def other(args):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(cli, "_list", lambda: other(None))
    assert main(["list"]) == 1
    assert "internal error" in capsys.readouterr().err


@pytest.fixture
def full_disk(tmp_path):
    """A real, full file system: a 64 KiB tmpfs filled to the last byte (needs root and mount; skipped without)."""
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.decode().strip()[:80]})")
    try:
        descriptor = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(descriptor, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(descriptor)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_runs")
    done = subprocess.run([sys.executable, "-m", "zoo", "run", "--config", str(REPO / "configs" / "ppo_pendulum.py"),
                           "--set", f"runs_dir={root}", "--exp-name", "tiny", "-q",
                           "--set", "pipeline.max_env_steps=256",
                           "--set", "pipeline.eval_every=1", "--set", "pipeline.eval_episodes=1"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    (root / "tiny" / "final_eval.json").write_text(json.dumps({"returns": [-1200.0, -1100.0], "episodes": 2}))
    return root / "tiny"


@pytest.mark.parametrize(("command", "written"), [
    (["eval", "{run}", "--episodes", "1", "--json", "{out}/e.json"], "e.json"),
    (["plot", "{run}", "--out", "{out}/c.png"], "c.png"),
    (["plot", "{run}", "--aggregate", "--reps", "100", "--json", "{out}/a.json"], "a.json"),
    (["export", "{run}", "--format", "torchscript", "--check", "8", "--out", "{out}/p.pt"], "p.pt"),
])
def test_every_writer_on_a_full_disk_is_one_line_and_leaves_nothing(full_disk, tiny_run, capsys, command, written):
    pytest.importorskip("matplotlib")
    before = sorted(p.name for p in full_disk.iterdir())
    code = main([part.replace("{run}", str(tiny_run)).replace("{out}", str(full_disk)) for part in command])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2
    assert f"cannot write '{full_disk / written}' (No space left on device)" in line
    assert sorted(p.name for p in full_disk.iterdir()) == before  # no temporary file left
