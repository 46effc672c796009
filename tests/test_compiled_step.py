"""The learning step compiled (zoo.accel.compiled): when ``policy.compile`` compiles, what a failed compile does,
and -- where a compiler works here -- that compiled and eager updates agree within float rounding over hundreds of
updates (SAC, SAC-ACE with its causal weights and a reset, TD3's two graphs, DQN one-step, n-step and with the
replay's next-observation action masks) and that a
compiled run resumes exactly."""

from __future__ import annotations

import copy
import json
import logging
import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict

from zoo.accel import auto_compile, settings
from zoo.accel import compiled as compiled_module
from zoo.accel.compiled import AUTO_MIN_UPDATES, CompiledStep, compiler_status, resolve_compile
from zoo.accel.matmul import ensemble_mlp, fp32_products
from zoo.data import ReplayBuffer, Transitions
from zoo.errors import ConfigError
from zoo.policies import DQNPolicy, LearnContext, OffPolicyPolicy, SACACEPolicy, SACPolicy, TD3Policy
from zoo.run import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CPU = torch.device("cpu")
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
OBS = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)


# -- when it compiles ---------------------------------------------------------------------------------------------
@pytest.fixture
def compiler_present(monkeypatch):
    monkeypatch.setattr(compiled_module, "compiler_status", lambda: None)


def test_auto_compiles_long_runs_only_and_off_never(compiler_present):
    assert resolve_compile("auto", True, AUTO_MIN_UPDATES, CPU, "SACPolicy") == (True, "auto")
    on, reason = resolve_compile("auto", True, AUTO_MIN_UPDATES - 1, CPU, "SACPolicy")
    assert not on and f"{AUTO_MIN_UPDATES - 1:,} planned updates" in reason
    assert resolve_compile("off", True, 10**9, CPU, "SACPolicy") == (False, "policy.compile=off")
    assert resolve_compile("on", True, 10, CPU, "SACPolicy") == (True, "policy.compile=on")  # on means on


def test_on_is_refused_in_one_line_where_it_cannot_work_and_auto_falls_back(monkeypatch):
    with pytest.raises(ConfigError, match="TinyPolicy's update is not compile-ready.*policy.compile=off"):
        resolve_compile("on", False, 10**6, CPU, "TinyPolicy")
    monkeypatch.setattr(compiled_module, "compiler_status", lambda: "no C++ compiler found")
    with pytest.raises(ConfigError, match="policy.compile=on, but no C\\+\\+ compiler found: set policy.compile=off"):
        resolve_compile("on", True, 10**6, CPU, "SACPolicy")
    assert resolve_compile("auto", True, 10**6, CPU, "SACPolicy") == (False, "no C++ compiler found")
    on, reason = resolve_compile("auto", True, 10**6, torch.device("meta"), "SACPolicy")
    assert not on and "not meta" in reason


def test_a_plugin_update_that_is_not_compile_ready_trains_eager_under_auto(compiler_present):
    class Plugin(OffPolicyPolicy):
        fields = {}

    policy = Plugin(EasyDict(batch_size=4, compile="auto"), OBS, BOX, CPU)
    policy.plan_learning(10**6)
    assert policy.compiled_step is None
    record = policy.environment_record()
    assert record["compile"] is False and "Plugin's update is not compile-ready" in record["compile_reason"]


def test_the_cpu_graph_is_built_with_a_cpp_wrapper_and_cuda_graphs_are_not(monkeypatch):
    seen: list[dict] = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: seen.append(kwargs["options"]) or fn)
    step = CompiledStep(lambda x: x, "Toy's learning step", required=False, device=CPU)
    assert seen[-1]["cpp_wrapper"] is True and step.record()["cpp_wrapper"] is True
    step = CompiledStep(lambda x: x, "Toy's learning step", required=False, device=torch.device("cuda"))
    assert "cpp_wrapper" not in seen[-1] and step.record()["cpp_wrapper"] is False
    settings.configure({"cpp_wrapper": False})  # accel.cpp_wrapper=false
    try:
        step = CompiledStep(lambda x: x, "Toy's learning step", required=False, device=CPU)
        assert "cpp_wrapper" not in seen[-1] and step.record()["cpp_wrapper"] is False
        settings.configure({"cuda_graphs": False})  # accel.cuda_graphs=false
        step = CompiledStep(lambda x: x, "Toy's learning step", required=False, device=torch.device("cuda"))
        assert seen[-1]["triton.cudagraphs"] is False and step.record()["cuda_graphs"] is False
    finally:
        settings.configure(None)


