"""Start-up cost of every ``zoo`` command next to ``python -c "import torch"``, measured in one run.

Run: ``python benchmarks/startup_bench.py [--repeats 7]``

Each command runs as a fresh process (``python -m zoo ...``, so the timings do not depend on where the console
script lives); the figure is the median wall-clock over the repeats. ``run (first env step)`` is ``zoo run`` on a
CartPole config whose env ends the process at its first ``step()``: everything before training (config, plugins,
run directory, policy, vector env, reset) and nothing after. ``eval`` evaluates one episode of a tiny run made
beforehand. The last column is the difference to ``import torch`` (target: at most 0.3 s for every command).
``import torch, no teardown`` leaves by ``os._exit`` as the run probe does: interpreter shutdown after importing
torch costs a tenth of a second or more, which the run probe skips.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

PROBE = textwrap.dedent('''
    """An env that ends the process at its first step: ``zoo run`` timed up to the first env step."""
    import os

    import gymnasium as gym

    from zoo.registry import ENV_REGISTRY


    class FirstStepExit(gym.Wrapper):
        def step(self, action):
            os._exit(0)


    def first_step_exit(**kwargs):
        return FirstStepExit(gym.make("CartPole-v1", **kwargs))


    ENV_REGISTRY.register("startup_probe", first_step_exit)
''')


def _once(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return elapsed


def timed(commands: dict[str, list[str]], cwd: Path, repeats: int) -> dict[str, float]:
    """Median wall-clock seconds of each command as a fresh process. The commands take turns (round-robin), so
    that a slow spell of the machine weighs on all of them alike; one untimed round first writes the caches."""
    # Bytecode caching on, as on a user's machine (a PYTHONDONTWRITEBYTECODE=1 shell would recompile zoo's own
    # modules at every start: about 0.14 s).
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["OMP_NUM_THREADS"] = "1"
    times: dict[str, list[float]] = {name: [] for name in commands}
    for attempt in range(repeats + 1):
        for name, argv in commands.items():
            elapsed = _once(argv, cwd, env)
            if attempt:
                times[name].append(elapsed)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "startup_probe.py").write_text(PROBE)
        (work / "probe.py").write_text(
            "config = dict(exp_name='probe', env=dict(id='startup_probe'), import_names=['startup_probe'],\n"
            "              policy=dict(type='ppo'), pipeline=dict(num_envs=4, max_env_steps=1000))\n"
        )
        (work / "tiny.py").write_text(
            "config = dict(exp_name='tiny', env=dict(id='CartPole-v1'), policy=dict(type='ppo', epochs=1),\n"
            "              pipeline=dict(num_envs=2, rollout_steps=16, max_env_steps=32, eval_every=0))\n"
        )
        subprocess.run([python, "-m", "zoo", "run", "--config", "tiny.py", "-q", "--set", "runs_dir=runs"], cwd=work,
                       check=True, stdout=subprocess.DEVNULL)
        commands = {
            'python -c "import torch"': [python, "-c", "import torch"],
            "import torch, no teardown": [python, "-c", "import os, torch; os._exit(0)"],
            "zoo --help": [python, "-m", "zoo", "--help"],
            "zoo list": [python, "-m", "zoo", "list"],
            "zoo config ppo": [python, "-m", "zoo", "config", "ppo"],
            "zoo run (first env step)": [python, "-m", "zoo", "run", "--config", "probe.py", "-q", "--set",
                                         "runs_dir=runs"],
            "zoo eval (1 episode)": [python, "-m", "zoo", "eval", "runs/tiny", "--episodes", "1"],
        }
        results = timed(commands, work, args.repeats)
    base = results['python -c "import torch"']
    print(f"{'command':<28} {'seconds':>8} {'- torch':>8}")
    for name, seconds in results.items():
        print(f"{name:<28} {seconds:8.2f} {seconds - base:+8.2f}")


if __name__ == "__main__":
    main()
