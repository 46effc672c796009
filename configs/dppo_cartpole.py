"""DPPO on CartPole-v1: 2 workers, each 8 envs x 16 steps and one 128-sample minibatch per epoch, so that every
update averages the gradients of 256 samples, as in ppo_cartpole.py; rewards scaled by the running return std
merged across workers.

Expected: 100-episode training mean >= 475 (stop_return)."""

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
        epochs=5,
        minibatch_size=128,
        entropy_coef=0.0,
    ),
    pipeline=dict(
        type="parallel_sync",
        world_size=2,
        num_envs=8,
        rollout_steps=16,
        normalize_obs=False,
        normalize_reward=True,
        max_env_steps=200_000,
        stop_return=475.0,
        eval_every=0,
    ),
)
