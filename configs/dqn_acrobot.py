"""DQN on Acrobot-v1 with rl-baselines3-zoo's hyper-parameters (hyperparams/dqn.yml, "Tuned"): 256x256 Q-network,
Adam 6.3e-4, batches of 128, 4 updates every 4 env steps (rl-zoo's gradient_steps -1 with one env), target copied
every 250 env steps, epsilon 1 -> 0.1 over the first 12% of 100k steps, learning from the first step, Huber loss.

rl-baselines3-zoo reports -76.6 +- 11.8 at 100k steps. Measured here, seed 0 (261 s on a shared 2-core CPU, one
torch thread): the final model returns -80.0 +- 8.2 over 10 deterministic episodes (zoo eval); the in-run
evaluations every 10k steps read -500, -119.6, -210.5, -78.3, -77.4, -80.2, -300.5, -79.7, -82.9, -75.7.

Five seeds (0-4, final model, 10 deterministic episodes, zoo's bench protocol, on a 16-core machine lent for this
check): -141.9, -79.2, -67.8, -79.3, -76.0; IQM -78.2 [-121.0, -71.6], mean -88.8 +- 26.9 (seed 0 ended on a bad
last stretch: its best model returns -76.6). rl-zoo's -76.6 lies inside the IQM's CI."""

config = dict(
    exp_name="dqn_acrobot",
    seed=0,
    env=dict(id="Acrobot-v1"),
    policy=dict(
        type="dqn",
        hidden_sizes=[256, 256],
        learning_rate=6.3e-4,
        batch_size=128,
        gamma=0.99,
        target_update_interval=250,
        exploration_fraction=0.12,
        exploration_final_eps=0.1,
    ),
    pipeline=dict(
        num_envs=1,
        buffer_size=50_000,
        learning_starts=0,
        train_freq=4,
        gradient_steps=4,
        steps_per_iteration=1_000,
        max_env_steps=100_000,
        eval_every=10,
        eval_episodes=10,
    ),
)
