"""IMPALA (Espeholt et al. 2018): an actor-critic learner that corrects for policy lag with V-trace.

Actors act with an older copy of the policy (``collect`` returns only the behaviour policy's output: logits, or
mu and sigma, so actors never run the critic) and ship unrolls; ``learn`` takes an ``Unroll`` batch with
observations ``(T + 1, B)`` and makes one optimiser step on rl_utils' V-trace loss. Episode ends inside an unroll
are exact: a terminated step does not bootstrap, a truncated one bootstraps from the value of its final
observation (``obs[t + 1]`` under NEXT_STEP autoreset), and autoreset steps (``valid = False``) end the trace and
carry no loss.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ..config.schema import Field
from ..data import Rollout, Unroll
from ..rl_utils import vtrace_data, vtrace_error_continuous_action, vtrace_error_discrete_action
from .actor_critic import ActorCriticPolicy
from .base import CollectOutput, LearnContext
from .onpolicy import ONPOLICY_COMPILE_FIELD


class ImpalaPolicy(ActorCriticPolicy):
    """Actor-critic with V-trace targets for Discrete and Box actions (runs on ``parallel_async``).

    Examples:
        >>> defaults = ImpalaPolicy.default_config
        >>> ImpalaPolicy.pipelines, defaults["max_grad_norm"], defaults["rho_clip"], defaults["c_clip"]  # V-trace
        (('parallel_async',), 40.0, 1.0, 1.0)
        >>> "use_sde" in ActorCriticPolicy.default_config, "use_sde" in ImpalaPolicy.default_config  # withdrawn
        (True, False)
    """

    pipelines: ClassVar[tuple[str, ...]] = ("parallel_async",)
    learns_in_chunks: ClassVar[bool] = False  # with memory: each whole unroll re-run from its stored memory
    # Discrete actors act in numpy (zoo.policies.numpy_actor samples as ``collect`` does); Gaussian ones through
    # ``collect``, whose mean may be squashed into the bounds (``bound_mean``), which the numpy actor does not do.
    numpy_rollout_actions: ClassVar[tuple[str, ...]] = ("discrete",)
    needs_log_prob: ClassVar[bool] = False  # V-trace recomputes the behaviour log-probs from ``policy_output``
    compilable: ClassVar[bool] = True
    # auto keeps IMPALA eager: impala_pendulum ran faster compiled only with a warm inductor cache; its first
    # compile cost more than the run gained (docs/speed.md). policy.compile=on compiles it.
    compile_auto_min_updates: ClassVar[int | None] = None
    fields: ClassVar[dict[str, Field]] = {
        **ActorCriticPolicy.fields,
        "learning_rate": ActorCriticPolicy.fields["learning_rate"].but(6e-4),
        "anneal_lr": ActorCriticPolicy.fields["anneal_lr"].but(True, "decay the learning rate linearly to 0"),
        "entropy_coef": ActorCriticPolicy.fields["entropy_coef"].but(0.01),
        "value_coef": ActorCriticPolicy.fields["value_coef"].but(0.5, "weight of the value (V-trace target) loss"),
        "max_grad_norm": ActorCriticPolicy.fields["max_grad_norm"].but(40.0, "clip the gradient norm (IMPALA: 40)"),
        "vtrace_lambda": Field(1.0, "the trace-cutting lambda of the V-trace paper (1: plain V-trace)",
                               range=(0.0, 1.0)),
        "rho_clip": Field(1.0, "rho-bar: truncation of the importance weights in the value targets", range=(0.0, None)),
        "c_clip": Field(1.0, "c-bar: truncation of the trace coefficients", range=(0.0, None)),
        "rho_pg_clip": Field(1.0, "truncation of the importance weights in the policy-gradient advantage",
                             range=(0.0, None)),
        "reward_scale": Field(1.0, "rewards are multiplied by this before learning (IMPALA clips or scales rewards)",
                              range=(0.0, None)),
        "bound_mean": Field(True, "Box actions: the Gaussian mean is tanh-squashed into the action bounds"),
        "compile": ONPOLICY_COMPILE_FIELD,
    }
    # gSDE's per-sub-env exploration matrices live with a collector; IMPALA's actors act apart from the learner.
    # A recurrent learner re-runs each whole unroll from its stored memory: no chunks (sequence_length, burn_in).
    takes_action_mask: ClassVar[bool] = True  # its collect masks the logits and stores the mask (V-trace under it)
    withdrawn_fields: ClassVar[tuple[str, ...]] = ("use_sde", "sde_sample_freq", "full_std", "sequence_length",
                                                   "burn_in")

    def _bounded(self, output: Any) -> Any:
        # Without a bound, a lagging behaviour policy let the mean drift far outside the action range on
        # Pendulum (|mu| ~ 6-9 with lag 4, where every sample is clipped to the same action) and learning stalled.
        if self.discrete or not self.cfg.bound_mean:
            return output
        low, high = self._low.to(output["mu"].device), self._high.to(output["mu"].device)
        finite = torch.isfinite(low) & torch.isfinite(high)
        squashed = low + (high - low) * (torch.tanh(output["mu"]) + 1.0) / 2.0
        return {"mu": torch.where(finite, squashed, output["mu"]), "sigma": output["sigma"]}

    def acting_output(self, output: Any) -> Any:
        """A recurrent policy's acting output, the mean bounded as in ``collect``."""
        return self._bounded(output)

    @torch.no_grad()
    def collect(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> CollectOutput:
        """Sampled actions and the behaviour policy's output (``policy_output``: logits, or mu and sigma
        concatenated; the logits masked where ``action_mask`` is given, which is stored beside them); no value, so
        acting needs only the actor's weights."""
        if self.recurrent:
            return super().collect(obs)  # refused: a recurrent policy acts through memory_actor
        output = self.masked(self._bounded(self.model.policy_output(obs)), action_mask)
        extras = {} if action_mask is None else {"action_mask": action_mask.to(torch.bool)}
        if self.discrete:
            action = (output - torch.empty_like(output).exponential_().log()).argmax(-1)  # Gumbel-max sample
            packed = output
        else:
            action = output["mu"] + output["sigma"] * torch.randn_like(output["mu"])
            packed = torch.cat([output["mu"], output["sigma"]], -1)
        return CollectOutput(self._env_action(action), action, {"policy_output": packed, **extras})

    def deterministic_action(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The mode's env actions as a tensor, the mean bounded as in ``collect``, among the valid actions where
        ``action_mask`` is given (traceable, for ``zoo export``)."""
        if self.recurrent:
            return super().deterministic_action(obs)  # refused: a recurrent policy acts with its memory
        return self._mode_to_env(self.masked(self._bounded(self.model.policy_output(obs)), action_mask))

    def process_rollout(self, rollout: Rollout) -> Rollout:
        """Unrolls need no processing before ``learn`` (V-trace runs inside it)."""
        return rollout

    def learning_columns(self, batch: Unroll | Rollout) -> dict[str, torch.Tensor]:
        """An ``Unroll`` batch's tensors (a ``Rollout`` is taken as an unroll of the current policy), on the
        learner's device: observations ``(T + 1, B)``, the rest ``(T, B)``."""
        if isinstance(batch, Rollout):
            batch = batch.to_unroll(0)
        batch = batch.to(self.device)  # actors ship CPU tensors; every one of them meets the learner's outputs
        memory = {} if batch.memory is None else {"memory": batch.memory, "episode_start": batch.episode_start}
        if self.recurrent and not memory:
            raise ValueError("a recurrent IMPALA learner needs unrolls with their memory (collected by memory_actor)")
        mask = batch.behaviour.get("action_mask")  # the masks the actor acted under (zoo.policies.masking)
        return {"obs": batch.obs, "action": batch.action, "policy_output": batch.behaviour["policy_output"],
                "reward": batch.reward, "terminated": batch.terminated, "truncated": batch.truncated,
                "valid": batch.valid, **memory, **({} if mask is None else {"action_mask": mask})}

    def samples_in(self, columns: dict[str, torch.Tensor]) -> int:
        return columns["reward"].numel()

    def minibatches(self, count: int, ctx: LearnContext) -> list[torch.Tensor | None]:
        """The whole batch of unrolls in one update (V-trace runs along each unroll)."""
        return [None]

    def update(self, batch: dict[str, Any], ctx: LearnContext) -> dict[str, torch.Tensor]:
        """One update on a batch of unrolls, in order: the forward pass over observations ``(T + 1, B)``, the
        episode flags, rl_utils' V-trace loss, the optimiser step."""
        cfg = self.cfg
        steps = batch["reward"].shape[0]
        if self.recurrent:  # each unroll re-run from the memory its actor had at its start (zoo.policies.memory)
            output, value, _ = self.model(batch["obs"], batch["memory"], batch["episode_start"], final=False)
        else:
            output, value = self.model(batch["obs"])
        output = self._bounded(output)
        if self.discrete:  # the target policy under the mask the behaviour acted under: V-trace compares the two
            target = self.masked(output[:steps], batch.get("action_mask"))
        else:
            target = {"mu": output["mu"][:steps], "sigma": output["sigma"][:steps]}
        behaviour = self.unpack_policy_output(batch["policy_output"])
        invalid = ~batch["valid"]
        done = batch["terminated"] | invalid  # no bootstrap after termination, nothing across an autoreset step
        trace_end = batch["terminated"] | batch["truncated"] | invalid  # the next step belongs to another episode
        reward = batch["reward"].to(value.dtype) * cfg.reward_scale
        weight = batch["valid"].to(value.dtype)
        data = vtrace_data(target, behaviour, batch["action"], value, reward, weight)
        loss_fn = vtrace_error_discrete_action if self.discrete else vtrace_error_continuous_action
        loss = loss_fn(data, cfg.gamma, cfg.vtrace_lambda, cfg.rho_clip, cfg.c_clip, cfg.rho_pg_clip,
                       done=done, traj_flag=trace_end)
        total = loss.policy_loss + cfg.value_coef * loss.value_loss - cfg.entropy_coef * loss.entropy_loss
        minimized = self.optimizer.minimize(total, cfg.max_grad_norm, ctx.sync_gradients)
        return {"policy_loss": loss.policy_loss.detach(), "value_loss": loss.value_loss.detach(),
                "entropy": loss.entropy_loss.detach(), "value": value[:steps].detach().mean(),
                "grad_norm": self.optimizer.grad_norm.clone(), "loss": minimized}
