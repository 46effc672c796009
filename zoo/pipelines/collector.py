"""``VectorCollector``: a vector env with its wrappers, stepped for a policy into rollouts or replay transitions.

The collector owns the env side of a run: the NEXT_STEP-autoreset vector env and its wrappers (finite checks,
episode statistics, observation and reward normalisation), the current observation and which sub-envs reset at
the next step. It never changes weights: it only asks the policy for actions (``policy.rollout_actor`` for
rollouts, ``policy.collect`` for replay transitions), and it always steps the env through its wrappers, so every
config runs the same collection code. Its ``state_dict`` holds a snapshot of the whole vector env (episodes in
progress, env RNGs, normaliser statistics: a pickle, plus what the pickle loses, such as a MuJoCo env's simulator
state, through ``zoo.envs.state``), so that a resumed run continues the very same episodes. An env whose state zoo
cannot capture is saved without its episodes: the resume says so in one line and restarts them.
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict

from ..data import Rollout, Transitions
from ..envs import EnvSpec, wrap_vector_env
from ..envs.masks import ActionMasks, mask_width, masks_of, random_valid_actions
from ..envs.state import EnvNotCaptured, EnvNotRestored, restore, snapshot
from ..envs.wrappers import EpisodeStats, NormalizeObservation, NormalizeReward
from ..errors import ConfigError, first_line
from ..policies.base import Policy
from ..policies.recurrent import zero_where
from .process import derive_seed


def _find_wrapper(venv: Any, kind: type) -> Any:
    while venv is not None:
        if isinstance(venv, kind):
            return venv
        venv = getattr(venv, "env", None)
    return None


def _float32(obs: Any) -> torch.Tensor:
    return torch.from_numpy(np.asarray(obs, dtype=np.float32))


# env ids whose training collector was told, once per process, that EnvPool at one env does not pay
_ONE_ENV_NOTICES: set[str] = set()


class VectorCollector:
    """Steps ``num_envs`` copies of an env for a policy.

    Arguments:
        env, num_envs, seed: what to build: an ``EnvSpec`` (or an env id, with ``env_kwargs`` and
            ``max_episode_steps``), ``num_envs`` copies; ``seed`` seeds the env and its action space.
        vector_mode: see ``zoo.envs.make_vector_env``.
        normalize_obs, normalize_reward, reward_gamma, clip_obs, clip_reward: the normalisation wrappers
            (``reward_gamma`` is the discount of the return whose std scales rewards).
    Attributes:
        venv: the wrapped vector env; obs: the current observation (None before the first step);
        pending_reset: which sub-envs autoreset at the next step (their next transition is not valid).
    """

    def __init__(
        self,
        env: EnvSpec | str,
        num_envs: int,
        seed: int,
        *,
        vector_mode: str = "auto",
        env_kwargs: dict[str, Any] | None = None,
        max_episode_steps: int | None = None,
        normalize_obs: bool = False,
        normalize_reward: bool = False,
        reward_gamma: float = 0.99,
        clip_obs: float = 10.0,
        clip_reward: float = 10.0,
    ) -> None:
        spec = env if isinstance(env, EnvSpec) else EnvSpec(env, dict(env_kwargs or {}), max_episode_steps)
        self.env_id = spec.id
        self.num_envs = num_envs
        self.seed = seed
        if spec.envpool and num_envs == 1 and spec.id not in _ONE_ENV_NOTICES:
            _ONE_ENV_NOTICES.add(spec.id)
            logging.getLogger("zoo").info(
                f"env.backend=envpool with one env ({spec.id}): EnvPool pays from several envs; at one it measured "
                f"level with gymnasium on one core and slower with a free core (its worker thread's hand-off): "
                f"set pipeline.num_envs above 1, or env.backend=gymnasium (docs/envpool.md)")
        venv = spec.make_vector(num_envs, seed=seed, mode=vector_mode)
        venv, _ = wrap_vector_env(venv, normalize_obs, normalize_reward, reward_gamma, clip_obs, clip_reward,
                                  check_finite=spec.id, episode_info=False)  # nothing here reads the step infos
        self._attach(venv)
        self.obs: np.ndarray | None = None
        self.pending_reset = np.zeros(num_envs, dtype=bool)
        # A recurrent policy's memory of each env (None: episodes starting) and whether the next observation starts
        # an episode (its memory zeroed first): the step before it was an autoreset step (zoo.policies.memory).
        self.memory: torch.Tensor | None = None
        self.episode_start = np.ones(num_envs, dtype=bool)
        # The env's action masks of the current observations, (num_envs, width) bool, where it gives masks
        # (env.action_mask; zoo.envs.masks): handed to the actor with each observation and stored with each step.
        self.action_mask: np.ndarray | None = None
        self._mask_width = mask_width(self.venv.single_action_space)
        self.resets = 0
        self._unsaved_reported = False
        self._uncaptured: str | None = None  # the layer zoo cannot capture, at the last snapshot
        self._episodes_lost = False  # a stop interrupted the envs mid-call (``abandon``)
        self.report = True  # whether to warn about an inexact resume (one worker of several says it for all)

    @classmethod
    def from_config(cls, cfg: EasyDict, seed: int, reward_gamma: float | None = None) -> VectorCollector:
        """Build from a resolved config's ``env`` section and the pipeline keys ``num_envs``, ``vector_mode``,
        ``normalize_obs``, ``normalize_reward``, ``clip_obs``, ``clip_reward``.

        ``reward_gamma`` is required only with ``normalize_reward``; a missing one is a ConfigError.
        """
        pipe = cfg.pipeline
        if pipe.normalize_reward and reward_gamma is None:
            raise ConfigError(
                f"pipeline.normalize_reward needs a discount and policy '{cfg.policy.type}' has no gamma: "
                f"set pipeline.reward_gamma (e.g. 0.99)"
            )
        return cls(
            EnvSpec.from_config(cfg), pipe.num_envs, seed, vector_mode=pipe.vector_mode,
            normalize_obs=pipe.normalize_obs, normalize_reward=pipe.normalize_reward,
            reward_gamma=0.99 if reward_gamma is None else reward_gamma,
            clip_obs=pipe.clip_obs, clip_reward=pipe.clip_reward,
        )

    def _attach(self, venv: Any) -> None:
        self.venv = venv
        self.stats: EpisodeStats = _find_wrapper(venv, EpisodeStats)
        self.obs_normalizer: NormalizeObservation | None = _find_wrapper(venv, NormalizeObservation)
        self.reward_normalizer: NormalizeReward | None = _find_wrapper(venv, NormalizeReward)

    @property
    def observation_space(self) -> gym.Space:
        """One sub-env's observation space (after normalisation, if any)."""
        return self.venv.single_observation_space

    @property
    def action_space(self) -> gym.Space:
        """One sub-env's action space."""
        return self.venv.single_action_space

    def start(self) -> None:
        """Reset every sub-env, unless episodes are already in progress (a started or restored collector)."""
        if self.obs is None:
            # The first reset uses the construction seed; later full resets (after restoring a collector whose
            # env could not be pickled) get their own derived seeds.
            seed = self.seed if self.resets == 0 else derive_seed(self.seed, self.resets)
            self.obs, infos = self.venv.reset(seed=seed)
            self.action_mask = self._masks(infos)
            self.pending_reset = np.zeros(self.num_envs, dtype=bool)
            self.memory, self.episode_start = None, np.ones(self.num_envs, dtype=bool)
            self.resets += 1

    def rollout(self, policy: Policy, steps: int) -> Rollout:
        """``steps`` steps of every sub-env, acted by the policy's ``rollout_actor`` (by default ``policy.collect``
        at every step), through every wrapper (a non-finite value stops it at the step it appears); the rollout
        is on ``policy.device``."""
        self.start()
        obs, pending = self.obs, self.pending_reset
        envs = self.num_envs
        # The observations go straight into the rollout's buffer; the actor reads them there (a view, no copy).
        obs_np = np.empty((steps, envs, *np.shape(obs)[1:]), dtype=np.float32)
        reward = np.empty((steps, envs), dtype=np.float64)  # as the env gave them (episode returns), float32 below
        terminated = np.empty((steps, envs), dtype=bool)
        truncated = np.empty((steps, envs), dtype=bool)
        recurrent = getattr(policy, "recurrent", False)
        self._check_masks(policy)
        actor = policy.memory_actor(steps, envs, self.memory) if recurrent else policy.rollout_actor(steps, envs)
        act, step, mask = actor.act, self.venv.step, self.action_mask
        if recurrent:  # starts[t]: observation t begins an episode (step t - 1 was an autoreset step)
            starts = np.empty((steps + 1, envs), dtype=bool)
            starts[0] = self.episode_start
            starts[1:2] = pending
            for t, row in enumerate(obs_np):
                row[...] = obs
                action = act(t, row, starts[t]) if mask is None else act(t, row, starts[t], mask)
                obs, reward[t], terminated[t], truncated[t], infos = step(action)
                mask = None if mask is None else self._masks(infos)
                if t + 2 <= steps:
                    np.logical_or(terminated[t], truncated[t], out=starts[t + 2])
        elif mask is None:
            for t, row in enumerate(obs_np):
                row[...] = obs
                obs, reward[t], terminated[t], truncated[t], _ = step(act(t, row))
        else:  # each step's actions among the valid ones; the next observations' masks come with them
            for t, row in enumerate(obs_np):
                row[...] = obs
                obs, reward[t], terminated[t], truncated[t], infos = step(act(t, row, mask))
                mask = self._masks(infos)
        self.action_mask = mask
        action, extras = actor.finish()
        # A step is valid unless its sub-env autoreset at it: it ended at the step before (or before this rollout).
        ended = terminated | truncated
        valid = np.empty((steps, envs), dtype=bool)
        valid[0] = ~pending
        np.logical_not(ended[:-1], out=valid[1:])
        self.obs, self.pending_reset = obs, ended[-1].copy()
        rollout = Rollout(
            obs=torch.from_numpy(obs_np), action=action, reward=torch.from_numpy(reward.astype(np.float32)),
            terminated=torch.from_numpy(terminated), truncated=torch.from_numpy(truncated),
            valid=torch.from_numpy(valid), last_obs=_float32(obs), extras=extras,
        )
        if recurrent:  # the memory before every observation, the last one's included (zeroed where it starts one)
            self.memory, self.episode_start = actor.memory, starts[-1].copy()
            last = zero_where(actor.memory, torch.from_numpy(starts[-1]))
            rollout.episode_start = torch.from_numpy(starts)
            rollout.memory = torch.cat([actor.memory_sequence().to(last), last[None]]).to(rollout.obs.device)
        return rollout if policy.device.type == "cpu" else rollout.to(policy.device)

    def transitions(self, policy: Policy | None, steps: int) -> Transitions:
        """``steps`` steps of every sub-env as replay transitions; autoreset steps are not included.

        ``policy=None`` takes uniformly random actions from the (seeded) action space, as before
        ``learning_starts``. The stored action is the policy's raw action (or the env action when it has none);
        ``next_obs`` of a transition that ended an episode is that episode's final observation; ``env`` is each
        transition's sub-env index. Where the env gives action masks, the random actions and the policy's are
        among the valid ones (the policy gets ``action_mask=``), and each transition keeps ``next_action_mask``,
        the mask of its ``next_obs`` (the final observation's where the episode ended: ``zoo.envs.masks``).
        """
        self.start()
        if policy is not None:
            self._check_masks(policy)  # a policy that cannot take the env's masks: refused, never ignored
        obs, pending, mask = self.obs, self.pending_reset, self.action_mask
        parts: list[Transitions] = []
        sub_envs = np.arange(self.num_envs, dtype=np.int32)
        for _ in range(steps):
            if policy is None:
                space = self.venv.action_space
                env_action = space.sample() if mask is None else random_valid_actions(
                    self.action_space, mask, space.np_random)
                stored = np.asarray(env_action)
            else:
                tensor = _float32(obs).to(policy.device)
                out = policy.collect(tensor) if mask is None else policy.collect(
                    tensor, action_mask=torch.from_numpy(mask).to(policy.device))
                env_action = out.action
                stored = np.asarray(out.action) if out.raw_action is None else out.raw_action.cpu().numpy()
            next_obs, reward, terminated, truncated, infos = self.venv.step(env_action)
            next_mask = None if mask is None else self._masks(infos)
            keep = ~pending
            obs_array, next_array = np.asarray(obs), np.asarray(next_obs)
            parts.append(Transitions(
                obs=obs_array[keep], action=stored[keep], reward=np.asarray(reward, dtype=np.float32)[keep],
                next_obs=next_array[keep], terminated=np.asarray(terminated)[keep],
                truncated=np.asarray(truncated)[keep], env=sub_envs[keep],
                next_action_mask=None if next_mask is None else next_mask[keep],
            ))
            pending = np.logical_or(terminated, truncated)
            obs, mask = next_obs, next_mask
        self.obs, self.pending_reset, self.action_mask = obs, pending, mask
        return Transitions.concatenate(parts)

    # -- action masks ---------------------------------------------------------------------------------
    def _masks(self, infos: dict[str, Any]) -> np.ndarray | None:
        return masks_of(infos, self.num_envs, self._mask_width)

    def check_masks(self, policy: Policy) -> None:
        """A ConfigError where the env gives action masks (``env.action_mask``) that ``policy`` cannot honour (its
        ``takes_action_mask``); starts the envs to know (once: the episodes go on from there)."""
        if _find_wrapper(self.venv, ActionMasks) is not None:
            self.start()
        self._check_masks(policy)

    def _check_masks(self, policy: Policy) -> None:
        if self.action_mask is not None and not getattr(policy, "takes_action_mask", False):
            raise ConfigError(f"env '{self.env_id}' gives action masks and {type(policy).__name__} cannot honour "
                              f"them (it would take invalid actions): set env.action_mask=none to ignore them, or "
                              f"use a policy that takes masks (ppo, a2c, dppo, impala, dqn)")

    def pop_finished(self) -> list[tuple[float, int]]:
        """``(return, length)`` of the episodes finished since the last call (raw rewards), oldest first."""
        return self.stats.pop_finished()

    def normalize_observation(self) -> Any:
        """A function mapping raw observations to the policy's inputs with the current statistics (not updating
        them), or None without observation normalisation: what evaluation applies."""
        return None if self.obs_normalizer is None else self.obs_normalizer.normalize

    def obs_normalizer_state(self) -> dict[str, Any] | None:
        """The observation normaliser's state (statistics, clip, epsilon), or None: saved with the model."""
        return None if self.obs_normalizer is None else self.obs_normalizer.state_dict()

    # -- an interrupted collection ----------------------------------------------------------------------
    def mark(self) -> dict[str, Any]:
        """The normalisers' statistics now (small copies): what ``abandon`` restores."""
        return {"obs_normalizer": self.obs_normalizer_state(),
                "reward_normalizer": None if self.reward_normalizer is None else self.reward_normalizer.state_dict()}

    def abandon(self, mark: dict[str, Any]) -> None:
        """Forget a collection that a stop interrupted mid-call: the envs are left mid-step (some sub-envs
        stepped, one perhaps still in its call), so the episodes in progress are dropped (no env snapshot in the
        next ``state_dict``; a resume starts fresh episodes and says it is not exact) and the normalisers'
        statistics go back to ``mark``."""
        if self.obs_normalizer is not None and mark["obs_normalizer"] is not None:
            self.obs_normalizer.load_state_dict(mark["obs_normalizer"])
        if self.reward_normalizer is not None and mark["reward_normalizer"] is not None:
            self.reward_normalizer.load_state_dict(mark["reward_normalizer"])
        self.stats.pop_finished()  # episodes of the abandoned collection: counted nowhere
        self.obs = None
        self._episodes_lost = True

    # -- state --------------------------------------------------------------------------------------------
    def _warn(self, message: str) -> None:
        if self.report:
            logging.getLogger("zoo").warning(message)

    def _env_snapshot(self) -> bytes | None:
        """The vector env with its episodes in progress (``zoo.envs.state``: the pickle plus what it loses), or None
        when zoo cannot capture it (``self._uncaptured`` then says why) or it cannot be pickled."""
        self._uncaptured = None
        if self.obs is None:
            return None
        try:
            return snapshot(self.venv, self.obs, self.pending_reset)
        except EnvNotCaptured as exc:
            self._uncaptured = exc.what
            if not self._unsaved_reported:
                self._unsaved_reported = True
                fix = exc.fix or "an env that implements get_env_state/set_env_state resumes exactly (docs/plugins.md)"
                self._warn(f"zoo cannot capture the state of env '{self.env_id}' ({exc.what}): a resumed run "
                           f"restarts its episodes and is not exact; {fix}")
            return None
        except Exception as exc:  # e.g. async workers: a resume then starts fresh episodes
            if not self._unsaved_reported:
                self._unsaved_reported = True
                self._warn(f"the envs of '{self.env_id}' cannot be saved with the checkpoint ({type(exc).__name__}: "
                           f"{first_line(exc, 80)}): a resumed run starts fresh episodes and is not exact; "
                           f"vector_mode=sync (one process) makes resume exact")
            return None

    def state_dict(self) -> dict[str, Any]:
        """The env snapshot (pickled bytes, or None), the normalisers' states and the reset count."""
        return {
            "env": self._env_snapshot(),
            "obs_normalizer": self.obs_normalizer_state(),
            "reward_normalizer": None if self.reward_normalizer is None else self.reward_normalizer.state_dict(),
            "resets": self.resets,
            "interrupted": self._episodes_lost,
            "uncaptured": self._uncaptured,
            "memory": None if self.memory is None else self.memory.detach().cpu().clone(),
            "episode_start": self.episode_start.copy(),
            "action_mask": None if self.action_mask is None else self.action_mask.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict`` output. Unpickles the env snapshot: only for run directories you trust.

        Episodes in progress continue exactly when the snapshot holds them; otherwise (no snapshot, an env zoo
        cannot capture, a snapshot that no longer fits the env) one line says so, and the next collection starts
        fresh episodes (``resets`` grows: the off-policy pipeline cuts the replay's sequences there)."""
        if self.obs_normalizer is not None and state["obs_normalizer"] is not None:
            self.obs_normalizer.load_state_dict(state["obs_normalizer"])
        if self.reward_normalizer is not None and state["reward_normalizer"] is not None:
            self.reward_normalizer.load_state_dict(state["reward_normalizer"])
        self.resets = int(state["resets"])
        self.obs = None
        why = self._restore_envs(state["env"]) if state["env"] is not None else self._why_no_snapshot(state)
        if why is None and self.obs is not None:  # the episodes go on: so does each env's memory
            self.memory = state.get("memory")
            self.episode_start = np.asarray(state.get("episode_start", np.ones(self.num_envs, dtype=bool)))
            self.action_mask = state.get("action_mask")  # the current observations' masks (None: no masks)
        if why is not None and self.resets:  # episodes were in progress when the checkpoint was taken
            self._unsaved_reported = True  # said now: not again when this process saves
            self._warn(f"the checkpoint holds no usable snapshot of the envs of '{self.env_id}' ({why}): they start "
                       f"fresh episodes, so this resume is not exact")

    @staticmethod
    def _why_no_snapshot(state: dict[str, Any]) -> str:
        if state.get("uncaptured"):
            return f"zoo cannot capture {state['uncaptured']}"
        return "a stop signal interrupted them mid-call" if state.get("interrupted") else "they could not be saved"

    def _restore_envs(self, data: bytes) -> str | None:
        """Put the saved vector env in place; None, or why its episodes cannot continue (then nothing changes)."""
        try:
            venv, (obs, pending) = restore(data)
        except EnvNotRestored as exc:
            return exc.why
        if getattr(venv, "num_envs", None) != self.num_envs:
            venv.close()
            raise ConfigError(f"the saved env has {venv.num_envs} sub-envs, the config {self.num_envs}")
        self.venv.close()
        self._attach(venv)
        self.obs, self.pending_reset = obs, pending
        return None

    def close(self) -> None:
        """Close the vector env."""
        self.venv.close()
