"""``ActorCriticPolicy``: the public base of on-policy actor-critic policies (A2C, PPO, IMPALA, and plugins).

It owns the networks, sampling, evaluation, the optimiser, the learning-rate schedule, the learner state and the
sample processing (GAE, with termination and truncation kept apart); ``learn`` comes from the family's driver
(``zoo.policies.onpolicy``: minibatches, compiling, metrics). A subclass writes only ``update``, one sync-free
gradient update on one minibatch, from these public pieces::

    class MyPolicy(ActorCriticPolicy):
        fields = {**ActorCriticPolicy.fields, "my_coef": Field(0.5, "what my_coef weighs", range=(0.0, None))}

        def update(self, batch, ctx):                    # batch: the minibatch's columns, advantages normalised
            output, value = self.forward_batch(batch)    # the model on the minibatch (policy.recurrent: chunks)
            loss = ...                                   # rl_utils losses on batch["advantage"], batch["returns"]
            done = self.optimizer.minimize(loss, self.cfg.max_grad_norm, ctx.sync_gradients)
            return {"my_loss": loss.detach(), "loss": done}

``batch`` holds ``obs``, ``action`` (raw), ``policy_output`` (logits, or mu and sigma concatenated: see
``unpack_policy_output``; from ``collect``), ``value``, ``advantage`` and ``returns`` (from ``process_rollout``).
A subclass may still write ``learn`` itself (``batch.valid_samples()``, ``update_learning_rate(ctx)``,
``optimizer_step(loss, ctx)``): the base's is then not used.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict

from ..accel.numpy_acting import NumpyActing
from ..config.schema import Field
from ..data import Rollout
from ..errors import ConfigError
from ..rl_utils import (
    categorical_log_prob,
    gae,
    gae_data,
    gaussian_log_prob,
    multi_categorical_log_prob,
    multi_categorical_logits,
)
from ..sizes import check_parameter_memory
from .base import CollectOutput, LearnContext, Policy, RolloutActor
from .gsde import StateDependentNoise
from .masking import MaskedActing
from .memory import MEMORY_FIELDS, MemoryActingGraph, MemoryLearning
from .networks import ACTIVATIONS, ActorCritic, action_nvec, action_output_dim, build_encoder
from .onpolicy import ONPOLICY_COMPILE_FIELD, OnPolicyLearning, advantage_moments, normalize_advantage, normalize_with
from .optim import FLAT_ALGORITHMS, FlatOptimizer

__all__ = ["ActorCriticPolicy", "advantage_moments", "normalize_advantage", "normalize_with"]


def _gae_flags(rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE's ``done`` (terminated, or an autoreset step: no bootstrap) and ``traj_flag`` (any episode end or
    autoreset step: the trace ends) of a rollout; in numpy on the CPU (a fifth of torch's per-call cost)."""
    if rollout.valid.device.type == "cpu":
        invalid = ~rollout.valid.numpy()
        done = rollout.terminated.numpy() | invalid
        return torch.from_numpy(done), torch.from_numpy(done | rollout.truncated.numpy())
    invalid = ~rollout.valid
    done = rollout.terminated | invalid
    return done, done | rollout.truncated


