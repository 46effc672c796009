"""Actor-critic networks shared by the on-policy policies: MLP trunks (orthogonal init, separate or shared), an
optional observation encoder before them (``NatureCNN`` for images), and heads for Discrete, MultiDiscrete,
MultiBinary and Box actions."""

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


def mlp(sizes: list[int], activation: str, ortho_init: bool = True) -> nn.Sequential:
    """Linear layers between consecutive ``sizes`` with ``activation`` after each (orthogonal, gain sqrt 2; torch's
    default init with ``ortho_init=False``)."""
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        layer = nn.Linear(fan_in, fan_out)
        layers += [orthogonal(layer, math.sqrt(2)) if ortho_init else layer, ACTIVATIONS[activation]()]
    return nn.Sequential(*layers)


def orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    """Orthogonal weights with ``gain`` and zero bias (the PPO implementation-details recipe)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def is_image_space(space: gym.Space) -> bool:
    """Whether ``space`` holds images: a uint8 Box of shape ``(H, W)``, ``(C, H, W)`` or ``(H, W, C)``."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (2, 3)


def image_layout(shape: tuple[int, ...]) -> tuple[int, int, int, bool]:
    """``(channels, height, width, channels_last)`` of an image shape; the channel axis is the smallest of the first
    and last (``(4, 84, 84)``: stacked frames, channels first; ``(96, 96, 3)``: RGB, channels last)."""
    if len(shape) == 2:
        return 1, shape[0], shape[1], False
    if len(shape) != 3:
        raise ValueError(f"an image has 2 or 3 dimensions, got shape {tuple(shape)}")
    if shape[-1] < shape[0]:
        return shape[-1], shape[0], shape[1], True
    return shape[0], shape[1], shape[2], False


