"""Policies against independent references written out in this file (no rl_utils loss is called here).

Covers:

- ``ActorCriticPolicy.process_rollout``: GAE with termination, truncation and autoreset (``valid``) kept apart,
  against a per-step Python loop (ends at the first and last step, T = 1, B = 1, float64 values).
- ``PPOPolicy.learn`` (discrete and continuous): the pre-clip gradient, the metrics and the parameters after the
  update equal a hand-written clipped-surrogate loss, stepped with ``torch.optim.Adam`` and ``clip_grad_norm_``;
  with value clip, dual clip, advantage normalisation on and off, the target-KL early stop, learning-rate and
  clip annealing.
- ``A2CPolicy.learn`` against ``-mean(logp * A) + c * mean((R - V)^2)`` stepped with ``torch.optim.RMSprop``, on
  advantages and returns from ``process_rollout``.
- The ``valid`` mask in learning: invalid steps holding garbage change nothing.
- Continuous actions: ``collect`` clips only what the env receives; log-probs and learning use the raw sample.
- ``LearnContext`` hooks: ``sync_gradients`` (once per update, on the flat gradient, before clipping and the
  step), ``min`` (number of minibatches) and ``mean`` (the KL early stop).
- Acting-only policies, actor weights, and ``optimizer_step`` on a non-finite loss.
- ``evaluate_policy`` on a counter env: returns are exactly the episode lengths; the policy sees normalised
  observations.
"""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from easydict import EasyDict
from helpers import new_policy

from zoo.envs import EnvSpec
from zoo.envs.wrappers import NormalizeObservation
from zoo.errors import NonFiniteError, ZooError
from zoo.pipelines.evaluator import evaluate_policy
from zoo.policies import A2CPolicy, CollectOutput, LearnContext, Policy, PPOPolicy, Rollout
from zoo.registry import ENV_REGISTRY
from zoo.rl_utils.normalisation import RunningMeanStd

OBS_DIM = 3
N_ACTIONS = 3
ACT_DIM = 2
OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
DISCRETE_SPACE = gym.spaces.Discrete(N_ACTIONS)
BOX_SPACE = gym.spaces.Box(-0.1, 0.1, (ACT_DIM,), np.float32)
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

# Large enough steps and Adam/RMSprop eps that the update depends on the gradient's size, not only its sign.
SENSITIVE = {"learning_rate": 0.05, "adam_eps": 0.5, "entropy_coef": 0.05, "anneal_lr": False}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -- builders ---------------------------------------------------------------------------------------------------
def make_policy(cls, discrete: bool, seed: int = 0, acting_only: bool = False, **overrides):
    space = DISCRETE_SPACE if discrete else BOX_SPACE
    return new_policy(cls, OBS_SPACE, space, seed, acting_only, **{"hidden_sizes": [16, 16], **overrides})


def clone_policy(policy):
    """An independent policy with the same config, weights and optimiser state. (Not ``copy.deepcopy``: a deep
    copy's parameters are no longer views of its FlatOptimizer's buffer, so it would not learn.)"""
    clone = type(policy)(EasyDict(copy.deepcopy(dict(policy.cfg))), policy.observation_space, policy.action_space,
                         policy.device, acting_only=policy.acting_only)
    clone.load_state_dict(copy.deepcopy(policy.state_dict()))
    return clone


def log_softmax_ref(logits: torch.Tensor) -> torch.Tensor:
    top = logits.max(-1, keepdim=True).values
    return logits - top - torch.log(torch.exp(logits - top).sum(-1, keepdim=True))


def categorical_logp_ref(logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    return log_softmax_ref(logits).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)


def categorical_entropy_ref(logits: torch.Tensor) -> torch.Tensor:
    logp = log_softmax_ref(logits)
    return -(logp.exp() * logp).sum(-1)


def gaussian_logp_ref(mu: torch.Tensor, sigma: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    return (-((action - mu) ** 2) / (2.0 * sigma**2) - torch.log(sigma) - LOG_SQRT_2PI).sum(-1)


def gaussian_entropy_ref(sigma: torch.Tensor) -> torch.Tensor:
    return (0.5 + LOG_SQRT_2PI + torch.log(sigma)).sum(-1)


def make_rollout(policy, T: int = 6, B: int = 4, seed: int = 1, behaviour: str = "noisy", valid=None) -> Rollout:
    """A hand-built rollout with the extras ``collect`` produces plus hand-set ``advantage`` and ``returns``.

    behaviour: "noisy" (behaviour outputs far from the current ones: ratios far from 1), "same" (the current
    outputs: ratio 1, approx KL 0) or "likely" (the taken actions much likelier under the behaviour policy:
    large positive approx KL).
    """
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, B, OBS_DIM, generator=g)
    with torch.no_grad():
        out, value_now = policy.model(obs)
    if policy.discrete:
        action = torch.randint(0, N_ACTIONS, (T, B), generator=g)
        if behaviour == "same":
            old = out.clone()
        elif behaviour == "likely":
            old = out + 4.0 * torch.nn.functional.one_hot(action, N_ACTIONS).float()
        else:
            old = out + 1.5 * torch.randn(T, B, N_ACTIONS, generator=g)
        packed, log_prob = old, categorical_logp_ref(old, action)
    else:
        action = 0.8 * torch.randn(T, B, ACT_DIM, generator=g)  # mostly outside the bounds [-0.1, 0.1]
        mu, sigma = out["mu"], out["sigma"]
        if behaviour == "same":
            mu_old, sigma_old = mu.clone(), sigma.clone()
        elif behaviour == "likely":
            mu_old, sigma_old = action.clone(), 0.3 * torch.ones_like(mu)
        else:
            mu_old = mu + 0.6 * torch.randn(T, B, ACT_DIM, generator=g)
            sigma_old = sigma * torch.exp(0.3 * torch.randn(T, B, ACT_DIM, generator=g))
        packed, log_prob = torch.cat([mu_old, sigma_old], -1), gaussian_logp_ref(mu_old, sigma_old, action)
    value = value_now + 0.5 * torch.randn(T, B, generator=g)  # the critic at collection time, not now
    extras = {
        "log_prob": log_prob,
        "value": value,
        "policy_output": packed,
        "advantage": 1.5 * torch.randn(T, B, generator=g) + 0.3,
        "returns": value + torch.randn(T, B, generator=g),
    }
    return Rollout(
        obs=obs,
        action=action,
        reward=torch.randn(T, B, generator=g),
        terminated=torch.rand(T, B, generator=g) < 0.2,
        truncated=torch.rand(T, B, generator=g) < 0.1,
        valid=torch.ones(T, B, dtype=torch.bool) if valid is None else valid,
        last_obs=torch.randn(B, OBS_DIM, generator=g),
        extras=extras,
    )


def flat_samples(rollout: Rollout) -> dict[str, torch.Tensor]:
    """Valid steps, time-major order, written out without ``Rollout.valid_samples``."""
    mask = rollout.valid
    fields = {"obs": rollout.obs, "action": rollout.action, "reward": rollout.reward, **rollout.extras}
    return {name: x[mask] for name, x in fields.items()}


