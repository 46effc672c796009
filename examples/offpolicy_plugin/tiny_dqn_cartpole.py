"""tiny_dqn (examples/offpolicy_plugin/tiny_dqn.py, imported by name) on CartPole-v1: the off-policy plugin example.
Seed 0 here: a 100-episode training mean of about 150 by 30k steps (checked by tests/test_example_plugin.py on a
shorter budget)."""
config = dict(
    exp_name="tiny_dqn_cartpole",
    import_names=["tiny_dqn"],  # found next to this file
    env=dict(id="CartPole-v1"),
    policy=dict(type="tiny_dqn"),
    pipeline=dict(num_envs=1, learning_starts=1_000, train_freq=4, gradient_steps=1, buffer_size=50_000,
                  steps_per_iteration=1_000, max_env_steps=30_000, eval_every=5),
)