def test_a_cpp_wrapper_the_compiler_cannot_build_falls_back_to_the_python_wrapper(monkeypatch, caplog):
    from torch._dynamo.exc import BackendCompilerFailed
    from torch._inductor.exc import CppCompileError

    built: list[dict] = []

    def fake_compile(fn, **kwargs):
        built.append(dict(kwargs["options"]))
        if kwargs["options"].get("cpp_wrapper"):
            def broken(*args):
                raise BackendCompilerFailed(fn, CppCompileError(["g++"], "error: wrapper.cpp"), None)
            return broken
        return fn
    monkeypatch.setattr(torch, "compile", fake_compile)
    step = CompiledStep(lambda x: x * 2, "Toy's learning step", required=True, device=CPU)
    with caplog.at_level(logging.INFO, logger="zoo"):
        assert torch.equal(step("variant", torch.ones(2)), torch.full((2,), 2.0))
    assert [options.get("cpp_wrapper", False) for options in built] == [True, False]
    assert step.active and step.record()["cpp_wrapper"] is False
    assert "with a C++ wrapper failed (BackendCompilerFailed" in caplog.text and "trying the Python one" in caplog.text
    assert torch.equal(step("variant", torch.ones(2)), torch.full((2,), 2.0)) and len(built) == 2
    # any other failure is not retried: one line, and eager (or refused under policy.compile=on)
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: built.append(kwargs["options"]) or (lambda *a: 1 / 0))
    other = CompiledStep(lambda x: x * 2, "Toy's learning step", required=False, device=CPU)
    assert torch.equal(other("variant", torch.ones(2)), torch.full((2,), 2.0)) and not other.active
    assert len(built) == 3 and other.failure.startswith("ZeroDivisionError")


