"""Kept benchmark results and run directories as hostile input (issue 39, section 2): whatever a pull request puts in
a results folder or a run directory, ``zoo bench --report/--results`` and the run view read it bounded and typed,
refuse it in one line (exit 2), or leave a damaged kept seed out and say so. Fast: hand-made folders, no training.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from zoo.bench import report, runner, runs
from zoo.bench.results import compressed, finished_kept, is_kept, keep, kept_state
from zoo.bench.suites import Entry
from zoo.cli import main
from zoo.config import dump_config
from zoo.errors import ZooError
from zoo.run import metrics_files
from zoo.run.view import RunView, find_runs, read_final_returns

CONFIG = ("config = dict(exp_name='b', env=dict(id='CartPole-v1'), policy=dict(type='ppo', epochs=1), "
          "pipeline=dict(num_envs=4, rollout_steps=32, max_env_steps=2048, eval_every=4, eval_episodes=2))\n")
TINY = Entry("tiny_ppo", "tiny.py", ("pipeline.stop_return=None",), 0.1)
ROWS = [{"iteration": k, "env_steps": 128 * k, "wall_time": 6.0 * k, "eval_return_mean": 10.0 * k}
        for k in range(1, 17)]


@pytest.fixture
def configs(tmp_path, monkeypatch):
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "tiny.py").write_text(CONFIG)
    monkeypatch.setitem(runner.SUITES, "tiny", (TINY,))
    monkeypatch.setattr(report, "_figure", lambda *args: False)  # the figure has tests of its own
    return folder


def _metrics(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def _kept(results: Path, seed: int, configs: Path, final: float = 100.0, config: dict | None = None) -> Path:
    """A whole kept seed of TINY, as ``zoo bench --results`` writes one."""
    folder = results / TINY.name / f"seed_{seed}"
    folder.mkdir(parents=True)
    dump_config(runs.expected_config(TINY, seed, configs) if config is None else config, folder / "config.yaml")
    (folder / "environment.json").write_text(json.dumps({"sessions": [{"started": "2026-11-27T08:00:00"}]}))
    (folder / "final_eval.json").write_text(json.dumps({"returns": [final] * 10, "episodes": 10,
                                                        "seed": runs.eval_seed(seed)}))
    (folder / "metrics.jsonl.gz").write_bytes(compressed(_metrics(ROWS)))
    return folder


def _report(tmp_path: Path, configs: Path, results: Path, seeds: int = 3) -> tuple[str, str]:
    """The table written from ``results`` and what the report said about left-out seeds."""
    said = io.StringIO()
    out = tmp_path / "benchmarks.md"
    report.report(["tiny"], out=str(out), seeds=seeds, reps=200, configs=configs, results=str(results), stream=said)
    row = next(line for line in out.read_text().splitlines() if line.startswith("| tiny_ppo"))
    return row, said.getvalue()


def _cli_report(tmp_path: Path, configs: Path, results: Path, capsys, seeds: int = 3) -> tuple[int, str]:
    code = main(["bench", "tiny", "--seeds", str(seeds), "--report", str(tmp_path / "b.md"), "--results",
                 str(results)])
    return code, capsys.readouterr().err


@pytest.fixture
def cli_configs(configs, monkeypatch):
    monkeypatch.setattr(report, "configs_dir", lambda *_: configs)
    return configs


# -- rows: bounded in count, not only in bytes ---------------------------------------------------------------------
def test_a_kept_file_of_85_million_empty_rows_is_one_line_in_seconds_and_bounded_memory(tmp_path, configs):
    kept = _kept(tmp_path / "results", 0, configs)
    stream = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip: 255 MB of "{}\n" in 260 KB, under the 256 MiB cap
    (kept / "metrics.jsonl.gz").write_bytes(b"".join(stream.compress(b"{}\n" * (1 << 20)) for _ in range(85))
                                            + stream.flush())
    assert (kept / "metrics.jsonl.gz").stat().st_size < 300_000
    # The peak resident memory of this process's own image (VmHWM: ru_maxrss would count the forked pytest too).
    script = ("import sys; from pathlib import Path; from zoo.run.view import RunView; from zoo.errors "
              "import ZooError\ntry:\n    RunView(Path(sys.argv[1])).rows\nexcept ZooError as e:\n    print(e)\n"
              "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')))")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script, str(kept)], capture_output=True, text=True, timeout=120)
    line, peak_kib = done.stdout.splitlines()
    assert line == f"'{kept / 'metrics.jsonl.gz'}' holds more than 1,000,000 lines: not a metrics file zoo wrote " \
                   "(its longest runs write tens of thousands)"
    assert time.monotonic() - started < 60 and int(peak_kib) < 1_000_000  # was: 3.5 GB, then a MemoryError


def test_the_row_bound_and_the_line_bound_are_lines_not_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(metrics_files, "MAX_METRICS_ROWS", 100)
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b"\n" * 100 + b'{"iteration": 1}\n')  # blank lines count too: a file of newlines is no bomb
    with pytest.raises(ZooError, match="holds more than 100 lines"):
        metrics_files.read_rows(path)
    path.write_bytes(b"\n" * 100)
    assert metrics_files.read_rows(path) == []
    monkeypatch.setattr(metrics_files, "MAX_LINE_BYTES", 1000)
    path.write_bytes(b'{"a": "' + b"x" * 2000 + b'"}\n')
    with pytest.raises(ZooError, match="line 1 is longer than"):
        metrics_files.read_rows(path)


def test_a_huge_sparse_plain_metrics_file_is_refused_from_its_size_and_never_taken_for_the_kept_one(tmp_path,
                                                                                                    configs):
    kept = _kept(tmp_path / "results", 0, configs)
    _kept(tmp_path / "results", 1, configs)
    with open(kept / "metrics.jsonl", "wb") as sparse:
        sparse.truncate(3 << 30)  # 3 GB of holes: no disk used
    started = time.monotonic()
    with pytest.raises(ZooError, match="holds both metrics.jsonl and metrics.jsonl.gz"):
        _ = RunView(kept).rows
    assert kept_state(kept) == f"'{kept}' holds 'metrics.jsonl', which zoo bench does not keep: not a whole kept seed"
    row, said = _report(tmp_path, configs, tmp_path / "results", seeds=2)
    assert "| 1/2 |" in row and said == f"zoo bench: left out of the report: {kept_state(kept)}\n"
    (kept / "metrics.jsonl.gz").unlink()
    with pytest.raises(ZooError, match=r"metrics.jsonl' holds more than 256 MiB: not a metrics file zoo wrote"):
        _ = RunView(kept).rows
    assert time.monotonic() - started < 10


# -- values: typed ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "problem"), [
    ('"abc"', "the value of 'wall_time' is \"abc\", not a number"),
    ("NaN", "the value of 'wall_time' is nan"),
    ("Infinity", "the value of 'wall_time' is inf"),
    ("1" * 400, "the value of 'wall_time' is an integer of 400 digits"),
    ("[1, 2]", "the value of 'wall_time' is [1, 2], not a number"),
    ("true", "the value of 'wall_time' is true, not a number"),
])
def test_a_metrics_value_that_is_no_finite_number_is_one_line_naming_the_line(tmp_path, configs, capsys, value,
                                                                              problem, cli_configs):
    kept = _kept(tmp_path / "results", 0, configs)
    lines = _metrics(ROWS).decode().splitlines()
    lines[-1] = lines[-1].replace('"wall_time": 96.0', f'"wall_time": {value}')
    (kept / "metrics.jsonl.gz").write_bytes(compressed(("\n".join(lines) + "\n").encode()))
    code, err = _cli_report(tmp_path, configs, tmp_path / "results", capsys, seeds=1)
    assert code == 2 and err == (f"zoo: error: '{kept / 'metrics.jsonl.gz'}' is damaged: line 16 is not a metrics row "
                                 f"({problem}): restore the file from a copy\n")


def test_final_returns_of_400_digits_are_one_line_not_an_overflow(tmp_path):
    (tmp_path / "final_eval.json").write_text('{"returns": [' + ", ".join(["1" * 400] * 10) + "]}")
    with pytest.raises(ZooError, match=r"returns\[0\] is an integer of 400 digits, not a finite return within"):
        read_final_returns(tmp_path)


# -- config: a kept run proves which run it is --------------------------------------------------------------------
@pytest.mark.parametrize(("edit", "difference"), [
    (lambda cfg: {}, "seed is missing there"),
    (lambda cfg: {**cfg, "pipeline": {k: v for k, v in cfg["pipeline"].items() if k != "max_env_steps"}},
     "pipeline.max_env_steps is missing there"),
    (lambda cfg: {k: v for k, v in cfg.items() if k != "seed"}, "seed is missing there"),
])
def test_a_kept_config_without_the_keys_that_prove_its_run_is_refused_and_trains_again(tmp_path, configs, capsys,
                                                                                         cli_configs, edit,
                                                                                         difference):
    results = tmp_path / "results"
    _kept(results, 0, configs)
    kept = _kept(results, 1, configs, config=edit(runs.expected_config(TINY, 1, configs)))
    code, err = _cli_report(tmp_path, configs, results, capsys, seeds=2)
    assert code == 2 and err.startswith(f"zoo: error: '{kept}' holds a run of another config or seed, not tiny_ppo "
                                        f"seed 1 ({difference})")
    assert finished_kept(kept, TINY, 1, configs) == f"'{kept}' holds a run of another config ({difference})"


def test_a_kept_seed_of_an_older_config_of_the_entry_is_left_out_and_trained_again(tmp_path, configs, capsys,
                                                                                    cli_configs):
    # The entry's config changed since the seed was kept (a default, a file): its seed, env and policy type are the
    # entry's, so it is stale, not foreign. The report leaves it out and says so; the runner trains it again.
    results = tmp_path / "results"
    _kept(results, 0, configs)
    older = runs.expected_config(TINY, 1, configs)
    older["policy"] = {**older["policy"], "learning_rate": 0.123}
    kept = _kept(results, 1, configs, config=older)
    code, err = _cli_report(tmp_path, configs, results, capsys, seeds=2)
    assert code == 0 and err.strip().splitlines() == [
        f"zoo bench: left out of the report: '{kept}' was trained with an older config of tiny_ppo "
        f"(policy.learning_rate is 0.123 there, {runs.expected_config(TINY, 1, configs)['policy']['learning_rate']} "
        f"for the entry): `zoo bench` trains it again"]
    assert "| 1/2 |" in (tmp_path / "b.md").read_text()
    assert finished_kept(kept, TINY, 1, configs).startswith(f"'{kept}' holds a run of another config")


def test_seed_folders_copied_from_seed_0_never_count_as_other_seeds(tmp_path, configs, capsys, cli_configs):
    import shutil

    results = tmp_path / "results"
    first = _kept(results, 0, configs)
    copy = results / TINY.name / "seed_1"
    shutil.copytree(first, copy)
    code, err = _cli_report(tmp_path, configs, results, capsys, seeds=2)  # as copied: its config says seed 0
    assert code == 2 and "holds a run of another config or seed, not tiny_ppo seed 1 (seed is 0 there" in err
    dump_config(runs.expected_config(TINY, 1, configs), copy / "config.yaml")  # its config edited to seed 1 ...
    code, err = _cli_report(tmp_path, configs, results, capsys, seeds=2)  # ... but evaluated with seed 0's seed
    assert code == 2 and err == (f"zoo: error: '{copy / 'final_eval.json'}' records seed {runs.eval_seed(0)}, not "
                                 f"{runs.eval_seed(1)}, the evaluation seed of a run of seed 1: not a final evaluation "
                                 "of tiny_ppo seed 1; move it away, zoo bench neither trains into nor reports it\n")
    assert finished_kept(copy, TINY, 1, configs).startswith(f"'{copy / 'final_eval.json'}' records seed")


@pytest.mark.parametrize("edit, said", [
    (lambda cfg: {**cfg, "curriculum": {"stages": 3}}, "curriculum is set there"),  # a section this zoo lacks
    (lambda cfg: {**cfg, "policy": {**cfg["policy"], "lr_warmup": 100}}, "policy.lr_warmup is set there"),
    (lambda cfg: {**cfg, "env": {**cfg["env"], "kwargs": {"sutton_barto_reward": True}}},
     "env.kwargs is {\"sutton_barto_reward\": true} there"),  # an open mapping compared whole
])
def test_a_kept_seed_with_keys_this_zoo_does_not_know_is_left_out_and_said(tmp_path, configs, edit, said):
    """A newer zoo's kept seed (or a hand-edited one): what its unknown keys did is unknown, so it never counts as a
    finished seed of the entry (issue 54)."""
    results = tmp_path / "results"
    _kept(results, 0, configs, final=100.0)
    newer = _kept(results, 1, configs, final=0.0, config=edit(runs.expected_config(TINY, 1, configs)))
    row, out = _report(tmp_path, configs, results, seeds=2)
    assert "| 1/2 | 100.0 [" in row
    assert out.startswith(f"zoo bench: left out of the report: '{newer}' was trained with an older config of "
                          f"tiny_ppo ({said}") and out.count("\n") == 1
    assert finished_kept(newer, TINY, 1, configs).startswith(f"'{newer}' holds a run of another config ({said}")


@pytest.mark.parametrize("fault, said", [
    (lambda rows: [row for row in rows for _ in range(2)], "written twice (line 2: iteration 1 after 1)"),
    (lambda rows: rows[::-1], "out of order (line 2: iteration 15 after 16)"),
    (lambda rows: rows[:5] + rows[4:], "written twice (line 6: iteration 5 after 5)"),  # one row twice
    (lambda rows: [*rows[:3], {**rows[3], "env_steps": 1}, *rows[4:]], "out of order (line 4: env_steps 1 after 384)"),
])
def test_kept_rows_written_twice_or_out_of_order_leave_the_seed_out_with_a_line(tmp_path, configs, fault, said):
    """The last-5-evaluations measure reads the rows in order: a kept seed whose rows are not one per iteration, in
    order, would move it silently (issue 54)."""
    results = tmp_path / "results"
    _kept(results, 0, configs, final=100.0)
    damaged = _kept(results, 1, configs, final=0.0)
    (damaged / "metrics.jsonl.gz").write_bytes(compressed(_metrics(fault(ROWS))))
    row, out = _report(tmp_path, configs, results, seeds=2)
    assert "| 1/2 | 100.0 [" in row
    assert out == (f"zoo bench: left out of the report: '{damaged / 'metrics.jsonl.gz'}' holds its rows {said}: not "
                   f"the rows zoo writes\n")
    assert finished_kept(damaged, TINY, 1, configs) == (f"'{damaged / 'metrics.jsonl.gz'}' holds its rows {said}: "
                                                        f"not the rows zoo writes")


KEEPER = """
import sys
from pathlib import Path
from zoo.bench.results import keep
run, destination, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
failures = 0
for _ in range(rounds):
    try:
        keep(run, destination)
    except Exception as exc:
        failures += 1
        print(type(exc).__name__, exc, file=sys.stderr)
