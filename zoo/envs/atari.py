"""Atari 2600 games (the Arcade Learning Environment) as the zoo env ``"atari"``.

Config: ``env.id = "atari"`` and ``env.kwargs = {"game": "Breakout"}``. The env is gymnasium's ``ALE/<game>-v5``
built with ``frameskip=1`` and then gymnasium's own wrappers, so that zoo's Atari numbers mean what the rest of
the field's mean:

- ``AtariPreprocessing``: up to ``noop_max`` random no-op actions after each reset (different start states),
  the same action repeated for ``frame_skip`` emulator frames with the reward summed and the last two frames
  max-pooled (some games draw sprites on alternate frames only), resized to ``screen_size`` square, grayscale.
- ``FrameStackObservation``: the last ``stack`` frames, so a single observation shows motion.

Observations are ``uint8`` arrays of shape ``(stack, screen_size, screen_size)``, channels first as torch's
convolutions want them, values 0..255: a network divides by 255 itself. Kept as bytes, one observation is 28 KB
rather than 113 KB as float32, which is what a replay buffer of Atari frames can afford.

The defaults follow Machado et al. (2018), "Revisiting the ALE": sticky actions (``repeat_action_probability``
0.25: the emulator repeats the previous action with that probability, so memorised action sequences fail), the
minimal action set, and episodes that end at game over only. ``terminal_on_life_loss=True`` ends the episode at
every lost life; with gymnasium's wrapper the next reset then starts a new game (it does not continue the same
game as the OpenAI-baselines wrapper did), so episode returns are per life. ALE truncates an episode after
108,000 emulator frames (30 minutes of play, 27,000 steps at frame skip 4).

Some games (Breakout, ...) wait for FIRE before play starts; a policy learns to press it, but ``fire_reset=True``
presses it once after every reset, which speeds up early learning in those games.

Speed, measured on a 2-core machine (Pong, 8 sub-envs, random actions): about 1,300-1,700 steps/s (4 emulator
frames each) with the default ``sync`` vector mode, 760 with ``async`` (8 processes on 2 cores).

ale-py (which ships the game ROMs) and opencv (used by ``AtariPreprocessing`` to resize) are the optional
``atari`` extra: ``pip install 'zoo-rl[atari]'``. They are imported when the env is built, never when zoo is.
"""

from __future__ import annotations

import difflib
from typing import Any

import gymnasium as gym

from ..errors import ConfigError, ZooError, first_line

INSTALL_HINT = "pip install 'zoo-rl[atari]'"
_FIRE = 1  # index of FIRE in both the minimal and the full ALE action sets of games that have it


class FireOnReset(gym.Wrapper):
    """Press FIRE once after every reset, for games that wait for it before play starts.

    The FIRE step's reward is dropped (play has not started, so it is 0 in practice). If the episode ended during that
    step, the env is reset again without pressing.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()
        if len(meanings) <= _FIRE or meanings[_FIRE] != "FIRE":
            name = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
            raise ConfigError(f"{name} has no FIRE action (its actions: {', '.join(meanings)}): "
                              f"set env.kwargs.fire_reset = False")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Reset the env, then step FIRE once; return that step's observation."""
        self.env.reset(seed=seed, options=options)
        obs, _, terminated, truncated, info = self.env.step(_FIRE)
        if terminated or truncated:
            return self.env.reset(options=options)
        return obs, info


def _game_ids() -> dict[str, str]:
    """Game name (as in ``ALE/<name>-v5``) by its lower-case form without separators, e.g. 'spaceinvaders'."""
    names = [env_id[len("ALE/"):-len("-v5")] for env_id in gym.registry if env_id.startswith("ALE/")
             and env_id.endswith("-v5")]
    return {_simplified(name): name for name in names}


def _simplified(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "").replace(" ", "")


