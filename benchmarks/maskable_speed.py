"""Masked PPO's speed and returns beside sb3-contrib's MaskablePPO, on the same env at the same budget, in one run.

Each contender is a whole process timed from its start to its exit (interpreter, imports, set-up, training, then the
evaluation below), one torch thread, on MaskedKnapsack-v0 (zoo.envs.knapsack: an invalid item ends the episode),
at configs/ppo_masked_knapsack.py's settings (16 envs x 32 steps, 5 epochs of 256-sample minibatches, lr 3e-3
annealed linearly, gamma 0.99, GAE lambda 0.95, clip 0.2, entropy 0.01, 64-64 tanh MLPs for actor and critic):

- ``zoo_masked``: ``zoo.train`` of the config (``env.action_mask=auto``: the env's ``action_masks()``);
- ``zoo_unmasked``: the same with ``env.action_mask=none`` (how much the masks are worth at this budget);
- ``sb3_maskable``: sb3-contrib's ``MaskablePPO("MlpPolicy")`` in its own venv (``--sb3-python``, default
  ``$ZOO_SB3_PYTHON``), the settings read from the same config, the env the same class: the child loads
  zoo/envs/knapsack.py by its path (it imports gymnasium and numpy only), not zoo.

The env gives its masks by ``action_masks()`` alone (``--masks method``, as MaskablePPO's envs do); ``--masks both``
adds ``info["action_mask"]``, which zoo's gymnasium vector env merges at every step and MaskablePPO's DummyVecEnv
keeps as a list of dicts (zoo reads the method either way).

Each process then evaluates its final policy (deterministic, with the env's masks where it trained with them) on
the same ``--eval-episodes`` episodes, and reports their mean return and the invalid actions its envs took in
training and in evaluation (a subclass of the env that keeps its instances: the envs step in the process, sync and
DummyVecEnv). A masked contender that took one is a bug, and the run says so. The contenders run one after another in
each round, the order rotated each round, round ``k`` with seed ``--seed + k``; the rates are env steps per second of
the whole process (the env steps each trained: whole rollouts), the ratios each round's, then their median. Usage::

    python benchmarks/maskable_speed.py --sb3-python /path/to/sb3-venv/bin/python [--steps 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "ppo_masked_knapsack.py"
ENV_FILE = ROOT / "zoo" / "envs" / "knapsack.py"
EVAL_SEED = 1_000_000  # evaluation episode i starts from reset(seed=EVAL_SEED + i), in every contender

# Shared by both children: the env subclass that keeps its instances, and the evaluation loop.
COMMON = """
import numpy as np

made = []


class Counted(MaskedKnapsack):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        made.append(self)


def evaluate(act, kwargs, masked, episodes, seed):
    env = MaskedKnapsack(**kwargs)
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            action = act(obs, env.action_masks() if masked else None)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total, done = total + reward, terminated or truncated
        returns.append(total)
    return float(np.mean(returns)), env.invalid_actions


def report(env_steps, mean_return, train_invalid, eval_invalid):
    print("RESULT " + json.dumps(dict(env_steps=int(env_steps), mean_return=mean_return,
                                      train_invalid=int(train_invalid), eval_invalid=int(eval_invalid))), flush=True)
"""

ZOO_CHILD = """
import json
import sys

import zoo
from zoo.envs.knapsack import MaskedKnapsack
from zoo.registry import ENV_REGISTRY
""" + COMMON + """
config, runs, steps, seed, mask, episodes, eval_seed, settings = sys.argv[1:9]
kwargs = json.loads(settings)["env_kwargs"]
ENV_REGISTRY.register("CountedKnapsack-v0", Counted)
summary = zoo.train(config, [f"runs_dir={runs}", f"seed={seed}", f"pipeline.max_env_steps={steps}", "torch_threads=1",
                             "env.id=CountedKnapsack-v0", f"env.kwargs={kwargs!r}", f"env.action_mask={mask}",
                             "pipeline.eval_every=0", "pipeline.vector_mode=sync", "logger.progress=false"])
agent = zoo.load(summary["run_dir"])
mean_return, eval_invalid = evaluate(lambda obs, mask_: agent.predict(obs, action_mask=mask_), kwargs,
                                     mask != "none", int(episodes), int(eval_seed))
report(summary["env_steps"], mean_return, sum(env.invalid_actions for env in made), eval_invalid)
"""

SB3_CHILD = """
import importlib.util
import json
import sys

import torch
from torch import nn

torch.set_num_threads(1)
from sb3_contrib import MaskablePPO
from stable_baselines3.common.env_util import make_vec_env

env_file, steps, seed, episodes, eval_seed, settings = sys.argv[1:7]
spec = importlib.util.spec_from_file_location("knapsack", env_file)
knapsack = importlib.util.module_from_spec(spec)
spec.loader.exec_module(knapsack)
MaskedKnapsack = knapsack.MaskedKnapsack
""" + COMMON + """
policy, pipeline, kwargs = (json.loads(settings)[key] for key in ("policy", "pipeline", "env_kwargs"))
rate = policy["learning_rate"]
venv = make_vec_env(Counted, n_envs=pipeline["num_envs"], seed=int(seed), env_kwargs=kwargs)
model = MaskablePPO("MlpPolicy", venv, n_steps=pipeline["rollout_steps"], batch_size=policy["minibatch_size"],
                    n_epochs=policy["epochs"], learning_rate=(lambda progress: progress * rate) if policy["anneal_lr"]
                    else rate, gamma=policy["gamma"], gae_lambda=policy["gae_lambda"],
                    clip_range=policy["clip_ratio"], ent_coef=policy["entropy_coef"], vf_coef=0.5, max_grad_norm=0.5,
                    seed=int(seed), device="cpu",
                    policy_kwargs=dict(net_arch=dict(pi=policy["hidden_sizes"], vf=policy["hidden_sizes"]),
                                       activation_fn=nn.Tanh))
