"""zoo's whole TD3 (or SAC) training loop against Stable-Baselines3's, on shared random streams.

Three runs on Hopper-v5, each ``--learning-starts`` random env steps then ``--updates`` updates, one per transition:
zoo (the serial off-policy pipeline as ``zoo run`` builds it: ``TrainingLoop.run``, ``iterate``, the collector, the
replay, ``policy.learn`` with eager updates; no run directory), SB3 (``model.learn``, from zoo's initial weights)
and SB3p, the control (SB3 from those weights moved one float32 step up: a perturbation of one rounding). TD3 at
configs/td3_hopper.py's settings (``sac_hopper_peer.td3_peer``); SAC at SB3's defaults, which are zoo's.

Shared streams: each random number comes from a numpy generator seeded with (seed, kind, index), where the index
is the stored transition (warm-up action, exploration noise) or the update (minibatch rows, TD3's smoothing noise,
SAC's actor samples of s and s', which the libraries draw in opposite orders). Each library's draws are
intercepted and answered from it (zoo: ``action_space.sample``, ``policy.draw``, ``torch.randn_like``; SB3:
``action_space.sample``, its action noise, ``replay_buffer.sample``, ``Tensor.normal_``, torch.distributions'
standard normal); an unexpected draw, or an expected one that never comes, stops the run. Both envs first reset
with the seed of zoo's collector; later resets draw from the env's own generator in both.

Lined up transition by transition: zoo's autoreset step after an episode end counts as an env step, stores
nothing and is not learned after (its ignored action gets zeros, not a table entry); SB3's env resets inside the
final step. SB3 acts randomly for learning_starts transitions, once with the untrained policy, then learns after
every step: zoo runs with random_steps = L and learning_starts = L + 1 (its default learns one step earlier),
and SB3's learning_starts is the number of random transitions zoo stored. SB3's TD3 adds its action noise to the
uniform warm-up actions too (zoo's warm-up is plain uniform): zoo is handed those noisy warm-up actions. Checked:
every update sees the same replay size in all runs; printed: how far the stored observations agree.

Prints, at several update counts, the relative distance ||a - b|| / ||b|| of the online weights (actor and
critics), zoo against SB3 and SB3p against SB3, and the mean return of ``--eval-episodes`` deterministic episodes
(the same env seeds everywhere). ``--squash-epsilon`` (SAC) gives zoo SB3's tanh correction, log(1 - tanh(u)^2 +
1e-6) instead of the exact log(1 - tanh(u)^2): the one difference between the two SAC updates. Figures and what
they show: docs/algorithms/td3.md and sac.md.

    python benchmarks/td3_loop_parity.py [--algo sac] [--squash-epsilon] [--updates 5000] [--seed 0]

Needs ``stable-baselines3`` and ``mujoco`` (zoo from this checkout); one torch thread, minutes per run.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout

from zoo.config.files import load_config_file  # noqa: E402
from zoo.config.resolve import resolve_config  # noqa: E402
from zoo.pipelines.observers import Observer  # noqa: E402
from zoo.run import build_pipeline  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from td3_update_parity import sb3_networks, zoo_networks  # noqa: E402  (views in one layout: SB3's)

ENV_ID = "Hopper-v5"
EVAL_SEED = 10_000
# The noises inside one update, in the order each library draws them (all (batch, action_dim) standard normals).
UPDATE_NOISES = {("td3", "zoo"): ("smoothing",), ("td3", "sb3"): ("smoothing",),
                 ("sac", "zoo"): ("next", "current"), ("sac", "sb3"): ("current", "next")}
KINDS = {"warmup": 1, "explore": 2, "rows": 3, "smoothing": 4, "next": 5, "current": 6}
# SAC's settings for both libraries: SB3's defaults, which zoo's SAC defaults equal.
SAC_SETTINGS = dict(hidden_sizes=[256, 256], learning_rate=3e-4, batch_size=256, gamma=0.99, tau=0.005)


class SharedStreams:
    """The random numbers of both loops, keyed by kind and by transition or update; ``pending`` holds the standard
    normals that the next intercepted draws of the running loop take, in order."""

    def __init__(self, seed: int, action_space: gym.spaces.Box) -> None:
        self.seed = seed
        self.low, self.high = action_space.low.astype(np.float64), action_space.high.astype(np.float64)
        self.action_dim = int(action_space.shape[0])
        self.pending: list[torch.Tensor] = []

    def _generator(self, kind: str, index: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, KINDS[kind], index])

    def warmup_action(self, transition: int, noise_std: float = 0.0) -> np.ndarray:
        """The uniformly random action of a warm-up transition, ``(action_dim,)`` float32; with ``noise_std``, plus
        the transition's exploration noise in [-1, 1] units, clipped (SB3's TD3 adds it to warm-up actions too)."""
        uniform = self._generator("warmup", transition).random(self.action_dim)
        action = (self.low + (self.high - self.low) * uniform).astype(np.float32)
        if noise_std:  # in SB3's order and precision: scaled in float32, the noise added in float64
            low, high = self.low.astype(np.float32), self.high.astype(np.float32)
            unit = 2.0 * ((action - low) / (high - low)) - 1.0
            unit = np.clip(unit + noise_std * self.normal("explore", transition)[0].double().numpy(), -1.0, 1.0)
            action = (self.low + 0.5 * (unit + 1.0) * (self.high - self.low)).astype(np.float32)
        return action

    def normal(self, kind: str, index: int, rows: int = 1) -> torch.Tensor:
        """Standard normals ``(rows, action_dim)`` float32 of ``kind`` at a transition or update."""
        values = self._generator(kind, index).standard_normal((rows, self.action_dim), dtype=np.float32)
        return torch.from_numpy(values)

    def rows(self, update: int, size: int, batch: int) -> np.ndarray:
        """The minibatch rows of an update: ``batch`` uniform draws in ``[0, size)``."""
        return self._generator("rows", update).integers(0, size, batch)

    def expect(self, *noises: torch.Tensor) -> None:
        """The next intercepted draws take these, in order (the previous ones must all have been taken)."""
        if self.pending:
            raise RuntimeError(f"{len(self.pending)} expected random draw(s) never came: the loops are not aligned")
        self.pending = list(noises)

    def take(self, shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
        """The next expected standard normals, which must have ``shape``."""
        if not self.pending:
            raise RuntimeError(f"an unexpected random draw of shape {tuple(shape)}: it has no shared stream")
        values = self.pending.pop(0)
        if tuple(values.shape) != tuple(shape):
            raise RuntimeError(f"a random draw of shape {tuple(shape)} where {tuple(values.shape)} was expected")
        return values.clone()

    def update_noises(self, algo: str, library: str, update: int, batch: int) -> list[torch.Tensor]:
        return [self.normal(kind, update, batch) for kind in UPDATE_NOISES[algo, library]]


@contextlib.contextmanager
def replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name = value`` for the block, restored after (deleted again where it was inherited)."""
    own = name in vars(owner)
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if own:
            setattr(owner, name, old)
        else:
            delattr(owner, name)


