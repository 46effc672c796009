"""Action masks in the policies (zoo.policies.masking, rl_utils.mask_logits): invalid actions never sampled nor
chosen, the behaviour and learning logits masked alike, no probability or gradient for invalid actions; the torch
and numpy actors, feed-forward and recurrent, agree under masks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import new_policy

from zoo.policies import A2CPolicy, LearnContext, PPOPolicy
from zoo.rl_utils import MASKED_LOGIT, categorical_log_prob, entropy, mask_logits

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def _masks(steps, envs, width, seed=0):
    rng = np.random.default_rng(seed)
    masks = rng.random((steps, envs, width)) < 0.5
    masks[np.arange(steps)[:, None], np.arange(envs)[None], rng.integers(0, width, (steps, envs))] = True
    return masks


def test_masked_logits_give_invalid_actions_no_probability_and_no_gradient():
    logits = torch.randn(4, 5, requires_grad=True)
    mask = torch.tensor(_masks(1, 4, 5)[0])
    masked = mask_logits(logits, mask)
    probs = masked.softmax(-1)
    assert bool((probs[~mask] == 0).all()) and torch.allclose(probs.sum(-1), torch.ones(4))
    reference = torch.where(mask, logits.detach().exp(), torch.zeros(())).div(
        torch.where(mask, logits.detach().exp(), torch.zeros(())).sum(-1, keepdim=True))  # renormalised by hand
    torch.testing.assert_close(probs, reference)
    h = entropy(masked)
    assert bool(torch.isfinite(h).all())
    (h.sum() + categorical_log_prob(masked, mask.float().argmax(-1)).sum()).backward()
    assert bool((logits.grad[~mask] == 0).all()) and bool((logits.grad[mask] != 0).any())
    assert mask_logits(logits, None) is logits and MASKED_LOGIT < -1e7


@pytest.mark.parametrize("cls", [PPOPolicy, A2CPolicy])
@pytest.mark.parametrize("numpy_acting", [True, False])
def test_collect_never_samples_an_invalid_action_and_stores_the_mask(cls, numpy_acting):
    policy = new_policy(cls, OBS, gym.spaces.Discrete(6), hidden_sizes=[8], numpy_acting=numpy_acting)
    steps, envs = 400, 8
    masks = _masks(steps, envs, 6)
    actor = policy.rollout_actor(steps, envs)
    obs = np.random.default_rng(1).uniform(-1, 1, (steps, envs, 3)).astype(np.float32)
    actions = np.stack([actor.act(t, obs[t], masks[t]) for t in range(steps)])
    assert masks[np.arange(steps)[:, None], np.arange(envs)[None], actions].all()  # 3,200 draws, none invalid
    raw, extras = actor.finish()
    assert torch.equal(extras["action_mask"], torch.from_numpy(masks))
    assert bool((extras["policy_output"][~torch.from_numpy(masks)] == MASKED_LOGIT).all())


def test_the_numpy_and_torch_actors_sample_alike_under_masks():
    policy = new_policy(PPOPolicy, OBS, gym.spaces.Discrete(5), hidden_sizes=[8])
    masks = _masks(16, 4, 5)
    obs = np.random.default_rng(2).uniform(-1, 1, (16, 4, 3)).astype(np.float32)
    out = []
    for numpy_acting in (True, False):
        policy.cfg.numpy_acting = numpy_acting
        torch.manual_seed(7)
        actor = policy.rollout_actor(16, 4)
        actions = np.stack([actor.act(t, obs[t], masks[t]) for t in range(16)])
        out.append((actions, actor.finish()[1]))
    (a_np, e_np), (a_torch, e_torch) = out
    assert np.array_equal(a_np, a_torch)
    torch.testing.assert_close(e_np["policy_output"], e_torch["policy_output"], rtol=1e-5, atol=1e-5)


def test_evaluate_and_multi_discrete_masks_choose_among_valid_actions():
    policy = new_policy(PPOPolicy, OBS, gym.spaces.Discrete(4), hidden_sizes=[8])
    obs = torch.randn(64, 3)
    masks = torch.tensor(_masks(1, 64, 4)[0])
    chosen = policy.evaluate(obs, action_mask=masks)
    assert masks[torch.arange(64), torch.as_tensor(chosen)].all()
    multi = new_policy(PPOPolicy, OBS, gym.spaces.MultiDiscrete([3, 2]), hidden_sizes=[8])
    mask = torch.tensor([[False, True, False, True, False]] * 64)  # component 0: only 1; component 1: only 0
    assert (multi.evaluate(obs, action_mask=mask) == np.array([1, 0])).all()
    assert (multi.collect(obs, action_mask=mask).action == np.array([1, 0])).all()
    box = new_policy(PPOPolicy, OBS, gym.spaces.Box(-1, 1, (2,)), hidden_sizes=[8])
    with pytest.raises(Exception, match="masks are for Discrete and MultiDiscrete actions"):
        box.collect(obs, action_mask=mask)


@pytest.mark.parametrize("recurrent", ["none", "lstm"])
def test_learning_masks_the_fresh_logits_with_the_stored_mask(recurrent):
    """forward_batch masks the learning logits with each sample's stored mask: they equal the behaviour logits
    the actor stored (masked) at every sample; dropping the mask in learning breaks it, and the update's gradient
    never reaches an invalid action's logit."""
    from zoo.data import Rollout

    policy = new_policy(PPOPolicy, OBS, gym.spaces.Discrete(5), hidden_sizes=[8], recurrent=recurrent,
                        recurrent_size=8, sequence_length=4, minibatch_size=16, epochs=1)
    steps, envs = 8, 4
    masks = _masks(steps, envs, 5)
    obs = np.random.default_rng(3).uniform(-1, 1, (steps, envs, 3)).astype(np.float32)
    if recurrent == "none":
        actor = policy.rollout_actor(steps, envs)
        actions = [actor.act(t, obs[t], masks[t]) for t in range(steps)]
    else:
        actor = policy.memory_actor(steps, envs, None)
        starts = np.zeros((steps, envs), bool)
        starts[0] = True
        actions = [actor.act(t, obs[t], starts[t], masks[t]) for t in range(steps)]
    raw, extras = actor.finish()
    assert masks[np.arange(steps)[:, None], np.arange(envs)[None], np.stack(actions)].all()
    flags = torch.zeros(steps, envs, dtype=torch.bool)
    rollout = Rollout(obs=torch.from_numpy(obs), action=raw, reward=torch.ones(steps, envs), terminated=flags,
                      truncated=flags, valid=~flags, last_obs=torch.from_numpy(obs[-1]), extras=extras)
    if recurrent != "none":
        rollout.episode_start = torch.cat([torch.from_numpy(starts), torch.zeros(1, envs, dtype=torch.bool)])
        rollout.memory = torch.cat([actor.memory_sequence(), actor.memory[None]])
    rollout = policy.process_rollout(rollout)
    batch = policy.gather(policy.learning_columns(rollout), None, None, {})
    output, _ = policy.forward_batch(batch)
    torch.testing.assert_close(output, batch["policy_output"], rtol=1e-5, atol=1e-5)
    assert bool((output[~batch["action_mask"]] == MASKED_LOGIT).all())
    logits = output.detach().requires_grad_(True)
    entropy(mask_logits(logits, batch["action_mask"])).sum().backward()
    assert bool((logits.grad[~batch["action_mask"]] == 0).all())
    metrics = policy.learn(rollout, LearnContext(progress=0.0))
    assert all(np.isfinite(v) for v in metrics.values())
