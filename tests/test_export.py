"""zoo export: the exported ONNX and TorchScript graphs give zoo.load's actions (every built-in algorithm, MLP and CNN
encoders, Discrete/MultiDiscrete/MultiBinary/Box actions, Dict observations, observation normalisation), run without
zoo or torch, and refusals write nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import new_policy
from spaces_envs import BrightSideEnv, DictCueEnv, MatchComponentsEnv

from zoo.envs import NormalizeObservation
from zoo.errors import ZooError
from zoo.export import CHECK_RELATIVE, CHECK_TOLERANCE
from zoo.export.command import ExportCheckError, export_run
from zoo.export.formats import ExportedRunner, graph_bytes
from zoo.export.graph import FrozenNormalization, ObservationInputs, graph_arrays, graph_inputs
from zoo.policies import (
    A2CPolicy,
    DPPOPolicy,
    ImpalaPolicy,
    Policy,
    PPOPolicy,
    SACACEPolicy,
    SACPolicy,
)
from zoo.registry import ENV_REGISTRY, POLICY_REGISTRY
from zoo.run import train

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

FORMATS = ("onnx", "torchscript")
BOX = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (40, 40, 1), np.uint8)
ACTIONS = {
    "discrete_start": gym.spaces.Discrete(4, start=2),
    "box": gym.spaces.Box(np.array([-0.5, -2.0], np.float32), np.array([0.5, 3.0], np.float32)),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 2, 4], start=[1, 0, -2]),
    "multibinary": gym.spaces.MultiBinary(4),
}


def _policy(cls, action_space, observation_space=BOX, seed=0, **overrides):
    config = {"hidden_sizes": [16], **overrides}
    return new_policy(cls, observation_space, action_space, seed, acting_only=True, **config)


def _exported(fmt, module, example):
    names = [f"in{k}" for k in range(len(example))]
    return ExportedRunner(fmt, graph_bytes(fmt, module, example, names, {"test": True}), names)


CASES = [
    (PPOPolicy, "discrete_start", BOX), (PPOPolicy, "box", BOX), (PPOPolicy, "multidiscrete", BOX),
    (A2CPolicy, "multibinary", BOX), (A2CPolicy, "box", BOX), (DPPOPolicy, "discrete_start", BOX),
    (DPPOPolicy, "box", BOX), (ImpalaPolicy, "discrete_start", BOX), (ImpalaPolicy, "box", BOX),
    (SACPolicy, "box", BOX), (SACACEPolicy, "box", BOX), (PPOPolicy, "discrete_start", IMAGE),
    (A2CPolicy, "box", IMAGE), (SACPolicy, "box", IMAGE),
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("cls, action, observation_space", CASES,
                         ids=[f"{c.__name__}-{a}-{'image' if o is IMAGE else 'mlp'}" for c, a, o in CASES])
def test_every_algorithm_exports_what_evaluate_returns(fmt, cls, action, observation_space):
    policy = _policy(cls, ACTIONS[action], observation_space)
    if isinstance(ACTIONS[action], gym.spaces.Box) and cls not in (SACPolicy, SACACEPolicy):
        with torch.no_grad():  # means far outside the bounds: the graph must clip (or squash) as evaluate does
            policy.model.policy_head.bias.mul_(0).add_(torch.tensor([3.0, -5.0]))
            policy.model.policy_head.weight.mul_(20)
    rng = np.random.default_rng(0)
    if observation_space is IMAGE:
        obs = rng.integers(0, 256, (64, *IMAGE.shape)).astype(np.float32)
    else:
        obs = rng.normal(0, 2, (64, 5)).astype(np.float32)
    want = policy.evaluate(torch.from_numpy(obs))
    runner = _exported(fmt, policy.export_module(), [torch.from_numpy(obs[:2])])
    got, one = runner([obs]), runner([obs[:1]])
    assert got.dtype == want.dtype and got.shape == want.shape
    if np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(one, want[:1])
        assert all(ACTIONS[action].contains(a) for a in got)
    else:
        np.testing.assert_allclose(got, want, atol=CHECK_TOLERANCE, rtol=CHECK_RELATIVE)  # zoo export --check's
        np.testing.assert_allclose(one, want[:1], atol=CHECK_TOLERANCE, rtol=CHECK_RELATIVE)
        space = ACTIONS[action]
        assert (got >= space.low).all() and (got <= space.high).all()
        if cls not in (SACPolicy, SACACEPolicy, ImpalaPolicy):
            assert (got == space.high).any() and (got == space.low).any(), "the test reaches both bounds"


NATIVE = gym.spaces.Dict({
    "cue": gym.spaces.Discrete(3, start=-1),
    "pos": gym.spaces.Tuple((gym.spaces.Box(-2.0, 2.0, (2, 2), np.float32), gym.spaces.MultiBinary(3))),
    "grid": gym.spaces.MultiDiscrete([[2, 3], [4, 1]], start=[[0, 1], [-2, 5]]),
})


@pytest.mark.parametrize("native", [NATIVE, gym.spaces.Discrete(5, start=3), gym.spaces.MultiDiscrete([3, 2]),
                                    gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (3,))))],
                         ids=["dict", "discrete", "multidiscrete", "tuple"])
@pytest.mark.parametrize("fmt", [None, *FORMATS])
def test_native_observations_are_flattened_in_the_graph_as_gymnasium_flattens_them(native, fmt):
    native.seed(3)
    samples = [native.sample() for _ in range(50)]
    flat_space = gym.spaces.flatten_space(native)
    want = np.stack([gym.spaces.flatten(native, s) for s in samples]).astype(np.float32)
    inputs = graph_inputs(native, flat_space)
    module = ObservationInputs(inputs, flat_space.shape)
    arrays = graph_arrays(inputs, samples)
    if fmt is None:
        got = module(*[torch.from_numpy(a) for a in arrays]).numpy()
    else:
        got = _exported(fmt, module, [torch.from_numpy(a[:2]) for a in arrays])(arrays)
    np.testing.assert_array_equal(got, want)
    if native is NATIVE:
        assert [(i.name, i.dtype.name) for i in inputs] == [
            ("cue", "int64"), ("grid", "int64"), ("pos.0", "float32"), ("pos.1", "int8")]


def test_frozen_normalization_equals_zoos_float64_normalisation():
    venv = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")] * 2)
    wrapper = NormalizeObservation(venv, clip=1.5)
    rng = np.random.default_rng(1)
    wrapper.obs_rms.update(rng.normal(3.0, [0.1, 2.0, 50.0], (500, 3)))
    state = wrapper.state_dict()
    obs = rng.normal(3.0, [0.1, 2.0, 50.0], (200, 3)).astype(np.float32)
    want = NormalizeObservation.frozen(state)(obs)
    got = FrozenNormalization(state)(torch.from_numpy(obs)).numpy()
    np.testing.assert_array_equal(got, want)
    assert (np.abs(got) == 1.5).any(), "the test reaches the clip"


# -- end to end: run directories ----------------------------------------------------------------------------------
@pytest.fixture(scope="module", autouse=True)
def test_envs():
    envs = {"test_export_image": BrightSideEnv, "test_export_dict": DictCueEnv,
            "test_export_multi": lambda **kw: MatchComponentsEnv(nvec=(3, 2, 4), start=(1, 0, -2), **kw)}
    for name, factory in envs.items():
        ENV_REGISTRY.register(name, factory, source="tests")
    yield
    for name in envs:
        ENV_REGISTRY.unregister(name)


RUNS = {
    "ppo_cartpole": ({"env": {"id": "CartPole-v1"}, "policy": {"type": "ppo"}}, 512),
    "sac_pendulum": ({"env": {"id": "Pendulum-v1"}, "policy": {"type": "sac", "hidden_sizes": [32, 32]},
                      "pipeline": {"learning_starts": 100}}, 300),
    "image_ppo": ({"env": {"id": "test_export_image"}, "policy": {"type": "ppo"}}, 256),
    "dict_ppo_normalized": ({"env": {"id": "test_export_dict"}, "policy": {"type": "ppo"},
                             "pipeline": {"normalize_obs": True}}, 512),
    "ppo_pendulum_normalized": ({"env": {"id": "Pendulum-v1"}, "policy": {"type": "ppo"},
                                 "pipeline": {"normalize_obs": True}}, 256),
    "multidiscrete_a2c": ({"env": {"id": "test_export_multi"}, "policy": {"type": "a2c"}}, 256),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("export_runs")
    made = {}
    for name, (config, steps) in RUNS.items():
        config = {**config, "exp_name": name,
                  "pipeline": {"num_envs": 4, "eval_every": 0, **config.get("pipeline", {}), "max_env_steps": steps}}
        if config["policy"]["type"] != "sac":
            config["pipeline"]["rollout_steps"] = 16
        made[name] = Path(train(config, [f"runs_dir={root}", "logger.progress=false"])["run_dir"])
    return made


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(RUNS))
def test_a_run_exports_and_passes_its_check(runs, name, fmt, tmp_path):
    out = tmp_path / f"policy.{fmt}"
    result = export_run(runs[name], fmt, out, check=64)
    assert result.path == out and out.is_file() and result.checked == 64
    assert result.max_difference <= 1e-5
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary file left"


def test_default_output_is_in_the_run_directory(runs):
    result = export_run(runs["ppo_cartpole"], "onnx", check=0)
    assert result.path == runs["ppo_cartpole"] / "export" / "policy.onnx" and result.checked == 0
    import onnx

    meta = json.loads({p.key: p.value for p in onnx.load(str(result.path)).metadata_props}["zoo"])
    assert meta["policy"] == "ppo" and meta["inputs"] == [{"name": "obs", "dtype": "float32", "shape": ["N", 4]}]


def _agent_actions(run: Path, observations: list) -> np.ndarray:
    import zoo

    agent = zoo.load(run)
    return agent.predict(observations if isinstance(observations[0], dict) else np.stack(observations))


def _observations(env: gym.Env, count: int) -> list:
    obs, _ = env.reset(seed=11)
    found = []
    for _ in range(count):
        found.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    return found


ONNX_ALONE = """
import json, sys
for name in ("torch", "zoo", "gymnasium"):
    sys.modules[name] = None  # importing any of them now fails: the file must run without them
