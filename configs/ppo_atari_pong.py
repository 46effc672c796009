"""PPO on Atari Pong (CleanRL's ppo_atari settings: 8 envs x 128 steps, 4 epochs of 4 minibatches, clip 0.1).

Needs the atari extra: ``pip install 'zoo-rl[atari]'`` (ale-py with the ROMs, opencv for the resize). The env is
gymnasium's ALE/Pong-v5 through gymnasium's AtariPreprocessing (no-op starts, frame skip 4, 84x84 grayscale) and a
4-frame stack (see zoo/envs/atari.py); the observations are uint8 images, so the policy's encoder is the NatureCNN
(``encoder: auto``), shared by the policy and value heads. Rewards are Pong's own +-1.

On this 2-core CPU the config is checked to start and run (tests/test_atari_env.py); at about 155 env steps/s with
learning, 10M steps would take some 18 hours, so it is not expected to learn here. CleanRL reports Pong solved
(about +20) within 10M steps.
"""

config = dict(
    exp_name="ppo_atari_pong",
    seed=0,
    env=dict(id="atari", kwargs=dict(game="Pong")),
    policy=dict(
        type="ppo",
        encoder="auto",
        encoder_kwargs=dict(features_dim=512),
        shared_network=True,
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