print(failures)
"""


@pytest.mark.parametrize("keepers", [2, 4])
def test_concurrent_keepers_of_one_seed_each_keep_it_whole(tmp_path, configs, keepers):
    """Two runners with different runs directories share no run lock, yet may keep into one results folder: each keep
    is whole (the last one's stays), none fails (11 of 60 did, each removing the other's staging folder)."""
    destination = tmp_path / "results" / TINY.name / "seed_0"
    sources = []
    for index in range(keepers):
        run = tmp_path / f"run{index}"
        run.mkdir()
        dump_config(runs.expected_config(TINY, 0, configs), run / "config.yaml")
        (run / "metrics.jsonl").write_bytes(_metrics(ROWS))
        (run / "final_eval.json").write_text(json.dumps({"returns": [float(index)] * 10, "episodes": 10,
                                                         "seed": runs.eval_seed(0)}))
        sources.append(run)
    processes = [subprocess.Popen([sys.executable, "-c", KEEPER, str(run), str(destination), "30"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for run in sources]
    outcomes = [process.communicate(timeout=120) for process in processes]
    assert [(out.strip(), err) for out, err in outcomes] == [("0", "")] * keepers
    assert kept_state(destination) is None and finished_kept(destination, TINY, 0, configs) is None
    assert json.loads((destination / "final_eval.json").read_text())["returns"][0] in range(keepers)
    assert sorted(p.name for p in destination.parent.iterdir()) == ["seed_0"]  # no staging folder left behind


# -- whole or not at all ----------------------------------------------------------------------------------------------
def test_a_half_written_kept_seed_is_left_out_and_said(tmp_path, configs):
    results = tmp_path / "results"
    _kept(results, 0, configs, final=100.0)
    half = _kept(results, 1, configs, final=0.0)
    (half / "metrics.jsonl.gz").unlink()  # a full disk between the files (or an older zoo)
    row, said = _report(tmp_path, configs, results, seeds=2)
    assert "| 1/2 | 100.0 [" in row  # was: 2/2 and "min/run 0"
    assert said == f"zoo bench: left out of the report: '{half}' has no metrics.jsonl.gz: a half-written kept seed\n"


def test_a_run_directory_with_a_final_evaluation_but_no_metrics_rows_is_left_out_and_said(tmp_path, configs):
    root = tmp_path / "runs" / "bench" / TINY.name
    for seed, rows in ((0, ROWS), (1, []), (2, None)):
        run = root / f"seed_{seed}"
        run.mkdir(parents=True)
        dump_config(runs.expected_config(TINY, seed, configs), run / "config.yaml")
        (run / "final_eval.json").write_text(json.dumps({"returns": [7.0] * 10, "episodes": 10}))
        if rows is not None:
            (run / "metrics.jsonl").write_bytes(_metrics(rows))
    said = io.StringIO()
    report.report(["tiny"], runs_dir=str(tmp_path / "runs"), out=str(tmp_path / "b.md"), seeds=3, reps=200,
                  configs=configs, stream=said)
    assert "| 1/3 | 7.0 [" in (tmp_path / "b.md").read_text()
    assert said.getvalue().splitlines() == [
        f"zoo bench: left out of the report: '{root / 'seed_1'}' holds a final evaluation but no metrics rows",
        f"zoo bench: left out of the report: '{root / 'seed_2'}' has a final_eval.json but no metrics.jsonl"]


def test_a_seed_is_kept_whole_or_not_at_all(tmp_path, configs, monkeypatch):
    from zoo.bench import results as results_module

    run = tmp_path / "run"
    run.mkdir()
    dump_config(runs.expected_config(TINY, 0, configs), run / "config.yaml")
    (run / "metrics.jsonl").write_bytes(_metrics(ROWS))
    (run / "final_eval.json").write_text(json.dumps({"returns": [5.0] * 10, "episodes": 10}))
    destination = tmp_path / "results" / TINY.name / "seed_0"
    old = _kept(tmp_path / "results", 0, configs, final=1.0)
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    written = []

    def full_disk_after_one(path, data):
        if written:
            raise OSError(28, "No space left on device")
        written.append(path)
        Path(path).write_bytes(data)

    monkeypatch.setattr(results_module, "_write_whole", full_disk_after_one)
    with pytest.raises(ZooError, match="No space left on device"):
        keep(run, destination)
    assert {p.name: p.read_bytes() for p in destination.iterdir()} == before  # the old seed, whole
    assert sorted(p.name for p in destination.parent.iterdir()) == ["seed_0"]  # no half-written folder beside it
    monkeypatch.undo()
    keep(run, destination)
    assert json.loads((destination / "final_eval.json").read_text())["returns"] == [5.0] * 10
    assert sorted(p.name for p in destination.parent.iterdir()) == ["seed_0"]


def test_kept_files_hold_no_machine_paths_and_still_match_their_run(tmp_path, configs):
    """keep writes config.yaml's runs_dir as ``runs`` and the home folder as ``~`` (environment.json's cache
    folders), so results commit without this machine's paths; the kept seed is still the run's (``is_kept``) and
    the entry's (``finished_kept``)."""
    run = tmp_path / "run"
    run.mkdir()
    dump_config({**runs.expected_config(TINY, 0, configs), "runs_dir": str(tmp_path / "my runs")}, run / "config.yaml")
    cache = f"{Path.home()}/.cache/zoo/inductor"
    (run / "environment.json").write_text(json.dumps({"sessions": [{"inductor_cache": cache}]}))
    (run / "metrics.jsonl").write_bytes(_metrics(ROWS))
    (run / "final_eval.json").write_text(json.dumps({"returns": [5.0] * 10, "episodes": 10,
                                                     "seed": runs.eval_seed(0)}))
    destination = tmp_path / "results" / TINY.name / "seed_0"
    keep(run, destination)
    kept = (destination / "config.yaml").read_text() + (destination / "environment.json").read_text()
    assert str(tmp_path) not in kept and str(Path.home()) + "/" not in kept
    assert "runs_dir: runs\n" in kept and "~/.cache/zoo/inductor" in kept
    assert is_kept(run, destination) and finished_kept(destination, TINY, 0, configs) is None


