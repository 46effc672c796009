"""Memory for the actor-critic family: an LSTM or GRU core between the features and the MLP trunks.

``RecurrentCore`` is a ``torch.nn.LSTM`` or ``torch.nn.GRU`` (traceable for ``zoo export``), unrolled on the CPU by
zoo's compiled loops with the resets inside where they are faster (``zoo.accel.recurrent_scan``), else by torch's
fused kernels. Its state ("memory") is one tensor per env, ``(B, layers, S)``: for an LSTM
``S = 2H`` (``h`` then ``c``), for a GRU ``S = H``; zeros start an episode (``zero_where``).

The reset rule, the same everywhere (acting, learning, evaluation, ``Agent.predict``): ``episode_start[t]`` marks an
observation that begins an episode; the memory is zeroed just before such an observation is read. With zoo's
NEXT_STEP autoreset (``zoo.data.batches``) the observation after an episode's last step is its final observation,
read with the episode's memory (a truncated step bootstraps from its value), and the observation after that
autoreset step starts the next episode: ``episode_start[t] = not valid[t - 1]``.

``RecurrentActorCritic`` puts the core(s) after the observation encoder (a CNN for images, else the flattened
observations): one core shared by actor and critic (``policy.recurrent_shared``), or one each; the trunks and heads
are an ``ActorCritic`` on the core's output.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ..accel import recurrent_scan
from .networks import ActorCritic

__all__ = ["RECURRENT_KINDS", "RecurrentActorCritic", "RecurrentCore", "Segments", "unroll_with_loops", "zero_where"]

RECURRENT_KINDS = ("none", "lstm", "gru")


def zero_where(memory: torch.Tensor, episode_start: torch.Tensor) -> torch.Tensor:
    """``memory`` ``(B, ...)`` with the rows of envs whose observation starts an episode (``episode_start``, bool
    ``(B,)``) zeroed: the reset rule (module docstring)."""
    keep = (~episode_start.to(device=memory.device, dtype=torch.bool)).to(memory.dtype)
    return memory * keep.reshape(-1, *[1] * (memory.dim() - 1))


class RecurrentCore(nn.Module):
    """``layers`` LSTM or GRU layers of width ``hidden`` on inputs of ``input_dim`` (see the module docstring): a
    ``torch.nn.LSTM`` / ``torch.nn.GRU`` (``rnn``), whose fused kernels run the whole time loop forward and backward.

    Episode starts inside a sequence: ``zoo.accel.recurrent_scan``'s loops reset the state inside the unroll where
    they apply (``uses_loops``); else the starts cut the sequences into segments, each run from its own state (the
    memory carried in for a sequence's first segment, zeros for the rest) as one zero-padded batch (``Segments``):
    one fused call whatever the resets.
    ``ortho_init``: orthogonal weights and zero biases (as CleanRL's and SB3's recurrent policies); else torch's
    uniform initialisation.
    """

    def __init__(self, kind: str, input_dim: int, hidden: int, layers: int = 1, ortho_init: bool = True) -> None:
        super().__init__()
        if kind not in ("lstm", "gru"):
            raise ValueError(f"recurrent core '{kind}' is unknown: use lstm or gru")
        self.kind, self.hidden, self.layers = kind, hidden, layers
        self.state_size = 2 * hidden if kind == "lstm" else hidden
        self.rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(input_dim, hidden, layers)
        if ortho_init:
            for name, parameter in self.rnn.named_parameters():
                if name.startswith("weight"):
                    nn.init.orthogonal_(parameter, 1.0)
                else:
                    nn.init.zeros_(parameter)

    def initial_memory(self, batch: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Zeros ``(batch, layers, S)``: the memory an episode starts with."""
        return torch.zeros(batch, self.layers, self.state_size, device=device)

    def _state(self, memory: torch.Tensor) -> Any:
        """The memory ``(B, layers, S)`` as the rnn's state: ``(h, c)`` (LSTM) or ``h``, each ``(layers, B, H)``."""
        if self.kind == "lstm":
            return (memory[..., : self.hidden].transpose(0, 1).contiguous(),
                    memory[..., self.hidden:].transpose(0, 1).contiguous())
        return memory.transpose(0, 1).contiguous()

    def _layer_states(self, memory: torch.Tensor) -> Any:
        """The memory ``(B, layers, S)`` as the rnn's state indexed by layer, views of it: ``(h, c)`` (LSTM) or
        ``h``, each a list of ``(B, H)`` per layer (what ``zoo.accel.recurrent_scan`` reads; fewer views than
        ``_state``'s)."""
        layers = range(self.layers)
        if self.kind == "lstm":
            return [memory[:, layer, : self.hidden] for layer in layers], [memory[:, layer, self.hidden:]
                                                                            for layer in layers]
        return [memory[:, layer] for layer in layers]

    def _memory(self, state: Any) -> torch.Tensor:
        """The rnn's state back as memory ``(B, layers, S)``."""
        if self.kind == "lstm":
            return torch.cat(state, -1).transpose(0, 1)
        return state.transpose(0, 1)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, episode_start: torch.Tensor | None = None,
                final: bool = True, segments: Segments | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Unroll over ``x`` ``(T, B, input_dim)`` from ``memory`` ``(B, layers, S)``, zeroing the memory before each
        step whose ``episode_start`` ``(T, B)`` is set (None: no episode starts). Returns the last layer's outputs
        ``(T, B, hidden)`` and the memory after the last step (None where ``final`` is False: learning needs the
        outputs only, and episodes starting inside the sequences then run as segments, one fused call; ``segments``:
        their layout and padded inputs where the caller made them already, for several cores on the same inputs).
        On the CPU in float32 the compiled loops of ``zoo.accel.recurrent_scan`` run it whole, resets inside."""
        if self.uses_loops(x, episode_start, final):
            return unroll_with_loops([self], x, [memory], episode_start, final)[0]
        if episode_start is not None:
            memory = zero_where(memory, episode_start[0])
        if episode_start is None or x.shape[0] == 1 or not bool(episode_start[1:].any()):
            out, state = self.rnn(x, self._state(memory))
            return out, self._memory(state)
        if not final:
            return self.run_segments(segments or Segments(x, episode_start), memory), None
        outputs = []
        for t in range(x.shape[0]):  # step by step: the memory is wanted after the last step
            if t:
                memory = zero_where(memory, episode_start[t])
            out, state = self.rnn(x[t:t + 1], self._state(memory))
            memory = self._memory(state)
            outputs.append(out)
        return torch.cat(outputs), memory

    def uses_loops(self, x: torch.Tensor, episode_start: torch.Tensor | None, final: bool) -> bool:
        """Whether ``forward`` runs ``zoo.accel.recurrent_scan``'s loops on ``x`` (where they apply, at a size where
        they are faster, or where torch's module would step one step at a time: the memory after the last step
        wanted with episodes starting inside; in a compiled step at any size)."""
        if not recurrent_scan.applies(x):
            return False
        if torch.compiler.is_compiling() or recurrent_scan.fits(self.kind, self.hidden, x.shape[1]):
            return True  # a compiled step traces the loops (custom ops) at any size: torch's path branches on data
        return final and episode_start is not None and x.shape[0] > 1 and bool(episode_start[1:].any())

    def run_segments(self, segments: Segments, memory: torch.Tensor) -> torch.Tensor:
        """``forward``'s outputs where episodes start inside the sequences: every segment between two starts is a
        sequence of its own, from the memory carried in (a sequence's first segment) or zeros, all of them in one
        zero-padded batch (a segment's outputs never depend on the padding after it)."""
        starts = memory.new_zeros(segments.count, self.layers, self.state_size).index_put((segments.first,), memory)
        out, _ = self.rnn(segments.padded, self._state(starts))
        return out[segments.offset, segments.segment].reshape(segments.batch, segments.steps, -1).transpose(0, 1)


def unroll_with_loops(cores: list[RecurrentCore], x: torch.Tensor, memories: list[torch.Tensor],
                      episode_start: torch.Tensor | None, final: bool) -> list[tuple[torch.Tensor, Any]]:
    """Cores of one kind and size (an actor's and a critic's) over the same ``x``, each from its memory, through
    ``zoo.accel.recurrent_scan``'s loops (where ``uses_loops``): per core ``RecurrentCore.forward``'s outputs and
    memory; their first layers as one node with one input projection."""
    keep = x.new_ones(x.shape[:2]) if episode_start is None else (~episode_start.to(dtype=torch.bool)).to(x.dtype)
    states = [core._layer_states(memory) for core, memory in zip(cores, memories, strict=True)]
    results = recurrent_scan.unroll_cores([core.rnn for core in cores], cores[0].kind, x, states, keep, final)
    return [(out, core._memory(state) if final else None) for core, (out, state) in zip(cores, results, strict=True)]


class Segments:
    """The segments of sequences ``x`` ``(T, B, ...)`` cut at ``episode_start`` ``(T, B)``: each segment's index of
    every (sequence, step), sequence-major (``segment``), the step's offset in it (``offset``), each sequence's first
    segment (``first``), and ``padded``: the inputs as ``(longest, count, ...)`` segments, zeros after each end."""

    def __init__(self, x: torch.Tensor, episode_start: torch.Tensor) -> None:
        self.steps, self.batch = episode_start.shape
        begins = episode_start.t().clone()  # (B, T): a segment begins at each start and at each sequence's first step
        begins[:, 0] = True
        flat = begins.reshape(-1)
        self.segment = flat.cumsum(0) - 1
        beginning = torch.nonzero(flat).squeeze(1)  # the flat position where each segment begins
        self.offset = torch.arange(flat.numel(), device=x.device) - beginning[self.segment]
        self.count, longest = len(beginning), int(self.offset.max()) + 1
        self.first = self.segment[:: self.steps]
        self.padded = x.new_zeros(longest, self.count, x.shape[-1]).index_put(
            (self.offset, self.segment), x.transpose(0, 1).reshape(-1, x.shape[-1]))


def _steps(output: Any, lead: torch.Size | None) -> Any:
    """Outputs of the flattened steps ``(T * B, ...)`` (a tensor, a dict of them, or None) as ``lead + (...)``
    (``(T, B, ...)``); as they are where ``lead`` is None (not flattened)."""
    if lead is None or output is None:
        return output
    if isinstance(output, dict):
        return {key: value.unflatten(0, lead) for key, value in output.items()}
    return output.unflatten(0, lead)


class RecurrentActorCritic(nn.Module):
    """Encoder (or flattening) -> recurrent core(s) -> ``ActorCritic`` trunks and heads (module docstring).

    ``forward(obs, memory, episode_start)`` unrolls time-major sequences ``(T, B, *obs_shape)`` and returns the policy
    outputs and values ``(T, B, ...)`` and the memory after the last step; ``memory`` is ``(B, cores * layers, S)``
    (the actor's core first where actor and critic have one each).
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, hidden_sizes: list[int],
                 activation: str, kind: str, core_size: int, core_layers: int, shared_core: bool,
                 shared_trunk: bool, init_log_std: float, encoder: nn.Module | None, ortho_init: bool) -> None:
        super().__init__()
        self.encoder = encoder
        obs_dim = encoder.output_dim if encoder is not None else int(np.prod(observation_space.shape))
        self._obs_ndim = 1 if encoder is not None else len(observation_space.shape)
        self.actor_core = RecurrentCore(kind, obs_dim, core_size, core_layers, ortho_init)
        self.critic_core = None if shared_core else RecurrentCore(kind, obs_dim, core_size, core_layers, ortho_init)
        core_space = gym.spaces.Box(-np.inf, np.inf, (core_size,), np.float32)
        self.heads = ActorCritic(core_space, action_space, hidden_sizes, activation, shared_trunk, init_log_std,
                                 None, ortho_init=ortho_init)
        self.discrete, self.nvec, self.sde = self.heads.discrete, self.heads.nvec, False
        self.policy_head = self.heads.policy_head
        self.layers = core_layers

    @property
    def cores(self) -> int:
        """1 for a shared core, 2 for one each."""
        return 1 if self.critic_core is None else 2

    def initial_memory(self, batch: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Zeros ``(batch, cores * layers, S)``."""
        return self.actor_core.initial_memory(batch, device).repeat(1, self.cores, 1)

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        leading = obs.shape[:2]
        if self.encoder is not None:
            return self.encoder(obs.flatten(0, 1)).unflatten(0, leading)
        return obs.flatten(2) if self._obs_ndim != 1 else obs

    def forward(self, obs: torch.Tensor, memory: torch.Tensor | None = None,
                episode_start: torch.Tensor | None = None, value: bool = True,
                final: bool = True) -> tuple[Any, torch.Tensor | None, torch.Tensor | None]:
        """Policy outputs ``(T, B, ...)``, values ``(T, B)`` and the memory after the last step. ``value=False``: no
        values (None where the critic has a core of its own, whose memory then stays as it was: acting that needs
        no values); ``final=False``: no memory (None; learning, where only the outputs count)."""
        if memory is None:
            raise TypeError("a recurrent model reads sequences from a memory: call model(obs, memory, episode_start) "
                            "(an update calls self.forward_batch(batch), zoo.policies.memory)")
        features = self._features(obs)
        layers, heads = self.layers, self.heads
        both_cores = self.critic_core is not None and value
        if both_cores and self.actor_core.uses_loops(features, episode_start, final):  # one node for both
            (actor, actor_memory), (critic, critic_memory) = unroll_with_loops(
                [self.actor_core, self.critic_core], features, [memory[:, :layers], memory[:, layers:]],
                episode_start, final)
        else:
            segments = None  # two cores on the same inputs: the segments cut once (learning, episodes inside)
            if (not final and both_cores and episode_start is not None and features.shape[0] > 1
                    and bool(episode_start[1:].any())):
                segments = Segments(features, episode_start)
            actor, actor_memory = self.actor_core(features, memory[:, :layers], episode_start, final, segments)
            if both_cores:
                critic, critic_memory = self.critic_core(features, memory[:, layers:], episode_start, final,
                                                         segments)
        # Learning (final False: many steps): the trunks and heads on the steps flattened (T * B, H), 2-d products
        # with no reshapes in the graph; acting and export keep (T, B, H) (a traced flatten would fix the batch).
        lead = None if final else actor.shape[:2]
        actor = actor if lead is None else actor.flatten(0, 1)
        if self.critic_core is None:
            if heads.shared:
                latent = heads._mlp(heads._actor_hidden, actor)
                output, values = heads._policy(latent), heads._value(latent)
                return _steps(output, lead), _steps(values, lead), actor_memory
            output = heads._policy(heads._mlp(heads._actor_hidden, actor))
            values = heads._value(heads._mlp(heads._critic_hidden, actor)) if value else None
            return _steps(output, lead), _steps(values, lead), actor_memory
        output = _steps(heads._policy(heads._mlp(heads._actor_hidden, actor)), lead)
        if not value:
            return output, None, None if actor_memory is None else torch.cat([actor_memory, memory[:, layers:]], 1)
        both = None if actor_memory is None else torch.cat([actor_memory, critic_memory], 1)
        values = heads._value(heads._mlp(heads._critic_hidden, critic if lead is None else critic.flatten(0, 1)))
        return output, _steps(values, lead), both

    def actor_parameters(self) -> dict[str, torch.Tensor]:
        """The parameters acting needs (encoder, the cores, the actor's trunk, policy head, log-std) by state_dict
        name: the critic's core too, whose memory acting carries for the learner (IMPALA's actors)."""
        prefixes = ("encoder.", "actor_core.", "critic_core.", "heads.actor_trunk.", "heads.policy_head.",
                    "heads.log_std")
        return {name: p for name, p in self.named_parameters() if name.startswith(prefixes)}
