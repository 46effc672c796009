"""IMPALA on Pendulum-v1 (continuous): 2 actors x 8 envs, unrolls of 16 steps, the learner updating from 2 unrolls
at a time with only 2 slots in the queue, so the policy lag stays about 1 update; Adam at 2e-3 annealed, an
entropy bonus of 0.01.

Target: final 10-episode deterministic eval IQM over 5 seeds of -200 or better at 1M env steps (about 50 s a run
here alone). Measured 2026-11-25, final model at 1M, 10 deterministic episodes (zoo eval), seeds 0-3 (eval every
1000 updates): learning rate 2e-3: -165.1, -176.5, -164.2, -159.2 (mean -166.2); the previous 1e-3: -217.8, -265.0,
-179.4, -189.0 (mean -212.8; the bench's IQM over 5 seeds was -229.4); 1e-3 with gamma and lambda 0.95: mean -200.1;
1.5e-3 with 0.95: -183.4; 5e-4: about -1000 (still learning at 1M); 1e-3 with log-std starting at -1: -606.5;
unrolls of 32 steps: about -960. Without an entropy bonus, 2e-3 lost seed 4 twice (-702.3 in the bench, -1082.7
again: the Gaussian's entropy fell below 0 while training returns stayed near -750); with 0.01, seeds 0-4: -166.1,
-204.8, -162.5, -129.5, -188.7 (0.001: -205.1, -177.6, -164.1, -141.2, -158.8, its entropy falling to 0.2); the
bench's five seeds: IQM -162.0 [-182.1, -138.7]. With a longer queue (16 slots, lag 3-17) or one unroll per update
(lag 3) the Gaussian mean ran far outside the action bounds and every run stayed near -1500: V-trace's clipped
importance weights do not save an actor-critic from a lag this large on Pendulum (see the README)."""

config = dict(
    exp_name="impala_pendulum",
    seed=0,
    env=dict(id="Pendulum-v1"),
    policy=dict(
        type="impala",
        hidden_sizes=[64, 64],
        learning_rate=2e-3,
        anneal_lr=True,
        gamma=0.9,
        vtrace_lambda=0.9,
        entropy_coef=0.01,
        value_coef=0.5,
        max_grad_norm=0.5,
        reward_scale=0.1,
        init_log_std=-0.5,
    ),
    pipeline=dict(
        type="parallel_async",
        num_actors=2,
        num_envs=8,
        unroll_length=16,
        batch_unrolls=2,
        queue_size=2,
        max_env_steps=1_000_000,
        eval_every=200,
        eval_episodes=10,
        log_every_s=5.0,
    ),
)
