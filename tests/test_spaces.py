"""Spaces beyond Box observations and Discrete/Box actions: MultiDiscrete and MultiBinary actions (PPO, A2C), image
observations through a CNN encoder, and refusals, with small envs (tests/spaces_envs.py) that learn in seconds."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict
from spaces_envs import BrightSideEnv, DictCueEnv, MatchComponentsEnv
from torch import nn

from zoo.errors import ConfigError, ZooError
from zoo.policies import A2CPolicy, ImpalaPolicy, LearnContext, PPOPolicy, Rollout, SACPolicy
from zoo.policies.networks import NatureCNN, build_encoder, image_layout, is_image_space
from zoo.registry import ENV_REGISTRY, MODEL_REGISTRY
from zoo.run import train

OBS = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
MULTI = gym.spaces.MultiDiscrete([3, 2, 4], start=[1, 0, -2])
BINARY = gym.spaces.MultiBinary(4)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", autouse=True)
def space_envs():
    envs = {
        "test_match_multidiscrete": lambda **kw: MatchComponentsEnv(nvec=(3, 2, 4), start=(1, 0, -2), **kw),
        "test_match_multibinary": lambda **kw: MatchComponentsEnv(nvec=(2, 2, 2, 2), binary=True, **kw),
        "test_bright_side": BrightSideEnv,
        "test_dict_cue": DictCueEnv,
    }
    for name, factory in envs.items():
        ENV_REGISTRY.register(name, factory, source="tests")
    yield
    for name in envs:
        ENV_REGISTRY.unregister(name)


def make(cls, action_space, observation_space=OBS, seed=0, **overrides):
    torch.manual_seed(seed)
    cfg = EasyDict({**cls.default_config, "hidden_sizes": [16], **overrides})
    return cls(cfg, observation_space, action_space, torch.device("cpu"))


# -- MultiDiscrete and MultiBinary actions ------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [PPOPolicy, A2CPolicy])
@pytest.mark.parametrize("space", [MULTI, BINARY], ids=["multidiscrete", "multibinary"])
def test_collect_samples_every_component_with_its_joint_log_prob(cls, space):
    policy = make(cls, space)
    obs = torch.randn(512, 5)
    out = policy.collect(obs)
    nvec = [3, 2, 4] if space is MULTI else [2] * 4
    assert out.raw_action.shape == (512, len(nvec))
    assert all(space.contains(a) for a in out.action), "every env action lies in the space (start offsets, dtype)"
    assert out.action.dtype == space.dtype
    # Every choice of every component is drawn, and only those.
    for k, n in enumerate(nvec):
        assert set(out.raw_action[:, k].tolist()) == set(range(n))
    logits = policy.model.policy_output(obs)
    want = sum(torch.distributions.Categorical(logits=chunk).log_prob(out.raw_action[:, k])
               for k, chunk in enumerate(logits.split(nvec, -1)))
    torch.testing.assert_close(policy.log_prob(out.extras["policy_output"], out.raw_action), want)
    torch.testing.assert_close(out.extras["policy_output"], logits)


def test_sampled_components_follow_their_probabilities():
    policy = make(PPOPolicy, MULTI)
    with torch.no_grad():  # a fixed, far-from-uniform distribution per component
        policy.model.policy_head.weight.zero_()
        policy.model.policy_head.bias.copy_(torch.tensor([2.0, 0.0, -1.0, 0.5, -0.5, 0.0, 1.0, 2.0, -2.0]))
    draws = policy.collect(torch.zeros(20_000, 5)).raw_action
    for k, chunk in enumerate(policy.model.policy_head.bias.detach().split([3, 2, 4])):
        frequency = torch.bincount(draws[:, k], minlength=len(chunk)).float() / len(draws)
        torch.testing.assert_close(frequency, chunk.softmax(-1), atol=0.015, rtol=0)


def test_evaluate_takes_each_components_most_likely_choice_in_env_terms():
    policy = make(PPOPolicy, MULTI)
    with torch.no_grad():
        policy.model.policy_head.weight.zero_()
        policy.model.policy_head.bias.copy_(torch.tensor([0.0, 0.0, 3.0, 1.0, 0.0, 0.0, 5.0, 0.0, 0.0]))
    # argmax per component: (2, 0, 1), plus the space's start (1, 0, -2).
    assert policy.evaluate(torch.zeros(2, 5)).tolist() == [[3, 0, -1]] * 2


def test_discrete_start_offset_reaches_the_env():
    space = gym.spaces.Discrete(3, start=-1)
    policy = make(PPOPolicy, space)
    actions = np.concatenate([policy.collect(torch.randn(200, 5)).action, policy.evaluate(torch.randn(20, 5))])
    assert set(actions.tolist()) <= {-1, 0, 1} and all(space.contains(int(a)) for a in actions)


def _rollout(policy, T=4, B=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, B, 5, generator=g)
    out = policy.collect(obs.reshape(T * B, 5))
    extras = {key: value.reshape(T, B, *value.shape[1:]) for key, value in out.extras.items()}
    extras["policy_output"] = extras["policy_output"] + 0.7 * torch.randn(extras["policy_output"].shape, generator=g)
    extras["value"] = policy.values_of(obs) + 0.3 * torch.randn(T, B, generator=g)
    extras["advantage"] = torch.randn(T, B, generator=g)
    extras["returns"] = torch.randn(T, B, generator=g)
    return Rollout(obs=obs, action=out.raw_action.reshape(T, B, -1), reward=torch.zeros(T, B),
                   terminated=torch.zeros(T, B, dtype=torch.bool), truncated=torch.zeros(T, B, dtype=torch.bool),
                   valid=torch.ones(T, B, dtype=torch.bool), last_obs=obs[-1], extras=extras)


class _Capture(LearnContext):
    def __init__(self):
        super().__init__()
        self.grads = []

    def sync_gradients(self, grad):
        self.grads.append(grad.clone())


def _reference_logp(flat, action, nvec):
    return sum(torch.distributions.Categorical(logits=chunk).log_prob(action[..., k])
               for k, chunk in enumerate(flat.split(nvec, -1)))


def test_ppo_learn_uses_one_joint_clipped_ratio():
    policy = make(PPOPolicy, MULTI, epochs=1, minibatch_size=1000, normalize_advantage=False, entropy_coef=0.1,
                  value_coef=0.5, clip_ratio=0.2)
    rollout = _rollout(policy)
    samples = rollout.valid_samples()
    ctx = _Capture()
    # Reference gradient from torch.distributions, on a copy of the weights before the update (the policy's own
    # parameter gradients are views of its optimiser's flat buffer: left alone).
    reference = copy.deepcopy(policy.model)
    logits, value = reference(samples.obs)
    nvec = [3, 2, 4]
    logp = _reference_logp(logits, samples.action, nvec)
    logp_old = _reference_logp(samples.policy_output, samples.action, nvec)
    ratio = (logp - logp_old).exp()
    adv = samples.advantage
    surrogate = torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
    ent = sum(torch.distributions.Categorical(logits=c).entropy() for c in logits.split(nvec, -1)).mean()
    loss = -surrogate + 0.5 * 0.5 * (samples.returns - value).pow(2).mean() - 0.1 * ent
    want = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(reference.parameters()))])
    metrics = policy.learn(rollout, ctx)
    assert metrics["updates"] == 1.0
    torch.testing.assert_close(ctx.grads[0], want, rtol=1e-5, atol=1e-6)


def test_a2c_learn_gradient_matches_the_joint_log_prob():
    policy = make(A2CPolicy, BINARY, entropy_coef=0.05, value_coef=0.5)
    rollout = _rollout(policy)
    samples = rollout.valid_samples()
    reference = copy.deepcopy(policy.model)
    logits, value = reference(samples.obs)
    nvec = [2] * 4
    logp = _reference_logp(logits, samples.action, nvec)
    ent = sum(torch.distributions.Categorical(logits=c).entropy() for c in logits.split(nvec, -1)).mean()
    loss = -(logp * samples.advantage).mean() + 0.5 * (samples.returns - value).pow(2).mean() - 0.05 * ent
    want = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(reference.parameters()))])
    ctx = _Capture()
    policy.learn(rollout, ctx)
    torch.testing.assert_close(ctx.grads[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls, space, match", [
    (ImpalaPolicy, MULTI, "use ppo or a2c"),
    (ImpalaPolicy, BINARY, "use ppo or a2c"),
    (SACPolicy, MULTI, "1-D Box"),
    (PPOPolicy, gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Discrete(3)]), "Discrete, MultiDiscrete"),
])
def test_unsupported_action_spaces_are_refused_in_one_line(cls, space, match):
    with pytest.raises(ConfigError, match=match) as err:
        cls.check_spaces(OBS, space)
    assert "\n" not in str(err.value)


def test_a_policy_without_the_flag_refuses_multidiscrete_before_training(tmp_path):
    with pytest.raises(ConfigError, match="MultiDiscrete") as err:
        train({"env": {"id": "test_match_multidiscrete"}, "policy": {"type": "impala"}},
              [f"runs_dir={tmp_path}", "pipeline.max_env_steps=100"])
    assert "\n" not in str(err.value)


# Training means over the last 100 episodes at 4000 env steps, seeds 0-3: PPO on MultiDiscrete 7.89-7.92 of 8 (random
# play 2.9); A2C on MultiBinary 7.86-7.94 (random 4.0); PPO with the CNN on the image env 7.97-8.00 (random 4.0);
# PPO on the Dict observations (flattened by the env factory) 7.98-8.00 (random 2.7).
SPACE_RUNS = {
    "multidiscrete_ppo": ("test_match_multidiscrete", "ppo", 7.8, {"policy.epochs": 4, "policy.minibatch_size": 64}),
    "multibinary_a2c": ("test_match_multibinary", "a2c", 7.8, {}),
    "dict_ppo": ("test_dict_cue", "ppo", 7.9, {"policy.epochs": 4, "policy.minibatch_size": 64}),
    "image_ppo": ("test_bright_side", "ppo", 7.9, {"policy.epochs": 4, "policy.minibatch_size": 64,
                                                   "policy.learning_rate": 1e-3}),
}


@pytest.mark.parametrize("case", sorted(SPACE_RUNS))
def test_learns_with_the_space(tmp_path, case):
    env_id, policy, threshold, extra = SPACE_RUNS[case]
    overrides = [f"runs_dir={tmp_path}", "seed=0", "torch_threads=1", "logger.progress=false"]
    overrides += [f"{key}={value}" for key, value in extra.items()]
    config = {"exp_name": case, "env": {"id": env_id},
              "policy": {"type": policy, "learning_rate": 3e-3, "gamma": 0.0},
              "pipeline": {"num_envs": 8, "rollout_steps": 32 if policy == "ppo" else 8, "max_env_steps": 4000,
                           "eval_every": 0}}
    summary = train(config, overrides)
    assert summary["episode_return_mean"] >= threshold, summary


# -- image observations -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, layout", [
    ((4, 84, 84), (4, 84, 84, False)),
    ((96, 96, 3), (3, 96, 96, True)),
    ((40, 40, 1), (1, 40, 40, True)),
    ((84, 84), (1, 84, 84, False)),
])
def test_image_layouts(shape, layout):
    assert image_layout(shape) == layout
    space = gym.spaces.Box(0, 255, shape, np.uint8)
    assert is_image_space(space)
    cnn = NatureCNN(space, features_dim=32)
    assert cnn(torch.zeros(2, 5, *shape)).shape == (2, 5, 32)


def test_channels_last_images_give_what_channels_first_give():
    first = NatureCNN(gym.spaces.Box(0, 255, (3, 48, 48), np.uint8), features_dim=8)
    last = NatureCNN(gym.spaces.Box(0, 255, (48, 48, 3), np.uint8), features_dim=8)
    last.load_state_dict(first.state_dict())
    image = torch.randint(0, 256, (2, 3, 48, 48)).float()
    torch.testing.assert_close(last(image.permute(0, 2, 3, 1)), first(image))


def test_uint8_images_are_scaled_to_unit_range():
    uint8 = NatureCNN(gym.spaces.Box(0, 255, (1, 36, 36), np.uint8), features_dim=8)
    unit = NatureCNN(gym.spaces.Box(0.0, 1.0, (1, 36, 36), np.float32), features_dim=8)
    unit.load_state_dict(uint8.state_dict())
    image = torch.randint(0, 256, (3, 1, 36, 36))
    torch.testing.assert_close(uint8(image.float()), unit(image.float() / 255.0))
    assert not torch.allclose(uint8(image.float()), unit(image.float()))


def test_auto_encoder_picks_the_cnn_for_images_only():
    image = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert isinstance(build_encoder("auto", image), NatureCNN)
    assert build_encoder("auto", OBS) is None
    assert build_encoder("auto", gym.spaces.Box(0.0, 1.0, (4, 84, 84), np.float32)) is None  # not uint8: flat
    assert build_encoder("mlp", image) is None
    policy = make(PPOPolicy, gym.spaces.Discrete(3), observation_space=image)
    assert isinstance(policy.model.encoder, NatureCNN)
    assert any(name.startswith("encoder.") for name in policy.model.actor_parameters())
    assert policy.collect(torch.zeros(2, 4, 84, 84)).raw_action.shape == (2,)


def test_small_images_and_unknown_encoders_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="at least 36x36") as err:
        make(PPOPolicy, gym.spaces.Discrete(2), observation_space=gym.spaces.Box(0, 255, (10, 10, 3), np.uint8))
    assert "\n" not in str(err.value)
    with pytest.raises(ZooError, match="unknown model 'resnet9'") as err:
        make(PPOPolicy, gym.spaces.Discrete(2), encoder="resnet9")
    with pytest.raises(ConfigError, match="takes no encoder_kwargs"):
        make(PPOPolicy, gym.spaces.Discrete(2), encoder="mlp", encoder_kwargs={"features_dim": 3})


class TinyEncoder(nn.Module):
    def __init__(self, observation_space, width=7):
        super().__init__()
        self.linear = nn.Linear(int(np.prod(observation_space.shape)), width)
        self.output_dim = width

    def forward(self, obs):
        return torch.tanh(self.linear(obs))


def test_an_encoder_registered_by_a_plugin_is_used_by_name():
    MODEL_REGISTRY.register("test_tiny_encoder", TinyEncoder, source="tests")
    try:
        policy = make(PPOPolicy, MULTI, encoder="test_tiny_encoder", encoder_kwargs={"width": 6}, hidden_sizes=[])
        assert isinstance(policy.model.encoder, TinyEncoder) and policy.model.policy_head.in_features == 6
        assert policy.collect(torch.randn(3, 5)).raw_action.shape == (3, 3)
    finally:
        MODEL_REGISTRY.unregister("test_tiny_encoder")


def test_a_loaded_agent_takes_the_envs_own_dict_observations(tmp_path):
    import zoo

    summary = train({"exp_name": "dict_agent", "env": {"id": "test_dict_cue"}, "policy": {"type": "ppo"},
                     "pipeline": {"num_envs": 4, "rollout_steps": 16, "max_env_steps": 128, "eval_every": 0}},
                    [f"runs_dir={tmp_path}", "logger.progress=false"])
    agent = zoo.load(summary["run_dir"])
    env = DictCueEnv()
    obs, _ = env.reset(seed=0)
    flat = gym.spaces.flatten(env.observation_space, obs)
    assert agent.predict(obs) == agent.predict(flat)  # as the env gives it, or flattened by hand
    batch = [env.step(0)[0] for _ in range(3)]
    np.testing.assert_array_equal(agent.predict(batch),
                                  agent.predict(np.stack([gym.spaces.flatten(env.observation_space, o)
                                                          for o in batch])))
