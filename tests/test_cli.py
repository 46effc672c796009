"""End-to-end CLI behaviour: bad input -> one line and exit 2; run directory; reproduce; resume; eval."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from helpers import metrics_rows, write_config

from zoo.cli import main

TINY = [
    "--set", "pipeline.num_envs=2", "--set", "pipeline.rollout_steps=16", "--set", "pipeline.eval_every=2",
    "--set", "pipeline.eval_episodes=2", "--set", "pipeline.checkpoint_every=1",
]  # fmt: skip


GOOD = "config = dict(exp_name='t', env=dict(id='CartPole-v1'), policy=dict(type='ppo', epochs=1, minibatch_size=32))\n"


def _run(tmp_path: Path, *extra: str) -> int:
    return main(["run", *extra, "--set", f"runs_dir={tmp_path / 'runs'}"])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("config = dict(policy=dict(type='ppo')\n", "syntax error"),
        ("x = 1\n", "config"),
        ("config = dict(policy=dict(type='ppp'))\n", "did you mean 'ppo'"),
        ("config = dict(policy=dict(type='ppo', learnig_rate=0.1))\n", "did you mean 'policy.learning_rate'"),
        ("config = dict(policy=dict(type='ppo', gamma='high'))\n", "policy.gamma"),
        ("config = dict(policy=dict(type='ppo', learning_rate=-1.0))\n", "policy.learning_rate"),
        ("config = dict(policy=dict(type='ppo', gamma=1.5))\n", "policy.gamma"),
        ("config = dict(env=dict(id='CartPol-v1'), policy=dict(type='ppo'))\n", "CartPole-v1"),
        # Keys whose default is None (off) still take numbers only.
        ("config = dict(policy=dict(type='ppo'), pipeline=dict(stop_return='high'))\n", "pipeline.stop_return"),
        ("config = dict(policy=dict(type='ppo', target_kl='0.01'))\n", "policy.target_kl"),
        ("config = dict(env=dict(max_episode_steps=0), policy=dict(type='ppo'))\n", "env.max_episode_steps"),
        # Keys with a few allowed values are checked before the run directory is made.
        ("config = dict(policy=dict(type='a2c', optimizer='rmsprp'))\n", "did you mean 'rmsprop'"),
        ("config = dict(policy=dict(type='ppo', activation='sigmoid'))\n", "'tanh', 'relu', 'elu'"),
    ],
)
def test_bad_config_is_one_line_and_exit_2(tmp_path, capsys, body, message):
    code = _run(tmp_path, "--config", str(write_config(tmp_path, body)), "--set", "pipeline.max_env_steps=64")
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("zoo: error:")
    assert message in err
    assert "Traceback" not in err
    assert not list((tmp_path / "runs").glob("*"))  # no half-made run directory is left behind


def test_missing_config_file(tmp_path, capsys):
    assert _run(tmp_path, "--config", str(tmp_path / "nope.py")) == 2
    assert "not found" in capsys.readouterr().err


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert "zoo 0." in capsys.readouterr().out


def _without_time(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in ("wall_time", "sps")} for row in rows]


def test_run_reproduce_resume_eval(tmp_path, capsys):
    cfg = write_config(tmp_path, GOOD)
    assert _run(tmp_path, "--config", str(cfg), *TINY, "--set", "pipeline.max_env_steps=128") == 0
    run_dir = tmp_path / "runs" / "t"
    for name in ("config.yaml", "metrics.jsonl", "metrics.csv", "checkpoint.pt", "model.pt"):
        assert (run_dir / name).exists(), name
    first = metrics_rows(run_dir)
    assert [row["env_steps"] for row in first] == [32, 64, 96, 128]
    assert first[1]["eval_return_mean"] is not None
    with open(run_dir / "metrics.csv") as stream:
        assert len(list(csv.DictReader(stream))) == 4

    # The resolved config alone reproduces the run: same seed, same config -> same metrics.
    assert _run(tmp_path, "--config", str(run_dir / "config.yaml")) == 0
    assert _without_time(metrics_rows(tmp_path / "runs" / "t_2")) == _without_time(first)

    # Resume continues the counters and appends to the same files.
    assert main(["run", "--resume", str(run_dir), "--set", "pipeline.max_env_steps=192"]) == 0
    resumed = metrics_rows(run_dir)
    assert [row["iteration"] for row in resumed] == [1, 2, 3, 4, 5, 6]
    assert resumed[-1]["env_steps"] == 192

    capsys.readouterr()
    assert main(["eval", str(run_dir), "--episodes", "3"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    fields = dict(part.split("=") for part in last.split())
    assert set(fields) == {"mean_return", "std_return", "episodes"} and fields["episodes"] == "3"
    float(fields["mean_return"])


def test_eval_of_non_run_directory(tmp_path, capsys):
    assert main(["eval", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_list_shows_builtins(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "ppo" in out and "a2c" in out and "built-in" in out and "serial_onpolicy" in out
    from zoo.bench.suites import BUILTIN_SUITES

    count = len(BUILTIN_SUITES["memory"])  # the benchmark suites, with their sources and sizes
    assert count > 1 and re.search(rf"^  memory +built-in +{count} entries$", out, re.M)


def test_eval_restores_observation_normalisation(tmp_path, capsys):
    body = (
        "config = dict(exp_name='norm', env=dict(id='Pendulum-v1'), policy=dict(type='ppo', epochs=1),\n"
        "              pipeline=dict(normalize_obs=True, normalize_reward=True))\n"
    )
    cfg = write_config(tmp_path, body)
    assert _run(tmp_path, "--config", str(cfg), *TINY, "--set", "pipeline.max_env_steps=64") == 0
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "runs" / "norm"), "--episodes", "2"]) == 0
    fields = dict(part.split("=") for part in capsys.readouterr().out.strip().splitlines()[-1].split())
    assert -2000.0 < float(fields["mean_return"]) <= 0.0  # Pendulum returns lie in about [-1700, 0]


@pytest.mark.parametrize("preset", [None, "3"])
def test_the_command_line_entry_gives_numpys_blas_one_thread_unless_told_otherwise(monkeypatch, preset):
    import os

    import zoo.cli

    if preset is None:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", preset)
    seen = {}

    def fake_main() -> int:
        seen["threads"] = os.environ.get("OPENBLAS_NUM_THREADS")
        return 0

    monkeypatch.setattr(zoo.cli, "main", fake_main)
    monkeypatch.setattr(zoo.cli.gc, "freeze", lambda: None)
    with pytest.raises(SystemExit) as exit_info:
        zoo.cli.console_main()
    assert exit_info.value.code == 0 and seen["threads"] == (preset or "1")