def compact(rollout: Rollout) -> Rollout:
    """The same batch with the invalid steps removed: the valid steps as one (N, 1) rollout."""
    s = flat_samples(rollout)
    n = s["obs"].shape[0]
    extras = {name: x.unsqueeze(1) for name, x in s.items() if name not in ("obs", "action", "reward")}
    flags = rollout.terminated[rollout.valid].unsqueeze(1), rollout.truncated[rollout.valid].unsqueeze(1)
    return Rollout(
        obs=s["obs"].unsqueeze(1), action=s["action"].unsqueeze(1), reward=s["reward"].unsqueeze(1),
        terminated=flags[0], truncated=flags[1], valid=torch.ones(n, 1, dtype=torch.bool),
        last_obs=rollout.last_obs[:1], extras=extras,
    )


def corrupt_invalid(rollout: Rollout, valid: torch.Tensor) -> Rollout:
    """Mark ``~valid`` steps invalid and fill them with extreme (finite) values."""
    bad = ~valid

    def big(x: torch.Tensor, v: float) -> torch.Tensor:
        return torch.where(bad.reshape(bad.shape + (1,) * (x.ndim - 2)), torch.full_like(x, v), x)

    extras = dict(rollout.extras)
    extras["advantage"] = big(extras["advantage"], -1e4)
    extras["returns"] = big(extras["returns"], 1e5)
    extras["value"] = big(extras["value"], -1e5)
    extras["log_prob"] = big(extras["log_prob"], 30.0)
    if rollout.action.dtype.is_floating_point:
        action = big(rollout.action, 1e3)
        extras["policy_output"] = big(extras["policy_output"], 50.0)
    else:
        action = torch.where(bad, torch.full_like(rollout.action, N_ACTIONS - 1), rollout.action)
        extras["policy_output"] = big(extras["policy_output"], -40.0)
        extras["policy_output"][..., -1] = torch.where(bad, 40.0, extras["policy_output"][..., -1])
    return Rollout(
        obs=big(rollout.obs, 1e3), action=action, reward=big(rollout.reward, 1e6),
        terminated=rollout.terminated, truncated=rollout.truncated, valid=valid.clone(),
        last_obs=rollout.last_obs, extras=extras,
    )


class RecordingContext(LearnContext):
    """A LearnContext recording every hook call; optionally scales gradients and overrides min/mean."""

    def __init__(self, progress=0.0, grad_scale=None, min_value=None, mean_value=None):
        super().__init__(progress=progress)
        self.grad_scale, self.min_value, self.mean_value = grad_scale, min_value, mean_value
        self.grad_buffers: list[torch.Tensor] = []
        self.grads: list[torch.Tensor] = []
        self.min_calls: list[int] = []
        self.mean_calls: list[float] = []

    def sync_gradients(self, grad):
        self.grad_buffers.append(grad)
        self.grads.append(grad.detach().clone())
        if self.grad_scale is not None:
            grad.mul_(self.grad_scale)

    def min(self, value):
        self.min_calls.append(value)
        return value if self.min_value is None else self.min_value

    def mean(self, value):
        self.mean_calls.append(value)
        return value if self.mean_value is None else self.mean_value


# -- references -------------------------------------------------------------------------------------------------
def reference_step(model, opt, loss, max_norm: float, grad_scale=None, scale_after_clip=False) -> torch.Tensor:
    """Backward, optional gradient scaling (a stand-in for the all-reduce; before clipping unless
    ``scale_after_clip``), clip_grad_norm_, step. Returns the flat gradient as the sync hook sees it (before the
    scaling and the clip), in ``model.parameters()`` order."""
    opt.zero_grad()
    loss.backward()
    params = list(model.parameters())
    grad = torch.cat([p.grad.reshape(-1) for p in params]).clone()
    if grad_scale is not None and not scale_after_clip:
        for p in params:
            p.grad.mul_(grad_scale)
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    if grad_scale is not None and scale_after_clip:
        for p in params:
            p.grad.mul_(grad_scale)
    opt.step()
    return grad


def normalized_ref(adv: torch.Tensor) -> torch.Tensor:
    n = adv.shape[0]
    if n < 2:
        return adv
    mean = adv.sum() / n
    std = torch.sqrt(((adv - mean) ** 2).sum() / (n - 1))
    return (adv - mean) / (std + 1e-8)


def policy_terms(model, discrete: bool, obs, action, packed_old):
    """(logp_new, logp_old, entropy, value_new) from the model's raw outputs and hand-written formulas."""
    out, value_new = model(obs)
    if discrete:
        return (categorical_logp_ref(out, action), categorical_logp_ref(packed_old, action),
                categorical_entropy_ref(out), value_new)
    mu_old, sigma_old = packed_old.chunk(2, dim=-1)
    return (gaussian_logp_ref(out["mu"], out["sigma"], action), gaussian_logp_ref(mu_old, sigma_old, action),
            gaussian_entropy_ref(out["sigma"]), value_new)


def ppo_loss_ref(model, discrete: bool, cfg, s: dict, index: torch.Tensor, clip: float):
    adv = s["advantage"][index]
    if cfg.normalize_advantage:
        adv = normalized_ref(adv)
    logp_new, logp_old, entropy, value_new = policy_terms(
        model, discrete, s["obs"][index], s["action"][index], s["policy_output"][index]
    )
    ratio = torch.exp(logp_new - logp_old)
    surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * adv)
    if cfg.dual_clip is not None:
        surrogate = torch.where(adv < 0, torch.max(surrogate, cfg.dual_clip * adv), surrogate)
    policy_loss = -surrogate.mean()
    returns, value_old = s["returns"][index], s["value"][index]
    squared = (returns - value_new) ** 2
    if cfg.value_clip:
        clipped = value_old + torch.clamp(value_new - value_old, -clip, clip)
        squared = torch.max(squared, (returns - clipped) ** 2)
    value_loss = 0.5 * squared.mean()
    total = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy.mean()
    info = {
        "policy_loss": policy_loss.item(), "value_loss": value_loss.item(), "entropy": entropy.mean().item(),
        "approx_kl": (logp_old - logp_new).mean().item(),
        "clipfrac": ((ratio > 1.0 + clip) | (ratio < 1.0 - clip)).float().mean().item(),
        "ratio": ratio.detach(), "adv": adv, "value_new": value_new.detach(),
    }
    return total, info


