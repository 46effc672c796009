"""Memory (policy.recurrent): the core against torch's own cells, the reset rule, the chunks against the acting loop,
the learning unroll and its gradients against an unbatched reference, evaluation and ``Agent.predict`` with state.

Each test fails under a dropped reset (the memory not zeroed at an episode start, in acting or in learning) or a
shifted state (a chunk's memory taken one step early or late)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import new_policy

from zoo.errors import ConfigError
from zoo.pipelines.collector import VectorCollector
from zoo.policies import A2CPolicy, PPOPolicy
from zoo.policies.onpolicy import normalize_advantage
from zoo.policies.recurrent import RecurrentCore

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -- the core ---------------------------------------------------------------------------------------------------
def _reference(core: RecurrentCore, x: torch.Tensor, memory: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """torch.nn.LSTMCell / GRUCell with the core's weights, one env and one step at a time (a plain loop)."""
    hidden, steps, envs = core.hidden, x.shape[0], x.shape[1]
    cells = []
    for layer in range(core.layers):
        fan_in = x.shape[-1] if layer == 0 else hidden
        cell = (torch.nn.LSTMCell if core.kind == "lstm" else torch.nn.GRUCell)(fan_in, hidden)
        with torch.no_grad():
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(cell, name).copy_(getattr(core.rnn, f"{name}_l{layer}"))
        cells.append(cell)
    out = torch.zeros(steps, envs, hidden)
    for env in range(envs):
        state = memory[env].clone()
        for t in range(steps):
            if starts[t, env]:
                state = torch.zeros_like(state)
            inputs, new = x[t, env][None], []
            for layer, cell in enumerate(cells):
                if core.kind == "lstm":
                    h, c = cell(inputs, (state[layer, :hidden][None], state[layer, hidden:][None]))
                    new.append(torch.cat([h, c], -1)[0])
                else:
                    h = cell(inputs, state[layer][None])
                    new.append(h[0])
                inputs = h
            state = torch.stack(new)
            out[t, env] = inputs[0]
    return out


