"""DQN (Mnih et al. 2015) with the standard improvements as options.

Q-learning with a neural network: act epsilon-greedily, store transitions in the replay buffer, and regress
``Q(s, a)`` on the target ``r + gamma * (1 - terminated) * max_a' Q_target(s', a')`` of minibatches drawn
uniformly from it, with a target network that follows the online one every ``target_update_interval`` env steps.

Options:

- ``double_dqn``: the target network evaluates the online network's argmax (van Hasselt et al. 2016).
- ``loss``: ``huber`` (the Nature paper's clipped error; Stable-Baselines3's ``smooth_l1_loss``) or ``mse``.
- ``tau``: 1 copies the online network every ``target_update_interval`` env steps (periodic targets); below 1 it
  is a Polyak step ``target <- target + tau * (online - target)`` at that cadence instead. The cadence counts env
  steps as Stable-Baselines3 and CleanRL do: at the start of each learning call the target takes one step per
  multiple of the interval crossed since the previous call (the online network does not change in between, so
  this equals stepping during collection).
- ``exploration_*``: epsilon decays linearly from ``exploration_initial_eps`` to ``exploration_final_eps`` over
  the first ``exploration_fraction`` of the training progress (env steps / budget), which the off-policy
  pipeline hands to the policy before each collection (``OffPolicyPolicy.progress``).
- ``dueling``: ``Q = V + A - mean(A)`` from two heads on the shared trunk (Wang et al. 2016).
- observations: an MLP on flat vectors (torch's default init); ``encoder`` (``auto``: NatureCNN for uint8 images)
  before it.

- ``nstep``: n-step returns (Sutton 1988; one of Rainbow's components): the target sums the rewards of up to n
  successive transitions of the same sub-env's episode (``OffPolicyPolicy.sample_windows``) and bootstraps with
  ``gamma**k`` from the observation after the k-th (k < n when the episode ended or the newest row was reached).

The loss is ``zoo.rl_utils.q_nstep_td_error`` with per-step flags: a window that ends in a termination does not
bootstrap, one that ends in a truncation does, from that episode's final observation (the replay keeps both flags
and that observation). With ``nstep = 1`` this is the one-step target of Mnih et al.

Action masks (``env.action_mask``, ``zoo.envs.masks``; ``takes_action_mask``): where the env gives them, every
choice is among the valid actions only. Acting: the greedy action is the argmax of the masked Q-values (an invalid
action's set to ``MASKED_LOGIT``, ``zoo.rl_utils.mask_logits``); epsilon's random action is uniform among the
valid ones; evaluation and ``Agent.predict(obs, action_mask=...)`` take the masked argmax; the random steps before
``learning_starts`` are uniform among the valid actions too (``VectorCollector.transitions``). Learning: the replay
keeps with each transition the mask of its next observation (of the observation an n-step window bootstraps from;
for an ended episode, the final observation's), and the target's ``max_a'`` (double DQN: the online network's
argmax, at which the target network is read) runs over the valid next actions only: an invalid action's value,
never taken, is never bootstrapped from. Without masks nothing changes (no mask column, the same random draws).

Actions: the replay holds env actions (``index + start`` for ``Discrete(n, start)``), those of the random steps
before ``learning_starts`` and the policy's alike; ``learn`` subtracts ``start``. ``deterministic_action`` is the
greedy action plus ``start`` (traceable, so ``zoo export`` works).
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict
from torch import nn

from ..config.schema import Field
from ..data import ReplayBuffer
from ..errors import ConfigError
from ..rl_utils import mask_logits, q_nstep_td_data, q_nstep_td_error
from ..sizes import check_parameter_memory
from .base import ActingGraph, CollectOutput, LearnContext
from .networks import ACTIVATIONS, build_encoder
from .off_policy import COMPILE_FIELD, PRECISION_FIELD, OffPolicyPolicy, soft_update
from .optim import FlatOptimizer

_CRITERIA = {"huber": nn.SmoothL1Loss(reduction="none"), "mse": nn.MSELoss(reduction="none")}


class QNetwork(nn.Module):
    """Q-values ``(B, n_actions)``: an optional encoder, an MLP trunk, and one head (or dueling V and A heads)."""

    def __init__(self, obs_dim: int, n_actions: int, hidden_sizes: list[int], activation: str, dueling: bool,
                 encoder: nn.Module | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        sizes = [encoder.output_dim if encoder is not None else obs_dim, *hidden_sizes]
        # torch's default Linear init, as Stable-Baselines3's and CleanRL's DQN: with the orthogonal init of the
        # actor-critics, dqn_cartpole's final greedy return was 206, 500, 144 for seeds 0-2 (here 500, 500, 397).
        layers: list[nn.Module] = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(fan_in, fan_out), ACTIVATIONS[activation]()]
        self.trunk = nn.Sequential(*layers)
        self.head = nn.Linear(sizes[-1], n_actions)
        self.value = nn.Linear(sizes[-1], 1) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.encoder(obs) if self.encoder is not None else obs.reshape(obs.shape[0], -1)
        hidden = self.trunk(features)
        out = self.head(hidden).float()  # fp32 out (a no-op in fp32): the TD loss stays fp32 under bf16 autocast
        if self.value is None:
            return out
        return self.value(hidden).float() + out - out.mean(-1, keepdim=True)  # the head is the advantage stream


def linear_epsilon(progress: float, initial: float, final: float, fraction: float) -> float:
    """Epsilon at ``progress`` in [0, 1]: ``initial`` to ``final`` linearly over the first ``fraction``, then
    ``final`` (``fraction`` 0: ``final`` throughout)."""
    if fraction <= 0 or progress >= fraction:
        return final
    return initial + (final - initial) * progress / fraction


class DQNPolicy(OffPolicyPolicy):
    """Deep Q-network for Discrete actions (double, dueling, Huber or MSE, periodic or Polyak targets).

    Examples:
        >>> from zoo.config.resolve import resolve_config; from zoo.policies import build_policy
        >>> cfg = resolve_config({"policy": {"type": "dqn", "hidden_sizes": [16], "dueling": True}})
        >>> policy = build_policy(cfg, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3, start=1))
        >>> actions = policy.evaluate(torch.randn(8, 4))  # the greedy action, offset by the space's start
        >>> actions.shape, bool(((actions >= 1) & (actions <= 3)).all())
        ((8,), True)
    """

    compilable: ClassVar[bool] = True
    takes_action_mask: ClassVar[bool] = True  # the argmax, exploration and the target's max among valid actions
    acting_parts: ClassVar[tuple[str, ...]] = ("q",)
    learning_parts: ClassVar[tuple[str, ...]] = ("target", "optimizer", "target_syncs")
    fields: ClassVar[dict[str, Field]] = {
        "hidden_sizes": Field([64, 64], "widths of the hidden layers of the Q-network", range=(1, 1_000_000),
                              frozen=True),
        "activation": Field("relu", "hidden-layer activation", choices=tuple(ACTIVATIONS), frozen=True),
        "encoder": Field("auto", "observation encoder before the MLP: auto (nature_cnn for uint8 images), mlp, a "
                         "registered model", frozen=True),
        "encoder_kwargs": Field({}, "keyword arguments of the encoder (nature_cnn: features_dim)", frozen=True),
        "dueling": Field(False, "dueling heads: Q = V + A - mean(A)", frozen=True),
        "double_dqn": Field(False, "the target network evaluates the online network's argmax"),
        "loss": Field("huber", "TD loss: huber (smooth L1) or mse", choices=tuple(_CRITERIA)),
        "learning_rate": Field(1e-4, "Adam learning rate", range=(0.0, 10.0)),
        "batch_size": Field(32, "transitions per gradient update", range=(1, 1_000_000)),
        "gamma": Field(0.99, "discount factor", range=(0.0, 1.0)),
        "nstep": Field(1, "n-step returns: rewards of up to n successive transitions, then the bootstrap",
                       range=(1, 1000)),
        "target_update_interval": Field(10_000, "env steps between target updates", range=(1, None)),
        "tau": Field(1.0, "target update rate: 1 copies, below 1 a Polyak step", range=(0.0, 1.0)),
        "exploration_fraction": Field(0.1, "share of the training progress over which epsilon decays",
                                      range=(0.0, 1.0)),
        "exploration_initial_eps": Field(1.0, "epsilon at the start", range=(0.0, 1.0)),
        "exploration_final_eps": Field(0.05, "epsilon after the decay", range=(0.0, 1.0)),
        "max_grad_norm": Field(10.0, "clip the gradient norm to this (0: no clipping)", range=(0.0, None)),
        "precision": PRECISION_FIELD,
        "compile": COMPILE_FIELD,
    }

    @classmethod
    def check_spaces(cls, observation_space: gym.Space, action_space: gym.Space) -> None:
        if not isinstance(observation_space, gym.spaces.Box) or observation_space.shape is None:
            raise ConfigError(
                f"observation space {observation_space} is not supported by DQN: it takes Box observations"
            )
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ConfigError(
                f"action space {action_space} is not supported by DQN: it takes Discrete actions (use sac for Box)"
            )

    def __init__(
        self, cfg: EasyDict, observation_space: gym.Space, action_space: gym.Space, device: torch.device,
        acting_only: bool = False,
    ) -> None:
        super().__init__(cfg, observation_space, action_space, device, acting_only)
        self.check_spaces(observation_space, action_space)
        self.n_actions = int(action_space.n)
        self.start = int(action_space.start)
        self.q = self._new_network(check_memory=True).to(self.device)
        self.precision = self.resolve_precision(convolutional=self.q.encoder is not None)  # the encoder known now
        self.target_syncs = 0  # multiples of target_update_interval (env steps) the target has stepped for
        if acting_only:
            return
        self.target = self._new_network().to(self.device)
        self.optimizer = FlatOptimizer(self.q, "adam", cfg.learning_rate)
        soft_update(self.target, self.q, 1.0)
        self.target.requires_grad_(False)
        self.criterion = _CRITERIA[cfg.loss]

    def _new_network(self, check_memory: bool = False) -> QNetwork:
        cfg = self.cfg
        try:
            encoder = build_encoder(cfg.encoder, self.observation_space, dict(cfg.encoder_kwargs))
        except (ValueError, TypeError) as err:
            raise ConfigError(f"policy.encoder '{cfg.encoder}': {err}") from err
        obs_dim = int(np.prod(self.observation_space.shape))
        if check_memory:  # before the MLP is allocated: the online network, and the target when learning
            in_dim = encoder.output_dim if encoder is not None else obs_dim
            check_parameter_memory("policy.hidden_sizes", [in_dim, *cfg.hidden_sizes], 1 if self.acting_only else 2,
                                   self.n_actions, not self.acting_only)
        return QNetwork(obs_dim, self.n_actions, list(cfg.hidden_sizes), cfg.activation, cfg.dueling, encoder)

    # -- acting -------------------------------------------------------------------------------------------
    def epsilon(self, progress: float | None = None) -> float:
        """The exploration rate at ``progress`` (default: the progress the pipeline last handed over)."""
        cfg = self.cfg
        progress = self.progress.progress if progress is None else progress
        return linear_epsilon(progress, cfg.exploration_initial_eps, cfg.exploration_final_eps,
                              cfg.exploration_fraction)

    @torch.no_grad()
    def explore(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> np.ndarray:
        """Epsilon-greedy env actions: uniformly random indices with probability epsilon, else the argmax; among
        the valid actions (both) where ``action_mask`` ``(B, n)`` is given."""
        greedy = mask_logits(self.q(obs), action_mask).argmax(-1)
        if action_mask is None:
            random = torch.randint(self.n_actions, greedy.shape, device=greedy.device)
        else:
            random = torch.multinomial(action_mask.to(greedy.device, torch.float32), 1).squeeze(-1)
        explore = torch.rand(greedy.shape, device=greedy.device) < self.epsilon()
        return (torch.where(explore, random, greedy) + self.start).cpu().numpy()

    def collect(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> CollectOutput:
        """``explore``'s env actions (among the valid ones where ``action_mask``), which the replay stores."""
        return CollectOutput(self.explore(obs, action_mask))

    @torch.no_grad()
    def evaluate(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> np.ndarray:
        """The greedy env actions (numpy), among the valid actions where ``action_mask`` ``(B, n)`` is given."""
        return self.deterministic_action(obs, action_mask).cpu().numpy()

    def deterministic_action(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The greedy env action ``argmax_a Q(obs, a) + start``, over the valid actions where ``action_mask`` is
        given (traceable: ``zoo export`` takes the mask as an input)."""
        return mask_logits(self.q(obs), action_mask).argmax(-1) + self.start

    def export_module(self) -> torch.nn.Module:
        """The online Q-network alone (the target does not act)."""
        return ActingGraph(self, {"q": self.q})

    # -- learning -----------------------------------------------------------------------------------------
    def prepare_learning(self, replay: ReplayBuffer, ctx: LearnContext) -> None:
        """Step the target once for each multiple of ``target_update_interval`` env steps passed since the
        previous call: k Polyak steps towards an unchanged online network are one step of ``1 - (1 - tau)**k``."""
        cfg = self.cfg
        syncs = ctx.env_steps // cfg.target_update_interval
        if syncs > self.target_syncs:
            rate = 1.0 if cfg.tau == 1.0 else 1.0 - (1.0 - cfg.tau) ** (syncs - self.target_syncs)
            soft_update(self.target, self.q, rate)
            self.target_syncs = syncs

    def draw(self, replay: ReplayBuffer) -> dict[str, torch.Tensor]:
        """One-step targets: the rows (gathered inside the step). n-step: the whole minibatch of windows of up to
        ``nstep`` transitions (rewards and flags ``(nstep, B)``), read on the host (``sample_windows``)."""
        return super().draw(replay) if self.cfg.nstep == 1 else self.sample_windows(replay, self.cfg.nstep)

    def gather(self, storage: dict[str, torch.Tensor], drawn: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The rows as one-step windows: reward and flags ``(1, B)``, as ``sample_windows(replay, 1)`` gives."""
        batch = super().gather(storage, drawn)
        return {**batch, **{key: batch[key][None] for key in ("reward", "terminated", "truncated")}}

    def update(self, batch: dict[str, torch.Tensor], ctx: LearnContext) -> dict[str, torch.Tensor]:
        """One gradient step on the n-step TD loss of a minibatch (env actions in, indices = action - start).
        Sync-free: one graph when compiled."""
        action = batch["action"].long().reshape(-1) - self.start
        q = self.q(batch["obs"])
        with torch.no_grad():
            next_target = self.target(batch["next_obs"])  # after each window's last transition
            online = self.q(batch["next_obs"]) if self.cfg.double_dqn else next_target
            # the argmax among the actions valid at next_obs where the env gives masks (torch.where: no sync)
            next_action = mask_logits(online, batch.get("next_action_mask")).argmax(-1)
        # A window ending in a termination does not bootstrap; one ending in a truncation does, from the final
        # observation; otherwise gamma**nstep from the observation after its n-th transition.
        data = q_nstep_td_data(q, next_target, action, next_action, batch["reward"], batch["terminated"], None)
        loss, _ = q_nstep_td_error(data, self.cfg.gamma, nstep=self.cfg.nstep, criterion=self.criterion,
                                   truncated=batch["truncated"])
        q_taken = q.detach().gather(-1, action.unsqueeze(-1))
        q_loss = self.optimizer.minimize(loss, self.cfg.max_grad_norm, ctx.sync_gradients)
        return {"q_loss": q_loss, "q_mean": q_taken.mean(), "grad_norm": self.optimizer.grad_norm.clone()}

    def learn_metrics(self) -> dict[str, float]:
        return {"epsilon": self.epsilon()}
