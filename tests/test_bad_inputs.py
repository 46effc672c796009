"""Bad-input corpus: every hostile input to ``zoo run`` / ``zoo eval`` ends the same way.

For each case: exit code 2; stderr is exactly one line ``zoo: error: ...`` naming the problem (checked with a few
keywords); no traceback on stdout or stderr; and no file is created, changed or removed anywhere under the test's
directory (so no half-made run directory, nothing written outside runs_dir, and a run directory given to
``--resume`` or ``zoo eval`` is byte-identical afterwards). Cases run in-process through ``zoo.cli.main`` with a
dedicated working directory, so a default ``runs_dir`` would also land where the check sees it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from zoo.cli import main
from zoo.pipelines.loop import TrainingLoop
from zoo.registry import ENV_REGISTRY, PIPELINE_REGISTRY

TINY = [
    "--set", "pipeline.max_env_steps=64", "--set", "pipeline.num_envs=2", "--set", "pipeline.rollout_steps=16",
    "--set", "pipeline.eval_every=0",
]  # fmt: skip
GOOD = "config = dict(exp_name='t', env=dict(id='CartPole-v1'), policy=dict(type='ppo', epochs=1, minibatch_size=32))\n"

# -- custom envs and a pipeline no built-in policy runs on ---------------------------------------------------------
BOX3 = gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)


class SpaceEnv(gym.Env):
    """An env with the given spaces; episodes end after ``horizon`` steps (never when ``horizon`` is None)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, horizon: int | None = 5) -> None:
        self.observation_space, self.action_space, self.horizon = observation_space, action_space, horizon
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        done = self.horizon is not None and self.t >= self.horizon
        return self.observation_space.sample(), 1.0, done, False, {}


def endless_env() -> gym.Env:
    """Never terminates and has no time limit."""
    return SpaceEnv(BOX3, gym.spaces.Discrete(2), horizon=None)


def sized_env(size: int = 3) -> gym.Env:
    """A plugin-style env factory with one keyword argument."""
    return SpaceEnv(gym.spaces.Box(-1.0, 1.0, shape=(size,), dtype=np.float32), gym.spaces.Discrete(2))


# Dict, Tuple and Discrete observations are flattened and MultiDiscrete/MultiBinary actions are PPO's (see
# tests/test_spaces.py); what has no fixed-size flat form is refused.
def graph_obs_env() -> gym.Env:
    return SpaceEnv(gym.spaces.Graph(BOX3, gym.spaces.Discrete(2)), gym.spaces.Discrete(2))


def text_obs_env() -> gym.Env:
    return SpaceEnv(gym.spaces.Text(8), gym.spaces.Discrete(2))


def dict_sequence_obs_env() -> gym.Env:
    return SpaceEnv(gym.spaces.Dict({"a": BOX3, "items": gym.spaces.Sequence(BOX3)}), gym.spaces.Discrete(2))


def tuple_action_env() -> gym.Env:
    return SpaceEnv(BOX3, gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3))))


def dict_action_env() -> gym.Env:
    return SpaceEnv(BOX3, gym.spaces.Dict({"move": gym.spaces.Discrete(2)}))


def box2d_action_env() -> gym.Env:
    return SpaceEnv(BOX3, gym.spaces.Box(-1.0, 1.0, shape=(2, 2), dtype=np.float32))


def empty_box_action_env() -> gym.Env:
    return SpaceEnv(BOX3, gym.spaces.Box(-1.0, 1.0, shape=(0,), dtype=np.float32))


ENVS = {
    "zoo-bad-endless": endless_env,
    "zoo-bad-sized": sized_env,
    "zoo-bad-graph-obs": graph_obs_env,
    "zoo-bad-text-obs": text_obs_env,
    "zoo-bad-dict-sequence-obs": dict_sequence_obs_env,
    "zoo-bad-tuple-action": tuple_action_env,
    "zoo-bad-dict-action": dict_action_env,
    "zoo-bad-box2d-action": box2d_action_env,
    "zoo-bad-empty-box-action": empty_box_action_env,
}
DUMMY_PIPELINE = "zoo-bad-dummy-pipeline"


class DummyPipeline(TrainingLoop):
    """A pipeline that no built-in policy lists in its ``pipelines``."""

    def build(self) -> None:
        raise AssertionError("a policy was built on a pipeline it does not support")


class Unsafe:
    """An object that ``torch.load(weights_only=True)`` must refuse to unpickle."""


@pytest.fixture(scope="module", autouse=True)
def registered():
    for name, factory in ENVS.items():
        ENV_REGISTRY.register(name, factory, source="tests")
    PIPELINE_REGISTRY.register(DUMMY_PIPELINE, DummyPipeline, source="tests")
    yield
    for name in ENVS:
        ENV_REGISTRY.unregister(name)
    PIPELINE_REGISTRY.unregister(DUMMY_PIPELINE)


def _train(root: Path, env_id: str) -> Path:
    config = root / "cfg.py"
    config.write_text(
        f"config = dict(exp_name='base', env=dict(id={env_id!r}), policy=dict(type='ppo', epochs=1, "
        f"minibatch_size=32))\n"
    )
    assert main(["run", "--config", str(config), "--set", f"runs_dir={root / 'runs'}", *TINY]) == 0
    run = root / "runs" / "base"
    for name in ("config.yaml", "metrics.jsonl", "checkpoint.pt", "model.pt"):
        assert (run / name).is_file(), name
    return run


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, registered) -> Path:
    """A finished tiny CartPole run (copied, never used directly)."""
    return _train(tmp_path_factory.mktemp("base_run"), "CartPole-v1")


