"""Benchmark suites: lists of (config, overrides) whose runs together answer one question; the built-in ones declared
once here (``BUILTIN_SUITES``), every suite looked up through one registry (``SUITES``).

Every entry trains its config for a fixed budget (``pipeline.stop_return`` off, so that every seed reports its
score at the same number of env steps), with evaluations during training fewer than the configs' own (cheap
enough to run often), and ends with a final evaluation of 10 deterministic episodes on seeds disjoint from
training (the runner's ``final_eval.json``). Suites:

- ``classic``: every algorithm on CartPole-v1, Acrobot-v1 where a config exists, Pendulum-v1 (the configs' own
  budgets and hyper-parameters).
- ``mujoco``: PPO on Hopper-v5, HalfCheetah-v5 and Walker2d-v5 at 1M env steps; SAC and SAC-ACE on Hopper-v5 and
  HalfCheetah-v5 at 200k (the ``ace`` comparison's settings); TD3 on Hopper-v5 and HalfCheetah-v5 at 200k. Needs
  ``pip install 'zoo-rl[mujoco]'``.
- ``ace``: SAC-ACE against SAC on Hopper-v5 and HalfCheetah-v5 at 200k env steps, the same settings but
  ``policy.type`` (the same entries as ``mujoco``'s: each trained once).
- ``memory``: PPO with an LSTM, with a GRU, without memory and with 4 stacked frames on CartPoleNoVel-v1 (CartPole
  without velocities), the same settings (configs/ppo_lstm_cartpole_novel.py) and a fixed 200k budget; PPO with an
  LSTM, a GRU, without memory and with 4 stacked frames on PendulumNoVel-v1 (configs/ppo_lstm_pendulum_novel.py,
  300k); the same four on popgym's RepeatFirstEasy (configs/ppo_lstm_repeat_first.py, 200k; needs
  ``pip install 'zoo-rl[popgym]'``).
- ``hl_gauss``: SAC with the HL-Gauss categorical critic against SAC with the MSE critic on Pendulum-v1 at 20k env
  steps (the sac_pendulum config, whose runs are classic's ``sac_pendulum`` entry; HL-Gauss support [-1700, 0], the
  range of Pendulum's discounted returns).
- ``masks``: PPO with action masks against the same PPO without them on MaskedKnapsack-v0 (zoo.envs.knapsack, where
  an invalid item ends the episode) at a fixed 200k (configs/ppo_masked_knapsack.py; ``env.action_mask=none``).

``est_minutes`` is one seed's wall time here (measured, or estimated from the configs' docstrings) for the
runner's ETA before a run of the entry has finished.

Plugins add suites through the ``register_bench_suites`` hook (``zoo.hookspecs``); the built-in plugin registers
``BUILTIN_SUITES`` through the same hook, so ``SUITES[name]`` (``suite_entries``) is the one lookup of ``zoo bench``,
its ``--report`` and ``--list`` (``listing``).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass

from ..errors import ConfigError, UnknownNameError
from ..plugins import BUILTIN_PLUGIN_NAME, load_plugins
from ..registry import SUITE_REGISTRY
from .published import Published

_FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")  # an entry's name is its folder under runs/bench/
ASSIGNED_SOURCE = "python"  # the source of a suite assigned in Python (``SUITES[name] = entries``: tests, scripts)


@dataclass(frozen=True)
class Entry:
    """One configuration of a suite: ``name`` (its folder under the suite's runs, ``runs/bench/<name>``), the config
    file (a path relative to the repository's ``configs/``, or an absolute path: a plugin's own file), ``overrides``
    (``--set`` strings, e.g. the budget), one seed's estimated wall time here, ``seeds``, how many seeds
    (0 .. seeds-1) its protocol asks for (``zoo bench`` trains and tables that many unless ``--seeds`` says
    otherwise; 10 where a comparison needs the power), and ``published``: figures of other libraries for this
    entry (``zoo.bench.published.Published``) that the report shows before the built-in table's for the same
    algorithm and env. A config given as a ``Path`` and lists of overrides or figures are kept as a string and
    tuples (an entry compares by value and is hashable).

    Examples:
        >>> from pathlib import Path
        >>> entry = Entry("my_ext_pendulum", Path("/opt/my_ext/pendulum.py"), ["pipeline.max_env_steps=50000"], seeds=3)
        >>> entry.config, entry.overrides, entry.seed_count(None), entry.seed_count(10)  # 10: ``--seeds 10``
        ('/opt/my_ext/pendulum.py', ('pipeline.max_env_steps=50000',), 3, 10)
        >>> Entry("runs/pendulum", "ppo_pendulum.py")
        Traceback (most recent call last):
        zoo.errors.ConfigError: benchmark entry name 'runs/pendulum' is not a folder name ...
    """

    name: str
    config: str
    overrides: tuple[str, ...] = ()
    est_minutes: float = 5.0
    seeds: int = 5
    published: tuple[Published, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _FOLDER_NAME.match(self.name):
            raise ConfigError(f"benchmark entry name {self.name!r} is not a folder name (letters, digits, '_', '.', "
                              "'-', not starting with '.' or '-'): it names the entry's runs, runs/bench/<name>/")
        if not isinstance(self.config, str | os.PathLike):
            raise ConfigError(f"benchmark entry '{self.name}': config must be a path, got {self.config!r}")
        if isinstance(self.overrides, str) or not all(isinstance(item, str) for item in self.overrides):
            raise ConfigError(f"benchmark entry '{self.name}': overrides must be a tuple of 'key=value' strings, got "
                              f"{self.overrides!r}")
        if not all(isinstance(item, Published) for item in self.published):
            raise ConfigError(f"benchmark entry '{self.name}': published must hold zoo.bench.published.Published "
                              f"figures, got {self.published!r}")
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or self.seeds < 1:
            raise ConfigError(f"benchmark entry '{self.name}': seeds must be a whole number >= 1, got {self.seeds!r}")
        object.__setattr__(self, "config", os.fspath(self.config))
        object.__setattr__(self, "overrides", tuple(self.overrides))
        object.__setattr__(self, "published", tuple(self.published))

    def seed_count(self, seeds: int | None) -> int:
        """How many seeds to train and table: ``seeds`` (``--seeds``) where given, else the entry's own."""
        return self.seeds if seeds is None else seeds


# Cheaper evaluations during training than the configs' own: the final evaluation is the runner's.
_EVAL = ("pipeline.eval_episodes=5",)
_FIXED_BUDGET = ("pipeline.stop_return=None",)


def _sac_hopper(kind: str, budget: int) -> tuple[str, ...]:
    # SAC and SAC-ACE differ only in policy.type (sac_ace turns on causal weights and dormancy resets).
    return (f"policy.type={kind}", f"pipeline.max_env_steps={budget}", "pipeline.eval_every=10", *_EVAL)


# In classic and, as the MSE critic's baseline, in hl_gauss: one entry, so one set of runs.
_SAC_PENDULUM = Entry("sac_pendulum", "sac_pendulum.py", (*_EVAL, "pipeline.eval_every=5"), 1.5)
# TD3 at SAC's budget (the issue: the same budget for all three off-policy algorithms).
_TD3_200K = ("pipeline.max_env_steps=200000", "pipeline.eval_every=10", *_EVAL)
# The ace comparison's entries, each env's pair in mujoco too (one set of runs each): SAC and SAC-ACE at each env's
# own config (sac_ace_hopper.py, sac_ace_halfcheetah.py), and on HalfCheetah a third arm, SAC-ACE without its resets,
# to tell the causal weights' effect from the resets'. Minutes: one seed's run here with the compiled step.
# Ten seeds a side: five could not tell the arms apart (CIs of +-1,000 on Hopper).
_ACE_PAIRS = (
    Entry("sac_hopper", "sac_ace_hopper.py", _sac_hopper("sac", 200_000), 30.0, seeds=10),
    Entry("sac_ace_hopper", "sac_ace_hopper.py", _sac_hopper("sac_ace", 200_000), 35.0, seeds=10),
    Entry("sac_halfcheetah", "sac_ace_halfcheetah.py", _sac_hopper("sac", 200_000), 30.0, seeds=10),
    Entry("sac_ace_halfcheetah", "sac_ace_halfcheetah.py", _sac_hopper("sac_ace", 200_000), 35.0, seeds=10),
)
_ACE_NO_RESET = Entry("sac_ace_noreset_halfcheetah", "sac_ace_halfcheetah.py",
                      ("policy.dormant_reset=false", *_sac_hopper("sac_ace", 200_000)), 35.0, seeds=10)

# The memory suite's budget: rl-baselines3-zoo trains its RecurrentPPO for 100k steps; twice that, fixed.
_NOVEL = (*_FIXED_BUDGET, *_EVAL, "pipeline.max_env_steps=200000", "pipeline.eval_every=100")
# The masks suite: the config's own 200k; the unmasked arm differs only in env.action_mask.
_KNAPSACK = (*_EVAL, "pipeline.eval_every=20")
# popgym's RepeatFirstEasy at a fixed 200k (its episodes end with the deck: no stop_return in the config).
_REPEAT = (*_EVAL, "pipeline.max_env_steps=200000", "pipeline.eval_every=100")

BUILTIN_SUITES: dict[str, tuple[Entry, ...]] = {
    "classic": (
        Entry("ppo_cartpole", "ppo_cartpole.py", (*_FIXED_BUDGET, *_EVAL), 0.3),
        Entry("a2c_cartpole", "a2c_cartpole.py", (*_FIXED_BUDGET, *_EVAL), 0.5),
        Entry("dppo_cartpole", "dppo_cartpole.py", (*_FIXED_BUDGET, *_EVAL), 1.0),
        Entry("impala_cartpole", "impala_cartpole.py", (*_FIXED_BUDGET, *_EVAL, "pipeline.eval_every=500"), 1.5),
        Entry("ppo_acrobot", "ppo_acrobot.py", (*_FIXED_BUDGET, *_EVAL), 0.7),
        Entry("ppo_pendulum", "ppo_pendulum.py", (*_EVAL, "pipeline.eval_every=20"), 1.5),
        Entry("a2c_pendulum", "a2c_pendulum.py", _EVAL, 6.0),
        Entry("dppo_pendulum", "dppo_pendulum.py", (*_EVAL, "pipeline.eval_every=20"), 1.0),
        Entry("impala_pendulum", "impala_pendulum.py", (*_EVAL, "pipeline.eval_every=1000"), 6.0),
        _SAC_PENDULUM,
        Entry("sac_ace_pendulum", "sac_ace_pendulum.py", (*_EVAL, "pipeline.eval_every=5"), 2.0),
        Entry("td3_pendulum", "td3_pendulum.py", _EVAL, 6.0),
        Entry("dqn_cartpole", "dqn_cartpole.py", (*_FIXED_BUDGET, *_EVAL), 1.0),
        Entry("dqn_acrobot", "dqn_acrobot.py", (*_FIXED_BUDGET, *_EVAL), 5.0),
    ),
    "mujoco": (
        Entry("ppo_hopper", "ppo_hopper.py", (*_EVAL, "pipeline.eval_every=50"), 10.0),
        Entry("ppo_halfcheetah", "ppo_hopper.py", ("env.id=HalfCheetah-v5", *_EVAL, "pipeline.eval_every=50"), 12.0),
        Entry("ppo_walker2d", "ppo_hopper.py", ("env.id=Walker2d-v5", *_EVAL, "pipeline.eval_every=50"), 12.0),
        *_ACE_PAIRS[:2],
        Entry("td3_hopper", "td3_hopper.py", _TD3_200K, 45.0, seeds=10),  # 10: is its gap to SB3's Hopper's noise?
        *_ACE_PAIRS[2:],
        Entry("td3_halfcheetah", "td3_hopper.py", ("env.id=HalfCheetah-v5", *_TD3_200K), 45.0),
    ),
    "ace": (*_ACE_PAIRS, _ACE_NO_RESET),
    "memory": (  # the same settings, memory or not: CartPole whose observations hold no velocity (docs/memory.md)
        Entry("ppo_lstm_cartpole_novel", "ppo_lstm_cartpole_novel.py", _NOVEL, 3.0),
        Entry("ppo_gru_cartpole_novel", "ppo_lstm_cartpole_novel.py", ("policy.recurrent=gru", *_NOVEL), 5.0),
        Entry("ppo_ff_cartpole_novel", "ppo_lstm_cartpole_novel.py", ("policy.recurrent=none", *_NOVEL), 1.5),
        Entry("ppo_stack4_cartpole_novel", "ppo_lstm_cartpole_novel.py",
              ("policy.recurrent=none", "env.kwargs={'frames': 4}", *_NOVEL), 1.5),
        Entry("ppo_lstm_pendulum_novel", "ppo_lstm_pendulum_novel.py", (*_EVAL, "pipeline.eval_every=20"), 3.0),
        Entry("ppo_ff_pendulum_novel", "ppo_lstm_pendulum_novel.py",
              ("policy.recurrent=none", *_EVAL, "pipeline.eval_every=20"), 1.2),
        Entry("ppo_gru_pendulum_novel", "ppo_lstm_pendulum_novel.py",
              ("policy.recurrent=gru", *_EVAL, "pipeline.eval_every=20"), 3.0),
        Entry("ppo_stack4_pendulum_novel", "ppo_lstm_pendulum_novel.py",
              ("policy.recurrent=none", "env.kwargs={'frames': 4}", *_EVAL, "pipeline.eval_every=20"), 1.2),
        # popgym's RepeatFirstEasy: the first card's suit, said at every step up to 51 steps later (zoo-rl[popgym])
        Entry("ppo_lstm_repeat_first", "ppo_lstm_repeat_first.py", _REPEAT, 2.0),
        Entry("ppo_gru_repeat_first", "ppo_lstm_repeat_first.py", ("policy.recurrent=gru", *_REPEAT), 3.5),
        Entry("ppo_ff_repeat_first", "ppo_lstm_repeat_first.py", ("policy.recurrent=none", *_REPEAT), 1.0),
        Entry("ppo_stack4_repeat_first", "ppo_lstm_repeat_first.py",
              ("policy.recurrent=none", "env.kwargs={'task': 'RepeatFirstEasy', 'frames': 4}", *_REPEAT), 1.0),
    ),
    "hl_gauss": (
        _SAC_PENDULUM,  # the MSE baseline is classic's entry itself: trained once
        Entry("sac_hl_gauss_pendulum", "sac_pendulum.py",
              ("policy.critic_loss=hl_gauss", "policy.hl_gauss_min=-1700.0", "policy.hl_gauss_max=0.0", *_EVAL,
               "pipeline.eval_every=5"), 2.0),
    ),
    "masks": (  # the same PPO with and without the env's action masks (docs/action-masks.md)
        Entry("ppo_masked_knapsack", "ppo_masked_knapsack.py", _KNAPSACK, 0.6),
        Entry("ppo_unmasked_knapsack", "ppo_masked_knapsack.py", ("env.action_mask=none", *_KNAPSACK), 0.5),
    ),
}


def _origin(source: str) -> str:
    if source == BUILTIN_PLUGIN_NAME:
        return "built-in"
    return "set in Python" if source == ASSIGNED_SOURCE else f"of the plugin '{source}'"


def _check(name: str, entries: object, source: str) -> tuple[Entry, ...]:
    """``entries`` of the suite ``name`` as a tuple; one ConfigError line naming the suite and its source when they
    are not a suite, or when an entry shares its name (its runs' folder) with another entry: in the suite, or in a
    suite of another source."""
    if isinstance(entries, str) or not isinstance(entries, tuple | list) or not entries or not all(
            isinstance(entry, Entry) for entry in entries):
        raise ConfigError(f"benchmark suite '{name}' ({_origin(source)}) is not a non-empty tuple of "
                          f"zoo.bench.suites.Entry (got {type(entries).__name__}): fix its register_bench_suites")
    found: dict[str, Entry] = {}
    for entry in entries:
        if found.setdefault(entry.name, entry) != entry:
            raise ConfigError(f"benchmark suite '{name}' ({_origin(source)}) has two different entries named "
                              f"'{entry.name}': rename one")
    for other, other_entries, other_source in SUITE_REGISTRY.items():
        if other_source == source or not isinstance(other_entries, tuple | list):
            continue
        for entry in other_entries:
            if isinstance(entry, Entry) and found.get(entry.name, entry) != entry:
                raise ConfigError(f"entry '{entry.name}' of benchmark suite '{name}' ({_origin(source)}) differs from "
                                  f"the entry of that name in suite '{other}' ({_origin(other_source)}): their runs "
                                  f"would share runs/bench/{entry.name}/; rename one")
    return tuple(entries)


def suite_entries(name: str) -> tuple[Entry, ...]:
    """The entries of the benchmark suite ``name`` (built-in or a plugin's: plugins are loaded first); one line
    listing the known suites for an unknown name (UnknownNameError, a ZooError), or naming the suite and its source
    for one that is not a valid suite (ConfigError)."""
    load_plugins()
    if name not in SUITE_REGISTRY:
        names = SUITE_REGISTRY.names()
        close = difflib.get_close_matches(str(name), names, n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise UnknownNameError(f"unknown benchmark suite '{name}': choose from {', '.join(names) or '(none)'}{hint}")
    return _check(name, SUITE_REGISTRY.get(name), SUITE_REGISTRY.source(name))


def listing(names: list[str] | None = None) -> list[str]:
    """``zoo bench --list``: a header, then one line per suite (``names``, default every one): its name, source
    (``built-in`` or the plugin's name) and entries; a suite that is not valid shows why instead of its entries."""
    load_plugins()
    names = names if names else SUITE_REGISTRY.names()
    rows = [("suite", "source", "entries")]
    for name in names:
        try:
            entries = suite_entries(name)
            what = ", ".join(entry.name for entry in entries)
        except ConfigError as exc:
            what = f"not usable: {exc}"
        rows.append((name, SUITE_REGISTRY.source(name), what))
    width, source_width = (max(len(row[column]) for row in rows) for column in (0, 1))
    return [f"{name:<{width}}  {source:<{source_width}}  {what}" for name, source, what in rows]


class Suites(MutableMapping[str, tuple[Entry, ...]]):
    """Every benchmark suite by name, built-in and plugins' (``SUITES``): a view of the suite registry that loads the
    plugins before it is read. ``SUITES[name]`` is ``suite_entries(name)``. Assigning ``SUITES[name] = entries``
    registers (or replaces) a suite with the source ``"python"``, and ``del SUITES[name]`` removes one: for tests
    and scripts; a plugin registers through its hook, where a name already taken is an error."""

    def __getitem__(self, name: str) -> tuple[Entry, ...]:
        return suite_entries(name)

    def __setitem__(self, name: str, entries: tuple[Entry, ...]) -> None:
        SUITE_REGISTRY.unregister(name)
        SUITE_REGISTRY.register(name, tuple(entries), source=ASSIGNED_SOURCE)

    def __delitem__(self, name: str) -> None:
        if name not in SUITE_REGISTRY:
            raise KeyError(name)
        SUITE_REGISTRY.unregister(name)

    def __iter__(self) -> Iterator[str]:
        load_plugins()
        return iter(SUITE_REGISTRY.names())

    def __len__(self) -> int:
        load_plugins()
        return len(SUITE_REGISTRY)


SUITES = Suites()
