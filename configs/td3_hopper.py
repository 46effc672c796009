"""TD3 on Hopper-v5 (MuJoCo: `pip install 'zoo-rl[mujoco]'`).

CleanRL's td3_continuous_action and rl-baselines3-zoo's Hopper settings, scaled like sac_ace_hopper.py to a 2-core
CPU: networks 256x256 (CleanRL; rl-zoo 400x300), Adam at 3e-4 for actor and critics, batch 256, gamma 0.99,
tau 0.005, policy delay 2, smoothing noise 0.2 clipped at 0.5, exploration noise 0.1, 10k uniformly random steps
first (rl-zoo; CleanRL 25k), one update per env step, a 100k-step budget instead of 1M.

Seed 0 to 60k here (508 s, one core): 10-episode evals 16 at 5k-10k (random steps), 171, 223, 336 at 25k, then
225-271 up to 250 at 60k, episodes of about 100 steps: learning, slowly; SAC with the same scaling reaches 1000 by
50k. Seed 1 to 50k: 180 at 15k, 233 at 25k, 284 at 50k. Stable-Baselines3's TD3 at the same settings (2.9.2:
256x256, lr 3e-4, batch 256, 10k random steps, noise 0.1), seed 0, side by side: 259 at 15k, 395 at 25k, 305 at
35k, 322 at 50k: the same plateau, so it is TD3 with this budget and noise, not a zoo bug (TD3's deterministic
actor with small Gaussian noise explores Hopper less than SAC's entropy-tuned one early on).

Bench (`zoo bench mujoco --entries td3_hopper`: this file at 200k, 10 seeds, 2026-11-27/28): final evals
627/788/625/3204/501/1271/705/313/2680/412, IQM 753 [516, 1787]; the take-off after the plateau comes late, on some
seeds only. SB3's TD3 at these settings, seeds 0-3 at 200k: 2624/1099/2460/3303 (Mann-Whitney p 0.08 against zoo's 10);
its update matches zoo's to float32 rounding (benchmarks/td3_update_parity.py, retired at commit 720345a). rl-zoo's
benchmark reports TD3 Hopper-v3 3606 at 1M steps."""

config = dict(
    exp_name="td3_hopper",
    seed=0,
    env=dict(id="Hopper-v5"),
    policy=dict(
        type="td3",
        hidden_sizes=[256, 256],
        actor_learning_rate=3e-4,
        critic_learning_rate=3e-4,
        batch_size=256,
        gamma=0.99,
        tau=0.005,
        policy_delay=2,
        policy_noise=0.2,
        noise_clip=0.5,
        exploration_noise=0.1,
    ),
    pipeline=dict(
        num_envs=1,
        buffer_size=1_000_000,
        learning_starts=10_000,
        train_freq=1,
        gradient_steps=1,
        steps_per_iteration=1_000,
        max_env_steps=100_000,
        eval_every=5,
        eval_episodes=10,
        checkpoint_every=10,
        log_every_s=10.0,
    ),
)