def test_a_failed_compile_is_one_line_and_eager_or_refused_under_on(caplog):
    def not_traceable(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if float(x.sum()) > 0 else x  # a host sync and a branch on its value: no single graph
    x = torch.ones(3)
    step = CompiledStep(not_traceable, "Toy's learning step", required=False, device=CPU)
    with caplog.at_level(logging.WARNING, logger="zoo"):
        assert torch.equal(step("variant", x), x * 2)
    assert not step.active and len(caplog.records) == 1
    assert caplog.records[0].getMessage().startswith("compiling Toy's learning step failed (")
    assert caplog.records[0].getMessage().endswith("): training eager")
    assert torch.equal(step("variant", -x), -x) and step.record()["compile_failure"] == step.failure
    required = CompiledStep(not_traceable, "Toy's learning step", required=True, device=CPU)
    with pytest.raises(ConfigError, match="policy.compile=on: compiling Toy's learning step failed .*compile=off"):
        required("variant", x)


@pytest.mark.slow  # one small compile
@pytest.mark.skipif(compiler_status() is not None, reason=f"torch.compile unusable here: {compiler_status()}")
def test_the_compiled_step_flushes_denormals_inside_only():
    tiny = torch.full((4,), 1e-39)  # a float32 denormal
    assert bool((tiny * 1.5 > 0).all())  # kept outside

    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * 1.5
    step = CompiledStep(scaled, "Toy's learning step", required=True, device=CPU, gradients=False)
    assert torch.equal(step("variant", tiny), torch.zeros(4)) and step.active  # flushed inside the graph
    assert torch.equal(step("variant", tiny), torch.zeros(4))  # and on later calls (the cached graph)
    assert bool((tiny * 1.5 > 0).all())  # and kept again afterwards


def test_a_run_records_whether_its_step_was_compiled_and_why(tmp_path):
    summary = train({"exp_name": "rec", "runs_dir": str(tmp_path), "env": {"id": "Pendulum-v1"},
                     "policy": {"type": "sac", "hidden_sizes": [8], "batch_size": 8},
                     "pipeline": {"learning_starts": 50, "steps_per_iteration": 50, "max_env_steps": 100,
                                  "eval_every": 0, "buffer_size": 200}})
    (session,) = json.loads((tmp_path / "rec" / "environment.json").read_text())["sessions"]
    assert session["compile"] is False and session["compile_reason"].startswith("auto: 50 planned updates")
    assert summary["env_steps"] == 100


def test_the_bench_does_not_train_kept_runs_again_for_how_the_step_ran():
    from zoo.bench.runs import _difference

    kept = {"seed": 0, "policy": {"type": "sac", "compile": "on", "batch_size": 256}}
    assert _difference({"seed": 0, "policy": {"type": "sac", "compile": "auto", "batch_size": 256}}, kept) is None
    assert "policy.batch_size" in _difference({"seed": 0, "policy": {"type": "sac", "batch_size": 128}}, kept)


# -- compiled against eager (needs a working compiler) -------------------------------------------------------------
needs_compiler = pytest.mark.skipif(compiler_status() is not None, reason=f"torch.compile unusable here: "
                                                                          f"{compiler_status()}")


def replay_for(discrete: bool, n: int = 400, seed: int = 0, masked: bool = False) -> ReplayBuffer:
    rng = np.random.default_rng(seed)
    replay = ReplayBuffer(n, (5,), () if discrete else (2,), action_dtype=np.int64 if discrete else np.float32,
                          mask_width=3 if masked else 0)
    episode_end = rng.random(n) < 0.05
    masks = (rng.random((n, 3)) < 0.5) | np.eye(3, dtype=bool)[rng.integers(0, 3, n)]  # one valid action at least
    replay.add(Transitions(
        obs=rng.normal(size=(n, 5)).astype(np.float32),
        action=rng.integers(0, 3, n) if discrete else rng.uniform(-2, 2, (n, 2)).astype(np.float32),
        reward=rng.normal(size=n).astype(np.float32), next_obs=rng.normal(size=(n, 5)).astype(np.float32),
        terminated=episode_end & (rng.random(n) < 0.5), truncated=episode_end & (rng.random(n) >= 0.5),
        env=np.zeros(n, np.int32), next_action_mask=masks if masked else None))
    return replay


CASES = {
    "sac": (SACPolicy, {}),
    "sac_ace": (SACACEPolicy, {"causal_interval": 100, "causal_sample_size": 300, "causal_apply_after": 3,
                               "reset_interval": 120, "reset_start": 100, "actor_update_interval": 2}),
    "td3": (TD3Policy, {"policy_delay": 2}),
    "dqn": (DQNPolicy, {"double_dqn": True}),
    "dqn_nstep": (DQNPolicy, {"nstep": 3}),
    "dqn_masked": (DQNPolicy, {"double_dqn": True}),  # the target's argmax over the valid next actions
}


def new_policy(name: str, mode: str) -> OffPolicyPolicy:
    cls, overrides = CASES[name]
    cfg = EasyDict({**cls.default_config, "hidden_sizes": [16, 16], "batch_size": 32, "compile": mode, **overrides})
    torch.manual_seed(0)
    policy = cls(cfg, OBS, gym.spaces.Discrete(3) if cls is DQNPolicy else BOX, CPU)
    policy.plan_learning(10**6)
    return policy


def learn(policy: OffPolicyPolicy, replay: ReplayBuffer, seed: int, updates: int) -> list[dict[str, float]]:
    torch.manual_seed(seed)
    rows = []
    for call in range(updates // 10):  # ten updates per call, as gradient_steps=10 would
        metrics = policy.learn(replay, LearnContext(updates=10, env_steps=100 + 10 * call))
        rows.append({key: float(value) for key, value in metrics.items()})
    return rows


def flat_state(policy: OffPolicyPolicy) -> torch.Tensor:
    tensors = []

    def walk(value):
        if isinstance(value, dict):
            for key in sorted(value):
                walk(value[key])
        elif isinstance(value, torch.Tensor) and value.is_floating_point():
            tensors.append(value.reshape(-1))
    walk(policy.state_dict())
    return torch.cat(tensors)


@pytest.mark.slow  # compiles each case's graphs: about 10 s per graph here
@needs_compiler
@pytest.mark.parametrize("name", list(CASES))
def test_compiled_and_eager_updates_agree_over_hundreds_of_updates_and_resume_exactly(name):
    replay = replay_for(name.startswith("dqn"), masked=name.endswith("masked"))
    eager, compiled = new_policy(name, "off"), new_policy(name, "on")
    assert compiled.compiled_step is not None and eager.compiled_step is None
    eager_rows, compiled_rows = learn(eager, replay, 1, 300), learn(compiled, replay, 1, 300)
    assert compiled.compiled_step.active, compiled.compiled_step.failure
    assert compiled.environment_record()["compile_graphs"] == (2 if name in ("td3", "sac_ace") else 1)
    for eager_row, compiled_row in zip(eager_rows, compiled_rows, strict=True):
        assert eager_row.keys() == compiled_row.keys()
        for key in eager_row:
            assert compiled_row[key] == pytest.approx(eager_row[key], rel=1e-3, abs=1e-5), key
    a, b = flat_state(eager), flat_state(compiled)
    assert ((a - b).norm() / a.norm()) < 1e-5
    if not name.startswith("dqn"):  # acting compiled too: the same draws, the same actions within rounding
        assert compiled.compiled_acting is not None
        obs = torch.randn(4, 5)
        torch.manual_seed(9)
        eager_actions = eager.explore(obs)
        torch.manual_seed(9)
        np.testing.assert_allclose(compiled.explore(obs), eager_actions, rtol=1e-4, atol=1e-5)
        # SAC and TD3 act in numpy on the CPU (acts_in_numpy); their acting graph serves the other devices
        assert compiled.compiled_acting.variants == set()
        torch.manual_seed(9)
        np.testing.assert_allclose(compiled.compiled_acting("acting", obs).numpy(), eager_actions, rtol=1e-4, atol=1e-5)
        assert compiled.compiled_acting.active and compiled.compiled_acting.variants == {"acting"}
    if name == "sac_ace":  # its causal weights were refitted and applied, and the reset ran (eager) in between
        assert compiled.causal.fits >= 1 and compiled.resets == eager.resets == 2
        assert eager_rows[-1]["causal_weight_0"] == pytest.approx(compiled_rows[-1]["causal_weight_0"], rel=1e-4)
    # Resume within the compiled mode: a fresh compiled policy loads the state and draws on as the unbroken one.
    state, rng = copy.deepcopy(compiled.state_dict()), torch.get_rng_state()
    unbroken = learn(compiled, replay, 2, 50)
    resumed_policy = new_policy(name, "on")
    resumed_policy.load_state_dict(state)
    torch.set_rng_state(rng)
    assert learn(resumed_policy, replay, 2, 50) == unbroken
    assert torch.equal(flat_state(resumed_policy), flat_state(compiled))


# -- the step's inputs ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
def test_the_traced_step_takes_each_flat_buffer_once_and_no_parameter_aliasing_it(name):
    """Parameters that are slices of a flat buffer (FlatOptimizer, target networks) are views made inside the
    graph, so that no two inputs of the traced step share memory: aliased inputs, one mutated, cost a synthetic
    base per call and keep inductor from capturing a CUDA graph (zoo.accel.flat_views). Traced by dynamo with
    a backend that only records the inputs (no compiler needed)."""
    policy = new_policy(name, "off")
    replay = replay_for(name.startswith("dqn"), masked=name.endswith("masked"))
    policy.flat_modules.refresh()
    swapped = {id(module) for module, *_ in policy.flat_modules.specs}
    flat_backed = [value for value in vars(policy).values() if isinstance(value, torch.nn.Module)
                   and any(True for _ in value.parameters())]
    # every network but DQN's target (a module of its own, Polyak-averaged tensor by tensor) lives in a flat buffer
    assert {id(module) for module in flat_backed if module is not getattr(policy, "target", None)
            or not name.startswith("dqn")} == swapped
    inputs: list[torch.Tensor] = []

    def record(graph, example_inputs):
        inputs.extend(t for t in example_inputs if isinstance(t, torch.Tensor))
        return graph.forward

    def step(*args):
        with torch.set_grad_enabled(True):
            return policy._viewed_learning_step(*args)

    policy.updates, policy.due = 1, dict.fromkeys(policy.cadences(), True)
    fp32_products()  # decided before tracing, as a run's settings do (deciding reads torch.backends: untraceable)
    with torch.no_grad(), torch._dynamo.config.patch(trace_autograd_ops=True):
        traced = torch.compile(step, backend=record, fullgraph=True, dynamic=False)
        traced(policy.storage.of(replay), policy.draw(replay), LearnContext(updates=1))
    storages = [t.untyped_storage().data_ptr() for t in inputs]
    assert len(inputs) > 10 and len(set(storages)) == len(storages)
    # the parameters of the networks are back once the step is traced
    assert all(isinstance(p, torch.nn.Parameter) for module in flat_backed for p in module.parameters())


def test_a_replaced_network_is_seen_by_the_next_learning_call():
    policy = new_policy("sac", "off")
    policy.flat_modules.refresh()
    specs = policy.flat_modules.specs
    policy.updates, policy.due = 10_000, {"actor": True}  # other attributes change every update: nothing re-read
    policy.flat_modules.refresh()
    assert policy.flat_modules.specs is specs
    before = [module for module, *_ in policy.flat_modules.specs]
    policy.actor = policy._new_actor()  # no optimizer owns its parameters: not swapped
    policy.flat_modules.refresh()
    after = [module for module, *_ in policy.flat_modules.specs]
    # the declared networks are swapped: not the new actor, whose parameters lie in no flat buffer; the old one
    # stays the actor optimiser's (the network that optimiser steps)
    assert policy.actor not in after and {id(m) for m in after} == {id(m) for m in before}
    # a parameter moved out of its flat buffer (.data set) takes its network out of the swapped ones too
    policy.critic.weights[0].data = policy.critic.weights[0].detach().clone()
    policy.flat_modules.refresh()
    assert policy.critic not in [module for module, *_ in policy.flat_modules.specs]
    assert policy.target in [module for module, *_ in policy.flat_modules.specs]


@needs_compiler
def test_a_network_reading_parameters_kept_aside_fails_to_compile_in_one_line_and_trains_eager(caplog, monkeypatch):
    """The contract of flat_views: networks read their parameters through their attributes. One that reads
    Parameter objects kept aside is not differentiated in the compiled step: the compile fails with the reason in
    one line, `auto` trains eager (the plain step, the same numbers as an eager policy), `on` refuses."""

    def keep_parameters_aside(policy):
        critic = policy.critic
        weights, biases = list(critic.weights), list(critic.biases)

        def forward(obs, action, detach_weights=False):
            w, b = (weights, biases) if not detach_weights else ([t.detach() for t in weights],
                                                                 [t.detach() for t in biases])
            return ensemble_mlp(torch.cat([obs, action], -1), w, b, list(critic.activations)).float()
        critic.forward = forward
        return policy

    replay = replay_for(False)
    monkeypatch.setattr(auto_compile, "AUTO_PROBE_WARMUP", 0)  # auto decides after one update, and compiles
    monkeypatch.setattr(auto_compile, "AUTO_PROBE_UPDATES", 1)
    monkeypatch.setattr(auto_compile, "compile_seconds", lambda what: 0.0)
    eager = keep_parameters_aside(new_policy("sac", "off"))
    auto = keep_parameters_aside(new_policy("sac", "auto"))
    with caplog.at_level(logging.WARNING, logger="zoo"):
        assert learn(auto, replay, 3, 20) == learn(eager, replay, 3, 20)
    assert not auto.compiled_step.active and "not have been used in the graph" in auto.compiled_step.failure
    assert [r.getMessage().count("\n") for r in caplog.records if "training eager" in r.getMessage()] == [0]
    with pytest.raises(ConfigError, match="policy.compile=on: compiling SACPolicy's learning step failed"):
        learn(keep_parameters_aside(new_policy("sac", "on")), replay, 3, 10)


def test_pyprojects_torch_floor_is_the_one_the_compiled_step_needs():
    """pyproject.toml's torch range and compiler_status say the same thing (zoo.accel.torch_internals.MIN_TORCH)."""
    import re
    from pathlib import Path

    from zoo.accel import torch_internals

    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    floor = re.search(r'"torch>=(\d+)\.(\d+)', text)
    assert floor is not None and (int(floor.group(1)), int(floor.group(2))) == torch_internals.MIN_TORCH
    major, minor = torch_internals.MIN_TORCH
    real = torch.__version__
    try:
        torch.__version__ = f"{major}.{minor - 1}.0"
        assert torch_internals.compile_support() == (f"torch {major}.{minor - 1}.0 cannot trace torch.autograd.grad "
                                                     f"into a graph (needs torch {major}.{minor} or later)")
    finally:
        torch.__version__ = real
    assert torch_internals.compile_support() is None


def test_the_inductor_cache_is_one_folder_per_cpu_kind_unless_one_is_named(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    kind = settings.cpu_kind()
    assert settings.inductor_cache_dir() == tmp_path / "zoo" / "inductor" / kind
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # kernels compiled for another instruction set: elsewhere
    assert settings.cpu_kind() != kind and settings.inductor_cache_dir().parent == tmp_path / "zoo" / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert settings.inductor_cache_dir() == tmp_path / "mine"
    settings.configure({"inductor_cache": str(tmp_path / "named")})  # accel.inductor_cache
    try:
        assert settings.inductor_cache_dir() == tmp_path / "named"
    finally:
        settings.configure(None)


def test_a_runs_named_cache_folder_does_not_outlive_it_and_the_users_own_is_kept(monkeypatch, tmp_path):
    """zoo points TORCHINDUCTOR_CACHE_DIR at its cache folder: that value is never read back as the user's setting
    (the next run in this process, with no accel.inductor_cache, went on using the last run's folder)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(settings, "_compiler_prepared", True)  # as after a compiled step in this process
    for users in [None, str(tmp_path / "users")]:
        monkeypatch.setattr(settings, "_written_cache_env", None)
        if users is None:
            monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
        else:
            monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", users)
        own = Path(users) if users else tmp_path / "zoo" / "inductor" / settings.cpu_kind()
        try:
            settings.configure({"inductor_cache": str(tmp_path / "runs")})
            assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "runs") == str(settings.inductor_cache_dir())
            settings.configure(None)
            assert settings.inductor_cache_dir() == own and os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(own)
            settings.configure(None)  # and again: zoo's own write of the user's value still reads as the user's
            assert settings.inductor_cache_dir() == own
        finally:
            settings.configure(None)


@pytest.mark.parametrize("fault", ["a file", "under /proc", "refused"])
def test_auto_trains_eager_with_one_line_when_the_cache_folder_is_unusable_and_on_refuses(
        fault, compiler_present, monkeypatch, tmp_path, caplog):
    """policy.compile=auto is a speed choice: no cache fault stops a run that eager can train (issue 54)."""
    if fault == "a file":
        folder = tmp_path / "cache"
        folder.write_text("not a folder")
    elif fault == "under /proc":
        folder = Path("/proc/self/zoo-inductor-cache")  # a file system that makes no folder
    else:
        folder = tmp_path / "refused"
        real = Path.mkdir

        def refuse(path, *args, **kwargs):
            if path == folder:
                raise PermissionError(13, "Permission denied", str(path))
            return real(path, *args, **kwargs)
        monkeypatch.setattr(Path, "mkdir", refuse)
    settings.configure({"inductor_cache": str(folder)})
    try:
        with caplog.at_level(logging.WARNING, logger="zoo"):
            on, reason = resolve_compile("auto", True, 10**6, CPU, "SACPolicy")
        assert not on and reason.startswith(f"inductor's cache folder '{folder}' is not usable (")
        assert reason.endswith("set accel.inductor_cache to a writable folder")
        assert [r.getMessage() for r in caplog.records] == [f"policy.compile=auto, but {reason}: training eager"]
        with pytest.raises(ConfigError, match="^policy.compile=on, but inductor's cache folder .* not usable"):
            resolve_compile("on", True, 10**6, CPU, "SACPolicy")
        policy = new_policy("sac", "auto")  # built and planned: eager, the reason in its record
        assert policy.compiled_step is None and policy.environment_record()["compile_reason"] == reason
    finally:
        settings.configure(None)


def test_a_step_that_cannot_even_be_built_trains_eager_under_auto_and_refuses_under_on(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise NotADirectoryError(20, "Not a directory", "/somewhere/inductor")
    monkeypatch.setattr(torch, "compile", broken)
    with caplog.at_level(logging.WARNING, logger="zoo"):
        step = CompiledStep(lambda x: x * 2, "Toy's learning step", required=False, device=CPU)
    assert not step.active and step.failure.startswith("NotADirectoryError")
    assert torch.equal(step("variant", torch.ones(2)), torch.full((2,), 2.0))  # eager
    assert [r.getMessage().count("\n") for r in caplog.records] == [0]
    with pytest.raises(ConfigError, match="^policy.compile=on: compiling Toy's learning step failed \\(NotADir"):
        CompiledStep(lambda x: x, "Toy's learning step", required=True, device=CPU)


# -- auto: what the compile costs and saves here (zoo.accel.auto_compile) ------------------------------------------
@pytest.fixture
def quick_probe(monkeypatch, tmp_path):
    monkeypatch.setattr(auto_compile, "AUTO_PROBE_WARMUP", 2)
    monkeypatch.setattr(auto_compile, "AUTO_PROBE_UPDATES", 4)
    settings.configure({"inductor_cache": str(tmp_path / "cache")})
    yield tmp_path / "cache"
    settings.configure(None)


def test_auto_times_the_first_eager_updates_then_decides_by_the_compile_cost_here(compiler_present, quick_probe,
                                                                                    monkeypatch):
    built = []
    monkeypatch.setattr(OffPolicyPolicy, "_build_compiled", lambda self, on, required: built.append((on, required)))
    replay = replay_for(False)
    auto_compile.record_compile_seconds("SACPolicy's learning step", 1e5)  # a compile measured slow here
    slow = new_policy("sac", "auto")
    assert slow._auto is not None and slow.compile_reason.startswith("auto: deciding") and built == []
    slow.learn(replay, LearnContext(updates=6))  # 2 warm-up and 4 timed updates: decided
    assert slow.compile_decision is False and built == [(False, False)]
    assert "about 100,000 s of compiling here (under twice that: eager)" in slow.compile_reason
    auto_compile.record_compile_seconds("SACPolicy's learning step", 1.0)  # a shorter one does not replace it
    assert auto_compile.compile_seconds("SACPolicy's learning step") == 1e5
    (quick_probe / auto_compile.COSTS_FILE).write_text('{"SACPolicy\'s learning step": 0.001}')
    fast = new_policy("sac", "auto")
    fast.learn(replay, LearnContext(updates=5))
    assert fast.compile_decision is None and fast._auto is not None  # one timed update short
    fast.learn(replay, LearnContext(updates=1))
    assert fast.compile_decision is True and built[-1] == (True, False)
    assert fast.state_dict()["compile_decision"] is True  # kept: a resume decides alike
    resumed = new_policy("sac", "auto")
    resumed.load_state_dict(fast.state_dict())
    assert resumed._auto is None and resumed.compile_decision is True and built[-1] == (True, False)
    assert resumed.compile_reason == "auto: compiled, as decided before the resume"
    eager = new_policy("sac", "off")  # off and on decide nothing, and save no decision
    assert "compile_decision" not in eager.state_dict() and eager._auto is None


def test_auto_without_a_plan_compiles_at_once_and_too_few_updates_never(compiler_present, quick_probe):
    cls, overrides = CASES["sac"]
    policy = cls(EasyDict({**cls.default_config, "hidden_sizes": [8], "batch_size": 8, "compile": "auto",
                           **overrides}), OBS, BOX, CPU)
    policy.plan_learning(None)  # a pipeline that cannot say: as before, compiled
    assert policy._auto is None and policy.compiled_step is not None
    policy.plan_learning(AUTO_MIN_UPDATES - 1)
    assert policy._auto is None and policy.compiled_step is None


@pytest.mark.parametrize("policy", ["sac", "ppo"])
def test_zoo_run_with_an_unusable_cache_trains_eager_under_auto_and_on_refuses_in_one_line(tmp_path, capsys, policy,
                                                                                            compiler_present):
    from zoo.cli import main

    cache = tmp_path / "cache"
    cache.write_text("a file where the folder should be")
    env = "Pendulum-v1"
    sets = ["--set", f"accel.inductor_cache={cache}", "--set", f"runs_dir={tmp_path}", "--set", f"policy.type={policy}",
            "--set", f"env.id={env}", "--set", "policy.hidden_sizes=[8]", "--set", "pipeline.eval_every=0"]
    if policy == "sac":
        sets += ["--set", "pipeline.learning_starts=50", "--set", "pipeline.steps_per_iteration=50",
                 "--set", "pipeline.max_env_steps=100", "--set", "pipeline.buffer_size=200", "--set",
                 "policy.batch_size=8"]
    else:
        sets += ["--set", "pipeline.rollout_steps=32", "--set", "pipeline.num_envs=2", "--set",
                 "pipeline.max_env_steps=128", "--set", "policy.minibatch_size=32", "--set", "policy.epochs=1"]
    config = tmp_path / "c.py"
    config.write_text("config = dict()\n")
    assert main(["run", "--config", str(config), "-q", "--exp-name", "auto", *sets]) == 0
    (session,) = json.loads((tmp_path / "auto" / "environment.json").read_text())["sessions"]
    # a run too short for auto to compile never looks at the compiler or its cache (nor imports dynamo)
    assert session["compile"] is False and "planned updates, fewer than" in session["compile_reason"]
    capsys.readouterr()
    code = main(["run", "--config", str(config), "-q", "--exp-name", "on", *sets, "--set", "policy.compile=on"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("zoo: error: policy.compile=on, but inductor's cache")
