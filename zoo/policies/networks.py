"""Actor-critic MLPs shared by the on-policy policies (orthogonal init, separate or shared trunks)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import nn

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def mlp(sizes: list[int], activation: str) -> nn.Sequential:
    """Linear layers between consecutive ``sizes`` with ``activation`` after each (orthogonal, gain sqrt 2)."""
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        layers += [orthogonal(nn.Linear(fan_in, fan_out), math.sqrt(2)), _ACTIVATIONS[activation]()]
    return nn.Sequential(*layers)


def orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    """Orthogonal weights with ``gain`` and zero bias (the PPO implementation-details recipe)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(nn.Module):
    """Policy head (logits, or Gaussian mean with a state-independent log-std) and value head.

    ``shared=True`` uses one trunk for both heads; otherwise actor and critic have their own MLPs.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden_sizes: list[int],
        activation: str = "tanh",
        shared: bool = False,
        init_log_std: float = 0.0,
    ) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation '{activation}' is unknown: use one of {sorted(_ACTIVATIONS)}")
        obs_dim = int(np.prod(observation_space.shape))
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if not self.discrete and not isinstance(action_space, gym.spaces.Box):
            raise ValueError(f"action space {action_space} is not supported: use Discrete or Box")
        out_dim = int(action_space.n) if self.discrete else int(np.prod(action_space.shape))
        sizes = [obs_dim, *hidden_sizes]
        self.actor_trunk = mlp(sizes, activation)
        self.critic_trunk = self.actor_trunk if shared else mlp(sizes, activation)
        last = sizes[-1]
        self.policy_head = orthogonal(nn.Linear(last, out_dim), 0.01)
        self.value_head = orthogonal(nn.Linear(last, 1), 1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((out_dim,), float(init_log_std)))

    def policy_output(self, obs: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """Logits ``(..., N)`` or ``{'mu', 'sigma'}`` of shape ``(..., D)``."""
        out = self.policy_head(self.actor_trunk(obs))
        if self.discrete:
            return out
        return {"mu": out, "sigma": self.log_std.exp().expand_as(out)}

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values ``(...)``."""
        return self.value_head(self.critic_trunk(obs)).squeeze(-1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor | dict[str, torch.Tensor], torch.Tensor]:
        return self.policy_output(obs), self.value(obs)
