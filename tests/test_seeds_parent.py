"""A folder of seeds (``zoo run --seeds``: ``runs_dir/exp_name/seed_<k>/``) holds seeds of one config only: ``--seeds``
refuses a finished run of the same name (issue 53: it used to write ``seed_<k>`` inside it, which ``zoo plot`` then
hid), a folder of another config's seeds, other files and a seed trained again, before anything is written; a
single run never goes inside a run or among seeds; ``--resume PARENT --seeds`` continues the seeds; ``zoo plot`` of a
folder of seeds shows each seed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import metrics_rows, write_config

from zoo import cli, train
from zoo.errors import ZooError
from zoo.plot import find_runs, plot

CONFIG = {"exp_name": "many", "env": {"id": "CartPole-v1"},
          "policy": {"type": "ppo", "epochs": 1, "minibatch_size": 64},
          "pipeline": {"num_envs": 2, "rollout_steps": 32, "max_env_steps": 128, "eval_every": 1, "eval_episodes": 1}}
STEPS_PER_ITERATION = 64  # num_envs x rollout_steps


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """Made once: ``seeds/many/seed_{0,1}`` by ``zoo run --seeds 0 1``, and a finished single run ``single/many``."""
    root = tmp_path_factory.mktemp("made")
    config = write_config(root, CONFIG)
    assert cli.main(["run", "--config", str(config), "--set", f"runs_dir={root / 'seeds'}", "--seeds", "0", "1",
                     "-q"]) == 0
    train(str(config), [f"runs_dir={root / 'single'}"])
    return root


@pytest.fixture
def place(made, tmp_path) -> Path:
    """A copy of ``made`` for one test to change, with the config file."""
    shutil.copytree(made, tmp_path / "place")
    return tmp_path / "place"


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every folder (None) and file (its bytes) under ``root``, by relative path."""
    return {str(path.relative_to(root)): path.read_bytes() if path.is_file() else None
            for path in sorted(root.rglob("*"))}


def refusal(capsys, args: list[str]) -> str:
    """The one error line of ``zoo ARGS``, which must exit 2 and print nothing else."""
    capsys.readouterr()
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zoo: error: ") and not captured.out.strip(), captured
    return lines[0]


def run_seeds(place: Path, runs_dir: str, *args: str) -> list[str]:
    return ["run", "--config", str(place / "cfg.py"), "--set", f"runs_dir={place / runs_dir}", "-q", *args]


def test_seeds_refuse_a_finished_run_of_the_same_name_and_write_nothing(place, capsys):
    before = snapshot(place)
    line = refusal(capsys, run_seeds(place, "single", "--seeds", "3"))
    assert f"'{place / 'single' / 'many'}' is a run directory" in line
    assert "metrics.jsonl" in line and "choose another --exp-name (e.g. --exp-name many_seeds)" in line
    assert snapshot(place) == before  # the run's files byte for byte, and no seed_3 folder
    assert not (place / "single" / "many" / "seed_3").exists()


@pytest.mark.parametrize(("change", "args", "words"), [
    ("another config", ["--seeds", "2", "--set", "policy.gamma=0.9"],
     "holds the seeds of another config (seed_0: policy.gamma differs)"),
    ("a file beside the seeds", ["--seeds", "2"], "holds other things than seed_<k> run directories (notes.txt)"),
    ("nothing", ["--seeds", "1", "2"], "already holds seed_1: each seed trains once; continue them with zoo run "
                                       "--resume"),
])
def test_seeds_refuse_a_folder_that_is_not_theirs(place, capsys, change, args, words):
    parent = place / "seeds" / "many"
    if change == "a file beside the seeds":
        (parent / "notes.txt").write_text("mine\n")
    before = snapshot(place)
    line = refusal(capsys, run_seeds(place, "seeds", *args))
    assert f"'{parent}'" in line and words in line
    assert snapshot(place) == before


def test_new_seeds_of_the_same_config_join_their_folder(place, capsys):
    parent = place / "seeds" / "many"
    before = {name: metrics_rows(parent / name) for name in ("seed_0", "seed_1")}
    assert cli.main(run_seeds(place, "seeds", "--seeds", "2")) == 0
    assert sorted(path.name for path in parent.iterdir()) == ["seed_0", "seed_1", "seed_2"]
    assert metrics_rows(parent / "seed_2")[-1]["env_steps"] == CONFIG["pipeline"]["max_env_steps"]
    assert {name: metrics_rows(parent / name) for name in before} == before


