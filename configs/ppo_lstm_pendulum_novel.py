"""PPO with an LSTM on Pendulum without its angular velocity (PendulumNoVel-v1: cos and sin of the angle only), at
configs/ppo_pendulum.py's settings (4 envs x 512 steps, 10 epochs of 256-sample minibatches, lr 1e-3 annealed, gamma
0.9, normalised observations and rewards) with an LSTM of 64 for each of actor and critic, 64-unit heads and chunks
of 16 steps.

Seed 0 at 300k steps: a 100-episode training mean of -340 (160 s here), where feed-forward PPO at the same settings
reached -1,167 (the velocity must be inferred from two angles); `zoo bench memory` has 5 seeds of each."""

config = dict(
    exp_name="ppo_lstm_pendulum_novel",
    seed=0,
    env=dict(id="PendulumNoVel-v1"),
    policy=dict(
        type="ppo",
        recurrent="lstm",
        recurrent_size=64,
        sequence_length=16,
        hidden_sizes=[64],
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
        eval_every=0,
    ),
)
