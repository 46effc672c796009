"""The policy plugin contract: one for every algorithm, built-in or third-party (written out for plugin authors,
with an example, in docs/plugins.md).

A policy owns its networks, optimiser and maths. It never steps an environment (a collector does) and never
writes files (the pipeline does). What a pipeline calls, in order:

1. ``Policy.check_spaces(observation_space, action_space)`` (class method), before anything is built, wherever a
   policy is built (training, actors, ``zoo eval``, ``zoo.load``: ``zoo.policies.build_policy``): raise
   ``ConfigError`` naming the space and what is supported. Observations are always a Box (zoo flattens others).
2. ``Policy(cfg, observation_space, action_space, device, acting_only=False)``: ``cfg`` is the resolved
   ``policy`` config section (the declared defaults merged under the user's values, every key checked).
   ``acting_only=True`` builds what acting needs, without an optimiser (actor processes, ``zoo eval``,
   ``zoo.load``).
3. During collection, ``collect(obs) -> CollectOutput``: a batch of sampled actions for the env (numpy, in the
   env's action space: Discrete/MultiDiscrete ``start`` offsets and clipping to Box bounds are the policy's job),
   the raw action the loss needs, and optional per-step extras (log-prob, value, behaviour-policy outputs), which
   the collector stacks into ``Rollout.extras`` under the same names. ``obs`` is a float32 tensor on
   ``self.device``. On-policy collectors act through ``rollout_actor(steps, num_envs) -> RolloutActor`` for each
   rollout (numpy observations in, env actions out, the raw actions and extras handed over at the end in one
   piece). The default, ``CollectActor``, calls ``collect`` at every step; a policy may return a faster one for
   its small models, which must give what ``collect`` would have given step by step.
4. On-policy pipelines then call ``process_rollout(rollout) -> Rollout`` with the rollout on ``self.device``,
   right after collection (same weights): the policy's own sample processing (GAE for actor-critics, as
   DI-engine's ``_get_train_sample``). The default returns the rollout unchanged. How episode ends, truncations
   and autoreset steps appear in a rollout (and so what to bootstrap): ``zoo.data.batches``.
5. ``learn(batch, ctx) -> dict[str, float]``: learning from a batch (a ``Rollout`` on ``self.device`` for
   on-policy pipelines; the ``ReplayBuffer`` for off-policy ones, from which the policy samples ``ctx.updates``
   minibatches itself; an ``Unroll`` for actor-learner ones), returning finite metrics for the metrics file (a
   non-finite one stops the run). ``ctx`` (``LearnContext``) carries the progress for schedules and the hooks
   that keep several data-parallel learners identical: call ``ctx.sync_gradients(grad)`` between backward and the
   optimiser step (``zoo.policies.sync_parameter_gradients`` does it for a ``torch.optim`` optimiser), and take
   every decision that must agree across learners (number of minibatches, early stops) through ``ctx.mean``,
   ``ctx.min`` or ``ctx.any``; statistics over every learner's samples (normalised advantages) come from
   ``ctx.sum``. Serially these are no-ops, so a policy that runs only serially need not call them. On
   ``parallel_sync`` (DPPO) they are collectives, and every learner must call them in the same order.
6. ``evaluate(obs) -> actions``: deterministic actions for evaluation, ``zoo eval`` and ``zoo.load``. A policy
   that writes ``deterministic_action(obs) -> Tensor`` (the same actions as a tensor, in torch operations only)
   gets ``evaluate`` from it and can be exported (``zoo export``: ``export_module``); see below.
7. ``state_dict()``/``load_state_dict()``: everything needed to resume exactly (networks, optimiser, and any
   counters the policy keeps). checkpoint.pt, model.pt and best_model.pt hold ``state_dict()``; ``zoo eval`` and
   ``zoo.load`` load it into an ``acting_only`` policy, which must accept (and may ignore) the optimiser's part.
   ``actor_state_dict()``/``load_actor_state_dict()``: only what acting needs, for publishing weights to actors.
   A policy that declares its state (``acting_parts`` and ``learning_parts``, below) gets all four from the
   declaration (``zoo.policies.state``), and so do the compiled step, the flat views and ``export_module``.

Export (``zoo export``, ONNX and TorchScript): ``export_module()`` returns an ``nn.Module`` mapping a float32
batch ``(N, *observation_space.shape)`` of the policy's inputs (after zoo's flattening and observation
normalisation, which the exporter adds in front) to the env actions ``(N, *action_space.shape)`` that ``evaluate``
returns: Discrete/MultiDiscrete ``start`` offsets added, Box actions clipped or squashed into their bounds. The
default wraps ``deterministic_action`` when the class defines it (``ActingGraph``), else returns None and the
policy is refused in one line. What the module runs must trace (``torch.jit.trace``, ``torch.onnx.export``): torch
operations on tensors only, no numpy, no branches on tensor values. A run whose env gave action masks exports with
the mask as an input: the module is called ``module(obs, action_mask=mask)`` (bool ``(N, width)``) and must say it
takes it (``takes_action_mask = True``); ``ActingGraph`` does where ``deterministic_action`` takes ``action_mask=``.

The learner state: ``acting_parts`` and ``learning_parts`` name the attributes that hold it (networks, optimisers,
tensors, dicts or lists of them, objects with ``state_dict``, plain counters; ``zoo.policies.state`` says what each
kind gives). Everything that must see the state reads that declaration; nothing looks through the policy's
attributes.

Class attributes declare the config and the pipelines: ``fields`` (each key of the ``policy`` section once, as a
``zoo.config.schema.Field``: default, meaning, type, range or choices, frozen on resume), from which
``default_config``, ``config_ranges``, ``config_choices``, ``frozen_keys`` and ``config_docs`` are derived (a
class may still set those by hand); and ``pipelines`` (the pipeline names it runs on; the first is the default
for ``pipeline.type``). No key is required; ``pipeline.normalize_reward`` uses ``policy.gamma`` when the section
has one (else the config must set ``pipeline.reward_gamma``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict

from ..config.schema import declare_fields
from ..data import Rollout
from .state import LearnerState


@dataclass
class CollectOutput:
    """What a policy returns for a batch of observations during collection.

    ``action`` is what the env receives (numpy, already clipped to the action space where needed);
    ``raw_action`` is what the loss needs (the unclipped Gaussian sample, or the discrete index; None means
    ``torch.as_tensor(action)``); ``extras`` are optional per-step tensors of leading size B (log-prob, value,
    behaviour-policy outputs...), stacked by the collector into ``Rollout.extras``.

    Examples:
        >>> out = CollectOutput(np.array([1, 0]), extras={"value": torch.zeros(2)})  # 2 sub-envs, Discrete actions
        >>> out.raw_action is None, out.extras["value"].shape  # None: the loss reads the env actions
        (True, torch.Size([2]))
    """

    action: np.ndarray
    raw_action: torch.Tensor | None = None
    extras: dict[str, torch.Tensor] = field(default_factory=dict)


class RolloutActor(Protocol):
    """Acts for one on-policy rollout of ``steps`` x ``num_envs``; from ``Policy.rollout_actor``.

    The collector calls ``act(t, obs)`` for t = 0 .. steps - 1 (``obs``: float32 numpy ``(num_envs, *obs_shape)``,
    step t's row of the rollout's observations, which the actor must not write) and sends the returned env actions
    to the env; then ``finish()`` once, for the raw actions ``(steps, num_envs, ...)`` and the extras (each
    ``(steps, num_envs, ...)``), as tensors (on the CPU or the policy's device).

    Examples:
        >>> class Zeros(Policy):
        ...     def collect(self, obs): return CollectOutput(np.zeros(len(obs), dtype=np.int64))
        >>> policy = Zeros({}, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), "cpu")
        >>> actor = policy.rollout_actor(steps=2, num_envs=3)  # the default RolloutActor: CollectActor
        >>> actor.act(0, np.zeros((3, 4), np.float32)), actor.act(1, np.zeros((3, 4), np.float32))
        (array([0, 0, 0]), array([0, 0, 0]))
        >>> actor.finish()[0].shape  # the raw actions, (steps, num_envs)
        torch.Size([2, 3])
    """

    def act(self, t: int, obs: np.ndarray) -> np.ndarray:
        """The env actions for step ``t`` of the rollout."""
        ...

    def finish(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The raw actions and the extras of the whole rollout."""
        ...