def ppo_reference(policy, rollout: Rollout, progress: float = 0.0, seed: int = 0, minibatches=None,
                  grad_scale=None, scale_after_clip=False, stop_kl=None):
    """PPO's update loop on a deep copy of ``policy``'s model with torch.optim.Adam: (model, grads, infos)."""
    cfg = policy.cfg
    model = copy.deepcopy(policy.model)
    lr = cfg.learning_rate * ((1.0 - progress) if cfg.anneal_lr else 1.0)
    clip = cfg.clip_ratio * ((1.0 - progress) if cfg.anneal_clip else 1.0)
    opt = torch.optim.Adam(model.parameters(), lr=lr, eps=cfg.adam_eps)
    s = flat_samples(rollout)
    count = s["obs"].shape[0]
    minibatches = math.ceil(count / cfg.minibatch_size) if minibatches is None else minibatches
    stop_kl = (None if cfg.target_kl is None else 1.5 * cfg.target_kl) if stop_kl is None else stop_kl
    torch.manual_seed(seed)  # learn draws one permutation per epoch and nothing else
    grads, infos = [], []
    for _ in range(cfg.epochs):
        order = torch.randperm(count)
        chunks = order.split(cfg.minibatch_size) if minibatches * cfg.minibatch_size >= count else \
            order.tensor_split(minibatches)
        for index in chunks:
            total, info = ppo_loss_ref(model, policy.discrete, cfg, s, index, clip)
            grads.append(reference_step(model, opt, total, cfg.max_grad_norm, grad_scale, scale_after_clip))
            infos.append(info)
            if stop_kl is not None and info["approx_kl"] > stop_kl:
                return model, grads, infos
    return model, grads, infos


def a2c_loss_ref(model, discrete: bool, cfg, s: dict):
    adv = normalized_ref(s["advantage"]) if cfg.normalize_advantage else s["advantage"]
    returns = s["advantage"] + s["value"]  # the critic's target: GAE advantage plus the collection-time value
    logp, _, entropy, value = policy_terms(model, discrete, s["obs"], s["action"], s["policy_output"])
    policy_loss = -(logp * adv).mean()
    value_loss = ((returns - value) ** 2).mean()
    total = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy.mean()
    return total, {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(), "entropy": entropy.mean().item()}


def a2c_reference(policy, rollout: Rollout, progress: float = 0.0, grad_scale=None, scale_after_clip=False):
    """One A2C step on a deep copy of ``policy``'s model with torch.optim.RMSprop: (model, [grad], [info])."""
    cfg = policy.cfg
    model = copy.deepcopy(policy.model)
    lr = cfg.learning_rate * ((1.0 - progress) if cfg.anneal_lr else 1.0)
    opt = torch.optim.RMSprop(model.parameters(), lr=lr, alpha=0.99, eps=cfg.adam_eps)
    total, info = a2c_loss_ref(model, policy.discrete, cfg, flat_samples(rollout))
    grad = reference_step(model, opt, total, cfg.max_grad_norm, grad_scale, scale_after_clip)
    return model, [grad], [info]


def assert_same_parameters(model, reference, atol=1e-5):
    for (name, a), (_, b) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(a, b, rtol=0.0, atol=atol, msg=lambda m, name=name: f"{name}: {m}")


def max_parameter_difference(model, reference) -> float:
    return max((a - b).abs().max().item() for a, b in zip(model.parameters(), reference.parameters()))


def assert_grads(recorded: list[torch.Tensor], reference: list[torch.Tensor]):
    assert len(recorded) == len(reference)
    for got, want in zip(recorded, reference):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


# -- 1. GAE -----------------------------------------------------------------------------------------------------
def gae_reference(value, last_value, reward, terminated, truncated, valid, gamma, lam) -> list[list[float]]:
    """Per-step loop: terminated -> no bootstrap; truncated -> bootstrap from the next observation's value; any
    episode end or autoreset step stops the trace; an autoreset step bootstraps nothing."""
    T, B = len(reward), len(reward[0])
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            next_value = value[t + 1][b] if t + 1 < T else last_value[b]
            if not valid[t][b] or terminated[t][b]:
                running = reward[t][b] - value[t][b]
            elif truncated[t][b]:
                running = reward[t][b] + gamma * next_value - value[t][b]
            else:
                running = reward[t][b] + gamma * next_value - value[t][b] + gamma * lam * running
            adv[t][b] = running
    return adv


def _flags(rows: list[str]):
    """Rows of per-env codes: '.' plain, 'T' terminated, 'X' truncated, 'B' both, 'I' invalid (autoreset)."""
    terminated = torch.tensor([[c in "TB" for c in row] for row in rows])
    truncated = torch.tensor([[c in "XB" for c in row] for row in rows])
    valid = torch.tensor([[c != "I" for c in row] for row in rows])
    return terminated, truncated, valid


def _random_flags(T, B, seed):
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(T, B, generator=g) < 0.2
    truncated = torch.rand(T, B, generator=g) < 0.2
    valid = torch.ones(T, B, dtype=torch.bool)
    valid[1:] = ~(terminated[:-1] | truncated[:-1])
    valid[0] = torch.rand(B, generator=g) < 0.7  # the previous rollout's last step ended some episodes
    return terminated, truncated, valid


GAE_CASES = {
    # time runs down the rows, one column per env
    "ends_first_and_last": _flags(["TX", "II", "..", "..", "XT"]),
    "autoreset_first_mid": _flags(["I.", ".X", ".I", "T.", "I.", ".."]),
    "both_flags": _flags(["B", ".", "I", "X"]),
    "T1_B1_plain": _flags(["."]),
    "T1_B1_terminated": _flags(["T"]),
    "T1_B1_truncated": _flags(["X"]),
    "T1_B1_invalid": _flags(["I"]),
    "B1_no_ends": _flags([".", ".", ".", "."]),
    "random": _random_flags(9, 5, seed=3),
}


@pytest.fixture(scope="module")
def gae_policy():
    return make_policy(PPOPolicy, discrete=True)


@pytest.mark.parametrize("case", sorted(GAE_CASES))
def test_process_rollout_gae_matches_loop(gae_policy, case):
    terminated, truncated, valid = GAE_CASES[case]
    T, B = terminated.shape
    g = torch.Generator().manual_seed(T * 100 + B)
    last_obs = 3.0 * torch.randn(B, OBS_DIM, generator=g)
    obs = torch.randn(T, B, OBS_DIM, generator=g)
    last_value = gae_policy.values_of(last_obs).tolist()  # the policy's own critic pass (numpy on small CPU models)
    assert all(abs(v) > 1e-3 for v in last_value)  # bootstrapping from it is visible
    for dtype in (torch.float32, torch.float64):
        value = torch.randn(T, B, generator=g, dtype=torch.float64).to(dtype)
        reward = torch.randn(T, B, generator=g, dtype=torch.float64).to(dtype)
        for gamma, lam in ((0.9, 0.8), (0.99, 1.0)):
            gae_policy.cfg.gamma, gae_policy.cfg.gae_lambda = gamma, lam
            rollout = Rollout(
                obs=obs, action=torch.zeros(T, B, dtype=torch.long), reward=reward, terminated=terminated,
                truncated=truncated, valid=valid, last_obs=last_obs,
                extras={"value": value, "log_prob": torch.zeros(T, B), "policy_output": torch.zeros(T, B, 3)},
            )
            extras_before = dict(rollout.extras)
            out = gae_policy.process_rollout(rollout)

            expected = gae_reference(value.tolist(), last_value, reward.tolist(), terminated.tolist(),
                                     truncated.tolist(), valid.tolist(), gamma, lam)
            expected = torch.tensor(expected, dtype=torch.float64)
            tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
            advantage = out.extras["advantage"]
            assert advantage.shape == (T, B) and advantage.dtype == dtype
            torch.testing.assert_close(advantage.double(), expected, **tol)
            torch.testing.assert_close(out.extras["returns"].double(), expected + value.double(), **tol)
            next_value = [[value[t + 1, b].item() if t + 1 < T else last_value[b] for b in range(B)]
                          for t in range(T)]
            torch.testing.assert_close(out.extras["next_value"].double(),
                                       torch.tensor(next_value, dtype=torch.float64), **tol)
            # The input rollout is left as it was; the other fields pass through.
            assert rollout.extras == extras_before and "advantage" not in rollout.extras
            assert out.obs is rollout.obs and out.valid is rollout.valid


