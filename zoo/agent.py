"""``zoo.load(run_dir)``: a trained policy for your own loop, with the run's observation normalisation applied."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from .policies.base import Policy


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
        from .envs import EnvSpec

        return None if self.config is None else EnvSpec.from_config(self.config).native_observation_space()

    @property
    def observation_space(self) -> gym.Space:
        """The env's observation space, as the run was trained on it."""
        return self.policy.observation_space

    @property
    def action_space(self) -> gym.Space:
        """The env's action space."""
        return self.policy.action_space

    def predict(self, obs: Any, deterministic: bool = True) -> np.ndarray:
        """Action(s) for one observation or a batch ``(N, *obs_shape)``, as numpy.

        The run's observation normalisation (frozen training statistics) is applied first.
        ``deterministic=False`` samples from the policy instead of taking its mode. Where the env's observations
        are not a Box (Dict, Tuple, Discrete...), pass them as the env gives them (one, or a list of them): they
        are flattened as in training.
        """
        native = None if isinstance(obs, np.ndarray) and obs.dtype != object else self.native_observation_space
        if native is not None:
            if isinstance(obs, list):
                return self.predict(np.stack([gym.spaces.flatten(native, one) for one in obs]), deterministic)
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
        action = self.policy.evaluate(tensor) if deterministic else self.policy.collect(tensor).action
        return action[0] if single else action


def load(run_dir: str | Path, device: str = "cpu", which: str = "last", trust_imports: bool = False) -> Agent:
    """Load a run directory's weights (weights-only: no code from the files runs) as an ``Agent``.

    ``which``: ``last`` (the latest checkpoint) or ``best`` (the best evaluation during training, best_model.pt).
    ``trust_imports``: import the modules the run's config names (see ``zoo.run.load``).
    """
    from .envs import NormalizeObservation
    from .run import load_run

    cfg, policy, obs_state = load_run(run_dir, device, which, trust_imports)
    normalize = None if obs_state is None else NormalizeObservation.frozen(obs_state)
    return Agent(policy, normalize, cfg)
