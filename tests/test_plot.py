"""``zoo plot``: seeds of one config as a mean with a band, a PNG from real run directories, a table without
``--out``, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from zoo import train
from zoo.errors import ZooError
from zoo.plot import mean_band, plot

CONFIG = {"exp_name": "curves", "env": {"id": "CartPole-v1"},
          "policy": {"type": "ppo", "epochs": 1, "minibatch_size": 64},
          "pipeline": {"num_envs": 2, "rollout_steps": 32, "max_env_steps": 64 * 6, "eval_every": 2,
                       "eval_episodes": 2}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("plot")
    for seed in (0, 1):
        train({**CONFIG, "seed": seed, "runs_dir": str(root / "curves"), "exp_name": f"seed_{seed}"})
    train({**CONFIG, "runs_dir": str(root), "exp_name": "other", "policy": {**CONFIG["policy"], "gamma": 0.9}})
    return root


def test_mean_band_interpolates_on_the_range_every_curve_covers():
    curves = [(np.array([0.0, 10.0]), np.array([0.0, 10.0])), (np.array([0.0, 5.0, 20.0]), np.array([2.0, 2.0, 2.0]))]
    grid, mean, std = mean_band(curves, points=3)
    assert grid.tolist() == [0.0, 5.0, 10.0]
    assert mean.tolist() == [1.0, 3.5, 6.0] and std.tolist() == [1.0, 1.5, 4.0]


def test_seeds_of_one_config_are_one_group_and_the_table_has_their_mean(runs):
    text = plot([str(runs / "curves"), str(runs / "other")])
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["group", "runs", "last"] and "eval_return_mean" in lines[0]
    seeds = [json.loads((runs / "curves" / f"seed_{k}" / "metrics.jsonl").read_text().splitlines()[-1])
             for k in (0, 1)]
    last = np.array([row["eval_return_mean"] for row in seeds])
    curves_line = next(line for line in lines if line.startswith("curves"))
    assert curves_line.split()[1] == "2" and f"{last.mean():.2f} +- {last.std():.2f}" in curves_line
    assert next(line for line in lines if line.startswith("other")).split()[1] == "1"


def test_a_png_is_rendered_from_run_directories(runs, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "curves.png"
    result = subprocess.run([sys.executable, "-m", "zoo", "plot", str(runs / "curves" / "seed_*"), str(runs / "other"),
                             "--y", "episode_return_mean", "--x", "wall_time", "--out", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert f"wrote {out}" in result.stdout and not list(tmp_path.glob(".*.tmp*"))


def test_bad_plot_input_is_one_line(runs, tmp_path, monkeypatch):
    with pytest.raises(ZooError, match="matches no run directory"):
        plot([str(tmp_path / "nothing*")])
    with pytest.raises(ZooError, match="choose --y from .*episode_return_mean"):
        plot([str(runs / "other")], y="no_such_metric")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ZooError, match=r"pip install 'zoo-rl\[plot\]'"):
        plot([str(runs / "other")], out=str(tmp_path / "x.png"))