def test_a_single_run_never_goes_among_seeds_or_inside_a_run(place, capsys):
    before = snapshot(place)
    parent, single = place / "seeds" / "many", place / "single" / "many"
    line = refusal(capsys, ["run", "--config", str(place / "cfg.py"), "--set", f"runs_dir={parent}", "-q"])
    assert f"runs_dir '{parent}' holds the seeds of zoo run --seeds (seed_0, seed_1)" in line
    line = refusal(capsys, ["run", "--config", str(place / "cfg.py"), "--set", f"runs_dir={single}", "-q"])
    assert f"runs_dir '{single}' is a run directory" in line and "choose another runs_dir" in line
    line = refusal(capsys, ["run", "--resume", str(parent), "-q"])
    assert f"'{parent}' is a folder of seeds" in line and f"zoo run --resume {parent} --seeds 0 1" in line
    assert snapshot(place) == before


def test_resume_with_seeds_continues_each_seed(place, capsys):
    parent = place / "seeds" / "many"
    before = {seed: metrics_rows(parent / f"seed_{seed}") for seed in (0, 1)}
    capsys.readouterr()
    assert cli.main(["run", "--resume", str(parent), "--seeds", "0", "1", "-q",
                     "--set", "pipeline.max_env_steps=192"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in table[-3:]] == ["0", "1", "mean"]
    for seed in (0, 1):
        rows = metrics_rows(parent / f"seed_{seed}")
        assert [row["iteration"] for row in rows] == [1, 2, 3] and rows[-1]["env_steps"] == 192
        assert rows[:2] == before[seed]  # continued, not trained again
    assert sorted(path.name for path in parent.iterdir()) == ["seed_0", "seed_1"]


def test_resume_with_seeds_refuses_a_single_run_and_a_missing_seed(place, capsys):
    before = snapshot(place)
    line = refusal(capsys, ["run", "--resume", str(place / "single" / "many"), "--seeds", "0"])
    assert "is a single run, not a folder of seeds: resume it with zoo run --resume" in line
    line = refusal(capsys, ["run", "--resume", str(place / "seeds" / "many"), "--seeds", "0", "5"])
    assert "has no seed_5 (it holds seed_0, seed_1)" in line
    assert snapshot(place) == before


@pytest.mark.slow
def test_resume_with_seeds_in_processes(place, capsys):
    parent = place / "seeds" / "many"
    assert cli.main(["run", "--resume", str(parent), "--seeds", "0", "1", "--jobs", "2", "-q",
                     "--set", "pipeline.max_env_steps=192"]) == 0
    assert [metrics_rows(parent / f"seed_{seed}")[-1]["env_steps"] for seed in (0, 1)] == [192, 192]


def test_plot_of_a_folder_of_seeds_shows_each_seed(made, tmp_path):
    parent = made / "seeds" / "many"
    lines = plot([str(parent)], y="episode_return_mean").splitlines()
    finals = {name: metrics_rows(parent / name)[-1]["episode_return_mean"] for name in ("seed_0", "seed_1")}
    assert lines[1].split()[:2] == ["many", "2"]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert sorted(rows) == ["seed_0", "seed_1"]
    for name, final in finals.items():
        assert float(rows[name][2]) == pytest.approx(final, abs=0.005)
    pytest.importorskip("matplotlib")
    out = tmp_path / "seeds.svg"
    plot([str(parent)], out=str(out))
    svg = out.read_text()
    assert all(f'id="run:{parent / name}"' in svg for name in finals)  # each seed's own curve


def test_plot_of_a_run_holding_seeds_shows_them_too(place, caplog):
    single = place / "single" / "many"
    shutil.copytree(place / "seeds" / "many" / "seed_1", single / "seed_1")  # as --seeds wrote it before the fix
    assert find_runs([str(single)]) == [single, single / "seed_1"]
    assert "also holds the seed runs seed_1" in caplog.text
    groups = plot([str(single)]).splitlines()[1:]  # two groups here: the seeds ran with -q (logger.progress)
    assert sum(int(line[28:33]) for line in groups if not line.startswith(" ")) == 2  # the runs column


def test_plot_of_a_folder_of_seeds_none_trained_yet_is_one_line(tmp_path):
    (tmp_path / "many" / "seed_0").mkdir(parents=True)
    with pytest.raises(ZooError, match=r"holds seed_0 but no seed has trained yet \(no metrics rows\)"):
        plot([str(tmp_path / "many")])
