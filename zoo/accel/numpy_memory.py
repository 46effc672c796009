"""The numpy path of a recurrent actor-critic's acting: one rollout's steps with the core(s) and heads in numpy.

``MemoryLearning.memory_actor`` (``zoo.policies.memory``) uses a ``NumpyMemoryActor`` in place of the torch
``MemoryActor`` where the config's ``numpy_acting`` is on and the model is a float32 CPU model without an encoder,
with Discrete or Box actions: per step, an LSTM or GRU layer of 64 units and the heads cost a few numpy calls where
torch's recurrent modules cost tens of microseconds of dispatch each. It acts exactly as ``MemoryActor`` does: the
same reset rule, the same torch draws (Gumbel noise for discrete actions, drawn for the whole rollout at once, which
equals the per-step draws; Gaussian noise per step), outputs equal up to float rounding (tested against it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..rl_utils import MASKED_LOGIT
from . import recurrent_scan
from .numpy_acting import LiveMLP, _record_mask
from .settings import settings


def _sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The logistic function as ``(1 + tanh(x / 2)) / 2``: no overflow for any finite x, and numpy only (scipy's
    ``expit`` cost each process a tenth of a second to import)."""
    out = np.multiply(x, 0.5, out=out)
    np.tanh(out, out=out)
    out *= 0.5
    out += 0.5
    return out


class NumpyCore:
    """One ``RecurrentCore`` (its ``rnn``'s parameters, as views: the weights do not change during a rollout) stepped
    in numpy: ``step(x, memory)`` returns the last layer's output and writes the new memory into ``memory``. With
    ``batch`` given and zoo's compiled loops built (``recurrent_scan.available``) each layer's step after its input
    projection runs there (one call in place of a dozen numpy ones), on buffers made once for ``batch`` rows."""

    def __init__(self, core: Any, batch: int | None = None) -> None:
        self.kind, self.hidden = core.kind, core.hidden
        rnn = core.rnn
        self.layers = []
        for layer in range(core.layers):
            w_ih = getattr(rnn, f"weight_ih_l{layer}").detach().numpy().T
            w_hh = getattr(rnn, f"weight_hh_l{layer}").detach().numpy().T
            b_ih = getattr(rnn, f"bias_ih_l{layer}").detach().numpy()
            b_hh = getattr(rnn, f"bias_hh_l{layer}").detach().numpy()
            self.layers.append((w_ih, w_hh, b_ih, b_hh))
        compiled = batch is not None and recurrent_scan.available() and settings().recurrent_kernel
        self._loops = [_LayerStep(self.kind, *weights, batch) for weights in self.layers] if compiled else None

    def step(self, x: np.ndarray, memory: np.ndarray) -> np.ndarray:
        """One step from ``memory`` ``(B, layers, S)`` (updated in place); returns the last layer's ``h``."""
        if self._loops is not None:
            for layer, loop in enumerate(self._loops):
                x = loop(x, memory[:, layer])
            return x
        hidden = self.hidden
        for layer, (w_ih, w_hh, b_ih, b_hh) in enumerate(self.layers):
            state = memory[:, layer]
            if self.kind == "lstm":
                gates = x @ w_ih
                gates += b_ih
                gates += state[:, :hidden] @ w_hh
                gates += b_hh
                _sigmoid(gates[:, : 2 * hidden], out=gates[:, : 2 * hidden])  # input and forget gates
                np.tanh(gates[:, 2 * hidden: 3 * hidden], out=gates[:, 2 * hidden: 3 * hidden])
                _sigmoid(gates[:, 3 * hidden:], out=gates[:, 3 * hidden:])
                cell = state[:, hidden:]
                cell *= gates[:, hidden: 2 * hidden]
                cell += gates[:, :hidden] * gates[:, 2 * hidden: 3 * hidden]
                h = np.tanh(cell)
                h *= gates[:, 3 * hidden:]
                state[:, :hidden] = h
            else:
                inputs = x @ w_ih
                inputs += b_ih
                recurrent = state @ w_hh
                recurrent += b_hh
                rz = _sigmoid(inputs[:, : 2 * hidden] + recurrent[:, : 2 * hidden])
                n = np.tanh(inputs[:, 2 * hidden:] + rz[:, :hidden] * recurrent[:, 2 * hidden:])
                z = rz[:, hidden:]
                h = n + z * (state - n)  # (1 - z) * n + z * h
                state[...] = h
            x = h
        return x


