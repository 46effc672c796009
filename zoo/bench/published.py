"""Published reference returns of other libraries for the algorithm x environment pairs that zoo benchmarks.

What this is: a hand-collected table of the numbers that CleanRL, rl-baselines3-zoo (Stable-Baselines3 with the
rl-zoo tuned hyper-parameters) and Tianshou publish for PPO, A2C and SAC on CartPole-v1, Acrobot-v1, Pendulum-v1,
Hopper, HalfCheetah and Walker2d, plus what exists for IMPALA, DPPO and SAC-ACE (the ACE paper, Ji et al.,
ICML 2024). It is context for zoo's own results (``zoo.bench``), not a target: the libraries measure different
things (final deterministic evaluation of one agent, training returns averaged over the last 100 episodes, the
best point of a test-return curve), on different environment versions (MuJoCo v2/v3/v4 against zoo's v5), with
different budgets and hyper-parameters. Every entry says which, in ``measure`` and ``caveats``; compare only like
with like.

How it was collected (2026-11-24): by reading the libraries' own benchmark files through a stored index of public
GitHub repositories and web pages (no live web access, so "the latest" means the latest stored version; the
commit read is given in each ``source``):

- rl-baselines3-zoo: ``benchmark.md`` (DLR-RM/rl-baselines3-zoo, stored version at commit 0088472b). One trained
  agent per pair, evaluated for ~150k steps with the deterministic policy; ``return_std`` is across evaluation
  episodes of that single agent, not across seeds (the file itself says it is not a quantitative benchmark).
- CleanRL: ``docs/rl-algorithms/{ppo,rpo,sac}.md`` (vwxyzjn/cleanrl) and the rendered page
  https://docs.cleanrl.dev/rl-algorithms/ppo/ (for the MuJoCo v4 PPO table, which the markdown includes from a
  file that was not stored). The tables come from openrlbenchmark's ``rlops.py``: per seed, the mean of the last
  100 *training* episodic returns (stochastic policy), then mean and population std (ddof=0) across seeds.
- Tianshou: ``examples/mujoco/README.md`` (thu-ml/tianshou, commit 1da9b86). Per the README's footnote, each
  value is the *maximum over training* of the average test return (10 test episodes per evaluation), mean and std
  across 10 seeds, within the first 1M (or 3M) env steps, on gym 0.17.3 MuJoCo v3 environments.
- ACE: the official repository (jity16/ACE-Off-Policy-Actor-Critic-with-Causality-Aware-Entropy-Regularization)
  and the arXiv abstract 2402.14528; no numeric MuJoCo table was found (see the entries).

A pair that a library does not publish is recorded with ``return_mean=None`` so that a reader knows it was looked
for. ``published_for`` matches environments across versions ("Hopper-v5" also returns Hopper-v4/v3/v2 entries,
each flagged by its own ``env_id``) and algorithms by name regardless of case and of "-" versus "_".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["PUBLISHED", "Published", "env_family", "published_for"]


@dataclass(frozen=True)
class Published:
    """One published figure (or the record that none is published) for an algorithm on an environment.

    ``library``: who published it; ``algorithm``: zoo's name for the algorithm ("ppo", "a2c", "sac", "impala",
    "dppo", "sac_ace"); ``env_id``: the environment id *as published* (version included; "-v*" where nothing was
    found in any version); ``return_mean`` / ``return_std``: the published numbers (None where unknown or not
    published); ``seeds``: independent training runs behind the number; ``budget_steps``: environment steps of
    training; ``measure``: what the number is; ``source``: where it was read (repository, path, commit or URL);
    ``caveats``: what makes it not directly comparable.

    Examples:
        >>> figure = Published("MyLib", "ppo", "CartPole-v1", return_mean=498.0, return_std=3.5, seeds=5,
        ...                    budget_steps=500_000, measure="mean of the last 100 training returns",
        ...                    source="mylib docs/ppo.md @ 1a2b3c", caveats="stochastic policy")
        >>> looked = Published("MyLib", "ppo", "Hopper-v*", None, None, None, None, "not published", "mylib docs", "")
        >>> figure.is_published, looked.is_published  # a pair looked for and not found is recorded too
        (True, False)
    """

    library: str
    algorithm: str
    env_id: str
    return_mean: float | None
    return_std: float | None
    seeds: int | None
    budget_steps: int | None
    measure: str
    source: str
    caveats: str

    @property
    def is_published(self) -> bool:
        """Whether a number exists (False for the explicit "not published" records)."""
        return self.return_mean is not None


_CLEANRL = "CleanRL"
_ZOO = "rl-baselines3-zoo (SB3)"
_TIANSHOU = "Tianshou"
_ACE = "ACE paper (Ji et al., ICML 2024)"

_NOT_PUBLISHED = "not published"

# rl-baselines3-zoo -----------------------------------------------------------------------------------------------
_ZOO_SRC = (
    "DLR-RM/rl-baselines3-zoo benchmark.md @ 0088472b8cb622732bdbc4aa3d0d0abde86c67ed "
    "(https://github.com/DLR-RM/rl-baselines3-zoo/blob/master/benchmark.md)"
)
_ZOO_MEASURE = (
    "final evaluation of one trained agent: mean and std over evaluation episodes (~150k eval steps), "
    "deterministic policy (`python -m utils.benchmark`)"
)
_ZOO_BASE = (
    "one training run only (the file says it is not a quantitative benchmark); std is across eval episodes of "
    "that one agent, not across seeds; rl-zoo tuned hyper-parameters (hyperparams/*.yml), not library defaults"
)
_ZOO_MUJOCO = _ZOO_BASE + "; MuJoCo v3 (gym/mujoco-py), not v4/v5: no v4/v5 rows in the stored benchmark.md"
_ZOO_PENDULUM = (
    _ZOO_BASE + "; labelled Pendulum-v1 in the root benchmark.md but the same numbers appear as Pendulum-v0 in "
    "logs/benchmark/benchmark.md (a relabel, probably not a re-run)"
)

# CleanRL ---------------------------------------------------------------------------------------------------------
_CLEANRL_MEASURE = (
    "training episodic return (stochastic policy): per seed the mean of the last 100 training episodes "
    "(openrlbenchmark rlops.py metric_last_n_average_window=100), then mean and std (ddof=0) across seeds"
)
_CLEANRL_PPO_SRC = (
    "vwxyzjn/cleanrl docs/rl-algorithms/ppo.md @ 7a96de22014e13dfb0dbf35b17157a1d9d9c7431 "
    "(https://docs.cleanrl.dev/rl-algorithms/ppo/#ppopy); seeds from benchmark/ppo.sh (--num-seeds 3)"
)
_CLEANRL_PPO_CLASSIC = (
    "ppo.py defaults (4 envs, 128 steps, lr 2.5e-4 annealed); training returns, not a separate evaluation; "
    "an older ppo.md (commit 04d2c479) showed 488.75 +/- 18.40 (CartPole-v1) and -82.48 +/- 5.93 (Acrobot-v1)"
)
_CLEANRL_PPO_MUJOCO_SRC = (
    "https://docs.cleanrl.dev/rl-algorithms/ppo/#ppo_continuous_actionpy (stored copy downloaded 2026-04-06; "
    "table 'openrlbenchmark/cleanrl/ppo_continuous_action', tag pr-424, included from "
    "benchmark/ppo_continuous_action.md); seeds from benchmark/ppo.sh (--num-seeds 3)"
)
_CLEANRL_PPO_MUJOCO = (
    "MuJoCo v4 (gymnasium), not v5; ppo_continuous_action.py defaults (1 env, 2048 steps, obs/reward "
    "normalisation, 1M steps); training returns (stochastic policy) averaged over the last 100 episodes"
)
_CLEANRL_RPO_SRC = (
    "vwxyzjn/cleanrl docs/rl-algorithms/rpo.md @ f315b7c85f1a73d3524528584978bb6a4d89f60d "
    "(https://docs.cleanrl.dev/rl-algorithms/rpo/#experiment-results), column "
    "'ppo_continuous_action_8M (tag v1.0.0-13-gcbd83f6)'"
)
_CLEANRL_RPO = (
    "PPO baseline of the RPO comparison: ppo_continuous_action.py defaults trained for 8M steps (not 1M), "
    "10 seeds; training returns averaged over the last 100 episodes"
)
_CLEANRL_SAC_SRC = (
    "vwxyzjn/cleanrl docs/rl-algorithms/sac.md @ 71eb95f027aa2245b593631e25e78df9d53cc488 "
    "(https://docs.cleanrl.dev/rl-algorithms/sac/#experiment-results); seeds from benchmark/sac.sh (--num-seeds 3)"
)
_CLEANRL_SAC = (
    "MuJoCo v2 (mujoco-py), not v4/v5; sac_continuous_action.py defaults (1M steps, batch 256, policy lr 3e-4, "
    "q lr 1e-3, autotuned alpha); the docs stress these are *training* returns while the SAC paper's are "
    "deterministic evaluation returns"
)
_CLEANRL_LOOKED = (
    "vwxyzjn/cleanrl docs/rl-algorithms/*.md and benchmark/*.sh (no such script or table; "
    "IMPALA exists only in the separate vwxyzjn/cleanba repository, for Atari)"
)

# Tianshou --------------------------------------------------------------------------------------------------------
_TIANSHOU_SRC = (
    "thu-ml/tianshou examples/mujoco/README.md @ 1da9b86cbaca85959a396abe999593cb565d3670 "
    "(https://github.com/thu-ml/tianshou/tree/master/examples/mujoco)"
)
_TIANSHOU_MEASURE = (
    "max over training of the mean test return (10 test episodes per evaluation), then mean and std across "
    "10 seeds (README footnote 5, TD3-paper protocol)"
)
_TIANSHOU_BASE = (
    "maximum of the test curve, optimistic against a final-return figure; MuJoCo v3 on gym 0.17.3 / mujoco 2.0 "
    "(footnote 3), not v4/v5; hyper-parameters follow ikostrikov/pytorch-a2c-ppo-acktr-gail (on-policy) or "
    "SpinningUp (off-policy)"
)
_TIANSHOU_ONPOLICY = (
    _TIANSHOU_BASE + "; the benchmark scripts pass no deterministic-evaluation option, so test episodes sample "
    "from the Gaussian policy (checked for mujoco_ppo.py @ 6426a397)"
)
_TIANSHOU_SAC = _TIANSHOU_BASE + "; SAC tests the deterministic (mean) action (README hint 4)"
_TIANSHOU_LOOKED = (
    "thu-ml/tianshou README.md, docs benchmark page, examples/*/README.md (benchmark tables exist only for "
    "MuJoCo and Atari; classic-control scripts under test/ only assert a pass threshold)"
)

# ACE -------------------------------------------------------------------------------------------------------------
_ACE_SRC = (
    "arXiv 2402.14528 (abstract, https://arxiv.org/abs/2402.14528); "
    "github.com/jity16/ACE-Off-Policy-Actor-Critic-with-Causality-Aware-Entropy-Regularization "
    "(README, utilis/default_config.py @ 6c3ca2be, issue #3)"
)
_ACE_CAVEAT = (
    "the paper compares ACE with model-free baselines on four MuJoCo locomotion tasks (project page "
    "https://ace-rl.github.io/); the abstract and project page give no numbers and the paper's result figures and "
    "tables were not readable in the stored copies, so no number is recorded (read them off the paper by hand if "
    "needed). The official code defaults to 1M steps, 10 evaluation episodes, batch 512, hidden 1024; the "
    "authors refer to Walker2d-v2 runs in issue #3, i.e. MuJoCo v2, not v5"
)


def _not_published(library: str, algorithm: str, env_id: str, source: str, caveats: str) -> Published:
    """A record that ``library`` publishes no number for ``algorithm`` on ``env_id`` (looked in ``source``)."""
    return Published(library, algorithm, env_id, None, None, None, None, _NOT_PUBLISHED, source, caveats)


_CLASSIC = ("CartPole-v1", "Acrobot-v1", "Pendulum-v1")
_MUJOCO_ANY = ("Hopper-v*", "HalfCheetah-v*", "Walker2d-v*")

PUBLISHED: tuple[Published, ...] = (
    # ---- PPO ----------------------------------------------------------------------------------------------------
    Published(_CLEANRL, "ppo", "CartPole-v1", 490.04, 6.12, 3, 500_000, _CLEANRL_MEASURE, _CLEANRL_PPO_SRC,
              _CLEANRL_PPO_CLASSIC),
    Published(_CLEANRL, "ppo", "Acrobot-v1", -86.36, 1.32, 3, 500_000, _CLEANRL_MEASURE, _CLEANRL_PPO_SRC,
              _CLEANRL_PPO_CLASSIC),
    Published(_CLEANRL, "ppo", "Pendulum-v1", -1141.98, 135.55, 10, 8_000_000, _CLEANRL_MEASURE, _CLEANRL_RPO_SRC,
              _CLEANRL_RPO + "; default PPO fails on Pendulum-v1 here (RPO reaches -151.08 +/- 3.73); no 1M-step "
              "CleanRL PPO Pendulum figure is published"),
    Published(_CLEANRL, "ppo", "Hopper-v4", 2382.86, 271.74, 3, 1_000_000, _CLEANRL_MEASURE,
              _CLEANRL_PPO_MUJOCO_SRC, _CLEANRL_PPO_MUJOCO),
    Published(_CLEANRL, "ppo", "HalfCheetah-v4", 1442.64, 46.03, 3, 1_000_000, _CLEANRL_MEASURE,
              _CLEANRL_PPO_MUJOCO_SRC, _CLEANRL_PPO_MUJOCO),
    Published(_CLEANRL, "ppo", "Walker2d-v4", 2287.95, 571.78, 3, 1_000_000, _CLEANRL_MEASURE,
              _CLEANRL_PPO_MUJOCO_SRC, _CLEANRL_PPO_MUJOCO),
    Published(_CLEANRL, "ppo", "Hopper-v4", 2741.42, 269.11, 10, 8_000_000, _CLEANRL_MEASURE, _CLEANRL_RPO_SRC,
              _CLEANRL_RPO + "; a second table of the same runs on the same page reads 2761.77 +/- 286.88"),
    Published(_CLEANRL, "ppo", "HalfCheetah-v4", 2637.19, 1068.49, 10, 8_000_000, _CLEANRL_MEASURE,
              _CLEANRL_RPO_SRC,
              _CLEANRL_RPO + "; a second table of the same runs on the same page reads 2667.34 +/- 1109.99"),
    Published(_CLEANRL, "ppo", "Walker2d-v4", 2872.92, 690.53, 10, 8_000_000, _CLEANRL_MEASURE, _CLEANRL_RPO_SRC,
              _CLEANRL_RPO),
    Published(_ZOO, "ppo", "CartPole-v1", 500.0, 0.0, 1, 100_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_BASE + "; 300 eval episodes"),
    Published(_ZOO, "ppo", "CartPoleNoVel-v1", 500.0, 0.0, 1, 100_000, _ZOO_MEASURE,
              "the sb3/ppo_lstm-CartPoleNoVel-v1 model card (rl-baselines3-zoo's RecurrentPPO agent on the Hugging "
              "Face hub), stored in Wenxin-Jiang/CS577-NLP project/model_cards/_noArch/"
              "sb3_ppo_lstm-CartPoleNoVel-v1_README.md",
              "sb3-contrib's RecurrentPPO (MlpLstmPolicy: an LSTM), not feed-forward PPO; one agent; not in the "
              "stored benchmark.md; 8 envs x 32 steps, 20 epochs, batch 256, lr and clip annealed from 1e-3 and "
              "0.2, gamma 0.98, lambda 0.8, VecNormalize; velocities dropped (2-D observations)"),
    Published(_ZOO, "ppo", "PendulumNoVel-v1", None, None, None, None, _NOT_PUBLISHED, _ZOO_SRC,
              "no RecurrentPPO row for PendulumNoVel-v1 in the stored benchmark.md nor a stored model card"),
    Published(_ZOO, "ppo", "Acrobot-v1", -73.506, 18.201, 1, 1_000_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_BASE + "; 2013 eval episodes"),
    Published(_ZOO, "ppo", "Pendulum-v1", -172.225, 104.159, 1, 100_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_PENDULUM + "; 750 eval episodes; an older benchmark.md (commit 02a1a901) had "
              "Pendulum-v0 -169.887 +/- 104.904 at 2M steps"),
    Published(_ZOO, "ppo", "Hopper-v3", 2410.435, 10.026, 1, 1_000_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_MUJOCO + "; 150 eval episodes"),
    Published(_ZOO, "ppo", "HalfCheetah-v3", 5819.099, 663.530, 1, 1_000_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_MUJOCO + "; 150 eval episodes"),
    Published(_ZOO, "ppo", "Walker2d-v3", 3478.798, 821.708, 1, 1_000_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_MUJOCO + "; 171 eval episodes"),
    Published(_TIANSHOU, "ppo", "Hopper-v3", 2609.3, 700.8, 10, 1_000_000, _TIANSHOU_MEASURE, _TIANSHOU_SRC,
              _TIANSHOU_ONPOLICY + "; first 1M steps of 3M-step runs"),
    Published(_TIANSHOU, "ppo", "HalfCheetah-v3", 5783.9, 1244.0, 10, 1_000_000, _TIANSHOU_MEASURE, _TIANSHOU_SRC,
              _TIANSHOU_ONPOLICY + "; first 1M steps of 3M-step runs"),
    Published(_TIANSHOU, "ppo", "Walker2d-v3", 3588.5, 756.6, 10, 1_000_000, _TIANSHOU_MEASURE, _TIANSHOU_SRC,
              _TIANSHOU_ONPOLICY + "; first 1M steps of 3M-step runs"),
    Published(_TIANSHOU, "ppo", "Hopper-v3", 3127.7, 413.0, 10, 3_000_000, _TIANSHOU_MEASURE, _TIANSHOU_SRC,
              _TIANSHOU_ONPOLICY),
    Published(_TIANSHOU, "ppo", "HalfCheetah-v3", 7337.4, 1508.2, 10, 3_000_000, _TIANSHOU_MEASURE, _TIANSHOU_SRC,
              _TIANSHOU_ONPOLICY),
    Published(_TIANSHOU, "ppo", "Walker2d-v3", 4895.6, 704.3, 10, 3_000_000, _TIANSHOU_MEASURE, _TIANSHOU_SRC,
              _TIANSHOU_ONPOLICY),
    *(_not_published(_TIANSHOU, "ppo", env, _TIANSHOU_LOOKED, "no classic-control benchmark table")
      for env in _CLASSIC),
    # ---- A2C ----------------------------------------------------------------------------------------------------
    *(_not_published(_CLEANRL, "a2c", env, _CLEANRL_LOOKED, "CleanRL has no A2C implementation or benchmark")
      for env in _CLASSIC + _MUJOCO_ANY),
    Published(_ZOO, "a2c", "CartPole-v1", 500.0, 0.0, 1, 500_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_BASE + "; 300 eval episodes"),
    Published(_ZOO, "a2c", "Acrobot-v1", -83.353, 17.213, 1, 500_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_BASE + "; 1778 eval episodes"),
    Published(_ZOO, "a2c", "Pendulum-v1", -162.965, 103.210, 1, 1_000_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_PENDULUM + "; 750 eval episodes"),
    Published(_ZOO, "a2c", "Hopper-v3", 733.454, 376.574, 1, 1_000_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_MUJOCO + "; 580 eval episodes"),
    Published(_ZOO, "a2c", "HalfCheetah-v3", 3041.174, 157.265, 1, 1_000_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_MUJOCO + "; 150 eval episodes"),
    _not_published(_ZOO, "a2c", "Walker2d-v*", _ZOO_SRC,
                   "benchmark.md has A2C only on Walker2DBulletEnv-v0 (PyBullet, 858.209 +/- 333.116 at 2M), "
                   "a different environment"),
    Published(_TIANSHOU, "a2c", "Hopper-v3", 1253.2, 458.0, 10, 1_000_000, _TIANSHOU_MEASURE, _TIANSHOU_SRC,
              _TIANSHOU_ONPOLICY),
    Published(_TIANSHOU, "a2c", "HalfCheetah-v3", 1829.9, 1068.3, 10, 1_000_000, _TIANSHOU_MEASURE, _TIANSHOU_SRC,
              _TIANSHOU_ONPOLICY),
    Published(_TIANSHOU, "a2c", "Walker2d-v3", 1091.6, 709.2, 10, 1_000_000, _TIANSHOU_MEASURE, _TIANSHOU_SRC,
              _TIANSHOU_ONPOLICY),
    Published(_TIANSHOU, "a2c", "Hopper-v3", 1608.6, 529.5, 10, 3_000_000, _TIANSHOU_MEASURE, _TIANSHOU_SRC,
              _TIANSHOU_ONPOLICY),
    Published(_TIANSHOU, "a2c", "HalfCheetah-v3", 2377.3, 1363.7, 10, 3_000_000, _TIANSHOU_MEASURE, _TIANSHOU_SRC,
              _TIANSHOU_ONPOLICY),
    Published(_TIANSHOU, "a2c", "Walker2d-v3", 1805.4, 1055.9, 10, 3_000_000, _TIANSHOU_MEASURE, _TIANSHOU_SRC,
              _TIANSHOU_ONPOLICY),
    *(_not_published(_TIANSHOU, "a2c", env, _TIANSHOU_LOOKED, "no classic-control benchmark table")
      for env in _CLASSIC),
    # ---- SAC ----------------------------------------------------------------------------------------------------
    _not_published(_CLEANRL, "sac", "Pendulum-v1", _CLEANRL_SAC_SRC,
                   "the SAC docs benchmark MuJoCo only (and Atari for sac_atari.py)"),
    Published(_CLEANRL, "sac", "Hopper-v2", 2310.46, 342.82, 3, 1_000_000, _CLEANRL_MEASURE, _CLEANRL_SAC_SRC,
              _CLEANRL_SAC),
    Published(_CLEANRL, "sac", "HalfCheetah-v2", 9634.89, 1423.73, 3, 1_000_000, _CLEANRL_MEASURE,
              _CLEANRL_SAC_SRC, _CLEANRL_SAC),
    Published(_CLEANRL, "sac", "Walker2d-v2", 3591.45, 911.33, 3, 1_000_000, _CLEANRL_MEASURE, _CLEANRL_SAC_SRC,
              _CLEANRL_SAC),
    Published(_ZOO, "sac", "Pendulum-v1", -156.995, 88.714, 1, 20_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_PENDULUM + "; 750 eval episodes"),
    Published(_ZOO, "td3", "Pendulum-v1", -151.855, 90.227, 1, 20_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_PENDULUM + "; 750 eval episodes"),
    Published(_ZOO, "td3", "Hopper-v3", 3606.390, 4.027, 1, 1_000_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_MUJOCO + "; 150 eval episodes"),
    Published(_ZOO, "td3", "HalfCheetah-v3", 9655.666, 969.916, 1, 1_000_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_MUJOCO + "; 150 eval episodes"),
    Published(_ZOO, "dqn", "CartPole-v1", 500.0, 0.0, 1, 50_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_BASE + "; 300 eval episodes"),
    Published(_ZOO, "dqn", "Acrobot-v1", -76.639, 11.752, 1, 100_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_BASE + "; 1932 eval episodes"),
    Published(_ZOO, "sac", "Hopper-v3", 2325.547, 1129.676, 1, 1_000_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_MUJOCO + "; 236 eval episodes (the large std: the agent sometimes falls early)"),
    Published(_ZOO, "sac", "HalfCheetah-v3", 9535.451, 100.470, 1, 1_000_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_MUJOCO + "; 150 eval episodes"),
    Published(_ZOO, "sac", "Walker2d-v3", 3863.203, 254.347, 1, 1_000_000, _ZOO_MEASURE, _ZOO_SRC,
              _ZOO_MUJOCO + "; 150 eval episodes"),
    _not_published(_TIANSHOU, "sac", "Pendulum-v1", _TIANSHOU_LOOKED, "no classic-control benchmark table"),
    Published(_TIANSHOU, "sac", "Hopper-v3", 3542.2, 51.5, 10, 1_000_000, _TIANSHOU_MEASURE, _TIANSHOU_SRC,
              _TIANSHOU_SAC),
    Published(_TIANSHOU, "sac", "HalfCheetah-v3", 12138.8, 1049.3, 10, 1_000_000, _TIANSHOU_MEASURE,
              _TIANSHOU_SRC, _TIANSHOU_SAC),
    Published(_TIANSHOU, "sac", "Walker2d-v3", 5007.0, 251.5, 10, 1_000_000, _TIANSHOU_MEASURE, _TIANSHOU_SRC,
              _TIANSHOU_SAC),
    # ---- SAC-ACE ------------------------------------------------------------------------------------------------
    *(_not_published(_ACE, "sac_ace", env, _ACE_SRC, _ACE_CAVEAT) for env in _MUJOCO_ANY),
    *(_not_published(lib, "sac_ace", env, src, "the library has no ACE / causality-aware entropy implementation")
      for lib, src in ((_CLEANRL, _CLEANRL_LOOKED), (_ZOO, _ZOO_SRC), (_TIANSHOU, _TIANSHOU_LOOKED))
      for env in ("Pendulum-v1", *_MUJOCO_ANY)),
    # ---- IMPALA and DPPO ----------------------------------------------------------------------------------------
    *(_not_published(lib, "impala", env, src,
                     "the library has no IMPALA benchmark; IMPALA results on classic control are rarely published "
                     "anywhere (IMPALA papers and CleanRL's cleanba report Atari / DMLab)")
      for lib, src in ((_CLEANRL, _CLEANRL_LOOKED), (_ZOO, _ZOO_SRC), (_TIANSHOU, _TIANSHOU_LOOKED))
      for env in _CLASSIC),
    *(_not_published(lib, "dppo", env, src,
                     "the library has no distributed PPO (DPPO) benchmark; compare zoo's DPPO with the PPO rows "
                     "(same objective, different data collection)")
      for lib, src in ((_CLEANRL, _CLEANRL_LOOKED), (_ZOO, _ZOO_SRC), (_TIANSHOU, _TIANSHOU_LOOKED))
      for env in _CLASSIC),
)
"""Every collected figure and every explicit "not published" record (see the module docstring)."""

_VERSION = re.compile(r"-v(\d+|\*)$")


def env_family(env_id: str) -> str:
    """``env_id`` without its version suffix, lower-cased: "Hopper-v5" and "Hopper-v*" -> "hopper"."""
    return _VERSION.sub("", env_id.strip()).lower()


def _algorithm_key(algorithm: str) -> str:
    """Normalise an algorithm name: "SAC-ACE", "sac_ace" and "Sac-Ace" -> "sac_ace"."""
    return algorithm.strip().lower().replace("-", "_")


def published_for(algorithm: str, env_id: str) -> list[Published]:
    """The entries of ``PUBLISHED`` for ``algorithm`` on any version of ``env_id``'s environment.

    "Hopper-v5" also returns Hopper-v4/v3/v2 entries (each keeps its own ``env_id``, so check it before comparing)
    and the "-v*" "not published" records. Entries for exactly ``env_id`` come first, then the others in table
    order; an empty list means the pair was not looked at.
    """
    key, family = _algorithm_key(algorithm), env_family(env_id)
    found = [p for p in PUBLISHED if p.algorithm == key and env_family(p.env_id) == family]
    return sorted(found, key=lambda p: p.env_id != env_id)
