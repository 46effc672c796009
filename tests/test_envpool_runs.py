"""The envpool backend end to end: every pipeline trains on it (serial on- and off-policy, DPPO, IMPALA's actors),
``zoo eval`` evaluates its runs on it, a resume says in one line that its episodes restart, bad input is one line
with exit 2 and no files, and the new ``env.backend`` key leaves the committed bench results as they are.

The bad-input cases without envpool (the missing extra, a misspelt backend) run everywhere; the rest are skipped
where envpool is not installed (CI installs it: .ci/run).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import write_config

from zoo.bench.runs import config_difference
from zoo.bench.suites import SUITES
from zoo.cli import main
from zoo.run import train

REPO = Path(__file__).resolve().parents[1]
needs_envpool = pytest.mark.skipif(importlib.util.find_spec("envpool") is None,
                                   reason="envpool is not installed: pip install 'zoo-rl[envpool]'")


def _cartpole(tmp_path: Path, policy: dict, pipeline: dict, name: str = "run") -> dict:
    return {"exp_name": name, "seed": 3, "runs_dir": str(tmp_path / "runs"),
            "env": {"id": "CartPole-v1", "backend": "envpool"}, "policy": policy, "pipeline": pipeline}


# -- every pipeline --------------------------------------------------------------------------------------------------
PIPELINES = {
    "ppo": ({"type": "ppo", "epochs": 1, "minibatch_size": 64},
            {"num_envs": 4, "rollout_steps": 32, "max_env_steps": 1024, "eval_every": 4, "eval_episodes": 2}),
    "dqn": ({"type": "dqn", "batch_size": 32},
            {"num_envs": 2, "learning_starts": 64, "max_env_steps": 512, "eval_every": 0}),
    "dppo": ({"type": "dppo", "epochs": 1, "minibatch_size": 32},
             {"num_envs": 2, "rollout_steps": 32, "max_env_steps": 1024, "eval_every": 0, "world_size": 2}),
    "impala": ({"type": "impala"},
               {"num_envs": 4, "unroll_length": 16, "num_actors": 2, "max_env_steps": 2048, "eval_every": 0}),
}


@needs_envpool
@pytest.mark.parametrize("kind", list(PIPELINES))
def test_each_pipeline_trains_on_envpool_and_counts_its_episodes(kind, tmp_path):
    policy, pipeline = PIPELINES[kind]
    summary = train(_cartpole(tmp_path, policy, pipeline, kind))
    run = Path(summary["run_dir"])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert summary["env_steps"] >= pipeline["max_env_steps"] and rows[-1]["episodes"] > 0
    # CartPole's random-policy episodes last about 22 steps: a mean far off would mean broken episode bookkeeping
    assert 8 <= rows[0]["episode_length_mean"] <= 60 and rows[0]["episode_return_mean"] == rows[0][
        "episode_length_mean"]
    assert (run / "config.yaml").read_text().count("backend: envpool") == 1


@needs_envpool
def test_zoo_eval_plays_an_envpool_run_on_envpool(tmp_path, capsys):
    policy, pipeline = PIPELINES["ppo"]
    run = train(_cartpole(tmp_path, policy, pipeline))["run_dir"]
    capsys.readouterr()
    assert main(["eval", run, "--episodes", "3"]) == 0
    returns = capsys.readouterr().out
    assert "episodes=3" in returns and float(returns.split("mean_return=")[1].split()[0]) >= 8


# -- resume ---------------------------------------------------------------------------------------------------------
@needs_envpool
def test_a_resumed_envpool_run_says_once_that_its_episodes_restart_and_reseeds_them(tmp_path, capsys):
    policy, pipeline = PIPELINES["dqn"]
    first = train(_cartpole(tmp_path, policy, {**pipeline, "checkpoint_every": 1}))
    said_first = [line for line in capsys.readouterr().err.splitlines() if "EnvPool" in line]
    assert len(said_first) == 1 and "restarts its episodes" in said_first[0] and "gymnasium" in said_first[0]
    resumed = train(None, ["pipeline.max_env_steps=1024"], resume=first["run_dir"])
    said = [line for line in capsys.readouterr().err.splitlines() if "EnvPool" in line]
    assert len(said) == 1, said  # at resume; not again when the resumed run saves
    assert "start fresh episodes" in said[0] and "'CartPole-v1'" in said[0] and "not exact" in said[0]
    assert resumed["env_steps"] >= 1024


@needs_envpool
def test_restarted_episodes_come_from_a_new_seed_not_the_run_s_first_ones():
    from zoo.envs import EnvSpec
    from zoo.pipelines.collector import VectorCollector

    spec = EnvSpec("CartPole-v1", backend="envpool")
    collector = VectorCollector(spec, 4, seed=9)
    collector.start()
    first = collector.obs.copy()
    state = collector.state_dict()
    assert state["env"] is None and "EnvPool" in state["uncaptured"]
    restored = VectorCollector(spec, 4, seed=9)
    restored.load_state_dict(state)
    restored.start()
    assert restored.resets == 2 and not np.array_equal(restored.obs, first)  # what cuts the replay's sequences


# -- bad input: one line, exit 2, no files ----------------------------------------------------------------------------
BAD = {
    "unknown-id": (["env.id=Hopperr-v5"], ("Hopperr-v5", "Hopper-v5", "env.backend=gymnasium")),
    "gymnasium-ale-id": (["env.id=ALE/Pong-v5"], ("ALE/Pong-v5", "env.id='Pong-v5'")),
    "zoo-atari-id": (["env.id=atari"], ("atari", "Pong-v5", "env.backend=gymnasium")),
    "gymnasium-only-option": (["env.kwargs.sutton_barto_reward=True"],
                              ("sutton_barto_reward", "gymnasium option", "env.backend=gymnasium")),
    "unknown-option": (["env.kwargs.no_such_option=1"], ("no_such_option", "unknown to EnvPool", "num_threads")),
    "option-zoo-sets": (["env.kwargs.num_envs=3"], ("num_envs", "pipeline.num_envs")),
    "noop-max-zero": (["env.id=Pong-v5", "env.kwargs.noop_max=0", "policy.encoder=auto"], ("noop_max", "crashes")),
    "async-mode": (["pipeline.vector_mode=async"], ("vector_mode", "async", "env.backend=gymnasium")),
}


def _bad_run(tmp_path: Path, capsys, overrides: list[str]) -> tuple[int, list[str]]:
    config = write_config(tmp_path, {"exp_name": "bad", "runs_dir": str(tmp_path / "runs"),
                                     "env": {"id": "CartPole-v1", "backend": "envpool"},
                                     "policy": {"type": "ppo", "epochs": 1, "minibatch_size": 32},
                                     "pipeline": {"num_envs": 2, "rollout_steps": 16, "max_env_steps": 64}})
    before = sorted(tmp_path.rglob("*"))
    capsys.readouterr()
    argv = ["run", "--config", str(config), "-q"]
    for override in overrides:
        argv += ["--set", override]
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    lines = capsys.readouterr().err.splitlines()
    assert sorted(tmp_path.rglob("*")) == before, "a refused run left files"
    return code, lines


@needs_envpool
@pytest.mark.parametrize("case", list(BAD))
def test_what_envpool_cannot_do_is_one_line_naming_the_fix(case, tmp_path, capsys):
    overrides, keywords = BAD[case]
    code, lines = _bad_run(tmp_path, capsys, overrides)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("zoo: error:"), lines
    for keyword in keywords:
        assert keyword in lines[0], (keyword, lines[0])


def test_without_the_extra_the_line_names_the_pip_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)  # an import of envpool now fails, as where it is missing
    code, lines = _bad_run(tmp_path, capsys, [])
    assert code == 2 and len(lines) == 1 and "pip install 'zoo-rl[envpool]'" in lines[0], lines


def test_a_misspelt_backend_names_the_choices(tmp_path, capsys):
    code, lines = _bad_run(tmp_path, capsys, ["env.backend=envpol"])
    assert code == 2 and len(lines) == 1 and "'gymnasium', 'envpool'" in lines[0] and "env.backend" in lines[0]


# -- the bench's kept results ----------------------------------------------------------------------------------------
def test_the_new_key_does_not_make_zoo_bench_retrain_kept_results_but_an_envpool_run_is_not_taken_for_one(tmp_path):
    entry = next(e for suite in SUITES.values() for e in suite if e.name == "ppo_hopper")
    kept = REPO / "benchmarks" / "results" / "ppo_hopper" / "seed_0"
    assert "backend" not in (kept / "config.yaml").read_text()  # trained before env.backend existed
    assert config_difference(kept, entry, 0, REPO / "configs") is None
    other = tmp_path / "seed_0"
    other.mkdir()
    text = (kept / "config.yaml").read_text().replace("env:\n", "env:\n  backend: envpool\n", 1)
    (other / "config.yaml").write_text(text)
    assert "env.backend" in config_difference(other, entry, 0, REPO / "configs")
