"""The networks of the continuous off-policy actor-critics: SAC's squashed-Gaussian actor, TD3's deterministic tanh
actor, and an ensemble of Q critics evaluated in one batched forward.

For the small networks of continuous-control RL on a CPU, the time goes into per-operation overhead rather than
arithmetic, so the critics of the ensemble (two for clipped double Q) are one module whose layers hold
``(E, fan_in, fan_out)`` weights: one ``baddbmm`` per layer evaluates every critic. The modules call
``zoo.accel.matmul``'s ``linear``/``ensemble_mlp`` on their parameters directly (``F.linear``/``baddbmm``, or
oneDNN's float32 products where the CPU takes them faster).

The actors act one observation at a time, with weights that change at every update, and for that they declare a
numpy forward next to their torch one (``forward`` takes either): numpy on views of the live parameters
(``zoo.accel.numpy_acting.LiveMLP``) costs a fraction of torch's per-call dispatch (docs/speed.md). What follows the
forward -- the sampling, the squashing, the scaling into the bounds -- is written once, in the operations below
(``tanh``, ``exp``, ``clip``, ``normal_like``), which take tensors and arrays alike; so a policy's ``explore_action``
is one formula for both (``OffPolicyPolicy.acts_in_numpy`` says when it runs on arrays).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..accel.matmul import ensemble_mlp, linear
from ..accel.numpy_acting import LiveMLP
from ..errors import ConfigError

Array = Any  # a torch.Tensor, or a numpy array on the numpy acting path


def tanh(x: Array) -> Array:
    """``tanh`` of a tensor or an array."""
    return torch.tanh(x) if isinstance(x, torch.Tensor) else np.tanh(x)


def exp(x: Array) -> Array:
    """``exp`` of a tensor or an array."""
    return x.exp() if isinstance(x, torch.Tensor) else np.exp(x)


def clip(x: Array, low: float, high: float) -> Array:
    """``x`` clipped into ``[low, high]`` (a tensor's ``clamp``, an array's ``clip``)."""
    return x.clamp(low, high) if isinstance(x, torch.Tensor) else np.clip(x, low, high)


def normal_like(x: Array) -> Array:
    """Standard normal noise of ``x``'s shape from torch's global generator (float32; an array for an array), so that
    both paths draw the same numbers."""
    if isinstance(x, torch.Tensor):
        return torch.randn_like(x)
    return torch.randn(x.shape, dtype=torch.float32).numpy()


class NumpyForward:
    """A network's numpy forward on views of its layers' live parameters (``LiveMLP``), rebuilt where those are no
    longer the parameters' storage (a network replaced, a parameter moved)."""

    def __init__(self) -> None:
        self._mlp: LiveMLP | None = None

    def __call__(self, layers: list[nn.Linear], activation_names: list[str], x: np.ndarray) -> np.ndarray:
        if self._mlp is None or not self._mlp.current(layers):
            self._mlp = LiveMLP(layers, activation_names)
        return self._mlp(x if x.ndim == 2 else x.reshape(len(x), -1))


def _numpy_ready(layers: nn.ModuleList) -> bool:
    weight = layers[0].weight
    return weight.device.type == "cpu" and weight.dtype == torch.float32

_ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh, "elu": F.elu}


INITS = ("torch", "xavier", "orthogonal")


def _uniform_fan_in(tensor: torch.Tensor, fan_in: int) -> None:
    # torch.nn.Linear's default initialisation (kaiming_uniform with a = sqrt(5)): U(-1/sqrt(fan_in), ...).
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    nn.init.uniform_(tensor, -bound, bound)


def activations(hidden_layers: int, activation: str, input_activation: str | None = None) -> list:
    """The activation after each hidden layer: ``activation``, except ``input_activation`` after the first (ACE's
    networks: ELU, then ReLU). A ValueError names an unknown one."""
    names = [input_activation or activation, *[activation] * (hidden_layers - 1)][:hidden_layers]
    for name in names:
        if name not in _ACTIVATIONS:
            raise ValueError(f"unknown activation '{name}': use one of {', '.join(_ACTIVATIONS)}")
    return [_ACTIVATIONS[name] for name in names]


