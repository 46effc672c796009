"""PPO with an LSTM on EnvPool's Pong-v5, at CleanRL's ppo_atari_lstm settings: one frame per observation (no frame
stack: the LSTM holds the motion), the NatureCNN into 512 features, one LSTM of 128 for policy and value, 8 envs x
128 steps, 4 epochs of 4 minibatches of whole env columns (sequences of 128: CleanRL re-runs each env's whole
rollout), clip 0.1 (value clipped too), entropy 0.01, learning rate 2.5e-4 annealed over the budget.

Needs the envpool extra: ``pip install 'zoo-rl[envpool]'``. The preprocessing is configs/ppo_atari_pong_envpool.py's
(EnvPool's, in C++), with ``stack_num=1``. The same agent without memory is that config (4 stacked frames).

This is a long run on this 2-core machine (a few hundred env steps per second: 10M steps take many hours), meant to
be run in a runs directory outside the work tree and resumed across sessions; EnvPool's envs cannot be saved, so each
resume starts fresh episodes (said in one line). Its curve goes beside CleanRL's in docs/memory.md as it arrives.
"""

config = dict(
    exp_name="ppo_lstm_atari_pong_envpool",
    seed=0,
    env=dict(id="Pong-v5", backend="envpool", kwargs=dict(episodic_life=True, reward_clip=True, stack_num=1)),
    policy=dict(
        type="ppo",
        encoder="auto",
        encoder_kwargs=dict(features_dim=512),
        recurrent="lstm",
        recurrent_size=128,
        recurrent_shared=True,
        shared_network=True,
        sequence_length=128,
        hidden_sizes=[],
        learning_rate=2.5e-4,
        anneal_lr=True,
        gamma=0.99,
        gae_lambda=0.95,
        clip_ratio=0.1,
        value_clip=True,
        epochs=4,
        minibatch_size=256,
        entropy_coef=0.01,
        value_coef=0.5,
        max_grad_norm=0.5,
    ),
    pipeline=dict(
        num_envs=8,
        rollout_steps=128,
        max_env_steps=10_000_000,
        eval_every=50,
        eval_episodes=3,
        checkpoint_every=20,
    ),
)