STARTS = {
    "none": lambda t, b: torch.zeros(t, b, dtype=torch.bool),
    "first": lambda t, b: torch.zeros(t, b, dtype=torch.bool).index_fill_(0, torch.tensor([0]), True),
    "last": lambda t, b: torch.zeros(t, b, dtype=torch.bool).index_fill_(0, torch.tensor([t - 1]), True),
    "every": lambda t, b: torch.ones(t, b, dtype=torch.bool),
    "random": lambda t, b: torch.rand(t, b, generator=torch.Generator().manual_seed(3)) < 0.3,
}


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("steps,envs,layers", [(7, 3, 1), (1, 1, 1), (5, 1, 2), (1, 4, 2)])
@pytest.mark.parametrize("starts", list(STARTS))
def test_the_core_equals_torchs_cells_step_by_step_with_resets_anywhere(kind, steps, envs, layers, starts):
    torch.manual_seed(0)
    core = RecurrentCore(kind, 5, 6, layers, ortho_init=False)
    x = torch.randn(steps, envs, 5)
    memory = torch.randn(envs, layers, core.state_size)  # not zeros: a reset must show
    flags = STARTS[starts](steps, envs)
    reference = _reference(core, x, memory, flags)
    out, last = core(x, memory, flags)  # step by step where episodes start inside: the final memory is wanted
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-6)
    segments, none = core(x, memory, flags, final=False)  # learning: segments in one padded batch
    torch.testing.assert_close(segments, reference, rtol=1e-5, atol=1e-6)
    assert none is None or torch.equal(none, last)
    flags_on = torch.cat([flags, torch.zeros(1, envs, dtype=torch.bool)])  # the final memory carries on
    more = _reference(core, torch.cat([x, x[-1:]]), memory, flags_on)
    torch.testing.assert_close(core(x[-1:], last)[0][0], more[-1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_the_cores_gradients_equal_the_unbatched_references(kind):
    torch.manual_seed(1)
    core = RecurrentCore(kind, 4, 5, 2)
    x = torch.randn(6, 3, 4)
    memory = torch.randn(3, 2, core.state_size)
    flags = STARTS["random"](6, 3)
    weights = torch.randn(6, 3, 5)
    (core(x, memory, flags, final=False)[0] * weights).sum().backward()
    batched = {name: p.grad.clone() for name, p in core.named_parameters()}
    twin = RecurrentCore(kind, 4, 5, 2)
    twin.load_state_dict(core.state_dict())
    per_env = {name: torch.zeros_like(p) for name, p in twin.named_parameters()}
    for env in range(3):  # one env at a time: its own unroll, its own gradient, summed
        twin.zero_grad()
        out, _ = twin(x[:, env:env + 1], memory[env:env + 1], flags[:, env:env + 1])
        (out * weights[:, env:env + 1]).sum().backward()
        for name, p in twin.named_parameters():
            per_env[name] += p.grad
    for name in batched:
        torch.testing.assert_close(batched[name], per_env[name], rtol=1e-5, atol=1e-6)


# -- acting, chunks and learning -----------------------------------------------------------------------------------
def _policy(cls=PPOPolicy, kind="lstm", **config):
    env = gym.make("CartPole-v1")
    base = {"recurrent": kind, "recurrent_size": 8, "hidden_sizes": [8], "sequence_length": 4, "minibatch_size": 8}
    return new_policy(cls, env.observation_space, env.action_space, **{**base, **config})


def _collector(envs=3, episode=5):
    return VectorCollector("CartPole-v1", envs, seed=1, vector_mode="sync", max_episode_steps=episode)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_each_observation_is_read_with_the_memory_the_episode_built_and_zeros_at_its_start(kind):
    """The acting loop against a plain loop over each env's episodes: episode_start marks the observation after an
    autoreset step (episodes of 5 steps, rollouts of 4: starts at the first, last and middle rows, carried across)."""
    policy, collector = _policy(kind=kind), _collector()
    memories, starts, valid, obs = [], [], [], []
    for _ in range(4):
        rollout = collector.rollout(policy, 4)
        memories.append(rollout.memory[:-1])
        starts.append(rollout.episode_start[:-1])
        valid.append(rollout.valid)
        obs.append(rollout.obs)
        assert torch.equal(rollout.episode_start[1:], ~rollout.valid)  # episode_start[t] = not valid[t - 1]
    memories, starts, valid, obs = (torch.cat(x) for x in (memories, starts, valid, obs))
    assert torch.equal(starts[1:], ~valid[:-1]) and bool(starts[0].all())
    assert starts[1:].any(0).all()  # every env started a new episode after its first
    for env in range(3):  # the memory before each observation, by hand: zeros at a start, else one step on
        memory = policy.initial_memory(1)
        for t in range(len(obs)):
            if starts[t, env]:
                memory = torch.zeros_like(memory)
            torch.testing.assert_close(memories[t, env], memory[0], rtol=1e-5, atol=1e-6)
            with torch.no_grad():
                _, _, memory = policy.model(obs[t, env][None, None], memory)


def test_the_memory_at_every_chunk_start_is_the_acting_loops_and_chunks_are_env_contiguous():
    policy, collector = _policy(sequence_length=2), _collector()
    collector.rollout(policy, 4)  # memories carried in from a rollout before
    rollout = policy.process_rollout(collector.rollout(policy, 4))
    chunks = rollout.sequences(2)
    assert chunks["obs"].shape == (6, 2, 4) and chunks["memory"].shape == (6, 2, 16)
    for j in range(2):
        for env in range(3):
            row = j * 3 + env
            assert torch.equal(chunks["memory"][row], rollout.memory[2 * j, env])
            assert torch.equal(chunks["obs"][row], rollout.obs[2 * j:2 * j + 2, env])
            assert torch.equal(chunks["episode_start"][row], rollout.episode_start[2 * j:2 * j + 2, env])
            assert torch.equal(chunks["advantage"][row], rollout.extras["advantage"][2 * j:2 * j + 2, env])
    with pytest.raises(ValueError, match="do not divide a rollout of 4 steps"):
        rollout.sequences(3)


@pytest.mark.parametrize("length", [1, 2, 4])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_learning_unrolls_reproduce_the_acting_outputs_and_values_at_every_valid_step(kind, length):
    """The chunks unrolled from their stored memory give the behaviour outputs and values the acting loop recorded,
    at the valid steps, in the order of the per-step columns (a shifted memory or a dropped reset breaks it)."""
    policy, collector = _policy(kind=kind, sequence_length=length), _collector()
    collector.rollout(policy, 4)
    rollout = policy.process_rollout(collector.rollout(policy, 4))
    assert not bool(rollout.valid.all())
    columns = policy.learning_columns(rollout)
    batch = policy.gather(columns, None, None, {})
    with torch.no_grad():
        output, value = policy.forward_batch(batch)
    assert output.shape[0] == int(rollout.valid.sum())
    torch.testing.assert_close(output, batch["policy_output"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(value, batch["value"], rtol=1e-5, atol=1e-6)
    samples = rollout.valid_samples()  # the same steps, in another order; advantages normalised over them alone
    expected = normalize_advantage(samples.advantage)
    assert sorted(batch["advantage"].tolist()) == pytest.approx(sorted(expected.tolist()), rel=1e-5, abs=1e-6)


def test_a_truncated_step_bootstraps_from_its_final_observation_read_with_the_episodes_memory():
    policy, collector = _policy(sequence_length=2), _collector(envs=2, episode=3)
    rollout = policy.process_rollout(collector.rollout(policy, 6))
    truncated = rollout.truncated.nonzero().tolist()
    assert truncated
    for t, env in truncated:  # the final observation is obs[t + 1], with the memory after step t (no reset)
        assert not bool(rollout.episode_start[t + 1, env])
        with torch.no_grad():
            _, value, _ = policy.model(rollout.obs[t + 1, env][None, None] if t + 1 < 6 else
                                       rollout.last_obs[env][None, None], rollout.memory[t + 1, env][None])
        torch.testing.assert_close(rollout.extras["next_value"][t, env], value[0, 0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", [PPOPolicy, A2CPolicy])
@pytest.mark.parametrize("shared", [False, True])
def test_a_recurrent_update_runs_on_the_chunks_and_learns_every_part(cls, shared):
    policy, collector = _policy(cls, recurrent_shared=shared), _collector()
    rollout = policy.process_rollout(collector.rollout(policy, 8))
    before = {name: p.detach().clone() for name, p in policy.model.named_parameters()}
    metrics = policy.learn(rollout, _context())
    assert all(np.isfinite(v) for v in metrics.values())
    changed = {name for name, p in policy.model.named_parameters() if not torch.equal(p, before[name])}
    cores = {"actor_core"} if shared else {"actor_core", "critic_core"}
    assert {name.split(".")[0] for name in changed} >= cores | {"heads"}


def _context():
    from zoo.policies import LearnContext

    return LearnContext(progress=0.0)


def test_minibatches_take_whole_chunks():
    policy = _policy(sequence_length=4, minibatch_size=8, epochs=1)
    assert policy.minibatch_units() == 2
    assert [len(index) for index in policy.minibatches(6, _context())] == [2, 2, 2]
    assert _policy(sequence_length=4, minibatch_size=3).minibatch_units() == 1


def test_bad_sequence_lengths_and_unsupported_combinations_are_refused_in_one_line():
    policy = _policy(sequence_length=3)
    with pytest.raises(ConfigError, match="sequence_length=3 does not divide pipeline.rollout_steps=4"):
        policy.memory_actor(4, 2, None)
    with pytest.raises(ConfigError, match="use_sde does not combine with policy.recurrent"):
        env = gym.make("Pendulum-v1")
        new_policy(PPOPolicy, env.observation_space, env.action_space, recurrent="gru", use_sde=True)

    class NoMemory(PPOPolicy):
        takes_memory = False

    with pytest.raises(ConfigError, match="NoMemory does not take policy.recurrent yet"):
        _policy(NoMemory)
    with pytest.raises(ConfigError, match="acts through memory_actor and act_with_memory"):
        _policy().collect(torch.zeros(2, 4))
    assert type(_policy().export_module()).__name__ == "MemoryActingGraph"


def test_continuous_and_image_observations_act_and_learn():
    env = gym.make("Pendulum-v1")
    policy = new_policy(PPOPolicy, env.observation_space, env.action_space, recurrent="gru", recurrent_size=8,
                        hidden_sizes=[8], sequence_length=4, minibatch_size=8)
    collector = VectorCollector("Pendulum-v1", 2, seed=0, vector_mode="sync", max_episode_steps=6)
    rollout = policy.process_rollout(collector.rollout(policy, 8))
    assert np.isfinite(policy.learn(rollout, _context())["policy_loss"])
    images = gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)
    cnn = new_policy(PPOPolicy, images, gym.spaces.Discrete(3), recurrent="lstm", recurrent_size=8,
                     hidden_sizes=[], encoder="nature_cnn", encoder_kwargs={"features_dim": 16})
    action, memory = cnn.act_with_memory(torch.rand(2, 36, 36, 3) * 255, None)
    assert action.shape == (2,) and memory.shape == (2, 2, 16)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("kind,shared,layers", [("lstm", False, 1), ("gru", True, 2), ("lstm", True, 2),
                                                ("gru", False, 1)])
@pytest.mark.parametrize("loops", [True, False])
def test_numpy_acting_takes_the_torch_actors_actions_memories_and_values(env_id, kind, shared, layers, loops):
    """zoo.accel.numpy_memory against the torch MemoryActor: the same draws, the same actions, outputs, values and
    memories up to float rounding, over rollouts with episode starts; its cores stepped by the compiled loops
    (``loops``, where built) and by numpy."""
    from zoo.accel import recurrent_scan, settings

    if loops and not recurrent_scan.available():
        pytest.skip("zoo.accel._crecurrent is not built")
    settings.configure({"recurrent_kernel": loops})
    rollouts = {}
    for numpy_acting in (True, False):
        env = gym.make(env_id)
        torch.manual_seed(0)
        policy = new_policy(PPOPolicy, env.observation_space, env.action_space, recurrent=kind, recurrent_size=8,
                            recurrent_layers=layers, recurrent_shared=shared, hidden_sizes=[8], sequence_length=4,
                            minibatch_size=8, numpy_acting=numpy_acting)
        collector = VectorCollector(env_id, 3, seed=1, vector_mode="sync", max_episode_steps=5)
        torch.manual_seed(7)
        rollouts[numpy_acting] = [collector.rollout(policy, 4) for _ in range(3)]
        actor = policy.memory_actor(4, 3, None)
        assert type(actor).__name__ == ("NumpyMemoryActor" if numpy_acting else "MemoryActor")
        if numpy_acting:
            assert all((core._loops is not None) == loops for core in actor._cores)
    for fast, slow in zip(rollouts[True], rollouts[False]):
        assert torch.equal(fast.episode_start, slow.episode_start)
        if env_id == "CartPole-v1":
            assert torch.equal(fast.action, slow.action)
        torch.testing.assert_close(fast.action.float(), slow.action.float(), rtol=1e-5, atol=1e-5)
        for name in ("policy_output", "value"):
            torch.testing.assert_close(fast.extras[name], slow.extras[name], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fast.memory, slow.memory, rtol=1e-5, atol=1e-5)


def test_the_partially_observed_tasks_drop_the_velocities_and_stack_frames_picklably():
    import pickle

    from zoo.envs import EnvSpec

    full = gym.make("CartPole-v1")
    novel = EnvSpec("CartPoleNoVel-v1", {}, None).make()
    stacked = EnvSpec("CartPoleNoVel-v1", {"frames": 3}, None).make()
    seen, _ = full.reset(seed=4)
    obs, _ = novel.reset(seed=4)
    first, _ = stacked.reset(seed=4)
    assert np.array_equal(obs, seen[[0, 2]]) and np.array_equal(first, np.tile(seen[[0, 2]], 3))
    frames = [seen[[0, 2]]] * 3
    for _ in range(4):
        seen, *_ = full.step(1)
        out, *_ = stacked.step(1)
        frames = [*frames[1:], seen[[0, 2]]]
        assert np.array_equal(out, np.concatenate(frames))  # oldest first
    twin = pickle.loads(pickle.dumps(stacked))
    assert np.array_equal(twin.step(0)[0], stacked.step(0)[0])
    pendulum = EnvSpec("PendulumNoVel-v1", {}, None).make()
    assert pendulum.observation_space.shape == (2,)
    with pytest.raises(Exception, match="frames must be a whole number"):
        EnvSpec("CartPoleNoVel-v1", {"frames": 0}, None).make()


@pytest.mark.parametrize("env_id,kind", [("CartPole-v1", "lstm"), ("Pendulum-v1", "gru")])
def test_impala_learner_re_runs_each_unroll_from_its_actors_memory_through_the_slots(env_id, kind):
    """An actor's unrolls carry the memory at their start and the episode starts; through the shared-memory slots
    (two unrolls side by side) the learner's re-run gives the behaviour outputs the actor recorded (the same
    weights), the Gaussian mean bounded as the actor bounded it."""
    from zoo.pipelines.actor_learner.transport import UnrollSlots
    from zoo.policies import ImpalaPolicy

    env = gym.make(env_id)
    policy = new_policy(ImpalaPolicy, env.observation_space, env.action_space, recurrent=kind, recurrent_size=8,
                        hidden_sizes=[8])
    assert "sequence_length" not in policy.cfg
    collector = VectorCollector(env_id, 2, seed=3, vector_mode="sync", max_episode_steps=5)
    collector.rollout(policy, 4)  # the next unrolls start with memory carried in (mid-episode)
    unrolls = [collector.rollout(policy, 6).to_unroll(version) for version in (1, 2)]
    assert all(u.memory is not None and u.episode_start.shape == (7, 2) for u in unrolls)
    assert bool(unrolls[0].memory.abs().sum() > 0) and not bool(unrolls[0].valid.all())
    slots = UnrollSlots(3, UnrollSlots.specs(unrolls[0]))
    slots.write(2, unrolls[0])
    slots.write(0, unrolls[1])
    batch = slots.read([2, 0])
    assert torch.equal(batch.memory, torch.cat([u.memory for u in unrolls]))
    assert torch.equal(batch.episode_start, torch.cat([u.episode_start for u in unrolls], 1))
    columns = policy.learning_columns(batch)
    with torch.no_grad():
        output, _, _ = policy.model(columns["obs"], columns["memory"], columns["episode_start"], final=False)
    output = policy.acting_output(output)
    packed = output if policy.discrete else torch.cat([output["mu"], output["sigma"]], -1)
    torch.testing.assert_close(packed[:6], columns["policy_output"], rtol=1e-5, atol=1e-5)
    metrics = policy.learn(batch, _context())
    assert np.isfinite(metrics["policy_loss"])
