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


def _np_relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=x)


def _np_elu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0.0, x, np.expm1(np.minimum(x, 0.0)))


_NUMPY_FUNCTIONS = {"tanh": lambda x: np.tanh(x, out=x), "relu": _np_relu, "elu": _np_elu}


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
    """Policy head (logits, or Gaussian mean with a state-independent log-std) and value head.

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
        self.actor_trunk = mlp(sizes, activation)
        self.critic_trunk = self.actor_trunk if shared else mlp(sizes, activation)
        last = sizes[-1]
        self.policy_head = orthogonal(nn.Linear(last, out_dim), 0.01)
        self.value_head = orthogonal(nn.Linear(last, 1), 1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((out_dim,), float(init_log_std)))
        self.shared = shared
        self._obs_ndim = 1 if encoder is not None else len(observation_space.shape)
        self._activation = _FUNCTIONS[activation]
        self._activation_name = activation
        self._np_activation = _NUMPY_FUNCTIONS[activation]
        self._cache_layers()

    def _cache_layers(self) -> None:
        def pairs(trunk: nn.Sequential) -> list[tuple[torch.Tensor, torch.Tensor]]:
            return [(layer.weight, layer.bias) for layer in trunk if isinstance(layer, nn.Linear)]

        self._actor_layers = pairs(self.actor_trunk)
        self._critic_layers = pairs(self.critic_trunk)
        self._policy_head = (self.policy_head.weight, self.policy_head.bias)
        self._value_head = (self.value_head.weight, self.value_head.bias)
        self._np_layers: dict[bool, tuple[tuple[int, ...], list[tuple[np.ndarray, np.ndarray]]]] = {}
        self._folded_cache: dict[tuple[bool, int], FoldedNumpyMLP] = {}
        # Whether the numpy forward passes apply (float32 on the CPU, no encoder); refreshed by .to()/.double().
        head = self.policy_head.weight
        self.numpy_acting = self.encoder is None and head.device.type == "cpu" and head.dtype == torch.float32

    def _apply(self, fn: Any, recurse: bool = True) -> ActorCritic:
        # .to()/.cuda()/.double() may replace the parameter objects: refresh the cached references.
        result = super()._apply(fn, recurse)
        self._cache_layers()
        return result

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        """What the MLPs take: the encoder's features, or the observations flattened."""
        if self.encoder is not None:
            return self.encoder(obs)
        if self._obs_ndim != 1:  # observations of any shape enter the MLP flattened
            return obs.unsqueeze(-1) if self._obs_ndim == 0 else obs.flatten(-self._obs_ndim)
        return obs

    def _mlp(self, layers: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor) -> torch.Tensor:
        for weight, bias in layers:
            x = self._activation(F.linear(x, weight, bias))
        return x

    def _trunk(self, layers: list[tuple[torch.Tensor, torch.Tensor]], obs: torch.Tensor) -> torch.Tensor:
        return self._mlp(layers, self._features(obs))

    def _policy(self, features: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        out = F.linear(features, *self._policy_head)
        if self.discrete:
            return out
        return {"mu": out, "sigma": self.log_std.exp().expand_as(out)}

    def numpy_policy_output(self, obs: np.ndarray) -> np.ndarray:
        """The policy head's output (logits, or the Gaussian mean) computed in numpy, for acting on the CPU.

        For the small MLPs of classic control, each torch call costs several microseconds of dispatch, more than
        its arithmetic, and torch's CPU tanh is several times slower than numpy's (measured: 71 us against 9 us
        for 256x64). The weights are numpy views of the parameters' own storage (refreshed when an optimiser or
        ``.to()`` moves them), so they are always the current ones. Only where ``numpy_acting`` holds.
        """
        return self._numpy_mlp(self._numpy_layers(actor=True), obs)

    def numpy_value(self, obs: np.ndarray) -> np.ndarray:
        """State values ``(...)`` computed in numpy (see ``numpy_policy_output``)."""
        return self._numpy_mlp(self._numpy_layers(actor=False), obs)[..., 0]

    def numpy_policy_function(self, batch: int) -> FoldedNumpyMLP:
        """The policy head's numpy forward for ``batch`` observations at a time, with copies of the current weights
        (``FoldedNumpyMLP``): for many calls while the weights stay put (a rollout). The object is reused from
        call to call (with the weights copied again), so a second call with the same ``batch`` ends the first
        one's use."""
        return self._folded(True, batch)

    def numpy_value_function(self, batch: int) -> FoldedNumpyMLP:
        """The critic's numpy forward (output ``(batch, 1)``) with copies of the current weights: for valuing a
        whole rollout at once (a third fewer numpy calls than ``numpy_value``). Reused as
        ``numpy_policy_function``'s."""
        return self._folded(False, batch)

    def _folded(self, actor: bool, batch: int) -> FoldedNumpyMLP:
        arrays = self._numpy_layers(actor)  # numpy views of the parameters (cached while they stay in place)
        cached = self._folded_cache.get((actor, batch))
        if cached is None:  # buffers allocated once per size; the weights are copied in at every call
            cached = self._folded_cache[actor, batch] = FoldedNumpyMLP(arrays, self._activation_name, batch)
            return cached
        return cached.load(arrays)

    def _numpy_mlp(self, layers: list[tuple[np.ndarray, np.ndarray]], obs: np.ndarray) -> np.ndarray:
        x = obs if self._obs_ndim == 1 else obs.reshape(*obs.shape[: obs.ndim - self._obs_ndim], -1)
        activation = self._np_activation
        for weight, bias in layers[:-1]:
            x = np.matmul(x, weight.T)
            x += bias
            x = activation(x)
        weight, bias = layers[-1]
        x = np.matmul(x, weight.T)
        x += bias
        return x

    def _numpy_layers(self, actor: bool) -> list[tuple[np.ndarray, np.ndarray]]:
        pairs = [*self._actor_layers, self._policy_head] if actor else [*self._critic_layers, self._value_head]
        key = tuple(weight.data_ptr() for weight, _ in pairs)
        cached = self._np_layers.get(actor)
        if cached is None or cached[0] != key:
            cached = self._np_layers[actor] = (key, [(w.detach().numpy(), b.detach().numpy()) for w, b in pairs])
        return cached[1]

    def policy_output(self, obs: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """Logits ``(..., N)`` or ``{'mu', 'sigma'}`` of shape ``(..., D)``."""
        return self._policy(self._trunk(self._actor_layers, obs))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values ``(...)``."""
        return F.linear(self._trunk(self._critic_layers, obs), *self._value_head).squeeze(-1)

    def actor_parameters(self) -> dict[str, torch.Tensor]:
        """The parameters acting needs (actor trunk, policy head, log-std), by their state_dict names."""
        prefixes = ("encoder.", "actor_trunk.", "policy_head.", "log_std")
        return {name: p for name, p in self.named_parameters() if name.startswith(prefixes)}

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor | dict[str, torch.Tensor], torch.Tensor]:
        """``(policy_output(obs), value(obs))``; a shared trunk (and the encoder) runs once."""
        if self.shared:
            features = self._trunk(self._actor_layers, obs)
            return self._policy(features), F.linear(features, *self._value_head).squeeze(-1)
        features = self._features(obs)  # the encoder (or the flattening) once for both MLPs
        actor, critic = self._mlp(self._actor_layers, features), self._mlp(self._critic_layers, features)
        return self._policy(actor), F.linear(critic, *self._value_head).squeeze(-1)



# Activations written into a given array: a ufunc and its extra arguments (called directly, without a Python
# layer), or a function of (z, out).
_NUMPY_INTO: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "tanh": (np.tanh, ()),
    "relu": (np.maximum, (0.0,)),
    "elu": (lambda z, out: np.copyto(out, _np_elu(z)), ()),
}


class FoldedNumpyMLP:
    """An MLP in numpy with its biases folded into its weights, for a fixed batch size: ``f(obs, out)`` writes the
    last layer's output for ``obs`` ``(B, ...)`` (flattened to ``(B, in)``) into ``out`` ``(B, width)``.

    Each layer is one matmul and one activation: every layer's input carries a column of ones, the weights a
    last row of biases, and activations are written straight into the next input. On CartPole's 64x64 policy
    this is 6 numpy calls instead of 8 per step (measured inside a rollout, where each call costs 2-3 us: 5-9 us
    less per step). The outputs equal ``x @ W.T + b`` layer by layer up to float rounding (the bias joins the
    sum). The weights are copies taken at construction.
    """

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray]], activation: str, batch: int) -> None:
        self.layers = [np.empty((weight.shape[1] + 1, weight.shape[0]), dtype=np.float32) for weight, _ in layers]
        self.load(layers)
        self.width = self.layers[-1].shape[1]
        self._inputs = [np.ones((batch, folded.shape[0]), dtype=np.float32) for folded in self.layers]
        self._hidden = [(folded, src, dst[:, :-1]) for folded, src, dst in
                        zip(self.layers, self._inputs, self._inputs[1:])]
        self.input = self._inputs[0][:, :-1]  # (B, in): where ``run`` reads the observations
        self._into, self._into_args = _NUMPY_INTO[activation]

    def load(self, layers: list[tuple[np.ndarray, np.ndarray]]) -> FoldedNumpyMLP:
        """Copy new weights and biases (the shapes given at construction) into the folded layers; returns self."""
        for folded, (weight, bias) in zip(self.layers, layers, strict=True):
            folded[:-1] = weight.T
            folded[-1] = bias
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