def test_gae_reference_distinguishes_the_flags():
    # A self-check of the reference: termination, truncation and autoreset give three different advantages.
    value, last, reward = [[0.5], [0.25]], [2.0], [[1.0], [1.0]]
    plain = gae_reference(value, last, reward, [[False], [False]], [[False], [False]], [[True], [True]], 0.9, 0.8)
    term = gae_reference(value, last, reward, [[True], [False]], [[False], [False]], [[True], [True]], 0.9, 0.8)
    trunc = gae_reference(value, last, reward, [[False], [False]], [[True], [False]], [[True], [True]], 0.9, 0.8)
    assert term[0][0] == pytest.approx(0.5)  # 1 - 0.5
    assert trunc[0][0] == pytest.approx(1.0 + 0.9 * 0.25 - 0.5)
    assert plain[0][0] == pytest.approx(trunc[0][0] + 0.72 * plain[1][0])
    invalid = gae_reference(value, last, reward, [[False], [False]], [[False], [False]], [[True], [False]], 0.9, 0.8)
    assert invalid[1][0] == pytest.approx(1.0 - 0.25)


# -- 2. PPO against the reference -------------------------------------------------------------------------------
PPO_VARIANTS = {
    "plain": {},
    "value_clip": {"value_clip": True},
    "dual_clip": {"dual_clip": 3.0},
    "big_clip_norm": {"max_grad_norm": 100.0},
}


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
@pytest.mark.parametrize("normalize", [True, False], ids=["normadv", "rawadv"])
@pytest.mark.parametrize("variant", sorted(PPO_VARIANTS))
def test_ppo_learn_matches_reference(discrete, normalize, variant):
    policy = make_policy(PPOPolicy, discrete, epochs=1, minibatch_size=1000, normalize_advantage=normalize,
                         **SENSITIVE, **PPO_VARIANTS[variant])
    rollout = make_rollout(policy, T=8, B=4)
    if not discrete:
        assert (rollout.action.abs() > 0.1).float().mean() > 0.5  # learning must use the unclipped actions
    ref_model, ref_grads, ref_infos = ppo_reference(policy, rollout)
    ctx = RecordingContext(progress=0.0)
    metrics = policy.learn(rollout, ctx)

    assert metrics["updates"] == 1.0
    assert_grads(ctx.grads, ref_grads)
    assert_same_parameters(policy.model, ref_model)
    info = ref_infos[0]
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac"):
        assert metrics[key] == pytest.approx(info[key], rel=1e-4, abs=1e-6), key
    assert metrics["learning_rate"] == pytest.approx(policy.cfg.learning_rate)
    # The batch exercises what the variant is about.
    ratio, adv = info["ratio"], info["adv"]
    assert 0.0 < info["clipfrac"] < 1.0
    if variant == "dual_clip":
        assert ((adv < 0) & (ratio > 3.0)).any()  # the dual clip bounds these
        assert ((adv > 0) & (ratio < 0.8)).any()  # and must leave these alone
    if variant == "value_clip":  # the clipped value's error is the larger one for some samples
        s = flat_samples(rollout)
        clip = policy.cfg.clip_ratio
        clipped = s["value"] + (info["value_new"] - s["value"]).clamp(-clip, clip)
        assert ((s["returns"] - clipped) ** 2 > (s["returns"] - info["value_new"]) ** 2).any()


def test_ppo_learn_is_not_the_same_without_the_options():
    # The variants above are distinguishable: value clip and dual clip change the update on this batch.
    results = {}
    for name, options in {"plain": {}, "value_clip": {"value_clip": True}, "dual_clip": {"dual_clip": 3.0}}.items():
        policy = make_policy(PPOPolicy, True, epochs=1, minibatch_size=1000, **SENSITIVE, **options)
        policy.learn(make_rollout(policy, T=8, B=4), LearnContext())
        results[name] = policy.model
    assert max_parameter_difference(results["plain"], results["value_clip"]) > 1e-4
    assert max_parameter_difference(results["plain"], results["dual_clip"]) > 1e-4


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
@pytest.mark.parametrize("epochs,minibatch_size", [(3, 1000), (2, 12)])
def test_ppo_target_kl_stops_after_first_update(discrete, epochs, minibatch_size):
    policy = make_policy(PPOPolicy, discrete, epochs=epochs, minibatch_size=minibatch_size, target_kl=1e-6,
                         **SENSITIVE)
    rollout = make_rollout(policy, T=6, B=4, behaviour="likely")
    ref_model, ref_grads, ref_infos = ppo_reference(policy, rollout, seed=5)
    assert len(ref_grads) == 1 and ref_infos[0]["approx_kl"] > 0.1
    torch.manual_seed(5)
    ctx = RecordingContext()
    metrics = policy.learn(rollout, ctx)
    assert metrics["updates"] == 1.0
    assert len(ctx.grads) == 1 and len(ctx.mean_calls) == 1
    assert ctx.mean_calls[0] == pytest.approx(ref_infos[0]["approx_kl"], rel=1e-4)
    assert_grads(ctx.grads, ref_grads)
    assert_same_parameters(policy.model, ref_model)
    assert metrics["approx_kl"] == pytest.approx(ref_infos[0]["approx_kl"], rel=1e-4)


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
@pytest.mark.parametrize("target_kl,epochs,minibatch_size", [(None, 3, 1000), (1e3, 2, 12)])
def test_ppo_without_kl_stop_does_every_update(discrete, target_kl, epochs, minibatch_size):
    policy = make_policy(PPOPolicy, discrete, epochs=epochs, minibatch_size=minibatch_size, target_kl=target_kl,
                         **SENSITIVE)
    rollout = make_rollout(policy, T=6, B=4, behaviour="likely")
    ref_model, ref_grads, ref_infos = ppo_reference(policy, rollout, seed=5)
    expected = epochs * math.ceil(24 / minibatch_size)
    assert len(ref_grads) == expected
    torch.manual_seed(5)
    ctx = RecordingContext()
    metrics = policy.learn(rollout, ctx)
    assert metrics["updates"] == float(expected)
    assert_grads(ctx.grads, ref_grads)
    assert_same_parameters(policy.model, ref_model)
    mean_kl = sum(info["approx_kl"] for info in ref_infos) / len(ref_infos)
    assert metrics["approx_kl"] == pytest.approx(mean_kl, rel=1e-4)


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
@pytest.mark.parametrize("anneal_lr,anneal_clip", [(True, False), (False, False), (True, True)])
def test_ppo_annealing(discrete, anneal_lr, anneal_clip):
    options = {**SENSITIVE, "anneal_lr": anneal_lr, "anneal_clip": anneal_clip}
    policy = make_policy(PPOPolicy, discrete, epochs=1, minibatch_size=1000, **options)
    rollout = make_rollout(policy, T=8, B=4)
    ref_model, ref_grads, ref_infos = ppo_reference(policy, rollout, progress=0.5)
    ctx = RecordingContext(progress=0.5)
    metrics = policy.learn(rollout, ctx)
    lr = policy.cfg.learning_rate * (0.5 if anneal_lr else 1.0)
    assert metrics["learning_rate"] == pytest.approx(lr)
    assert metrics["clipfrac"] == pytest.approx(ref_infos[0]["clipfrac"])
    assert_grads(ctx.grads, ref_grads)
    assert_same_parameters(policy.model, ref_model)
    # The wrong schedule gives a visibly different update.
    wrong_model, _, _ = ppo_reference(make_policy(PPOPolicy, discrete, epochs=1, minibatch_size=1000,
                                                  **{**options, "anneal_lr": not anneal_lr}), rollout, progress=0.5)
    assert max_parameter_difference(policy.model, wrong_model) > 1e-4