model.learn(int(steps))
mean_return, eval_invalid = evaluate(
    lambda obs, mask: model.predict(obs, action_masks=mask, deterministic=True)[0], kwargs, True, int(episodes),
    int(eval_seed))
report(model.num_timesteps, mean_return, sum(env.invalid_actions for env in made), eval_invalid)
"""


def settings(masks: str) -> str:
    """The config's settings the children read (JSON): the same sizes and hyper-parameters by construction, and the
    env's keyword arguments with ``masks``."""
    config = runpy.run_path(str(CONFIG))["config"]
    policy, pipeline = config["policy"], config["pipeline"]
    if policy.get("activation", "tanh") != "tanh" or policy.get("ortho_init", True) is not True:
        raise SystemExit(f"{CONFIG.name}: the sb3 child assumes tanh MLPs, orthogonally initialised (both defaults)")
    env_kwargs = {**config["env"].get("kwargs", {}), "masks": masks}
    return json.dumps({"policy": policy, "pipeline": pipeline, "env_kwargs": env_kwargs})


def _environment(zoo: bool) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    if zoo:  # this checkout's zoo, whatever the venv has installed
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def timed(command: list[str], zoo: bool, cwd: Path) -> tuple[float, dict]:
    """Seconds of the whole process ``command`` and the RESULT line it printed."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=_environment(zoo), capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{command[:3]} failed ({done.returncode}): {done.stderr.strip().splitlines()[-3:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"{command[:3]} printed no RESULT line: {done.stdout.strip().splitlines()[-3:]}")
    return seconds, json.loads(lines[-1].removeprefix("RESULT "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sb3-python", default=os.environ.get("ZOO_SB3_PYTHON"),
                        help="python of a venv with sb3-contrib 2.9.2 (default $ZOO_SB3_PYTHON; left out when unset)")
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument("--masks", choices=("method", "both"), default="method",
                        help="how the env gives its masks: method (action_masks() alone, as sb3-contrib's envs do) or "
                             "both (also info['action_mask'], which a gymnasium vector env merges at every step)")
    args = parser.parse_args()
    shared = settings(args.masks)
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as runs:
        zoo_script, sb3_script = Path(runs) / "zoo_child.py", Path(runs) / "sb3_child.py"
        zoo_script.write_text(ZOO_CHILD)
        sb3_script.write_text(SB3_CHILD)

        def contenders(seed: int) -> dict[str, tuple[list[str], bool]]:
            tail = [str(args.eval_episodes), str(EVAL_SEED), shared]
            found = {name: ([sys.executable, str(zoo_script), str(CONFIG), runs, str(args.steps), str(seed), mask,
                             *tail], True) for name, mask in (("zoo_masked", "auto"), ("zoo_unmasked", "none"))}
            if args.sb3_python:
                found["sb3_maskable"] = ([args.sb3_python, str(sb3_script), str(ENV_FILE), str(args.steps),
                                          str(seed), *tail], False)
            return found

        names = list(contenders(args.seed))
        results = {name: [] for name in names}
        for round_ in range(args.rounds):
            commands = contenders(args.seed + round_)
            for name in names[round_ % len(names):] + names[: round_ % len(names)]:
                seconds, result = timed(commands[name][0], commands[name][1], Path(runs))
                results[name].append({**result, "seconds": seconds, "rate": result["env_steps"] / seconds})
            print(f"round {round_} (seed {args.seed + round_}): " + "  ".join(
                f"{name} {results[name][-1]['rate']:,.0f}/s return {results[name][-1]['mean_return']:.2f}"
                for name in names), flush=True)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU")
    print(f"\n{cpu}; {args.steps:,} env steps per process, whole process, one thread, {args.rounds} rounds, "
          f"{args.eval_episodes} evaluation episodes each, the env's masks: {args.masks}")
    for name in names:
        rows = results[name]
        returns = ", ".join(f"{row['mean_return']:.2f}" for row in rows)
        trained, evaluated = (sum(row[key] for row in rows) for key in ("train_invalid", "eval_invalid"))
        print(f"  {name:13s} {statistics.median(row['rate'] for row in rows):8,.0f} env steps/s (median); return "
              f"{statistics.mean(row['mean_return'] for row in rows):.2f} (rounds: {returns}); invalid actions: "
              f"{trained:,} in training, {evaluated:,} in evaluation")
    if "sb3_maskable" in results:
        values = [zoo["rate"] / sb3["rate"] for zoo, sb3 in zip(results["zoo_masked"], results["sb3_maskable"],
                                                                 strict=True)]
        print(f"zoo_masked / sb3_maskable: {statistics.median(values):.2f}x (rounds "
              f"{', '.join(f'{value:.2f}' for value in values)})   (goal: at least 3x)")
    for name in ("zoo_masked", "sb3_maskable"):
        taken = sum(row["train_invalid"] + row["eval_invalid"] for row in results.get(name, []))
        if taken:
            print(f"{name} took {taken} invalid actions: its masks were not honoured")


if __name__ == "__main__":
    main()
