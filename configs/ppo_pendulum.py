"""PPO on Pendulum-v1 (continuous). Target: 10-episode deterministic eval mean >= -250 within 300k env steps.

gSDE tried on 2026-11-25 (``policy.use_sde=true``, ``sde_sample_freq=4`` as rl-zoo's PPO Pendulum, ``init_log_std=-2``),
last evals at 300k over seeds 0-4: -361.7, -161.2, -400.4, -199.3, -158.1 (IQM -240.7) against these settings'
-303.0, -159.6, -146.5, -199.9, -197.1 (IQM -185.5): not kept."""

config = dict(
    exp_name="ppo_pendulum",
    seed=0,
    env=dict(id="Pendulum-v1"),
    policy=dict(
        type="ppo",
        hidden_sizes=[64, 64],
        learning_rate=1e-3,
        anneal_lr=True,
        gamma=0.9,
        gae_lambda=0.95,
        clip_ratio=0.2,
        epochs=10,
        minibatch_size=256,
        entropy_coef=0.0,
        init_log_std=-0.5,
    ),
    pipeline=dict(
        num_envs=4,
        rollout_steps=512,
        max_env_steps=300_000,
        normalize_obs=True,
        normalize_reward=True,
        eval_every=10,
        eval_episodes=10,
        log_every_s=5.0,
    ),
)