def test_ppo_learning_rate_at():
    policy = make_policy(PPOPolicy, True, learning_rate=0.2, anneal_lr=True)
    assert policy.learning_rate_at(0.0) == pytest.approx(0.2)
    assert policy.learning_rate_at(0.5) == pytest.approx(0.1)
    assert policy.learning_rate_at(1.0) == 0.0
    assert policy.learning_rate_at(1.5) == 0.0  # a run extended past its budget does not go negative
    policy.cfg.anneal_lr = False
    assert policy.learning_rate_at(0.75) == pytest.approx(0.2)


# -- 3. the valid mask ------------------------------------------------------------------------------------------
VALID = torch.tensor([[True, False, True, True], [True, True, False, True], [False, True, True, True],
                      [True, True, True, False], [True, False, True, True]])


@pytest.mark.parametrize("cls", [PPOPolicy, A2CPolicy])
@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
@pytest.mark.parametrize("normalize", [True, False], ids=["normadv", "rawadv"])
def test_invalid_steps_do_not_change_the_update(cls, discrete, normalize):
    base = make_policy(cls, discrete, epochs=1, minibatch_size=1000, normalize_advantage=normalize, **SENSITIVE)
    rollout = corrupt_invalid(make_rollout(base, T=5, B=4), VALID)
    with_garbage, without = clone_policy(base), clone_policy(base)
    m1 = with_garbage.learn(rollout, LearnContext())
    m2 = without.learn(compact(rollout), LearnContext())
    assert_same_parameters(with_garbage.model, without.model, atol=1e-6)
    assert max_parameter_difference(with_garbage.model, base.model) > 1e-4  # something was learnt
    for key in ("policy_loss", "value_loss", "entropy"):
        assert m1[key] == pytest.approx(m2[key], rel=1e-5, abs=1e-6)
    # And the garbage would have mattered: the same batch marked all valid gives another update.
    all_valid = clone_policy(base)
    all_valid.learn(Rollout(**{**rollout.__dict__, "valid": torch.ones_like(VALID)}), LearnContext())
    assert max_parameter_difference(all_valid.model, without.model) > 1e-3


def test_only_invalid_steps_learn_nothing():
    for cls in (PPOPolicy, A2CPolicy):
        policy = make_policy(cls, True, **SENSITIVE)
        before = copy.deepcopy(policy.model)
        rollout = make_rollout(policy, T=2, B=2, valid=torch.zeros(2, 2, dtype=torch.bool))
        metrics = policy.learn(rollout, LearnContext())
        assert all(math.isfinite(v) for v in metrics.values())
        assert_same_parameters(policy.model, before, atol=0.0)


