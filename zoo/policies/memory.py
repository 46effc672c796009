"""How an actor-critic policy with memory acts and learns (``policy.recurrent``: lstm or gru).

Mixed into ``ActorCriticPolicy``: with ``policy.recurrent = none`` (the default) every method here hands over to
the feed-forward path. With a core (``zoo.policies.recurrent``):

- acting: the collector keeps each env's memory across rollouts (and in its checkpoint) and hands it to
  ``memory_actor``, whose ``act(t, obs, episode_start)`` zeroes the memory of envs starting an episode, samples as
  ``collect`` does, and records the values and the memory before every step; the rollout carries them
  (``Rollout.episode_start``, ``Rollout.memory``);
- learning: ``learning_columns`` cuts the rollout into env-contiguous chunks of ``policy.sequence_length`` steps
  with the memory at each chunk's start (``Rollout.sequences``); a minibatch is ``minibatch_size //
  sequence_length`` chunks; ``gather`` keeps the per-step columns at the valid steps only (autoreset steps are read
  by the core, never learned from) before normalising advantages; ``forward_batch`` unrolls the chunks from their
  stored memory, resetting inside at every episode start, and returns the outputs at the valid steps, in the same
  order. An ``update`` written with ``forward_batch`` serves both kinds of policy unchanged;
- evaluation and ``Agent.predict``: ``act_with_memory``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from ..accel import recurrent_scan
from ..accel.numpy_memory import NumpyMemoryActor
from ..accel.settings import settings
from ..config.schema import Field
from ..data import Rollout
from ..errors import ConfigError
from .recurrent import RECURRENT_KINDS, RecurrentActorCritic, zero_where

# The keys of memory, among every ActorCriticPolicy's (zoo config ppo shows them).
MEMORY_FIELDS = {
    "recurrent": Field("none", "memory: a recurrent core after the encoder (none, lstm, gru; "
                       "zoo.policies.recurrent)", choices=RECURRENT_KINDS, frozen=True),
    "recurrent_size": Field(64, "recurrent core: hidden units per layer", range=(1, 100_000), frozen=True),
    "recurrent_layers": Field(1, "recurrent core: stacked layers", range=(1, 16), frozen=True),
    "recurrent_shared": Field(False, "recurrent core: one for actor and critic (else one each)", frozen=True),
    "sequence_length": Field(16, "recurrent core: steps per learning chunk (must divide pipeline.rollout_steps; "
                             "a minibatch is minibatch_size // sequence_length chunks)", range=(1, None)),
    "burn_in": Field(0, "recurrent core: before each chunk, re-run up to this many earlier steps of its env without "
                     "gradients from the memory stored there, so the chunk starts from the current weights' memory "
                     "(0: from the stored memory)", range=(0, None)),
}

# Burn-in's columns, per chunk (Rollout.sequences with burn_in).
BURN_COLUMNS = ("burn_obs", "burn_start", "burn_steps", "burn_memory")
# The per-step columns the core reads in sequence form (and burn-in's); every other column is flattened to the valid
# steps.
SEQUENCE_COLUMNS = ("obs", "memory", "episode_start", "valid", *BURN_COLUMNS)


class MemoryActor:
    """A recurrent policy's ``RolloutActor``: ``act(t, obs, episode_start)`` (see the module docstring)."""

    def __init__(self, policy: Any, steps: int, num_envs: int, memory: torch.Tensor | None) -> None:
        self._policy = policy
        self._device = policy.device
        self.memory = policy.initial_memory(num_envs) if memory is None else memory.to(policy.device)
        self.memories: list[torch.Tensor] = []
        self._actions: list[torch.Tensor] = []
        self._outputs: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self._masks: list[torch.Tensor] = []

    @torch.no_grad()
    def act(self, t: int, obs: np.ndarray, episode_start: np.ndarray,
            action_mask: np.ndarray | None = None) -> np.ndarray:
        """The env actions of step ``t``: the memory zeroed where ``episode_start``, one step of the core(s); among
        the valid actions where ``action_mask`` is given."""
        policy = self._policy
        memory = zero_where(self.memory, torch.from_numpy(np.asarray(episode_start, dtype=bool)))
        self.memories.append(memory)
        output, value, self.memory = policy.model(torch.from_numpy(obs).to(self._device)[None], memory)
        mask = None if action_mask is None else torch.from_numpy(action_mask).to(self._device)
        if mask is not None:
            self._masks.append(mask)
        action, packed = policy.sample_output(policy.masked(policy.acting_output(_first(output)), mask))
        self._actions.append(action)
        self._outputs.append(packed)
        self._values.append(value[0])
        return policy._env_action(action)

    def finish(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The raw actions, the behaviour outputs and the values of every step."""
        extras = {"policy_output": torch.stack(self._outputs), "value": torch.stack(self._values)}
        if self._masks:
            extras["action_mask"] = torch.stack(self._masks)
        return torch.stack(self._actions), extras

    def memory_sequence(self) -> torch.Tensor:
        """The memory before every step's observation, ``(steps, B, *memory_shape)``."""
        return torch.stack(self.memories)


def _first(output: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor | dict[str, torch.Tensor]:
    return {key: value[0] for key, value in output.items()} if isinstance(output, dict) else output[0]


def _at_steps(output: torch.Tensor | dict[str, torch.Tensor], places: torch.Tensor) -> Any:
    """Time-major ``(L, C, ...)`` outputs taken at ``places``: positions in the time-major order (``t * C + c``),
    from ``_time_major``."""
    if isinstance(output, dict):
        return {key: _at_steps(value, places) for key, value in output.items()}
    return output.flatten(0, 1).index_select(0, places)


def _time_major(positions: torch.Tensor, chunks: int, length: int) -> torch.Tensor:
    """Positions ``c * L + t`` in the chunks' order as positions ``t * C + c`` of the time-major unroll."""
    return (positions % length) * chunks + torch.div(positions, length, rounding_mode="floor")


class MemoryActingGraph(torch.nn.Module):
    """A recurrent policy's deterministic acting as a module for ``zoo export``: ``(obs, state) -> (actions,
    state_out)``, the state as ``Agent.predict`` takes and returns it (zeros: an episode starting); among the valid
    actions where ``action_mask`` ``(N, width)`` is given."""

    takes_action_mask = True

    def __init__(self, policy: Any) -> None:
        super().__init__()
        self.model = policy.model
        self._mode_to_env = policy._mode_to_env
        self._acting_output = policy.acting_output
        self._masked = policy.masked

    def forward(self, obs: torch.Tensor, state: torch.Tensor,
                action_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            output, _, memory = self.model(obs[None], state, value=False)
            return self._mode_to_env(self._masked(self._acting_output(_first(output)), action_mask)), memory


class MemoryLearning:
    """The recurrent side of ``ActorCriticPolicy`` (see the module docstring)."""

    # Whether a recurrent learner learns on chunks of the rollout (``learning_columns``, ``gather``); IMPALA's learns
    # on whole unrolls, its own columns.
    learns_in_chunks: ClassVar[bool] = True

    cfg: Any
    model: Any
    device: torch.device
    # Whether this learner takes ``policy.recurrent`` (its update reads ``forward_batch``); False: the key is refused.
    takes_memory: ClassVar[bool] = True

    @property
    def recurrent(self) -> bool:
        """Whether this policy has a recurrent core (``policy.recurrent`` lstm or gru)."""
        return self.cfg.get("recurrent", "none") != "none"

    def memory_model(self, observation_space: gym.Space, action_space: gym.Space,
                     encoder: torch.nn.Module | None) -> RecurrentActorCritic:
        """The recurrent model of ``policy.recurrent`` (refused in one line where this learner takes no memory or
        with gSDE)."""
        cfg = self.cfg
        if not self.takes_memory:
            raise ConfigError(f"{type(self).__name__} does not take policy.recurrent yet: set policy.recurrent=none, "
                              f"or use ppo, a2c, dppo or impala")
        if cfg.get("use_sde", False):
            raise ConfigError("policy.use_sde does not combine with policy.recurrent: set one of them off")
        return RecurrentActorCritic(
            observation_space, action_space, list(cfg.hidden_sizes), cfg.activation, cfg.recurrent,
            int(cfg.recurrent_size), int(cfg.recurrent_layers), bool(cfg.recurrent_shared), cfg.shared_network,
            cfg.init_log_std, encoder, bool(cfg.get("ortho_init", True)))

    def acting_output(self, output: Any) -> Any:
        """The policy output acting samples from (one step's, ``(B, ...)``): the model's as it is; IMPALA bounds
        its Gaussian mean here as its ``collect`` does."""
        return output

    def initial_memory(self, num_envs: int) -> torch.Tensor:
        """Zeros: the memory of ``num_envs`` envs starting episodes, ``(num_envs, *memory_shape)``."""
        return self.model.initial_memory(num_envs, self.device)

    def memory_actor(self, steps: int, num_envs: int, memory: torch.Tensor | None) -> Any:
        """The actor of one rollout from each env's ``memory`` (None: all starting): ``MemoryActor``, or its numpy
        twin (``zoo.accel.numpy_memory``) where ``numpy_acting`` is on and the model is a float32 CPU model without
        an encoder, with Discrete or Box actions. Refuses a rollout that ``policy.sequence_length`` does not
        divide."""
        self.check_rollout_steps(steps)
        kind = "discrete" if self.discrete else "gaussian"
        if kind in self.numpy_rollout_actions and self.numpy_acting_applies():
            to_env = None if self.discrete and self._action_start is None else self._to_env
            return NumpyMemoryActor(self.model, steps, num_envs, memory, to_env)
        return MemoryActor(self, steps, num_envs, memory)

    def check_rollout_steps(self, steps: int) -> None:
        """ConfigError where the recurrent chunks of ``policy.sequence_length`` steps do not divide a rollout of
        ``steps`` (nothing for a feed-forward policy)."""
        length = self.cfg.get("sequence_length", 1)
        if self.recurrent and steps % length:
            raise ConfigError(f"policy.sequence_length={length} does not divide pipeline.rollout_steps={steps}: set "
                              f"policy.sequence_length to a divisor of it")
        burn_in = self.cfg.get("burn_in", 0)
        if self.recurrent and self.learns_in_chunks and burn_in and length >= steps:
            raise ConfigError(f"policy.burn_in={burn_in} re-runs the steps of a rollout before each chunk, but "
                              f"policy.sequence_length={length} makes one chunk of each rollout ({steps} steps): set "
                              f"policy.sequence_length below pipeline.rollout_steps (e.g. {max(1, steps // 2)}), or "
                              f"policy.burn_in=0")

    @torch.no_grad()
    def act_with_memory(self, obs: torch.Tensor, memory: torch.Tensor | None,
                        episode_start: torch.Tensor | np.ndarray | None = None,
                        deterministic: bool = True,
                        action_mask: torch.Tensor | None = None) -> tuple[np.ndarray, torch.Tensor]:
        """Env actions for a batch ``(N, *obs_shape)`` from ``memory`` (None: episodes starting), zeroed first where
        ``episode_start`` ``(N,)`` is set, among the valid actions where ``action_mask`` ``(N, width)`` is given;
        returns the actions and the memory after this step."""
        memory = self.initial_memory(obs.shape[0]) if memory is None else memory.to(self.device)
        if episode_start is not None:
            memory = zero_where(memory, torch.as_tensor(np.asarray(episode_start, dtype=bool)))
        output, _, memory = self.model(obs[None], memory, value=False)
        output = self.masked(self.acting_output(_first(output)), action_mask)
        if deterministic:
            return self._mode_to_env(output).cpu().numpy(), memory
        action, _ = self.sample_output(output)
        return self._env_action(action), memory

    def process_recurrent(self, rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
        """The values of the rollout's steps (from the actor) and of its last observations, ``(T + 1, B)``."""
        if rollout.memory is None:
            raise ValueError("a recurrent policy's rollout holds no memory: collect it with memory_actor")
        with torch.no_grad():
            _, last, _ = self.model(rollout.last_obs[None], rollout.memory[-1])
        return rollout.extras["value"], last[0]

    # -- learning ----------------------------------------------------------------------------------------
    def learning_columns(self, batch: Any) -> dict[str, torch.Tensor]:
        if not (self.recurrent and self.learns_in_chunks):
            return super().learning_columns(batch)  # type: ignore[misc]
        burn_in = int(self.cfg.get("burn_in", 0))
        chunks = batch.sequences(int(self.cfg.sequence_length), burn_in)
        names = ("obs", "memory", "episode_start", "valid", "action", "policy_output", "value", "advantage",
                 "returns", *(BURN_COLUMNS if burn_in else ()),
                 *(("action_mask",) if "action_mask" in chunks else ()))
        # contiguous once here, not in every minibatch's gather (the chunks come as views across the rollout)
        return {name: chunks[name].contiguous() for name in names}

    def minibatch_units(self) -> int:
        """What one minibatch takes of the learning columns' first axis: ``minibatch_size`` samples, or for a
        recurrent policy ``minibatch_size // sequence_length`` chunks (at least one)."""
        size = int(self.cfg.minibatch_size)
        return max(1, size // int(self.cfg.sequence_length)) if self.recurrent else size

    def learning_rows(self, samples: int) -> int:
        """The learning columns' rows for a batch of ``samples`` samples: the samples, or for a recurrent learner on
        chunks ``samples // sequence_length`` chunks (a fixed count: autoreset steps stay inside them, marked
        invalid, where a feed-forward learner's columns drop them)."""
        if self.recurrent and self.learns_in_chunks:
            return samples // int(self.cfg.sequence_length)
        return super().learning_rows(samples)  # type: ignore[misc]

    def memory_compile_problem(self) -> str | None:
        """Why this policy's update cannot be compiled (``policy.compile``) because of its memory, or None: a compiled
        recurrent update traces zoo's loops as custom ops (``zoo.accel.recurrent_ops``), which run float32 on the
        CPU where the loops are built and ``accel.recurrent_kernel`` is on."""
        if not self.recurrent:
            return None
        if self.device.type != "cpu":
            return f"a recurrent update compiles on the CPU only (zoo's loops run there), not {self.device.type}"
        if not recurrent_scan.available():
            return "zoo's recurrent loops (zoo.accel._crecurrent) are not built, and a recurrent update compiles them"
        if not settings().recurrent_kernel:
            return "accel.recurrent_kernel is off, and a recurrent update compiles zoo's loops"
        return None

    def compiled_columns(self, columns: dict[str, torch.Tensor],
                         index: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """``policy.burn_in`` under a compiled update: the minibatch's chunks' memory burned in eagerly before it
        (``burned_memory``: its re-runs hold a data-dependent number of steps, no graph of fixed shape) and written
        into the memory column at their rows; the burn-in columns stay out of the graph, which reads that memory as
        it reads a stored one. The same weights as the update's: the same memory eager learning makes inside it."""
        if "burn_obs" not in columns:
            return super().compiled_columns(columns, index)  # type: ignore[misc]
        rows = torch.arange(len(columns["memory"]), device=self.device) if index is None else index
        chunks = {name: columns[name].index_select(0, rows) for name in (*BURN_COLUMNS, "memory", "episode_start")}
        memory = columns["memory"].index_copy(0, rows, self.burned_memory(chunks))
        return {**{name: column for name, column in columns.items() if name not in BURN_COLUMNS}, "memory": memory}

    def gather(self, columns: dict[str, torch.Tensor], index: torch.Tensor | None,
               moments: tuple[torch.Tensor, torch.Tensor] | None, scheduled: dict[str, Any]) -> dict[str, Any]:
        if not (self.recurrent and self.learns_in_chunks):
            return super().gather(columns, index, moments, scheduled)  # type: ignore[misc]
        sequences = {name: column if index is None else column.index_select(0, index)
                     for name, column in columns.items() if name in SEQUENCE_COLUMNS}
        count, length = sequences["valid"].shape[:2]
        # The valid steps' positions, once per minibatch: in the minibatch's (chunk, step) order, and where they sit
        # in the learning columns (each per-step column is read there with one index_select).
        positions = sequences["valid"].reshape(-1).nonzero().squeeze(1)
        rows = positions if index is None else (
            index[:, None] * length + torch.arange(length, device=positions.device)).reshape(-1).index_select(
                0, positions)
        steps = {name: column.flatten(0, 1).index_select(0, rows) for name, column in columns.items()
                 if name not in SEQUENCE_COLUMNS}
        sequences["valid_places"] = _time_major(positions, count, length)
        return super().gather({**steps, **sequences}, None, moments, scheduled)  # type: ignore[misc]

    def forward_batch(self, batch: dict[str, Any]) -> tuple[Any, torch.Tensor]:
        """The policy outputs and values of a minibatch's samples, in the order of its per-step columns: the model
        on ``batch['obs']``, or for a recurrent policy the chunks unrolled from their memory (module docstring)."""
        mask = batch.get("action_mask")  # the mask the actor saw at each sample (zoo.policies.masking)
        if not self.recurrent:
            output, value = self.model(batch["obs"])
            return self.masked(output, mask), value
        obs = batch["obs"].transpose(0, 1)  # (L, C, ...) time-major
        memory = self.burned_memory(batch) if "burn_obs" in batch else batch["memory"]
        output, value, _ = self.model(obs, memory, batch["episode_start"].transpose(0, 1), final=False)
        places = batch.get("valid_places")  # gather's; else from the valid flags
        if places is None:
            chunks, length = batch["valid"].shape[:2]
            places = _time_major(batch["valid"].reshape(-1).nonzero().squeeze(1), chunks, length)
        return self.masked(_at_steps(output, places), mask), _at_steps(value, places)

    @torch.no_grad()
    def burned_memory(self, batch: dict[str, Any]) -> torch.Tensor:
        """``policy.burn_in``: each chunk's memory at its start, from the current weights: the steps of its env
        before it (up to ``burn_in``, those the rollout holds) re-run without gradients from the memory the acting
        loop had before them, resetting at their episode starts (and zeroed where the chunk's first step starts one,
        as the stored memory is). A chunk with none keeps its stored memory. One
        batched unroll per count of held steps (at most ``burn_in / sequence_length + 1`` of them)."""
        memory, width = batch["memory"].clone(), batch["burn_obs"].shape[1]
        held = batch["burn_steps"]
        for steps in torch.unique(held).tolist():
            if steps == 0:
                continue
            rows = held == steps
            obs = batch["burn_obs"][rows, width - steps:].transpose(0, 1)
            starts = batch["burn_start"][rows, width - steps:].transpose(0, 1)
            _, _, memory[rows] = self.model(obs, batch["burn_memory"][rows], starts)
        return zero_where(memory, batch["episode_start"][:, 0])  # as stored: zeroed where the chunk starts one
