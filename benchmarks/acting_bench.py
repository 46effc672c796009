"""Acting and valuing with small CPU networks: zoo's numpy path against torch's own tools, side by side in one run.

Usage:
    python benchmarks/acting_bench.py [--no-compile] [--iterations 300] [--rounds 3]

Alternatives (one torch thread, OpenBLAS one thread): torch eager under ``no_grad`` (zoo's ``collect`` and
``values_of``, ``numpy_acting=False``), the same under ``torch.inference_mode``, the networks (the sampling included)
under ``torch.jit.trace``, ``torch.jit.script`` and ``torch.compile`` (its compile time printed apart; skipped with
``--no-compile``), and zoo's numpy path (``zoo.accel.numpy_acting``, the default).

Micro (microseconds per call; ratio to torch eager):
- act, CartPole: one vector step of 16 envs, 4 inputs, 64-64 tanh MLP, 2 logits, Gumbel-max sample;
- act, Pendulum-like: 16 envs, 3 inputs, Gaussian 1-D (mean + sigma * normal, clipped);
  both through the rollout actor of a 16-step rollout (its set-up and hand-over included, per step);
- value a rollout: the critic on 272 observations (16 steps and the last ones, 16 envs).
End to end on configs/ppo_cartpole.py (ratio to torch eager, each alternative in its own PPOPolicy):
- collection: rollouts of 16 x 16 with their sample processing (values, GAE), env steps per second, in
  alternating rounds;
- training: ``--iterations`` collect-process-learn iterations of the serial pipeline from the same seed, seconds.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `zoo run` sets it, before numpy loads
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:  # torch.compile's first compile from an empty cache, as on a fresh
    _CACHE = tempfile.mkdtemp(prefix="acting_bench_inductor_")  # machine (not one from an earlier run's cache)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, True)

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zoo.data import Rollout  # noqa: E402
from zoo.policies import CollectOutput, PPOPolicy  # noqa: E402

ENVS, STEPS = 16, 16


class _Act(nn.Module):
    """What ``collect`` computes, as one module: the actor's forward and the sample (Gumbel-max, or Gaussian)."""

    def __init__(self, net: nn.Sequential, log_std: nn.Parameter | None) -> None:
        super().__init__()
        self.net = net
        self.discrete = log_std is None
        self.log_std = nn.Parameter(torch.zeros(1)) if log_std is None else log_std

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.net(obs)
        if self.discrete:
            return (out - torch.empty_like(out).exponential_().log()).argmax(-1), out
        sigma = self.log_std.exp().expand_as(out)
        return out + sigma * torch.randn_like(out), torch.cat([out, sigma], -1)


class _Value(nn.Module):
    def __init__(self, net: nn.Sequential) -> None:
        super().__init__()
        self.net = net

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs).squeeze(-1)


