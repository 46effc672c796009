"""A2C on Pendulum-v1 with rl-baselines3-zoo's settings, gSDE included: 8 envs x 8 steps, RMSprop at 7e-4 annealed,
gamma 0.9, GAE lambda 0.9, value coefficient 0.4, unnormalised advantages, normalised observations and rewards,
generalised state-dependent exploration (``use_sde``, exploration matrices drawn once per rollout) with
``init_log_std=-2`` and torch's default initialisation (rl-zoo: ``log_std_init=-2, ortho_init=False``).

Target: final 10-episode eval IQM over 5 seeds at 1M steps of -200 or better (rl-zoo: -163 +- 103). Measured on
2026-11-25 (last 10-episode eval at 1M, seeds 0-4): -189.6, -180.7, -166.4, -144.1, -175.1, IQM -174.1; about 90 s
a run here alone. Without gSDE (the previous settings: state-independent log-std at -0.5, orthogonal init, value
coefficient 0.5) the bench's final evals had an IQM of -529.5 [-921.6, -339.9] and single seeds swung between -105
and -611 at the end."""

config = dict(
    exp_name="a2c_pendulum",
    seed=0,
    env=dict(id="Pendulum-v1"),
    policy=dict(
        type="a2c",
        hidden_sizes=[64, 64],
        optimizer="rmsprop",
        learning_rate=7e-4,
        anneal_lr=True,
        gamma=0.9,
        gae_lambda=0.9,
        normalize_advantage=False,
        entropy_coef=0.0,
        max_grad_norm=0.5,
        value_coef=0.4,
        use_sde=True,
        init_log_std=-2.0,
        ortho_init=False,
    ),
    pipeline=dict(
        num_envs=8,
        rollout_steps=8,
        max_env_steps=1_000_000,
        normalize_obs=True,
        normalize_reward=True,
        eval_every=500,
        eval_episodes=10,
        log_every_s=5.0,
    ),
)