class NatureCNN(nn.Module):
    """The convolutional encoder of the DQN Nature paper (Mnih et al. 2015): three convolutions and a linear layer.

    Conv 32x8x8 stride 4, conv 64x4x4 stride 2, conv 64x3x3 stride 1 (ReLU after each), then a linear layer to
    ``features_dim`` features (ReLU). uint8 observations are scaled to [0, 1]; ``(H, W)`` images get a channel and
    channels-last images are transposed, so the env's layout is taken as it comes. Orthogonal init (gain sqrt 2).
    Images must be at least 36x36 (the smallest size the three convolutions reduce to 1x1).
    """

    def __init__(self, observation_space: gym.Space, features_dim: int = 512) -> None:
        super().__init__()
        if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) not in (2, 3):
            raise ValueError(
                f"NatureCNN takes image observations (a Box of shape (H, W), (C, H, W) or (H, W, C)), got "
                f"{observation_space}: use encoder 'mlp' for other observations"
            )
        channels, height, width, self.channels_last = image_layout(observation_space.shape)
        if min(height, width) < 36:
            raise ValueError(
                f"NatureCNN needs images of at least 36x36, got {height}x{width} from {observation_space}: resize "
                f"the observations (e.g. gymnasium's ResizeObservation) or use encoder 'mlp'"
            )
        self.image_ndim = len(observation_space.shape)
        self.scale = 1.0 / 255.0 if observation_space.dtype == np.uint8 else 1.0
        self.convs = nn.Sequential(
            _conv(channels, 32, 8, 4), nn.ReLU(), _conv(32, 64, 4, 2), nn.ReLU(), _conv(64, 64, 3, 1), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, channels, height, width)).shape[-1]
        self.linear = orthogonal(nn.Linear(flat, features_dim), math.sqrt(2))
        self.output_dim = features_dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Features ``(..., features_dim)`` of images ``(..., *observation_shape)``."""
        leading = obs.shape[: obs.ndim - self.image_ndim]
        x = obs.reshape(-1, *obs.shape[obs.ndim - self.image_ndim:]).float() * self.scale
        if self.image_ndim == 2:
            x = x.unsqueeze(1)
        elif self.channels_last:
            x = x.permute(0, 3, 1, 2)
        return torch.relu(self.linear(self.convs(x))).reshape(*leading, self.output_dim)


def _conv(fan_in: int, fan_out: int, kernel: int, stride: int) -> nn.Conv2d:
    layer = nn.Conv2d(fan_in, fan_out, kernel, stride)
    nn.init.orthogonal_(layer.weight, math.sqrt(2))
    nn.init.zeros_(layer.bias)
    return layer


# Encoders zoo ships; plugins add theirs to zoo.registry.MODEL_REGISTRY (a class or factory called with the
# observation space and ``encoder_kwargs``, returning a module with ``output_dim`` features).
BUILTIN_ENCODERS: dict[str, Any] = {"nature_cnn": NatureCNN}


def build_encoder(name: str, observation_space: gym.Space, kwargs: dict[str, Any] | None = None) -> nn.Module | None:
    """The observation encoder ``name`` for ``observation_space``, or None where observations enter the MLP flat.

    ``"auto"``: ``nature_cnn`` for image spaces (``is_image_space``), else flat; ``"mlp"``: flat; any other name is
    looked up among the built-in encoders and then in ``zoo.registry.MODEL_REGISTRY``.
    """
    from ..registry import MODEL_REGISTRY

    if name == "auto":
        name = "nature_cnn" if is_image_space(observation_space) else "mlp"
    if name == "mlp":
        if kwargs:
            raise ValueError(f"encoder 'mlp' takes no encoder_kwargs, got {sorted(kwargs)}")
        return None
    factory = BUILTIN_ENCODERS.get(name) or MODEL_REGISTRY.get(name)
    encoder = factory(observation_space, **dict(kwargs or {}))
    if not isinstance(encoder, nn.Module) or not isinstance(getattr(encoder, "output_dim", None), int):
        raise ValueError(f"encoder '{name}' must build an nn.Module with an integer attribute output_dim")
    return encoder


def action_nvec(action_space: gym.Space) -> tuple[int, ...] | None:
    """The sizes of the categorical components of a MultiDiscrete or MultiBinary space (flattened), else None."""
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return tuple(int(n) for n in np.asarray(action_space.nvec).reshape(-1))
    if isinstance(action_space, gym.spaces.MultiBinary):
        return (2,) * int(np.prod(action_space.shape))
    return None


def action_output_dim(action_space: gym.Space) -> int:
    """Width of the policy head: N logits (Discrete), sum(nvec) (MultiDiscrete, MultiBinary), D means (Box)."""
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    nvec = action_nvec(action_space)
    if nvec is not None:
        return sum(nvec)
    return int(np.prod(action_space.shape))


class ActorCritic(nn.Module):
    """Policy head (logits, or Gaussian mean with a state-independent log-std, or gSDE's state-dependent std) and
    value head.

    ``shared=True`` uses one trunk for both heads; otherwise actor and critic have their own MLPs. An ``encoder``
    (e.g. ``NatureCNN``), when given, turns observations into features before the trunks; actor and critic share it.
    MultiDiscrete and MultiBinary actions get ``sum(nvec)`` logits side by side (``nvec`` is set; see
    ``zoo.rl_utils.multi_categorical_logits``).
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
        encoder: nn.Module | None = None,
        sde: bool = False,
        full_std: bool = True,
        ortho_init: bool = True,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation '{activation}' is unknown: use one of {sorted(ACTIVATIONS)}")
        self.encoder = encoder
        obs_dim = encoder.output_dim if encoder is not None else int(np.prod(observation_space.shape))
        self.nvec = action_nvec(action_space)
        self.discrete = isinstance(action_space, gym.spaces.Discrete) or self.nvec is not None  # logits out
        if not self.discrete and not isinstance(action_space, gym.spaces.Box):
            raise ValueError(
                f"action space {action_space} is not supported: use Discrete, MultiDiscrete, MultiBinary or Box"
            )
        out_dim = action_output_dim(action_space)
        sizes = [obs_dim, *hidden_sizes]
        self.actor_trunk = mlp(sizes, activation, ortho_init)
        self.critic_trunk = self.actor_trunk if shared else mlp(sizes, activation, ortho_init)
        last = sizes[-1]
        self.policy_head = nn.Linear(last, out_dim)  # each initialised before the next is made: the same draws
        if ortho_init:
            orthogonal(self.policy_head, 0.01)
        self.value_head = nn.Linear(last, 1)
        if ortho_init:
            orthogonal(self.value_head, 1.0)
        # gSDE (zoo.policies.gsde): log-stds of the exploration matrix, (latent, actions) or (latent, 1) shared
        self.sde = sde and not self.discrete
        if self.sde:
            self.log_std = nn.Parameter(torch.full((last, out_dim if full_std else 1), float(init_log_std)))
        elif not self.discrete:
            self.log_std = nn.Parameter(torch.full((out_dim,), float(init_log_std)))
        self.shared = shared
        self._obs_ndim = 1 if encoder is not None else len(observation_space.shape)
        self._activation = _FUNCTIONS[activation]
        self._activation_name = activation
        # The hidden linear layers of each MLP, input first: what the forward passes and ``actor_layers``/
        # ``critic_layers`` read (the parameters themselves are read from the layers at every call).
        self._actor_hidden = [layer for layer in self.actor_trunk if isinstance(layer, nn.Linear)]
        self._critic_hidden = [layer for layer in self.critic_trunk if isinstance(layer, nn.Linear)]

    def actor_layers(self) -> tuple[list[nn.Linear], str]:
        """The actor's linear layers (trunk, then the policy head; the encoder's excluded) and the name of the
        activation after every layer but the last: what a forward pass outside torch needs (the weights are the
        live parameters)."""
        return [*self._actor_hidden, self.policy_head], self._activation_name

    def critic_layers(self) -> tuple[list[nn.Linear], str]:
        """The critic's linear layers (trunk, then the value head) and the activation's name; see
        ``actor_layers``."""
        return [*self._critic_hidden, self.value_head], self._activation_name

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        """What the MLPs take: the encoder's features, or the observations flattened."""
        if self.encoder is not None:
            return self.encoder(obs)
        if self._obs_ndim != 1:  # observations of any shape enter the MLP flattened
            return obs.unsqueeze(-1) if self._obs_ndim == 0 else obs.flatten(-self._obs_ndim)
        return obs

    def _mlp(self, layers: list[nn.Linear], x: torch.Tensor) -> torch.Tensor:
        for layer in layers:
            x = self._activation(F.linear(x, layer.weight, layer.bias))
        return x

    def _policy(self, features: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        out = F.linear(features, self.policy_head.weight, self.policy_head.bias)
        if self.discrete:
            return out
        if self.sde:  # the std of mu + z @ E given s: sqrt(z^2 @ sigma^2), z the detached latent features
            variance = torch.matmul(features.detach().square(), self.sde_std().square())
            return {"mu": out, "sigma": torch.sqrt(variance + 1e-6)}
        return {"mu": out, "sigma": self.log_std.exp().expand_as(out)}

    def sde_std(self) -> torch.Tensor:
        """gSDE: the std of each exploration-matrix entry, (latent_dim, action_dim)."""
        return self.log_std.exp().expand(self.log_std.shape[0], self.policy_head.out_features)

    def policy_and_latent(self, obs: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """``policy_output(obs)`` and the actor's latent features (its trunk's last hidden layer): what gSDE's
        exploration noise is a function of."""
        latent = self._mlp(self._actor_hidden, self._features(obs))
        return self._policy(latent), latent

    def _value(self, features: torch.Tensor) -> torch.Tensor:
        return F.linear(features, self.value_head.weight, self.value_head.bias).squeeze(-1)

    def policy_output(self, obs: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """Logits ``(..., N)`` or ``{'mu', 'sigma'}`` of shape ``(..., D)``."""
        return self._policy(self._mlp(self._actor_hidden, self._features(obs)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values ``(...)``."""
        return self._value(self._mlp(self._critic_hidden, self._features(obs)))

    def actor_parameters(self) -> dict[str, torch.Tensor]:
        """The parameters acting needs (actor trunk, policy head, log-std), by their state_dict names."""
        prefixes = ("encoder.", "actor_trunk.", "policy_head.", "log_std")
        return {name: p for name, p in self.named_parameters() if name.startswith(prefixes)}

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor | dict[str, torch.Tensor], torch.Tensor]:
        """``(policy_output(obs), value(obs))``; a shared trunk (and the encoder) runs once."""
        features = self._features(obs)  # the encoder (or the flattening) once for both MLPs
        if self.shared:
            features = self._mlp(self._actor_hidden, features)
            return self._policy(features), self._value(features)
        actor, critic = self._mlp(self._actor_hidden, features), self._mlp(self._critic_hidden, features)
        return self._policy(actor), self._value(critic)

