"""The part A2C and PPO share: networks, sampling, evaluation, optimiser, schedules and checkpoint state."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict

from ..rl_utils import categorical_log_prob, gaussian_log_prob
from .base import CollectOutput, Policy
from .networks import ACTIVATIONS, ActorCritic
from .optim import FLAT_ALGORITHMS, FlatOptimizer


class OnPolicyActorCritic(Policy):
    """Base for on-policy actor-critic policies; subclasses implement ``learn``."""

    pipeline: ClassVar[str] = "serial_onpolicy"
    common_config: ClassVar[dict[str, Any]] = {
        "hidden_sizes": [64, 64],
        "activation": "tanh",
        "shared_network": False,
        "init_log_std": 0.0,
        "optimizer": "adam",
        "learning_rate": 3e-4,
        "anneal_lr": True,
        "adam_eps": 1e-5,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "normalize_advantage": True,
        "value_coef": 0.5,
        "entropy_coef": 0.0,
        "max_grad_norm": 0.5,
    }
    config_ranges: ClassVar[dict[str, tuple[float | None, float | None]]] = {
        "learning_rate": (0.0, None),
        "gamma": (0.0, 1.0),
        "gae_lambda": (0.0, 1.0),
        "value_coef": (0.0, None),
        "entropy_coef": (0.0, None),
        "max_grad_norm": (0.0, None),
    }
    config_choices: ClassVar[dict[str, tuple[Any, ...]]] = {
        "optimizer": FLAT_ALGORITHMS,
        "activation": tuple(ACTIVATIONS),
    }

    def __init__(
        self, cfg: EasyDict, observation_space: gym.Space, action_space: gym.Space, device: torch.device
    ) -> None:
        super().__init__(cfg, observation_space, action_space, device)
        self.model = ActorCritic(
            observation_space, action_space, list(cfg.hidden_sizes), cfg.activation, cfg.shared_network,
            cfg.init_log_std,
        ).to(device)
        self.discrete = self.model.discrete
        # One flat buffer for all parameters: torch.optim's per-tensor overhead dominates for small networks.
        self.optimizer = FlatOptimizer(self.model, cfg.optimizer, cfg.learning_rate, eps=cfg.adam_eps)
        if not self.discrete:
            self._low = torch.as_tensor(action_space.low, dtype=torch.float32)
            self._high = torch.as_tensor(action_space.high, dtype=torch.float32)

    # -- acting -------------------------------------------------------------------------------------------
    def _env_action(self, raw: torch.Tensor) -> np.ndarray:
        if self.discrete:
            return raw.cpu().numpy()
        # The loss keeps the unclipped sample; only the env sees the clipped action.
        return torch.maximum(torch.minimum(raw.cpu(), self._high), self._low).numpy()

    @torch.no_grad()
    def collect(self, obs: torch.Tensor) -> CollectOutput:
        output, value = self.model(obs)
        if self.discrete:
            # Gumbel-max: argmax(logits + Gumbel noise) is a categorical sample, at a quarter of multinomial's cost.
            action = (output - torch.empty_like(output).exponential_().log()).argmax(-1)
            log_prob = categorical_log_prob(output, action)
        else:
            action = output["mu"] + output["sigma"] * torch.randn_like(output["mu"])
            log_prob = gaussian_log_prob(output["mu"], output["sigma"], action)
        packed = output if self.discrete else torch.cat([output["mu"], output["sigma"]], -1)
        return CollectOutput(self._env_action(action), action, log_prob, value, packed)

    def unpack_policy_output(self, packed: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """Inverse of the packing in ``collect``: logits, or ``{'mu', 'sigma'}``."""
        if self.discrete:
            return packed
        mu, sigma = packed.chunk(2, dim=-1)
        return {"mu": mu, "sigma": sigma}

    @torch.no_grad()
    def evaluate(self, obs: torch.Tensor) -> np.ndarray:
        output = self.model.policy_output(obs)
        raw = output.argmax(-1) if self.discrete else output["mu"]
        return self._env_action(raw)

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.model.value(obs)

    # -- learning helpers ---------------------------------------------------------------------------------
    def _set_learning_rate(self, progress: float) -> float:
        lr = self.cfg.learning_rate * (1.0 - progress if self.cfg.anneal_lr else 1.0)
        lr = max(lr, 0.0)
        self.optimizer.lr = lr
        return lr

    def _step(self, loss: torch.Tensor) -> float:
        self.optimizer.zero_grad()
        loss.backward()
        grad_norm = self.optimizer.clip_grad_norm(self.cfg.max_grad_norm)
        self.optimizer.step()
        return grad_norm

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
