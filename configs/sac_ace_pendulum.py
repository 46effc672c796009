"""SAC-ACE on Pendulum-v1: sac_pendulum's settings plus ACE's causal weights (refitted every 5k env steps, so the
background fits run here; with one action dimension the weight is always 1) and dormancy-guided resets (every
10k updates from 5k on, scaled down from ACE's 100k to fit this budget).

Target: 10-episode eval mean >= -200 within 20k env steps."""

config = dict(
    exp_name="sac_ace_pendulum",
    seed=0,
    env=dict(id="Pendulum-v1"),
    policy=dict(
        type="sac_ace",
        hidden_sizes=[64, 64],
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
        alpha_learning_rate=1e-3,
        batch_size=256,
        gamma=0.99,
        tau=0.005,
        actor_update_interval=2,  # actor and temperature every 2nd critic update (as the ACE code)
        causal_interval=5_000,
        causal_sample_size=5_000,
        reset_interval=10_000,
        reset_start=5_000,
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
