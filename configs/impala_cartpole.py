"""IMPALA on CartPole-v1: 2 actors x 8 envs, unrolls of 32 steps, the learner updating from 4 unrolls at a time.

Rewards are scaled by 0.1 before learning (values near 10 instead of 100). Expected: 100-episode training mean
>= 475 (stop_return); seeds 0-5 reached it in 210k-390k env steps (3-7 s of training here). ReLU rather than tanh:
the learner's tanh took a quarter of its time, and with ReLU 2 actors collect 1.55x the env steps/s of one on this
2-core machine (1.39x with tanh), learning as fast. Without the reward scale (entropy_coef 0, gamma 0.98), 3 of 6
seeds were still near 200 at 600k steps.

Adam's epsilon is 1e-3, not 1e-5: left running (3M steps, stop_return off, 5-episode evals every 50 updates, seeds 0-3;
benchmarks/stability.py, retired at commit 720345a), 23 of 213 evaluations after the first at 500 fell below 475 with
1e-5 (to 86), 1 of 218 with 1e-3; at a constant learning rate, 16 of 222 with one seed collapsing for good (entropy 0,
return 9, from 2.4M steps on) against 6 of 218 and none. Once solved, the gradients are tiny (norm about 0.01) and so is
Adam's second moment: the next larger gradient then moves every weight by about the learning rate, enough to saturate
the softmax. An epsilon above the gradients' size bounds those steps."""

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
        adam_eps=1e-3,
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