def online_vector(networks: dict[str, list[torch.Tensor]]) -> torch.Tensor:
    """The online actor's and critics' weights (``zoo_networks``/``sb3_networks``) as one float64 vector."""
    return torch.cat([t.detach().flatten().double() for name in ("actor", "critic") for t in networks[name]])


def evaluate(act: Callable[[np.ndarray], np.ndarray], episodes: int) -> float:
    """Mean return of deterministic episodes on env seeds ``EVAL_SEED + i``."""
    env = gym.make(ENV_ID)
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED + episode)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


class Trace:
    """What one run leaves to compare: weights and eval returns at the update counts, replay sizes per update."""

    def __init__(self) -> None:
        self.weights: dict[int, torch.Tensor] = {}
        self.returns: dict[int, float] = {}
        self.sizes: list[int] = []
        self.observations: np.ndarray | None = None
        self.seconds = 0.0


# -- zoo ------------------------------------------------------------------------------------------------------
def zoo_config(algo: str, learning_starts: int, buffer_size: int, seed: int) -> dict[str, Any]:
    if algo == "td3":
        config = load_config_file(ROOT / "configs" / "td3_hopper.py")
    else:
        s = SAC_SETTINGS
        config = {"env": {"id": ENV_ID}, "policy": {
            "type": "sac", "hidden_sizes": s["hidden_sizes"], "actor_learning_rate": s["learning_rate"],
            "critic_learning_rate": s["learning_rate"], "alpha_learning_rate": s["learning_rate"],
            "batch_size": s["batch_size"], "gamma": s["gamma"], "tau": s["tau"], "init_alpha": 1.0,
            "auto_alpha": True, "target_entropy": None}, "pipeline": {}}
    config = {**config, "exp_name": f"{algo}_loop_parity", "seed": seed, "torch_threads": 1}
    config["policy"] = {**config["policy"], "compile": "off", "precision": "fp32"}  # the eager reference update
    config["pipeline"] = {**config["pipeline"], "num_envs": 1, "train_freq": 1, "gradient_steps": 1,
                          "buffer_size": buffer_size, "random_steps": learning_starts,
                          "learning_starts": learning_starts + 1, "max_env_steps": 10**9, "steps_per_iteration": 50,
                          "eval_every": 0, "checkpoint_every": 0, "save_replay": False, "log_every_s": 1e9}
    return config


