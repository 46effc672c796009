"""SAC's networks: a squashed-Gaussian actor and an ensemble of Q critics evaluated in one batched forward.

For the small networks of continuous-control RL on a CPU, the time goes into per-operation overhead rather than
arithmetic, so the critics of the ensemble (two for SAC's clipped double Q) are one module whose layers hold
``(E, fan_in, fan_out)`` weights: one ``baddbmm`` per layer evaluates every critic. Both modules call
``zoo.policies.matmul``'s ``linear``/``ensemble_linear`` on their parameters directly (``F.linear``/``baddbmm``, or
oneDNN's float32 products where MKL is slow).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .matmul import ensemble_mlp, linear

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
        initialise_([layer.weight for layer in self.layers], [layer.bias for layer in self.layers], init)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = obs
        for layer, activation in zip(self.layers[:-1], self.activations):
            x = activation(linear(x, layer.weight, layer.bias))
        out = self.layers[-1]
        # float32 out (a no-op in fp32): under bf16 autocast everything after the matmuls stays in fp32
        mu, log_std = linear(x, out.weight, out.bias).float().chunk(2, dim=-1)
        return mu, log_std.clamp(self.log_std_low, self.log_std_high)


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