# -- 4. continuous actions --------------------------------------------------------------------------------------
def test_continuous_collect_clips_env_action_only():
    policy = make_policy(PPOPolicy, discrete=False, init_log_std=2.0)
    obs = torch.randn(256, OBS_DIM, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    out = policy.collect(obs)
    assert isinstance(out, CollectOutput)
    raw = out.raw_action
    assert raw.shape == (256, ACT_DIM) and isinstance(out.action, np.ndarray)
    assert (raw.abs() > 0.1).float().mean() > 0.9  # sigma = e^2: almost every sample is outside the bounds
    np.testing.assert_array_equal(out.action, np.clip(raw.numpy(), -0.1, 0.1))
    assert out.action.min() >= -0.1 and out.action.max() <= 0.1
    with torch.no_grad():
        mu, value = policy.model.policy_output(obs)["mu"], policy.model.value(obs)
    sigma = torch.full_like(mu, math.exp(2.0))
    assert set(out.extras) == {"policy_output"}  # values and log-probs come once per rollout (process_rollout)
    torch.testing.assert_close(policy.log_prob(out.extras["policy_output"], raw), gaussian_logp_ref(mu, sigma, raw))
    torch.testing.assert_close(out.extras["policy_output"], torch.cat([mu, sigma], -1))
    torch.testing.assert_close(policy.values_of(obs), value)
    # The raw action is a N(mu, sigma) sample.
    z = (raw - mu) / sigma
    assert abs(z.mean().item()) < 0.15 and abs(z.std().item() - 1.0) < 0.1
    # evaluate: the clipped mean
    np.testing.assert_allclose(policy.evaluate(obs), np.clip(mu.numpy(), -0.1, 0.1), rtol=1e-5, atol=1e-6)


def test_discrete_collect_samples_from_the_logits():
    policy = make_policy(PPOPolicy, discrete=True)
    with torch.no_grad():
        policy.model.policy_head.bias.copy_(torch.tensor([1.0, 0.0, -1.0]))
    obs = torch.randn(1, OBS_DIM).expand(20000, OBS_DIM).contiguous()
    torch.manual_seed(2)
    out = policy.collect(obs)
    with torch.no_grad():
        logits, value = policy.model.policy_output(obs), policy.model.value(obs)
    raw = out.raw_action
    np.testing.assert_array_equal(out.action, raw.numpy())
    assert set(out.extras) == {"policy_output"}
    torch.testing.assert_close(policy.log_prob(out.extras["policy_output"], raw), categorical_logp_ref(logits, raw))
    torch.testing.assert_close(out.extras["policy_output"], logits)
    torch.testing.assert_close(policy.values_of(obs), value)
    freq = torch.bincount(raw, minlength=N_ACTIONS).float() / raw.numel()
    torch.testing.assert_close(freq, torch.softmax(logits[0], -1), atol=0.015, rtol=0.0)
    np.testing.assert_array_equal(policy.evaluate(obs[:3]), logits[:3].argmax(-1).numpy())


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
def test_process_rollout_adds_values_and_log_probs_of_every_step(discrete):
    # collect leaves them out; process_rollout computes them in one pass: equal to the per-step references.
    policy = make_policy(PPOPolicy, discrete)
    rollout = make_rollout(policy, T=5, B=3)
    extras = {"policy_output": rollout.extras["policy_output"]}
    processed = policy.process_rollout(Rollout(**{**rollout.__dict__, "extras": extras}))
    with torch.no_grad():
        values = torch.stack([policy.model.value(rollout.obs[t]) for t in range(5)])
    torch.testing.assert_close(processed.extras["value"], values)
    old = policy.unpack_policy_output(rollout.extras["policy_output"])
    want = categorical_logp_ref(old, rollout.action) if discrete else gaussian_logp_ref(old["mu"], old["sigma"],
                                                                                         rollout.action)
    torch.testing.assert_close(processed.extras["log_prob"], want)
    # Values a collect did provide are kept as they are.
    kept = policy.process_rollout(Rollout(**{**rollout.__dict__, "extras": {**extras, "value": values + 1.0}}))
    torch.testing.assert_close(kept.extras["value"], values + 1.0)


@pytest.mark.parametrize("cls", [PPOPolicy, A2CPolicy])
def test_continuous_learn_uses_raw_actions(cls):
    policy = make_policy(cls, discrete=False, epochs=1, minibatch_size=1000, **SENSITIVE)
    rollout = make_rollout(policy, T=6, B=4)
    rollout.extras["returns"] = rollout.extras["advantage"] + rollout.extras["value"]
    assert (rollout.action.abs() > 0.2).float().mean() > 0.5  # far outside [-0.1, 0.1]
    reference = ppo_reference if cls is PPOPolicy else a2c_reference
    ref_model, ref_grads, _ = reference(policy, rollout)
    clipped = Rollout(**{**rollout.__dict__, "action": rollout.action.clamp(-0.1, 0.1)})
    clipped_model, clipped_grads, _ = reference(policy, clipped)
    ctx = RecordingContext()
    policy.learn(rollout, ctx)
    assert_grads(ctx.grads, ref_grads)
    assert_same_parameters(policy.model, ref_model)
    assert max_parameter_difference(policy.model, clipped_model) > 1e-3


# -- 5. A2C -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
@pytest.mark.parametrize("normalize", [True, False], ids=["normadv", "rawadv"])
@pytest.mark.parametrize("max_grad_norm", [0.5, 100.0])
def test_a2c_learn_matches_reference(discrete, normalize, max_grad_norm):
    policy = make_policy(A2CPolicy, discrete, normalize_advantage=normalize, gamma=0.9, gae_lambda=0.8,
                         max_grad_norm=max_grad_norm, **SENSITIVE)
    raw = make_rollout(policy, T=6, B=4, valid=torch.rand(6, 4, generator=torch.Generator().manual_seed(4)) < 0.8)
    extras = {k: v for k, v in raw.extras.items() if k not in ("advantage", "returns")}
    rollout = policy.process_rollout(Rollout(**{**raw.__dict__, "extras": extras}))
    # The critic's target is advantage + value, far from the advantage alone on this batch.
    assert (rollout.extras["value"].abs() > 0.3).any()
    ref_model, ref_grads, (info,) = a2c_reference(policy, rollout, progress=0.25)
    ctx = RecordingContext(progress=0.25)
    metrics = policy.learn(rollout, ctx)
    assert_grads(ctx.grads, ref_grads)
    assert_same_parameters(policy.model, ref_model)
    for key in ("policy_loss", "value_loss", "entropy"):
        assert metrics[key] == pytest.approx(info[key], rel=1e-4, abs=1e-6), key
    assert metrics["grad_norm"] == pytest.approx(ref_grads[0].norm().item(), rel=1e-4)
    assert metrics["learning_rate"] == pytest.approx(policy.cfg.learning_rate)  # anneal_lr is off


def test_a2c_anneals_learning_rate():
    policy = make_policy(A2CPolicy, True, **{**SENSITIVE, "anneal_lr": True})
    rollout = make_rollout(policy, T=4, B=3)
    rollout.extras["returns"] = rollout.extras["advantage"] + rollout.extras["value"]
    ref_model, _, _ = a2c_reference(policy, rollout, progress=0.5)
    metrics = policy.learn(rollout, LearnContext(progress=0.5))
    assert metrics["learning_rate"] == pytest.approx(policy.cfg.learning_rate / 2)
    assert_same_parameters(policy.model, ref_model)


# -- 6. LearnContext hooks --------------------------------------------------------------------------------------
@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
def test_ppo_syncs_the_flat_gradient_once_per_update(discrete):
    policy = make_policy(PPOPolicy, discrete, epochs=2, minibatch_size=8, **SENSITIVE)
    rollout = make_rollout(policy, T=6, B=4)
    ref_model, ref_grads, _ = ppo_reference(policy, rollout, seed=9)
    torch.manual_seed(9)
    ctx = RecordingContext()
    metrics = policy.learn(rollout, ctx)
    assert metrics["updates"] == 6.0 and len(ctx.grad_buffers) == 6
    assert all(buffer is policy.optimizer.grad for buffer in ctx.grad_buffers)
    assert ctx.min_calls == [3]
    assert_grads(ctx.grads, ref_grads)
    assert_same_parameters(policy.model, ref_model)


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
def test_ppo_takes_the_minibatch_count_from_ctx_min(discrete):
    policy = make_policy(PPOPolicy, discrete, epochs=2, minibatch_size=3, **SENSITIVE)
    rollout = make_rollout(policy, T=3, B=4)  # 12 samples: 4 minibatches of 3 locally
    ref_model, ref_grads, _ = ppo_reference(policy, rollout, seed=11, minibatches=2)
    torch.manual_seed(11)
    ctx = RecordingContext(min_value=2)
    metrics = policy.learn(rollout, ctx)
    assert ctx.min_calls == [4]
    assert metrics["updates"] == 4.0  # 2 minibatches (of 6) per epoch
    assert_grads(ctx.grads, ref_grads)
    assert_same_parameters(policy.model, ref_model)


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
def test_ppo_kl_stop_goes_through_ctx_mean(discrete):
    policy = make_policy(PPOPolicy, discrete, epochs=3, minibatch_size=8, target_kl=1.0, **SENSITIVE)
    rollout = make_rollout(policy, T=4, B=4, behaviour="same")
    plain = clone_policy(policy)
    torch.manual_seed(0)
    assert plain.learn(rollout, RecordingContext())["updates"] == 6.0  # the local KL never stops it
    ref_model, ref_grads, ref_infos = ppo_reference(policy, rollout, seed=0, stop_kl=-math.inf)
    assert len(ref_grads) == 1 and abs(ref_infos[0]["approx_kl"]) < 1e-6
    torch.manual_seed(0)
    ctx = RecordingContext(mean_value=1e9)
    metrics = policy.learn(rollout, ctx)
    assert metrics["updates"] == 1.0
    assert len(ctx.mean_calls) == 1 and abs(ctx.mean_calls[0]) < 1e-6
    assert_same_parameters(policy.model, ref_model)


def test_ppo_kl_stop_is_off_without_target_kl():
    policy = make_policy(PPOPolicy, True, epochs=2, minibatch_size=8, target_kl=None)
    ctx = RecordingContext(mean_value=1e9)
    assert policy.learn(make_rollout(policy, T=4, B=4), ctx)["updates"] == 4.0


@pytest.mark.parametrize("cls", [PPOPolicy, A2CPolicy])
def test_gradient_sync_happens_before_clipping_and_step(cls):
    # An adam/rmsprop eps of 1 keeps the step proportional to the gradient (not scale-invariant), and the clip
    # threshold lies between the gradient's norm and twice it: doubling before clipping, after clipping, or not
    # at all give three different updates.
    policy = make_policy(cls, True, epochs=1, minibatch_size=1000, learning_rate=0.2, adam_eps=1.0, anneal_lr=False)
    rollout = make_rollout(policy, T=6, B=4)
    rollout.extras["returns"] = rollout.extras["advantage"] + rollout.extras["value"]
    reference = ppo_reference if cls is PPOPolicy else a2c_reference
    norm = reference(policy, rollout)[1][0].norm().item()
    policy.cfg.max_grad_norm = 1.5 * norm
    expected = reference(policy, rollout, grad_scale=2.0)[0]
    unscaled = reference(policy, rollout)[0]
    after_clip = reference(policy, rollout, grad_scale=2.0, scale_after_clip=True)[0]
    ctx = RecordingContext(grad_scale=2.0)
    policy.learn(rollout, ctx)
    assert len(ctx.grads) == 1
    assert ctx.grads[0].norm().item() == pytest.approx(norm, rel=1e-4)
    assert_same_parameters(policy.model, expected)
    assert max_parameter_difference(expected, unscaled) > 1e-3
    assert max_parameter_difference(expected, after_clip) > 1e-3


# -- 7. acting-only policies, actor weights, non-finite losses --------------------------------------------------
def actor_output(policy, obs: torch.Tensor) -> torch.Tensor:
    """Logits, or the Gaussian mean and std concatenated."""
    with torch.no_grad():
        out = policy.model.policy_output(obs)
    return out if policy.discrete else torch.cat([out["mu"], out["sigma"]], -1)


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
@pytest.mark.parametrize("shared", [False, True])
def test_actor_state_dict_round_trip(discrete, shared):
    trained = make_policy(PPOPolicy, discrete, seed=0, shared_network=shared, epochs=1, **SENSITIVE)
    trained.learn(make_rollout(trained), LearnContext())
    state = trained.actor_state_dict()
    expected_keys = {name for name, _ in trained.model.named_parameters()
                     if name.startswith(("actor_trunk.", "policy_head.", "log_std"))}
    assert set(state) == expected_keys
    assert not any(name.startswith(("critic_trunk.", "value_head.")) for name in state)
    assert ("log_std" in state) == (not discrete)
    for tensor in state.values():
        assert not tensor.requires_grad
    fresh = make_policy(PPOPolicy, discrete, seed=1, shared_network=shared, acting_only=True)
    assert fresh.optimizer is None and "optimizer" not in fresh.state_dict()
    obs = torch.randn(16, OBS_DIM, generator=torch.Generator().manual_seed(5))
    assert not torch.equal(actor_output(fresh, obs), actor_output(trained, obs))
    critic_before = {k: v.clone() for k, v in fresh.model.state_dict().items() if k.startswith("value_head.")}
    fresh.load_actor_state_dict(state)
    np.testing.assert_array_equal(fresh.evaluate(obs), trained.evaluate(obs))
    torch.testing.assert_close(actor_output(fresh, obs), actor_output(trained, obs), rtol=0, atol=0)
    torch.testing.assert_close(fresh.collect(obs).extras["policy_output"], trained.collect(obs).extras["policy_output"],
                               rtol=0, atol=0)
    for key, value in critic_before.items():  # the critic is not part of the actor's weights
        torch.testing.assert_close(fresh.model.state_dict()[key], value, rtol=0, atol=0)
    # The state is a copy: changing it does not change the trained policy.
    before = trained.evaluate(obs)
    for tensor in state.values():
        tensor.add_(100.0)
    np.testing.assert_array_equal(trained.evaluate(obs), before)


def test_load_actor_state_dict_rejects_other_keys():
    policy = make_policy(PPOPolicy, True)
    state = policy.actor_state_dict()
    state["value_head.weight"] = torch.zeros(1, 16)
    with pytest.raises(ValueError):
        policy.load_actor_state_dict(state)


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
def test_acting_only_policy_acts_without_optimizer(discrete):
    policy = make_policy(PPOPolicy, discrete, acting_only=True)
    assert policy.optimizer is None
    obs = torch.randn(4, OBS_DIM)
    out = policy.collect(obs)
    assert out.action.shape[0] == 4 and set(out.extras) == {"policy_output"}
    assert policy.evaluate(obs).shape[0] == 4


@pytest.mark.parametrize("cls", [PPOPolicy, A2CPolicy])
def test_optimizer_step_nan_loss_raises_and_keeps_weights(cls):
    policy = make_policy(cls, True)
    before = copy.deepcopy(policy.model)
    state = policy.optimizer.state_dict()
    obs = torch.randn(4, OBS_DIM)
    logits, value = policy.model(obs)
    loss = (logits.sum() + value.sum()) * float("nan")
    with pytest.raises(NonFiniteError):
        policy.optimizer_step(loss, LearnContext())
    assert_same_parameters(policy.model, before, atol=0.0)
    assert policy.optimizer.steps == state["steps"] == 0
    # A learn step on a batch with a NaN advantage raises too, leaving the weights as they were.
    rollout = make_rollout(policy, T=2, B=2)
    rollout.extras["advantage"][0, 0] = float("nan")
    with pytest.raises(NonFiniteError):
        policy.learn(rollout, LearnContext())
    assert_same_parameters(policy.model, before, atol=0.0)


def test_optimizer_step_nan_loss_with_finite_gradient_raises():
    policy = make_policy(PPOPolicy, True)
    before = copy.deepcopy(policy.model)
    loss = policy.model.value(torch.randn(4, OBS_DIM)).sum() + torch.tensor(float("nan"))
    with pytest.raises(NonFiniteError):
        policy.optimizer_step(loss, LearnContext())
    assert_same_parameters(policy.model, before, atol=0.0)


def test_state_dict_resumes_exactly():
    a = make_policy(PPOPolicy, True, epochs=2, minibatch_size=8, **SENSITIVE)
    first, second = make_rollout(a, seed=1), make_rollout(a, seed=2)
    torch.manual_seed(0)
    a.learn(first, LearnContext())
    b = make_policy(PPOPolicy, True, seed=7, epochs=2, minibatch_size=8, **SENSITIVE)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    for policy in (a, b):
        torch.manual_seed(1)
        policy.learn(second, LearnContext())
    assert_same_parameters(a.model, b.model, atol=0.0)


# -- 8. evaluate_policy -----------------------------------------------------------------------------------------
ENV_NAME = "zoo_test_policies_counter"


class CounterEnv(gym.Env):
    """Reward 1 per step; the episode lasts ``base + seed % spread`` steps (seed of the last seeded reset).
    Observation: ``[steps so far, episode length]``."""

    observation_space = gym.spaces.Box(0.0, 1000.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, base: int = 2, spread: int = 5) -> None:
        self.base, self.spread, self.length, self.count = base, spread, base, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.length = self.base + seed % self.spread
        self.count = 0
        return self._obs(), {}

    def step(self, action):
        self.count += 1
        return self._obs(), 1.0, self.count >= self.length, False, {}

    def _obs(self):
        return np.array([self.count, self.length], dtype=np.float32)


@pytest.fixture
def counter_env():
    ENV_REGISTRY.register(ENV_NAME, CounterEnv, source="tests")
    yield ENV_NAME
    ENV_REGISTRY.unregister(ENV_NAME)


class RecordingPolicy(Policy):
    """Records the observations it is given; always answers action 0."""

    def __init__(self) -> None:
        super().__init__(EasyDict(), CounterEnv.observation_space, CounterEnv.action_space, torch.device("cpu"))
        self.seen: list[torch.Tensor] = []
        self.calls: list[str] = []

    def evaluate(self, obs):
        self.seen.append(obs.clone())
        self.calls.append("evaluate")
        return np.zeros(obs.shape[0], dtype=np.int64)

    def collect(self, obs):
        self.seen.append(obs.clone())
        self.calls.append("collect")
        return CollectOutput(np.zeros(obs.shape[0], dtype=np.int64))


@pytest.mark.parametrize("deterministic", [True, False])
def test_evaluate_policy_returns_episode_lengths(counter_env, deterministic):
    policy = RecordingPolicy()
    seed, base, spread = 3, 2, 5
    returns = evaluate_policy(policy, EnvSpec(counter_env, {"base": base, "spread": spread}), episodes=7,
                              seed=seed, batch=4, deterministic=deterministic)
    expected = [float(base + (seed + k) % spread) for k in range(7)]
    assert len(set(expected[:4])) > 1  # envs of one batch end at different steps
    assert returns == expected
    assert set(policy.calls) == {"evaluate" if deterministic else "collect"}
    # Without normalisation the policy sees the raw observations as float32.
    first = policy.seen[0]
    assert first.dtype == torch.float32
    torch.testing.assert_close(first, torch.tensor([[0.0, e] for e in expected[:4]]))
    # One step per step of the longest episode of each batch: batch 1 runs max(lengths) steps.
    assert len(policy.seen) == max(expected[:4]) + max(expected[4:])


def test_evaluate_policy_feeds_normalized_observations(counter_env):
    rms = RunningMeanStd(shape=(2,))
    rms.update(np.array([[0.0, 2.0], [4.0, 9.0], [1.0, 3.0]]))
    frozen = NormalizeObservation.frozen({"obs_rms": rms.state_dict(), "clip": 5.0, "epsilon": 1e-8})
    raw_seen, normalized = [], []

    def normalize_obs(obs):
        raw_seen.append(np.array(obs, copy=True))
        out = frozen(obs)
        normalized.append(np.array(out, copy=True))
        return out

    policy = RecordingPolicy()
    returns = evaluate_policy(policy, EnvSpec(counter_env, {"base": 1, "spread": 4}), episodes=3, seed=0,
                              normalize_obs=normalize_obs)
    assert returns == [1.0, 2.0, 3.0]
    assert len(policy.seen) == len(raw_seen) == 3
    for got, raw, norm in zip(policy.seen, raw_seen, normalized):
        expected = np.clip((raw - rms.mean) / np.sqrt(rms.var + 1e-8), -5.0, 5.0).astype(np.float32)
        np.testing.assert_allclose(norm, expected, rtol=1e-6, atol=1e-6)
        assert got.dtype == torch.float32
        np.testing.assert_array_equal(got.numpy(), norm)
        assert not np.allclose(got.numpy(), raw)
    np.testing.assert_array_equal(raw_seen[0], [[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]])


def test_evaluate_policy_step_limit(counter_env):
    with pytest.raises(ZooError, match="did not end"):
        evaluate_policy(RecordingPolicy(), EnvSpec(counter_env, {"base": 50, "spread": 1}), episodes=2, seed=0,
                        step_limit=10)


def test_a_deep_copied_policy_learns_like_the_original():
    policy = make_policy(PPOPolicy, True)
    twin = copy.deepcopy(policy)
    rollout = make_rollout(policy, seed=3)
    for learner in (policy, twin):
        torch.manual_seed(5)
        learner.learn(rollout, LearnContext())
    assert_same_parameters(policy.model, twin.model, atol=0.0)
    fresh = make_policy(PPOPolicy, True)
    assert any(not torch.equal(a, b) for a, b in zip(twin.model.parameters(), fresh.model.parameters()))  # it learned


# -- numpy acting (small CPU models) ----------------------------------------------------------------------------
@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
@pytest.mark.parametrize("activation", ["tanh", "relu", "elu"])
def test_numpy_acting_matches_the_torch_path_and_follows_learning(discrete, activation):
    policy = make_policy(PPOPolicy, discrete, activation=activation, epochs=1, minibatch_size=1000, **SENSITIVE)
    assert policy.cfg.numpy_acting and policy.numpy_acting_applies()
    obs = torch.randn(3, 64, OBS_DIM, generator=torch.Generator().manual_seed(3))
    rollout = make_rollout(policy, T=3, B=64)

    def act(numpy_acting):  # a rollout actor driven over obs; numpy_acting=False: collect at every step
        policy.cfg.numpy_acting = numpy_acting
        torch.manual_seed(7)
        actor = policy.rollout_actor(3, 64)
        actions = [actor.act(t, obs[t].numpy()).copy() for t in range(3)]
        raw, extras = actor.finish()
        values = policy._rollout_values(rollout)
        policy.cfg.numpy_acting = True
        return np.stack(actions), raw, extras["policy_output"], values

    for _ in range(2):  # before and after an update: every rollout copies the current weights
        (env_np, raw_np, out_np, value_np), (env_torch, raw_torch, out_torch, value_torch) = act(True), act(False)
        torch.testing.assert_close(out_np, out_torch, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(value_np, value_torch, rtol=1e-5, atol=1e-6)
        if discrete:
            assert torch.equal(raw_np, raw_torch)  # the same noise from torch's generator
            np.testing.assert_array_equal(env_np, env_torch)
        else:
            torch.testing.assert_close(raw_np, raw_torch, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(env_np, np.clip(raw_np.numpy(), -0.1, 0.1))
        policy.learn(make_rollout(policy, T=4, B=3), LearnContext())
        assert not torch.allclose(act(True)[2], out_np)  # the next rollout acts with the new weights