class ActorCriticPolicy(MemoryLearning, MaskedActing, OnPolicyLearning, Policy):
    """Base of on-policy actor-critic policies for Box observations (vectors or images) and Discrete or 1-D Box
    actions; MultiDiscrete and MultiBinary actions too for subclasses that set ``multi_discrete_actions``.

    Subclasses implement ``update`` (see the module docstring). Public pieces: ``model`` (``ActorCritic``:
    ``model(obs) -> (policy_output, value)``), ``discrete`` (logits out: Discrete, MultiDiscrete, MultiBinary),
    ``nvec`` (the component sizes of a MultiDiscrete/MultiBinary action, else None), ``unpack_policy_output``,
    ``value``, ``update_learning_rate(ctx)``, ``optimizer_step(loss, ctx)`` and ``process_rollout`` (GAE).

    Examples:
        >>> class MyPolicy(ActorCriticPolicy):  # update(batch, ctx) left out: this one only acts
        ...     fields = {"my_coef": Field(0.5, "what my_coef weighs")}  # with the base's keys
        >>> cfg = EasyDict(MyPolicy.default_config)
        >>> cfg.my_coef, cfg.gamma, cfg.hidden_sizes
        (0.5, 0.99, [64, 64])
        >>> policy = MyPolicy(cfg, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), "cpu")
        >>> policy.collect(torch.zeros(3, 4)).action.shape  # one env action per observation
        (3,)
    """

    # Whether ``learn`` handles MultiDiscrete/MultiBinary actions (padded logits from ``unpack_policy_output`` and
    # ``(B, K)`` actions); a subclass that sets it must use a joint loss such as rl_utils' ppo_error_multi_discrete.
    multi_discrete_actions: ClassVar[bool] = False
    # Whether ``learn`` reads the behaviour log-probabilities (``log_prob``) that ``process_rollout`` adds (PPO's
    # ratio does; A2C's loss does not, so it skips that pass).
    needs_log_prob: ClassVar[bool] = True
    # The action kinds ("discrete": Discrete; "gaussian": Box) for which zoo.accel.numpy_acting samples exactly as
    # this class's ``collect`` does, so that it may act for whole rollouts in its place. The rule: a subclass that
    # defines its own ``collect`` gets () (its ``collect`` is called at every step) unless its class body sets this.
    numpy_rollout_actions: ClassVar[tuple[str, ...]] = ("discrete", "gaussian")

    pipelines: ClassVar[tuple[str, ...]] = ("serial_onpolicy", "parallel_sync")
    # The learner state (zoo.policies.state): the networks and gSDE's exploration matrices act; the optimiser learns.
    acting_parts: ClassVar[tuple[str, ...]] = ("model", "sde_noise")
    learning_parts: ClassVar[tuple[str, ...]] = ("optimizer",)
    fields: ClassVar[dict[str, Field]] = {
        "hidden_sizes": Field([64, 64], "widths of the hidden layers of each MLP", range=(1, 1_000_000), frozen=True),
        "activation": Field("tanh", "hidden-layer activation", choices=tuple(ACTIVATIONS), frozen=True),
        "shared_network": Field(False, "one trunk for policy and value (else one each)", frozen=True),
        "encoder": Field("auto", "observation encoder before the MLPs: auto (nature_cnn for uint8 images), mlp, a "
                         "model name", frozen=True),
        "encoder_kwargs": Field({}, "keyword arguments of the encoder (nature_cnn: features_dim)", frozen=True),
        "init_log_std": Field(0.0, "initial log std of Gaussian actions", range=(-20.0, 5.0)),
        "optimizer": Field("adam", "the flat optimiser", choices=FLAT_ALGORITHMS, frozen=True),
        "learning_rate": Field(3e-4, "initial learning rate", range=(0.0, 10.0)),
        "anneal_lr": Field(True, "decay the learning rate linearly to 0 over the budget"),
        "adam_eps": Field(1e-5, "epsilon of Adam (and RMSprop)", range=(0.0, 1.0)),
        "gamma": Field(0.99, "discount factor", range=(0.0, 1.0)),
        "gae_lambda": Field(0.95, "GAE lambda (1: Monte-Carlo returns)", range=(0.0, 1.0)),
        "normalize_advantage": Field(True, "zero-mean unit-std advantages per minibatch"),
        "value_coef": Field(0.5, "weight of the value loss", range=(0.0, None)),
        "entropy_coef": Field(0.0, "weight of the entropy bonus", range=(0.0, None)),
        "max_grad_norm": Field(0.5, "clip the gradient norm to this (0: no clipping)", range=(0.0, None)),
        "numpy_acting": Field(True, "act and value small CPU models in numpy (faster; False: torch everywhere)"),
        "use_sde": Field(False, "gSDE: Box actions explore by noise linear in the actor's latent features "
                         "(zoo.policies.gsde); init_log_std is then the exploration matrix's", frozen=True),
        "sde_sample_freq": Field(-1, "gSDE: new exploration matrices every N steps (-1: once per rollout)",
                                 range=(-1, None)),
        "full_std": Field(True, "gSDE: a std per latent feature and action dimension (False: per latent feature)",
                          frozen=True),
        "ortho_init": Field(True, "orthogonal initialisation of the layers (False: torch's default)", frozen=True),
        **MEMORY_FIELDS,
        "compile": ONPOLICY_COMPILE_FIELD,
    }

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "collect" in vars(cls) and "numpy_rollout_actions" not in vars(cls):
            cls.numpy_rollout_actions = ()  # the rule above: an own collect is called unless declared otherwise
        if "collect" in vars(cls) and "takes_action_mask" not in vars(cls):
            cls.takes_action_mask = False  # an own collect(obs) is not assumed to take action_mask=: masks refused

    @classmethod
    def check_spaces(cls, observation_space: gym.Space, action_space: gym.Space) -> None:
        name = getattr(cls, "__name__", "this policy")
        if not isinstance(observation_space, gym.spaces.Box) or observation_space.shape is None:
            raise ConfigError(
                f"observation space {observation_space} is not supported by {name}: it takes Box observations "
                f"(flattened); wrap the env to give Box observations"
            )
        discrete = isinstance(action_space, gym.spaces.Discrete)
        box = isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1 and action_space.shape[0] > 0
        nvec = action_nvec(action_space)
        multi = nvec is not None and sum(nvec) > 0
        if multi and not cls.multi_discrete_actions:
            raise ConfigError(
                f"action space {action_space} is not supported by {name}: it takes Discrete or non-empty 1-D Box "
                f"actions (MultiDiscrete and MultiBinary: use ppo or a2c)"
            )
        if not (discrete or box or multi):
            kinds = "Discrete, MultiDiscrete, MultiBinary" if cls.multi_discrete_actions else "Discrete"
            raise ConfigError(
                f"action space {action_space} is not supported by {name}: it takes {kinds} or non-empty 1-D Box "
                f"actions"
            )

    def __init__(self, cfg: EasyDict, observation_space: gym.Space, action_space: gym.Space, device: torch.device,
                 acting_only: bool = False) -> None:
        super().__init__(cfg, observation_space, action_space, device, acting_only)
        self.check_spaces(observation_space, action_space)
        hidden = list(cfg.hidden_sizes)
        try:
            encoder = build_encoder(cfg.encoder, observation_space, dict(cfg.encoder_kwargs))
        except (ValueError, TypeError) as err:
            raise ConfigError(f"policy.encoder '{cfg.encoder}': {err}") from err
        obs_dim = encoder.output_dim if encoder is not None else int(np.prod(observation_space.shape))
        out_dim = action_output_dim(action_space)
        trunks = 1 if cfg.shared_network else 2
        check_parameter_memory("policy.hidden_sizes", [obs_dim, *hidden], trunks, out_dim, not acting_only)
        if cfg.get("use_sde", False) and not isinstance(action_space, gym.spaces.Box):
            raise ConfigError(f"policy.use_sde needs Box actions, not {action_space}: set policy.use_sde=false")
        if self.recurrent:
            self.model = self.memory_model(observation_space, action_space, encoder).to(self.device)
        else:
            self.model = ActorCritic(
                observation_space, action_space, hidden, cfg.activation, cfg.shared_network, cfg.init_log_std,
                encoder, sde=bool(cfg.get("use_sde", False)), full_std=bool(cfg.get("full_std", True)),
                ortho_init=bool(cfg.get("ortho_init", True)),
            ).to(self.device)
        self.discrete = self.model.discrete
        self.nvec = self.model.nvec
        self.sde_noise = StateDependentNoise(cfg.get("sde_sample_freq", -1)) if self.model.sde else None
        self._numpy = None if self.recurrent else NumpyActing(self.model)  # used where numpy_acting_applies()
        # Integer actions: the env's own offsets (gymnasium's ``start``) and dtype, in the env's shape.
        start = getattr(action_space, "start", None)
        self._action_start = None if start is None or not np.any(start) else np.asarray(start)
        self._action_shape = action_space.shape
        self._action_dtype = action_space.dtype
        self._action_torch_dtype = torch.from_numpy(np.zeros(0, action_space.dtype)).dtype
        # One flat buffer for all parameters: torch.optim's per-tensor overhead dominates for small networks.
        # Eager steps take torch.optim's arithmetic, checked on the host (zoo.policies.onpolicy).
        self.optimizer = None if acting_only else FlatOptimizer(self.model, cfg.optimizer, cfg.learning_rate,
                                                                eps=cfg.adam_eps, eager_host_step=True)
        if not self.discrete:
            self._low = torch.as_tensor(action_space.low, dtype=torch.float32)
            self._high = torch.as_tensor(action_space.high, dtype=torch.float32)
            self._low_np, self._high_np = self._low.numpy(), self._high.numpy()  # what _to_env clips to

    # -- acting -------------------------------------------------------------------------------------------
    def _env_action(self, raw: torch.Tensor) -> np.ndarray:
        return self._to_env(raw.cpu().numpy())

    def _to_env(self, raw: np.ndarray) -> np.ndarray:
        """What the env receives for raw actions (numpy): integer actions in the space's shape and dtype plus its
        ``start``; Gaussian samples clipped to the bounds (the loss keeps the unclipped sample)."""
        if not self.discrete:
            return np.minimum(np.maximum(raw, self._low_np), self._high_np)
        if self.nvec is not None:  # (B, K) components -> the space's shape and dtype (MultiBinary: int8)
            raw = raw.reshape(*raw.shape[:-1], *self._action_shape).astype(self._action_dtype)
        return raw if self._action_start is None else raw + self._action_start

    @torch.no_grad()
    def collect(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> CollectOutput:
        """Sample actions; the extras hold the behaviour output (``policy_output``) only.

        Values and log-probabilities are not needed to act: ``process_rollout`` computes them for the whole rollout
        in one batched pass (same weights, so the same numbers), which halves the per-step work of collection.
        This is the reference: small CPU models act for whole rollouts in numpy (``rollout_actor``), sampling with
        the same torch draws, so a seed gives the same actions either way.
        """
        if self.recurrent:
            raise ConfigError(f"{type(self).__name__} has memory (policy.recurrent={self.cfg.recurrent}): it acts "
                              f"through memory_actor and act_with_memory, not collect")
        if self.sde_noise is not None:  # gSDE: noise linear in the latent features, one matrix per sub-env
            output, latent = self.model.policy_and_latent(obs)
            noise = self.sde_noise.noise(latent, self.model.sde_std())
        else:
            output, noise = self.model.policy_output(obs), None
        action, packed = self.sample_output(self.masked(output, action_mask), noise)
        extras = {"policy_output": packed}
        if action_mask is not None:  # stored with the step: learning masks its fresh logits alike
            extras["action_mask"] = action_mask.to(torch.bool)
        return CollectOutput(self._env_action(action), action, extras)


    def sample_output(self, output: torch.Tensor | dict[str, torch.Tensor],
                      noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A raw action sampled from a policy output and the output packed for the rollout (``collect``'s draws;
        ``noise``: gSDE's, else Gaussian noise is drawn here)."""
        if self.nvec is not None:
            logits = multi_categorical_logits(output, self.nvec)  # (B, K, N), -inf beyond each component's size
            action = (logits - torch.empty_like(logits).exponential_().log()).argmax(-1)
            packed = output
        elif self.discrete:
            # Gumbel-max: argmax(logits + Gumbel noise) is a categorical sample, at a quarter of multinomial's cost.
            action = (output - torch.empty_like(output).exponential_().log()).argmax(-1)
            packed = output
        else:
            if noise is None:
                noise = output["sigma"] * torch.randn_like(output["mu"])
            action = output["mu"] + noise
            packed = torch.cat([output["mu"], output["sigma"]], -1)
        return action, packed

    def numpy_acting_applies(self) -> bool:
        """Whether whole rollouts are acted and valued in numpy (``zoo.accel.numpy_acting``): the config's
        ``numpy_acting`` is on and the model is a float32 MLP on the CPU (no encoder) with Discrete or Box actions
        (not MultiDiscrete or MultiBinary); for a model with memory, its numpy acting (``zoo.accel.numpy_memory``).
        Asked at every rollout, so a model moved or cast since construction falls back to torch."""
        weight = self.model.policy_head.weight
        return (bool(self.cfg.get("numpy_acting", True)) and self.model.encoder is None and self.nvec is None
                and weight.device.type == "cpu" and weight.dtype == torch.float32)

    def rollout_actor(self, steps: int, num_envs: int) -> RolloutActor:
        """``zoo.accel.numpy_acting.NumpyRolloutActor`` where ``numpy_acting_applies`` and it samples as this class's
        ``collect`` does (``numpy_rollout_actions``); else the default actor, which calls ``collect`` every step."""
        if self.recurrent:
            raise ConfigError(f"{type(self).__name__} has memory: the collector acts through memory_actor")
        kind = "discrete" if self.discrete else "gaussian"
        if self.sde_noise is not None:  # gSDE acts through collect; new matrices per rollout (sde_sample_freq -1)
            self.sde_noise.start_rollout(self.model.sde_std(), num_envs)
            return super().rollout_actor(steps, num_envs)
        if kind not in self.numpy_rollout_actions or not self.numpy_acting_applies():
            return super().rollout_actor(steps, num_envs)
        to_env = None if self.discrete and self._action_start is None else self._to_env  # None: raw actions as is
        return self._numpy.rollout_actor(steps, num_envs, to_env, log_prob=self.needs_log_prob)

    def log_prob(self, packed: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Log-probability of raw ``action`` under the packed policy output of ``collect`` (any leading shape)."""
        output = self.unpack_policy_output(packed)
        if self.nvec is not None:
            return multi_categorical_log_prob(output, action)
        if self.discrete:
            return categorical_log_prob(output, action)
        return gaussian_log_prob(output["mu"], output["sigma"], action)

    @torch.no_grad()
    def values_of(self, obs: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
        """Critic values of observations with any leading shape ``(..., *obs_shape)``, in batches of ``chunk``."""
        leading = obs.shape[: obs.ndim - len(self.observation_space.shape)]
        flat = obs.reshape(-1, *self.observation_space.shape)
        if flat.shape[0] <= chunk:
            return self.model.value(flat).reshape(leading)
        return torch.cat([self.model.value(part) for part in flat.split(chunk)]).reshape(leading)

    def _rollout_values(self, rollout: Rollout) -> torch.Tensor:
        """``V`` of the rollout's observations and its last ones, ``(T + 1, B)``: in numpy where
        ``numpy_acting_applies`` (on float32 CPU observations), else with ``values_of``."""
        obs = rollout.obs
        if obs.dtype == torch.float32 and obs.device.type == "cpu" and self.numpy_acting_applies():
            return self._numpy.rollout_values(obs, rollout.last_obs)
        return self.values_of(torch.cat([obs, rollout.last_obs.unsqueeze(0)]))

    def unpack_policy_output(self, packed: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """Inverse of the packing in ``collect``: logits (padded ``(..., K, N)`` for MultiDiscrete/MultiBinary), or
        ``{'mu', 'sigma'}``."""
        if self.nvec is not None:
            return multi_categorical_logits(packed, self.nvec)
        if self.discrete:
            return packed
        mu, sigma = packed.chunk(2, dim=-1)
        return {"mu": mu, "sigma": sigma}

    def deterministic_action(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The mode's env actions as a tensor (what ``evaluate`` returns; traceable, for ``zoo export``), among the
        valid actions where ``action_mask`` ``(N, width)`` is given."""
        if self.recurrent:
            raise ConfigError(f"{type(self).__name__} has memory: act with act_with_memory(obs, memory)")
        return self._mode_to_env(self.masked(self.model.policy_output(obs), action_mask))

    def export_module(self) -> torch.nn.Module | None:
        """``ActingGraph(self)``; for a policy with memory ``MemoryActingGraph``: ``(obs, state) -> (actions,
        state_out)``."""
        return MemoryActingGraph(self) if self.recurrent else super().export_module()

    def _mode_to_env(self, output: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        """The env actions of the mode of a policy output: the argmax or the mean, through ``_to_env_tensor``."""
        if not self.discrete:
            return self._to_env_tensor(output["mu"])
        if self.nvec is not None:
            output = multi_categorical_logits(output, self.nvec)
        return self._to_env_tensor(output.argmax(-1))

    def _to_env_tensor(self, raw: torch.Tensor) -> torch.Tensor:
        """``_to_env`` in torch operations (traceable): clipped Gaussian actions, or integer actions in the space's
        shape and dtype plus its ``start``."""
        if not self.discrete:
            return torch.minimum(torch.maximum(raw, self._low.to(raw.device)), self._high.to(raw.device))
        if self.nvec is not None:
            if len(self._action_shape) != 1:  # (..., K) components -> the space's shape (sizes traced, not fixed)
                raw = raw.unflatten(-1, tuple(self._action_shape))
            raw = raw.to(self._action_torch_dtype)
        if self._action_start is not None:
            raw = raw + torch.as_tensor(self._action_start, device=raw.device)
        return raw

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Critic values of a batch of observations (no gradient)."""
        return self.model.value(obs)

    # -- sample processing --------------------------------------------------------------------------------
    def process_rollout(self, rollout: Rollout) -> Rollout:
        """Adds ``value`` and, when ``needs_log_prob``, ``log_prob`` (unless ``collect`` gave them), ``next_value``,
        ``advantage`` (GAE) and ``returns = advantage + value`` to the extras.

        ``next_value[t]`` is the value of the observation after step t: ``value[t + 1]``, or ``V(last_obs)``
        for the last step. With NEXT_STEP autoreset that observation is the final one of an episode that ended
        at t, so a truncated step bootstraps from it, while a terminated step does not bootstrap (``done``).
        Autoreset steps (``valid = False``) end the trace and bootstrap nothing; learning masks them out.
        """
        extras = {}
        value = rollout.extras.get("value")
        if self.recurrent:  # the values the acting loop took with each env's memory, and the last observations'
            value, last = self.process_recurrent(rollout)
            next_value = torch.cat([value[1:], last.unsqueeze(0)])
        elif value is None:  # one batched pass over the rollout and its last observations (weights unchanged since)
            both = self._rollout_values(rollout)
            value = extras["value"] = both[:-1]
            next_value = both[1:]
        else:
            next_value = torch.cat([value[1:], self.values_of(rollout.last_obs).unsqueeze(0)])
        if self.needs_log_prob and "log_prob" not in rollout.extras:
            with torch.no_grad():
                extras["log_prob"] = self.log_prob(rollout.extras["policy_output"], rollout.action)
        done, trace_end = _gae_flags(rollout)
        advantage = gae(gae_data(value, next_value, rollout.reward, done, trace_end), self.cfg.gamma,
                        self.cfg.gae_lambda)
        return rollout.with_extras(**extras, next_value=next_value, advantage=advantage, returns=advantage + value)

    # -- learning helpers ---------------------------------------------------------------------------------
    def learning_rate_at(self, progress: float) -> float:
        """The scheduled learning rate at ``progress`` in [0, 1]: linear to 0 when ``anneal_lr``, else fixed."""
        return max(self.cfg.learning_rate * ((1.0 - progress) if self.cfg.anneal_lr else 1.0), 0.0)

    def update_learning_rate(self, ctx: LearnContext) -> float:
        """Set the optimiser's learning rate to the schedule at ``ctx.progress``; returns it."""
        lr = self.learning_rate_at(ctx.progress)
        self.optimizer.lr = lr
        return lr

    def optimizer_step(self, loss: torch.Tensor, ctx: LearnContext) -> float:
        """Backward, ``ctx.sync_gradients`` (the all-reduce of data-parallel learners), clip, step.

        Returns the gradient norm before clipping. Raises ``NonFiniteError`` before the step, leaving the
        weights as they were, when the loss or the gradient is not finite.
        """
        return self.optimizer.backward_and_step(loss, self.cfg.max_grad_norm, ctx.sync_gradients)

    # -- state --------------------------------------------------------------------------------------------
    def __deepcopy__(self, memo: dict[int, Any]) -> ActorCriticPolicy:
        # A field-by-field deep copy would break the parameters' aliasing of the optimiser's flat buffer (the copy
        # would never learn); build a twin and load the state instead, leaving the global RNG as it was.
        with torch.random.fork_rng(devices=[]):
            twin = type(self)(copy.deepcopy(self.cfg, memo), self.observation_space, self.action_space, self.device,
                              self.acting_only)
        twin.load_state_dict(copy.deepcopy(self.state_dict(), memo))
        return twin

    def actor_state_dict(self) -> dict[str, torch.Tensor]:
        """The actor's weights alone (trunk, policy head, log-std), detached copies."""
        return {name: tensor.detach().clone() for name, tensor in self.model.actor_parameters().items()}

    def load_actor_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Copy actor weights from ``actor_state_dict`` output into this policy's model."""
        own = self.model.actor_parameters()
        if set(own) != set(state):
            raise ValueError(f"actor weights have keys {sorted(state)}, expected {sorted(own)}")
        with torch.no_grad():
            for name, tensor in own.items():
                tensor.copy_(state[name])


# The shared defaults by the name plugins written before ``fields`` existed use ({**common_config, ...}).
ActorCriticPolicy.common_config = dict(ActorCriticPolicy.default_config)
