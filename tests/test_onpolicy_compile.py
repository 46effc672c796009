"""The on-policy learners' one update path (zoo.policies.onpolicy, zoo.accel.onpolicy): when ``policy.compile``
compiles PPO, A2C and IMPALA, what the pipelines plan, what a skipped step reports (one rule, eager and compiled),
and -- where a compiler works here -- that compiled and eager learners agree within float rounding over hundreds of
updates, compile one graph whatever autoreset steps a rollout drops, and resume exactly."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict
from helpers import TIMINGS, metrics_rows
from torch._dynamo.utils import counters

from zoo.accel import compiled as compiled_module
from zoo.accel.compiled import compiler_status
from zoo.accel.onpolicy import mean_rows, pad_rows, resolve_onpolicy_compile
from zoo.config.resolve import resolve_config
from zoo.data import Rollout, Unroll
from zoo.errors import ConfigError, NonFiniteError
from zoo.policies import A2CPolicy, ImpalaPolicy, LearnContext, PPOPolicy
from zoo.run import build_pipeline, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CPU = torch.device("cpu")
OBS_DIM = 4
OBS = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)


@pytest.fixture
def compiler_present(monkeypatch):
    monkeypatch.setattr(compiled_module, "compiler_status", lambda: None)


def policy_of(cls: type, action_space: gym.Space, mode: str, samples: int | None = None, **overrides):
    cfg = EasyDict({**cls.default_config, "hidden_sizes": [16, 16], "compile": mode, **overrides})
    torch.manual_seed(0)
    policy = cls(cfg, OBS, action_space, CPU)
    if samples is not None:
        policy.plan_learning(10**4, samples)
    return policy


# -- when it compiles (no compiler needed) --------------------------------------------------------------------------
def test_auto_compiles_measured_learners_on_long_mlp_runs_only_and_on_means_on(compiler_present):
    def resolve(requested, minimum=1000, planned=1000, encoder=False):
        return resolve_onpolicy_compile(requested, True, planned, minimum, encoder, CPU, "PPOPolicy")

    assert resolve("auto") == (True, "auto")
    on, reason = resolve("auto", planned=999)
    assert not on and reason == "auto: 999 planned updates, fewer than 1,000"
    on, reason = resolve("auto", minimum=None, planned=10**9)
    assert not on and "PPOPolicy's compiled step did not make whole runs faster" in reason
    on, reason = resolve("auto", encoder=True)
    assert not on and "MLP models only" in reason
    on, reason = resolve("auto", planned=None)
    assert not on and "unknown planned updates" in reason
    assert resolve("on", minimum=None, planned=1, encoder=True) == (True, "policy.compile=on")
    assert resolve("off", planned=10**9) == (False, "policy.compile=off")


def test_on_is_refused_in_one_line_where_it_cannot_work(monkeypatch):
    with pytest.raises(ConfigError, match="Plugin's update is not compile-ready"):
        resolve_onpolicy_compile("on", False, 10**6, 1, False, CPU, "Plugin")
    monkeypatch.setattr(compiled_module, "compiler_status", lambda: "no C++ compiler found")
    with pytest.raises(ConfigError, match="policy.compile=on, but no C\\+\\+ compiler found"):
        policy_of(PPOPolicy, BOX, "on", samples=64)
    policy = policy_of(PPOPolicy, BOX, "auto", samples=64)
    assert policy.compiled_step is None and policy.environment_record() == {
        "compile": False, "compile_reason": "no C++ compiler found"}


def test_the_pipelines_plan_the_runs_updates(compiler_present, tmp_path):
    def planned(policy: dict, pipeline: dict, env: str = "Pendulum-v1") -> tuple[int | None, str]:
        loop = build_pipeline(resolve_config({"runs_dir": str(tmp_path), "env": {"id": env},
                                              "policy": {"hidden_sizes": [8], **policy}, "pipeline": pipeline}))
        try:
            return loop.policy.planned_rows, loop.policy.compile_reason
        finally:
            loop.close()

    # PPO: ceil(10_000 / 128) = 79 rollouts x 10 epochs x 2 minibatches of 64
    ppo = {"num_envs": 2, "rollout_steps": 64, "max_env_steps": 10_000}
    assert planned({"type": "ppo"}, ppo) == (128, "auto: 1,580 planned updates, fewer than 30,000")
    assert planned({"type": "ppo"}, {**ppo, "max_env_steps": 192_000})[1] == "auto"  # 1,500 x 20 updates
    assert planned({"type": "ppo"}, {**ppo, "max_env_steps": 191_872})[1].startswith("auto: 29,980 planned")
    a2c_samples, reason = planned({"type": "a2c"}, {"num_envs": 4, "rollout_steps": 8, "max_env_steps": 10**7})
    assert a2c_samples == 32 and reason.startswith("auto: A2CPolicy's compiled step did not make whole runs faster")
    impala = {"type": "parallel_async", "num_actors": 1, "num_envs": 2, "unroll_length": 8, "batch_unrolls": 2,
              "queue_size": 2, "max_env_steps": 10**7}
    samples, reason = planned({"type": "impala"}, impala, "CartPole-v1")
    assert samples == 32 and reason.startswith("auto: ImpalaPolicy's compiled step did not make whole runs faster")


def test_compile_on_is_refused_where_the_gradients_are_all_reduced(compiler_present):
    class DataParallel(LearnContext):
        def sync_gradients(self, grad: torch.Tensor) -> None:
            grad.mul_(1.0)

    unplanned = policy_of(PPOPolicy, BOX, "on")  # parallel_sync never plans: the step would silently stay eager
    batch = rollout_of(unplanned, steps=16, envs=2, invalid=())
    with pytest.raises(ConfigError, match="policy.compile=on, but PPOPolicy's learning step runs eager here"):
        unplanned.learn(batch, LearnContext())
    planned = policy_of(PPOPolicy, BOX, "on", samples=32)
    with pytest.raises(ConfigError, match="parallel_sync"):
        planned.learn(batch, DataParallel(world_size=2))
    assert policy_of(PPOPolicy, BOX, "auto", samples=32).learn(batch, DataParallel(world_size=2))["updates"] > 0


def test_a_non_finite_loss_skips_the_step_and_the_learn_call_says_so():
    assert torch.equal(pad_rows(torch.tensor([[1.0], [2.0]]), 4), torch.tensor([[1.0], [2.0], [0.0], [0.0]]))
    column = torch.ones(3)
    assert pad_rows(column, 3) is column and pad_rows(column, None) is column
    policy = policy_of(PPOPolicy, BOX, "off")
    batch = rollout_of(policy, steps=8, envs=2, invalid=())
    columns = policy.learning_columns(batch)
    poisoned = {**columns, "advantage": columns["advantage"] * torch.nan}
    before = policy.optimizer.flat.clone()
    row = policy.update(policy.gather(poisoned, torch.arange(8), None, {"clip": 0.2}), LearnContext())
    assert torch.isnan(row["loss"]) and torch.equal(policy.optimizer.flat, before) and policy.optimizer.steps == 0
    finite = policy.update(policy.gather(columns, torch.arange(8), None, {"clip": 0.2}), LearnContext())
    assert not torch.equal(policy.optimizer.flat, before) and policy.optimizer.steps == 1
    rows = [torch.stack(list(r.values())) for r in (finite, row)]
    means, skipped = mean_rows(rows, ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac"))
    assert skipped == 1 and means["approx_kl"] == pytest.approx(float((rows[0][3] + rows[1][3]) / 2), nan_ok=True)
    assert mean_rows(rows[:1], ("a", "b", "c", "d", "e")) == (dict(zip("abcde", rows[0][:5].tolist())), None)
    # learn: every step with a NaN loss skipped, then one line naming it (what stops the run, its checkpoint kept)
    after_one = policy.optimizer.flat.clone()
    with pytest.raises(NonFiniteError, match=r"^the loss is not finite in update 1 of 10 \(metrics "):
        policy.learn(batch.with_extras(advantage=batch.extras["advantage"] * torch.nan), LearnContext())
    assert torch.equal(policy.optimizer.flat, after_one) and policy.optimizer.steps == 1
    # a finite loss with a gradient that is not: the gradient is named
    policy.model.value_head.weight.register_hook(lambda grad: grad * torch.inf)
    with pytest.raises(NonFiniteError, match=r"^the gradient is not finite in update 1 of 10"):
        policy.learn(batch, LearnContext())
    assert torch.equal(policy.optimizer.flat, after_one)


# -- batches --------------------------------------------------------------------------------------------------------
def rollout_of(policy, steps: int, envs: int, invalid: tuple[tuple[int, int], ...], seed: int = 1) -> Rollout:
    """A rollout acted by ``policy`` on Gaussian observations, with autoreset steps at ``invalid`` (t, env) after
    terminations, processed (GAE) by ``policy``."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(steps, envs, OBS_DIM, generator=g)
    with torch.no_grad():
        output = policy.model.policy_output(obs)
    if policy.discrete:
        packed = output
        action = (output - torch.empty_like(output).exponential_(generator=g).log()).argmax(-1)
    else:
        packed = torch.cat([output["mu"], output["sigma"]], -1)
        action = output["mu"] + output["sigma"] * torch.randn(output["mu"].shape, generator=g)
    valid = torch.ones(steps, envs, dtype=torch.bool)
    terminated = torch.zeros(steps, envs, dtype=torch.bool)
    for t, env in invalid:
        terminated[t - 1, env], valid[t, env] = True, False
    rollout = Rollout(obs, action, torch.randn(steps, envs, generator=g), terminated,
                      torch.zeros(steps, envs, dtype=torch.bool), valid, torch.randn(envs, OBS_DIM, generator=g),
                      {"policy_output": packed})
    return policy.process_rollout(rollout)


