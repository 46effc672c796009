"""REINFORCE with a baseline (the example plugin's policy) on CartPole-v1, small budget.

Run after `pip install -e examples/zoo_plugin_example`:  zoo run --config examples/zoo_plugin_example/config.py
"""

config = dict(
    exp_name="reinforce_baseline_cartpole",
    seed=0,
    env=dict(id="CartPole-v1"),
    policy=dict(
        type="reinforce_baseline",
        hidden_sizes=[64, 64],
        learning_rate=1e-3,
        gamma=0.99,
        advantage_clip=3.0,
    ),
    pipeline=dict(
        num_envs=8,
        rollout_steps=128,
        max_env_steps=50_000,
        eval_every=0,
    ),
)
