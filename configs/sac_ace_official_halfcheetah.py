"""SAC-ACE on HalfCheetah-v5 at the settings of its authors' code (Ji et al., ICML 2024; the official repository
jity16/ACE-Off-Policy-Actor-Critic-with-Causality-Aware-Entropy-Regularization: model/, main_causal.py,
utilis/default_config.py). MuJoCo: `pip install 'zoo-rl[mujoco]'`; meant for a GPU: `--set device=cuda`.

As there: actor and twin critics of 3 hidden layers of 1024 (ELU after the first, then ReLU), Xavier-uniform
weights and zero biases; batch 512; Adam at 3e-4 for critics, actor and temperature (log alpha from 0); gamma 0.99,
tau 0.005; actor, temperature and target critics every 2nd update; 10k uniformly random steps, updates from step
513 on (as soon as the replay holds more than one batch); one update per env step for 1M steps; causal weights
from DirectLiNGAM's signed effects of each action dimension on the reward, refitted every 10k env steps on the latest
10k transitions; a dormancy-guided reset every 100k updates from 5k on (about 9 in 1M steps), mixing in fresh
orthogonal weights with zero biases, Adam's moments cleared. Evaluation: 10 deterministic episodes every 5k steps
(the code: every 10 episodes).

Where zoo differs, and why: the causal fit runs in the background and its weights apply 200 updates after it
starts (the code stops training while it fits): the same weights, a run that does not wait; the actor's mean and
log-std come from one output layer of 2 x |A| units rather than two heads of |A| (Xavier's bound differs by 0.1%
at 1024 inputs); zoo counts updates from 1, the code from 0, so its every-2nd updates fall one update apart.

Cost here (2-core AMD EPYC, one thread, 200 updates timed after the first compile, 2026-11-27; measured on Hopper's
config; HalfCheetah's 17-d observations and 6-d actions change little): 208 ms per env step eager fp32, 170 compiled
fp32, 101 compiled bf16, so 1M steps take about 58, 47 or 28 hours before evaluations and causal fits. On a GPU an
estimate, not yet a measurement: one update is about 29 GFLOP, at least 0.4 ms at an H100's fp32 peak, beside the
2.2 ms of host work per step that the device check measured for SAC Hopper at 256x256 (docs/speed.md): about 1 hour
for 1M steps, plus up to half an hour of evaluations and about 5 minutes of waiting for the causal fits (100 of
them; one fit on HalfCheetah's 10k x 24 columns took 3.6 s here, on a loaded machine, against 0.36 s on Hopper's,
and training waits for what is left of it after 200 updates); `python benchmarks/cuda_check.py --config <this file>
--skip-smoke` measures it. This file is what to run where a GPU is at hand."""

config = dict(
    exp_name="sac_ace_official_halfcheetah",
    seed=0,
    env=dict(id="HalfCheetah-v5"),
    policy=dict(
        type="sac_ace",
        hidden_sizes=[1024, 1024, 1024],
        activation="relu",
        input_activation="elu",
        init="xavier",
        actor_learning_rate=3e-4,
        critic_learning_rate=3e-4,
        alpha_learning_rate=3e-4,
        init_alpha=1.0,
        batch_size=512,
        gamma=0.99,
        tau=0.005,
        actor_update_interval=2,
        target_update_interval=2,
        log_std_min=-20.0,
        log_std_max=2.0,
        causal_weights=True,
        causal_interval=10_000,
        causal_sample_size=10_000,
        causal_use_abs=False,
        dormant_reset=True,
        reset_interval=100_000,
        reset_start=5_000,
        dormant_tau=0.05,
        reset_factor_min=0.2,
        reset_factor_max=0.9,
        reset_init="orthogonal",
    ),
    pipeline=dict(
        num_envs=1,
        buffer_size=1_000_000,
        learning_starts=513,
        random_steps=10_000,
        train_freq=1,
        gradient_steps=1,
        steps_per_iteration=1_000,
        max_env_steps=1_000_000,
        eval_every=5,
        eval_episodes=10,
        checkpoint_every=10,
        log_every_s=30.0,
    ),
)
