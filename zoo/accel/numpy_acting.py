"""The numpy path of small actor-critics on the CPU: whole rollouts acted and valued in numpy.

``ActorCriticPolicy`` uses it (a ``NumpyActing`` of its model) where its config's ``numpy_acting`` is on and the
model is a float32 MLP on the CPU (no encoder) with Discrete or Box actions, at two seams: ``rollout_actor``
returns a ``NumpyRolloutActor`` (in place of the default actor, which calls ``collect`` at every step) and
``process_rollout`` values the rollout with ``NumpyActing.rollout_values``. ``collect``, ``evaluate`` and
``values_of`` stay torch: the readable reference that this module is tested against.

Off-policy learners (SAC, TD3) act one step at a time with weights that change at every update: ``LiveMLP`` runs
their actor on numpy views of its parameters (no copies), the numpy forward their actors declare beside their torch
one (``zoo.policies.continuous_networks``).

Why numpy: for the 64-64 MLPs of classic control every torch call costs microseconds of dispatch, more than its
arithmetic; numpy's calls cost a fraction of that, and none of torch's own tools (``inference_mode``,
``torch.jit``, ``torch.compile``) closed the gap end to end (``benchmarks/acting_bench.py``; docs/speed.md has the
figures).

What it gives equals ``collect`` step by step for the same torch RNG state: the noise is drawn from torch's
generator as ``collect`` draws it, and the forward passes differ only in float rounding (the biases are folded
into the matmuls).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from ..rl_utils import MASKED_LOGIT


def _elu_into(z: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out, np.where(z > 0.0, z, np.expm1(np.minimum(z, 0.0))))


# Activations written into a given array: a ufunc and its extra arguments (called directly, without a Python layer
# in between), or a function of (z, out).
_ACTIVATIONS_INTO: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "tanh": (np.tanh, ()),
    "relu": (np.maximum, (0.0,)),
    "elu": (_elu_into, ()),
}


class FoldedMLP:
    """An MLP in numpy with its biases folded into its weights, for a fixed batch size: ``f(obs, out)`` writes the
    last layer's output for ``obs`` ``(B, ...)`` (flattened to ``(B, in)``) into ``out`` ``(B, width)``.

    Each layer is one matmul and one activation: every layer's input carries a column of ones, the weights a last
    row of biases, and activations are written straight into the next input. On CartPole's 64-64 policy this is 6
    numpy calls instead of 8 per step. The outputs equal
    ``x @ W.T + b`` layer by layer up to float rounding (the bias joins the sum). The weights are copies of the
    layers' at construction or at the last ``load``.

    Arguments:
        layers: the ``nn.Linear`` layers, input first (``ActorCritic.actor_layers`` or ``critic_layers``).
        activation: the name of the activation between layers (tanh, relu, elu); none after the last.
        batch: the number of observations of every call.
    """

    def __init__(self, layers: list[nn.Linear], activation: str, batch: int) -> None:
        self.layers = [np.empty((layer.in_features + 1, layer.out_features), dtype=np.float32) for layer in layers]
        self.load(layers)
        self.width = self.layers[-1].shape[1]
        self._inputs = [np.ones((batch, folded.shape[0]), dtype=np.float32) for folded in self.layers]
        self._hidden = [(folded, src, dst[:, :-1]) for folded, src, dst in
                        zip(self.layers, self._inputs, self._inputs[1:])]
        self.input = self._inputs[0][:, :-1]  # (B, in): where ``run`` reads the observations
        self._into, self._into_args = _ACTIVATIONS_INTO[activation]

    def load(self, layers: list[nn.Linear]) -> FoldedMLP:
        """Copy the layers' current weights and biases (the shapes of construction) in; returns self."""
        for folded, layer in zip(self.layers, layers, strict=True):
            folded[:-1] = layer.weight.detach().numpy().T
            folded[-1] = layer.bias.detach().numpy()
        return self

    def __call__(self, obs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Write the output for ``obs`` into ``out`` (a new array when None) and return it."""
        self.input[...] = obs if obs.ndim == 2 else obs.reshape(len(obs), -1)
        return self.run(out)

    def run(self, out: np.ndarray | None = None) -> np.ndarray:
        """The output for the observations already written into ``input`` (filled in parts, without a copy)."""
        into, args = self._into, self._into_args
        for folded, src, dst in self._hidden:
            into(np.matmul(src, folded), *args, out=dst)
        return np.matmul(self._inputs[-1], self.layers[-1], out=out)


class LiveMLP:
    """An MLP's forward pass in numpy on views of its layers' parameters (no copies: what an optimiser writes in
    place is what the next call reads), for the per-step acting of off-policy learners, whose weights change at
    every update (``FoldedMLP`` would copy them at each step). ``current()`` says whether the views still are the
    parameters' storage; build a new one when not (a parameter replaced, a network rebuilt).

    Arguments:
        layers: the ``nn.Linear`` layers (float32, on the CPU), input first.
        activations: the name of the activation after each layer but the last (tanh, relu, elu).
    """

    def __init__(self, layers: list[nn.Linear], activations: list[str]) -> None:
        self._tensors = [t for layer in layers for t in (layer.weight, layer.bias)]
        self._storage = self._pointers()
        self._layers = [(layer.weight.detach().numpy().T, layer.bias.detach().numpy()) for layer in layers]
        self._activations = [_ACTIVATIONS_INTO[name] for name in activations]

    def _pointers(self) -> list[int]:
        return [t.data_ptr() for t in self._tensors]

    def current(self, layers: list[nn.Linear]) -> bool:
        """Whether this forward pass reads ``layers``' parameters as they are now."""
        tensors = [t for layer in layers for t in (layer.weight, layer.bias)]
        return (len(tensors) == len(self._tensors) and all(a is b for a, b in zip(tensors, self._tensors))
                and self._pointers() == self._storage)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The last layer's output ``(B, out)`` for inputs ``(B, in)`` (``x @ W.T + b`` layer by layer)."""
        *hidden, (weight, bias) = self._layers
        for (w, b), (into, args) in zip(hidden, self._activations):
            x = np.matmul(x, w)
            x += b
            into(x, *args, out=x)
        x = np.matmul(x, weight)
        x += bias
        return x


class NumpyActing:
    """The numpy path of one ``ActorCritic`` (a float32 MLP on the CPU, Discrete or Box actions; read through
    ``actor_layers()``, ``critic_layers()``, ``discrete`` and ``log_std``): rollout actors and rollout values.

    Its forward passes are kept from one rollout to the next, one per network and batch size, and the current
    weights are copied into them at every use (cheaper than building them afresh for every rollout). So an actor's
    forward is the next actor's of the
    same size: the policy acts for one rollout at a time.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._forwards: dict[tuple[bool, int], FoldedMLP] = {}

    def forward(self, critic: bool, batch: int) -> FoldedMLP:
        """The actor's (or the critic's) forward for ``batch`` observations, with the current weights."""
        layers, activation = self.model.critic_layers() if critic else self.model.actor_layers()
        folded = self._forwards.get((critic, batch))
        if folded is None:
            folded = self._forwards[critic, batch] = FoldedMLP(layers, activation, batch)
            return folded
        return folded.load(layers)

    def rollout_actor(
        self, steps: int, num_envs: int, to_env: Callable[[np.ndarray], np.ndarray] | None = None,
        log_prob: bool = False,
    ) -> NumpyRolloutActor:
        """A ``NumpyRolloutActor`` for a rollout of ``steps`` x ``num_envs`` with the current weights."""
        forward = self.forward(False, num_envs)
        sigma = None if self.model.discrete else np.exp(self.model.log_std.detach().numpy())
        return NumpyRolloutActor(forward, steps, sigma, to_env, log_prob)

    def rollout_values(self, obs: torch.Tensor, last_obs: torch.Tensor) -> torch.Tensor:
        """The critic's values of a rollout's observations ``(T, B, ...)`` and of its last ones ``(B, ...)``, as
        one ``(T + 1, B)`` float32 tensor, in one forward pass (float32 CPU observations)."""
        steps, envs = obs.shape[:2]
        critic = self.forward(True, (steps + 1) * envs)
        critic.input[: steps * envs] = obs.numpy().reshape(steps * envs, -1)  # filled in place: no concatenation
        critic.input[steps * envs :] = last_obs.numpy().reshape(envs, -1)
        return torch.from_numpy(critic.run().reshape(steps + 1, envs))


class NumpyRolloutActor:
    """A ``RolloutActor`` (see ``zoo.policies.base``) from ``NumpyActing.rollout_actor``: the sampling of
    ``ActorCriticPolicy.collect`` for a whole rollout, with the per-step work cut to one forward pass and the
    sampling; the outputs and raw actions go straight into the rollout's arrays.

    The noise is ``collect``'s: a discrete policy draws the Gumbel noise of every step at once (torch's generator
    fills exponential draws in order, so one ``(steps, B, N)`` draw equals ``steps`` draws of ``(B, N)``); Gaussian
    noise is drawn per step, as ``collect`` draws it (torch's normal sampler fills a large tensor in another order
    than several small ones). With ``log_prob`` (discrete actions) it also hands over the behaviour
    log-probabilities, computed for the whole rollout in numpy at the end, which ``process_rollout`` then does not
    compute again (equal up to float rounding).

    (Tried: the critic beside the actor in one block-diagonal forward, to get the values during collection: no
    faster end to end on CartPole than valuing the rollout in one pass afterwards.)

    Arguments:
        forward: the actor's forward pass for ``num_envs`` observations (logits, or Gaussian means).
        steps: the rollout's length.
        sigma: the Gaussian standard deviations ``(D,)``; None for discrete actions.
        to_env: maps raw actions (numpy) to what the env receives; None: the raw actions themselves.
        log_prob: hand over the behaviour log-probabilities (discrete actions only).
    """

    def __init__(
        self, forward: FoldedMLP, steps: int, sigma: np.ndarray | None = None,
        to_env: Callable[[np.ndarray], np.ndarray] | None = None, log_prob: bool = False,
    ) -> None:
        self._forward = forward
        self.discrete = sigma is None
        self._log_prob = log_prob and self.discrete
        num_envs, width = len(forward.input), forward.width
        self._output = np.empty((steps, num_envs, width), dtype=np.float32)  # logits, or Gaussian means
        if self.discrete:
            self._noise = torch.empty((steps, num_envs, width)).exponential_().numpy()
            np.log(self._noise, out=self._noise)  # log of the exponential draws; the sample is argmax(out - this)
            self._action = np.empty((steps, num_envs), dtype=np.int64)
            self._scratch = np.empty((num_envs, width), dtype=np.float32)
            self._rows = list(zip(self._output, self._noise, self._action))  # each step's views, made once
        else:
            self._sigma = sigma
            self._action = np.empty((steps, num_envs, width), dtype=np.float32)
            self._rows = list(zip(self._output, [None] * steps, self._action))  # (no pre-drawn noise)
        self._to_env = to_env
        self._masks: np.ndarray | None = None  # (steps, B, width) where the env gives action masks

    def act(self, t: int, obs: np.ndarray, action_mask: np.ndarray | None = None) -> np.ndarray:
        """Sample step ``t``'s actions for ``obs`` (among the valid ones where ``action_mask`` ``(B, width)`` is
        given: their logits masked, ``zoo.policies.masking``); returns what the env receives."""
        out, noise, action = self._rows[t]
        self._forward(obs, out)
        if action_mask is not None:
            self._masks = _record_mask(self._masks, t, action_mask, len(self._rows))
            out[~action_mask] = MASKED_LOGIT
        if self.discrete:
            np.subtract(out, noise, out=self._scratch)
            self._scratch.argmax(axis=-1, out=action)
        else:
            np.add(out, self._sigma * torch.randn(out.shape).numpy(), out=action)
        return action if self._to_env is None else self._to_env(action)

    def finish(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The raw actions ``(steps, B[, D])`` and ``{'policy_output': (steps, B, width)}`` (logits, or mu and
        sigma side by side), plus ``log_prob`` ``(steps, B)`` where asked."""
        output = self._output
        if not self.discrete:
            output = np.concatenate([output, np.broadcast_to(self._sigma, output.shape)], axis=-1)
        extras = {"policy_output": torch.from_numpy(output)}
        if self._masks is not None:
            extras["action_mask"] = torch.from_numpy(self._masks)
        if self._log_prob:  # log-softmax at the sampled actions, for the whole rollout in a few numpy calls
            width = output.shape[-1]
            shifted = (output - np.maximum.reduce(output, axis=-1, keepdims=True)).reshape(-1, width)
            normaliser = np.log(np.add.reduce(np.exp(shifted), axis=-1))
            chosen = shifted[np.arange(len(shifted)), self._action.reshape(-1)]
            extras["log_prob"] = torch.from_numpy((chosen - normaliser).reshape(self._action.shape))
        return torch.from_numpy(self._action), extras


def _record_mask(masks: np.ndarray | None, t: int, action_mask: np.ndarray, steps: int) -> np.ndarray:
    """``masks`` ``(steps, B, width)`` (made at the first step) with step ``t``'s row set to ``action_mask``."""
    if masks is None:
        masks = np.ones((steps, *action_mask.shape), dtype=bool)
    masks[t] = action_mask
    return masks
