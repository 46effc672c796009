"""A2C on Pendulum-v1 (rl-zoo-like settings without gSDE: 8 envs x 8 steps, RMSprop, normalised obs and reward).

Expected: 10-episode eval mean better than -500 by 1M env steps. A2C is far less sample-efficient than PPO here,
and unstable. Measured on 2026-11-24, after the numpy rollout path changed the float rounding of every run: seed 0
-372 at 992k (every eval from 672k on between -181 and -468), seed 1 -246 (from 672k on between -105 and -539, once
below -500 at 864k); 75-90 s each here. On 2026-11-23, before that change, seed 1 met it (-247 at 992k) but seed 0
did not (-611 at 992k): whether a given seed meets it is down to chance, not to the settings."""

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
        init_log_std=-0.5,
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
