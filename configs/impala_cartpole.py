"""IMPALA on CartPole-v1: 2 actors x 8 envs, unrolls of 32 steps, the learner updating from 4 unrolls at a time.

Rewards are scaled by 0.1 before learning (values near 10 instead of 100). Expected: 100-episode training mean
>= 475 (stop_return); seeds 0-5 reached it in 210k-390k env steps (3-7 s of training here). ReLU rather than tanh:
the learner's tanh took a quarter of its time, and with ReLU 2 actors collect 1.55x the env steps/s of one on this
2-core machine (1.39x with tanh), learning as fast. Without the reward scale (entropy_coef 0, gamma 0.98), 3 of 6
seeds were still near 200 at 600k steps."""

config = dict(
    exp_name="impala_cartpole",
    seed=0,
    env=dict(id="CartPole-v1"),
    policy=dict(
        type="impala",
        hidden_sizes=[64, 64],
        activation="relu",
        learning_rate=2e-3,
        anneal_lr=True,
        gamma=0.99,
        entropy_coef=0.001,
        reward_scale=0.1,
        value_coef=0.5,
        max_grad_norm=40.0,
    ),
    pipeline=dict(
        type="parallel_async",
        num_actors=2,
        num_envs=8,
        unroll_length=32,
        batch_unrolls=4,
        queue_size=16,
        max_env_steps=1_000_000,
        stop_return=475.0,
        eval_every=0,
    ),
)
