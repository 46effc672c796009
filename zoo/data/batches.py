"""Batch types shared by collectors, pipelines and policies (they live below the policies, which read them).

Shapes convention: time-major ``(T, B, ...)`` for rollouts and unrolls (T steps of B sub-envs), ``(N, ...)`` for
flat sample sets. Termination and truncation are kept apart everywhere: ``terminated`` means the episode ended in
a terminal state (no bootstrap), ``truncated`` means it was cut (by a time limit): a truncated step bootstraps
from the value of its final observation.

Vector envs autoreset in NEXT_STEP mode (see ``zoo.envs``): when sub-env ``i`` ends at step ``t``, the observation
after step ``t`` (``obs[t + 1]``, or ``last_obs`` at the end) is that episode's final observation, and step
``t + 1`` only resets sub-env ``i``: its action was ignored, its reward is 0, and it is stored with
``valid = False`` so that learning masks it out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch


class Samples(dict):
    """Flat ``(N, ...)`` tensors by name, also readable as attributes: ``samples.obs``, ``samples.advantage``.

    Examples:
        >>> samples = Samples(obs=torch.zeros(4, 3), advantage=torch.ones(4))
        >>> samples.advantage.sum(), samples["obs"].shape
        (tensor(4.), torch.Size([4, 3]))
    """

    def __getattr__(self, name: str) -> torch.Tensor:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no field '{name}' in these samples; present: {', '.join(self)}") from None


@dataclass
class Rollout:
    """An on-policy batch of ``T`` steps of ``B`` sub-envs, from ``VectorCollector.rollout``.

    Fields (time-major):
        obs: ``(T, B, *obs_shape)`` float32, the observation each action was chosen from.
        action: ``(T, B, *action_shape)``, the raw action the loss needs (the unclipped Gaussian sample, or the
            discrete index); the env may have received a clipped version.
        reward: ``(T, B)`` float32 (after reward normalisation, when the pipeline normalises).
        terminated, truncated: ``(T, B)`` bool, as returned by the env for that step.
        valid: ``(T, B)`` bool, False for autoreset steps (see the module docstring).
        last_obs: ``(B, *obs_shape)``, the observation after step ``T - 1`` (bootstrapping the last step).
        extras: ``(T, B, ...)`` tensors by name: whatever the policy returned with its actions (log-probs,
            values, behaviour-policy outputs...), plus what the policy's ``process_rollout`` adds (advantages,
            returns). Nothing in it is required by the pipeline.
        episode_start, memory: a recurrent policy's only (else None), ``T + 1`` rows, the last one of ``last_obs``:
            whether each observation starts an episode (``episode_start[t] = not valid[t - 1]``), and the policy's
            memory just before reading it (already zeroed where an episode starts), ``(T + 1, B, *memory_shape)``.
            ``sequences`` cuts them into chunks (``zoo.policies.recurrent``).

    Examples:
        >>> flags = torch.zeros(2, 3, dtype=torch.bool)  # T = 2 steps of B = 3 sub-envs, no episode end
        >>> rollout = Rollout(obs=torch.zeros(2, 3, 4), action=torch.zeros(2, 3), reward=torch.ones(2, 3),
        ...                   terminated=flags, truncated=flags, valid=~flags, last_obs=torch.zeros(3, 4))
        >>> rollout.steps, rollout.num_envs, rollout.valid_samples().obs.shape
        (2, 3, torch.Size([6, 4]))
    """

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    valid: torch.Tensor
    last_obs: torch.Tensor
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    episode_start: torch.Tensor | None = None
    memory: torch.Tensor | None = None

    @property
    def steps(self) -> int:
        """T, the number of steps per sub-env."""
        return int(self.reward.shape[0])

    @property
    def num_envs(self) -> int:
        """B, the number of sub-envs."""
        return int(self.reward.shape[1])

    def to(self, device: torch.device | str) -> Rollout:
        """The same rollout with every tensor on ``device`` (the rollout itself when nothing moves)."""
        device = torch.device(device)
        if self.obs.device == device and all(x.device == device for x in self.extras.values()):
            return self
        moved = {f.name: None if getattr(self, f.name) is None else getattr(self, f.name).to(device)
                 for f in fields(self) if f.name != "extras"}
        return Rollout(**moved, extras={name: x.to(device) for name, x in self.extras.items()})

    def with_extras(self, **extras: torch.Tensor) -> Rollout:
        """A new rollout with ``extras`` added to (or replacing) this one's; this rollout is not modified."""
        # Not dataclasses.replace: this takes a fifth of its time.
        return type(self)(self.obs, self.action, self.reward, self.terminated, self.truncated, self.valid,
                          self.last_obs, {**self.extras, **extras}, self.episode_start, self.memory)

    def valid_samples(self) -> Samples:
        """Every per-step field and extra flattened to ``(N, ...)``, autoreset steps (``valid = False``) dropped.

        The keys are ``obs, action, reward, terminated, truncated`` and the extras' names. When every step is
        valid (the usual case) the tensors are views of the rollout's, without a copy.
        """
        per_step = {"obs": self.obs, "action": self.action, "reward": self.reward,
                    "terminated": self.terminated, "truncated": self.truncated, **self.extras}
        valid = self.valid.reshape(-1)
        if bool(valid.all()):
            return Samples({name: x.flatten(0, 1) for name, x in per_step.items()})
        return Samples({name: x.flatten(0, 1)[valid] for name, x in per_step.items()})

    def sequences(self, length: int, burn_in: int = 0) -> Samples:
        """A recurrent policy's learning columns: env-contiguous chunks of ``length`` steps, chunk-major
        ``(C, length, ...)`` with ``C = B * T / length`` (chunk ``j`` of sub-env ``b`` at row ``j * B + b``), of every
        per-step field and extra, ``valid`` and ``episode_start``, plus ``memory`` ``(C, *memory_shape)``: the memory
        at each chunk's first step, as the acting loop had it. ``length`` must divide T: no padding.

        ``burn_in`` > 0 adds what re-runs the steps before each chunk (``zoo.policies.memory``): ``burn_obs``
        ``(C, burn_in, ...)`` and ``burn_start`` ``(C, burn_in)``, the observations and episode starts of the
        ``burn_in`` steps of its sub-env before the chunk (zeros and False before the rollout's first step),
        ``burn_steps`` ``(C,)``, how many of them the rollout holds (``min(burn_in, start)``: the last ones), and
        ``burn_memory`` ``(C, *memory_shape)``, the memory the acting loop had before the first of those."""
        if self.memory is None or self.episode_start is None:
            raise ValueError("this rollout holds no memory: it was not collected by a recurrent policy")
        steps, envs = self.steps, self.num_envs
        if length < 1 or steps % length:
            raise ValueError(f"sequences of {length} steps do not divide a rollout of {steps} steps")
        count = steps // length

        def chunked(x: torch.Tensor) -> torch.Tensor:
            return x[:steps].reshape(count, length, envs, *x.shape[2:]).transpose(1, 2).flatten(0, 1)

        per_step = {"obs": self.obs, "action": self.action, "reward": self.reward, "terminated": self.terminated,
                    "truncated": self.truncated, "valid": self.valid, "episode_start": self.episode_start,
                    **self.extras}
        columns = Samples({name: chunked(x) for name, x in per_step.items()})
        columns["memory"] = self.memory[:steps:length].flatten(0, 1)
        if burn_in > 0:
            starts = torch.arange(0, steps, length)
            before = starts[:, None] + torch.arange(burn_in)  # rows of the front-padded steps: start - burn_in + i

            def preceding(x: torch.Tensor) -> torch.Tensor:  # (count, burn_in, B, ...) -> (C, burn_in, ...)
                padded = torch.cat([x.new_zeros((burn_in, *x.shape[1:])), x[:steps]])
                return padded[before].transpose(1, 2).flatten(0, 1)

            held = torch.clamp(starts, max=burn_in)
            columns["burn_obs"] = preceding(self.obs)
            columns["burn_start"] = preceding(self.episode_start)
            columns["burn_steps"] = held.repeat_interleave(envs)
            columns["burn_memory"] = self.memory[starts - held].flatten(0, 1)
        return columns

    def to_unroll(self, policy_version: int) -> Unroll:
        """This rollout as an ``Unroll`` (observations ``(T + 1, B)``), e.g. for an actor that ships it."""
        return Unroll(
            obs=torch.cat([self.obs, self.last_obs.unsqueeze(0)]), action=self.action, reward=self.reward,
            terminated=self.terminated, truncated=self.truncated, valid=self.valid,
            behaviour=dict(self.extras), policy_version=policy_version, episode_start=self.episode_start,
            memory=None if self.memory is None else self.memory[0],
        )


