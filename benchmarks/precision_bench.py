"""One off-policy gradient update in fp32 and in bf16 (``policy.precision``), by network width, in one run.

Overview:
    For SAC and TD3 on Hopper's spaces (11-dim observations, 3-dim actions, batch 256) and DQN on CartPole's
    (4 / 2, batch 64), builds the policy in fp32 and in bf16 from the same seed and times ``learn`` (minibatch
    draw, forward, backward, optimiser, targets) over a replay of random transitions, the two precisions
    interleaved, for hidden widths 64, 128 and 256 (two layers). Prints ms per update and the bf16/fp32 speed
    ratio: where it is above 1, ``precision: auto`` may pick bf16 (``zoo.policies.precision.AUTO_MIN_WIDTH``).
    Also says whether this CPU has native bf16 matmuls (AVX-512 BF16 / AMX); without them bf16 is emulated
    and slower. One torch thread.

    python benchmarks/precision_bench.py [--updates 300] [--repeats 3]
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

from zoo.data import ReplayBuffer, Transitions  # noqa: E402
from zoo.plugins import load_plugins  # noqa: E402
from zoo.policies.base import LearnContext  # noqa: E402
from zoo.policies.precision import native_bf16  # noqa: E402
from zoo.registry import POLICY_REGISTRY  # noqa: E402

CASES = {  # policy: (obs dim, action space, batch size)
    "sac": (11, gym.spaces.Box(-1.0, 1.0, (3,), np.float32), 256),
    "td3": (11, gym.spaces.Box(-1.0, 1.0, (3,), np.float32), 256),
    "dqn": (4, gym.spaces.Discrete(2), 64),
}


def _replay(obs_dim: int, action_space: gym.Space, rows: int = 10_000) -> ReplayBuffer:
    rng = np.random.default_rng(0)
    discrete = isinstance(action_space, gym.spaces.Discrete)
    action_shape = () if discrete else action_space.shape
    replay = ReplayBuffer(rows, (obs_dim,), action_shape, action_dtype=np.int64 if discrete else np.float32)
    action = rng.integers(0, 2, rows) if discrete else rng.uniform(-1, 1, (rows, *action_shape)).astype(np.float32)
    replay.add(Transitions(
        obs=rng.normal(size=(rows, obs_dim)).astype(np.float32), action=action,
        reward=rng.normal(size=rows).astype(np.float32), next_obs=rng.normal(size=(rows, obs_dim)).astype(np.float32),
        terminated=rng.random(rows) < 0.01, truncated=np.zeros(rows, bool), env=np.zeros(rows, np.int32),
    ))
    return replay


def _policy(name: str, width: int, precision: str):
    obs_dim, action_space, batch = CASES[name]
    cls = POLICY_REGISTRY.get(name)
    cfg = EasyDict({**cls.default_config, "hidden_sizes": [width, width], "batch_size": batch,
                    "precision": precision})
    torch.manual_seed(0)
    observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
    return cls(cfg, observation_space, action_space, torch.device("cpu"))


def time_updates(policy, replay: ReplayBuffer, updates: int) -> float:
    """Seconds per update of ``policy.learn`` (after 20 warm-up updates)."""
    policy.learn(replay, LearnContext(updates=20))
    start = time.perf_counter()
    policy.learn(replay, LearnContext(updates=updates))
    return (time.perf_counter() - start) / updates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--policies", nargs="+", default=list(CASES))
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_plugins()
    print(f"native bf16 matmuls on this CPU: {native_bf16(torch.device('cpu'))}; torch {torch.__version__}")
    print(f"{'policy':<6} {'width':>5} {'fp32 ms':>9} {'bf16 ms':>9} {'bf16 speed-up':>14}")
    for name in args.policies:
        replay = _replay(*CASES[name][:2])
        for width in args.widths:
            policies = {p: _policy(name, width, p) for p in ("fp32", "bf16")}
            best = {p: float("inf") for p in policies}
            for _ in range(args.repeats):  # interleaved: both precisions see the same machine state
                for precision, policy in policies.items():
                    best[precision] = min(best[precision], time_updates(policy, replay, args.updates))
            print(f"{name:<6} {width:>5} {best['fp32'] * 1e3:>9.2f} {best['bf16'] * 1e3:>9.2f} "
                  f"{best['fp32'] / best['bf16']:>13.2f}x", flush=True)


if __name__ == "__main__":
    main()