# -- folders and files that are not what they seem -----------------------------------------------------------------
def test_a_fifo_or_a_link_to_dev_zero_in_a_kept_seed_never_blocks_and_is_left_out(tmp_path, configs):
    results = tmp_path / "results"
    _kept(results, 0, configs)
    fifo, zero = _kept(results, 1, configs), _kept(results, 2, configs)
    (fifo / "environment.json").unlink()
    os.mkfifo(fifo / "environment.json")
    (zero / "final_eval.json").unlink()
    (zero / "final_eval.json").symlink_to("/dev/zero")
    started = time.monotonic()
    row, said = _report(tmp_path, configs, results)
    assert "| 1/3 |" in row and time.monotonic() - started < 10
    assert said.splitlines() == [
        f"zoo bench: left out of the report: '{fifo / 'environment.json'}' is a FIFO (named pipe), not a regular file",
        f"zoo bench: left out of the report: '{zero / 'final_eval.json'}' is a symbolic link, not a regular file"]
    # read directly, through the view: refused before anything opens them
    assert RunView(fifo).started is None
    with pytest.raises(ZooError, match="is a character device, not a regular file"):
        read_final_returns(zero)


def test_a_results_seed_folder_that_is_a_symbolic_link_is_never_written_through(tmp_path, configs):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.yaml").write_text("mine: true\n")
    results = tmp_path / "results"
    (results / TINY.name).mkdir(parents=True)
    (results / TINY.name / "seed_0").symlink_to(outside, target_is_directory=True)
    out = io.StringIO()
    assert runner.bench(["tiny"], seeds=1, runs_dir=str(tmp_path / "runs"), stream=out, configs=configs,
                        results=results) == 1
    assert out.getvalue().splitlines()[-1] == (
        f"zoo bench: tiny_ppo/seed_0 failed: '{results / TINY.name / 'seed_0'}' is a symbolic link, not a folder of "
        "kept results: zoo bench writes only inside the results folder; move it away")
    assert sorted(p.name for p in outside.iterdir()) == ["config.yaml"]
    assert (outside / "config.yaml").read_text() == "mine: true\n"
    assert not (tmp_path / "runs" / "bench" / TINY.name / "seed_0").exists()  # nothing trained to be kept there
    row, said = _report(tmp_path, configs, results, seeds=1)
    assert "| 0/1 | pending |" in row and "is a symbolic link, not a folder of kept results" in said


