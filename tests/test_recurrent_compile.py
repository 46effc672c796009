"""A recurrent update compiled (policy.compile): zoo's loops as custom ops (zoo.accel.recurrent_ops) equal the eager
autograd nodes, outputs and every gradient, and pass torch's own op check; where a recurrent update compiles and
where it is refused; compiled PPO, A2C and IMPALA updates with memory agree with eager ones over many updates on
rollouts with episode starts and autoreset steps inside the chunks, with no recompile, and resume exactly."""

from __future__ import annotations

import copy
import re

import gymnasium as gym
import pytest
import torch
from helpers import new_policy
from torch._dynamo.utils import counters

from zoo.accel import compiled as compiled_module
from zoo.accel import recurrent_ops, recurrent_scan, settings
from zoo.accel.compiled import compiler_status
from zoo.errors import ConfigError
from zoo.pipelines.collector import VectorCollector
from zoo.policies import A2CPolicy, ImpalaPolicy, LearnContext, PPOPolicy
from zoo.policies.onpolicy import normalize_advantage
from zoo.policies.recurrent import RecurrentCore

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              pytest.mark.skipif(not recurrent_scan.available(), reason="zoo.accel._crecurrent was not built")]


# -- the custom ops -------------------------------------------------------------------------------------------------
def _layer_inputs(kind: str, cores: int, final: bool, steps: int = 6, batch: int = 3, width: int = 4,
                  hidden: int = 5) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """A layer's inputs with resets at the first step of one sequence and inside another; every tensor wants a
    gradient, biases off zero."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(steps, batch, width, generator=g, requires_grad=True)
    keep = torch.ones(steps, batch)
    keep[0, 1], keep[3, 2] = 0.0, 0.0
    gates = (4 if kind == "lstm" else 3) * hidden
    tensors = []
    for _ in range(cores):
        states = [torch.randn(batch, hidden, generator=g) for _ in range(2 if kind == "lstm" else 1)]
        weights = [torch.randn(gates, width, generator=g) * 0.4, torch.randn(gates, hidden, generator=g) * 0.4,
                   torch.randn(gates, generator=g) * 0.2, torch.randn(gates, generator=g) * 0.2]
        tensors += [t.requires_grad_() for t in (*states, *weights)]
    return x, keep, tensors


def _loss(outputs: list[torch.Tensor]) -> torch.Tensor:
    """Every output weighted differently (a swapped output or a dropped final-state gradient shows)."""
    return sum((i + 1.0) * (out * torch.linspace(-1, 1, out.shape[-1])).sum() for i, out in enumerate(outputs))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("final", [True, False])
@pytest.mark.parametrize("projection", ["in the loop", "before the loop"])
def test_the_custom_ops_equal_the_eager_nodes_outputs_and_every_gradient(kind, cores, final, projection,
                                                                         monkeypatch):
    from zoo.accel import recurrent_kernels

    monkeypatch.setattr(recurrent_kernels, "STEP_INPUTS", 10_000 if projection == "in the loop" else 0)
    recurrent_ops.register()
    x, keep, tensors = _layer_inputs(kind, cores, final)
    eager = recurrent_scan._Layers.apply(kind, x, keep, cores, final, *tensors)
    ops = recurrent_ops.layers(kind, x, keep, cores, final, tensors)
    assert len(ops) == len(eager) == cores * ((3 if kind == "lstm" else 2) if final else 1)
    for a, b in zip(eager, ops, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    wanted = [x, *tensors]
    for a, b in zip(torch.autograd.grad(_loss(list(eager)), wanted), torch.autograd.grad(_loss(ops), wanted),
                    strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    # x's gradient not wanted: the op computes none, and the weights' are the same
    x.requires_grad_(False)
    a = torch.autograd.grad(_loss(list(recurrent_scan._Layers.apply(kind, x, keep, cores, final, *tensors))), tensors)
    b = torch.autograd.grad(_loss(recurrent_ops.layers(kind, x, keep, cores, final, tensors)), tensors)
    for one, other in zip(a, b, strict=True):
        torch.testing.assert_close(one, other, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_the_custom_ops_pass_torchs_op_check(kind):
    """torch.library.opcheck: the schema, the fake (meta) form's shapes and strides against the real op, and the
    autograd registration (what a compiled graph relies on)."""
    recurrent_ops.register()
    for cores, final in ((2, False), (1, True)):
        x, keep, tensors = _layer_inputs(kind, cores, final)
        torch.library.opcheck(torch.ops.zoo.recurrent_layers.default, (kind, x, keep, cores, final, tensors),
                              test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("cores,final,need_x", [(1, True, True), (2, False, False), (2, True, False)])
def test_the_fake_forms_give_the_real_ops_shapes_and_strides(kind, cores, final, need_x):
    """What a compiled graph lays its buffers out by (the meta form) against what the op returns: a gradient
    returned transposed must be declared so."""
    recurrent_ops.register()
    x, keep, tensors = (t.detach() if isinstance(t, torch.Tensor) else [u.detach() for u in t]
                        for t in _layer_inputs(kind, cores, final))

    def both(op, *args):
        meta = [[None if u is None else u.to("meta") for u in a] if isinstance(a, list)
                else a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
        return op(*args), op(*meta)

    real, meta = both(torch.ops.zoo.recurrent_layers, kind, x, keep, cores, final, tensors)
    per, first = (6, 2) if kind == "lstm" else (5, 1)
    outputs = cores * ((3 if kind == "lstm" else 2) if final else 1)
    grads = [torch.randn_like(out) for out in real[:outputs]]
    grads[-1] = None  # a gradient autograd did not make
    backward = both(torch.ops.zoo.recurrent_layers_backward, kind, grads, x, keep, final, need_x,
                    tensors[first::per], tensors[first + 1::per], real[outputs:])
    for real_outputs, meta_outputs in ((real, meta), backward):
        assert len(real_outputs) == len(meta_outputs)
        for one, other in zip(real_outputs, meta_outputs, strict=True):
            assert (one.shape, one.stride()) == (other.shape, other.stride())


def test_the_ops_are_registered_once_and_say_so_before():
    recurrent_ops.register()
    recurrent_ops.register()  # again: nothing happens
    assert hasattr(torch.ops.zoo, "recurrent_layers") and hasattr(torch.ops.zoo, "recurrent_layers_backward")


@pytest.mark.filterwarnings("ignore:std\\(\\)")  # one sample's unbiased std: computed, then not selected
def test_advantage_normalisation_traced_with_a_data_dependent_count_equals_eager(monkeypatch):
    """A compiled recurrent minibatch's count of valid steps is a traced size: the normalisation has no branch on
    it, and gives what eager gives (one sample: unchanged)."""
    cases = [torch.tensor([4.0]), torch.tensor([1.0, 2.0, 3.0]), torch.randn(17)]
    eager = [normalize_advantage(advantage) for advantage in cases]
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    for advantage, expected in zip(cases, eager, strict=True):
        torch.testing.assert_close(normalize_advantage(advantage), expected)


# -- when a recurrent update compiles ---------------------------------------------------------------------------
@pytest.fixture
def compiler_present(monkeypatch):
    monkeypatch.setattr(compiled_module, "compiler_status", lambda: None)


CARTPOLE = gym.make("CartPole-v1")


def _policy(cls=PPOPolicy, mode: str = "on", samples: int | None = 64, calls: int = 10**4, spaces: gym.Env = CARTPOLE,
            **config):
    base = {"recurrent": "lstm", "recurrent_size": 8, "hidden_sizes": [8], "sequence_length": 8,
            "minibatch_size": 32, "compile": mode}
    policy = new_policy(cls, spaces.observation_space, spaces.action_space, **{**base, **config})
    if samples is not None:
        policy.plan_learning(calls, samples)
    return policy


def test_a_recurrent_update_plans_its_chunks_and_auto_keeps_it_eager(compiler_present):
    policy = _policy(mode="on", samples=256, sequence_length=32, minibatch_size=100)
    assert policy.planned_rows == 8 and policy.minibatch_units() == 3  # chunks, and chunks per minibatch
    assert policy.planned_updates(1, 256) == policy.cfg.epochs * 3  # ceil(8 chunks / 3) per epoch
    assert policy.compiled_step is not None and policy.compile_reason == "policy.compile=on"
    # in the graph: a minibatch of 2 chunks or more (its size a dynamic dimension), or the whole batch's planned chunks
    assert policy._planned_shape(torch.arange(3), 8) and policy._planned_shape(torch.arange(2), 8)
    assert not policy._planned_shape(torch.arange(1), 8)  # dynamo specialises a size of 1: eager
    assert policy._planned_shape(None, 8) and not policy._planned_shape(None, 7)
    auto = _policy(mode="auto", samples=64, calls=10**4)  # 10k calls x 10 epochs x 2 updates: eager all the same
    assert auto.compiled_step is None and auto.compile_reason.startswith(
        "auto: a recurrent update's compiled step did not make whole runs faster")
    assert _policy(mode="off").compiled_step is None


def test_a_compiled_step_unrolls_every_core_size_through_the_loops(monkeypatch):
    """Beyond LOOP_LIMITS eager keeps torch's module (whose reset path branches on the data); a traced step takes
    the loops at any size."""
    core = RecurrentCore("lstm", 3, 64)
    x = torch.randn(4, recurrent_scan.LOOP_LIMITS["lstm"] // 64 + 1, 3)
    starts = torch.zeros(x.shape[:2], dtype=torch.bool)
    assert not core.uses_loops(x, starts, final=False)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert core.uses_loops(x, starts, final=False)


@pytest.mark.parametrize("problem,setup", [
    ("accel.recurrent_kernel is off", lambda mp: mp.setattr(settings.settings(), "recurrent_kernel", False)),
    ("recurrent loops (zoo.accel._crecurrent) are not built",
     lambda mp: mp.setattr(recurrent_scan, "available", lambda: False)),
])
def test_compile_on_is_refused_in_one_line_where_a_recurrent_update_cannot_compile(problem, setup, compiler_present,
                                                                                   monkeypatch):
    setup(monkeypatch)
    wanted = rf"^policy.compile=on, but .*{re.escape(problem)}.*: set policy.compile=off or auto$"
    with pytest.raises(ConfigError, match=wanted):
        _policy(mode="on")
    auto = _policy(mode="auto")
    assert auto.compiled_step is None and auto.compile_reason.startswith("auto: ") and problem in auto.compile_reason
    assert _policy(mode="off").compile_reason == "policy.compile=off"


def test_a_recurrent_update_on_another_device_is_refused_in_one_line(compiler_present):
    policy = _policy(mode="on", samples=None)
    policy.device = torch.device("cuda")  # as a CUDA policy reads it (no GPU needed to decide)
    with pytest.raises(ConfigError, match=r"^policy.compile=on, but a recurrent update compiles on the CPU only .*not "
                                          r"cuda: set policy.compile=off or auto$"):
        policy.plan_learning(10**4, 64)


def test_burn_in_for_a_compiled_update_writes_the_minibatchs_burned_memory_before_the_graph():
    """The memory a compiled update reads at the minibatch's chunks is the one eager learning burns in inside its
    update (the current weights'); other chunks keep their stored memory; no burn-in column enters the graph."""
    policy = _policy(mode="off", samples=None, sequence_length=4, minibatch_size=8, burn_in=6)
    columns = policy.learning_columns(_batches(policy, 1)[0])
    with torch.no_grad():  # weights that did not act: burned memory differs from the stored one
        for parameter in policy.model.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    index = torch.tensor([5, 1])
    ready = policy.compiled_columns(columns, index)
    assert not set(ready) & {"burn_obs", "burn_start", "burn_steps", "burn_memory"}
    eager = policy.burned_memory(policy.gather(columns, index, None, {}))
    torch.testing.assert_close(ready["memory"][index], eager)
    assert not torch.allclose(ready["memory"][index], columns["memory"][index])  # it was burned in
    others = torch.tensor([i for i in range(len(columns["memory"])) if i not in (1, 5)])
    assert torch.equal(ready["memory"][others], columns["memory"][others])
    whole = policy.compiled_columns(columns, None)  # the whole batch: every chunk's
    torch.testing.assert_close(whole["memory"], policy.burned_memory(policy.gather(columns, None, None, {})))


# -- compiled against eager (needs a working compiler) ----------------------------------------------------------------
needs_compiler = pytest.mark.skipif(compiler_status() is not None, reason=f"torch.compile unusable here: "
                                                                          f"{compiler_status()}")


def _batches(policy, count: int, envs: int = 4, steps: int = 16, env: str = "CartPole-v1") -> list:
    """Rollouts of ``env``'s episodes cut at 5 steps: episode starts and autoreset steps inside every chunk, and a
    different number of valid steps in each minibatch."""
    collector = VectorCollector(env, envs, seed=3, vector_mode="sync", max_episode_steps=5)
    try:
        return [policy.process_rollout(collector.rollout(policy, steps)) for _ in range(count)]
    finally:
        collector.close()


def _flat(policy) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in policy.model.parameters()])


