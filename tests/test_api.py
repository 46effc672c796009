"""The Python API (zoo.train, zoo.load, Agent.predict, python -m zoo), evaluation with the saved observation
normaliser on every path (training evals, zoo eval, zoo.load), seeds, the pipeline choice, and CUDA."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import zoo
from zoo.cli import main
from zoo.config.resolve import resolve_config
from zoo.envs import EnvSpec, NormalizeObservation
from zoo.errors import ConfigError, ZooError
from zoo.pipelines import TrainingLoop
from zoo.pipelines.evaluator import evaluate_policy
from zoo.pipelines.process import component_seed, derive_seed
from zoo.registry import PIPELINE_REGISTRY
from zoo.run import load_run
from zoo.run.run_dir import load_weights_only

PENDULUM = {
    "exp_name": "p", "seed": 1,
    "env": {"id": "Pendulum-v1"},
    "policy": {"type": "ppo", "epochs": 1, "init_log_std": -0.5},
    "pipeline": {"num_envs": 2, "rollout_steps": 16, "normalize_obs": True, "normalize_reward": True,
                 "eval_every": 3, "eval_episodes": 2, "max_env_steps": 192},
}


@pytest.fixture(scope="module")
def normalised_run(tmp_path_factory) -> Path:
    summary = zoo.train({**PENDULUM, "runs_dir": str(tmp_path_factory.mktemp("runs"))})
    assert summary["reason"] == "max_env_steps" and summary["env_steps"] == 192
    return Path(summary["run_dir"])


def _reference_returns(run: Path, seed: int, episodes: int, normalised: bool) -> list[float]:
    cfg, policy, obs_state = load_run(run)
    normalize = NormalizeObservation.frozen(obs_state) if normalised else None
    return evaluate_policy(policy, EnvSpec.from_config(cfg), episodes, seed, normalize_obs=normalize)


def test_training_evaluations_apply_the_observation_normaliser(normalised_run):
    rows = [json.loads(line) for line in (normalised_run / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]  # iteration 6 evaluated the final policy, with the final statistics
    assert last["iteration"] == 6 and last["eval_return_mean"] is not None
    seed = component_seed(1, 0, "eval", 6)
    assert last["eval_return_mean"] == pytest.approx(np.mean(_reference_returns(normalised_run, seed, 2, True)))
    assert last["eval_return_mean"] != pytest.approx(np.mean(_reference_returns(normalised_run, seed, 2, False)))


def test_zoo_eval_applies_the_saved_normaliser(normalised_run, capsys):
    assert main(["eval", str(normalised_run), "--episodes", "3", "--seed", "11"]) == 0
    fields = dict(part.split("=") for part in capsys.readouterr().out.strip().splitlines()[-1].split())
    with_normaliser = np.mean(_reference_returns(normalised_run, 11, 3, True))
    assert float(fields["mean_return"]) == pytest.approx(with_normaliser, abs=1e-3)
    assert float(fields["mean_return"]) != pytest.approx(np.mean(_reference_returns(normalised_run, 11, 3, False)))


def test_load_predict_takes_one_observation_or_a_batch_and_normalises(normalised_run):
    agent = zoo.load(normalised_run)
    state = load_weights_only(normalised_run / "checkpoint.pt")
    normalize = NormalizeObservation.frozen(state["obs_normalizer"])
    obs = np.array([[1.0, 0.0, 0.5], [-0.3, 0.95, -2.0]], dtype=np.float32)
    expected = agent.policy.evaluate(torch.as_tensor(normalize(obs)))
    np.testing.assert_allclose(agent.predict(obs), expected)
    np.testing.assert_allclose(agent.predict(obs[0]), expected[0], rtol=1e-5)
    assert agent.predict(obs[0]).shape == (1,)
    raw = agent.policy.evaluate(torch.as_tensor(obs))
    assert not np.allclose(raw, expected)  # the normaliser matters for this run
    assert agent.policy.optimizer is None  # acting only
    with pytest.raises(ValueError, match="expected"):
        agent.predict(np.zeros(5))
    env = gym.make("Pendulum-v1")
    observation, _ = env.reset(seed=0)
    action = agent.predict(observation)
    assert env.action_space.contains(action.astype(np.float32))
    stochastic = [agent.predict(observation, deterministic=False) for _ in range(3)]
    assert not all(np.allclose(stochastic[0], s) for s in stochastic[1:])


def test_train_accepts_a_path_and_set_strings(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("exp_name: y\nenv: {id: CartPole-v1}\npolicy: {type: a2c}\npipeline: {eval_every: 0}\n")
    summary = zoo.train(config, [f"runs_dir={tmp_path}", "pipeline.max_env_steps=64", "pipeline.num_envs=2",
                                 "pipeline.rollout_steps=16"])
    assert summary["run_dir"] == str(tmp_path / "y") and summary["env_steps"] == 64
    assert zoo.load(summary["run_dir"]).predict(np.zeros(4, dtype=np.float32)) in (0, 1)


def test_python_dash_m_zoo_works_like_zoo():
    result = subprocess.run([sys.executable, "-m", "zoo", "list"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "policies:" in result.stdout and "ppo" in result.stdout
    bad = subprocess.run([sys.executable, "-m", "zoo", "run", "--seed", "x"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_seeds_are_derived_per_rank_and_component_without_collisions():
    seeds = {component_seed(7, rank, name) for rank in range(4) for name in ("torch", "numpy", "env", "eval")}
    assert len(seeds) == 16
    assert derive_seed(7, 0, 3) == component_seed(7, 0, "env") != component_seed(8, 0, "env")


def test_pipeline_type_defaults_to_the_policy_s_and_an_unsupported_pair_is_refused():
    cfg = resolve_config({"policy": {"type": "ppo"}})
    assert cfg.pipeline.type == "serial_onpolicy" and cfg.pipeline.num_envs == 8
    with pytest.raises(ZooError, match="unknown pipeline 'serial_onpolicyy': did you mean 'serial_onpolicy'"):
        resolve_config({"policy": {"type": "ppo"}, "pipeline": {"type": "serial_onpolicyy"}})

    class OtherPipeline(TrainingLoop):
        pass

    PIPELINE_REGISTRY.register("test_other", OtherPipeline)
    try:
        with pytest.raises(ConfigError, match="policy 'ppo' does not run on pipeline 'test_other'"):
            resolve_config({"policy": {"type": "ppo"}, "pipeline": {"type": "test_other"}})
    finally:
        PIPELINE_REGISTRY.unregister("test_other")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_training_on_cuda_reaches_learn_and_evaluates(tmp_path):
    summary = zoo.train({**PENDULUM, "runs_dir": str(tmp_path), "device": "cuda"})
    assert summary["env_steps"] == 192
    agent = zoo.load(summary["run_dir"], device="cuda")
    assert agent.predict(np.zeros(3, dtype=np.float32)).shape == (1,)


SPAWNED_MODULE = '''
from zoo.registry import ENV_REGISTRY


def factory():
    import gymnasium
    return gymnasium.make("CartPole-v1")


ENV_REGISTRY.register("spawn_test_env", factory)
'''


def _registered_in_fresh_process(cfg: dict, queue) -> None:
    from easydict import EasyDict

    from zoo.pipelines.process import setup_process
    from zoo.plugins import load_run_plugins
    from zoo.registry import ENV_REGISTRY, POLICY_REGISTRY

    load_run_plugins(EasyDict(cfg))  # what every process that trains calls first (worker, actor)
    seeds = setup_process(EasyDict(cfg), rank=1)
    queue.put(("spawn_test_env" in ENV_REGISTRY, "ppo" in POLICY_REGISTRY, seeds["env"]))


def test_a_spawned_process_loads_plugins_and_import_names_again(tmp_path):
    import multiprocessing

    (tmp_path / "spawned_module.py").write_text(SPAWNED_MODULE)
    cfg = resolve_config({"policy": {"type": "ppo"}, "import_names": ["spawned_module"],
                          "import_paths": [str(tmp_path)]})
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_registered_in_fresh_process, args=(dict(cfg), queue))
    process.start()
    env_registered, builtins_loaded, env_seed = queue.get(timeout=120)
    process.join(timeout=60)
    assert env_registered and builtins_loaded and env_seed == component_seed(cfg.seed, 1, "env")