def unroll_of(policy, steps: int, envs: int, seed: int) -> Unroll:
    """An unroll acted by ``policy`` (bounded Gaussian), with a truncation, an autoreset step and a termination."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(steps + 1, envs, OBS_DIM, generator=g)
    with torch.no_grad():
        output = policy._bounded(policy.model.policy_output(obs[:steps]))
    action = output["mu"] + output["sigma"] * torch.randn(output["mu"].shape, generator=g)
    terminated = torch.zeros(steps, envs, dtype=torch.bool)
    truncated = torch.zeros(steps, envs, dtype=torch.bool)
    valid = torch.ones(steps, envs, dtype=torch.bool)
    truncated[2, 0], valid[3, 0], terminated[steps - 2, 1] = True, False, True
    return Unroll(obs=obs, action=action, reward=torch.randn(steps, envs, generator=g), terminated=terminated,
                  truncated=truncated, valid=valid,
                  behaviour={"policy_output": torch.cat([output["mu"], output["sigma"]], -1)}, policy_version=0)


def flat_state(policy) -> torch.Tensor:
    return torch.cat([policy.optimizer.flat, policy.optimizer.exp_avg_sq])


def assert_agree(eager_rows: list[dict], compiled_rows: list[dict], eager, compiled) -> None:
    for eager_row, compiled_row in zip(eager_rows, compiled_rows, strict=True):
        assert eager_row.keys() == compiled_row.keys()
        for key in eager_row:
            assert compiled_row[key] == pytest.approx(eager_row[key], rel=1e-3, abs=1e-5), key
    a, b = flat_state(eager), flat_state(compiled)
    assert ((a - b).norm() / a.norm()) < 1e-4


# -- compiled against eager (needs a working compiler) -------------------------------------------------------------
needs_compiler = pytest.mark.skipif(compiler_status() is not None, reason=f"torch.compile unusable here: "
                                                                          f"{compiler_status()}")


@pytest.mark.slow  # compiles one graph: about 10-20 s here
@needs_compiler
def test_ppo_compiled_and_eager_agree_over_hundreds_of_minibatch_updates_and_resume_exactly():
    settings = {"minibatch_size": 16, "epochs": 8, "anneal_clip": True, "value_clip": True, "target_kl": 10.0}
    eager, compiled = (policy_of(PPOPolicy, BOX, mode, samples=64, **settings) for mode in ("off", "on"))
    reference = policy_of(PPOPolicy, BOX, "off", **settings)  # acts and values the batches, learns nothing
    # Rollouts of 32 x 2 steps that drop 0, 1 or 3 autoreset steps: the last minibatch of an epoch is then shorter
    # (13-16 samples: a dynamic size of the same graph), and the compiled step's inputs are padded to one shape.
    drops = [(), ((5, 0),), ((3, 0), (20, 1), (30, 1)), ((9, 1),)]
    eager_calls = []
    step = compiled._step  # the compiled graph keeps the step it was built from; learn's eager path calls this
    compiled._step = lambda *args, **kwargs: eager_calls.append(1) or step(*args, **kwargs)

    def learn(policy, calls: range) -> list[dict]:
        rows = []
        for call in calls:
            torch.manual_seed(100 + call)  # the minibatch permutations
            batch = rollout_of(reference, 32, 2, drops[call % len(drops)], seed=call)
            rows.append(policy.learn(batch, LearnContext(progress=call / 20)))
        return rows

    eager_rows, compiled_rows = learn(eager, range(8)), learn(compiled, range(1))
    graphs = counters["stats"]["unique_graphs"]  # after the first call's compile (dynamo may reuse another test's)
    compiled_rows += learn(compiled, range(1, 8))
    assert sum(row["updates"] for row in compiled_rows) == 8 * 8 * 4  # 256 minibatch updates
    assert compiled.compiled_step.active, compiled.compiled_step.failure
    assert compiled.environment_record()["compile_graphs"] == 1
    assert counters["stats"]["unique_graphs"] == graphs  # no recompile for the rollouts' and minibatches' sizes
    assert not eager_calls  # the shorter minibatches ran in the graph too
    assert_agree(eager_rows, compiled_rows, eager, compiled)
    state, rng = copy.deepcopy(compiled.state_dict()), torch.get_rng_state()
    unbroken = learn(compiled, range(8, 11))
    resumed = policy_of(PPOPolicy, BOX, "on", samples=64, **settings)
    resumed.load_state_dict(state)
    torch.set_rng_state(rng)
    assert learn(resumed, range(8, 11)) == unbroken
    assert torch.equal(flat_state(resumed), flat_state(compiled))
    # the non-finite rule is eager's: the compiled steps are skipped, and the call names the loss
    batch = rollout_of(reference, 32, 2, (), seed=0)
    before = flat_state(compiled)
    with pytest.raises(NonFiniteError, match=r"^the loss is not finite in update 1 of 32"):
        compiled.learn(batch.with_extras(advantage=batch.extras["advantage"] * torch.nan), LearnContext())
    assert torch.equal(flat_state(compiled), before)


@pytest.mark.slow
@needs_compiler
def test_a2c_compiled_and_eager_agree_over_hundreds_of_updates_and_resume_exactly():
    action_space = gym.spaces.Discrete(3)
    eager, compiled = (policy_of(A2CPolicy, action_space, mode, samples=32, normalize_advantage=True)
                       for mode in ("off", "on"))
    reference = policy_of(A2CPolicy, action_space, "off")

    def learn(policy, calls: range) -> list[dict]:
        rows = []
        for call in calls:  # every 5th rollout drops an autoreset step: that update runs eager
            batch = rollout_of(reference, 8, 4, ((4, 2),) if call % 5 == 0 else (), seed=call)
            rows.append(policy.learn(batch, LearnContext(progress=call / 400)))
        return rows

    eager_rows, compiled_rows = learn(eager, range(300)), learn(compiled, range(300))
    assert compiled.compiled_step.active and compiled.compiled_step.variants == {"update"}
    assert_agree(eager_rows, compiled_rows, eager, compiled)
    state = copy.deepcopy(compiled.state_dict())
    unbroken = learn(compiled, range(300, 320))
    resumed = policy_of(A2CPolicy, action_space, "on", samples=32, normalize_advantage=True)
    resumed.load_state_dict(state)
    assert learn(resumed, range(300, 320)) == unbroken


@pytest.mark.slow
@needs_compiler
def test_impala_compiled_and_eager_agree_over_hundreds_of_updates_and_resume_exactly():
    eager, compiled = (policy_of(ImpalaPolicy, BOX, mode, samples=8 * 4, gamma=0.9, vtrace_lambda=0.9)
                       for mode in ("off", "on"))
    reference = policy_of(ImpalaPolicy, BOX, "off")

    def learn(policy, calls: range) -> list[dict]:
        return [policy.learn(unroll_of(reference, 8, 4, seed=call), LearnContext(progress=call / 400))
                for call in calls]

    eager_rows, compiled_rows = learn(eager, range(200)), learn(compiled, range(200))
    assert compiled.compiled_step.active and compiled.environment_record()["compile_graphs"] == 1
    assert_agree(eager_rows, compiled_rows, eager, compiled)
    state = copy.deepcopy(compiled.state_dict())
    unbroken = learn(compiled, range(200, 220))
    resumed = policy_of(ImpalaPolicy, BOX, "on", samples=8 * 4, gamma=0.9, vtrace_lambda=0.9)
    resumed.load_state_dict(state)
    assert learn(resumed, range(200, 220)) == unbroken


@pytest.mark.slow
@needs_compiler
def test_a_compiled_ppo_run_records_its_graph_and_resumes_to_the_unbroken_run(tmp_path):
    config = {"runs_dir": str(tmp_path), "env": {"id": "Pendulum-v1"}, "seed": 5,
              "policy": {"type": "ppo", "hidden_sizes": [16], "compile": "on", "minibatch_size": 64, "epochs": 2,
                         "anneal_lr": False},  # a schedule would follow the shorter budget of the first half
              "pipeline": {"num_envs": 2, "rollout_steps": 150, "max_env_steps": 1200, "eval_every": 0}}
    whole = train({**config, "exp_name": "whole"})
    half = train({**config, "exp_name": "half", "pipeline": {**config["pipeline"], "max_env_steps": 600}})
    train(None, ["pipeline.max_env_steps=1200"], resume=half["run_dir"])
    rows = [metrics_rows(Path(run["run_dir"]), TIMINGS) for run in (whole, half)]
    assert rows[0] == rows[1] and len(rows[0]) == 4
    session = json.loads((Path(whole["run_dir"]) / "environment.json").read_text())["sessions"][0]
    assert session["compile"] is True and session["compile_graphs"] == 1 and session["compile_seconds"] > 0


@pytest.mark.parametrize("where", ["building", "compiling"])
def test_a_failed_compile_under_auto_trains_eager_and_its_record_says_so(compiler_present, monkeypatch, where):
    """auto is a speed choice: a compile that fails (building the step, or compiling its first graph) trains eager,
    exactly as an eager learner does, and environment.json says it did not compile and why; on refuses (issue 54)."""
    def broken_compile(fn, **kwargs):
        if where == "building":
            raise RuntimeError("inductor broke")

        def compiled(*args, **kwargs):
            raise RuntimeError("inductor broke")
        return compiled
    monkeypatch.setattr(torch, "compile", broken_compile)
    auto = policy_of(PPOPolicy, BOX, "auto", samples=64, minibatch_size=16)  # 400,000 updates planned: auto is on
    eager = policy_of(PPOPolicy, BOX, "off", samples=64, minibatch_size=16)
    assert auto.compiled_step is not None and auto.compile_reason == "auto"
    reference = policy_of(PPOPolicy, BOX, "off")
    rows = []
    for policy in (auto, eager):
        torch.manual_seed(3)
        rows.append([policy.learn(rollout_of(reference, 32, 2, (), seed=call), LearnContext()) for call in range(2)])
    assert rows[0] == rows[1]
    record = auto.environment_record()
    assert record["compile"] is False and record["compile_failure"] == "RuntimeError: inductor broke"
    with pytest.raises(ConfigError, match="^policy.compile=on: compiling PPOPolicy's learning step failed"):
        on = policy_of(PPOPolicy, BOX, "on", samples=64, minibatch_size=16)
        on.learn(rollout_of(reference, 32, 2, (), seed=0), LearnContext())


def test_a_run_auto_keeps_eager_never_imports_the_compiler():
    """auto's own rule (planned updates, a measured learner, no encoder) is decided before the compiler is looked
    at: a short run does not pay torch._dynamo's import (about 1 s of a process's start-up here)."""
    import subprocess
    import sys

    code = ("import sys, torch\n"
            "from zoo.accel.onpolicy import resolve_onpolicy_compile\n"
            "from zoo.accel.compiled import resolve_compile\n"
            "import zoo.run\n"
            "cpu = torch.device('cpu')\n"
            "assert resolve_onpolicy_compile('auto', True, 10, 1000, False, cpu, 'P')[0] is False\n"
            "assert resolve_onpolicy_compile('auto', True, 10**6, None, False, cpu, 'A')[0] is False\n"
            "assert resolve_compile('auto', True, 10, cpu, 'S')[0] is False\n"
            "print('torch._dynamo' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