class _LayerStep:
    """One layer's step through the compiled loops (``recurrent_scan.step_buffers``, T = 1, no reset: the actor has
    zeroed the memory already) on buffers made once. ``w_ih`` ``(in, G)`` and ``w_hh`` ``(H, G)`` are transposed, as
    ``NumpyCore`` holds them; kept as contiguous copies (the weights do not change during a rollout)."""

    def __init__(self, kind: str, w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray, b_hh: np.ndarray,
                 batch: int) -> None:
        self.kind, hidden = kind, w_hh.shape[0]
        self.hidden = hidden
        self.w_ih = np.ascontiguousarray(w_ih)
        # The projection's bias: b_hh whole for the LSTM, only its r and z parts for the GRU (its n part is the loop's).
        self.bias = b_ih + b_hh if kind == "lstm" else b_ih + np.concatenate([b_hh[: 2 * hidden],
                                                                             np.zeros_like(b_hh[:hidden])])
        self.buffers = recurrent_scan.step_buffers(kind, np.ascontiguousarray(w_hh), b_hh[2 * hidden:], batch)

    def __call__(self, x: np.ndarray, state: np.ndarray) -> np.ndarray:
        buffers, hidden = self.buffers, self.hidden
        np.matmul(x, self.w_ih, out=buffers.xproj)
        buffers.xproj += self.bias
        if self.kind == "lstm":
            np.copyto(buffers.h, state[:, :hidden])
            np.copyto(buffers.c, state[:, hidden:])
            buffers.run()
            state[:, :hidden] = buffers.h
            state[:, hidden:] = buffers.c
        else:
            np.copyto(buffers.h, state)
            buffers.run()
            state[...] = buffers.h
        return buffers.out


class NumpyMemoryActor:
    """A recurrent policy's ``RolloutActor`` in numpy (see the module docstring); the interface of
    ``zoo.policies.memory.MemoryActor``: ``act(t, obs, episode_start)``, ``finish()``, ``memory_sequence()`` and,
    after the last step, ``memory``.

    Arguments:
        model: a ``RecurrentActorCritic`` (no encoder, float32, CPU; Discrete or Box actions).
        steps, num_envs: the rollout's size.
        memory: each env's memory ``(num_envs, cores * layers, S)`` as a tensor, or None (episodes starting).
        to_env: raw actions to what the env receives (None: as they are).
    """

    def __init__(self, model: Any, steps: int, num_envs: int, memory: torch.Tensor | None,
                 to_env: Callable[[np.ndarray], np.ndarray] | None) -> None:
        heads = model.heads
        self._cores = [NumpyCore(model.actor_core, num_envs)] + ([] if model.critic_core is None else
                                                                 [NumpyCore(model.critic_core, num_envs)])
        self._layers = model.layers
        actor_layers, activation = heads.actor_layers()
        critic_layers, _ = heads.critic_layers()
        self._actor = LiveMLP(actor_layers, [activation] * (len(actor_layers) - 1))
        self._critic = LiveMLP(critic_layers, [activation] * (len(critic_layers) - 1))
        shape = tuple(model.initial_memory(num_envs).shape)
        self._memory = np.zeros(shape, np.float32) if memory is None else memory.detach().numpy().copy()
        self._memories = np.empty((steps, *shape), np.float32)
        self.discrete = heads.discrete
        width = heads.policy_head.out_features
        self._output = np.empty((steps, num_envs, width), np.float32)
        self._value = np.empty((steps, num_envs), np.float32)
        if self.discrete:
            noise = torch.empty((steps, num_envs, width)).exponential_().numpy()
            self._log_noise = np.log(noise, out=noise)  # the sample is argmax(logits - log(exponential draw))
            self._action = np.empty((steps, num_envs), np.int64)
        else:
            self._sigma = np.exp(heads.log_std.detach().numpy())
            self._action = np.empty((steps, num_envs, width), np.float32)
        self._to_env = to_env
        self.memory: torch.Tensor | None = None
        self._masks: np.ndarray | None = None  # (steps, B, width) where the env gives action masks

    def act(self, t: int, obs: np.ndarray, episode_start: np.ndarray,
            action_mask: np.ndarray | None = None) -> np.ndarray:
        """The env actions of step ``t``: the memory zeroed where ``episode_start``, one step of the core(s); the
        invalid actions' logits masked where ``action_mask`` is given (``zoo.policies.masking``)."""
        memory = self._memory
        memory[episode_start] = 0.0
        self._memories[t] = memory
        x = obs if obs.ndim == 2 else obs.reshape(len(obs), -1)
        layers = self._layers
        h_actor = self._cores[0].step(x, memory[:, :layers])
        h_critic = self._cores[1].step(x, memory[:, layers:]) if len(self._cores) > 1 else h_actor
        out = self._output[t]
        out[...] = self._actor(h_actor)
        if action_mask is not None:
            self._masks = _record_mask(self._masks, t, action_mask, len(self._output))
            out[~action_mask] = MASKED_LOGIT
        self._value[t] = self._critic(h_critic)[:, 0]
        action = self._action[t]
        if self.discrete:
            np.subtract(out, self._log_noise[t], out=self._log_noise[t])
            self._log_noise[t].argmax(axis=-1, out=action)
        else:
            np.add(out, self._sigma * torch.randn(out.shape).numpy(), out=action)
        return action if self._to_env is None else self._to_env(action)

    def finish(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The raw actions, the behaviour outputs (logits, or mu and sigma side by side) and the values."""
        output = self._output
        if not self.discrete:
            output = np.concatenate([output, np.broadcast_to(self._sigma, output.shape)], axis=-1)
        self.memory = torch.from_numpy(self._memory)
        extras = {"policy_output": torch.from_numpy(output), "value": torch.from_numpy(self._value)}
        if self._masks is not None:
            extras["action_mask"] = torch.from_numpy(self._masks)
        return torch.from_numpy(self._action), extras

    def memory_sequence(self) -> torch.Tensor:
        """The memory before every step's observation, ``(steps, B, *memory_shape)``."""
        return torch.from_numpy(self._memories)
