"""PPO on CartPole-v1. Expected: 100-episode training mean >= 475 (stop_return) in ~80-100k env steps
(~8-10 s here, seeds 0-3), and a 10-episode deterministic eval mean of 500."""

config = dict(
    exp_name="ppo_cartpole",
    seed=0,
    env=dict(id="CartPole-v1"),
    policy=dict(
        type="ppo",
        hidden_sizes=[64, 64],
        learning_rate=2e-3,
        anneal_lr=True,
        gamma=0.98,
        gae_lambda=0.8,
        clip_ratio=0.2,
        epochs=5,
        minibatch_size=256,
        entropy_coef=0.0,
    ),
    pipeline=dict(
        num_envs=8,
        rollout_steps=32,
        max_env_steps=200_000,
        stop_return=475.0,
        eval_every=0,
    ),
)
