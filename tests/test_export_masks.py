"""zoo export of runs whose env gives action masks (issue 55): the mask is an input of the ONNX and TorchScript files
(``action_mask``, bool ``(N, width)``), the file chooses among the valid actions exactly as ``zoo.load(run).predict(obs,
action_mask=mask)`` (feed-forward and recurrent, Discrete and MultiDiscrete), its check feeds masks and refuses a graph
that ignores them, and a run without masks exports as before."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from spaces_envs import MatchComponentsEnv

import zoo
from zoo.cli import main
from zoo.envs.masked import MaskedChoice
from zoo.errors import ConfigError
from zoo.export.command import ExportCheckError, export_run
from zoo.export.formats import ExportedRunner
from zoo.export.masks import check_masks, invalid_rows
from zoo.policies import PPOPolicy
from zoo.policies.base import ActingGraph
from zoo.policies.memory import MemoryActingGraph
from zoo.registry import ENV_REGISTRY, POLICY_REGISTRY
from zoo.run import train

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

FORMATS = ("onnx", "torchscript")
NVEC, START = (3, 2, 4), (1, 0, -2)


class MaskedComponents(MatchComponentsEnv):
    """MultiDiscrete(3, 2, 4) actions (starts 1, 0, -2) with an ``action_masks()`` method: each component's actions
    valid at random, the cue's always."""

    def _observe(self) -> np.ndarray:
        obs = super()._observe()
        self._mask = np.concatenate([(self.np_random.random(n) < 0.5) | (np.arange(n) == target)
                                     for n, target in zip(self.nvec, self._target)])
        return obs

    def action_masks(self) -> np.ndarray:
        return self._mask.copy()


class MaskBlindPolicy(PPOPolicy):
    """Takes masks in training, but its ``deterministic_action`` has no ``action_mask`` keyword."""

    def deterministic_action(self, obs):
        return super().deterministic_action(obs)


