"""Evaluations during training keep the best model; ``zoo eval``/``zoo.load`` take it or the last one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import zoo
from zoo.errors import RunDirectoryError
from zoo.pipelines.process import component_seed
from zoo.run.run_dir import load_weights_only

CONFIG = {
    "exp_name": "best", "seed": 0, "env": {"id": "CartPole-v1"},
    "policy": {"type": "ppo", "epochs": 2, "minibatch_size": 64, "learning_rate": 3e-3},
    "pipeline": {"num_envs": 4, "rollout_steps": 32, "max_env_steps": 128 * 12, "eval_every": 2, "eval_episodes": 3},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    return Path(zoo.train({**CONFIG, "runs_dir": str(root)})["run_dir"])


def test_best_model_holds_the_weights_of_the_best_evaluation(run):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [(row["eval_return_mean"], row["iteration"]) for row in rows if row["eval_return_mean"] is not None]
    assert len(evals) == 6
    best_return = max(value for value, _ in evals)
    first_best = next(iteration for value, iteration in evals if value == best_return)  # ties keep the first
    best = load_weights_only(run / "best_model.pt")
    assert best["eval_return_mean"] == best_return and best["iteration"] == first_best
    assert load_weights_only(run / "checkpoint.pt")["loop"]["best_eval_return"] == best_return
    # the best model is the policy as it was at that evaluation: re-evaluating it gives the logged return
    agent = zoo.load(run, which="best")
    last = zoo.load(run)
    params = dict(agent.policy.model.named_parameters())
    if first_best != rows[-1]["iteration"]:
        assert any(not torch.equal(p, params[n]) for n, p in last.policy.model.named_parameters())
    assert agent.predict(np.zeros(4, dtype=np.float32)) in (0, 1)


@pytest.mark.slow
def test_zoo_eval_takes_best_or_last_deterministic_or_stochastic(run):
    def evaluate(*extra: str) -> str:
        out = subprocess.run([sys.executable, "-m", "zoo", "eval", str(run), "--episodes", "3", *extra],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().splitlines()[-1]

    best = load_weights_only(run / "best_model.pt")
    seed = component_seed(0, 0, "eval", best["iteration"])  # the seed of that evaluation during training
    line = evaluate("--which", "best", "--device", "cpu", "--seed", str(seed))
    assert line == f"mean_return={best['eval_return_mean']:.4f} std_return={line.split('std_return=')[1]}"
    assert evaluate("--which", "last").startswith("mean_return=")
    assert evaluate("--stochastic").startswith("mean_return=")


def test_which_best_without_evaluations_is_one_line(tmp_path):
    summary = zoo.train({**CONFIG, "runs_dir": str(tmp_path),
                         "pipeline": {**CONFIG["pipeline"], "eval_every": 0, "max_env_steps": 128}})
    run = Path(summary["run_dir"])
    assert not (run / "best_model.pt").exists()
    with pytest.raises(RunDirectoryError, match="no best_model.pt .* use --which last"):
        zoo.load(run, which="best")
    out = subprocess.run([sys.executable, "-m", "zoo", "eval", str(run), "--which", "best"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "--which last" in out.stderr


@pytest.mark.parametrize(("flag", "deterministic"), [([], True), (["--stochastic"], False)])
def test_eval_stochastic_samples_from_the_policy(run, monkeypatch, flag, deterministic):
    from zoo import cli
    from zoo.pipelines import evaluator

    seen = {}

    def fake(policy, *args, **kwargs):
        seen.update(kwargs)
        return [1.0]

    monkeypatch.setattr(evaluator, "evaluate_policy", fake)
    assert cli.main(["eval", str(run), "--episodes", "1", *flag]) == 0
    assert seen["deterministic"] is deterministic
