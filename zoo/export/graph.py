"""The exported graph: raw env observations in, the env actions ``zoo.load(run).predict(obs)`` returns out.

Three stages, each a module, composed by ``ExportGraph``:

1. ``ObservationInputs``: the graph's inputs and zoo's flattening. A Box observation is one input, ``obs``: float32
   ``(N, *shape)``, or uint8 for uint8 (image) spaces. Dict and Tuple observations are one input per part, named by
   its path (``cue``, ``pos.x``, ``0``), flattened and concatenated inside the graph in gymnasium's order
   (``gymnasium.spaces.flatten``); a Discrete (alone or as a part) is an int64 index ``(N,)`` made one-hot in the
   graph (its ``start`` subtracted), a MultiDiscrete int64 ``(N, *shape)`` (one-hot per component), a MultiBinary
   int8 ``(N, *shape)``. The batch dimension ``N`` is dynamic.
2. ``FrozenNormalization``: the run's saved observation normalisation, ``clip((x - mean) / sqrt(var + eps))`` in
   float64 as zoo applies it, then float32 (absent when the run did not normalise observations).
3. The policy's ``export_module()`` (see ``zoo.policies.base``): deterministic env actions, ``start`` offsets
   added and Box actions clipped or squashed into their bounds.

After the observations' inputs come a recurrent policy's ``state`` (float32 ``(N, *state_shape)``; a second output,
``state_out``) and, for a run whose env gave action masks, ``action_mask`` (bool ``(N, width)``, True: valid; see
``zoo.export.masks``), which the module takes as ``action_mask=``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ..rl_utils import RunningMeanStd


@dataclass(frozen=True)
class GraphInput:
    """One input of the exported graph: its name, numpy dtype and shape without the batch dimension, and the
    gymnasium space of the observation part it takes."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    space: gym.Space


def graph_inputs(native: gym.Space | None, flat: gym.Space) -> list[GraphInput]:
    """The inputs for observations of ``native`` (the env's own space where zoo flattens it) or, where ``native``
    is None, of the Box ``flat``. Raises ValueError for a part zoo does not flatten."""
    if native is None:
        return [_leaf("obs", flat)]
    if isinstance(native, (gym.spaces.Dict, gym.spaces.Tuple)):
        return _parts(native, "")
    return [_leaf("obs", native)]


def _parts(space: gym.Space, prefix: str) -> list[GraphInput]:
    items = space.spaces.items() if isinstance(space, gym.spaces.Dict) else enumerate(space.spaces)
    found: list[GraphInput] = []
    for key, part in items:
        name = f"{prefix}{key}"
        if isinstance(part, (gym.spaces.Dict, gym.spaces.Tuple)):
            found.extend(_parts(part, f"{name}."))
        else:
            found.append(_leaf(name, part))
    return found


def _leaf(name: str, space: gym.Space) -> GraphInput:
    if isinstance(space, gym.spaces.Box):
        dtype = np.dtype(np.uint8) if space.dtype == np.uint8 else np.dtype(np.float32)
        return GraphInput(name, dtype, tuple(space.shape), space)
    if isinstance(space, gym.spaces.Discrete):
        return GraphInput(name, np.dtype(np.int64), (), space)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return GraphInput(name, np.dtype(np.int64), tuple(space.shape), space)
    if isinstance(space, gym.spaces.MultiBinary):
        return GraphInput(name, np.dtype(np.int8), tuple(space.shape), space)
    raise ValueError(f"observation part '{name}' is a {type(space).__name__}, which the exported graph cannot take")


def graph_arrays(inputs: list[GraphInput], observations: list[Any]) -> list[np.ndarray]:
    """The graph's input arrays for a list of env observations (as the env gives them), in ``inputs``' order."""
    if len(inputs) == 1 and inputs[0].name == "obs":
        return [np.stack([np.asarray(o) for o in observations]).astype(inputs[0].dtype)]
    arrays = []
    for spec in inputs:
        parts = [_pick(o, spec.name) for o in observations]
        arrays.append(np.stack([np.asarray(p) for p in parts]).astype(spec.dtype).reshape(len(parts), *spec.shape))
    return arrays


def _pick(observation: Any, path: str) -> Any:
    value = observation
    for key in path.split("."):
        value = value[int(key)] if isinstance(value, tuple) else value[key]
    return value


