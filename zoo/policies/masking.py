"""Action masks in the policies: invalid actions never taken, and never given probability or gradient.

An env that provides masks (``env.action_mask``, ``zoo.envs.masks``) gives, with every observation, a bool mask of
its actions: ``(width,)`` with ``width = n`` for ``Discrete(n)`` and ``sum(nvec)`` for MultiDiscrete (the
components' masks side by side). A policy that honours masks (``takes_action_mask = True``: the actor-critic family,
IMPALA included, whose learner masks its V-trace target alike, and DQN, which masks its Q-values with the same
``mask_logits``: ``zoo.policies.dqn``) applies them to its logits before anything reads them:

- acting (collection, evaluation, ``Agent.predict``): sampling and the argmax see masked logits, so an invalid action
  has probability 0 (the masked logit is ``MASKED_LOGIT``: its softmax weight underflows to exactly 0 in float32);
- the rollout stores the mask the actor saw with each step (``extras["action_mask"]``) and the masked behaviour
  logits (``policy_output``); learning masks the fresh logits with the same mask (``forward_batch``), so the
  log-probabilities, ratios and entropy the losses see are those of the masked distribution, and an invalid action's
  logit gets no gradient (``torch.where`` passes none to the unselected branch).

A finite ``MASKED_LOGIT`` rather than ``-inf`` keeps every log-softmax finite (``0 * log 0`` would be NaN in the
entropy), and its exponential is exactly 0, so nothing of an invalid action leaks into a probability.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from ..errors import ConfigError
from ..rl_utils import MASKED_LOGIT, mask_logits

__all__ = ["MASKED_LOGIT", "MaskedActing", "as_mask", "mask_logits"]


def as_mask(mask: Any, rows: int, width: int, device: torch.device) -> torch.Tensor:
    """A mask given by a caller (``Agent.predict``, an actor) as a bool tensor ``(rows, width)`` on ``device``; a
    ValueError naming the expected shape for any other shape."""
    array = np.asarray(mask)
    if array.shape == (width,) and rows == 1:
        array = array[None]
    if array.shape != (rows, width):
        raise ValueError(f"action_mask has shape {array.shape}, expected ({rows}, {width}) (or ({width},) for one "
                         f"observation): one bool per action, True where it is valid")
    empty = np.flatnonzero(~array.astype(bool).any(axis=-1))
    if len(empty):
        raise ValueError(f"action_mask row {int(empty[0])} has no valid action: leave at least one True per row")
    return torch.as_tensor(array.astype(bool), device=device)


class MaskedActing:
    """Mixed into ``ActorCriticPolicy``: its logits under the env's action masks (the module docstring)."""

    takes_action_mask: ClassVar[bool] = True
    discrete: bool
    action_space: Any
    model: Any

    def masked(self, output: Any, action_mask: torch.Tensor | None) -> Any:
        """A policy output with the invalid actions' logits masked; ``action_mask=None``: as it is. Box actions
        take no mask (a ConfigError)."""
        if action_mask is None:
            return output
        if not self.discrete:
            raise ConfigError(f"{type(self).__name__} got an action mask for {self.action_space}: masks are for "
                              f"Discrete and MultiDiscrete actions; set env.action_mask=none")
        return mask_logits(output, action_mask)

    @torch.no_grad()
    def evaluate(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> np.ndarray:
        """Deterministic env actions (numpy): the policy's mode, among the valid actions where ``action_mask``."""
        if action_mask is None:
            return self.deterministic_action(obs).cpu().numpy()  # type: ignore[attr-defined]
        output = self.masked(self.model.policy_output(obs), action_mask)
        return self._mode_to_env(output).cpu().numpy()  # type: ignore[attr-defined]
