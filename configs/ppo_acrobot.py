"""PPO on Acrobot-v1. Expected: 100-episode training mean >= -100 (stop_return) within 200k env steps."""

config = dict(
    exp_name="ppo_acrobot",
    seed=0,
    env=dict(id="Acrobot-v1"),
    policy=dict(
        type="ppo",
        hidden_sizes=[64, 64],
        learning_rate=1e-3,
        gamma=0.99,
        gae_lambda=0.94,
        epochs=4,
        minibatch_size=256,
        entropy_coef=0.0,
    ),
    pipeline=dict(
        num_envs=16,
        rollout_steps=256,
        max_env_steps=200_000,
        normalize_obs=True,
        stop_return=-100.0,
        eval_every=0,
        log_every_s=5.0,
    ),
)
