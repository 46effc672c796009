"""Serial off-policy pipeline (SAC, SAC-ACE, TD3): vector collector -> Transitions -> replay buffer -> learn.

Until ``random_steps`` env steps (by default ``learning_starts``) the envs take uniformly random actions; from
``learning_starts`` on, every ``train_freq`` steps of each env the policy learns from the replay buffer with
``gradient_steps`` updates (the update-to-data ratio is ``gradient_steps / (train_freq * num_envs)``). One iteration
(one metrics row) covers ``steps_per_iteration`` env steps (one step of one sub-env each), as in every pipeline:
gymnasium's autoreset step after each episode end (the env resets and ignores the action) counts as a step of
the budget but stores nothing, and a collection that stored nothing is not followed by updates (no update on
unchanged data). So a budget of N steps holds N transitions less one per finished episode (per sub-env):
Stable-Baselines3 and CleanRL, whose envs reset within the final step, count N transitions. Transitions keep
terminated and truncated apart; a truncated one carries its final observation and autoreset steps are never
stored (``VectorCollector.transitions``); each row keeps its sub-env index, and when
the envs restart fresh episodes mid-run (an inexact resume) the newest stored rows are marked truncated, so the
n-step windows of ``ReplayBuffer.windows`` follow one episode only. The replay holds env actions, random and
policy steps alike (``zoo.policies.off_policy``). Where the env gives action masks (``env.action_mask``; DQN is
the replay-based policy that takes them) the random steps and the policy's are among the valid actions, and the
replay keeps each transition's next-observation mask for the target's max. Before each collection with the policy,
a policy that has ``set_progress`` (every ``OffPolicyPolicy``) gets the training progress (``learn_context(0)``:
progress, iteration, env steps so far), so its exploration can follow a schedule. The replay buffer is saved with every
checkpoint in a file of its own, unless ``save_replay`` is off: a resumed run then refills an empty buffer.

An iteration that a stop signal interrupts in an env call has already added transitions and learned from them:
it is undone (``abandon_iteration``) with what it kept for that purpose, a copy of the policy's state taken
before its first learning call and the replay rows its additions overwrote, so that the saved checkpoint is the
state as of the end of the last completed iteration.
"""

from __future__ import annotations

import copy
import logging
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from ..config.schema import Field
from ..data import ReplayBuffer
from ..envs.masks import mask_width
from ..sizes import check_memory
from .vector_pipeline import VectorEnvPipeline