class ObservationInputs(nn.Module):
    """The graph's inputs -> zoo's flat float32 observation ``(N, *flat_shape)`` (see the module docstring)."""

    def __init__(self, inputs: list[GraphInput], flat_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.inputs = inputs
        self.flat_shape = flat_shape
        self.single_box = len(inputs) == 1 and isinstance(inputs[0].space, gym.spaces.Box)
        for index, spec in enumerate(inputs):
            if isinstance(spec.space, gym.spaces.Discrete):
                self.register_buffer(f"choices_{index}", torch.arange(int(spec.space.n), dtype=torch.int64)
                                     + int(spec.space.start), persistent=False)
            elif isinstance(spec.space, gym.spaces.MultiDiscrete):
                nvec = np.asarray(spec.space.nvec).reshape(-1)
                start = np.broadcast_to(np.asarray(spec.space.start), spec.space.shape).reshape(-1)
                width = int(nvec.max())
                # (components, width) values; a position beyond a component's size never matches (-1 - start).
                table = np.full((len(nvec), width), np.iinfo(np.int64).min, dtype=np.int64)
                for k, (n, s) in enumerate(zip(nvec, start)):
                    table[k, :n] = np.arange(n) + s
                keep = (np.arange(width)[None, :] < nvec[:, None]).reshape(-1)
                self.register_buffer(f"choices_{index}", torch.from_numpy(table), persistent=False)
                self.register_buffer(f"keep_{index}", torch.from_numpy(np.flatnonzero(keep)), persistent=False)

    def forward(self, *arrays: torch.Tensor) -> torch.Tensor:
        if self.single_box:
            return arrays[0].float().reshape(-1, *self.flat_shape)
        pieces = []
        for index, (spec, array) in enumerate(zip(self.inputs, arrays)):
            if isinstance(spec.space, gym.spaces.Discrete):
                pieces.append((array.reshape(-1, 1) == getattr(self, f"choices_{index}")).float())
            elif isinstance(spec.space, gym.spaces.MultiDiscrete):
                table = getattr(self, f"choices_{index}")
                hot = (array.reshape(-1, table.shape[0], 1) == table).float().reshape(-1, table.numel())
                pieces.append(hot.index_select(1, getattr(self, f"keep_{index}")))
            else:
                pieces.append(array.float().reshape(array.shape[0], -1))
        return torch.cat(pieces, dim=1).reshape(-1, *self.flat_shape)


class FrozenNormalization(nn.Module):
    """A run's saved observation normalisation (``NormalizeObservation.state_dict()``), in float64 as zoo applies
    it: ``clip((x - mean) / sqrt(var + epsilon), -clip, clip)``, returned as float32."""

    def __init__(self, state: dict[str, Any]) -> None:
        super().__init__()
        rms = RunningMeanStd(shape=tuple(state["obs_rms"]["shape"]))
        rms.load_state_dict(state["obs_rms"])
        epsilon = float(state.get("epsilon", 1e-8))  # the defaults of NormalizeObservation.frozen
        self.register_buffer("mean", torch.from_numpy(np.array(rms.mean, dtype=np.float64)))
        self.register_buffer("std", torch.from_numpy(np.sqrt(np.array(rms.var, dtype=np.float64) + epsilon)))
        self.clip = float(state.get("clip", 10.0))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return ((obs.double() - self.mean) / self.std).clamp(-self.clip, self.clip).float()


class ExportGraph(nn.Module):
    """Inputs -> flat float32 observations -> (normalisation) -> the policy's deterministic env actions. With
    ``state`` (a recurrent policy's) an input after the observations' is the state and the outputs are the actions
    and the new state; with ``mask`` the last input is the action mask, passed on as ``action_mask=``."""

    def __init__(self, inputs: ObservationInputs, normalization: FrozenNormalization | None, acting: nn.Module,
                 state: bool = False, mask: bool = False) -> None:
        super().__init__()
        self.observations = inputs
        self.normalization = normalization
        self.acting = acting
        self.state = state
        self.mask = mask

    def forward(self, *arrays: torch.Tensor) -> Any:
        masked = {}
        if self.mask:
            *arrays, mask = arrays
            masked["action_mask"] = mask
        if self.state:
            *arrays, state = arrays
        obs = self.observations(*arrays)
        if self.normalization is not None:
            obs = self.normalization(obs)
        return self.acting(obs, state, **masked) if self.state else self.acting(obs, **masked)
