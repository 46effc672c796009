"""A2C on CartPole-v1 (rl-zoo style: 8 envs x 5 steps, RMSprop). Expected: 100-episode training mean >= 475
(stop_return) within the 500k-step budget."""

config = dict(
    exp_name="a2c_cartpole",
    seed=0,
    env=dict(id="CartPole-v1"),
    policy=dict(
        type="a2c",
        hidden_sizes=[64, 64],
        optimizer="rmsprop",
        learning_rate=7e-4,
        anneal_lr=False,
        gamma=0.99,
        gae_lambda=1.0,
        normalize_advantage=False,
        entropy_coef=0.0,
        value_coef=0.5,
        max_grad_norm=0.5,
    ),
    pipeline=dict(
        num_envs=8,
        rollout_steps=5,
        max_env_steps=500_000,
        stop_return=475.0,
        eval_every=0,
        log_every_s=5.0,
    ),
)