@dataclass
class Unroll:
    """A fixed-length actor unroll for an actor-learner pipeline (IMPALA): observations ``(T + 1, B)``.

    ``obs[t + 1]`` is the observation after step ``t`` (the final observation when the episode ended at ``t``),
    so the learner can bootstrap every step, including truncated ones, from the unroll alone. ``behaviour``
    holds the behaviour policy's outputs per step (logits, or mu and sigma) for importance weights, and
    ``policy_version`` the learner version whose weights produced them (for the policy-lag metric).
    A recurrent policy's unroll also holds ``episode_start`` ``(T + 1, B)`` (as ``Rollout.episode_start``) and
    ``memory`` ``(B, *memory_shape)``, the memory before its first observation: the learner re-runs the unroll from
    it (None for feed-forward policies).

    Examples:
        >>> flags = torch.zeros(2, 3, dtype=torch.bool)  # T = 2 steps of B = 3 sub-envs, no episode end
        >>> unroll = Unroll(obs=torch.zeros(3, 3, 4), action=torch.zeros(2, 3), reward=torch.ones(2, 3),
        ...                 terminated=flags, truncated=flags, valid=~flags,
        ...                 behaviour={"logits": torch.zeros(2, 3, 2)}, policy_version=5)
        >>> unroll.steps, unroll.obs.shape  # T + 1 observations
        (2, torch.Size([3, 3, 4]))
    """

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    valid: torch.Tensor
    behaviour: dict[str, torch.Tensor]
    policy_version: int
    episode_start: torch.Tensor | None = None
    memory: torch.Tensor | None = None

    @property
    def steps(self) -> int:
        """T, the number of steps (observations hold T + 1)."""
        return int(self.reward.shape[0])

    def to(self, device: torch.device | str) -> Unroll:
        """This unroll with every tensor on ``device`` (itself when they already are: actors ship CPU tensors)."""
        if self.obs.device == torch.device(device):
            return self
        return Unroll(
            obs=self.obs.to(device), action=self.action.to(device), reward=self.reward.to(device),
            terminated=self.terminated.to(device), truncated=self.truncated.to(device), valid=self.valid.to(device),
            behaviour={key: value.to(device) for key, value in self.behaviour.items()},
            policy_version=self.policy_version,
            episode_start=None if self.episode_start is None else self.episode_start.to(device),
            memory=None if self.memory is None else self.memory.to(device),
        )