import numpy as np, onnxruntime as ort
session = ort.InferenceSession(sys.argv[1])
arrays = np.load(sys.argv[2])
feed = {i.name: arrays[i.name] for i in session.get_inputs()}
print(json.dumps(session.run(["action"], feed)[0].tolist()))
"""

TORCHSCRIPT_ALONE = """
import json, sys
sys.modules["zoo"] = None
sys.modules["gymnasium"] = None
import numpy as np, torch
module = torch.jit.load(sys.argv[1])
arrays = np.load(sys.argv[2])
print(json.dumps(module(*[torch.from_numpy(arrays[k]) for k in arrays.files]).tolist()))
"""


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name, env", [("dict_ppo_normalized", DictCueEnv), ("ppo_pendulum_normalized", None),
                                       ("sac_pendulum", None),
                                       ("image_ppo", BrightSideEnv)])
def test_the_file_runs_without_zoo_and_gives_zoo_loads_actions(runs, name, env, fmt, tmp_path):
    made = env() if env is not None else gym.make("Pendulum-v1")
    made.action_space.seed(0)
    observations = _observations(made, 40)
    result = export_run(runs[name], fmt, tmp_path / "policy.bin", check=0)
    arrays = graph_arrays(result.inputs, observations)
    np.savez(tmp_path / "obs.npz", **{i.name: a for i, a in zip(result.inputs, arrays)})
    script = ONNX_ALONE if fmt == "onnx" else TORCHSCRIPT_ALONE
    done = subprocess.run([sys.executable, "-c", script, str(result.path), str(tmp_path / "obs.npz")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = np.asarray(json.loads(done.stdout))
    want = _agent_actions(runs[name], observations)
    if np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


# -- refusals -----------------------------------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zoo", "export", *args], capture_output=True, text=True, timeout=120)


def test_bad_arguments_are_one_line_and_write_nothing(runs, tmp_path):
    run = runs["ppo_cartpole"]
    for args, expected in [
        (["--format", "onnx", "--check", "-1"], "--check must be 0"),
        (["--format", "onnx", "--out", str(tmp_path)], "is a directory"),
        (["--format", "onnx", "--which", "best"], "no best_model.pt"),
    ]:
        done = _cli(str(run), *args)
        assert done.returncode == 2, (args, done.stderr)
        assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    done = _cli(str(tmp_path / "nowhere"), "--format", "torchscript")
    assert done.returncode == 2 and "not a run directory" in done.stderr
    assert _cli(str(run), "--format", "tflite").returncode == 2
    assert list(tmp_path.iterdir()) == []


def test_without_onnx_the_extra_is_named(runs, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ZooError, match=r"onnx package.*zoo-rl\[export\]"):
        export_run(runs["ppo_cartpole"], "onnx", tmp_path / "p.onnx")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_check_writes_nothing(runs, tmp_path, monkeypatch):
    from zoo.export import command

    def wrong(self, arrays):
        return np.zeros(len(arrays[0]), np.int64) + 7

    monkeypatch.setattr(command.ExportedRunner, "__call__", wrong)
    out = tmp_path / "p.onnx"
    with pytest.raises(ExportCheckError, match="nothing written"):
        export_run(runs["ppo_cartpole"], "onnx", out)
    assert list(tmp_path.iterdir()) == []


class NumpyOnlyPolicy(PPOPolicy):
    """A plugin that does not expose what export needs (``export_module`` None): refused in one line."""

    def deterministic_action(self, obs):
        return Policy.deterministic_action(self, obs)

    def export_module(self):
        return None


class UntraceablePolicy(PPOPolicy):
    def deterministic_action(self, obs):
        return torch.as_tensor(np.argmax(self.model.policy_output(obs).detach().numpy(), -1))


@pytest.mark.parametrize("cls, expected", [(NumpyOnlyPolicy, "cannot be exported"),
                                           (UntraceablePolicy, "cannot trace")], ids=["no_hook", "numpy_inside"])
def test_plugin_policies_without_what_export_needs_are_refused(cls, expected, tmp_path):
    POLICY_REGISTRY.register("test_export_plugin", cls, source="tests")
    try:
        summary = train({"exp_name": "plugin", "env": {"id": "CartPole-v1"}, "policy": {"type": "test_export_plugin"},
                         "pipeline": {"num_envs": 2, "rollout_steps": 8, "max_env_steps": 64, "eval_every": 0}},
                        [f"runs_dir={tmp_path}", "logger.progress=false"])
        out = tmp_path / "p.onnx"
        with pytest.raises(ZooError) as err:
            export_run(summary["run_dir"], "onnx", out)
        assert "\n" not in str(err.value) and expected in str(err.value)
        assert not out.exists()
    finally:
        POLICY_REGISTRY.unregister("test_export_plugin")
