"""``zoo export RUN --format onnx|torchscript``: a run's deterministic policy as one file, checked against zoo.load.

The file is built in memory, checked (``--check N``: N observations from the run's env, the exported actions
against ``zoo.load(RUN).predict``: integer actions identical, continuous within ``CHECK_TOLERANCE``, for the whole
batch and for one observation alone), and only then written, atomically: a failed check or a refused write leaves
no file. A run whose env gave action masks exports with the mask as an input, and its check feeds each observation
a mask and compares with ``predict(obs, action_mask=mask)`` (``zoo.export.masks``).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from .. import __version__
from ..envs import EnvSpec
from ..envs.masks import mask_width
from ..errors import ConfigError, ZooError, first_line
from ..run.load import Agent, agent_of, load_run
from ..run.run_dir import CONFIG_FILE, lock_owner
from ..run.state_files import atomic_write_bytes
from . import CHECK_RELATIVE, CHECK_TOLERANCE, DEFAULT_CHECK, FORMATS, SUFFIXES
from .formats import OPSET, ExportedRunner, graph_bytes
from .graph import ExportGraph, FrozenNormalization, GraphInput, ObservationInputs, graph_arrays, graph_inputs
from .masks import check_masks, invalid_rows, sample_with_masks, takes_masks


class ExportCheckError(ZooError):
    """The exported file's actions differ from ``zoo.load(...).predict``'s (nothing was written)."""


@dataclass
class ExportResult:
    """What ``export_run`` wrote and measured: the file, its inputs, and the check (observations compared, the
    largest absolute difference of the actions; ``checked`` 0 when skipped)."""

    path: Path
    fmt: str
    inputs: list[GraphInput]
    action_dtype: str
    checked: int
    max_difference: float
    note: str | None = None
    state_shape: tuple[int, ...] | None = None  # a recurrent policy's state (one observation's), input and output
    mask_width: int | None = None  # the width of the action_mask input, where the run's env gave masks


def sample_observations(spec: EnvSpec, count: int, seed: int, native: gym.Space | None = None) -> list[Any]:
    """``count`` observations (as the env gives them) from episodes of random actions, reset with seeds from
    ``seed`` on (evaluation and training use other seeds). ``native``: the env's own observation space where zoo
    flattens it (``spec.native_observation_space()``, asked here when not given)."""
    if native is None:
        native = spec.native_observation_space()
    env = spec.make()
    try:
        env.action_space.seed(seed)
        observations: list[Any] = []
        obs, _ = env.reset(seed=seed)
        episode = 0
        while len(observations) < count:
            observations.append(obs)
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                episode += 1
                obs, _ = env.reset(seed=seed + episode)
        return [gym.spaces.unflatten(native, o) for o in observations] if native is not None else observations
    finally:
        env.close()


def _default_target(run_path: Path, fmt: str) -> Path:
    """``RUN/export/policy.<suffix>``, refused when ``RUN/export`` would lead out of the run directory (a symbolic
    link, or not a folder): the default never writes anywhere but inside the run."""
    folder = run_path / "export"
    if folder.is_symlink():
        raise ZooError(f"'{folder}' is a symbolic link (to '{os.readlink(folder)}'): zoo export writes only inside "
                       f"the run directory unless told where: remove the link, or pass --out FILE")
    if folder.exists() and not folder.is_dir():
        raise ZooError(f"'{folder}' is not a folder: move it away, or pass --out FILE")
    return folder / f"policy{SUFFIXES[fmt]}"


def _training_note(run_path: Path, while_training: bool) -> str | None:
    """None for a run no process holds; for a run that is training, a refusal (ZooError) or, with
    ``while_training``, the note that says which checkpoint was exported."""
    owner = lock_owner(run_path)
    if owner is None:
        return None
    if not while_training:
        raise ZooError(f"run '{run_path}' is training (zoo process pid {owner} holds it): its checkpoint is "
                       f"mid-training; wait for the run to end, or pass --while-training to export its latest "
                       f"checkpoint anyway")
    return f"run '{run_path}' is training (pid {owner}): exported its latest checkpoint, not a finished policy"


def export_run(run_dir: str | Path, fmt: str, out: str | Path | None = None, which: str = "last",
               check: int = DEFAULT_CHECK, trust_imports: bool = False, seed: int = 1_000_003,
               while_training: bool = False) -> ExportResult:
    """Export a run directory's deterministic policy (see the module docstring); raises ZooError on bad input or a
    failed check. ``out`` defaults to ``RUN/export/policy.onnx`` (``.pt`` for TorchScript), never through a
    symbolic link out of the run. A run that another process is training is refused unless ``while_training``
    (then ``ExportResult.note`` says so)."""
    if fmt not in FORMATS:
        raise ZooError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if check < 0:
        raise ZooError(f"--check must be 0 (no check) or a number of observations, got {check}")
    run_path = Path(run_dir)
    target = Path(out) if out is not None else _default_target(run_path, fmt)
    if target.is_dir():
        raise ZooError(f"--out '{target}' is a directory: name a file, e.g. {target / ('policy' + SUFFIXES[fmt])}")
    note = _training_note(run_path, while_training) if (run_path / CONFIG_FILE).is_file() else None
    cfg, policy, obs_state = load_run(run_path, "cpu", which, trust_imports)
    acting = policy.export_module()
    if acting is None:
        cls = type(policy)
        raise ConfigError(f"policy '{cfg.policy.type}' ({cls.__module__}.{cls.__qualname__}) cannot be exported: it "
                          f"defines neither deterministic_action nor export_module (see docs/plugins.md, Export)")
    spec = EnvSpec.from_config(cfg)
    native = spec.native_observation_space()
    try:
        inputs = graph_inputs(native, policy.observation_space)
    except ValueError as exc:
        raise ConfigError(f"cannot export '{run_path}': {exc}") from None
    normalization = None if obs_state is None else FrozenNormalization(obs_state)
    recurrent = bool(getattr(policy, "recurrent", False))
    sampled = sample_with_masks(spec, max(check, 2), seed, native) if takes_masks(spec, policy) else None
    if sampled is not None and not getattr(acting, "takes_action_mask", False):
        raise ConfigError(f"cannot export '{run_path}': its env gives action masks, but policy '{cfg.policy.type}' "
                          f"exports no mask input: give deterministic_action an action_mask=None keyword (see "
                          f"docs/plugins.md, Export)")
    observations, masks = sampled or (sample_observations(spec, max(check, 2), seed, native), None)
    graph = ExportGraph(ObservationInputs(inputs, tuple(policy.observation_space.shape)), normalization, acting,
                        state=recurrent, mask=masks is not None)
    arrays = graph_arrays(inputs, observations)
    names = [spec_.name for spec_ in inputs]
    example = [torch.from_numpy(a[:2]) for a in arrays]
    outputs: tuple[str, ...] = ("action",)
    state_shape = None
    if recurrent:  # traced with a state that is not zeros: the graph must read it
        state_shape = tuple(policy.initial_memory(1).shape[1:])
        example.append(torch.from_numpy(np.random.default_rng(seed).normal(0.0, 0.1, (2, *state_shape))
                                        .astype(np.float32)))
        names, outputs = [*names, "state"], ("action", "state_out")
    if masks is not None:  # the env's masks and one-valid-action ones (the check's: zoo.export.masks)
        masks = check_masks(masks, policy.action_space, seed)
        example.append(torch.from_numpy(masks[:2]))
        names = [*names, "action_mask"]
    with torch.no_grad():
        expected_action = graph(*example)
    if recurrent:
        expected_action = expected_action[0]
    metadata = {
        "zoo_version": __version__, "run": str(run_path), "which": which, "policy": cfg.policy.type,
        "env_id": spec.id, "observation_normalization": normalization is not None,
        "inputs": [{"name": s.name, "dtype": s.dtype.name, "shape": ["N", *s.shape]} for s in inputs],
        "action": {"dtype": str(expected_action.dtype).replace("torch.", ""),
                   "shape": ["N", *policy.action_space.shape], "space": str(policy.action_space)},
    }
    if state_shape is not None:
        metadata["state"] = {"input": "state", "output": "state_out", "dtype": "float32", "shape": ["N", *state_shape],
                             "start": "zeros (an episode starting); pass state_out back with the next observation"}
    if masks is not None:
        metadata["action_mask"] = {"input": "action_mask", "dtype": "bool", "shape": ["N", masks.shape[1]],
                                   "meaning": "True where the action is valid (MultiDiscrete: the components' side "
                                              "by side); the action is chosen among the valid ones"}
    try:
        data = graph_bytes(fmt, graph, example, names, metadata, outputs)
    except ZooError:
        raise
    except Exception as exc:  # a plugin's module that does not trace
        raise ConfigError(f"cannot trace policy '{cfg.policy.type}' for {fmt} ({first_line(exc, 200)}): what "
                          f"deterministic_action/export_module run must be torch operations on tensors (see "
                          f"docs/plugins.md, Export)") from None
    difference = 0.0
    if check:
        agent = agent_of(cfg, policy, obs_state)
        runner = ExportedRunner(fmt, data, names, outputs)
        difference = (_check_with_state(runner, agent, observations[:check], arrays, check, state_shape, masks)
                      if state_shape is not None else _check(runner, agent, observations[:check], arrays, check, masks))
    try:
        atomic_write_bytes(target, data)
    except OSError as exc:
        raise ZooError(f"cannot write '{target}' ({exc.strerror or first_line(exc)}): choose another --out") from None
    return ExportResult(target, fmt, inputs, metadata["action"]["dtype"], check, difference, note, state_shape,
                        None if masks is None else mask_width(policy.action_space))


def _masked(masks: np.ndarray | None, rows: Any) -> dict[str, np.ndarray]:
    """``predict``'s ``action_mask`` for ``rows`` of the check's masks; none without masks."""
    return {} if masks is None else {"action_mask": masks[rows]}


def _mask_hint(got: np.ndarray, masks: np.ndarray | None, agent: Agent) -> str:
    """How many exported actions the masks forbid, where some do: a graph that does not read its mask."""
    if masks is None or got.shape[:1] != masks.shape[:1]:
        return ""
    invalid = int(invalid_rows(got, masks, agent.action_space).sum())
    return (f", {invalid} of the {len(got)} exported actions invalid under their action_mask (is the mask input "
            f"ignored?)" if invalid else "")


def _check(runner: ExportedRunner, agent: Agent, observations: list[Any], arrays: list[np.ndarray],
           count: int, masks: np.ndarray | None = None) -> float:
    """The largest difference between the exported actions and ``agent.predict``'s, for the batch and for the first
    observation alone (each with its row of ``masks``, the ``action_mask`` input, where given); raises
    ExportCheckError beyond the tolerance (``CHECK_TOLERANCE + CHECK_RELATIVE * |action|`` per element; integer
    actions: any difference)."""
    batch = [a[:count] for a in arrays]
    first = observations[0]
    want = agent.predict(np.stack(observations) if isinstance(first, np.ndarray) else observations,
                         **_masked(masks, slice(count)))
    want_one = agent.predict(first, **_masked(masks, 0))
    mask_inputs = ([], []) if masks is None else ([masks[:count]], [masks[:1]])
    got, got_one = runner([*batch, *mask_inputs[0]]), runner([*[a[:1] for a in arrays], *mask_inputs[1]])[0]
    if got.shape != want.shape or got_one.shape != np.shape(want_one):
        raise ExportCheckError(f"check failed: the exported actions have shape {got.shape} for {count} observations "
                               f"(zoo.load: {want.shape}); nothing written")
    integer = np.issubdtype(want.dtype, np.integer)
    pairs = [(got.astype(np.float64), want.astype(np.float64)),
             (got_one.astype(np.float64)[None], np.asarray(want_one, np.float64)[None])]
    differences = [np.abs(exported - loaded).reshape(len(loaded), -1) for exported, loaded in pairs]
    difference = max(float(np.max(d)) for d in differences)
    beyond = [d > (0.0 if integer else CHECK_TOLERANCE + CHECK_RELATIVE * np.abs(loaded).reshape(len(loaded), -1))
              for d, (_, loaded) in zip(differences, pairs)]
    if any(b.any() for b in beyond):
        wrong = int(np.sum(np.any(beyond[0], axis=1))) or 1  # the one observation alone, when the batch agreed
        limit = "identical" if integer else f"{CHECK_TOLERANCE:g} + {CHECK_RELATIVE:g} x |action|"
        hint = _mask_hint(got, None if masks is None else masks[:count], agent)
        raise ExportCheckError(f"check failed: the exported actions differ from zoo.load(...).predict for {wrong} of "
                               f"{count} observations{hint} (max |difference| {difference:.3g}, limit "
                               f"{limit}); nothing written")
    return difference


STATE_STEPS = 4  # steps of the check with state: each batch's state carried from the step before


def _check_with_state(runner: ExportedRunner, agent: Agent, observations: list[Any], arrays: list[np.ndarray],
                      count: int, state_shape: tuple[int, ...], masks: np.ndarray | None = None) -> float:
    """``_check`` for a recurrent policy: ``STATE_STEPS`` steps of the ``count`` observations (rotated by one at
    each step, with their ``masks`` where given), the exported file and ``agent.predict`` each carrying its own
    state from zeros; the actions and the states must agree at every step (a state dropped or shifted on either
    side fails it)."""
    exported = np.zeros((count, *state_shape), np.float32)
    loaded = None
    worst = 0.0
    for step in range(STATE_STEPS):
        rows = [np.roll(a[:count], step, axis=0) for a in arrays]
        shown = observations[-step:] + observations[:-step] if step else observations
        step_masks = None if masks is None else np.roll(masks[:count], step, axis=0)
        want, loaded = agent.predict(np.stack(shown) if isinstance(shown[0], np.ndarray) else shown, state=loaded,
                                     **_masked(step_masks, slice(None)))
        got, exported = runner([*rows, exported, *([] if step_masks is None else [step_masks])])
        for name, mine, theirs, integer in (("actions", got, want, np.issubdtype(want.dtype, np.integer)),
                                            ("states", exported, loaded, False)):
            if mine.shape != theirs.shape:
                raise ExportCheckError(f"check failed: the exported {name} have shape {mine.shape} at step "
                                       f"{step + 1} (zoo.load: {theirs.shape}); nothing written")
            difference = np.abs(mine.astype(np.float64) - theirs.astype(np.float64))
            limit = 0.0 if integer else CHECK_TOLERANCE + CHECK_RELATIVE * np.abs(theirs.astype(np.float64))
            if (difference > limit).any():
                hint = _mask_hint(got, step_masks, agent) if name == "actions" else ""
                raise ExportCheckError(f"check failed: the exported {name} differ from zoo.load(...).predict's at "
                                       f"step {step + 1} of {STATE_STEPS} with state carried{hint} (max |difference| "
                                       f"{float(difference.max()):.3g}); nothing written")
            worst = max(worst, float(difference.max()))
    return worst


def run_command(args: argparse.Namespace) -> int:
    """Run ``zoo export`` with parsed ``args``; prints what it wrote and the check."""
    result = export_run(args.run_dir, args.format, args.out, args.which, args.check, args.trust_imports,
                        while_training=args.while_training)
    shown = [f"{s.name} {s.dtype.name} {json.dumps(['N', *s.shape])}" for s in result.inputs]
    state = None if result.state_shape is None else json.dumps(["N", *result.state_shape])
    if state is not None:
        shown.append(f"state float32 {state}")
    if result.mask_width is not None:
        shown.append(f"action_mask bool {json.dumps(['N', result.mask_width])}")
    kind = f"ONNX opset {OPSET}" if result.fmt == "onnx" else "TorchScript"
    if state is not None:
        print(f"wrote {result.path} ({kind}; inputs: {', '.join(shown)}; outputs: action {result.action_dtype}, "
              f"state_out float32 {state})")
    else:
        print(f"wrote {result.path} ({kind}; inputs: {', '.join(shown)}; output: action {result.action_dtype})")
    if result.checked:
        agree = ("identical" if result.action_dtype.startswith(("int", "uint")) else
                 f"max |difference| {result.max_difference:.2g} (limit {CHECK_TOLERANCE:g} + {CHECK_RELATIVE:g} x "
                 "|action|)")
        how = (f"{result.checked} observations x {STATE_STEPS} steps, each side carrying its state: actions {agree}, "
               f"states within {CHECK_TOLERANCE:g} + {CHECK_RELATIVE:g} x |state|" if result.state_shape is not None
               else f"{result.checked} observations (a batch, and one alone): actions {agree}")
        if result.mask_width is not None:
            how += ", each observation with an action mask (the env's, or one valid action)"
        print(f"check: {how} against zoo.load('{args.run_dir}').predict")
    if result.note is not None:
        print(f"note: {result.note}")
    return 0
