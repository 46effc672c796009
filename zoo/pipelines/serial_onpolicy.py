"""Serial on-policy pipeline: vector env -> (T, B) rollout -> gae -> policy.learn -> periodic evaluation.

Envs autoreset in NEXT_STEP mode: when env i ends at step t, the observation returned at t is its final
observation, so ``next_value[t] = V(final obs)`` bootstraps a truncated step; the following step only resets
env i and is stored with ``valid = False`` and masked out of learning.
"""

from __future__ import annotations

import pickle
import random
import time
from collections import deque
from typing import Any, ClassVar

import numpy as np
import torch
from easydict import EasyDict

from ..envs import make_vector_env, wrap_vector_env
from ..envs.wrappers import EpisodeStats, NormalizeObservation, NormalizeReward
from ..policies.base import Rollout
from ..registry import POLICY_REGISTRY
from ..rl_utils import gae, gae_data
from .evaluator import evaluate_policy
from .progress import Progress
from .run_dir import RunDirectory


def _find_wrapper(venv: Any, kind: type) -> Any:
    while venv is not None:
        if isinstance(venv, kind):
            return venv
        venv = getattr(venv, "env", None)
    return None


class SerialOnPolicyPipeline:
    """Runs an on-policy policy (A2C, PPO, or a plugin with ``pipeline = "serial_onpolicy"``)."""

    default_config: ClassVar[dict[str, Any]] = {
        "num_envs": 8,
        "rollout_steps": 128,
        "vector_mode": "auto",
        "max_env_steps": 1_000_000,
        "stop_return": None,
        "normalize_obs": False,
        "normalize_reward": False,
        "clip_obs": 10.0,
        "clip_reward": 10.0,
        "eval_every": 10,
        "eval_episodes": 10,
        "checkpoint_every": 50,
        "log_every_s": 2.0,
    }
    config_ranges: ClassVar[dict[str, tuple[float | None, float | None]]] = {
        "num_envs": (1, None),
        "rollout_steps": (1, None),
        "max_env_steps": (1, None),
        "eval_every": (0, None),
        "eval_episodes": (1, None),
        "checkpoint_every": (0, None),
        "stop_return": (None, None),  # None (off) or any number, never a string
    }

    def __init__(self, cfg: EasyDict, run_dir: RunDirectory, resume: bool = False) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        pipe = cfg.pipeline
        self.device = torch.device(cfg.device)
        _seed_everything(cfg.seed)
        venv = make_vector_env(
            cfg.env.id, pipe.num_envs, seed=cfg.seed, mode=pipe.vector_mode, env_kwargs=dict(cfg.env.kwargs),
            max_episode_steps=cfg.env.max_episode_steps,
        )
        venv, _ = wrap_vector_env(
            venv, pipe.normalize_obs, pipe.normalize_reward, cfg.policy.gamma, pipe.clip_obs, pipe.clip_reward
        )
        self._attach_env(venv)
        # The env's current observation and which sub-envs autoreset next; None until the first reset.
        self._obs: np.ndarray | None = None
        self._pending_reset: np.ndarray | None = None
        policy_cls = POLICY_REGISTRY.get(cfg.policy.type)
        self.policy = policy_cls(cfg.policy, venv.single_observation_space, venv.single_action_space, self.device)
        self.iteration = 0
        self.env_steps = 0
        self.elapsed = 0.0
        self.recent_returns: deque[float] = deque(maxlen=100)
        self.recent_lengths: deque[int] = deque(maxlen=100)
        self.episodes = 0
        if resume:
            self._restore(run_dir.load_checkpoint())

    def _attach_env(self, venv: Any) -> None:
        self.venv = venv
        self.stats = _find_wrapper(venv, EpisodeStats)
        self.obs_normalizer = _find_wrapper(venv, NormalizeObservation)
        self.reward_normalizer = _find_wrapper(venv, NormalizeReward)

    # -- checkpoints --------------------------------------------------------------------------------------
    def _env_snapshot(self) -> bytes | None:
        """The whole vector env (episodes in progress, env RNGs) plus the current observation, pickled, so that
        ``--resume`` continues the episodes exactly. None when the env cannot be pickled (e.g. async workers);
        a resume then starts fresh episodes."""
        if self._obs is None:
            return None
        try:
            return pickle.dumps((self.venv, self._obs, self._pending_reset))
        except Exception:  # any env that cannot be pickled falls back to a reset on resume
            return None

    def _state(self) -> dict[str, Any]:
        return {
            "env": self._env_snapshot(),
            "policy": self.policy.state_dict(),
            "obs_normalizer": self.obs_normalizer.state_dict() if self.obs_normalizer else None,
            "reward_normalizer": self.reward_normalizer.state_dict() if self.reward_normalizer else None,
            "counters": {"iteration": self.iteration, "env_steps": self.env_steps, "elapsed": self.elapsed,
                         "episodes": self.episodes},
            "recent_returns": list(self.recent_returns),
            "recent_lengths": list(self.recent_lengths),
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
        }

    def _restore(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        if self.obs_normalizer and state["obs_normalizer"]:
            self.obs_normalizer.load_state_dict(state["obs_normalizer"])
        if self.reward_normalizer and state["reward_normalizer"]:
            self.reward_normalizer.load_state_dict(state["reward_normalizer"])
        counters = state["counters"]
        self.iteration, self.env_steps = counters["iteration"], counters["env_steps"]
        self.elapsed, self.episodes = counters["elapsed"], counters["episodes"]
        self.recent_returns.extend(state["recent_returns"])
        self.recent_lengths.extend(state["recent_lengths"])
        torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])
        if state.get("env") is not None:
            venv, self._obs, self._pending_reset = pickle.loads(state["env"])
            self.venv.close()
            self._attach_env(venv)

    def save(self, final: bool = False) -> None:
        state = self._state()
        self.run_dir.save_checkpoint(state)
        if final:
            self.run_dir.save_model({"policy": state["policy"], "obs_normalizer": state["obs_normalizer"]})

    # -- the loop -----------------------------------------------------------------------------------------
    def _collect(self, obs: np.ndarray, pending_reset: np.ndarray) -> tuple[Rollout, np.ndarray, np.ndarray]:
        steps, envs = self.cfg.pipeline.rollout_steps, self.cfg.pipeline.num_envs
        obs_buf = torch.empty((steps, envs, *obs.shape[1:]), dtype=torch.float32)
        reward = np.empty((steps, envs), dtype=np.float32)
        terminated = np.empty((steps, envs), dtype=bool)
        truncated = np.empty((steps, envs), dtype=bool)
        valid = np.empty((steps, envs), dtype=bool)
        outputs = []
        for t in range(steps):
            obs_tensor = torch.from_numpy(np.asarray(obs, dtype=np.float32))
            obs_buf[t] = obs_tensor
            out = self.policy.collect(obs_tensor.to(self.device))
            outputs.append(out)
            obs, reward[t], terminated[t], truncated[t], _ = self.venv.step(out.action)
            valid[t] = ~pending_reset
            pending_reset = terminated[t] | truncated[t]
        last_value = self.policy.value(torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device))
        value = torch.stack([o.value for o in outputs]).cpu()
        batch = Rollout(
            obs=obs_buf, action=torch.stack([o.raw_action for o in outputs]).cpu(),
            log_prob=torch.stack([o.log_prob for o in outputs]).cpu(), value=value,
            policy_output=torch.stack([o.policy_output for o in outputs]).cpu(),
            reward=torch.from_numpy(reward), terminated=torch.from_numpy(terminated),
            truncated=torch.from_numpy(truncated), valid=torch.from_numpy(valid),
            next_value=torch.cat([value[1:], last_value.cpu().unsqueeze(0)]),
        )
        return batch, obs, pending_reset

    def _advantages(self, batch: Rollout) -> None:
        invalid = ~batch.valid
        done = batch.terminated | invalid
        trace_end = batch.terminated | batch.truncated | invalid
        cfg = self.cfg.policy
        data = gae_data(batch.value, batch.next_value, batch.reward, done, trace_end)
        batch.advantage = gae(data, cfg.gamma, cfg.gae_lambda)
        batch.returns = batch.advantage + batch.value

    def run(self) -> dict[str, Any]:
        """Train until the env-step budget or ``stop_return``; returns the final summary."""
        cfg, pipe = self.cfg, self.cfg.pipeline
        if self._obs is None:
            obs, _ = self.venv.reset(seed=cfg.seed + 7919 * self.iteration)
            pending_reset = np.zeros(pipe.num_envs, dtype=bool)
        else:  # resumed from a checkpoint with the env snapshot: the episodes continue where they were
            obs, pending_reset = self._obs, self._pending_reset
        progress = Progress(pipe.max_env_steps, pipe.log_every_s)
        reason = "max_env_steps"
        start = time.perf_counter() - self.elapsed
        try:
            while self.env_steps < pipe.max_env_steps:
                self._obs = None  # an interrupt inside the rollout leaves no consistent env snapshot
                batch, obs, pending_reset = self._collect(obs, pending_reset)
                self._obs, self._pending_reset = obs, pending_reset
                self.env_steps += pipe.rollout_steps * pipe.num_envs
                self._advantages(batch)
                metrics = self.policy.learn(batch, min(self.env_steps / pipe.max_env_steps, 1.0))
                self.iteration += 1
                for episode_return, length in self.stats.pop_finished():
                    self.recent_returns.append(episode_return)
                    self.recent_lengths.append(length)
                    self.episodes += 1
                self.elapsed = time.perf_counter() - start
                row = self._row(metrics)
                if pipe.eval_every and self.iteration % pipe.eval_every == 0:
                    row.update(self._evaluate())
                self.run_dir.append_metrics(row)
                progress.update(self.env_steps, row)
                if pipe.checkpoint_every and self.iteration % pipe.checkpoint_every == 0:
                    self.save()
                if self._solved():
                    reason = "stop_return"
                    break
        except KeyboardInterrupt:
            self.elapsed = time.perf_counter() - start
            self.save()
            progress.close()
            return {"reason": "interrupted", **self._summary()}
        self.save(final=True)
        progress.close()
        return {"reason": reason, **self._summary()}

    def _solved(self) -> bool:
        target = self.cfg.pipeline.stop_return
        return target is not None and len(self.recent_returns) >= 100 and float(np.mean(self.recent_returns)) >= target

    def _row(self, metrics: dict[str, float]) -> dict[str, Any]:
        mean_return = float(np.mean(self.recent_returns)) if self.recent_returns else None
        mean_length = float(np.mean(self.recent_lengths)) if self.recent_lengths else None
        row = {
            "iteration": self.iteration, "env_steps": self.env_steps, "wall_time": round(self.elapsed, 4),
            "sps": round(self.env_steps / max(self.elapsed, 1e-9), 1), "episodes": self.episodes,
            "episode_return_mean": mean_return, "episode_length_mean": mean_length,
            "eval_return_mean": None, "eval_return_std": None,
        }
        row.update({key: float(value) for key, value in metrics.items()})
        return row

    def _evaluate(self) -> dict[str, float]:
        normalize_obs = self.obs_normalizer.normalize if self.obs_normalizer else None
        returns = evaluate_policy(self.cfg, self.policy, normalize_obs, self.cfg.pipeline.eval_episodes,
                                  seed=self.cfg.seed + 100_003 + self.iteration)
        return {"eval_return_mean": float(np.mean(returns)), "eval_return_std": float(np.std(returns))}

    def _summary(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration, "env_steps": self.env_steps, "wall_time": self.elapsed,
            "episode_return_mean": float(np.mean(self.recent_returns)) if self.recent_returns else None,
        }


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)

