"""``zoo.load`` / ``zoo eval`` / ``zoo export``: a run directory's policy for acting (``Agent``, ``load_agent``),
read without running any code from it.

A run directory may come from someone else. Loading it reads config.yaml as data (safe YAML) and weights with
``torch.load(weights_only=True)``; it never imports the modules its config names (``import_names``,
``import_paths``) nor an env id's ``module:`` prefix (gymnasium would import that module), and it never unpickles
the env snapshot a checkpoint holds. Plugins the user installed load as always. A run whose policy or env comes
from such a module needs ``trust_imports=True`` (``zoo eval --trust-imports``): then those modules are imported
as in training, so pass it only for run directories you trust.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict

from ..config import load_config_file
from ..config.resolve import resolve_config
from ..envs import EnvSpec, NormalizeObservation
from ..envs.masks import mask_width
from ..errors import ConfigError, RunDirectoryError, ZooError, first_line
from ..policies.base import Policy
from ..policies.build import build_policy
from ..policies.masking import as_mask
from .run_dir import BEST_MODEL_FILE, CHECKPOINT_FILE, CONFIG_FILE, RunDirectory, load_weights_only
from .state_files import check_regular

TRUST_HINT = "if you trust this run directory, pass --trust-imports (zoo.load(..., trust_imports=True))"


def _untrusted_config(run_path: Path, device: str) -> EasyDict:
    """The run's config resolved without importing the code it names; refusals name what it would import."""
    raw = load_config_file(run_path / CONFIG_FILE)
    names = list(raw.get("import_names") or []) if isinstance(raw.get("import_names"), list) else []
    env_id = (raw.get("env") or {}).get("id") if isinstance(raw.get("env"), dict) else None
    if isinstance(env_id, str) and ":" in env_id:
        raise ConfigError(f"the env id '{env_id}' of '{run_path}' names a module ('{env_id.split(':')[0]}') that "
                          f"gymnasium would import: zoo does not run code named by a run directory when it loads "
                          f"one; {TRUST_HINT}")
    try:
        return resolve_config(raw, [("device", device)], trusted=False)
    except ZooError as exc:
        raise _hinted(exc, names) from None


def _hinted(error: ZooError, import_names: list[str]) -> ZooError:
    """``error`` (an unknown policy or env, say), saying why it may be unknown when the run names modules."""
    if not import_names:
        return error
    return ConfigError(f"{first_line(error, 200)}; the run's config names import_names {import_names}, which zoo "
                       f"does not import when it loads a run directory (it could carry code): {TRUST_HINT}")


def load_run(
    run_dir: str | Path, device: str = "cpu", which: str = "last", trust_imports: bool = False
) -> tuple[EasyDict, Any, dict[str, Any] | None]:
    """Config, acting-only policy (weights loaded) and observation-normaliser state of a run directory.

    ``which``: ``last`` (the latest checkpoint) or ``best`` (``best_model.pt``: the best evaluation during
    training). Reads weights-only and imports nothing the run directory names, unless ``trust_imports`` (see the
    module docstring): a run directory from elsewhere cannot run code through it.
    """
    if which not in ("last", "best"):
        raise ZooError(f"which must be 'last' or 'best', got {which!r}")
    run_path = Path(run_dir)
    check_regular(run_path / CONFIG_FILE)  # a FIFO or device there: one line naming it, not "no config.yaml"
    if not (run_path / CONFIG_FILE).is_file():
        raise RunDirectoryError(f"'{run_path}' is not a run directory (no {CONFIG_FILE}): pass a directory under runs/")
    if trust_imports:
        cfg = resolve_config(load_config_file(run_path / CONFIG_FILE), [("device", device)])
    else:
        cfg = _untrusted_config(run_path, device)
    source = BEST_MODEL_FILE if which == "best" else CHECKPOINT_FILE
    if which == "best":
        best = run_path / BEST_MODEL_FILE
        if not best.is_file():
            raise RunDirectoryError(
                f"no {BEST_MODEL_FILE} in '{run_path}': the run has made no evaluation yet (pipeline.eval_every "
                f"is {cfg.pipeline.get('eval_every')}): use --which last"
            )
        state = load_weights_only(best)
    else:
        state = RunDirectory(run_path).load_checkpoint(separate=False)
    try:
        observation_space, action_space = EnvSpec.from_config(cfg).spaces()
    except ZooError as exc:
        raise (exc if trust_imports else _hinted(exc, list(cfg.import_names or []))) from None
    policy = build_policy(cfg, observation_space, action_space, device, acting_only=True)
    try:
        policy.load_state_dict(state["policy"])
    except (KeyError, ValueError, RuntimeError, TypeError) as exc:
        detail = first_line(exc, 200)
        raise RunDirectoryError(
            f"the weights in '{run_path / source}' do not fit the run's config.yaml ({detail}): "
            f"was config.yaml edited? restore it or train again"
        ) from None
    return cfg, policy, state.get("obs_normalizer")


