"""DQN on CartPole-v1 with rl-baselines3-zoo's hyper-parameters (hyperparams/dqn.yml, "Almost Tuned"): 256x256
Q-network, Adam 2.3e-3, batches of 64, 128 updates every 256 env steps, target copied every 10 env steps,
epsilon 1 -> 0.04 over the first 16% of 50k steps, Huber loss, gradient norm clipped at 10, no double DQN; and
3-step returns (``policy.nstep=3``; rl-zoo uses 1).

rl-baselines3-zoo reports 500 +- 0 at 50k steps. With one-step returns the bench's final evaluations here (final
model, 10 deterministic episodes on evaluation seeds, seeds 0-4, this 2-core CPU) were 500, 500, 397.4, 110.1,
150.5: IQM 349.3 [123.6, 500.0]; DQN on CartPole forgets and relearns late in training, and which seeds end in a dip
depends on the machine (a 16-core machine's run of the same seeds: 500, 500, 500, 500, 384.5). With 3-step returns,
the same evaluation of seeds 0-4 trained to 50k: 500, 500, 500, 273.0, 500 (see docs/benchmarks.md for the bench's
own runs). With the actor-critics' orthogonal init the one-step seeds 0-2 ended at 206, 500 and 144."""

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
        nstep=3,
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
