"""A new off-policy algorithm as one module: DQN in its plainest form on zoo's off-policy base.

``zoo run --config examples/offpolicy_plugin/tiny_dqn_cartpole.py`` imports this module (the config's
``import_names``), whose decorator registers the policy. Everything but the algorithm is inherited from
``zoo.policies.OffPolicyPolicy``: minibatches drawn so that a resumed run draws the same ones, metrics averaged
over the updates of a call, the training progress when acting (``self.progress``), the update counter, and the
checkpointed state from the two tuples that declare it (``acting_parts``, ``learning_parts``).
The replay stores env actions, so a ``Discrete(n, start)`` action becomes an index with ``action - start``.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from zoo.config.schema import Field
from zoo.policies import OffPolicyPolicy
from zoo.registry import POLICY_REGISTRY


@POLICY_REGISTRY.register("tiny_dqn")
class TinyDQN(OffPolicyPolicy):
    """Q-learning with a target network copied every ``target_every`` updates and a linear epsilon."""

    # The learner state: saved, loaded, published to actors and exported from these names (zoo.policies.state).
    acting_parts: ClassVar[tuple[str, ...]] = ("q",)
    learning_parts: ClassVar[tuple[str, ...]] = ("target", "optimizer")

    fields: ClassVar[dict[str, Field]] = {
        "hidden": Field(64, "width of the two hidden layers", range=(1, None), frozen=True),
        "learning_rate": Field(1e-3, "Adam learning rate", range=(0.0, None)),
        "gamma": Field(0.99, "discount", range=(0.0, 1.0)),
        "batch_size": Field(64, "transitions per update", range=(1, None)),
        "target_every": Field(250, "updates between copies of the online network into the target", range=(1, None)),
        "epsilon_end": Field(0.05, "epsilon after the first half of the budget", range=(0.0, 1.0)),
    }

    def __init__(self, cfg, observation_space, action_space, device, acting_only=False) -> None:
        super().__init__(cfg, observation_space, action_space, device, acting_only)
        self.start, n = int(action_space.start), int(action_space.n)
        size = int(np.prod(observation_space.shape))
        self.q = nn.Sequential(nn.Linear(size, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU(),
                               nn.Linear(cfg.hidden, n)).to(device)
        if not acting_only:
            self.target = copy.deepcopy(self.q).requires_grad_(False)
            self.optimizer = torch.optim.Adam(self.q.parameters(), lr=cfg.learning_rate)

    # acting: epsilon from the training progress, the greedy action for evaluation and export
    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(obs).argmax(-1) + self.start

    def explore(self, obs: torch.Tensor) -> np.ndarray:
        # torch's global generator: its state is in every checkpoint, so a resumed run explores the same way
        epsilon = max(self.cfg.epsilon_end, 1.0 - 2.0 * self.progress.progress * (1.0 - self.cfg.epsilon_end))
        with torch.no_grad():
            greedy = self.deterministic_action(obs).cpu()
        random = torch.randint(self.start, self.start + int(self.action_space.n), greedy.shape)
        return torch.where(torch.rand(greedy.shape) < epsilon, random, greedy).numpy()

    # learning: one TD update; a terminated step does not bootstrap, a truncated one does
    def update(self, batch: dict[str, torch.Tensor], ctx: Any) -> dict[str, float]:
        action = batch["action"].long().reshape(-1) - self.start
        q = self.q(batch["obs"]).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_q = self.target(batch["next_obs"]).max(-1).values
            target = batch["reward"] + self.cfg.gamma * (1.0 - batch["terminated"].float()) * next_q
        loss = nn.functional.smooth_l1_loss(q, target)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.update_target(self.target, self.q, 1.0, self.cfg.target_every)  # a copy every target_every updates
        return {"q_loss": loss.item()}
