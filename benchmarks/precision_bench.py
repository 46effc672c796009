"""One off-policy gradient update in fp32 and in bf16 (``policy.precision``), by network width, in one run.

Overview:
    For SAC and TD3 on Hopper's spaces (11-dim observations, 3-dim actions, batch 256, widths 64-256), DQN on
    CartPole's (4 / 2, widths 256 and 512, batch 64 and 256) and DQN's NatureCNN on Atari frames (batch 32),
    builds the policy in fp32 and in bf16 from the same seed and times ``learn`` (minibatch draw, forward,
    backward, optimiser, targets) over a replay of random transitions, the two precisions interleaved. Prints ms
    per update, the bf16/fp32 speed ratio, and what ``precision: auto`` picks there (it must never pick bf16 where
    the ratio is below 1: ``zoo.accel.precision``: ``AUTO_MIN_BATCH``, ``AUTO_MIN_WIDTH``).
    Also says whether this CPU has native bf16 matmuls (AVX-512 BF16 / AMX); without them bf16 is emulated
    and slower. One torch thread.

    python benchmarks/precision_bench.py [--updates 200] [--repeats 2] [--policies sac td3 dqn]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from easydict import EasyDict  # noqa: E402

from zoo.accel.precision import native_bf16  # noqa: E402
from zoo.data import ReplayBuffer, Transitions  # noqa: E402
from zoo.plugins import load_plugins  # noqa: E402
from zoo.policies.base import LearnContext  # noqa: E402
from zoo.registry import POLICY_REGISTRY  # noqa: E402

BOX3 = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
# (policy, observation shape, action space, hidden sizes, batch size): the cases of docs/speed.md's precision figures
CASES = [("sac", (11,), BOX3, [w, w], 256) for w in (64, 128, 256)] + [
    ("td3", (11,), BOX3, [w, w], 256) for w in (64, 128, 256)] + [
    ("dqn", (4,), gym.spaces.Discrete(2), [w, w], batch) for w, batch in ((256, 64), (512, 64), (256, 256), (512, 256))
] + [("dqn", (4, 84, 84), gym.spaces.Discrete(6), [], 32)]


def _replay(obs_shape: tuple[int, ...], action_space: gym.Space, rows: int = 5_000) -> ReplayBuffer:
    rng = np.random.default_rng(0)
    discrete = isinstance(action_space, gym.spaces.Discrete)
    images = len(obs_shape) == 3
    action_shape = () if discrete else action_space.shape
    replay = ReplayBuffer(rows, obs_shape, action_shape, obs_dtype=np.uint8 if images else np.float32,
                          action_dtype=np.int64 if discrete else np.float32)

    def observations() -> np.ndarray:
        if images:
            return rng.integers(0, 256, (rows, *obs_shape)).astype(np.uint8)
        return rng.normal(size=(rows, *obs_shape)).astype(np.float32)

    action = rng.integers(0, action_space.n, rows) if discrete else rng.uniform(-1, 1, (rows, *action_shape))
    replay.add(Transitions(
        obs=observations(), action=action.astype(np.int64 if discrete else np.float32),
        reward=rng.normal(size=rows).astype(np.float32), next_obs=observations(),
        terminated=rng.random(rows) < 0.01, truncated=np.zeros(rows, bool), env=np.zeros(rows, np.int32),
    ))
    return replay


def _policy(name: str, obs_shape: tuple[int, ...], action_space: gym.Space, hidden: list[int], batch: int,
            precision: str):
    cls = POLICY_REGISTRY.get(name)
    cfg = EasyDict({**cls.default_config, "hidden_sizes": hidden, "batch_size": batch, "precision": precision})
    torch.manual_seed(0)
    images = len(obs_shape) == 3
    observation_space = gym.spaces.Box(0 if images else -np.inf, 255 if images else np.inf, obs_shape,
                                       np.uint8 if images else np.float32)
    return cls(cfg, observation_space, action_space, torch.device("cpu"))


def time_updates(policy, replay: ReplayBuffer, updates: int) -> float:
    """Seconds per update of ``policy.learn`` (after 20 warm-up updates)."""
    policy.learn(replay, LearnContext(updates=20))
    start = time.perf_counter()
    policy.learn(replay, LearnContext(updates=updates))
    return (time.perf_counter() - start) / updates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--policies", nargs="+", default=["sac", "td3", "dqn"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_plugins()
    print(f"native bf16 matmuls on this CPU: {native_bf16(torch.device('cpu'))}; torch {torch.__version__}")
    print(f"{'policy':<6} {'observations':>12} {'hidden':>10} {'batch':>5} {'fp32 ms':>8} {'bf16 ms':>8} "
          f"{'speed-up':>8} {'auto':>5}")
    for name, obs_shape, action_space, hidden, batch in CASES:
        if name not in args.policies:
            continue
        replay = _replay(obs_shape, action_space)
        policies = {p: _policy(name, obs_shape, action_space, hidden, batch, p) for p in ("fp32", "bf16", "auto")}
        updates = max(10, args.updates // 10) if len(obs_shape) == 3 else args.updates
        best = {p: float("inf") for p in ("fp32", "bf16")}
        for _ in range(args.repeats):  # interleaved: both precisions see the same machine state
            for precision in best:
                best[precision] = min(best[precision], time_updates(policies[precision], replay, updates))
        print(f"{name:<6} {'x'.join(map(str, obs_shape)):>12} {'x'.join(map(str, hidden)) or '-':>10} {batch:>5} "
              f"{best['fp32'] * 1e3:>8.2f} {best['bf16'] * 1e3:>8.2f} {best['fp32'] / best['bf16']:>7.2f}x "
              f"{policies['auto'].precision:>5}", flush=True)


if __name__ == "__main__":
    main()
