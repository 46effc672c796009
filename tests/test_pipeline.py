"""The collector, the batch types and the replay buffer: NEXT_STEP autoreset handled exactly.

A truncated step bootstraps from its final observation; autoreset steps are marked invalid in rollouts and never
stored as replay transitions; terminated and truncated stay apart.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from zoo.config.resolve import resolve_config
from zoo.data import ReplayBuffer, Rollout, Transitions
from zoo.errors import NonFiniteError
from zoo.pipelines import SerialOnPolicyPipeline, VectorCollector
from zoo.policies import CollectOutput, Policy


def test_truncated_step_bootstraps_from_final_observation():
    # CartPole cannot fail within 5 steps (the pole needs ~8 to fall), so every episode is truncated at step 5.
    cfg = resolve_config({
        "env": {"id": "CartPole-v1", "max_episode_steps": 5},
        "policy": {"type": "ppo", "gamma": 0.9, "gae_lambda": 0.8},
        "pipeline": {"num_envs": 3, "rollout_steps": 13, "vector_mode": "sync"},
    })
    pipeline = SerialOnPolicyPipeline.create(cfg)
    try:
        rollout = pipeline.collector.rollout(pipeline.policy, 13)
        batch = pipeline.policy.process_rollout(rollout)
    finally:
        pipeline.close()
    assert batch.truncated[4].all() and not batch.terminated.any()
    assert not batch.valid[5].any() and batch.valid[6:11].all() and batch.truncated[10].all()
    value, advantage = batch.extras["value"], batch.extras["advantage"]
    # The observation after step 4 is the final one (NEXT_STEP autoreset), stored as obs[5].
    final_value = pipeline.policy.value(batch.obs[5])
    torch.testing.assert_close(batch.extras["next_value"][4], final_value)
    expected = batch.reward[4] + 0.9 * final_value - value[4]  # bootstrapped; the trace ends here
    torch.testing.assert_close(advantage[4], expected)
    # Inside the episode, GAE chains: adv[3] = delta[3] + gamma * lambda * adv[4].
    delta3 = batch.reward[3] + 0.9 * value[4] - value[3]
    torch.testing.assert_close(advantage[3], delta3 + 0.9 * 0.8 * advantage[4])
    torch.testing.assert_close(batch.extras["returns"], advantage + value)
    # The last step bootstraps from V(last_obs).
    torch.testing.assert_close(batch.extras["next_value"][12], pipeline.policy.value(batch.last_obs))


class _FixedPolicy(Policy):
    """Always action 1 (raw action 7), with a per-step extra: enough to check what the collector stores."""

    def collect(self, obs: torch.Tensor) -> CollectOutput:
        count = obs.shape[0]
        return CollectOutput(np.ones(count, dtype=np.int64), torch.full((count,), 7), {"marker": obs[:, 0] * 2})


def test_rollout_stacks_actions_and_extras_and_marks_autoreset_steps_invalid():
    collector = VectorCollector("CartPole-v1", 2, seed=0, vector_mode="sync", max_episode_steps=3)
    policy = _FixedPolicy(None, collector.observation_space, collector.action_space, torch.device("cpu"))
    first = collector.rollout(policy, 3)
    second = collector.rollout(policy, 4)
    assert first.action.tolist() == [[7, 7]] * 3
    torch.testing.assert_close(first.extras["marker"], first.obs[..., 0] * 2)
    # Episodes of 3 steps: the autoreset step after the truncation at the end of the first rollout is the
    # second rollout's first step: the pending reset crosses rollouts.
    assert first.valid.all() and first.truncated[2].all() and not first.terminated.any()
    assert second.valid.tolist() == [[False, False]] + [[True, True]] * 3
    torch.testing.assert_close(second.obs[0], first.last_obs)  # the final observation
    assert collector.pop_finished() == [(3.0, 3)] * 4
    collector.close()


def test_transitions_skip_autoreset_steps_and_keep_final_observations():
    collector = VectorCollector("CartPole-v1", 2, seed=0, vector_mode="sync", max_episode_steps=3)
    raw = collector.venv  # step the same env by hand to know the truth
    transitions = collector.transitions(None, 8)
    # 8 steps x 2 envs, episodes of 3 steps: steps 3 and 7 are autoreset steps, 2 x 6 = 12 transitions kept.
    assert len(transitions) == 12
    assert transitions.truncated.reshape(-1, 2)[[2, 5]].all() and not transitions.terminated.any()
    # Within an episode, next_obs of one transition is obs of the next one; at an end it is the final obs,
    # which is not the next episode's first observation.
    per_env = [transitions.obs.reshape(6, 2, 4)[:, i] for i in range(2)]
    next_per_env = [transitions.next_obs.reshape(6, 2, 4)[:, i] for i in range(2)]
    for obs, next_obs in zip(per_env, next_per_env):
        np.testing.assert_array_equal(next_obs[[0, 1, 3, 4]], obs[[1, 2, 4, 5]])
        assert not np.array_equal(next_obs[2], obs[3])
    assert raw is collector.venv
    collector.close()


def test_rollout_valid_samples_drop_invalid_steps_and_move_devices():
    valid = torch.tensor([[True, False], [True, True]])
    rollout = Rollout(
        obs=torch.arange(4.0).reshape(2, 2, 1), action=torch.tensor([[0, 1], [2, 3]]), reward=torch.ones(2, 2),
        terminated=torch.zeros(2, 2, dtype=torch.bool), truncated=torch.zeros(2, 2, dtype=torch.bool),
        valid=valid, last_obs=torch.zeros(2, 1), extras={"value": torch.tensor([[10.0, 11.0], [12.0, 13.0]])},
    )
    samples = rollout.valid_samples()
    assert samples.action.tolist() == [0, 2, 3] and samples.value.tolist() == [10.0, 12.0, 13.0]
    assert samples.obs.shape == (3, 1)
    added = rollout.with_extras(advantage=torch.zeros(2, 2))
    assert "advantage" in added.extras and "advantage" not in rollout.extras
    unroll = rollout.to_unroll(policy_version=5)
    assert unroll.obs.shape == (3, 2, 1) and unroll.steps == 2 and unroll.policy_version == 5
    assert rollout.to("cpu") is rollout


def _transitions(start: int, count: int, terminated_every: int = 3) -> Transitions:
    index = np.arange(start, start + count)
    return Transitions(
        obs=index[:, None].repeat(2, 1).astype(np.float32), action=index[:, None].astype(np.float32),
        reward=index.astype(np.float32), next_obs=(index[:, None] + 0.5).repeat(2, 1).astype(np.float32),
        terminated=index % terminated_every == 0, truncated=index % terminated_every == 1,
    )


def test_replay_buffer_ring_order_sampling_and_state_round_trip():
    buffer = ReplayBuffer(5, (2,), (1,))
    assert buffer.nbytes == ReplayBuffer.estimate_nbytes(5, (2,), (1,))
    buffer.add(_transitions(0, 3))
    buffer.add(_transitions(3, 4))  # wraps: 7 added, the newest 5 (2..6) remain
    assert len(buffer) == 5
    assert buffer.recent(5).reward.tolist() == [2, 3, 4, 5, 6]
    assert buffer.recent(2).reward.tolist() == [5, 6]
    recent = buffer.recent(5)
    np.testing.assert_array_equal(recent.terminated, recent.reward % 3 == 0)
    np.testing.assert_array_equal(recent.truncated, recent.reward % 3 == 1)
    np.testing.assert_array_equal(recent.next_obs[:, 0], recent.reward + 0.5)
    sample = buffer.sample(10_000, np.random.default_rng(0))
    counts = np.bincount(sample.reward.astype(int) - 2, minlength=5)
    assert counts.min() > 1800 and counts.max() < 2200  # uniform over the five held rows
    restored = ReplayBuffer(5, (2,), (1,))
    restored.load_state_dict(buffer.state_dict())
    assert restored.recent(5).reward.tolist() == [2, 3, 4, 5, 6]
    restored.add(_transitions(7, 1))
    assert restored.recent(5).reward.tolist() == [3, 4, 5, 6, 7]
    with pytest.raises(ValueError, match="shape"):
        ReplayBuffer(5, (3,), (1,)).load_state_dict(buffer.state_dict())


class _ReplayingPipeline(SerialOnPolicyPipeline):
    """The on-policy pipeline plus a replay buffer filled with random-action transitions: a separate component."""

    def build(self) -> None:
        super().build()
        self.replay = ReplayBuffer(100, self.collector.observation_space.shape, ())

    def separate_components(self) -> dict:
        return {"replay": self.replay}

    def iterate(self) -> dict[str, float]:
        self.replay.add(self.collector.transitions(None, 4))
        return super().iterate()


def test_a_separately_saved_replay_buffer_resumes_exactly_from_its_own_file(tmp_path):
    from zoo.policies import A2CPolicy
    from zoo.registry import PIPELINE_REGISTRY, POLICY_REGISTRY
    from zoo.run import train

    class ReplayingA2C(A2CPolicy):
        pipelines = ("test_replaying",)

    PIPELINE_REGISTRY.register("test_replaying", _ReplayingPipeline)
    POLICY_REGISTRY.register("test_replaying_a2c", ReplayingA2C)
    try:
        config = {"runs_dir": str(tmp_path), "env": {"id": "CartPole-v1"},
                  "policy": {"type": "test_replaying_a2c", "anneal_lr": False},
                  "pipeline": {"num_envs": 2, "rollout_steps": 8, "eval_every": 0, "checkpoint_every": 3}}
        whole = train(config, ["exp_name=whole", "pipeline.max_env_steps=320"])
        half = train(config, ["exp_name=half", "pipeline.max_env_steps=160"])
        run = tmp_path / "half"
        assert sorted(p.name for p in run.glob("replay-*.pt")) == ["replay-000000010.pt"]  # the latest only
        train(None, ["pipeline.max_env_steps=320"], resume=run)
        from zoo.run.run_dir import RunDirectory

        a = RunDirectory(whole["run_dir"]).load_checkpoint()["separate"]["replay"]
        b = RunDirectory(half["run_dir"]).load_checkpoint()["separate"]["replay"]
        assert len(a["reward"]) == 100 and all(np.array_equal(a[key], b[key]) for key in a)
        assert sorted(p.name for p in run.glob("replay-*.pt")) == ["replay-000000020.pt"]
        assert "replay" not in RunDirectory(run).load_checkpoint(separate=False)["separate"]
    finally:
        PIPELINE_REGISTRY.unregister("test_replaying")
        POLICY_REGISTRY.unregister("test_replaying_a2c")


# -- the rollout actors (Policy.rollout_actor) ---------------------------------------------------------------------
def _collect_twice(policy_type: str, env_id: str):
    """The same rollouts (env seed, torch seed) through the numpy rollout actor and, with the public switch off,
    through ``collect`` at every step."""
    from zoo.accel.numpy_acting import NumpyRolloutActor
    from zoo.policies.base import CollectActor
    from zoo.registry import POLICY_REGISTRY

    results, policies = [], []
    for fast in (True, False):
        cfg = resolve_config({"env": {"id": env_id}, "policy": {"type": policy_type, "hidden_sizes": [8, 8],
                                                                "numpy_acting": fast}}).policy
        collector = VectorCollector(env_id, 3, seed=4, vector_mode="sync", max_episode_steps=7)  # autoresets
        torch.manual_seed(0)
        policy = POLICY_REGISTRY.get(policy_type)(cfg, collector.observation_space, collector.action_space,
                                                  torch.device("cpu"))
        with torch.no_grad():  # outputs far apart, so that the noise's transform decides actions too; biases set
            policy.model.policy_head.weight.mul_(300.0)
            for name, parameter in policy.model.named_parameters():
                if name.endswith("bias"):
                    parameter.uniform_(-0.5, 0.5)
        assert isinstance(policy.rollout_actor(5, 3), NumpyRolloutActor if fast else CollectActor)
        torch.manual_seed(1)
        results.append([collector.rollout(policy, 5) for _ in range(3)])
        policies.append(policy)
        collector.close()
    return results, policies


@pytest.mark.parametrize("policy_type, env_id", [("ppo", "CartPole-v1"), ("ppo", "Pendulum-v1"),
                                                 ("a2c", "Acrobot-v1"), ("impala", "CartPole-v1")])
def test_the_rollout_actor_gives_the_rollouts_that_collect_gives_step_by_step(policy_type, env_id):
    (fast, slow), policies = _collect_twice(policy_type, env_id)
    for a, b in zip(fast, slow):  # up to the float rounding of the folded biases
        for field in ("terminated", "truncated", "valid"):
            assert torch.equal(getattr(a, field), getattr(b, field)), field
        for field in ("obs", "reward", "last_obs"):
            torch.testing.assert_close(getattr(a, field), getattr(b, field), rtol=1e-5, atol=1e-5)
        assert b.extras.keys() == {"policy_output"}
        # PPO's loss reads behaviour log-probs (discrete: handed over by the actor); A2C's and IMPALA's do not.
        assert a.extras.keys() == ({"policy_output", "log_prob"} if (policy_type, env_id) == ("ppo", "CartPole-v1")
                                   else {"policy_output"})
        torch.testing.assert_close(a.extras["policy_output"], b.extras["policy_output"], rtol=1e-5, atol=1e-4)
        if "log_prob" in a.extras:
            expected = policies[0].log_prob(a.extras["policy_output"], a.action)
            torch.testing.assert_close(a.extras["log_prob"], expected, rtol=1e-6, atol=1e-6)
            assert a.extras["log_prob"].dtype == torch.float32
        assert a.action.dtype == b.action.dtype and a.extras["policy_output"].dtype == torch.float32
        if env_id == "Pendulum-v1":
            torch.testing.assert_close(a.action, b.action, rtol=1e-5, atol=1e-4)
        else:  # the same noise: the same actions
            assert torch.equal(a.action, b.action)
    assert not fast[1].valid.all()  # autoresets inside the rollouts were crossed


@pytest.mark.parametrize("activation", ["tanh", "relu", "elu"])
def test_the_folded_numpy_forward_equals_the_torch_forward(activation):
    from zoo.accel.numpy_acting import NumpyActing
    from zoo.policies.networks import ActorCritic

    obs_space = gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32)  # flattened on the way in
    model = ActorCritic(obs_space, gym.spaces.Discrete(4), [5, 7], activation)
    with torch.no_grad():  # biases start at 0: give them values
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.uniform_(-1.0, 1.0)
    numpy_path = NumpyActing(model)
    obs = torch.randn(6, 2, 3)
    out = np.empty((6, 4), dtype=np.float32)
    returned = numpy_path.forward(False, 6)(obs.numpy(), out)
    assert returned is out
    torch.testing.assert_close(torch.from_numpy(out), model.policy_output(obs).detach(), rtol=1e-5, atol=1e-6)
    values = numpy_path.forward(True, 6)(obs.numpy())
    torch.testing.assert_close(torch.from_numpy(values[:, 0]), model.value(obs).detach(), rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # new weights (as after an update): a later call copies them into its reused buffers
        for parameter in model.parameters():
            parameter.add_(0.1)
    torch.testing.assert_close(torch.from_numpy(numpy_path.forward(False, 6)(obs.numpy())),
                               model.policy_output(obs).detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.from_numpy(numpy_path.forward(True, 6)(obs.numpy())[:, 0]),
                               model.value(obs).detach(), rtol=1e-5, atol=1e-6)


def test_a_subclass_with_its_own_collect_keeps_the_per_step_path():
    from zoo.policies import PPOPolicy
    from zoo.policies.base import CollectActor

    class Marked(PPOPolicy):
        def collect(self, obs: torch.Tensor) -> CollectOutput:
            out = super().collect(obs)
            return CollectOutput(out.action, out.raw_action, {**out.extras, "marker": obs[:, 0] * 2})

    collector = VectorCollector("CartPole-v1", 2, seed=0)
    cfg = resolve_config({"env": {"id": "CartPole-v1"}, "policy": {"type": "ppo"}}).policy
    policy = Marked(cfg, collector.observation_space, collector.action_space, torch.device("cpu"))
    assert isinstance(policy.rollout_actor(4, 2), CollectActor)
    rollout = collector.rollout(policy, 4)
    torch.testing.assert_close(rollout.extras["marker"], rollout.obs[..., 0] * 2)
    collector.close()


@pytest.mark.parametrize("normalised", [False, True], ids=["plain", "normalisers"])
def test_the_collectors_rollouts_and_episodes_are_those_of_the_env_stepped_by_hand(normalised):
    """With or without normalisers, one collection loop through the wrappers: the rollouts' actions replayed on a
    bare env give the same steps, and the episodes are those gymnasium's RecordEpisodeStatistics reports."""
    from zoo.envs import make_vector_env
    from zoo.policies import PPOPolicy

    cfg = resolve_config({"env": {"id": "CartPole-v1"}, "policy": {"type": "ppo"}}).policy
    collector = VectorCollector("CartPole-v1", 3, seed=2, max_episode_steps=9, normalize_obs=normalised,
                                normalize_reward=normalised)
    torch.manual_seed(0)
    policy = PPOPolicy(cfg, collector.observation_space, collector.action_space, torch.device("cpu"))
    rollouts = [collector.rollout(policy, 7) for _ in range(4)]
    episodes = collector.pop_finished()
    bare = gym.wrappers.vector.RecordEpisodeStatistics(make_vector_env("CartPole-v1", 3, seed=2, max_episode_steps=9))
    obs, _ = bare.reset(seed=2)
    expected = []
    for rollout in rollouts:
        for t in range(7):
            if not normalised:
                np.testing.assert_array_equal(rollout.obs[t].numpy(), obs)
            obs, reward, terminated, truncated, info = bare.step(rollout.action[t].numpy())
            np.testing.assert_array_equal(rollout.terminated[t].numpy(), terminated)
            np.testing.assert_array_equal(rollout.truncated[t].numpy(), truncated)
            if not normalised:
                np.testing.assert_array_equal(rollout.reward[t].numpy(), reward)
            if "episode" in info:
                ended = info["_episode"]
                expected += list(zip(info["episode"]["r"][ended].tolist(), info["episode"]["l"][ended].tolist()))
    assert episodes == expected and len(episodes) >= 6
    bare.close()
    collector.close()