class SerialOffPolicyPipeline(VectorEnvPipeline):
    """One process: collect transitions into a replay buffer and learn from it at a fixed update-to-data ratio."""

    fields: ClassVar[dict[str, Field]] = {
        **VectorEnvPipeline.fields,
        "num_envs": VectorEnvPipeline.fields["num_envs"].but(1),
        "buffer_size": Field(1_000_000, "replay capacity in transitions", range=(1, None), frozen=True),
        "learning_starts": Field(5_000, "no gradient update before this many env steps", range=(0, None)),
        "random_steps": Field(None, "uniformly random actions for this many env steps (None: learning_starts; ACE's "
                              "code acts randomly for 10k steps but learns from step 513 on)", type=int,
                              range=(0, None)),
        "train_freq": Field(1, "steps of every env between learning calls", range=(1, None)),
        "gradient_steps": Field(1, "updates per learning call", range=(0, 100_000)),
        "steps_per_iteration": Field(1_000, "env steps per iteration (metrics row)", range=(1, None)),
        "save_replay": Field(True, "save the replay buffer with checkpoints (exact resume)"),
        "eval_every": VectorEnvPipeline.fields["eval_every"].but(5),
        "checkpoint_every": VectorEnvPipeline.fields["checkpoint_every"].but(10),
    }

    def check_sizes(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        size = self.cfg.pipeline.buffer_size
        masks = mask_width(action_space) if self.cfg.env.get("action_mask", "none") != "none" else 0  # at most
        nbytes = ReplayBuffer.estimate_nbytes(size, observation_space.shape, tuple(action_space.shape or ()),
                                              mask_width=masks)
        check_memory(f"a replay buffer of {size:,} transitions", nbytes, "use a smaller pipeline.buffer_size")

    def build_buffers(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        pipe = self.cfg.pipeline
        self._undo: dict[str, Any] | None = None  # see iteration_mark
        masks = mask_width(action_space) if self.collector.action_mask is not None else 0  # the env gives masks
        self.replay = ReplayBuffer(pipe.buffer_size, observation_space.shape, tuple(action_space.shape or ()),
                                   action_dtype=np.asarray(action_space.sample()).dtype, mask_width=masks)
        plan = getattr(self.policy, "plan_learning", None)  # an OffPolicyPolicy decides policy.compile with it
        if plan is not None:
            calls = max(pipe.max_env_steps - pipe.learning_starts, 0) // (pipe.train_freq * pipe.num_envs)
            plan(calls * pipe.gradient_steps)
        if self.rank == 0:
            saved = "saved with each checkpoint" if pipe.save_replay else (
                "NOT saved (pipeline.save_replay=False): a resumed run starts with an empty buffer")
            logging.getLogger("zoo").info(f"replay buffer of {pipe.buffer_size:,} transitions, "
                                          f"{self.replay.nbytes / 2**20:,.1f} MiB allocated, {saved}")

    def separate_components(self) -> dict[str, Any]:
        return {"replay": self.replay} if self.cfg.pipeline.save_replay else {}

    # -- undoing an interrupted iteration --------------------------------------------------------------------
    def iteration_mark(self) -> dict[str, Any]:
        # What this iteration changes before its last env call, kept from now on: the policy's state before its
        # first learning call, and (rows, their transitions) of the replay rows its additions overwrite.
        self._undo = {"policy": None, "overwritten": []}
        return {**super().iteration_mark(), "replay": (self.replay.position, self.replay.size)}

    def abandon_iteration(self, mark: dict[str, Any]) -> None:
        super().abandon_iteration(mark)
        undo, self._undo = self._undo, None
        if undo is None:
            return
        if undo["policy"] is not None:
            self.policy.load_state_dict(undo["policy"])
        replay = self.replay
        for rows, old in reversed(undo["overwritten"]):
            for name in replay.fields:
                getattr(replay, name)[rows] = getattr(old, name)
        replay.position, replay.size = mark["replay"]
        replay.changed_in_place()

    def _add(self, transitions: Any) -> None:
        replay, undo = self.replay, self._undo
        count = min(len(transitions), replay.capacity)
        if undo is not None and replay.size + count > replay.capacity:  # earlier iterations' rows are overwritten
            rows = (replay.position + np.arange(count)) % replay.capacity
            rows = rows[rows < replay.size]
            undo["overwritten"].append((rows, replay.take(rows)))
        replay.add(transitions)

    def iterate(self) -> dict[str, float]:
        pipe = self.cfg.pipeline
        end = self.env_steps + pipe.steps_per_iteration
        totals: dict[str, list[float]] = {}
        random_steps = pipe.learning_starts if pipe.get("random_steps") is None else pipe.random_steps
        while self.env_steps < end:
            exploring = self.env_steps < random_steps  # uniformly random actions
            if not exploring and hasattr(self.policy, "set_progress"):
                self.policy.set_progress(self.learn_context(0))
            resets = self.collector.resets
            transitions = self.collector.transitions(None if exploring else self.policy, pipe.train_freq)
            if self.collector.resets != resets:  # fresh episodes (an inexact resume): the stored ones were cut
                self.replay.end_sequences()
            self._add(transitions)
            # Env steps: one per sub-env per vector step (every pipeline counts them so), autoreset steps included; a
            # collection that stored nothing (an autoreset step: its action is ignored) is not followed by updates.
            self.env_steps += pipe.train_freq * pipe.num_envs
            self.record_episodes(self.collector.pop_finished())
            if (self.env_steps < pipe.learning_starts or len(transitions) == 0 or len(self.replay) == 0
                    or pipe.gradient_steps == 0):
                continue
            if self._undo is not None and self._undo["policy"] is None:
                self._undo["policy"] = copy.deepcopy(self.policy.state_dict())
            for key, value in self.policy.learn(self.replay, self.learn_context(pipe.gradient_steps)).items():
                totals.setdefault(key, []).append(value)
        return {key: _mean(values) for key, values in totals.items()}  # each over the calls reporting it


def _mean(values: list[Any]) -> Any:
    """The mean of a row's metric values: floats, or 0-dim tensors (one stack, one read later; no sync here)."""
    if isinstance(values[0], torch.Tensor):
        return torch.stack(values).mean()
    return sum(values) / len(values)
