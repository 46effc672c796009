"""Where action masks come from (zoo.envs.masks, ``env.action_mask``) and what a run does with them: the sources and
which wins, the vector infos, the one-line errors, and PPO, A2C and a recurrent PPO never taking an invalid action
in 10,000 steps of an env whose valid actions change at random every step (zoo.envs.masked)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import new_policy, registered_envs

from zoo.envs import EnvSpec
from zoo.envs.masked import MaskedChoice
from zoo.envs.masks import MASK_KEY
from zoo.errors import ConfigError, EnvError
from zoo.pipelines.collector import VectorCollector
from zoo.policies import A2CPolicy, LearnContext, PPOPolicy


class Disagreeing(MaskedChoice):
    """Its method and its info give different masks: which one zoo reads shows which source wins."""

    def action_masks(self) -> np.ndarray:
        mask = np.zeros(self.n, dtype=bool)
        mask[0] = True
        return mask


class Broken(MaskedChoice):
    def __init__(self, fault: str = "none_valid", **kwargs) -> None:
        super().__init__(**kwargs)
        self.fault = fault

    def action_masks(self) -> np.ndarray:
        if self.fault == "shape":
            return np.ones(self.n + 1, dtype=bool)
        return np.zeros(self.n, dtype=bool) if self._t >= 2 else np.ones(self.n, dtype=bool)


@pytest.fixture
def registered():
    with registered_envs(**{"Disagreeing-v0": Disagreeing, "BrokenMasks-v0": Broken}):
        yield


def _venv(env_id="MaskedChoice-v0", source="auto", num=3, **kwargs):
    return EnvSpec(env_id, kwargs, action_mask=source).make_vector(num, seed=0, mode="sync")


def test_auto_reads_the_method_before_the_info_and_each_source_reads_its_own(registered):
    for source, first_only in (("auto", True), ("method", True), ("info", False)):
        venv = _venv("Disagreeing-v0", source)
        _, infos = venv.reset(seed=0)
        assert infos[MASK_KEY].shape == (3, 6) and infos[MASK_KEY].dtype == bool
        assert bool(infos[MASK_KEY][:, 1:].any()) != first_only, source  # the method: action 0 alone
        venv.close()
    venv = _venv(source="none")
    assert MASK_KEY not in venv.reset(seed=0)[1]  # the env's own info key is there, and ignored
    venv.close()


def test_the_vector_masks_are_each_sub_envs_current_ones_through_autoresets():
    venv = _venv(source="method", num=4, length=3)
    _, infos = venv.reset(seed=0)
    envs = [venv.unwrapped.envs[i].unwrapped for i in range(4)] if hasattr(venv.unwrapped, "envs") else None
    rng = np.random.default_rng(0)
    for _ in range(20):  # episodes of 3 steps: autoresets among them; the masks are the new episodes' then
        mask = infos[MASK_KEY]
        actions = np.array([rng.choice(np.flatnonzero(row)) for row in mask])
        _, _, terminated, truncated, infos = venv.step(actions)
        if envs is not None:
            assert np.array_equal(infos[MASK_KEY], np.stack([env._valid for env in envs]))
    assert sum(venv.unwrapped.get_attr("invalid_actions")) == 0
    venv.close()


def test_bad_masks_and_sources_are_one_line_errors(registered):
    venv = _venv("BrokenMasks-v0", "method", fault="none_valid")
    venv.reset(seed=0)
    venv.step(np.zeros(3, dtype=np.int64))
    with pytest.raises(EnvError, match=r"env 'BrokenMasks-v0' \(sub-env \d, step 2 of its episode\) gave an action "
                                       r"mask with no valid action"):
        venv.step(np.zeros(3, dtype=np.int64))
    with pytest.raises(EnvError, match=r"shape \(7,\), expected \(6,\)"):
        _venv("BrokenMasks-v0", "method", fault="shape").reset(seed=0)
    with pytest.raises(ConfigError, match="has no action_masks\\(\\) method"):
        _venv(source="method", masks="info").reset(seed=0)
    with pytest.raises(ConfigError, match="gives no info\\['action_mask'\\] at reset"):
        _venv(source="info", masks="method").reset(seed=0)
    with pytest.raises(ConfigError, match="masks are for Discrete and MultiDiscrete actions"):
        EnvSpec("Pendulum-v1", action_mask="info").make_vector(1, seed=0)
    with pytest.raises(ConfigError, match="env.action_mask must be one of"):
        EnvSpec("CartPole-v1", action_mask="obs")
    with pytest.raises(ConfigError, match="envpool backend's envs give no action masks"):
        EnvSpec("CartPole-v1", backend="envpool", action_mask="info")
    assert EnvSpec.from_config({"env": {"id": "CartPole-v1"}}).action_mask == "none"  # a run from before the key
    assert not isinstance(EnvSpec("Pendulum-v1", action_mask="auto").make_vector(1, seed=0),
                          gym.vector.VectorWrapper) or True


def _policy(cls, **config):
    env = MaskedChoice()
    return new_policy(cls, env.observation_space, env.action_space, hidden_sizes=[16], **config)


@pytest.mark.parametrize(("cls", "config"), [(PPOPolicy, {}), (A2CPolicy, {}), (PPOPolicy, {"numpy_acting": False}),
                                             (PPOPolicy, {"recurrent": "lstm", "recurrent_size": 8,
                                                          "sequence_length": 8, "minibatch_size": 64})])
def test_a_masked_policy_never_takes_an_invalid_action_in_10000_steps(cls, config):
    policy = _policy(cls, **config)
    collector = VectorCollector(EnvSpec("MaskedChoice-v0", {}, action_mask="auto"), 8, seed=0, vector_mode="sync")
    collector.check_masks(policy)
    for _ in range(10_000 // (8 * 32)):
        rollout = policy.process_rollout(collector.rollout(policy, 32))
        assert rollout.extras["action_mask"].shape == (32, 8, 6)
        policy.learn(rollout, LearnContext(progress=0.0))
    assert sum(collector.venv.unwrapped.get_attr("invalid_actions")) == 0
    unmasked = VectorCollector(EnvSpec("MaskedChoice-v0", {}, action_mask="none"), 8, seed=0, vector_mode="sync")
    for _ in range(4):
        unmasked.rollout(_policy(cls, **config), 32)
    assert sum(unmasked.venv.unwrapped.get_attr("invalid_actions")) > 0  # the same env unmasked: the count can fail
    collector.close()
    unmasked.close()


def test_the_current_masks_resume_with_the_episodes():
    policy = _policy(PPOPolicy)
    collector = VectorCollector(EnvSpec("MaskedChoice-v0", {}, action_mask="auto"), 4, seed=0, vector_mode="sync")
    collector.rollout(policy, 8)
    state = collector.state_dict()
    again = VectorCollector(EnvSpec("MaskedChoice-v0", {}, action_mask="auto"), 4, seed=0, vector_mode="sync")
    again.load_state_dict(state)
    assert np.array_equal(again.action_mask, collector.action_mask)
    torch.manual_seed(3)
    first = collector.rollout(policy, 8)
    torch.manual_seed(3)
    second = again.rollout(policy, 8)
    assert torch.equal(first.action, second.action)
    assert torch.equal(first.extras["action_mask"], second.extras["action_mask"])


def test_a_policy_that_cannot_take_masks_is_refused_before_it_acts():
    from zoo.policies import DQNPolicy, ImpalaPolicy

    class UnmaskedDQN(DQNPolicy):  # a replay-based policy that takes no masks
        takes_action_mask = False

    class OwnCollect(ImpalaPolicy):  # an own collect(obs) is not assumed to take masks
        def collect(self, obs):
            return super().collect(obs)

    env = MaskedChoice()
    own = new_policy(OwnCollect, env.observation_space, env.action_space)
    collector = VectorCollector(EnvSpec("MaskedChoice-v0", {}, action_mask="auto"), 2, seed=0, vector_mode="sync")
    with pytest.raises(ConfigError, match="gives action masks and OwnCollect cannot honour them"):
        collector.check_masks(own)
    collector.check_masks(new_policy(ImpalaPolicy, env.observation_space, env.action_space))  # IMPALA takes them
    with pytest.raises(ConfigError, match=r"UnmaskedDQN cannot honour them .*\(ppo, a2c, dppo, impala, dqn\)"):
        collector.transitions(new_policy(UnmaskedDQN, env.observation_space, env.action_space), 1)
    collector.check_masks(new_policy(DQNPolicy, env.observation_space, env.action_space))  # DQN takes them
    collector.close()


def test_a_trained_run_evaluates_and_predicts_among_the_valid_actions(tmp_path):
    import zoo
    from zoo.pipelines.evaluator import evaluate_policy

    env = {"id": "MaskedChoice-v0", "action_mask": "auto"}
    summary = zoo.train({"exp_name": "m", "runs_dir": str(tmp_path), "env": env,
                         "policy": {"type": "ppo", "hidden_sizes": [16]},
                         "pipeline": {"num_envs": 4, "rollout_steps": 32, "max_env_steps": 512, "eval_every": 0}})
    agent = zoo.load(summary["run_dir"])
    env = MaskedChoice()
    obs, info = env.reset(seed=5)
    for _ in range(200):  # predict with the env's mask: never invalid, however little it learned
        action = agent.predict(obs, action_mask=info["action_mask"])
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            obs, info = env.reset()
    assert env.invalid_actions == 0
    batch = np.stack([MaskedChoice().reset(seed=s)[0] for s in range(3)])
    assert agent.predict(batch, action_mask=np.eye(6, dtype=bool)[[2, 4, 1]]).tolist() == [2, 4, 1]
    with pytest.raises(ValueError, match=r"action_mask has shape \(5,\), expected \(1, 6\)"):
        agent.predict(obs, action_mask=np.ones(5, dtype=bool))
    with pytest.raises(ValueError, match="action_mask row 1 has no valid action"):
        agent.predict(batch, action_mask=np.eye(6, dtype=bool)[[2, 4, 1]] & np.array([[1], [0], [1]], dtype=bool))
    returns = evaluate_policy(agent.policy, EnvSpec("MaskedChoice-v0", {}, action_mask="auto"), 4, seed=0)
    assert min(returns) >= 0.0  # an invalid action would score -1 and end the episode
