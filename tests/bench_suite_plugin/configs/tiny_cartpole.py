"""PPO on CartPole-v1, tiny: the test plugin's suite entry (its budget comes from the entry's overrides)."""

config = dict(exp_name="suite_plugin", env=dict(id="CartPole-v1"), policy=dict(type="ppo", epochs=1),
              pipeline=dict(num_envs=4, rollout_steps=32, max_env_steps=2048, eval_every=1, eval_episodes=2))
