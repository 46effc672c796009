"""Actor-critic MLPs shared by the on-policy policies (orthogonal init, separate or shared trunks)."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}
_FUNCTIONS = {"tanh": torch.tanh, "relu": torch.relu, "elu": F.elu}


def mlp(sizes: list[int], activation: str) -> nn.Sequential:
    """Linear layers between consecutive ``sizes`` with ``activation`` after each (orthogonal, gain sqrt 2)."""
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        layers += [orthogonal(nn.Linear(fan_in, fan_out), math.sqrt(2)), ACTIVATIONS[activation]()]
    return nn.Sequential(*layers)


def orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    """Orthogonal weights with ``gain`` and zero bias (the PPO implementation-details recipe)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(nn.Module):
    """Policy head (logits, or Gaussian mean with a state-independent log-std) and value head.

    ``shared=True`` uses one trunk for both heads; otherwise actor and critic have their own MLPs.
    The forward passes call ``F.linear`` on the layers' parameters directly: for networks this small, going
    through ``nn.Module.__call__`` for every layer costs more than the arithmetic (about 2.5x the time). The
    modules stay the owners of the parameters, so ``state_dict`` and optimisers see the usual structure.
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
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation '{activation}' is unknown: use one of {sorted(ACTIVATIONS)}")
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
        self.shared = shared
        self._obs_ndim = len(observation_space.shape)
        self._activation = _FUNCTIONS[activation]
        self._cache_layers()

    def _cache_layers(self) -> None:
        def pairs(trunk: nn.Sequential) -> list[tuple[torch.Tensor, torch.Tensor]]:
            return [(layer.weight, layer.bias) for layer in trunk if isinstance(layer, nn.Linear)]

        self._actor_layers = pairs(self.actor_trunk)
        self._critic_layers = pairs(self.critic_trunk)
        self._policy_head = (self.policy_head.weight, self.policy_head.bias)
        self._value_head = (self.value_head.weight, self.value_head.bias)

    def _apply(self, fn: Any, recurse: bool = True) -> ActorCritic:
        # .to()/.cuda()/.double() may replace the parameter objects: refresh the cached references.
        result = super()._apply(fn, recurse)
        self._cache_layers()
        return result

    def _trunk(self, layers: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor) -> torch.Tensor:
        if self._obs_ndim != 1:  # observations of any shape enter the MLP flattened
            x = x.unsqueeze(-1) if self._obs_ndim == 0 else x.flatten(-self._obs_ndim)
        for weight, bias in layers:
            x = self._activation(F.linear(x, weight, bias))
        return x

    def _policy(self, features: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        out = F.linear(features, *self._policy_head)
        if self.discrete:
            return out
        return {"mu": out, "sigma": self.log_std.exp().expand_as(out)}

    def policy_output(self, obs: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """Logits ``(..., N)`` or ``{'mu', 'sigma'}`` of shape ``(..., D)``."""
        return self._policy(self._trunk(self._actor_layers, obs))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values ``(...)``."""
        return F.linear(self._trunk(self._critic_layers, obs), *self._value_head).squeeze(-1)

    def actor_parameters(self) -> dict[str, torch.Tensor]:
        """The parameters acting needs (actor trunk, policy head, log-std), by their state_dict names."""
        prefixes = ("actor_trunk.", "policy_head.", "log_std")
        return {name: p for name, p in self.named_parameters() if name.startswith(prefixes)}

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor | dict[str, torch.Tensor], torch.Tensor]:
        """``(policy_output(obs), value(obs))``; a shared trunk runs once."""
        if self.shared:
            features = self._trunk(self._actor_layers, obs)
            return self._policy(features), F.linear(features, *self._value_head).squeeze(-1)
        return self.policy_output(obs), self.value(obs)