@pytest.fixture(scope="module")
def endless_run(tmp_path_factory, registered) -> Path:
    """A finished tiny run on an env whose episodes never end (3-dim observations, unlike CartPole's 4)."""
    return _train(tmp_path_factory.mktemp("endless_run"), "zoo-bad-endless")


# -- the context a case builds its arguments in ------------------------------------------------------------------
@dataclass
class Ctx:
    tmp: Path
    base_source: Path
    endless_source: Path
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    @property
    def work(self) -> Path:
        return self.tmp / "work"  # the working directory of every case

    @property
    def runs(self) -> Path:
        return self.work / "runs"

    def write(self, name: str, content: str | bytes) -> str:
        path = self.work / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        return str(path)

    def new(self, *extra: str, config: str | None = None) -> list[str]:
        """``zoo run`` of a tiny CartPole config (or ``config``) into ``runs``, plus ``extra`` arguments."""
        config = config if config is not None else self.write("cfg.py", GOOD)
        return ["run", "--config", config, "--set", f"runs_dir={self.runs}", *TINY, *extra]

    def config(self, text: str, name: str = "bad.py", *extra: str) -> list[str]:
        return self.new(*extra, config=self.write(name, text))

    def run_copy(self, source: str = "base", damage: Callable[[Path], None] | None = None) -> Path:
        run = self.runs / "base"
        shutil.copytree(self.base_source if source == "base" else self.endless_source, run)
        if damage is not None:
            damage(run)
        return run

    def resume(self, damage: Callable[[Path], None] | None = None, *extra: str) -> list[str]:
        return ["run", "--resume", str(self.run_copy("base", damage)), *extra]

    def eval(self, damage: Callable[[Path], None] | None = None, *extra: str, source: str = "base") -> list[str]:
        return ["eval", str(self.run_copy(source, damage)), *extra]


@dataclass(frozen=True)
class Case:
    id: str
    args: Callable[[Ctx], list[str]]
    keywords: tuple[str, ...]


def S(*pairs: str) -> list[str]:
    """``--set`` arguments."""
    return [arg for pair in pairs for arg in ("--set", pair)]