@torch.no_grad()
def initialise_(weights: list[torch.Tensor], biases: list[torch.Tensor], init: str) -> None:
    """Re-initialise 2-D weights in place: ``xavier`` (Xavier-uniform, gain 1) or ``orthogonal`` (gain 1), biases
    zero: the inits of ACE's code for its networks and for the fresh weights of its resets; ``torch`` leaves
    nn.Linear's default. Works on either layout, ``(out, in)`` or ``(in, out)``: both inits are symmetric in it."""
    if init == "torch":
        return
    for weight in weights:
        (nn.init.xavier_uniform_ if init == "xavier" else nn.init.orthogonal_)(weight)
    for bias in biases:
        bias.zero_()


class SquashedGaussianActor(nn.Module):
    """``obs -> (mu, log_std)`` of a Gaussian over pre-tanh actions; ``log_std`` is squashed into its bounds.

    Arguments:
        obs_dim, action_dim: input and output sizes.
        hidden_sizes: the MLP's hidden layers.
        activation: ``relu``, ``tanh`` or ``elu``; ``input_activation`` after the first hidden layer (None: the same).
        log_std_bounds: ``(low, high)``: the network's log-std output is clamped into them (as in SB3 and the
            ACE code), so it starts near 0 (a standard deviation of 1: the actor explores from the start).
        init: ``torch`` (nn.Linear's default), ``xavier`` or ``orthogonal`` (``initialise_``).
    """

    def __init__(
        self, obs_dim: int, action_dim: int, hidden_sizes: list[int], activation: str = "relu",
        log_std_bounds: tuple[float, float] = (-5.0, 2.0), input_activation: str | None = None, init: str = "torch",
    ) -> None:
        super().__init__()
        sizes = [obs_dim, *hidden_sizes, 2 * action_dim]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.activations = activations(len(hidden_sizes), activation, input_activation)
        self.activation_names = [input_activation or activation, *[activation] * (len(hidden_sizes) - 1)]
        self.log_std_low, self.log_std_high = log_std_bounds
        self.action_dim = action_dim
        initialise_([layer.weight for layer in self.layers], [layer.bias for layer in self.layers], init)
        self._numpy = NumpyForward()

    def forward(self, obs: Array) -> tuple[Array, Array]:
        """``(mu, log_std)`` for observations ``(B, obs_dim)``: tensors, or arrays for an array (the numpy path)."""
        if isinstance(obs, np.ndarray):
            return self._head(self._numpy(list(self.layers), self.activation_names, obs))
        x = obs
        for layer, activation in zip(self.layers[:-1], self.activations):
            x = activation(linear(x, layer.weight, layer.bias))
        out = self.layers[-1]
        # float32 out (a no-op in fp32): under bf16 autocast everything after the matmuls stays in fp32
        return self._head(linear(x, out.weight, out.bias).float())

    def _head(self, out: Array) -> tuple[Array, Array]:
        # a tensor's chunk: what a compiled step traced before the numpy path shared this head (the same graph)
        halves = out.chunk(2, dim=-1) if isinstance(out, torch.Tensor) else (out[..., : self.action_dim],
                                                                             out[..., self.action_dim :])
        mu, log_std = halves
        return mu, clip(log_std, self.log_std_low, self.log_std_high)

    def sample(self, obs: Array) -> Array:
        """A squashed Gaussian sample in [-1, 1], ``tanh(mu + exp(log_std) * noise)`` (tensors or arrays)."""
        mu, log_std = self(obs)
        return tanh(mu + exp(log_std) * normal_like(mu))

    def numpy_ready(self) -> bool:
        """Whether ``forward`` takes arrays now (float32 weights on the CPU)."""
        return _numpy_ready(self.layers)


class EnsembleQ(nn.Module):
    """``E`` critics ``Q_e(obs, action)`` as one module: layer weights ``(E, fan_in, fan_out)``.

    ``forward`` returns ``(E, B, out_dim)``: ``out_dim = 1`` for a scalar Q, ``num_bins`` logits for a
    categorical (HL-Gauss) critic. ``detach_weights=True`` evaluates with the weights treated as constants, for
    the actor's loss, which needs gradients with respect to the action only.
    """

    def __init__(
        self, obs_dim: int, action_dim: int, hidden_sizes: list[int], ensemble: int = 2, out_dim: int = 1,
        activation: str = "relu", input_activation: str | None = None, init: str = "torch",
    ) -> None:
        super().__init__()
        sizes = [obs_dim + action_dim, *hidden_sizes, out_dim]
        self.ensemble = ensemble
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            weight, bias = torch.empty(ensemble, fan_in, fan_out), torch.empty(ensemble, 1, fan_out)
            _uniform_fan_in(weight, fan_in)
            _uniform_fan_in(bias, fan_in)
            self.weights.append(nn.Parameter(weight))
            self.biases.append(nn.Parameter(bias))
        self.activations = activations(len(hidden_sizes), activation, input_activation)
        initialise_([weight[e] for weight in self.weights for e in range(ensemble)], list(self.biases), init)

    def forward(self, obs: torch.Tensor, action: torch.Tensor, detach_weights: bool = False) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1)
        weights, biases = list(self.weights), list(self.biases)
        if detach_weights:
            weights, biases = [w.detach() for w in weights], [b.detach() for b in biases]
        # the first layer has one input for every critic: a broadcasting product, no copy per critic
        x = ensemble_mlp(x, weights, biases, list(self.activations))
        return x.float()  # float32 out (a no-op in fp32): targets and losses stay fp32 under bf16 autocast


