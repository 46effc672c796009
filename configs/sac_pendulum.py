"""SAC on Pendulum-v1: 1 env, one gradient update per env step, 64x64 networks (fast on a CPU).

Target: 10-episode eval mean >= -200 within 20k env steps."""

config = dict(
    exp_name="sac_pendulum",
    seed=0,
    env=dict(id="Pendulum-v1"),
    policy=dict(
        type="sac",
        hidden_sizes=[64, 64],
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
        alpha_learning_rate=1e-3,
        batch_size=256,
        gamma=0.99,
        tau=0.005,
        actor_update_interval=2,  # actor and temperature every 2nd critic update (as the ACE code)
    ),
    pipeline=dict(
        num_envs=1,
        buffer_size=20_000,
        learning_starts=1_000,
        train_freq=1,
        gradient_steps=1,
        steps_per_iteration=1_000,
        max_env_steps=20_000,
        eval_every=2,
        eval_episodes=10,
        checkpoint_every=5,
        log_every_s=5.0,
    ),
)
