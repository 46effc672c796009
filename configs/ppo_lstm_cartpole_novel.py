"""PPO with an LSTM on CartPole without velocities (CartPoleNoVel-v1: the cart's position and the pole's angle only),
at rl-baselines3-zoo's RecurrentPPO settings for this task (8 envs x 32 steps, 20 epochs of 256-sample minibatches,
lr 1e-3 and clip 0.2 annealed, gamma 0.98, lambda 0.8, normalised observations and rewards, an LSTM of 64 for each
of actor and critic, 64-unit ReLU heads).

Expected: a 100-episode training mean near 475 within 200k steps (stop_return 475; `zoo bench memory` has 5 seeds
at a fixed 200k, docs/benchmarks.md), where feed-forward PPO at the same settings stays near 50 (a single frame holds
no velocity). Seeds 0-1 at a 100k budget: 333 and 449."""

config = dict(
    exp_name="ppo_lstm_cartpole_novel",
    seed=0,
    env=dict(id="CartPoleNoVel-v1"),
    policy=dict(
        type="ppo",
        recurrent="lstm",
        recurrent_size=64,
        sequence_length=32,
        hidden_sizes=[64],
        activation="relu",
        ortho_init=False,
        learning_rate=1e-3,
        anneal_lr=True,
        anneal_clip=True,
        gamma=0.98,
        gae_lambda=0.8,
        clip_ratio=0.2,
        epochs=20,
        minibatch_size=256,
        entropy_coef=0.0,
    ),
    pipeline=dict(
        num_envs=8,
        rollout_steps=32,
        normalize_obs=True,
        normalize_reward=True,
        max_env_steps=200_000,
        stop_return=475.0,
        eval_every=0,
    ),
)