class Agent:
    """A run's policy (acting only) and its saved observation normalisation.

    Examples:
        >>> agent = zoo.load("runs/ppo_cartpole")
        >>> env = gymnasium.make("CartPole-v1")
        >>> obs, _ = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, _ = env.step(agent.predict(obs))
    """

    def __init__(self, policy: Policy, normalize: Callable[[Any], np.ndarray] | None, config: Any = None) -> None:
        self.policy = policy
        self.normalize = normalize
        self.config = config

    @functools.cached_property
    def native_observation_space(self) -> gym.Space | None:
        """The env's own observation space where zoo flattened it (Dict, Tuple, Discrete...), else None.

        Read from one env built from the run's config the first time it is needed: only ``predict`` on
        observations that are not already an array asks for it.
        """
        return None if self.config is None else EnvSpec.from_config(self.config).native_observation_space()

    @property
    def observation_space(self) -> gym.Space:
        """The env's observation space, as the run was trained on it."""
        return self.policy.observation_space

    @property
    def action_space(self) -> gym.Space:
        """The env's action space."""
        return self.policy.action_space

    def predict(self, obs: Any, deterministic: bool = True, *, state: Any = None,
                episode_start: Any = None, action_mask: Any = None) -> Any:
        """Action(s) for one observation or a batch ``(N, *obs_shape)``, as numpy.

        The run's observation normalisation (frozen training statistics) is applied first.
        ``deterministic=False`` samples from the policy instead of taking its mode. Where the env's observations
        are not a Box (Dict, Tuple, Discrete...), pass them as the env gives them (one, or a list of them): they
        are flattened as in training.

        A policy with memory (``policy.recurrent``) returns ``(action, state)``: ``state`` is its memory after this
        step, a float32 array ``(*memory_shape)`` for one observation, ``(N, *memory_shape)`` for a batch; pass it
        back with the next observation (None: episodes starting). ``episode_start`` (a bool, or ``(N,)`` bools) marks
        observations that begin an episode: their memory is zeroed first, as in training (after gymnasium's reset,
        or a vector env's autoreset). A feed-forward policy ignores both and returns the action alone.

        ``action_mask`` (bools ``(width,)`` for one observation, ``(N, width)`` for a batch; True: valid; ``width``
        is ``n`` for Discrete(n), ``sum(nvec)`` for MultiDiscrete): the action is chosen among the valid ones, as in
        training on an env that gives masks (``info["action_mask"]`` or ``env.action_masks()``).
        """
        native = None if isinstance(obs, np.ndarray) and obs.dtype != object else self.native_observation_space
        if native is not None:
            if isinstance(obs, list):
                obs = np.stack([gym.spaces.flatten(native, one) for one in obs])
            else:
                obs = gym.spaces.flatten(native, obs)
        array = np.asarray(obs, dtype=np.float32)
        shape = tuple(self.observation_space.shape)
        single = array.shape == shape
        if single:
            array = array[None]
        elif array.shape[1:] != shape:
            raise ValueError(f"observation has shape {array.shape}, expected {shape} or (N, *{shape})")
        if self.normalize is not None:
            array = self.normalize(array)
        tensor = torch.as_tensor(array, device=self.policy.device)
        masked = {}
        if action_mask is not None:
            if not getattr(self.policy, "takes_action_mask", False):
                raise ValueError(f"{type(self.policy).__name__} takes no action_mask")
            width = mask_width(self.policy.action_space)
            masked["action_mask"] = as_mask(action_mask, len(array), width, self.policy.device)
        if getattr(self.policy, "recurrent", False):
            memory = None
            if state is not None:
                memory = torch.as_tensor(np.asarray(state, dtype=np.float32), device=self.policy.device)
                memory = memory[None] if single else memory
                expected = tuple(self.policy.initial_memory(len(array)).shape)
                if tuple(memory.shape) != expected:
                    wanted = expected[1:] if single else expected
                    raise ValueError(f"state has shape {tuple(np.shape(state))}, expected {wanted} (the state this "
                                     f"predict returned)")
            starts = None if episode_start is None else np.asarray(episode_start, dtype=bool).reshape(len(array))
            action, memory = self.policy.act_with_memory(tensor, memory, starts, deterministic, **masked)
            memory_np = memory.cpu().numpy()
            return (action[0], memory_np[0]) if single else (action, memory_np)
        action = (self.policy.evaluate(tensor, **masked) if deterministic
                  else self.policy.collect(tensor, **masked).action)
        return action[0] if single else action


def load_agent(run_dir: str | Path, device: str = "cpu", which: str = "last", trust_imports: bool = False) -> Agent:
    """Load a run directory's weights (weights-only: no code from the files runs) as an ``Agent`` (``zoo.load``).

    ``which``: ``last`` (the latest checkpoint) or ``best`` (the best evaluation during training, best_model.pt).
    ``trust_imports``: import the modules the run's config names (see the module docstring).
    """
    return agent_of(*load_run(run_dir, device, which, trust_imports))


def agent_of(cfg: EasyDict, policy: Policy, obs_state: dict[str, Any] | None) -> Agent:
    """The ``Agent`` of what ``load_run`` returned: the policy behind the run's frozen observation normalisation."""
    normalize = None if obs_state is None else NormalizeObservation.frozen(obs_state)
    return Agent(policy, normalize, cfg)
