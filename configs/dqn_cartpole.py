"""DQN on CartPole-v1 with rl-baselines3-zoo's hyper-parameters (hyperparams/dqn.yml, "Almost Tuned"): 256x256
Q-network, Adam 2.3e-3, batches of 64, 128 updates every 256 env steps, target copied every 10 env steps,
epsilon 1 -> 0.04 over the first 16% of 50k steps, Huber loss, gradient norm clipped at 10, no double DQN.

rl-baselines3-zoo reports 500 +- 0 at 50k steps. Measured here, seed 0 (112 s on a shared 2-core CPU, one torch
thread): the final model (50,176 steps) returns 206.3 +- 5.3 over 10 deterministic episodes (zoo eval), the best
model 500 +- 0 (evaluations every 7,168 steps: 109, 127, 241, 500, 360, 500, 206); DQN on CartPole is known to
forget late in training. The 100-episode training mean ends at 193 (epsilon 0.04 included)."""

config = dict(
    exp_name="dqn_cartpole",
    seed=0,
    env=dict(id="CartPole-v1"),
    policy=dict(
        type="dqn",
        hidden_sizes=[256, 256],
        learning_rate=2.3e-3,
        batch_size=64,
        gamma=0.99,
        target_update_interval=10,
        exploration_fraction=0.16,
        exploration_final_eps=0.04,
    ),
    pipeline=dict(
        num_envs=1,
        buffer_size=100_000,
        learning_starts=1_000,
        train_freq=256,
        gradient_steps=128,
        steps_per_iteration=1_024,
        max_env_steps=50_000,
        eval_every=7,
        eval_episodes=10,
    ),
)