@dataclass
class Transitions:
    """``N`` single transitions for replay (numpy arrays), autoreset steps never included.

    ``next_obs`` is the observation after the step: for an episode that ended at this step it is the final
    observation (a truncated transition bootstraps from it; a terminated one does not bootstrap at all).

    ``env`` (optional) is the sub-env index of each transition: the transitions of one sub-env follow each other
    in order, so n-step windows can be read back from a replay buffer (``ReplayBuffer.windows``).

    ``next_action_mask`` (optional, where the env gives action masks: ``zoo.envs.masks``) is ``(N, width)`` bool,
    the mask of ``next_obs``: the actions valid there, over which a Q-learning target takes its max. For an
    episode that ended at this step it is the final observation's mask (the env gives it with the final step; the
    new episode's comes with the autoreset step after it).

    Examples:
        >>> obs = np.zeros((2, 3), np.float32)  # N = 2 transitions, the second one ends its episode
        >>> batch = Transitions(obs=obs, action=np.zeros((2, 1), np.float32), reward=np.ones(2, np.float32),
        ...                     next_obs=obs, terminated=np.array([False, True]), truncated=np.zeros(2, bool))
        >>> len(batch), batch.as_tensors()["terminated"]
        (2, tensor([False,  True]))
    """

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    env: np.ndarray | None = None
    next_action_mask: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.reward.shape[0])

    @staticmethod
    def concatenate(parts: list[Transitions]) -> Transitions:
        """One ``Transitions`` holding ``parts`` in order (``env`` and ``next_action_mask`` kept only when every
        part has them)."""
        names = [f.name for f in fields(Transitions)
                 if all(getattr(part, f.name) is not None for part in parts)]
        return Transitions(**{name: np.concatenate([getattr(part, name) for part in parts]) for name in names})

    def as_tensors(self, device: torch.device | str = "cpu") -> dict[str, Any]:
        """The fields as tensors on ``device`` (float32 rewards, bool flags); ``env`` and absent fields left out."""
        return {f.name: torch.as_tensor(getattr(self, f.name), device=device) for f in fields(self)
                if f.name != "env" and getattr(self, f.name) is not None}