def test_a_results_folder_named_like_a_glob_is_that_folder(tmp_path, configs, monkeypatch):
    bracket, plain = tmp_path / "res[1]", tmp_path / "res1"
    _kept(bracket, 0, configs, final=100.0)
    _kept(plain, 0, configs, final=-5.0)
    assert find_runs([str(bracket / TINY.name)]) == [bracket / TINY.name / "seed_0"]  # was: res1's run
    monkeypatch.chdir(tmp_path)
    assert find_runs(["res?/tiny_ppo"]) == [Path("res1") / TINY.name / "seed_0"]  # a pattern that names nothing: a glob


def test_a_path_component_too_long_for_the_system_is_one_line(tmp_path, capsys, cli_configs):
    long = str(tmp_path / ("r" * 300))
    assert main(["bench", "tiny", "--report", str(tmp_path / "b.md"), "--results", long]) == 2
    assert capsys.readouterr().err.startswith(f"zoo: error: --results '{long[:40]}...' is too long for a path (a "
                                              "name of 300 bytes; the system allows 255 per name and 4096 in all)")
    assert main(["eval", long]) == 2  # a name found anywhere else: the system's refusal, as one line
    assert capsys.readouterr().err.startswith("zoo: error: a path is too long for this system")


# -- kept gzip files read bounded, as before ----------------------------------------------------------------------
def test_gzip_bombs_and_broken_gzip_stay_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(metrics_files, "MAX_DECOMPRESSED_BYTES", 1000)
    path = tmp_path / "metrics.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"iteration": 1}\n' * 100))
    with pytest.raises(ZooError, match="decompresses to more than"):
        metrics_files.read_rows(path)
    path.write_bytes(gzip.compress(b'{"iteration": 1}\n' * 10)[:-12])
    with pytest.raises(ZooError, match="not a readable gzip file"):
        metrics_files.read_rows(path)