class TorchToolPolicy(PPOPolicy):
    """PPO whose ``collect`` and ``values_of`` run the model through one of torch's tools (``tool``): the networks
    are ``nn.Sequential`` views of the model's own layers, so learning moves them too. Writing ``collect`` makes
    the collector call it at every step (zoo's rule for subclasses that write their own)."""

    tool: ClassVar[str] = "trace"
    compile_seconds: ClassVar[float] = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        model = self.model
        act = _Act(nn.Sequential(model.actor_trunk, model.policy_head), None if self.discrete else model.log_std)
        value = _Value(nn.Sequential(model.critic_trunk, model.value_head))
        obs_dim = int(np.prod(self.observation_space.shape))
        self._act, self._value = self._compiled(act, value, obs_dim)

    def _compiled(self, act: nn.Module, value: nn.Module, obs_dim: int) -> tuple[Callable, Callable]:
        examples = (torch.zeros(ENVS, obs_dim), torch.zeros((STEPS + 1) * ENVS, obs_dim))
        if self.tool == "trace":
            with torch.no_grad():
                return (torch.jit.trace(act, examples[0], check_trace=False),
                        torch.jit.trace(value, examples[1], check_trace=False))
        if self.tool == "script":
            return torch.jit.script(act), torch.jit.script(value)
        start = time.perf_counter()
        compiled = torch.compile(act), torch.compile(value)
        with torch.no_grad():  # compile now, at the shapes collection uses
            compiled[0](examples[0])
            compiled[1](examples[1])
        TorchToolPolicy.compile_seconds = max(TorchToolPolicy.compile_seconds, time.perf_counter() - start)
        return compiled

    @torch.no_grad()
    def collect(self, obs: torch.Tensor) -> CollectOutput:
        action, packed = self._act(obs)
        return CollectOutput(self._env_action(action), action, {"policy_output": packed})

    @torch.no_grad()
    def values_of(self, obs: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
        leading = obs.shape[: obs.ndim - len(self.observation_space.shape)]
        return self._value(obs.reshape(-1, *self.observation_space.shape)).reshape(leading)


class InferenceModePolicy(PPOPolicy):
    """PPO's torch ``collect`` and ``values_of`` under ``torch.inference_mode`` instead of ``no_grad``."""

    def collect(self, obs: torch.Tensor) -> CollectOutput:
        with torch.inference_mode():
            out = super().collect(obs)
        return CollectOutput(out.action, out.raw_action.clone(), {"policy_output": out.extras["policy_output"].clone()})

    def values_of(self, obs: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
        with torch.inference_mode():
            return super().values_of(obs, chunk).clone()  # a normal tensor again, for learning


def _tool(name: str) -> type:
    return type(f"TorchTool_{name}", (TorchToolPolicy,), {"tool": name})


def alternatives(with_compile: bool) -> list[tuple[str, type, bool]]:
    """(name, policy class, numpy_acting)."""
    rows = [("torch eager (no_grad)", PPOPolicy, False), ("torch.inference_mode", InferenceModePolicy, False),
            ("torch.jit.trace", _tool("trace"), False), ("torch.jit.script", _tool("script"), False)]
    if with_compile:
        rows.append(("torch.compile", _tool("compile"), False))
    return [*rows, ("numpy (zoo default)", PPOPolicy, True)]


def build(cls: type, numpy_acting: bool, obs_dim: int, action_space: gym.Space, seed: int = 0) -> PPOPolicy:
    cfg = {**PPOPolicy.default_config, "hidden_sizes": [64, 64], "numpy_acting": numpy_acting, "init_log_std": -0.5}
    from easydict import EasyDict

    torch.manual_seed(seed)
    space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
    return cls(EasyDict(cfg), space, action_space, torch.device("cpu"))


def median_us(fn: Callable[[], object], calls: int, budget_s: float = 0.6) -> float:
    """Median over repeats of the time of ``fn`` (which makes ``calls`` calls), per call, in microseconds."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 5 or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times) * 1e6


def acting_time(policy: PPOPolicy, obs_dim: int) -> float:
    """Per vector step: a 16-step rollout actor's set-up, its 16 ``act`` calls and its hand-over."""
    obs = np.random.default_rng(0).standard_normal((STEPS, ENVS, obs_dim)).astype(np.float32)

    def rollout() -> None:
        actor = policy.rollout_actor(STEPS, ENVS)
        for t in range(STEPS):
            actor.act(t, obs[t])
        actor.finish()

    return median_us(rollout, STEPS)


def valuing_time(policy: PPOPolicy, obs_dim: int) -> float:
    """The critic's values of a rollout of 16 x 16 and its last observations (272 in all)."""
    flags = torch.zeros(STEPS, ENVS, dtype=torch.bool)
    rollout = Rollout(obs=torch.randn(STEPS, ENVS, obs_dim), action=torch.zeros(STEPS, ENVS, dtype=torch.int64),
                      reward=torch.ones(STEPS, ENVS), terminated=flags, truncated=flags, valid=~flags,
                      last_obs=torch.randn(ENVS, obs_dim), extras={})
    with torch.no_grad():
        return median_us(lambda: policy._rollout_values(rollout), 1)


def micro(rows: list[tuple[str, type, bool]]) -> None:
    cartpole, pendulum = gym.spaces.Discrete(2), gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    print(f"micro: microseconds per call (ratio to torch eager), {ENVS} envs, 64-64 tanh, one thread")
    print(f"{'alternative':<24} {'act CartPole':>18} {'act Pendulum':>18} {'value 272 obs':>18}")
    base: list[float] | None = None
    for name, cls, numpy_acting in rows:
        times = [acting_time(build(cls, numpy_acting, 4, cartpole), 4),
                 acting_time(build(cls, numpy_acting, 3, pendulum), 3),
                 valuing_time(build(cls, numpy_acting, 4, cartpole), 4)]
        base = base or times
        cells = " ".join(f"{t:9.1f} ({t / b:5.2f}x)" for t, b in zip(times, base))
        print(f"{name:<24} {cells}")
    compile_s = TorchToolPolicy.compile_seconds
    if any(name == "torch.compile" for name, *_ in rows):
        print(f"torch.compile: {compile_s:.1f} s to compile (the first policy's act and value networks, from an "
              f"empty cache)")


def end_to_end(rows: list[tuple[str, type, bool]], iterations: int, rounds: int) -> None:
    from zoo.config import load_config_file
    from zoo.config.resolve import resolve_config
    from zoo.pipelines.serial_onpolicy import SerialOnPolicyPipeline

    cfg = resolve_config(load_config_file(ROOT / "configs" / "ppo_cartpole.py"))
    rates: dict[str, list[float]] = {name: [] for name, *_ in rows}
    train_s: dict[str, list[float]] = {name: [] for name, *_ in rows}
    for _ in range(rounds):  # alternating rounds: a slow spell of the machine weighs on all alike
        for name, cls, numpy_acting in rows:
            pipeline = SerialOnPolicyPipeline.create(cfg)
            try:
                collector = pipeline.collector
                pipeline.policy = policy = _pipeline_policy(cls, numpy_acting, cfg, collector)
                policy.process_rollout(collector.rollout(policy, STEPS))  # warm-up
                start = time.perf_counter()
                for _ in range(64):
                    policy.process_rollout(collector.rollout(policy, STEPS))
                rates[name].append(64 * STEPS * ENVS / (time.perf_counter() - start))
                pipeline.policy = _pipeline_policy(cls, numpy_acting, cfg, collector)  # fresh weights, same seed
                start = time.perf_counter()
                for _ in range(iterations):
                    pipeline.iterate()
                train_s[name].append(time.perf_counter() - start)
            finally:
                pipeline.close()
    print(f"\nend to end, configs/ppo_cartpole.py ({ENVS} envs x {STEPS} steps; medians of {rounds} alternating "
          f"rounds; ratio to torch eager)")
    print(f"{'alternative':<24} {'collect+process steps/s':>28} {f'train {iterations} iterations s':>30}")
    base_rate = statistics.median(rates[rows[0][0]])
    base_train = statistics.median(train_s[rows[0][0]])
    for name, *_ in rows:
        rate, seconds = statistics.median(rates[name]), statistics.median(train_s[name])
        print(f"{name:<24} {rate:>18,.0f} ({rate / base_rate:5.2f}x) {seconds:>20.2f} ({seconds / base_train:5.2f}x)")


def _pipeline_policy(cls: type, numpy_acting: bool, cfg: Any, collector: Any) -> PPOPolicy:
    from easydict import EasyDict

    torch.manual_seed(0)
    policy_cfg = EasyDict({**cfg.policy, "numpy_acting": numpy_acting})
    return cls(policy_cfg, collector.observation_space, collector.action_space, torch.device("cpu"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--iterations", type=int, default=300, help="training iterations per alternative and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = alternatives(not args.no_compile)
    micro(rows)
    end_to_end(rows, args.iterations, args.rounds)


if __name__ == "__main__":
    main()
