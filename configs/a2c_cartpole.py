"""A2C on CartPole-v1 (RMSprop, 16 envs x 8 steps, lr 1.5e-3).

Expected: 100-episode training mean >= 475 (stop_return) within the 500k-step budget: seeds 0-7 solved it in
106k-245k steps (median 5.0 s, at most 7.8 s here with one torch thread)."""

config = dict(
    exp_name="a2c_cartpole",
    seed=0,
    env=dict(id="CartPole-v1"),
    policy=dict(
        type="a2c",
        hidden_sizes=[64, 64],
        optimizer="rmsprop",
        learning_rate=1.5e-3,
        anneal_lr=False,
        gamma=0.99,
        gae_lambda=1.0,
        normalize_advantage=False,
        entropy_coef=0.0,
        value_coef=0.5,
        max_grad_norm=0.5,
    ),
    pipeline=dict(
        num_envs=16,
        rollout_steps=8,
        max_env_steps=500_000,
        stop_return=475.0,
        eval_every=0,
        log_every_s=5.0,
    ),
)
