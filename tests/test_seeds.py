"""``zoo run --seeds``: one run directory per seed under runs_dir/exp_name/, a table, sequential or in processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import metrics_rows

from zoo import cli, train

CONFIG = ("config = dict(exp_name='many', env=dict(id='CartPole-v1'), policy=dict(type='ppo', epochs=1, "
          "minibatch_size=64), pipeline=dict(num_envs=2, rollout_steps=32, max_env_steps=256, eval_every=2, "
          "eval_episodes=2))\n")


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "cfg.py"
    path.write_text(CONFIG)
    return path


def _strip_times(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in ("wall_time", "sps")} for row in rows]


def test_seeds_one_after_another_give_each_seed_its_own_run(tmp_path, config, capsys):
    code = cli.main(["run", "--config", str(config), "--set", f"runs_dir={tmp_path / 'runs'}", "--seeds", "3", "5"])
    assert code == 0
    parent = tmp_path / "runs" / "many"
    assert sorted(p.name for p in parent.iterdir()) == ["seed_3", "seed_5"]
    single = train(str(config), [f"runs_dir={tmp_path / 'single'}", "seed=5"])
    assert _strip_times(metrics_rows(parent / "seed_5")) == _strip_times(metrics_rows(Path(single["run_dir"])))
    assert metrics_rows(parent / "seed_3") != metrics_rows(parent / "seed_5")
    out = capsys.readouterr().out.splitlines()
    table = out[out.index(next(line for line in out if line.split()[:2] == ["seed", "reason"])):]
    assert [line.split()[0] for line in table] == ["seed", "3", "5", "mean"]
    evals = [metrics_rows(parent / f"seed_{k}")[-1]["eval_return_mean"] for k in (3, 5)]
    assert float(table[-1].split()[-1]) == pytest.approx(sum(evals) / 2, abs=0.01)


@pytest.mark.slow
def test_seeds_in_parallel_processes(tmp_path, config):
    out = subprocess.run([sys.executable, "-m", "zoo", "run", "--config", str(config), "--set",
                          f"runs_dir={tmp_path / 'runs'}", "--seeds", "0", "1", "2", "--jobs", "2"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines[-4:]] == ["0", "1", "2", "mean"]
    assert all("max_env_steps" in line for line in lines[-4:-1])
    assert sorted(p.name for p in (tmp_path / "runs" / "many").iterdir()) == ["seed_0", "seed_1", "seed_2"]


@pytest.mark.parametrize(("args", "words"), [
    (["--seeds", "1", "1"], "repeated seeds"),
    (["--jobs", "2"], "--jobs goes with --seeds"),
    (["--seeds", "1", "--jobs", "0"], "--jobs must be at least 1"),
    (["--seeds", "1", "--seed", "2"], "drop --seed"),
])
def test_bad_seed_arguments_are_one_line(tmp_path, config, args, words):
    out = subprocess.run([sys.executable, "-m", "zoo", "run", "--config", str(config), "--set",
                          f"runs_dir={tmp_path / 'runs'}", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and words in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists()