class CollectActor:
    """The default ``RolloutActor``: ``policy.collect`` at every step (observations moved to ``policy.device``),
    its raw actions and extras stacked at the end (``CollectOutput.raw_action`` None: the env actions)."""

    def __init__(self, policy: Policy, steps: int, num_envs: int) -> None:
        self._collect = policy.collect
        self._device = None if policy.device.type == "cpu" else policy.device
        self._outputs: list[CollectOutput] = []

    def act(self, t: int, obs: np.ndarray, action_mask: np.ndarray | None = None) -> np.ndarray:
        """``policy.collect`` of step ``t``'s observations (with their ``action_mask`` where the env gives masks);
        returns its env actions."""
        tensor = torch.from_numpy(obs)
        tensor = tensor if self._device is None else tensor.to(self._device)
        if action_mask is None:
            out = self._collect(tensor)
        else:
            out = self._collect(tensor, action_mask=torch.from_numpy(action_mask).to(tensor.device))
        self._outputs.append(out)
        return out.action

    def finish(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The stacked raw actions and extras of every step."""
        outputs = self._outputs
        action = torch.stack([torch.as_tensor(o.action) if o.raw_action is None else o.raw_action for o in outputs])
        return action, {name: torch.stack([o.extras[name] for o in outputs]) for name in outputs[0].extras}


class LearnContext:
    """What ``Policy.learn`` gets besides the batch: progress, counters and the data-parallel hooks.

    Attributes:
        progress: the schedule position in [0, 1] (fraction of the env-step budget; see docs/configs.md on
            extending a finished run).
        iteration: iterations completed before this one; env_steps: env steps collected so far, this
            iteration's included.
        rank, world_size: this learner's rank among ``world_size`` data-parallel learners (0 and 1 serially).
        updates: how many gradient updates the pipeline asks for in this call (off-policy pipelines pass their
            ``gradient_steps``; on-policy policies decide themselves and ignore it).

    The methods are the hooks a multi-process pipeline overrides; serially they return their input.

    Examples:
        >>> ctx = LearnContext(progress=0.5, iteration=3, env_steps=4096)
        >>> ctx.world_size, ctx.mean(0.02), ctx.min(8), ctx.any(False)  # one learner: its own values
        (1, 0.02, 8, False)
    """

    def __init__(
        self, progress: float = 0.0, iteration: int = 0, env_steps: int = 0, rank: int = 0, world_size: int = 1,
        updates: int = 1,
    ) -> None:
        self.progress = progress
        self.iteration = iteration
        self.env_steps = env_steps
        self.rank = rank
        self.world_size = world_size
        self.updates = updates

    def sync_gradients(self, grad: torch.Tensor) -> None:
        """Make ``grad`` (a flat gradient buffer) the average over all learners, in place. Serially: nothing."""

    def mean(self, value: float) -> float:
        """The mean of ``value`` over all learners (e.g. the approximate KL an early stop compares)."""
        return value

    def min(self, value: int) -> int:
        """The minimum of ``value`` over all learners (e.g. how many minibatches every learner runs)."""
        return value

    def any(self, flag: bool) -> bool:
        """True when ``flag`` is true on any learner."""
        return flag

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """The element-wise sum of a small tensor over all learners (a new tensor; e.g. the moments of
        advantages normalised over every learner's minibatch). Serially: ``values`` itself."""
        return values


class Policy:
    """Base class of every policy; see the module docstring for what a pipeline calls and when.

    Examples:
        >>> class Still(Policy):  # acts 0 everywhere; a real policy also writes collect and learn
        ...     pipelines = ("serial_offpolicy",)
        ...     def deterministic_action(self, obs): return torch.zeros(len(obs), 1)
        >>> policy = Still({}, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,)), "cpu")
        >>> policy.evaluate(torch.zeros(2, 3))  # from deterministic_action
        array([[0.],
               [0.]], dtype=float32)
    """

    default_config: ClassVar[dict[str, Any]] = {}
    # key -> (low, high) inclusive (None = open) or a zoo.config.Range; checked before a run starts.
    config_ranges: ClassVar[dict[str, Any]] = {}
    # key -> allowed values; checked before a run starts.
    config_choices: ClassVar[dict[str, tuple[Any, ...]]] = {}
    # Registered names of the pipelines this policy runs on; the first is the default ``pipeline.type``. None here:
    # a policy that forgets to say is refused in one line, never handed a batch type it does not expect.
    pipelines: ClassVar[tuple[str, ...]] = ()
    # Keys of the policy section that ``--resume`` may not change (they shape the saved weights).
    frozen_keys: ClassVar[tuple[str, ...]] = ()
    # The section's keys declared once each (zoo.config.schema.Field): a subclass that sets ``fields`` gets the five
    # attributes above, and ``config_docs`` (meanings), derived from it.
    fields: ClassVar[dict[str, Any]] = {}
    # The learner state (see the module docstring): attribute names of what acting needs, and of what learning adds.
    acting_parts: ClassVar[tuple[str, ...]] = ()
    learning_parts: ClassVar[tuple[str, ...]] = ()
    # Whether ``collect`` and ``evaluate`` take ``action_mask=`` (zoo.policies.masking): an env that gives action
    # masks is refused in one line for a policy that does not.
    takes_action_mask: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declare_fields(cls)

    def __init__(
        self,
        cfg: EasyDict,
        observation_space: gym.Space,
        action_space: gym.Space,
        device: torch.device,
        acting_only: bool = False,
    ) -> None:
        self.cfg = cfg
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = torch.device(device)
        self.acting_only = acting_only

    @classmethod
    def check_spaces(cls, observation_space: gym.Space, action_space: gym.Space) -> None:
        """Raise ``zoo.errors.ConfigError`` for spaces this policy cannot handle (default: accept all)."""

    def collect(self, obs: torch.Tensor) -> CollectOutput:
        """Sample actions for a batch of observations (no gradient)."""
        raise NotImplementedError

    def rollout_actor(self, steps: int, num_envs: int) -> RolloutActor:
        """The ``RolloutActor`` of a rollout of ``steps`` x ``num_envs``; the default, ``CollectActor``, calls
        ``collect`` every step.

        A policy may return a faster one for small models, where per-step tensor calls cost more than the
        arithmetic. What it gives must equal ``collect``'s output step by step for the same torch RNG state (same
        actions, same extras, up to float rounding); it may add extras that ``process_rollout`` would otherwise
        compute (e.g. ``log_prob``). The weights do not change during a rollout.
        """
        return CollectActor(self, steps, num_envs)

    def evaluate(self, obs: torch.Tensor) -> np.ndarray:
        """Deterministic actions for a batch of observations (no gradient), as numpy; the default converts
        ``deterministic_action``."""
        with torch.no_grad():
            return self.deterministic_action(obs).cpu().numpy()

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The env actions ``evaluate`` returns, as a tensor computed by torch operations only (traceable), for a
        float32 batch ``(N, *observation_space.shape)``. Optional: a policy that defines it can be exported."""
        raise NotImplementedError(f"{type(self).__name__} does not define deterministic_action")

    def export_module(self) -> torch.nn.Module | None:
        """A traceable module from a float32 observation batch to env actions (see the module docstring), or None
        when this policy cannot be exported. Default: ``ActingGraph(self)`` where the class defines
        ``deterministic_action``."""
        if type(self).deterministic_action is Policy.deterministic_action:
            return None
        return ActingGraph(self)

    def process_rollout(self, rollout: Rollout) -> Rollout:
        """On-policy sample processing before ``learn`` (e.g. advantages); default: the rollout unchanged."""
        return rollout

    def learn(self, batch: Any, ctx: LearnContext) -> dict[str, float]:
        """One update from ``batch``; returns finite metrics by name."""
        raise NotImplementedError

    @property
    def learner_state(self) -> LearnerState:
        """The declared state (``acting_parts``, ``learning_parts``) and what derives from it."""
        return LearnerState(self)

    def _declared(self, what: str) -> None:
        if not (self.acting_parts or self.learning_parts):
            raise NotImplementedError(f"{type(self).__name__} declares no state: set acting_parts and learning_parts "
                                      f"(zoo.policies.state), or write {what}")

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: every declared part's state (``zoo.policies.state``)."""
        self._declared("state_dict")
        return self.learner_state.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (an acting-only policy reads its acting parts and ignores the rest)."""
        self._declared("load_state_dict")
        self.learner_state.load_state_dict(state)

    def actor_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights acting needs, alone: copies of the acting parts' tensors (default: the whole ``state_dict``
        where no state is declared)."""
        if not self.acting_parts:
            return self.state_dict()
        return self.learner_state.actor_state_dict()

    def load_actor_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load what ``actor_state_dict`` returned."""
        if not self.acting_parts:
            self.load_state_dict(state)
            return
        self.learner_state.load_actor_state_dict(state)

    def environment_record(self) -> dict[str, Any]:
        """Facts about how this policy computes on this machine that its results depend on (e.g. the precision
        ``auto`` chose), added to the run directory's ``environment.json``; none by default."""
        return {}

    def close(self) -> None:
        """Release background resources (threads, processes, files); the pipeline calls it once when the run ends,
        however it ends. Nothing by default."""


class ActingGraph(torch.nn.Module):
    """``policy.deterministic_action`` as a module: it holds the networks acting uses (the declared acting parts'
    modules, or ``networks``), so that tracing records their weights as parameters.

    Examples:
        >>> class Tanh(Policy):
        ...     acting_parts = ("net",)
        ...     def deterministic_action(self, obs): return self.net(obs).tanh()
        >>> policy = Tanh({}, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,)), "cpu")
        >>> policy.net = torch.nn.Linear(3, 1)
        >>> graph = ActingGraph(policy)  # what the default export_module returns
        >>> graph(torch.zeros(5, 3)).shape, sum(p.numel() for p in graph.parameters())  # the net's 3 + 1
        (torch.Size([5, 1]), 4)
    """

    def __init__(self, policy: Policy, networks: dict[str, torch.nn.Module] | None = None) -> None:
        super().__init__()
        if networks is None:
            networks = policy.learner_state.networks(acting=True)
            if not networks:
                raise ValueError(f"{type(policy).__name__} declares no acting networks (acting_parts): pass "
                                 f"ActingGraph the networks deterministic_action uses")
        self.networks = torch.nn.ModuleDict(networks)
        self._act = policy.deterministic_action
        # Whether the graph takes an action mask (``zoo export`` of a run whose env gave masks): where
        # ``deterministic_action`` has an ``action_mask`` keyword.
        self.takes_action_mask = "action_mask" in inspect.signature(policy.deterministic_action).parameters

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        with torch.no_grad():
            return self._act(obs) if action_mask is None else self._act(obs, action_mask=action_mask)
