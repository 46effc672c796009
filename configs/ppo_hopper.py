"""PPO on Hopper-v5 (MuJoCo: pip install 'zoo-rl[mujoco]'), with the usual MuJoCo PPO settings (CleanRL's
ppo_continuous_action: one env, 2048-step rollouts, 10 epochs of 64-sample minibatches, normalised observations and
rewards, learning rate annealed from 3e-4 over 1M steps).

Measured (seed 0, 1M steps, 597 s here, 2026-11-24): eval 968 at 102k, 2373 at 163k, 2695 at 245k, 3532 at 901k,
3535 at 983k; training mean 2871 at the end. (Before the numpy rollout path, 822 s: 1008 at 184k, 2753 at 983k.)
The one-line error without MuJoCo is tested in tests/test_offpolicy.py."""

config = dict(
    exp_name="ppo_hopper",
    seed=0,
    env=dict(id="Hopper-v5"),
    policy=dict(
        type="ppo",
        hidden_sizes=[64, 64],
        learning_rate=3e-4,
        anneal_lr=True,
        gamma=0.99,
        gae_lambda=0.95,
        clip_ratio=0.2,
        epochs=10,
        minibatch_size=64,
        entropy_coef=0.0,
        value_coef=0.5,
        max_grad_norm=0.5,
    ),
    pipeline=dict(
        num_envs=1,
        rollout_steps=2048,
        max_env_steps=1_000_000,
        normalize_obs=True,
        normalize_reward=True,
        eval_every=10,
        eval_episodes=10,
        log_every_s=10.0,
    ),
)