@pytest.mark.slow  # compiles one graph per learner: 15-25 s each here
@needs_compiler
@pytest.mark.parametrize("cls,kind,env,burn_in", [(PPOPolicy, "lstm", "CartPole-v1", 0),
                                                  (A2CPolicy, "gru", "CartPole-v1", 0),
                                                  (PPOPolicy, "gru", "Pendulum-v1", 0),
                                                  (PPOPolicy, "lstm", "CartPole-v1", 6)])
def test_compiled_recurrent_updates_agree_with_eager_without_recompiling_and_resume_exactly(cls, kind, env, burn_in):
    config = {"recurrent": kind, "sequence_length": 4, "minibatch_size": 16, "epochs": 3} if cls is PPOPolicy else {
        "recurrent": kind, "sequence_length": 4}
    if env != "CartPole-v1":  # Gaussian actions, one core of two layers for actor and critic
        config.update(recurrent_shared=True, recurrent_layers=2)
    if burn_in:  # each chunk's memory burned in from the up to 6 steps before it (eagerly, before the graph)
        config["burn_in"] = burn_in
    spaces = gym.make(env)
    eager, compiled = (_policy(cls, mode, 64, spaces=spaces, **config) for mode in ("off", "on"))
    batches = _batches(eager, 6, env=env)
    valid = {int(batch.valid.sum()) for batch in batches}
    assert len(valid) > 1 and max(valid) < 64  # autoreset steps dropped: the traced count differs between calls

    def learn(policy, calls: range) -> list[dict]:
        rows = []
        for call in calls:
            torch.manual_seed(100 + call)  # the minibatch permutations
            rows.append(policy.learn(batches[call % len(batches)], LearnContext(progress=call / 20)))
        return rows

    eager_rows, compiled_rows = learn(eager, range(6)), learn(compiled, range(1))
    graphs = counters["stats"]["unique_graphs"]  # after the first call's compile (dynamo may reuse another test's)
    compiled_rows += learn(compiled, range(1, 6))
    assert compiled.compiled_step.active, compiled.compiled_step.failure
    assert compiled.environment_record()["compile_graphs"] == 1
    assert counters["stats"]["unique_graphs"] == graphs  # no recompile for the other counts of valid steps
    for eager_row, compiled_row in zip(eager_rows, compiled_rows, strict=True):
        for key in eager_row:
            assert compiled_row[key] == pytest.approx(eager_row[key], rel=1e-3, abs=1e-5), key
    assert ((_flat(eager) - _flat(compiled)).norm() / _flat(eager).norm()) < 1e-5
    state, rng = copy.deepcopy(compiled.state_dict()), torch.get_rng_state()
    unbroken = learn(compiled, range(6, 9))
    resumed = _policy(cls, "on", 64, spaces=spaces, **config)
    resumed.load_state_dict(state)
    torch.set_rng_state(rng)
    assert learn(resumed, range(6, 9)) == unbroken
    assert torch.equal(_flat(resumed), _flat(compiled))


@pytest.mark.slow
@needs_compiler
def test_a_compiled_recurrent_impala_update_agrees_with_eager():
    eager, compiled = (_policy(ImpalaPolicy, mode, 64) for mode in ("off", "on"))
    batches = _batches(eager, 3)
    for batch in batches:
        torch.manual_seed(0)
        a, b = eager.learn(batch, LearnContext()), compiled.learn(batch, LearnContext())
        for key in a:
            assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-5), key
    assert compiled.environment_record()["compile_graphs"] == 1
    assert ((_flat(eager) - _flat(compiled)).norm() / _flat(eager).norm()) < 1e-5
