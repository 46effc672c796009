"""PPO on EnvPool's Pong-v5 with CleanRL's ppo_atari_envpool settings: 8 envs x 128 steps, 4 epochs of 4 minibatches,
clip 0.1 (value clipped too), entropy 0.01, learning rate 2.5e-4 annealed over the budget, the NatureCNN shared by the
policy and value heads.

Needs the envpool extra: ``pip install 'zoo-rl[envpool]'``. EnvPool preprocesses in C++ as CleanRL's script has it:
up to 30 no-ops after reset, frame skip 4 (max-pooled), 84x84 grayscale, a 4-frame stack, FIRE after reset, no
sticky actions, ``episodic_life`` (a lost life ends the episode: Pong has no lives, so here it changes nothing) and
``reward_clip`` (rewards to their sign: Pong's are +-1 already, so the returns are the game's scores). See
zoo/envs/envpool_backend.py for how EnvPool's conventions are adapted, and configs/ppo_atari_pong.py for the same
agent on gymnasium's ALE (sticky actions, no FIRE after reset).

Measured here: docs/envpool.md, "Atari" (about 275 env steps per second on one quiet core of the 2-core machine,
so 1M steps take about an hour). CleanRL reports Pong-v5 solved (about +20) within 10M steps. Seed 0 here: a
training return of -14.5 at 1M and -9.2 at 1.27M (CleanRL's curve: about -11 and -6), beside CleanRL's curve in
docs/envpool.md.
"""

config = dict(
    exp_name="ppo_atari_pong_envpool",
    seed=0,
    env=dict(id="Pong-v5", backend="envpool", kwargs=dict(episodic_life=True, reward_clip=True)),
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