MASKED = {"id": "MaskedChoice-v0", "action_mask": "auto"}
RUNS = {
    "ppo": {"env": MASKED, "policy": {"type": "ppo"}},
    "dqn": {"env": MASKED, "policy": {"type": "dqn"}, "pipeline": {"learning_starts": 64}},
    "ppo_gru": {"env": MASKED, "policy": {"type": "ppo", "recurrent": "gru", "recurrent_size": 8,
                                          "sequence_length": 8, "minibatch_size": 64},
                "pipeline": {"normalize_obs": True}},
    "a2c_multidiscrete": {"env": {"id": "test_export_masked_components", "action_mask": "method"},
                          "policy": {"type": "a2c"}},
    "ppo_unmasked": {"env": {**MASKED, "action_mask": "none"}, "policy": {"type": "ppo"}},
    "ppo_auto_no_masks": {"env": {"id": "CartPole-v1", "action_mask": "auto"}, "policy": {"type": "ppo"}},
    "mask_blind": {"env": MASKED, "policy": {"type": "test_export_mask_blind"}},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """``run(name)``: the run directory of ``RUNS[name]`` (256 env steps), trained the first time it is asked."""
    ENV_REGISTRY.register("test_export_masked_components",
                          lambda **kw: MaskedComponents(nvec=NVEC, start=START, **kw), source="tests")
    POLICY_REGISTRY.register("test_export_mask_blind", MaskBlindPolicy, source="tests")
    root, made = tmp_path_factory.mktemp("masked_runs"), {}

    def trained(name: str) -> Path:
        if name not in made:
            config = {**RUNS[name], "exp_name": name, "seed": 3}
            config["policy"] = {"hidden_sizes": [16], **config["policy"]}
            rollout = {} if config["policy"]["type"] == "dqn" else {"rollout_steps": 32}  # a replay: no rollouts
            config["pipeline"] = {"num_envs": 4, "max_env_steps": 256, "eval_every": 0, **rollout,
                                  **config.get("pipeline", {})}
            made[name] = Path(train(config, [f"runs_dir={root}", "logger.progress=false"])["run_dir"])
        return made[name]

    yield trained
    ENV_REGISTRY.unregister("test_export_masked_components")
    POLICY_REGISTRY.unregister("test_export_mask_blind")


def _random_masks(rng, rows, nvec):
    """Random masks with at least one valid action per component; every fourth row one valid action alone."""
    parts = []
    for n in nvec:
        part = rng.random((rows, n)) < 0.5
        part[np.arange(rows), rng.integers(0, n, rows)] = True
        part[::4] = np.eye(n, dtype=bool)[rng.integers(0, n, (rows + 3) // 4)]
        parts.append(part)
    return np.concatenate(parts, axis=1)


def _valid_by_hand(actions, masks, nvec, start):
    """Whether each row's action is valid under its mask: a plain loop over rows and components."""
    actions = np.asarray(actions).reshape(len(actions), -1)
    valid = []
    for action, mask in zip(actions, masks):
        offset, ok = 0, True
        for k, n in enumerate(nvec):
            index = int(action[k]) - start[k]
            ok = ok and 0 <= index < n and bool(mask[offset + index])
            offset += n
        valid.append(ok)
    return np.array(valid)


def _metadata(fmt, data):
    if fmt == "onnx":
        import onnx

        return json.loads({p.key: p.value for p in onnx.load_from_string(data).metadata_props}["zoo"])
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return json.loads(archive.read(next(n for n in archive.namelist() if n.endswith("extra/zoo.json"))))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name, nvec, start", [("ppo", (6,), (0,)), ("dqn", (6,), (0,)),
                                               ("a2c_multidiscrete", NVEC, START)])
def test_the_file_takes_the_mask_and_chooses_among_the_valid_actions_as_predict(run, fmt, name, nvec, start,
                                                                                 tmp_path):
    result = export_run(run(name), fmt, tmp_path / "policy.bin", check=64)
    assert result.mask_width == sum(nvec) and result.checked == 64 and [i.name for i in result.inputs] == ["obs"]
    data = result.path.read_bytes()
    meta = _metadata(fmt, data)["action_mask"]
    assert (meta["input"], meta["dtype"], meta["shape"]) == ("action_mask", "bool", ["N", sum(nvec)])
    if fmt == "onnx":
        import onnxruntime as ort

        feeds = [(i.name, i.type, i.shape[1:]) for i in ort.InferenceSession(data).get_inputs()]
        assert feeds == [("obs", "tensor(float)", [sum(nvec) * (2 if name in ("ppo", "dqn") else 1)]),
                         ("action_mask", "tensor(bool)", [sum(nvec)])]
    rng = np.random.default_rng(0)
    env = MaskedChoice() if name in ("ppo", "dqn") else MaskedComponents(nvec=NVEC, start=START)
    obs = np.stack([env.reset(seed=s)[0] for s in range(200)]).astype(np.float32)
    masks = _random_masks(rng, len(obs), nvec)
    got = ExportedRunner(fmt, data, ["obs", "action_mask"])([obs, masks])
    assert _valid_by_hand(got, masks, nvec, start).all()
    np.testing.assert_array_equal(got, zoo.load(run(name)).predict(obs, action_mask=masks))
    alone = [int(np.flatnonzero(m)[0]) + start[0] for m in masks[::4, :nvec[0]]]
    assert np.asarray(got).reshape(len(got), -1)[::4, 0].tolist() == alone  # one valid action: that one


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_recurrent_file_takes_obs_state_and_mask_and_plays_as_predict(run, fmt):
    result = export_run(run("ppo_gru"), fmt, check=32)
    assert result.state_shape == (2, 8) and result.mask_width == 6
    runner = ExportedRunner(fmt, result.path.read_bytes(), ["obs", "state", "action_mask"], ("action", "state_out"))
    agent, env, rng = zoo.load(run("ppo_gru")), MaskedChoice(length=8), np.random.default_rng(1)
    obs, info = env.reset(seed=4)
    state, exported = None, np.zeros((1, 2, 8), np.float32)
    for step in range(40):  # five episodes, the state carried on both sides, every third mask one valid action
        mask = info["action_mask"].copy()
        if step % 3 == 0:
            mask = np.eye(6, dtype=bool)[rng.choice(np.flatnonzero(mask))]
        action, state = agent.predict(obs, state=state, action_mask=mask)
        got, exported = runner([obs[None].astype(np.float32), exported, mask[None]])
        assert got[0] == action and mask[action] and np.allclose(exported[0], state, atol=1e-5)
        obs, _, terminated, truncated, info = env.step(int(action))
        if terminated or truncated:
            obs, info = env.reset()
            state, exported = None, np.zeros_like(exported)
    assert env.invalid_actions == 0


def _ignore_mask(real):
    return lambda self, obs, *state, action_mask=None: real(self, obs, *state)


def _all_valid(real):  # reads the mask's shape, not its values: the ONNX file keeps the input
    return lambda self, obs, *state, action_mask=None: real(self, obs, *state, action_mask=torch.ones_like(action_mask))


@pytest.mark.parametrize("name, graph, fmt, mutation", [("ppo", ActingGraph, "torchscript", _ignore_mask),
                                                        ("ppo", ActingGraph, "onnx", _all_valid),
                                                        ("ppo_gru", MemoryActingGraph, "onnx", _all_valid)])
def test_the_export_check_fails_a_graph_that_drops_the_mask(run, monkeypatch, tmp_path, name, graph, fmt, mutation):
    monkeypatch.setattr(graph, "forward", mutation(graph.forward))
    out = tmp_path / "policy"  # not the run's export folder, which other tests of the module write into
    with pytest.raises(ExportCheckError) as err:
        export_run(run(name), fmt, out=out, check=32)
    message = str(err.value)
    assert "\n" not in message and "differ from zoo.load" in message and "nothing written" in message
    assert "invalid under their action_mask (is the mask input ignored?)" in message
    assert list(tmp_path.iterdir()) == []


def test_an_onnx_graph_without_the_mask_is_refused_before_its_check(run, monkeypatch):
    monkeypatch.setattr(ActingGraph, "forward", _ignore_mask(ActingGraph.forward))
    with pytest.raises(ConfigError, match="does not use its input 'action_mask'"):
        export_run(run("ppo"), "onnx", check=32)
    assert not (run("ppo") / "export").exists()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["ppo_unmasked", "ppo_auto_no_masks"])  # masks ignored; auto, but none given