class DeterministicActor(nn.Module):
    """``obs -> tanh(mu(obs))``: an MLP whose output is squashed into [-1, 1] (TD3's actor)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: list[int], activation: str = "relu") -> None:
        super().__init__()
        sizes = [obs_dim, *hidden_sizes, action_dim]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.activation = _ACTIVATIONS[activation]
        self.activation_names = [activation] * len(hidden_sizes)
        self._numpy = NumpyForward()

    def forward(self, obs: Array) -> Array:
        """Actions in [-1, 1] for observations ``(B, obs_dim)``: a tensor, or an array for an array."""
        if isinstance(obs, np.ndarray):
            return np.tanh(self._numpy(list(self.layers), self.activation_names, obs))
        x = obs
        for layer in self.layers[:-1]:
            x = self.activation(linear(x, layer.weight, layer.bias))
        out = self.layers[-1]
        return torch.tanh(linear(x, out.weight, out.bias).float())  # fp32 out under bf16 autocast too

    def numpy_ready(self) -> bool:
        """Whether ``forward`` takes arrays now (float32 weights on the CPU)."""
        return _numpy_ready(self.layers)


def check_bounded_box(algorithm: str, observation_space: gym.Space, action_space: gym.Space) -> None:
    """Raise ``ConfigError`` unless the observations are a Box and the actions a 1-D Box with finite bounds (the
    spaces of a tanh-squashed actor).

    Examples:
        >>> check_bounded_box("SAC", gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)))  # accepted
        >>> check_bounded_box("SAC", gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2))
        Traceback (most recent call last):
        zoo.errors.ConfigError: action space Discrete(2) is not supported by SAC: it takes a 1-D Box with finite ...
    """
    if not isinstance(observation_space, gym.spaces.Box) or observation_space.shape is None:
        raise ConfigError(
            f"observation space {observation_space} is not supported by {algorithm}: it takes Box observations"
        )
    bounded = isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1 and (
        action_space.shape[0] > 0 and np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()
    )
    if not bounded:
        raise ConfigError(
            f"action space {action_space} is not supported by {algorithm}: it takes a 1-D Box with finite bounds "
            f"(its actions are squashed into them)"
        )


class BoxActions:
    """The affine map between a bounded Box's env actions and the [-1, 1] range of a tanh actor.

    Examples:
        >>> actions = BoxActions(gym.spaces.Box(0.0, 2.0, (2,)), torch.device("cpu"))
        >>> actions.to_unit(torch.tensor([0.0, 1.5])), actions.to_env(np.array([1.0, -1.0]))
        (tensor([-1.0000,  0.5000]), array([2., 0.]))
    """

    def __init__(self, action_space: gym.spaces.Box, device: torch.device) -> None:
        low = torch.as_tensor(action_space.low, dtype=torch.float32, device=device)
        high = torch.as_tensor(action_space.high, dtype=torch.float32, device=device)
        self.center, self.half = (high + low) / 2, (high - low) / 2
        self.center_np, self.half_np = self.center.cpu().numpy(), self.half.cpu().numpy()  # for numpy acting

    def to_unit(self, action: torch.Tensor) -> torch.Tensor:
        """Env actions (as stored in the replay) -> [-1, 1]."""
        return (action - self.center) / self.half

    def to_env(self, unit: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        """[-1, 1] -> env actions, a tensor (traceable: used by ``deterministic_action``) or a numpy array."""
        if isinstance(unit, np.ndarray):
            return self.center_np + self.half_np * unit
        return self.center + self.half * unit
