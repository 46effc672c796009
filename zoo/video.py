"""``zoo eval RUN --video DIR``: record evaluation episodes of a trained policy as MP4 or GIF files.

The env is built with ``render_mode="rgb_array"``; each episode's frames (the first observation's and one per
step) are written with imageio (the ``video`` extra: ``pip install 'zoo-rl[video]'``; MP4 needs imageio-ffmpeg,
GIF only imageio). Files are written under a temporary name and renamed, so a stopped recording leaves no
half-written video.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from .envs import EnvSpec
from .envs.masks import EnvMasks
from .errors import ConfigError, ZooError

FORMATS = ("mp4", "gif")


def _writer(fmt: str) -> Any:
    try:
        import imageio.v2 as imageio
    except ImportError:
        raise ZooError("--video needs imageio: pip install 'zoo-rl[video]'") from None
    if fmt == "mp4":
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError:
            raise ZooError("--video-format mp4 needs imageio-ffmpeg: pip install 'zoo-rl[video]', or use "
                           "--video-format gif") from None
    return imageio


def record_episodes(
    policy: Any, spec: EnvSpec, directory: str | Path, episodes: int, seed: int, *,
    normalize_obs: Callable[[Any], np.ndarray] | None = None, deterministic: bool = True, fmt: str = "mp4",
    fps: int = 30, step_limit: int = 100_000,
) -> list[tuple[Path, float]]:
    """Play ``episodes`` episodes (episode ``k`` seeded ``seed + k``) and write ``episode_<k>.<fmt>`` files into
    ``directory``; returns each file with its episode return."""
    if fmt not in FORMATS:
        raise ZooError(f"--video-format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    imageio = _writer(fmt)
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    env_id = spec.id
    try:
        env = spec.make(render_mode="rgb_array")
    except ConfigError as exc:  # e.g. a factory without a render_mode argument
        raise ConfigError(f"env '{env_id}' cannot render frames (render_mode='rgb_array'): {exc}") from None
    written = []
    masks = EnvMasks(env, spec.action_mask, env_id)  # the valid actions where the env gives masks, as in training
    try:
        for episode in range(episodes):
            obs, info = env.reset(seed=seed + episode)
            mask = masks.read(info, reset=True)
            frames = [_frame(env, env_id)]
            total, steps, done = 0.0, 0, False
            memory = None  # a recurrent policy's, from the episode's start
            while not done:
                if steps >= step_limit:
                    raise ZooError(f"--video: an episode of '{env_id}' did not end within {step_limit} steps: "
                                   f"set env.max_episode_steps or --step-limit")
                array = np.asarray(obs, dtype=np.float32)[None]
                if normalize_obs is not None:
                    array = normalize_obs(array)
                tensor = torch.as_tensor(np.asarray(array, dtype=np.float32), device=policy.device)
                masked = {} if mask is None else {"action_mask": torch.as_tensor(mask[None], device=policy.device)}
                if getattr(policy, "recurrent", False):
                    action, memory = policy.act_with_memory(tensor, memory, None, deterministic, **masked)
                elif deterministic:
                    action = policy.evaluate(tensor, **masked)
                else:
                    action = policy.collect(tensor, **masked).action
                obs, reward, terminated, truncated, info = env.step(action[0])
                total += float(reward)
                steps += 1
                done = bool(terminated or truncated)
                mask = masks.read(info, final=done)
                frames.append(_frame(env, env_id))
            path = folder / f"episode_{episode}.{fmt}"
            tmp = folder / f".episode_{episode}.tmp.{fmt}"
            try:
                if fmt == "gif":
                    imageio.mimsave(tmp, frames, duration=1000.0 / fps, loop=0)
                else:
                    imageio.mimsave(tmp, frames, fps=fps, macro_block_size=1)
                tmp.replace(path)
            finally:
                tmp.unlink(missing_ok=True)
            written.append((path, total))
    finally:
        env.close()
    return written


def _frame(env: gym.Env, env_id: str) -> np.ndarray:
    try:
        frame = env.render()
    except gym.error.DependencyNotInstalled as exc:
        raise ZooError(f"rendering '{env_id}' needs a missing package: {str(exc).strip().splitlines()[0]}") from None
    if not isinstance(frame, np.ndarray) or frame.ndim != 3:
        raise ZooError(f"env '{env_id}' rendered {type(frame).__name__}, not an RGB image: it needs "
                       f"render_mode='rgb_array' support for --video")
    return frame.astype(np.uint8, copy=False)
