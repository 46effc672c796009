"""A2C on Pendulum-v1 (rl-zoo-like settings without gSDE: 8 envs x 8 steps, RMSprop, normalised obs and reward).

Expected: 10-episode eval mean better than -500 by 1M env steps. A2C is far less sample-efficient than PPO here.
Seed 0, measured: every periodic eval from 640k steps on lay between -145 and -466, and `zoo eval` of the
final model gave -339 +- 418 (some starts are not swung up). About 130 s here."""

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
