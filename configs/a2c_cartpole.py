"""A2C on CartPole-v1 (RMSprop, 16 envs x 8 steps, lr 3e-3).

Expected: 100-episode training mean >= 475 (stop_return) within the 500k-step budget: seeds 0-15 solved it in
74k-174k steps, seeds 16-31 in 59k-147k (mean 1.5-2.0 s of training here, two seeds at a time). With lr 1.5e-3
seeds 0-15 took 67k-245k (median about 140k); 4e-3 and 5e-3 were less even across seeds."""

config = dict(
    exp_name="a2c_cartpole",
    seed=0,
    env=dict(id="CartPole-v1"),
    policy=dict(
        type="a2c",
        hidden_sizes=[64, 64],
        optimizer="rmsprop",
        learning_rate=3e-3,
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
