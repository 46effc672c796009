"""DPPO on CartPole-v1: 2 workers, each 8 envs x 32 steps, 10 epochs of two 128-sample minibatches, so that every
update averages the gradients of 256 samples (both workers). Reward scaling is off here: on CartPole it slowed
learning (seed 0: 255 at 200k steps with it); dppo_pendulum.py uses it.

Expected: 100-episode training mean >= 475 (stop_return). Seeds 0-7 reached it in 57k-102k env steps in total
(mean 10.6 s of wall-clock here: slower than PPO with one process on this 2-core machine). With 16 steps and 5
epochs instead, seed 2 stalled near 130 at 200k."""

config = dict(
    exp_name="dppo_cartpole",
    seed=0,
    env=dict(id="CartPole-v1"),
    policy=dict(
        type="dppo",
        hidden_sizes=[64, 64],
        learning_rate=2e-3,
        anneal_lr=True,
        gamma=0.98,
        gae_lambda=0.8,
        clip_ratio=0.2,
        epochs=10,
        minibatch_size=128,
        entropy_coef=0.0,
    ),
    pipeline=dict(
        type="parallel_sync",
        world_size=2,
        num_envs=8,
        rollout_steps=32,
        normalize_obs=False,
        normalize_reward=False,
        max_env_steps=200_000,
        stop_return=475.0,
        eval_every=0,
    ),
)
