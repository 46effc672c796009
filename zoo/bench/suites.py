"""Benchmark suites: lists of (config, overrides) whose runs together answer one question, declared once here.

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
  LSTM and without memory on PendulumNoVel-v1 (configs/ppo_lstm_pendulum_novel.py, 300k).
- ``hl_gauss``: SAC with the HL-Gauss categorical critic against SAC with the MSE critic on Pendulum-v1 at 20k env
  steps (the sac_pendulum config, whose runs are classic's ``sac_pendulum`` entry; HL-Gauss support [-1700, 0], the
  range of Pendulum's discounted returns).

``est_minutes`` is one seed's wall time here (measured, or estimated from the configs' docstrings) for the
runner's ETA before a run of the entry has finished.
"""

from __future__ import annotations

from dataclasses import dataclass

# Cheaper evaluations during training than the configs' own: the final evaluation is the runner's.
_EVAL = ("pipeline.eval_episodes=5",)
_FIXED_BUDGET = ("pipeline.stop_return=None",)


@dataclass(frozen=True)
class Entry:
    """One configuration of a suite: ``name`` (its directory under the suite), the config file (relative to the
    repository's ``configs/``), ``overrides`` (``--set`` strings), one seed's estimated wall time here and
    ``seeds``, how many seeds (0 .. seeds-1) its protocol asks for (``zoo bench`` trains and tables that many
    unless ``--seeds`` says otherwise; 10 where a comparison needs the power)."""

    name: str
    config: str
    overrides: tuple[str, ...] = ()
    est_minutes: float = 5.0
    seeds: int = 5

    def seed_count(self, seeds: int | None) -> int:
        """How many seeds to train and table: ``seeds`` (``--seeds``) where given, else the entry's own."""
        return self.seeds if seeds is None else seeds


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

SUITES: dict[str, tuple[Entry, ...]] = {
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
    ),
    "hl_gauss": (
        _SAC_PENDULUM,  # the MSE baseline is classic's entry itself: trained once
        Entry("sac_hl_gauss_pendulum", "sac_pendulum.py",
              ("policy.critic_loss=hl_gauss", "policy.hl_gauss_min=-1700.0", "policy.hl_gauss_max=0.0", *_EVAL,
               "pipeline.eval_every=5"), 2.0),
    ),
}