class StopAfter(Observer):
    """Stops the run after the iteration in which the policy reached ``updates``."""

    def __init__(self, policy: Any, updates: int) -> None:
        self.policy, self.updates = policy, updates

    def should_stop(self, loop: Any, row: dict[str, Any]) -> bool:
        return self.policy.updates >= self.updates


def sb3_squash_correction(pre_tanh: torch.Tensor) -> torch.Tensor:
    """SB3's per-dimension ``log(1 - tanh(u)^2 + 1e-6)`` (zoo computes ``log(1 - tanh(u)^2)`` exactly)."""
    return torch.log(1 - torch.tanh(pre_tanh) ** 2 + 1e-6)


def run_zoo(algo: str, streams: SharedStreams, learning_starts: int, counts: list[int], episodes: int,
            seed: int, squash_epsilon: bool = False) -> tuple[Trace, dict[str, Any]]:
    """zoo's run; returns its trace and what SB3's runs need (initial weights, env seed, random transitions).
    ``squash_epsilon``: SAC's log-probabilities with SB3's tanh correction instead of zoo's (a diagnostic)."""
    import zoo.policies.sac as sac_module

    cfg = resolve_config(zoo_config(algo, learning_starts, learning_starts + 2 * counts[-1] + 1_000, seed))
    pipeline = build_pipeline(cfg)
    policy, collector, trace = pipeline.policy, pipeline.collector, Trace()
    initial = {name: [t.detach().clone() for t in tensors] for name, tensors in zoo_networks(algo, policy).items()}
    found: dict[str, Any] = {"initial": initial, "env_seed": collector.seed, "random_transitions": None}
    stored = 0
    transitions, learn = collector.transitions, policy.learn
    zeros = torch.zeros(1, streams.action_dim)
    # SB3's TD3 adds its action noise to the uniform warm-up actions too (zoo's warm-up is uniform): zoo is given
    # SB3's warm-up actions, so that both loops store the same transitions.
    warmup_noise = cfg.policy.exploration_noise if algo == "td3" else 0.0

    def shared_transitions(acting: Any, steps: int) -> Any:
        nonlocal stored
        collector.start()
        autoreset = bool(collector.pending_reset[0])  # the env resets at this step and ignores its action
        if acting is None:
            action = np.zeros(streams.action_dim, np.float32) if autoreset else \
                streams.warmup_action(stored, warmup_noise)
            with replaced(collector.venv.action_space, "sample", lambda *_, **__: action[None]):
                out = transitions(acting, steps)
        else:
            if found["random_transitions"] is None and not autoreset:
                found["random_transitions"] = stored
            streams.expect(zeros if autoreset else streams.normal("explore", stored))
            out = transitions(acting, steps)
        stored += len(out)
        return out

    def shared_draw(replay: Any) -> dict[str, torch.Tensor]:
        update = policy.updates + 1  # the base counts the update after its draw
        trace.sizes.append(len(replay))
        streams.expect(*streams.update_noises(algo, "zoo", update, cfg.policy.batch_size))
        return {"rows": torch.as_tensor(streams.rows(update, len(replay), cfg.policy.batch_size))}

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return policy.deterministic_action(torch.as_tensor(obs, dtype=torch.float32)[None])[0].numpy()

    def observed_learn(replay: Any, ctx: Any) -> dict[str, Any]:
        metrics = learn(replay, ctx)
        streams.expect()  # every noise of the update was taken
        if policy.updates in counts:
            trace.weights[policy.updates] = online_vector(zoo_networks(algo, policy))
            trace.returns[policy.updates] = evaluate(act, episodes)
        return metrics

    def randn_like(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return streams.take(tensor.shape).to(tensor.dtype)

    collector.transitions, policy.draw, policy.learn = shared_transitions, shared_draw, observed_learn
    pipeline.observers = [StopAfter(policy, counts[-1])]
    trace.weights[0] = online_vector(initial)
    trace.returns[0] = evaluate(act, episodes)
    start = time.perf_counter()
    correction = sb3_squash_correction if squash_epsilon else sac_module.tanh_log_det_jacobian
    with replaced(torch, "randn_like", randn_like), replaced(sac_module, "tanh_log_det_jacobian", correction):
        pipeline.run()
    trace.seconds = time.perf_counter() - start
    trace.observations = pipeline.replay.obs[:stored].copy()
    collector.close()
    return trace, found


# -- Stable-Baselines3 ----------------------------------------------------------------------------------------
def sb3_model(algo: str, learning_starts: int, buffer_size: int, seed: int,
              exploration: Callable[[], np.ndarray]) -> Any:
    """SB3's TD3 (with ``exploration()`` as its action noise) or SAC, at the settings of this comparison."""
    from stable_baselines3 import SAC
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.noise import ActionNoise

    env = gym.make(ENV_ID)
    if algo == "td3":
        from sac_hopper_peer import td3_peer

        class SharedNoise(ActionNoise):
            def __call__(self) -> np.ndarray:
                return exploration()

        model = td3_peer(env, seed, learning_starts=learning_starts, buffer_size=buffer_size,
                         action_noise=SharedNoise())
    else:
        s = SAC_SETTINGS
        model = SAC("MlpPolicy", env, learning_rate=s["learning_rate"], buffer_size=buffer_size,
                    learning_starts=learning_starts, batch_size=s["batch_size"], tau=s["tau"], gamma=s["gamma"],
                    train_freq=1, gradient_steps=1, ent_coef="auto", target_update_interval=1,
                    policy_kwargs=dict(net_arch=list(s["hidden_sizes"])), seed=seed, device="cpu", verbose=0)
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def run_sb3(algo: str, streams: SharedStreams, found: dict[str, Any], counts: list[int], episodes: int,
            seed: int, nudge: bool) -> Trace:
    """SB3's run from zoo's initial weights (moved one float32 step up with ``nudge``), on the shared streams."""
    start_transitions = found["random_transitions"]
    sigma = load_config_file(ROOT / "configs" / "td3_hopper.py").policy.exploration_noise

    def exploration() -> np.ndarray:  # TD3's Gaussian action noise of this transition
        return sigma * streams.normal("explore", model.num_timesteps)[0].double().numpy()

    model = sb3_model(algo, start_transitions, start_transitions + 2 * counts[-1] + 1_000, seed, exploration)
    with torch.no_grad():
        for name, tensors in sb3_networks(algo, model).items():
            for mine, theirs in zip(found["initial"][name], tensors, strict=True):
                theirs.copy_(torch.nextafter(mine, torch.full_like(mine, math.inf)) if nudge else mine)
    model.env.seed(found["env_seed"])  # the first reset: the seed zoo's collector reset with
    trace, replay = Trace(), model.replay_buffer
    model.action_space.sample = lambda *_, **__: streams.warmup_action(model.num_timesteps)
    sample_action, train = model._sample_action, model.train

    def shared_sample_action(learning_starts: int, action_noise: Any = None, n_envs: int = 1) -> Any:
        if algo == "sac" and model.num_timesteps >= learning_starts:
            streams.expect(streams.normal("explore", model.num_timesteps))
        return sample_action(learning_starts, action_noise, n_envs)

    def shared_sample(batch_size: int, env: Any = None) -> Any:
        update, size = len(trace.sizes) + 1, replay.buffer_size if replay.full else replay.pos
        trace.sizes.append(size)
        streams.expect(*streams.update_noises(algo, "sb3", update, batch_size))
        return replay._get_samples(streams.rows(update, size, batch_size), env=env)

    def act(obs: np.ndarray) -> np.ndarray:
        return model.predict(obs, deterministic=True)[0]

    def observed_train(gradient_steps: int, batch_size: int) -> None:
        train(gradient_steps, batch_size)
        streams.expect()
        if len(trace.sizes) in counts:
            trace.weights[len(trace.sizes)] = online_vector(sb3_networks(algo, model))
            trace.returns[len(trace.sizes)] = evaluate(act, episodes)

    def normal_(tensor: torch.Tensor, mean: float = 0.0, std: float = 1.0, **_: Any) -> torch.Tensor:
        return tensor.copy_(streams.take(tensor.shape) * std + mean)  # TD3's smoothing noise

    def standard_normal(shape: Any, dtype: torch.dtype, device: Any) -> torch.Tensor:
        return streams.take(shape).to(dtype)  # SAC's actor samples

    model._sample_action, model.train, replay.sample = shared_sample_action, observed_train, shared_sample
    trace.weights[0] = online_vector(sb3_networks(algo, model))
    trace.returns[0] = evaluate(act, episodes)
    start = time.perf_counter()
    with replaced(torch.Tensor, "normal_", normal_), \
            replaced(torch.distributions.normal, "_standard_normal", standard_normal):
        model.learn(start_transitions + counts[-1])
    trace.seconds = time.perf_counter() - start
    trace.observations = replay.observations[:replay.pos, 0].astype(np.float32)
    return trace


# -- the report -----------------------------------------------------------------------------------------------
def distance(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def agreement(zoo: np.ndarray, sb3: np.ndarray, warmup: int) -> str:
    """How far the stored observations agree, row by row."""
    rows = min(len(zoo), len(sb3))
    gap = np.abs(zoo[:rows] - sb3[:rows]).max(axis=1)
    apart = np.flatnonzero(gap > 1e-3)
    first = f"first row apart by more than 1e-3: {apart[0]:,} (update {apart[0] - warmup + 1:,})" if len(apart) \
        else "no row apart by more than 1e-3"
    return (f"stored observations, zoo against SB3: largest difference {gap[:warmup].max():.1e} over the "
            f"{warmup:,} random transitions; {first} of {rows:,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", choices=("td3", "sac"), default="td3")
    parser.add_argument("--updates", type=int, default=5000)
    parser.add_argument("--learning-starts", type=int, default=10_000, help="random env steps of zoo's run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--squash-epsilon", action="store_true",
                        help="SAC: zoo's log-probabilities with SB3's tanh correction log(1 - tanh(u)^2 + 1e-6) "
                             "instead of the exact log(1 - tanh(u)^2) (a diagnostic: the one difference left)")
    args = parser.parse_args()
    if args.squash_epsilon and args.algo != "sac":
        parser.error("--squash-epsilon is for --algo sac")
    torch.set_num_threads(1)
    counts = sorted({c for c in (1, 10, 100, 300, 1000, 2000, 3000, 4000, 5000) if c < args.updates}
                    | {args.updates})
    streams = SharedStreams(args.seed, gym.make(ENV_ID).action_space)
    zoo, found = run_zoo(args.algo, streams, args.learning_starts, counts, args.eval_episodes, args.seed,
                         args.squash_epsilon)
    sb3 = run_sb3(args.algo, streams, found, counts, args.eval_episodes, args.seed, nudge=False)
    control = run_sb3(args.algo, streams, found, counts, args.eval_episodes, args.seed, nudge=True)
    if zoo.sizes[:len(sb3.sizes)] != sb3.sizes or sb3.sizes != control.sizes:
        raise SystemExit("the runs' replay sizes differ at some update: the loops are not lined up")
    warmup = found["random_transitions"]
    print(f"{args.algo.upper()} on {ENV_ID}, seed {args.seed}: zoo's {args.learning_starts:,} random env steps held "
          f"{warmup:,} transitions ({args.learning_starts - warmup} autoreset steps), so SB3's learning_starts is "
          f"{warmup:,}; then {counts[-1]:,} updates, one per transition, with the same replay size at every update "
          f"in all three runs (training {zoo.seconds:.0f} s zoo, {sb3.seconds:.0f} s and {control.seconds:.0f} s SB3)")
    if args.squash_epsilon:
        print("zoo's SAC log-probabilities use SB3's tanh correction log(1 - tanh(u)^2 + 1e-6) here (--squash-epsilon)")
    print(agreement(zoo.observations, sb3.observations, warmup))
    print(f"relative distance ||a - b|| / ||b|| of the online weights (actor, critics); mean return of "
          f"{args.eval_episodes} deterministic episodes (env seeds {EVAL_SEED}+)")
    print(f"{'updates':>8}  {'zoo vs SB3':>10}  {'SB3p vs SB3':>11}  " + "  ".join(
        f"{'eval ' + name:>9}" for name in ("zoo", "SB3", "SB3p")))
    for count in [0, *counts]:
        print(f"{count:>8,}  {distance(zoo.weights[count], sb3.weights[count]):>10.2e}  "
              f"{distance(control.weights[count], sb3.weights[count]):>11.2e}  {zoo.returns[count]:>9.2f}  "
              f"{sb3.returns[count]:>9.2f}  {control.returns[count]:>9.2f}")
    print("SB3p: SB3 started from zoo's initial weights moved one float32 step up (the rounding-size control)")


if __name__ == "__main__":
    main()