# -- damage done to a copy of a finished run --------------------------------------------------------------------
def truncate_checkpoint(run: Path) -> None:
    data = (run / "checkpoint.pt").read_bytes()
    (run / "checkpoint.pt").write_bytes(data[: len(data) // 2])


def garbage_checkpoint(run: Path) -> None:
    (run / "checkpoint.pt").write_bytes(b"\x00\xffnot a checkpoint\x13\x37" * 64)


def empty_checkpoint(run: Path) -> None:
    (run / "checkpoint.pt").write_bytes(b"")


def missing_checkpoint(run: Path) -> None:
    (run / "checkpoint.pt").unlink()


def directory_checkpoint(run: Path) -> None:
    (run / "checkpoint.pt").unlink()
    (run / "checkpoint.pt").mkdir()


def old_format_checkpoint(run: Path) -> None:
    torch.save({"format": 1, "policy": {}}, run / "checkpoint.pt")


def list_checkpoint(run: Path) -> None:
    torch.save([1, 2, 3], run / "checkpoint.pt")


def unsafe_checkpoint(run: Path) -> None:
    torch.save({"format": 2, "policy": Unsafe()}, run / "checkpoint.pt")


def garbage_config(run: Path) -> None:
    (run / "config.yaml").write_text("env: {id: CartPole-v1\npolicy: [\n")


def list_config(run: Path) -> None:
    (run / "config.yaml").write_text("- env\n- policy\n")


def missing_config(run: Path) -> None:
    (run / "config.yaml").unlink()


def _edit_config(run: Path, old: str, new: str) -> None:
    text = (run / "config.yaml").read_text()
    assert old in text, (old, text)
    (run / "config.yaml").write_text(text.replace(old, new, 1))


def edited_hidden_sizes(run: Path) -> None:
    _edit_config(run, "hidden_sizes:\n  - 64\n  - 64\n", "hidden_sizes:\n  - 32\n")


def edited_policy_type(run: Path) -> None:
    _edit_config(run, "type: ppo", "type: no_such_policy")


def edited_learning_rate(run: Path) -> None:
    _edit_config(run, "learning_rate: 0.0003", "learning_rate: .inf")


def _lock(ctx: Ctx) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        handle = open(run / ".lock", "a+")  # noqa: SIM115 - held until the case ends
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        ctx.cleanups.append(handle.close)

    return damage


def _read_only_runs(ctx: Ctx) -> list[str]:
    parent = ctx.work / "read_only"
    parent.mkdir()
    parent.chmod(0o555)
    ctx.cleanups.append(lambda: parent.chmod(0o755))
    if os.access(parent, os.W_OK):
        pytest.skip("running as a user who can write a 0o555 directory (root)")
    return ctx.new(*S(f"runs_dir={parent / 'runs'}"))


def _unwritable_runs(ctx: Ctx) -> list[str]:
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc")
    return ctx.new(*S("runs_dir=/proc/zoo-bad-inputs/runs"))


def _file_runs(ctx: Ctx, sub: str = "") -> list[str]:
    path = ctx.write("a_file", "not a directory\n")
    return ctx.new(*S(f"runs_dir={path}{sub}"))


def _raising_module(ctx: Ctx) -> list[str]:
    ctx.write("zoo_bad_inputs_raising_module.py", "raise RuntimeError('boom at import')\n")
    body = "config = dict(policy=dict(type='ppo'), import_names=['zoo_bad_inputs_raising_module'])\n"
    return ctx.config(body)


def _directory(ctx: Ctx, name: str) -> str:
    (ctx.work / name).mkdir()
    return str(ctx.work / name)


def _render_headless(ctx: Ctx) -> list[str]:
    try:
        import pygame  # noqa: F401
    except ImportError:
        return ctx.eval(None, "--render", "--episodes", "1")
    pytest.skip("pygame is installed: rendering may work here")


def truncated_config(run: Path) -> None:
    """config.yaml cut on a line boundary: what is left still parses, and defaults would fill the rest."""
    lines = (run / "config.yaml").read_text().splitlines(keepends=True)
    (run / "config.yaml").write_text("".join(lines[: len(lines) * 2 // 3]))


def edited_lr(run: Path) -> None:
    _edit_config(run, "learning_rate: 0.0003", "learning_rate: 0.001")


def _metrics_lines(run: Path, edit: Callable[[list[bytes]], list[bytes]]) -> None:
    lines = (run / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    assert len(lines) >= 2, lines
    (run / "metrics.jsonl").write_bytes(b"".join(edit(lines)))


def metrics_garbage_line(run: Path) -> None:
    _metrics_lines(run, lambda lines: [lines[0], b"{garbage\n", *lines[1:]])


def metrics_deleted_row(run: Path) -> None:
    _metrics_lines(run, lambda lines: lines[1:])


def metrics_not_utf8(run: Path) -> None:
    _metrics_lines(run, lambda lines: [lines[0], b"\xff\xfe\xfd\n", *lines[2:]])


def metrics_directory(run: Path) -> None:
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").mkdir()


def created_but_not_configured(run: Path) -> None:
    """What a run killed between creating its directory and writing config.yaml leaves: the lock file alone."""
    for path in run.iterdir():
        path.unlink()
    (run / ".lock").write_text("12345")


def _foreign_checkpoint(ctx: Ctx) -> Callable[[Path], None]:
    """The checkpoint of another run: a network for 3-dim observations, not CartPole's 4."""
    return lambda run: shutil.copyfile(ctx.endless_source / "checkpoint.pt", run / "checkpoint.pt")


def _empty_dir(ctx: Ctx) -> str:
    ctx.runs.mkdir(parents=True)
    return str(ctx.runs)


# -- the corpus ---------------------------------------------------------------------------------------------------
CASES = [
    # command line: argparse errors are one line as well
    Case("cli-unknown-flag", lambda c: ["run", "--bogus-flag"], ("unrecognized", "--bogus-flag")),
    Case("cli-unknown-command", lambda c: ["frobnicate"], ("frobnicate",)),
    Case("cli-unknown-top-flag", lambda c: ["--nope", "list"], ("--nope",)),
    Case("cli-seed-not-int", lambda c: c.new("--seed", "abc"), ("--seed",)),
    Case("cli-seed-float", lambda c: c.new("--seed", "1.5"), ("--seed",)),
    Case("cli-config-without-value", lambda c: ["run", "--config"], ("--config",)),
    Case("cli-run-nothing", lambda c: ["run"], ("--config",)),
    Case("cli-eval-no-run-dir", lambda c: ["eval"], ("run_dir",)),
    Case("cli-list-extra-argument", lambda c: ["list", "everything"], ("everything",)),
    Case("cli-eval-episodes-not-int", lambda c: c.eval(None, "--episodes", "many"), ("--episodes",)),
    Case(
        "cli-config-and-resume",
        lambda c: ["run", "--config", c.write("cfg.py", GOOD), "--resume", str(c.run_copy())],
        ("--config", "--resume"),
    ),
    # --set syntax
    Case("set-no-equals", lambda c: c.new("--set", "policy.learning_rate"), ("policy.learning_rate", "KEY=VALUE")),
    Case("set-empty-key", lambda c: c.new("--set", "=3"), ("KEY=VALUE",)),
    Case("set-empty-path-part", lambda c: c.new("--set", "policy..gamma=0.9"), ("policy..gamma",)),
    Case("set-path-through-scalar", lambda c: c.new(*S("seed=1", "seed.x=2")), ("seed",)),
    Case(
        "set-path-through-list",
        lambda c: c.new(*S("policy.hidden_sizes=[8]", "policy.hidden_sizes.x=1")),
        ("policy.hidden_sizes",),
    ),
    Case("set-unknown-key", lambda c: c.new(*S("learning_rate=0.1")), ("learning_rate",)),
    Case("set-unknown-nested-key", lambda c: c.new(*S("policy.learnig_rate=0.1")), ("policy.learnig_rate",)),
    Case("set-policy-a2c-keeps-ppo-keys", lambda c: c.new(*S("policy.type=a2c")), ("policy.epochs",)),
    # sections that are not sections
    Case("section-policy-scalar", lambda c: c.new(*S("policy=ppo")), ("policy",)),
    Case("section-env-scalar", lambda c: c.new(*S("env=CartPole-v1")), ("env",)),
    Case("section-pipeline-list", lambda c: c.new(*S("pipeline=[1, 2]")), ("pipeline",)),
    Case("section-env-kwargs-scalar", lambda c: c.new(*S("env.kwargs=5")), ("env.kwargs",)),
    Case("section-policy-none-in-file", lambda c: c.config("config = dict(policy=None)\n"), ("policy",)),
    # names: policy, pipeline, env, device
    Case("policy-type-int", lambda c: c.new(*S("policy.type=5")), ("policy.type",)),
    Case("policy-type-list", lambda c: c.new(*S("policy.type=[ppo]")), ("policy.type",)),
    Case("policy-type-empty", lambda c: c.new(*S("policy.type=")), ("policy.type",)),
    Case("policy-type-unknown", lambda c: c.new(*S("policy.type=ppoo")), ("ppoo",)),
    Case("pipeline-type-unknown", lambda c: c.new(*S("pipeline.type=no_such_pipeline")), ("no_such_pipeline",)),
    Case(
        "pipeline-type-unsupported",
        lambda c: c.new(*S(f"pipeline.type={DUMMY_PIPELINE}")),
        (DUMMY_PIPELINE, "serial_onpolicy"),
    ),
    Case("env-id-unknown", lambda c: c.new(*S("env.id=NoSuchEnv-v0")), ("NoSuchEnv-v0",)),
    Case("env-id-empty", lambda c: c.new(*S("env.id=")), ("env.id",)),
    Case("env-id-int", lambda c: c.new(*S("env.id=5")), ("env.id",)),
    Case("device-unknown", lambda c: c.new("--device", "tpu"), ("tpu",)),
    Case("device-bad-cuda", lambda c: c.new("--device", "cuda:abc"), ("cuda",)),
    Case("vector-mode-unknown", lambda c: c.new(*S("pipeline.vector_mode=turbo")), ("pipeline.vector_mode",)),
    Case("activation-int", lambda c: c.new(*S("policy.activation=3")), ("policy.activation",)),
    # non-finite and out-of-range hyper-parameters
    Case("lr-inf", lambda c: c.new(*S("policy.learning_rate=.inf")), ("policy.learning_rate",)),
    Case("lr-nan", lambda c: c.new(*S("policy.learning_rate=.nan")), ("policy.learning_rate",)),
    Case("lr-1e400-overflows-to-inf", lambda c: c.new(*S("policy.learning_rate=1e400")), ("policy.learning_rate",)),
    Case("lr-1e300", lambda c: c.new(*S("policy.learning_rate=1e300")), ("policy.learning_rate",)),
    Case("lr-negative", lambda c: c.new(*S("policy.learning_rate=-0.001")), ("policy.learning_rate",)),
    Case("lr-string-inf", lambda c: c.new(*S("policy.learning_rate=inf")), ("policy.learning_rate",)),
    Case(
        "lr-inf-in-py",
        lambda c: c.config("config = dict(policy=dict(type='ppo', learning_rate=float('inf')))\n"),
        ("policy.learning_rate",),
    ),
    Case(
        "lr-nan-in-py",
        lambda c: c.config("config = dict(policy=dict(type='ppo', learning_rate=float('nan')))\n"),
        ("policy.learning_rate",),
    ),
    Case(
        "lr-huge-int-in-py",
        lambda c: c.config("config = dict(policy=dict(type='ppo', learning_rate=10**400))\n"),
        ("policy.learning_rate",),
    ),
    Case("lr-bool", lambda c: c.new(*S("policy.learning_rate=true")), ("policy.learning_rate",)),
    Case("lr-huge-int-set", lambda c: c.new(*S("policy.learning_rate=" + "1" + "0" * 400)), ("policy.learning_rate",)),
    Case("gamma-negative", lambda c: c.new(*S("policy.gamma=-0.1")), ("policy.gamma",)),
    Case("gamma-nan", lambda c: c.new(*S("policy.gamma=.nan")), ("policy.gamma",)),
    Case("gae-lambda-above-1", lambda c: c.new(*S("policy.gae_lambda=1.5")), ("policy.gae_lambda",)),
    Case("clip-ratio-inf", lambda c: c.new(*S("policy.clip_ratio=.inf")), ("policy.clip_ratio",)),
    Case("max-grad-norm-negative", lambda c: c.new(*S("policy.max_grad_norm=-1")), ("policy.max_grad_norm",)),
    Case("init-log-std-1e300", lambda c: c.new(*S("policy.init_log_std=1e300")), ("policy.init_log_std",)),
    Case("value-coef-nan", lambda c: c.new(*S("policy.value_coef=.nan")), ("policy.value_coef",)),
    Case("epochs-zero", lambda c: c.new(*S("policy.epochs=0")), ("policy.epochs",)),
    Case("minibatch-zero", lambda c: c.new(*S("policy.minibatch_size=0")), ("policy.minibatch_size",)),
    Case("dual-clip-string", lambda c: c.new(*S("policy.dual_clip=big")), ("policy.dual_clip",)),
    Case("stop-return-inf", lambda c: c.new(*S("pipeline.stop_return=.inf")), ("pipeline.stop_return",)),
    Case("log-every-nan", lambda c: c.new(*S("pipeline.log_every_s=.nan")), ("pipeline.log_every_s",)),
    Case("max-env-steps-zero", lambda c: c.new(*S("pipeline.max_env_steps=0")), ("pipeline.max_env_steps",)),
    Case("max-env-steps-fraction", lambda c: c.new(*S("pipeline.max_env_steps=100.5")), ("pipeline.max_env_steps",)),
    Case("eval-every-negative", lambda c: c.new(*S("pipeline.eval_every=-1")), ("pipeline.eval_every",)),
    Case("num-envs-zero", lambda c: c.new(*S("pipeline.num_envs=0")), ("pipeline.num_envs",)),
    Case("rollout-steps-string", lambda c: c.new(*S("pipeline.rollout_steps=lots")), ("pipeline.rollout_steps",)),
    # data-parallel pipeline: refused before any worker starts
    Case("world-size-zero", lambda c: c.new(*S("pipeline.type=parallel_sync", "pipeline.world_size=0")),
         ("pipeline.world_size",)),
    Case("world-size-string", lambda c: c.new(*S("pipeline.type=parallel_sync", "pipeline.world_size=two")),
         ("pipeline.world_size",)),
    Case("backend-unknown", lambda c: c.new(*S("pipeline.type=parallel_sync", "pipeline.backend=mpi")),
         ("pipeline.backend",)),
    Case("backend-nccl-on-cpu", lambda c: c.new(*S("pipeline.type=parallel_sync", "pipeline.backend=nccl")),
         ("nccl", "device")),
    Case("world-size-on-serial", lambda c: c.new(*S("pipeline.world_size=2")), ("pipeline.world_size",)),
    # malformed lists
    Case("hidden-float", lambda c: c.new(*S("policy.hidden_sizes=[64.5]")), ("policy.hidden_sizes",)),
    Case("hidden-bool", lambda c: c.new(*S("policy.hidden_sizes=[true]")), ("policy.hidden_sizes",)),
    Case(
        "hidden-bool-in-py",
        lambda c: c.config("config = dict(policy=dict(type='ppo', hidden_sizes=[True]))\n"),
        ("policy.hidden_sizes",),
    ),
    Case("hidden-negative", lambda c: c.new(*S("policy.hidden_sizes=[-1]")), ("policy.hidden_sizes",)),
    Case("hidden-zero", lambda c: c.new(*S("policy.hidden_sizes=[64, 0]")), ("policy.hidden_sizes",)),
    Case("hidden-comma-string", lambda c: c.new(*S("policy.hidden_sizes=64,64")), ("policy.hidden_sizes",)),
    Case("hidden-scalar", lambda c: c.new(*S("policy.hidden_sizes=64")), ("policy.hidden_sizes",)),
    Case("hidden-mapping", lambda c: c.new(*S("policy.hidden_sizes={a: 1}")), ("policy.hidden_sizes",)),
    Case("hidden-nested-list", lambda c: c.new(*S("policy.hidden_sizes=[[64]]")), ("policy.hidden_sizes",)),
    Case("import-names-string", lambda c: c.new(*S("import_names=os")), ("import_names",)),
    Case(
        "import-names-missing-module",
        lambda c: c.new(*S("import_names=[zoo_no_such_module_xyz]")),
        ("zoo_no_such_module_xyz",),
    ),
    Case("import-names-module-raises", _raising_module, ("zoo_bad_inputs_raising_module",)),
    # absurd sizes: refused before anything is allocated
    Case("hidden-1e9", lambda c: c.new(*S("policy.hidden_sizes=[1000000000]")), ("policy.hidden_sizes",)),
    Case("hidden-memory", lambda c: c.new(*S("policy.hidden_sizes=[1000000, 1000000]")), ("hidden_sizes",)),
    Case("num-envs-1e6", lambda c: c.new(*S("pipeline.num_envs=1000000")), ("pipeline.num_envs",)),
    Case("rollout-memory", lambda c: c.new(*S("pipeline.rollout_steps=1000000000000")), ("rollout_steps",)),
    Case(
        "rollout-x-envs-memory",
        lambda c: c.new(*S("pipeline.num_envs=65536", "pipeline.rollout_steps=10000000")),
        ("rollout_steps",),
    ),
    Case("epochs-1e9", lambda c: c.new(*S("policy.epochs=1000000000")), ("policy.epochs",)),
    Case("stats-window-1e12", lambda c: c.new(*S("pipeline.stats_window=1000000000000")), ("pipeline.stats_window",)),
    # seeds and threads
    Case("seed-negative", lambda c: c.new("--seed", "-1"), ("seed",)),
    Case("seed-2-70", lambda c: c.new("--seed", str(2**70)), ("seed",)),
    Case("seed-2-70-set", lambda c: c.new(*S(f"seed={2**70}")), ("seed",)),
    Case("seed-400-digits-cli", lambda c: c.new("--seed", "1" + "0" * 400), ("seed",)),
    Case("seed-5000-digits-set", lambda c: c.new(*S("seed=" + "1" * 5000)), ("seed",)),
    Case("seed-float-set", lambda c: c.new(*S("seed=1.5")), ("seed",)),
    Case("seed-bool-set", lambda c: c.new(*S("seed=true")), ("seed",)),
    Case("seed-string-in-py", lambda c: c.config("config = dict(policy=dict(type='ppo'), seed='42')\n"), ("seed",)),
    Case(
        "seed-huge-int-in-py", lambda c: c.config("config = dict(policy=dict(type='ppo'), seed=10**400)\n"), ("seed",)
    ),
    Case("torch-threads-zero", lambda c: c.new(*S("torch_threads=0")), ("torch_threads",)),
    Case("torch-threads-1e6", lambda c: c.new(*S("torch_threads=1000000")), ("torch_threads",)),
    Case(
        "torch-threads-huge-int-in-py",
        lambda c: c.config("config = dict(policy=dict(type='ppo'), torch_threads=10**400)\n"),
        ("torch_threads",),
    ),
    # env kwargs and episode limits
    Case("env-kwargs-unknown-gym", lambda c: c.new(*S("env.kwargs.no_such_kwarg=1")), ("no_such_kwarg",)),
    Case(
        "env-kwargs-unknown-plugin",
        lambda c: c.new(*S("env.id=zoo-bad-sized", "env.kwargs.no_such_kwarg=1")),
        ("no_such_kwarg",),
    ),
    Case(
        "env-kwargs-bad-value-plugin",
        lambda c: c.new(*S("env.id=zoo-bad-sized", "env.kwargs.size=-4")),
        ("zoo-bad-sized",),
    ),
    Case("max-episode-steps-fraction", lambda c: c.new(*S("env.max_episode_steps=1.5")), ("env.max_episode_steps",)),
    Case("max-episode-steps-zero", lambda c: c.new(*S("env.max_episode_steps=0")), ("env.max_episode_steps",)),
    Case("max-episode-steps-string", lambda c: c.new(*S("env.max_episode_steps=forever")), ("env.max_episode_steps",)),
    # spaces zoo cannot handle: refused before training, naming the space and what is supported
    Case("space-graph-obs", lambda c: c.new(*S("env.id=zoo-bad-graph-obs")), ("Graph observations", "Box")),
    Case("space-text-obs", lambda c: c.new(*S("env.id=zoo-bad-text-obs")), ("Text observations", "Box")),
    Case(
        "space-dict-sequence-obs",
        lambda c: c.new(*S("env.id=zoo-bad-dict-sequence-obs")),
        ("Dict observations", "Sequence at observation['items']", "Box"),
    ),
    Case("space-tuple-action", lambda c: c.new(*S("env.id=zoo-bad-tuple-action")), ("action space", "Tuple", "Box")),
    Case("space-dict-action", lambda c: c.new(*S("env.id=zoo-bad-dict-action")), ("action space", "Dict", "Box")),
    Case("space-box-2x2-action", lambda c: c.new(*S("env.id=zoo-bad-box2d-action")), ("action space", "(2, 2)", "Box")),
    Case(
        "space-empty-box-action",
        lambda c: c.new(*S("env.id=zoo-bad-empty-box-action")),
        ("action space", "(0,)"),
    ),
    # exp_name and runs_dir
    Case("exp-name-parent", lambda c: c.new("--exp-name", "../x"), ("exp_name",)),
    Case("exp-name-grandparent", lambda c: c.new("--exp-name", "../../escaped"), ("exp_name",)),
    Case("exp-name-absolute", lambda c: c.new("--exp-name", str(c.tmp / "absolute_escape")), ("exp_name",)),
    Case("exp-name-empty", lambda c: c.new("--exp-name", ""), ("exp_name",)),
    Case("exp-name-blank", lambda c: c.new("--exp-name", "   "), ("exp_name",)),
    Case("exp-name-dot", lambda c: c.new("--exp-name", "."), ("exp_name",)),
    Case("exp-name-dotdot", lambda c: c.new("--exp-name", ".."), ("exp_name",)),
    Case("exp-name-hidden", lambda c: c.new("--exp-name", ".hidden"), ("exp_name",)),
    Case("exp-name-nested", lambda c: c.new("--exp-name", "a/b"), ("exp_name",)),
    Case("exp-name-backslash", lambda c: c.new("--exp-name", "a\\b"), ("exp_name",)),
    Case("exp-name-nul", lambda c: c.new("--exp-name", "a\0b"), ("exp_name",)),
    Case("exp-name-too-long", lambda c: c.new("--exp-name", "x" * 300), ("exp_name",)),
    Case("exp-name-int", lambda c: c.new(*S("exp_name=5")), ("exp_name",)),
    Case(
        "exp-name-parent-in-py",
        lambda c: c.config("config = dict(policy=dict(type='ppo'), exp_name='../x')\n"),
        ("exp_name",),
    ),
    Case("runs-dir-is-file", _file_runs, ("runs_dir",)),
    Case("runs-dir-under-file", lambda c: _file_runs(c, "/sub"), ("runs_dir",)),
    Case("runs-dir-dev-null", lambda c: c.new(*S("runs_dir=/dev/null")), ("runs_dir",)),
    Case("runs-dir-empty", lambda c: c.new(*S("runs_dir=")), ("runs_dir",)),
    Case("runs-dir-int", lambda c: c.new(*S("runs_dir=5")), ("runs_dir",)),
    Case("runs-dir-read-only", _read_only_runs, ("runs_dir",)),
    Case("runs-dir-cannot-be-created", _unwritable_runs, ("runs_dir",)),
    # config files
    Case("config-missing", lambda c: c.new(config=str(c.work / "nope.py")), ("nope.py",)),
    Case("config-is-directory", lambda c: c.new(config=_directory(c, "dir.py")), ("dir.py",)),
    Case("config-bad-extension", lambda c: c.new(config=c.write("cfg.toml", "[policy]\ntype = 'ppo'\n")), (".toml",)),
    Case("config-yaml-top-level-list", lambda c: c.config("- policy\n- env\n", "bad.yaml"), ("mapping",)),
    Case("config-yaml-empty", lambda c: c.config("", "bad.yaml"), ("mapping",)),
    Case("config-yaml-scalar", lambda c: c.config("ppo\n", "bad.yaml"), ("mapping",)),
    Case("config-yaml-syntax", lambda c: c.config("policy: {type: ppo\n", "bad.yaml"), ("bad.yaml",)),
    Case(
        "config-yaml-python-tag",
        lambda c: c.config("policy: !!python/object/apply:os.system ['echo pwned']\n", "bad.yaml"),
        ("bad.yaml",),
    ),
    Case("config-yaml-int-key", lambda c: c.config("policy: {type: ppo}\n1: 2\n", "bad.yaml"), ("1",)),
    Case(
        "config-yaml-binary", lambda c: c.new(config=c.write("bad.yaml", b"\xff\xfe\x00garbage\x80\x81")), ("bad.yaml",)
    ),
    Case("config-json-syntax", lambda c: c.config('{"policy": {"type": "ppo",}', "bad.json"), ("bad.json",)),
    Case("config-json-list", lambda c: c.config('[{"policy": {"type": "ppo"}}]', "bad.json"), ("mapping",)),
    Case(
        "config-py-raises",
        lambda c: c.config("config = dict(policy=dict(type='ppo'))\nx = 1 / 0\n"),
        ("ZeroDivisionError", "bad.py"),
    ),
    Case("config-py-syntax", lambda c: c.config("config = dict(policy=dict(type='ppo')\n"), ("bad.py",)),
    Case("config-py-no-config", lambda c: c.config("settings = dict(policy=dict(type='ppo'))\n"), ("config",)),
    Case("config-py-not-mapping", lambda c: c.config("config = [('policy', dict(type='ppo'))]\n"), ("mapping",)),
    Case("config-py-sys-exit", lambda c: c.config("import sys\nsys.exit(3)\n"), ("bad.py",)),
    Case(
        "config-py-self-reference",
        lambda c: c.config("d = {}\nd['d'] = d\nconfig = dict(policy=dict(type='ppo'), env=dict(kwargs=d))\n"),
        ("env.kwargs",),
    ),
    Case(
        "config-py-no-policy-type",
        lambda c: c.config("config = dict(policy=dict(learning_rate=1e-3))\n"),
        ("policy.type",),
    ),
    Case(
        "config-py-unknown-section",
        lambda c: c.config("config = dict(policy=dict(type='ppo'), polcy=dict())\n"),
        ("polcy",),
    ),
    Case(
        "config-py-object-value",
        lambda c: c.config("config = dict(policy=dict(type='ppo', gamma=object()))\n"),
        ("policy.gamma",),
    ),
    # --resume
    Case("resume-missing-dir", lambda c: ["run", "--resume", str(c.work / "no_such_run")], ("no_such_run",)),
    Case("resume-empty-dir", lambda c: ["run", "--resume", _empty_dir(c)], ("run directory",)),
    Case("resume-file", lambda c: ["run", "--resume", c.write("a_file", "x")], ("a_file",)),
    Case("resume-truncated-checkpoint", lambda c: c.resume(truncate_checkpoint), ("checkpoint.pt",)),
    Case("resume-garbage-checkpoint", lambda c: c.resume(garbage_checkpoint), ("checkpoint.pt",)),
    Case("resume-empty-checkpoint", lambda c: c.resume(empty_checkpoint), ("checkpoint.pt",)),
    Case("resume-missing-checkpoint", lambda c: c.resume(missing_checkpoint), ("checkpoint",)),
    Case("resume-checkpoint-is-dir", lambda c: c.resume(directory_checkpoint), ("checkpoint.pt",)),
    Case("resume-old-format-checkpoint", lambda c: c.resume(old_format_checkpoint), ("checkpoint.pt",)),
    Case("resume-list-checkpoint", lambda c: c.resume(list_checkpoint), ("checkpoint.pt",)),
    Case("resume-unsafe-checkpoint", lambda c: c.resume(unsafe_checkpoint), ("checkpoint.pt",)),
    Case("resume-foreign-checkpoint", lambda c: c.resume(_foreign_checkpoint(c)), ("checkpoint",)),
    Case("resume-garbage-config", lambda c: c.resume(garbage_config), ("config.yaml",)),
    Case("resume-list-config", lambda c: c.resume(list_config), ("mapping",)),
    Case("resume-missing-config", lambda c: c.resume(missing_config), ("config.yaml",)),
    Case("resume-edited-hidden-sizes", lambda c: c.resume(edited_hidden_sizes), ("checkpoint",)),
    Case("resume-edited-policy-type", lambda c: c.resume(edited_policy_type), ("no_such_policy",)),
    Case("resume-edited-lr-inf", lambda c: c.resume(edited_learning_rate), ("policy.learning_rate",)),
    Case(
        "resume-change-hidden-sizes", lambda c: c.resume(None, *S("policy.hidden_sizes=[32]")), ("policy.hidden_sizes",)
    ),
    Case("resume-change-env", lambda c: c.resume(None, *S("env.id=Acrobot-v1")), ("env",)),
    Case("resume-change-seed", lambda c: c.resume(None, "--seed", "7"), ("seed",)),
    Case("resume-change-exp-name", lambda c: c.resume(None, "--exp-name", "other"), ("exp_name",)),
    Case("resume-change-num-envs", lambda c: c.resume(None, *S("pipeline.num_envs=4")), ("pipeline.num_envs",)),
    Case("resume-lr-nan", lambda c: c.resume(None, *S("policy.learning_rate=.nan")), ("policy.learning_rate",)),
    Case(
        "resume-budget-negative", lambda c: c.resume(None, *S("pipeline.max_env_steps=-5")), ("pipeline.max_env_steps",)
    ),
    Case("resume-bad-set-syntax", lambda c: c.resume(None, "--set", "pipeline"), ("KEY=VALUE",)),
    Case("resume-locked", lambda c: c.resume(_lock(c)), ("in use",)),
    Case("resume-truncated-config", lambda c: c.resume(truncated_config), ("config.yaml", "checkpoint", "--repair")),
    Case("resume-edited-config-value", lambda c: c.resume(edited_lr), ("policy.learning_rate", "--set", "--repair")),
    Case("resume-metrics-garbage-line", lambda c: c.resume(metrics_garbage_line), ("metrics.jsonl", "line 2")),
    Case("resume-metrics-deleted-row", lambda c: c.resume(metrics_deleted_row), ("metrics.jsonl", "iteration 1")),
    Case("resume-metrics-not-utf8", lambda c: c.resume(metrics_not_utf8), ("metrics.jsonl", "line 2")),
    Case("resume-metrics-is-directory", lambda c: c.resume(metrics_directory), ("metrics.jsonl", "directory")),
    Case("resume-killed-before-config", lambda c: c.resume(created_but_not_configured), ("config.yaml", "again")),
    Case("repair-without-resume", lambda c: c.new("--repair"), ("--repair", "--resume")),
    Case("plot-metrics-garbage-line", lambda c: ["plot", str(c.run_copy("base", metrics_garbage_line))],
         ("metrics.jsonl", "line 2")),
    Case("plot-metrics-not-utf8", lambda c: ["plot", str(c.run_copy("base", metrics_not_utf8))],
         ("metrics.jsonl", "line 2")),
    # zoo eval
    Case("eval-episodes-zero", lambda c: c.eval(None, "--episodes", "0"), ("--episodes",)),
    Case("eval-episodes-negative", lambda c: c.eval(None, "--episodes", "-3"), ("--episodes",)),
    Case("eval-episodes-huge", lambda c: c.eval(None, "--episodes", "99999999999"), ("--episodes",)),
    Case("eval-seed-negative", lambda c: c.eval(None, "--seed", "-1"), ("--seed",)),
    Case("eval-seed-huge", lambda c: c.eval(None, "--seed", str(2**70)), ("--seed",)),
    Case("eval-step-limit-zero", lambda c: c.eval(None, "--step-limit", "0"), ("--step-limit",)),
    Case("eval-missing-dir", lambda c: ["eval", str(c.work / "no_such_run")], ("no_such_run",)),
    Case("eval-file", lambda c: ["eval", c.write("a_file", "x")], ("a_file",)),
    Case("eval-dir-without-config", lambda c: c.eval(missing_config), ("config.yaml",)),
    Case("eval-truncated-checkpoint", lambda c: c.eval(truncate_checkpoint), ("checkpoint.pt",)),
    Case("eval-garbage-checkpoint", lambda c: c.eval(garbage_checkpoint), ("checkpoint.pt",)),
    Case("eval-empty-checkpoint", lambda c: c.eval(empty_checkpoint), ("checkpoint.pt",)),
    Case("eval-missing-checkpoint", lambda c: c.eval(missing_checkpoint), ("checkpoint",)),
    Case("eval-checkpoint-is-dir", lambda c: c.eval(directory_checkpoint), ("checkpoint.pt",)),
    Case("eval-old-format-checkpoint", lambda c: c.eval(old_format_checkpoint), ("checkpoint.pt",)),
    Case("eval-unsafe-checkpoint", lambda c: c.eval(unsafe_checkpoint), ("checkpoint.pt",)),
    Case("eval-foreign-checkpoint", lambda c: c.eval(_foreign_checkpoint(c)), ("checkpoint.pt",)),
    Case("eval-garbage-config", lambda c: c.eval(garbage_config), ("config.yaml",)),
    Case("eval-edited-hidden-sizes", lambda c: c.eval(edited_hidden_sizes), ("checkpoint.pt",)),
    Case("eval-edited-policy-type", lambda c: c.eval(edited_policy_type), ("no_such_policy",)),
    Case(
        "eval-never-ending-env",
        lambda c: c.eval(None, "--episodes", "2", "--step-limit", "50", source="endless"),
        ("50 steps", "max_episode_steps"),
    ),
    Case("eval-render-headless", _render_headless, ("pygame",)),
]


# -- the check ----------------------------------------------------------------------------------------------------
def _tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` with a digest of its content ('dir' for directories; a lock file's content, the
    owner's pid, is not compared)."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            found[os.path.relpath(os.path.join(dirpath, name), root)] = "dir"
        for name in filenames:
            path = os.path.join(dirpath, name)
            relative = os.path.relpath(path, root)
            if name == ".lock" or not os.path.isfile(path):
                found[relative] = "special"
                continue
            with open(path, "rb") as stream:
                found[relative] = hashlib.sha256(stream.read()).hexdigest()
    return found


def _invoke(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int | str | None, str, str]:
    try:
        code: int | str | None = main(argv)
    except SystemExit as exc:
        code = exc.code
    except Exception as exc:  # noqa: BLE001 - an exception escaping main is the failure being tested for
        captured = capsys.readouterr()
        pytest.fail(
            f"zoo raised {type(exc).__name__}: {exc}\nstdout: {captured.out[-2000:]}\nstderr: {captured.err[-2000:]}\n"
            f"{traceback.format_exc()}"
        )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_no_files(case, tmp_path, capsys, monkeypatch, base_run, endless_run):
    ctx = Ctx(tmp_path, base_run, endless_run)
    ctx.work.mkdir()
    monkeypatch.chdir(ctx.work)
    monkeypatch.setattr(sys, "path", list(sys.path))  # import_names and import_paths extend sys.path
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # no __pycache__ from modules next to a config
    try:
        argv = case.args(ctx)
        before = _tree(tmp_path)
        siblings = sorted(os.listdir(tmp_path.parent))
        capsys.readouterr()
        code, out, err = _invoke(argv, capsys)
        after = _tree(tmp_path)
    finally:
        for cleanup in reversed(ctx.cleanups):
            cleanup()

    report = f"argv={argv!r}\nexit={code!r}\nstdout={out[-2000:]!r}\nstderr={err[-3000:]!r}"
    assert "Traceback" not in out and "Traceback" not in err, report
    assert code == 2, report
    lines = err.splitlines()
    assert len(lines) == 1, f"stderr must be exactly one line\n{report}"
    line = lines[0]
    assert line.startswith("zoo: error:") and line[len("zoo: error:") :].strip(), report
    for keyword in case.keywords:
        assert keyword.lower() in line.lower(), f"the error line does not name {keyword!r}\n{report}"
    assert "run_dir=" not in out and "mean_return=" not in out, report
    created = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(path for path in set(before) & set(after) if before[path] != after[path])
    assert not (created or removed or changed), f"created={created} removed={removed} changed={changed}\n{report}"
    assert sorted(os.listdir(tmp_path.parent)) == siblings, f"something was written beside tmp_path\n{report}"


def test_the_corpus_is_large_and_distinct():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 45