class _NanAt(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, index: int = 0):
        self.index, self.steps = index, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.steps += 1
        bad = self.index == 1 and self.steps == 3
        obs = np.array([np.nan if bad and self.kind == "obs" else 0.0, 0.0], np.float32)
        return obs, float("nan") if bad and self.kind == "reward" else 1.0, False, False, {}


@pytest.mark.parametrize("normalised", [False, True], ids=["plain", "normalisers"])
@pytest.mark.parametrize("kind", ["reward", "obs"])
def test_a_non_finite_value_stops_the_rollout_at_its_step_naming_the_env_and_sub_env(kind, normalised):
    from zoo.envs import wrap_vector_env
    from zoo.policies import PPOPolicy

    def make(i):
        env = _NanAt(i)
        env.kind = kind
        return env

    seen = []

    class Watched(PPOPolicy):  # records the observations its actor is given
        def rollout_actor(self, steps, num_envs):
            actor = super().rollout_actor(steps, num_envs)

            class Watch:
                def act(self, t, obs):
                    seen.append(obs.copy())
                    return actor.act(t, obs)

                def finish(self):
                    return actor.finish()

            return Watch()

    collector = VectorCollector("CartPole-v1", 3, seed=0)
    venv = gym.vector.SyncVectorEnv([lambda i=i: make(i) for i in range(3)],
                                    autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    wrapped, _ = wrap_vector_env(venv, normalised, normalised, check_finite="nan_at", episode_info=False)
    collector._attach(wrapped)
    cfg = resolve_config({"env": {"id": "CartPole-v1"}, "policy": {"type": "ppo"}}).policy
    policy = Watched(cfg, venv.single_observation_space, venv.single_action_space, torch.device("cpu"))
    what = "reward" if kind == "reward" else "observation"
    with pytest.raises(NonFiniteError, match=rf"env 'nan_at' returned a non-finite {what} \(sub-envs \[1\]\)"):
        collector.rollout(policy, 5)
    # The third env step returned it: the policy acted on the three finite observations before, never on it.
    assert len(seen) == 3 and np.isfinite(np.stack(seen)).all()
    if normalised:  # nor did the normalisers' statistics see it
        assert np.isfinite(collector.obs_normalizer.obs_rms.mean).all()
        assert np.isfinite(collector.reward_normalizer.normalizer.state_dict()["returns"]).all()
    assert collector.pop_finished() == []
    collector.close()
