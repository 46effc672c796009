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

from .matmul import ensemble_linear, linear

_ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh, "elu": F.elu}


def _uniform_fan_in(tensor: torch.Tensor, fan_in: int) -> None:
    # torch.nn.Linear's default initialisation (kaiming_uniform with a = sqrt(5)): U(-1/sqrt(fan_in), ...).
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    nn.init.uniform_(tensor, -bound, bound)


class SquashedGaussianActor(nn.Module):
    """``obs -> (mu, log_std)`` of a Gaussian over pre-tanh actions; ``log_std`` is squashed into its bounds.

    Arguments:
        obs_dim, action_dim: input and output sizes.
        hidden_sizes: the MLP's hidden layers.
        activation: ``relu``, ``tanh`` or ``elu``.
        log_std_bounds: ``(low, high)``: the network's log-std output is clamped into them (as in SB3 and the
            ACE code), so it starts near 0 (a standard deviation of 1: the actor explores from the start).
    """

    def __init__(
        self, obs_dim: int, action_dim: int, hidden_sizes: list[int], activation: str = "relu",
        log_std_bounds: tuple[float, float] = (-5.0, 2.0),
    ) -> None:
        super().__init__()
        sizes = [obs_dim, *hidden_sizes, 2 * action_dim]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.activation = _ACTIVATIONS[activation]
        self.log_std_low, self.log_std_high = log_std_bounds

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = obs
        for layer in self.layers[:-1]:
            x = self.activation(linear(x, layer.weight, layer.bias))
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
        activation: str = "relu",
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
        self.activation = _ACTIVATIONS[activation]

    def forward(self, obs: torch.Tensor, action: torch.Tensor, detach_weights: bool = False) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1)
        last = len(self.weights) - 1
        for index, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            if detach_weights:
                weight, bias = weight.detach(), bias.detach()
            # the first layer has one input for every critic: a broadcasting product, no copy per critic
            x = ensemble_linear(x, weight, bias)
            if index < last:
                x = self.activation(x)
        return x.float()  # float32 out (a no-op in fp32): targets and losses stay fp32 under bf16 autocast
