"""SAC-ACE on HalfCheetah-v5 (MuJoCo: `pip install 'zoo-rl[mujoco]'`).

ACE's settings (Ji et al. 2024, official code) scaled to a 2-core CPU: networks 256x256 instead of 3 x 1024,
batch 256 instead of 512, and actor/temperature/target updates after every critic update (ACE: every 2nd, which
learned too slowly on Hopper in 100k steps); kept: Adam at 3e-4, gamma 0.99, tau 0.005, causal weights refitted
every 10k env steps on the latest 10k transitions, 10k random steps first, a dormancy-guided reset every 100k
updates, as in ACE.

Budget: this file trains 1M env steps (`pipeline.max_env_steps`). The benchmark suites' `sac_halfcheetah`,
`sac_ace_halfcheetah` and `sac_ace_noreset_halfcheetah` entries (`zoo bench mujoco` and `ace`, zoo/bench/suites.py)
train it for 200k, with 5-episode evaluations every 10 iterations.

Not run to convergence here (1M steps take hours on this CPU): checked to start and learn."""

config = dict(
    exp_name="sac_ace_halfcheetah",
    seed=0,
    env=dict(id="HalfCheetah-v5"),
    policy=dict(
        type="sac_ace",
        hidden_sizes=[256, 256],
        actor_learning_rate=3e-4,
        critic_learning_rate=3e-4,
        alpha_learning_rate=3e-4,
        batch_size=256,
        gamma=0.99,
        tau=0.005,
        actor_update_interval=1,
        target_update_interval=1,
        causal_interval=10_000,
        causal_sample_size=10_000,
        reset_interval=100_000,
        reset_start=5_000,
    ),
    pipeline=dict(
        num_envs=1,
        buffer_size=1_000_000,
        learning_starts=10_000,
        train_freq=1,
        gradient_steps=1,
        steps_per_iteration=1_000,
        max_env_steps=1_000_000,
        eval_every=5,
        eval_episodes=10,
        checkpoint_every=10,
        log_every_s=10.0,
    ),
)
