"""PPO with an LSTM on popgym's RepeatFirstEasy (env PopGym-v0, task RepeatFirstEasy: at every step of a 52-card
deck, say the suit of the first card, seen once, up to 51 steps earlier; +1/51 a right answer, -1/51 a wrong one,
so a return of 1 is perfect and guessing scores -0.5). The settings of configs/ppo_lstm_cartpole_novel.py (8 envs x
32 steps, chunks of 32, 20 epochs of 256-sample minibatches, an LSTM of 64 each for actor and critic) with an
entropy bonus of 0.01 and the one-hot observations unnormalised. Needs ``pip install 'zoo-rl[popgym]'``.

Expected: a 100-episode training mean above 0.8 by 150k steps (seed 0: 0.86 at 148k), where feed-forward PPO and
4 stacked frames cannot do better than guessing (the first card leaves the stack after 4 steps); `zoo bench memory`
has 5 seeds of each at a fixed 200k (docs/benchmarks.md)."""

config = dict(
    exp_name="ppo_lstm_repeat_first",
    seed=0,
    env=dict(id="PopGym-v0", kwargs=dict(task="RepeatFirstEasy")),
    policy=dict(
        type="ppo",
        recurrent="lstm",
        recurrent_size=64,
        sequence_length=32,
        hidden_sizes=[64],
        activation="relu",
        ortho_init=False,
        learning_rate=1e-3,
        anneal_lr=True,
        anneal_clip=True,
        gamma=0.98,
        gae_lambda=0.8,
        clip_ratio=0.2,
        epochs=20,
        minibatch_size=256,
        entropy_coef=0.01,
    ),
    pipeline=dict(
        num_envs=8,
        rollout_steps=32,
        normalize_reward=True,
        max_env_steps=200_000,
        eval_every=0,
    ),
)
