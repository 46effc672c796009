"""The off-policy family base (SAC, SAC-ACE, TD3, DQN): what every replay-based policy shares.

A subclass writes ``explore_action`` or ``explore`` (the env actions to collect with), ``update`` (one gradient
update on one minibatch), its networks, ``deterministic_action`` or ``evaluate``, and its state;
``OffPolicyPolicy`` gives:

- ``learn(replay, ctx)``: ``ctx.updates`` updates, each on a minibatch of ``cfg.batch_size`` rows drawn uniformly
  (with replacement) with torch's global generator, whose state every checkpoint holds, so a resumed run draws the
  same rows (``sample_windows``: the same draw, as n-step windows of one sub-env's episode); the metrics of one
  call are averaged per key over the updates that report the key (an actor metric reported every 2nd update is the
  mean over those). Hooks around it: ``prepare_learning(replay, ctx)`` once per call, ``before_update()`` before
  each draw, ``after_update()`` after each update, ``learn_metrics()`` added after the averages.
  ``self.updates`` counts gradient updates; ``update`` sees it already counting the update in progress (1 in the
  first), and ``state_dict`` saves it.
- One learning step, eager or compiled (``policy.compile``, ``zoo.policies.compiled``). A subclass that sets
  ``compilable = True`` writes ``update`` sync-free: no ``.item()`` or ``float()`` of a tensor, no branch on a
  tensor's value, ``FlatOptimizer.minimize`` for its optimiser steps, metrics returned as tensors (the pipeline
  reads them once per metrics row), and cadences read from ``self.due[name]`` (the names and intervals it declares
  in ``cadences()``; the base sets them before each update, so the step is one graph per combination) rather than
  from ``self.updates``. Each update is then ``gather(storage, draw)`` (the minibatch indexed out of the replay's
  storage, inside the step) followed by ``update``: ``draw(replay)`` runs first, outside the step, and makes the
  host-side choices (the rows). Randomness inside ``update`` (``torch.randn_like``) is drawn in program order from
  torch's generator, compiled or not. ``explore_action`` (a tensor of env actions) is compiled with the step. A
  subclass that keeps ``compilable = False`` (the default, e.g. an ``update`` that calls ``loss.backward()`` and
  ``.item()``) runs eager as before, ``sample_minibatch`` and all.
- ``soft_update(target, source, tau)`` and ``update_target(...)``: Polyak averaging ``target <- (1 - tau) target
  + tau source`` every ``interval`` updates; ``tau = 1`` is the periodic hard copy (DQN's target network).
- ``self.progress``: the training progress when acting (a ``LearnContext``: ``progress`` in [0, 1] of the
  env-step budget, ``env_steps`` and ``iteration`` before the collection), which the off-policy pipeline sets
  through ``set_progress`` before every collection, so an exploration schedule (epsilon-greedy, a noise decay) is
  a function of it and needs no counter of its own. It is derived from the run's counters, so resumes are exact.
- ``self.precision``: ``fp32`` or ``bf16`` (``policy.precision``, ``auto`` resolved; ``zoo.policies.precision``):
  each ``update`` runs under bf16 autocast when bf16; the networks return float32 outputs so losses stay fp32.
- ``close()``: nothing by default; a policy with background work (SAC-ACE's causal fits) stops it there.

The replay convention: the replay buffer stores **env actions**, for the uniformly random steps before
``learning_starts`` and for the policy's steps alike (``collect`` returns ``explore``'s env actions with no raw
action). The policy converts when it learns: a bounded Box action to the [-1, 1] range of a tanh actor with
``BoxActions.to_unit``; a ``Discrete(n, start)`` action to an index with ``action - start``. One convention means
one conversion, so random and policy steps can never disagree on offsets or scaling.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict
from torch import nn

from ..accel.auto_compile import AutoDecision
from ..accel.compiled import COMPILE_FIELD, CompiledStep, resolve_compile
from ..accel.flat_views import FlatModules
from ..accel.matmul import fp32_products
from ..accel.precision import PRECISIONS, learning_precision, resolve_precision
from ..accel.replay_storage import ReplayStorage
from ..config.schema import Field
from ..data import ReplayBuffer
from .base import CollectOutput, LearnContext, Policy
from .continuous_networks import BoxActions as BoxActions  # noqa: F401  (importable here, where it was)
from .continuous_networks import check_bounded_box as check_bounded_box  # noqa: F401

# The keys every actor-critic of the family (SAC, SAC-ACE, TD3) declares alike; each extends or re-defaults them.
ACTOR_CRITIC_FIELDS: dict[str, Field] = {
    "hidden_sizes": Field([256, 256], "widths of the hidden layers of actor and critics", range=(1, 1_000_000),
                          frozen=True),
    "activation": Field("relu", "hidden-layer activation", choices=("relu", "tanh", "elu"), frozen=True),
    "actor_learning_rate": Field(3e-4, "Adam learning rate of the actor", range=(0.0, 10.0)),
    "critic_learning_rate": Field(3e-4, "Adam learning rate of the critics", range=(0.0, 10.0)),
    "batch_size": Field(256, "transitions per gradient update", range=(1, 1_000_000)),
    "gamma": Field(0.99, "discount factor", range=(0.0, 1.0)),
    "tau": Field(0.005, "Polyak rate of the target networks", range=(0.0, 1.0)),
    "max_grad_norm": Field(0.0, "clip the gradient norm to this (0: no clipping)", range=(0.0, None)),
}
PRECISION_FIELD = Field(  # every policy of the family offers it (OffPolicyPolicy declares it); zoo.accel.precision
    "fp32", "arithmetic of the gradient updates: fp32, bf16 (autocast matmuls, fp32 weights, optimiser and losses) "
    "or auto (bf16 where the device has native bf16 matmuls and the networks are wide enough to gain)",
    choices=PRECISIONS)
ACTOR_CRITIC_FIELDS["precision"] = PRECISION_FIELD
ACTOR_CRITIC_FIELDS["compile"] = COMPILE_FIELD


def soft_update(target: nn.Module | torch.Tensor, source: nn.Module | torch.Tensor, tau: float) -> None:
    """``target <- target + tau * (source - target)`` in place, for two modules of the same structure (parameters
    and floating-point buffers) or two tensors (e.g. flat parameter buffers); ``tau = 1`` copies exactly.

    Examples:
        >>> target, source = torch.zeros(3), torch.ones(3)
        >>> soft_update(target, source, tau=0.1)
        >>> target
        tensor([0.1000, 0.1000, 0.1000])
        >>> soft_update(nn.Linear(2, 2), nn.Linear(2, 2), tau=1.0)  # modules: a hard copy, as DQN's target
    """
    with torch.no_grad():
        if isinstance(target, torch.Tensor):
            pairs = [(target, source)]
        else:
            pairs = [*zip(target.parameters(), source.parameters()), *zip(target.buffers(), source.buffers())]
        for dst, src in pairs:
            if tau == 1.0 or not dst.is_floating_point():
                dst.copy_(src)
            else:
                dst.lerp_(src, tau)


class CurrentCadences(Mapping):
    """``policy.due`` outside ``learn``: whether each of ``policy.cadences()`` is due at ``policy.updates`` (so that
    a direct call of ``update``, as in a test, sees the cadences of the update count it was given)."""

    def __init__(self, policy: OffPolicyPolicy) -> None:
        self.policy = policy

    def __getitem__(self, name: str) -> bool:
        return self.policy.updates % self.policy.cadences()[name] == 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.policy.cadences())

    def __len__(self) -> int:
        return len(self.policy.cadences())


class OffPolicyPolicy(Policy):
    """Base of replay-based policies: minibatches, target updates, metric averaging, progress when acting.

    Subclasses implement ``explore_action(obs) -> Tensor`` (or ``explore(obs) -> np.ndarray``) and ``update(batch,
    ctx) -> metrics``; their ``fields`` extend this base's (``batch_size``, ``precision``, ``compile``: see the module
    docstring for the rest of the contract, and for ``compilable``).

    Examples:
        >>> class Still(OffPolicyPolicy):  # update(batch, ctx) left out: this one only acts
        ...     def explore_action(self, obs): return torch.zeros(len(obs), 1)
        >>> sorted(Still.default_config)  # the base's keys
        ['batch_size', 'compile', 'precision']
        >>> observation_space, action_space = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,))
        >>> policy = Still(EasyDict(Still.default_config), observation_space, action_space, "cpu")
        >>> policy.collect(torch.zeros(2, 3)).action  # explore_action's env actions, as the replay stores them
        array([[0.],
               [0.]], dtype=float32)
    """

    pipelines: ClassVar[tuple[str, ...]] = ("serial_offpolicy",)
    # The keys this base honours, offered to every subclass (a subclass's own ``fields`` extend them).
    fields: ClassVar[dict[str, Field]] = {
        "batch_size": Field(256, "transitions per gradient update", range=(1, 1_000_000)),
        "precision": PRECISION_FIELD,
        "compile": COMPILE_FIELD,
    }
    # Whether ``update`` is written sync-free, so that it can run as one compiled graph (see the module docstring).
    compilable: ClassVar[bool] = False
    # Whether ``explore_action`` also takes numpy arrays (``acts_in_numpy``). The rule: a subclass that defines its
    # own ``explore_action`` gets False unless its class body sets this (its formula is not assumed to take arrays).
    numpy_acting: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "explore_action" in vars(cls) and "numpy_acting" not in vars(cls):
            cls.numpy_acting = False

    def __init__(
        self, cfg: EasyDict, observation_space: gym.Space, action_space: gym.Space, device: torch.device,
        acting_only: bool = False,
    ) -> None:
        super().__init__(cfg, observation_space, action_space, device, acting_only)
        self.updates = 0
        self.progress = LearnContext()
        # fp32 or bf16: what `auto` became here (recorded in the run's environment.json)
        self.precision = self.resolve_precision()
        # The cadences due in the update in progress (``cadences``): a plain dict that ``learn`` sets before each
        # update (what the compiled step reads); outside ``learn`` computed from ``self.updates`` when read.
        self.due: Mapping[str, bool] = CurrentCadences(self)
        self.storage = ReplayStorage(self.device)
        self.compiled_step: CompiledStep | None = None
        self.compiled_acting: CompiledStep | None = None  # explore_action compiled with the step
        self.compile_reason = "not planned yet"
        # auto, deciding from the first eager updates (zoo.accel.auto_compile); then whether it compiled (None: not
        # decided that way), which the state keeps so that a resume decides alike
        self._auto: AutoDecision | None = None
        self.compile_decision: bool | None = None
        # what the compiled step sees as views of flat buffers: the declared networks' (zoo.policies.state)
        self.flat_modules = FlatModules(lambda: self.learner_state.flat_networks())

    def resolve_precision(self, convolutional: bool = False) -> str:
        """``cfg.precision`` with ``auto`` decided for these networks (``cfg.hidden_sizes``, ``cfg.batch_size``; an
        image encoder counts as big enough): see ``zoo.policies.precision.resolve_precision``."""
        cfg = self.cfg
        return resolve_precision(cfg.get("precision", "fp32"), self.device, list(cfg.get("hidden_sizes", [])),
                                 int(cfg.get("batch_size", 1)), convolutional)

    def environment_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"precision": self.precision, "fp32_products": fp32_products()}
        if not self.acting_only:
            record["compile"] = self.compiled_step is not None and self.compiled_step.active
            record["compile_reason"] = self.compile_reason
            if self.compiled_step is not None:
                record.update(self.compiled_step.record())
            if self.compiled_acting is not None:
                record["compile_seconds"] += round(self.compiled_acting.seconds, 2)
                if self.compiled_acting.failure is not None:
                    record["compile_failure_acting"] = self.compiled_acting.failure
        return record

    def plan_learning(self, updates: int | None) -> None:
        """Called by the pipeline once it knows how many gradient updates the run plans (None: unknown): decides
        ``policy.compile``; ``auto`` where it may pay (``zoo.accel.compiled``) from the first updates' cost here
        (``zoo.accel.auto_compile``)."""
        requested = self.cfg.get("compile", "off")
        compile_step, self.compile_reason = resolve_compile(requested, self.compilable, updates, self.device,
                                                            type(self).__name__)
        if "compile" not in self.cfg:  # a class that withdrew the key, or one written before fields were inherited
            self.compile_reason = f"{type(self).__name__} offers no policy.compile key: its update runs eager"
        self._auto = None
        if compile_step and requested == "auto" and updates is not None and self.compile_decision is None:
            graphs = 2 ** sum(interval > 1 for interval in self.cadences().values())
            self._auto = AutoDecision(f"{type(self).__name__}'s learning step", updates, graphs)
            self.compile_reason = "auto: deciding from the cost of the first updates here"
            return
        self._build_compiled(compile_step and self.compile_decision is not False, requested == "on")

    def _build_compiled(self, compile_step: bool, required: bool) -> None:
        name = type(self).__name__
        self.compiled_step = CompiledStep(self._viewed_learning_step, f"{name}'s learning step", required,
                                          self.device, self.state_tensors,
                                          eager=self.learning_step) if compile_step else None
        acting = compile_step and type(self).explore_action is not OffPolicyPolicy.explore_action
        self.compiled_acting = CompiledStep(self.explore_action, f"{name}'s acting", required, self.device,
                                            self.state_tensors, gradients=False) if acting else None
        if self.compiled_step is not None:
            self.flat_modules.refresh()  # built in the middle of a learn call too (auto's decision)

    def state_tensors(self) -> Iterator[torch.Tensor]:
        """Every tensor the learning step reads or writes in place (what a captured CUDA graph keeps the addresses
        of): the declared state's (``zoo.policies.state``: parameters, buffers, flat buffers, optimiser state,
        tensors such as SAC-ACE's causal weights) and the replay's storage on the device."""
        yield from self.learner_state.state_tensors()
        yield from self.storage.columns()

    # -- acting -------------------------------------------------------------------------------------------
    def set_progress(self, ctx: LearnContext) -> None:
        """Called by the pipeline before each collection: the progress ``explore`` may schedule on."""
        self.progress = ctx

    def explore(self, obs: torch.Tensor) -> np.ndarray:
        """The env actions to collect with for a batch of observations (exploration included): by default
        ``numpy_explore``'s where it gives them, else ``explore_action``'s, compiled where the learning step is (one
        graph, the same random draws)."""
        actions = self.numpy_explore(obs)
        if actions is not None:
            return actions
        if self.compiled_acting is not None:
            return self.compiled_acting("acting", obs).cpu().numpy()  # under no_grad, eager fallback too
        with torch.no_grad():
            return self.explore_action(obs).cpu().numpy()

    def numpy_explore(self, obs: torch.Tensor) -> np.ndarray | None:
        """``explore_action`` run on numpy arrays where ``acts_in_numpy(obs)`` (the same formula, the same torch
        random draws, float rounding apart), else None. For small actors on the CPU, numpy's per-call cost is a
        fraction of torch's (docs/speed.md)."""
        if not self.acts_in_numpy(obs):
            return None
        return self.explore_action(obs.numpy())

    def acts_in_numpy(self, obs: torch.Tensor) -> bool:
        """Whether ``explore_action`` runs on numpy arrays for ``obs``: the class says its ``explore_action`` takes
        arrays (``numpy_acting``), the observations are float32 on the CPU, and every declared acting network runs
        on arrays now (its ``numpy_ready()``: float32 weights on the CPU)."""
        if not self.numpy_acting or obs.device.type != "cpu" or obs.dtype != torch.float32:
            return False
        networks = self.learner_state.networks(acting=True).values()
        return bool(networks) and all(getattr(network, "numpy_ready", lambda: False)() for network in networks)

    def explore_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The env actions to collect with, as a tensor computed by torch operations only (what ``explore``
        returns): define it, or override ``explore`` itself. Where the class sets ``numpy_acting``, the same function
        also takes numpy arrays (the networks' numpy forward, ``zoo.policies.arrays``'s operations) and returns one."""
        raise NotImplementedError(f"{type(self).__name__} defines neither explore nor explore_action")

    def collect(self, obs: torch.Tensor) -> CollectOutput:
        """``explore``'s env actions, which the replay stores as they are (the replay convention)."""
        return CollectOutput(self.explore(obs))

    # -- learning -----------------------------------------------------------------------------------------
    def draw(self, replay: ReplayBuffer) -> dict[str, torch.Tensor]:
        """The host-side part of one minibatch, outside the step: ``{"rows": ...}``, ``cfg.batch_size`` rows drawn
        uniformly with torch's global generator (on the device where it is a GPU: no copy, no sync), which
        ``gather`` reads inside the step; or a whole minibatch read on the host (a dict without ``rows``)."""
        device = self.device if self.device.type == "cuda" else None
        return {"rows": torch.randint(len(replay), (self.cfg.batch_size,), device=device)}

    def gather(self, storage: dict[str, torch.Tensor], drawn: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The minibatch, inside the step: the replay's fields (``ReplayStorage``) at the drawn rows."""
        rows = drawn["rows"]
        return {name: column[rows] for name, column in storage.items()}

    def sample_minibatch(self, replay: ReplayBuffer) -> dict[str, torch.Tensor]:
        """``cfg.batch_size`` rows drawn uniformly with torch's global generator, as tensors on the device."""
        return self._minibatch(self.storage.of(replay), self.draw(replay))

    def _minibatch(self, storage: dict[str, torch.Tensor], drawn: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.gather(storage, drawn) if "rows" in drawn else drawn

    def sample_windows(self, replay: ReplayBuffer, steps: int) -> dict[str, torch.Tensor]:
        """Like ``sample_minibatch`` (the same draw of start rows), for n-step targets: ``replay.window_batch`` of
        the drawn rows (windows of up to ``steps`` transitions of one sub-env's episode) as tensors on the device:
        ``obs``, ``action`` ``(B, ...)``; ``reward``, ``terminated``, ``truncated`` ``(steps, B)``; ``next_obs``
        (and ``next_action_mask``, where the replay keeps masks) after each window's last transition."""
        rows = torch.randint(len(replay), (self.cfg.batch_size,)).numpy()
        batch = replay.window_batch(rows, steps)
        return {key: torch.as_tensor(value, device=self.device) for key, value in batch.items()}

    def cadences(self) -> dict[str, int]:
        """Named intervals, in updates, of the parts of ``update`` that do not run every update (e.g. ``{"actor":
        2}``): before each update the base sets ``self.due[name] = self.updates % interval == 0``. None by default."""
        return {}

    def learning_step(self, storage: dict[str, torch.Tensor], drawn: dict[str, torch.Tensor],
                      ctx: LearnContext) -> dict[str, Any]:
        """One update as the compiled step runs it: the minibatch gathered from ``storage`` at ``drawn``, then
        ``update`` (under bf16 autocast when ``self.precision`` is bf16)."""
        batch = self._minibatch(storage, drawn)
        with learning_precision(self.precision, self.device):
            return self.update(batch, ctx)

    def _viewed_learning_step(self, storage: dict[str, torch.Tensor], drawn: dict[str, torch.Tensor],
                              ctx: LearnContext) -> dict[str, Any]:
        """``learning_step`` as the compiled step traces it: the networks' parameters as views of their flat
        buffers (``zoo.policies.flat_views``), so that the graph's inputs do not alias each other."""
        return self.flat_modules.call(self.learning_step, storage, drawn, ctx)

    def learn(self, batch: ReplayBuffer, ctx: LearnContext) -> dict[str, Any]:
        """``ctx.updates`` updates, each on a fresh minibatch of the replay buffer ``batch``; each metric is the
        mean over the updates that reported it (tensors for a compile-ready policy: read them once per row),
        followed by ``learn_metrics()``."""
        self.prepare_learning(batch, ctx)
        totals: dict[str, list[Any]] = {}
        legacy = not self.compilable and type(self).sample_minibatch is not OffPolicyPolicy.sample_minibatch
        storage = self.storage.of(batch)
        cadences = self.cadences()
        if self.compiled_step is not None:
            self.flat_modules.refresh()  # a replaced network or buffer is seen from this call on
        for _ in range(ctx.updates):
            self.before_update()
            drawn = {"minibatch": self.sample_minibatch(batch)} if legacy else self.draw(batch)
            self.updates += 1
            self.due = {name: self.updates % interval == 0 for name, interval in cadences.items()}
            if legacy:
                with learning_precision(self.precision, self.device):
                    metrics = self.update(drawn["minibatch"], ctx)
            elif self.compiled_step is not None:
                metrics = self.compiled_step(tuple(self.due.values()), storage, drawn, ctx)
            elif self._auto is not None:
                metrics = self._timed_step(storage, drawn, ctx)
            else:
                metrics = self.learning_step(storage, drawn, ctx)
            self.after_update()
            for key, value in metrics.items():
                totals.setdefault(key, []).append(value)
        self.due = CurrentCadences(self)
        metrics = {key: values[0] if len(values) == 1 else sum(values) / len(values) for key, values in totals.items()}
        metrics.update(self.learn_metrics())
        return metrics

    def _timed_step(self, storage: dict[str, torch.Tensor], drawn: dict[str, torch.Tensor],
                    ctx: LearnContext) -> dict[str, Any]:
        """An eager update timed for ``auto``'s decision, which is taken once enough are (the compiled step is built
        then, and runs from the next update on)."""
        auto = self._auto
        assert auto is not None
        auto.start()
        metrics = self.learning_step(storage, drawn, ctx)
        auto.stop()
        if auto.ready:
            self.compile_decision, self.compile_reason = auto.decide(self.updates)
            self._auto = None
            self._build_compiled(self.compile_decision, False)
        return metrics

    def prepare_learning(self, replay: ReplayBuffer, ctx: LearnContext) -> None:
        """Hook: once at the start of each ``learn`` call (nothing by default)."""

    def before_update(self) -> None:
        """Hook: before each minibatch is drawn, with ``self.updates`` not yet counting it (nothing by default)."""

    def after_update(self) -> None:
        """Hook: after each update, outside the compiled step, with ``self.due`` still that update's: host-side work
        such as SAC-ACE's resets (nothing by default)."""

    def update(self, batch: dict[str, torch.Tensor], ctx: LearnContext) -> dict[str, Any]:
        """One gradient update on ``batch``; returns its metrics (floats, or 0-dim tensors where ``compilable``).

        ``batch`` holds ``B = cfg.batch_size`` rows of the replay as tensors on ``self.device``:

        - ``obs``, ``next_obs``: ``(B, *obs_shape)``, float32 (uint8 for images); ``next_obs`` is the observation
          after the step, the final one where the episode ended there.
        - ``action``: ``(B, *action_shape)``, the env actions in the action space's dtype (int64 for Discrete,
          float32 for Box: the replay convention, see the module docstring).
        - ``reward``: ``(B,)`` float32.
        - ``terminated``, ``truncated``: ``(B,)`` bool: use ``(~terminated).float()`` in arithmetic; a terminated
          step does not bootstrap, a truncated one does. (n-step ``sample_windows``: these and ``reward`` ``(n, B)``.)
        - ``next_action_mask``: ``(B, width)`` bool, only where the env gives action masks (a policy that sets
          ``takes_action_mask``): the actions valid at ``next_obs`` (``zoo.data.Transitions``).
        """
        raise NotImplementedError

    def learn_metrics(self) -> dict[str, float]:
        """Hook: metrics reported once per ``learn`` call after the averages (e.g. a temperature)."""
        return {}

    def update_target(self, target: nn.Module | torch.Tensor, source: nn.Module | torch.Tensor, tau: float,
                      interval: int = 1) -> bool:
        """``soft_update(target, source, tau)`` when ``self.updates`` is a multiple of ``interval``; True if done."""
        if self.updates % interval != 0:
            return False
        soft_update(target, source, tau)
        return True

    # -- state --------------------------------------------------------------------------------------------
    # The declared state (zoo.policies.state): what acting needs (kept by acting-only policies, published to actors)
    # and what learning adds (target networks, optimisers, counters); the update counter is the base's own.

    def state_dict(self) -> dict[str, Any]:
        """The update counter and every declared part's state; a subclass that keeps state outside the declaration
        adds it to this."""
        state = {"updates": self.updates, **self.learner_state.state_dict()}
        if self.compile_decision is not None:  # auto's, kept: a resume decides alike
            state["compile_decision"] = self.compile_decision
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict`` output (an acting-only policy reads its acting parts and ignores the learner's)."""
        self.updates = int(state["updates"])
        self.learner_state.load_state_dict(state)
        decision = state.get("compile_decision")
        if decision is not None and self._auto is not None:  # planned under auto, decided before the checkpoint
            self.compile_decision, self._auto = bool(decision), None
            self.compile_reason = f"auto: {'compiled' if decision else 'eager'}, as decided before the resume"
            self._build_compiled(self.compile_decision, False)