def _game_name(game: str) -> str:
    """The ALE spelling of ``game`` ('space_invaders' -> 'SpaceInvaders'), or a one-line ConfigError."""
    games = _game_ids()
    if not isinstance(game, str) or _simplified(game) not in games:
        close = difflib.get_close_matches(_simplified(str(game)), list(games), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(games[c] for c in close)}? " if close else ""
        raise ConfigError(
            f"unknown Atari game {game!r}: {hint}the {len(games)} games are the <game> of gymnasium's ALE/<game>-v5 "
            f"ids (list them with: python -c \"import ale_py, gymnasium as g; g.register_envs(ale_py); "
            f"g.pprint_registry()\")"
        )
    return games[_simplified(game)]


def make_atari_env(
    game: str = "Pong",
    *,
    noop_max: int = 30,
    frame_skip: int = 4,
    screen_size: int = 84,
    terminal_on_life_loss: bool = False,
    grayscale: bool = True,
    stack: int = 4,
    repeat_action_probability: float = 0.25,
    full_action_space: bool = False,
    fire_reset: bool = False,
    render_mode: str | None = None,
) -> gym.Env:
    """Build one preprocessed Atari env (see the module docstring for what each step does and why).

    Arguments:
        game: the ALE game, e.g. ``"Pong"``, ``"Breakout"``, ``"SpaceInvaders"`` (case and ``_`` are ignored).
        noop_max: at most this many random no-ops after reset (0: none).
        frame_skip: emulator frames per step; the reward is their sum.
        screen_size: side of the square observation frame in pixels.
        terminal_on_life_loss: end the episode when a life is lost (the next reset starts a new game).
        grayscale: one grayscale channel per frame; ``False`` gives RGB frames, shape
            ``(stack, screen_size, screen_size, 3)``.
        stack: number of consecutive frames in one observation.
        repeat_action_probability: sticky-action probability (0 for the deterministic emulator).
        full_action_space: all 18 joystick actions instead of the game's minimal set.
        fire_reset: press FIRE once after every reset (games that wait for it; refused for games without it).
        render_mode: gymnasium's render mode (``"rgb_array"`` for ``zoo eval --video``: full-size colour frames).

    Returns:
        A ``gymnasium.Env`` with ``uint8`` Box observations of shape ``(stack, screen_size, screen_size)`` and a
        Discrete action space.

    Raises:
        ZooError: ale-py or opencv is not installed (the message names ``pip install 'zoo-rl[atari]'``).
        ConfigError: an unknown game (the message names the closest games and how to list them all), or
            ``fire_reset`` for a game without FIRE.

    Examples:
        >>> env = make_atari_env("Breakout", fire_reset=True)
        >>> env.observation_space.shape, env.observation_space.dtype
        ((4, 84, 84), dtype('uint8'))
    """
    try:
        import ale_py
    except ImportError as exc:
        detail = first_line(exc)
        raise ZooError(f"Atari envs need ale-py, which could not be imported ({detail}): {INSTALL_HINT}") from None
    gym.register_envs(ale_py)
    env = gym.make(
        f"ALE/{_game_name(game)}-v5",
        frameskip=1,  # frames are skipped (and max-pooled) by AtariPreprocessing
        repeat_action_probability=repeat_action_probability,
        full_action_space=full_action_space,
        render_mode=render_mode,
    )
    try:
        env = gym.wrappers.AtariPreprocessing(
            env, noop_max=noop_max, frame_skip=frame_skip, screen_size=screen_size,
            terminal_on_life_loss=terminal_on_life_loss, grayscale_obs=grayscale, scale_obs=False,
        )
        if fire_reset:
            env = FireOnReset(env)
    except gym.error.DependencyNotInstalled:  # gymnasium's message names its own extra, not zoo's
        env.close()
        raise ZooError(f"Atari preprocessing needs opencv (cv2), which is not installed: {INSTALL_HINT}") from None
    except Exception:
        env.close()
        raise
    return gym.wrappers.FrameStackObservation(env, stack)
