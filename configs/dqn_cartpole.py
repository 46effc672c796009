"""DQN on CartPole-v1 with rl-baselines3-zoo's hyper-parameters (hyperparams/dqn.yml, "Almost Tuned"): 256x256
Q-network, Adam 2.3e-3, batches of 64, 128 updates every 256 env steps, target copied every 10 env steps,
epsilon 1 -> 0.04 over the first 16% of 50k steps, Huber loss, gradient norm clipped at 10, no double DQN.

rl-baselines3-zoo reports 500 +- 0 at 50k steps. Measured here (50,176 steps, 40-61 s each on a shared 2-core CPU,
one torch thread), the final model's return over 10 deterministic episodes (zoo eval): seed 0 500 +- 0, seed 1
500 +- 0, seed 2 397.4 +- 150.6; every seed's best model (evaluations every 7,168 steps) 500 +- 0. DQN on CartPole
forgets and relearns late in training: with the actor-critics' orthogonal init the same seeds ended at 206, 500
and 144.

Five seeds (0-4, final model, 10 deterministic episodes on evaluation seeds, one process per core of a 16-core
machine lent for this check; zoo's bench protocol): 500, 500, 500, 500, 384.5; IQM 500 [423, 500] (95% bootstrap
CI), mean 476.9 +- 46.2. Seed 4 had evaluated 500 at 43k and 362 at the end: the target "500 +- 0 at 50k" is met
by 4 of 5 seeds."""

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