def test_a_run_without_masks_exports_as_before(run, fmt, name, tmp_path):
    result = export_run(run(name), fmt, tmp_path / "policy.bin", check=32)
    data = result.path.read_bytes()
    assert result.mask_width is None and "action_mask" not in _metadata(fmt, data)
    if fmt == "onnx":
        import onnxruntime as ort

        assert [i.name for i in ort.InferenceSession(data).get_inputs()] == ["obs"]
    env = MaskedChoice() if name == "ppo_unmasked" else gym.make("CartPole-v1")
    obs = np.stack([env.reset(seed=s)[0] for s in range(16)]).astype(np.float32)
    got = ExportedRunner(fmt, data, ["obs"])([obs])
    np.testing.assert_array_equal(got, zoo.load(run(name)).predict(obs))


def test_a_policy_whose_export_takes_no_mask_is_refused_in_one_line(run, tmp_path):
    with pytest.raises(ConfigError) as err:
        export_run(run("mask_blind"), "onnx", tmp_path / "p.onnx")
    assert "\n" not in str(err.value) and "its env gives action masks" in str(err.value)
    assert "action_mask=None keyword" in str(err.value) and not (tmp_path / "p.onnx").exists()


def test_zoo_export_names_the_mask_input(run, tmp_path, capsys):
    assert main(["export", str(run("ppo")), "--format", "onnx", "--out", str(tmp_path / "p.onnx"), "--check",
                 "16"]) == 0
    out = capsys.readouterr().out
    assert 'inputs: obs float32 ["N", 12], action_mask bool ["N", 6]; output: action int64' in out
    assert "each observation with an action mask" in out


def test_the_check_masks_and_the_invalid_rows_against_plain_loops():
    rng = np.random.default_rng(2)
    space = gym.spaces.MultiDiscrete(NVEC, start=START)
    masks = _random_masks(rng, 9, NVEC)
    mixed = check_masks(masks, space, seed=5)
    assert np.array_equal(mixed[::2], masks[::2])  # the env's masks kept at even rows
    for row in mixed[1::2]:  # one valid action per component at odd rows
        assert [int(part.sum()) for part in np.split(row, np.cumsum(NVEC)[:-1])] == [1, 1, 1]
    actions = np.stack([space.sample() for _ in range(9)])
    assert np.array_equal(invalid_rows(actions, masks, space), ~_valid_by_hand(actions, masks, NVEC, START))
