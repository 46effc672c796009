"""SAC and SAC-ACE (``zoo.policies.sac``, ``zoo.policies.ace``) against independent references written out here.

The reference learner (``ReferenceSAC``) runs on ``copy.deepcopy`` of the policy's networks with
``torch.optim.Adam`` and forward passes, log-probabilities and losses written out in plain torch; seeding torch's
global generator before both replays the same minibatch (``randint``) and noise (``randn`` for the next action,
then for the actor's action). Adam's step hardly depends on the gradient's size, so gradients (seen through
``LearnContext.sync_gradients``) and metrics are compared as well as parameters.

Covers:

- One update and several: critic target ``r + gamma (1 - terminated) (min_e Q'_e(s', a') - alpha log pi(a'|s'))``
  (a truncated transition bootstraps, a terminated one does not), critic loss ``0.5 sum_e mean (Q_e - y)^2`` on
  env actions rescaled to [-1, 1], actor loss ``mean(alpha log pi - min_e Q_e(s, a~))`` into the actor only,
  temperature loss ``-log alpha mean(log pi - |A|)``, Polyak target; metrics.
- ``_sample``'s log-prob against ``rl_utils.tanh_gaussian_log_prob``, values and gradients.
- Delayed actor/temperature updates (``actor_update_interval``) and target updates (``target_update_interval``).
- SAC-ACE causal weights: ``sum_k w_k log pi_k`` in the critic target, the actor loss and the temperature loss;
  sampling unchanged. ``CausalWeightSchedule``: fit points, the most recent rows, ``apply_after``, its state while
  a fit is pending; causal weights where the reward depends on one action dimension only.
- Dormancy: ``gradient_dormant_fraction`` on hand-set gradients, ``reset_factor``, resets inside ``learn``
  (timing, ``a * old + (1 - a) * fresh`` with the fresh draws in sac.py's order, optimiser state, metrics).
- HL-Gauss critics: logits, expectations and the cross-entropy loss against Gaussian-CDF binning written out;
  the ConfigError without a support.
- state_dict round trip (exact resume), acting-only policies, actor weights; check_spaces; NaN rewards.
"""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import new_policy

from zoo.data import ReplayBuffer, Transitions
from zoo.errors import ConfigError
from zoo.policies import LearnContext, SACACEPolicy, SACPolicy
from zoo.policies.ace import CausalWeightSchedule, gradient_dormant_fraction, reset_factor
from zoo.rl_utils import HLGauss, causal_action_weights, tanh_gaussian_log_prob

OBS_DIM, ACT_DIM = 3, 2
OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
# Asymmetric bounds: the critics must see (a - center) / half, not the env action.
ACT_SPACE = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32), dtype=np.float32)
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
# Large learning rates (alpha's especially) and a tau far from 0 and 1 so that every term shows in the parameters.
SENSITIVE = {
    "hidden_sizes": [16, 16], "batch_size": 32, "gamma": 0.9, "tau": 0.3, "init_alpha": 0.5,
    "actor_learning_rate": 1e-2, "critic_learning_rate": 1e-2, "alpha_learning_rate": 0.1,
    "log_std_min": -5.0, "log_std_max": 2.0,
}
NO_ACE = {"causal_weights": False, "dormant_reset": False}
# One code per replay row: '.' plain, 'T' terminated, 'X' truncated, 'B' both.
FLAGS = "..TX.B.T..X...TX"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -- builders ---------------------------------------------------------------------------------------------------
def make_policy(cls=SACPolicy, seed=0, acting_only=False, action_space=ACT_SPACE, **overrides):
    return new_policy(cls, OBS_SPACE, action_space, seed, acting_only, **{**SENSITIVE, **overrides})


def make_replay(n=16, seed=0, flags=FLAGS, reward_scale=1.0) -> ReplayBuffer:
    rng = np.random.default_rng(seed)
    flags = (flags * n)[:n]
    replay = ReplayBuffer(n, (OBS_DIM,), (ACT_DIM,))
    replay.add(Transitions(
        obs=rng.normal(size=(n, OBS_DIM)).astype(np.float32),
        action=rng.uniform(ACT_SPACE.low, ACT_SPACE.high, (n, ACT_DIM)).astype(np.float32),
        reward=(reward_scale * rng.normal(size=n)).astype(np.float32),
        next_obs=rng.normal(size=(n, OBS_DIM)).astype(np.float32),
        terminated=np.array([c in "TB" for c in flags]),
        truncated=np.array([c in "XB" for c in flags]),
    ))
    return replay


def causal_transitions(n, effect_dim, seed, low=-1.0, high=1.0, action_dim=ACT_DIM, effect=2.0) -> Transitions:
    """Uniform states and actions; reward ``effect * a[effect_dim] + 0.5 s0 + uniform noise`` (non-Gaussian, as
    LiNGAM needs); the other action dimensions are irrelevant."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1.0, 1.0, (n, OBS_DIM))
    action = rng.uniform(low, high, (n, action_dim))
    reward = effect * action[:, effect_dim] + 0.5 * obs[:, 0] + rng.uniform(-0.5, 0.5, n)
    return Transitions(
        obs=obs.astype(np.float32), action=action.astype(np.float32), reward=reward.astype(np.float32),
        next_obs=rng.uniform(-1.0, 1.0, (n, OBS_DIM)).astype(np.float32),
        terminated=np.zeros(n, dtype=bool), truncated=rng.uniform(size=n) < 0.02,
    )


def replay_of(*parts: Transitions, capacity=None, action_dim=ACT_DIM) -> ReplayBuffer:
    capacity = capacity or sum(len(p) for p in parts)
    replay = ReplayBuffer(capacity, (OBS_DIM,), (action_dim,))
    for part in parts:
        replay.add(part)
    return replay


def set_causal_weights(policy, weights) -> None:
    """Through the public path: the schedule's state inside the policy's state_dict."""
    state = policy.state_dict()
    state["causal"] = {**state["causal"], "weights": np.asarray(weights, dtype=np.float64)}
    policy.load_state_dict(state)


class RecordingContext(LearnContext):
    """Records every gradient buffer handed to ``sync_gradients`` (a copy, before the optimiser step)."""

    def __init__(self, updates=1, env_steps=0):
        super().__init__(env_steps=env_steps, updates=updates)
        self.grads: list[torch.Tensor] = []

    def sync_gradients(self, grad):
        self.grads.append(grad.detach().clone())


# -- hand-written networks and losses -----------------------------------------------------------------------------
def actor_forward(actor, obs, bounds):
    """(mu, log_std) from the actor's Linear layers, ReLU hidden units, log_std clamped into ``bounds``."""
    layers = list(actor.layers)
    x = obs
    for layer in layers[:-1]:
        x = torch.relu(x @ layer.weight.T + layer.bias)
    out = x @ layers[-1].weight.T + layers[-1].bias
    half = out.shape[-1] // 2
    low, high = bounds
    return out[:, :half], torch.clamp(out[:, half:], low, high)


def squashed_sample(actor, obs, noise, bounds):
    """(tanh(u), per-dimension log-density of tanh(u)) for ``u = mu + sigma * noise``."""
    mu, log_std = actor_forward(actor, obs, bounds)
    sigma = log_std.exp()
    pre = mu + sigma * noise
    gauss = -0.5 * ((pre - mu) / sigma) ** 2 - log_std - LOG_SQRT_2PI
    log_one_minus_tanh2 = 2.0 * (math.log(2.0) - pre - F.softplus(-2.0 * pre))  # log(1 - tanh(u)^2)
    return torch.tanh(pre), gauss - log_one_minus_tanh2


def critic_forward(critic, obs, action, detach=False):
    """(E, B, out) outputs of every critic: ReLU MLPs on [obs, action] with weights (E, fan_in, fan_out)."""
    x = torch.cat([obs, action], -1)
    last = len(critic.weights) - 1
    outs = []
    for e in range(critic.ensemble):
        h = x
        for index, (weight, bias) in enumerate(zip(critic.weights, critic.biases)):
            w, b = (weight[e].detach(), bias[e].detach()) if detach else (weight[e], bias[e])
            h = h @ w + b
            if index < last:
                h = torch.relu(h)
        outs.append(h)
    return torch.stack(outs)


def hl_gauss_probs_ref(target, low, high, bins, sigma):
    """Mass of N(clamp(target), sigma^2) in each of ``bins`` equal bins of [low, high], renormalised."""
    edges = torch.linspace(low, high, bins + 1)
    cdf = 0.5 * (1.0 + torch.erf((edges - target.clamp(low, high)[..., None]) / (sigma * math.sqrt(2.0))))
    mass = cdf[..., 1:] - cdf[..., :-1]
    return mass / mass.sum(-1, keepdim=True)


def fresh_actor_ref(actor) -> list[torch.Tensor]:
    """nn.Linear's default initialisation, layer by layer (weight then bias): U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    tensors = []
    for layer in actor.layers:
        bound = 1.0 / math.sqrt(layer.in_features)
        tensors.append(torch.empty(layer.out_features, layer.in_features).uniform_(-bound, bound))
        tensors.append(torch.empty(layer.out_features).uniform_(-bound, bound))
    return tensors


def fresh_critic_ref(critic) -> list[torch.Tensor]:
    """EnsembleQ's initialisation, drawn layer by layer (weight then bias), returned in parameter order."""
    weights, biases = [], []
    for weight in critic.weights:
        ensemble, fan_in, fan_out = weight.shape
        bound = 1.0 / math.sqrt(fan_in)
        weights.append(torch.empty(ensemble, fan_in, fan_out).uniform_(-bound, bound))
        biases.append(torch.empty(ensemble, 1, fan_out).uniform_(-bound, bound))
    return weights + biases


def dormant_fraction_ref(layers, tau) -> float:
    dormant = total = 0
    for layer in layers:
        norms = layer.weight.grad.pow(2).sum(1).sqrt()
        dormant += int((norms < tau * norms.mean()).sum())
        total += norms.numel()
    return dormant / total


def flat_grad(module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in module.parameters()])


class ReferenceSAC:
    """SAC (and ACE's parts) on deep copies of a policy's networks, with torch.optim.Adam.

    ``weights``: causal weights, used in the terms named in ``weighted`` (of "target", "actor", "alpha").
    ``done``: the flag that stops bootstrapping, "terminated" (right) or "either" (to show the batch tells them
    apart). Records per update: the gradients in the order the policy syncs them, the critic target, metrics.
    """

    def __init__(self, policy, weights=None, weighted=("target", "actor", "alpha"), done="terminated"):
        cfg = self.cfg = policy.cfg
        state = policy.state_dict()
        self.actor = copy.deepcopy(policy.actor)
        self.critic = copy.deepcopy(policy.critic)
        self.target = copy.deepcopy(policy.target)
        self.log_alpha = torch.nn.Parameter(state["log_alpha"].detach().clone())
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_learning_rate)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_learning_rate)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=cfg.alpha_learning_rate)
        low = torch.as_tensor(policy.action_space.low, dtype=torch.float32)
        high = torch.as_tensor(policy.action_space.high, dtype=torch.float32)
        self.center, self.half = (high + low) / 2, (high - low) / 2
        self.bounds = (cfg.log_std_min, cfg.log_std_max)
        self.action_dim = int(policy.action_space.shape[0])
        self.target_entropy = -float(self.action_dim)
        self.weights = None if weights is None else torch.as_tensor(weights, dtype=torch.float32)
        self.weighted, self.done = weighted, done
        self.updates = int(state["updates"])
        self.hl = None
        if cfg.critic_loss == "hl_gauss":
            low_v, high_v, bins = float(cfg.hl_gauss_min), float(cfg.hl_gauss_max), int(cfg.hl_gauss_bins)
            edges = torch.linspace(low_v, high_v, bins + 1)
            self.hl = (low_v, high_v, bins, (edges[:-1] + edges[1:]) / 2, cfg.hl_gauss_sigma_ratio * (high_v - low_v)
                       / bins)
        self.records: list[dict] = []
        self.resets: list[dict] = []

    def log_prob(self, per_dim, term):
        if self.weights is None or term not in self.weighted:
            return per_dim.sum(-1)
        return (per_dim * self.weights).sum(-1)

    def scalar(self, out):
        if self.hl is None:
            return out.squeeze(-1)
        return (torch.softmax(out, -1) * self.hl[3]).sum(-1)

    def critic_loss(self, out, y):
        if self.hl is None:
            return 0.5 * ((out.squeeze(-1) - y) ** 2).mean(1).sum()
        low, high, bins, _, sigma = self.hl
        probs = hl_gauss_probs_ref(y, low, high, bins, sigma)
        return (-(probs * torch.log_softmax(out, -1)).sum(-1)).mean(1).sum()

    def learn(self, replay, updates=1) -> dict[str, float]:
        """``updates`` updates; the metrics averaged as ``learn`` averages them (alpha: its value at the end)."""
        totals: dict[str, float] = {}
        for _ in range(updates):
            for key, value in self.update(replay)["metrics"].items():
                totals[key] = totals.get(key, 0.0) + value
        metrics = {key: value / updates for key, value in totals.items()}
        metrics["alpha"] = float(self.log_alpha.detach().exp())
        return metrics

    def update(self, replay) -> dict:
        cfg, record = self.cfg, {"grads": []}
        rows = torch.randint(len(replay), (cfg.batch_size,)).numpy()
        obs, next_obs = torch.as_tensor(replay.obs[rows]), torch.as_tensor(replay.next_obs[rows])
        action = (torch.as_tensor(replay.action[rows]) - self.center) / self.half
        reward = torch.as_tensor(replay.reward[rows])
        terminated, truncated = torch.as_tensor(replay.terminated[rows]), torch.as_tensor(replay.truncated[rows])
        done = terminated if self.done == "terminated" else terminated | truncated
        alpha = self.log_alpha.detach().exp()
        next_noise = torch.randn(cfg.batch_size, self.action_dim)
        with torch.no_grad():
            next_action, next_per_dim = squashed_sample(self.actor, next_obs, next_noise, self.bounds)
            next_q = self.scalar(critic_forward(self.target, next_obs, next_action)).min(0).values
            soft_value = next_q - alpha * self.log_prob(next_per_dim, "target")
            y = reward + cfg.gamma * (1.0 - done.float()) * soft_value
        out = critic_forward(self.critic, obs, action)
        critic_loss = self.critic_loss(out, y)
        self.critic_opt.zero_grad()
        critic_loss.backward()
        record["grads"].append(("critic", flat_grad(self.critic).clone()))
        self.critic_opt.step()
        self.updates += 1
        record.update(rows=rows, y=y, terminated=terminated, truncated=truncated)
        metrics = {"critic_loss": critic_loss.item(), "q_mean": self.scalar(out.detach()).mean().item()}
        if self.updates % cfg.actor_update_interval == 0:
            noise = torch.randn(cfg.batch_size, self.action_dim)
            new_action, per_dim = squashed_sample(self.actor, obs, noise, self.bounds)
            q = self.scalar(critic_forward(self.critic, obs, new_action, detach=True)).min(0).values
            actor_loss = (alpha * self.log_prob(per_dim, "actor") - q).mean()
            self.actor_opt.zero_grad()
            actor_loss.backward()
            record["grads"].append(("actor", flat_grad(self.actor).clone()))
            self.actor_opt.step()
            gap = (self.log_prob(per_dim, "alpha").detach() + self.target_entropy).mean()
            alpha_loss = -self.log_alpha * gap
            metrics.update(actor_loss=actor_loss.item(), entropy=-per_dim.detach().sum(-1).mean().item(),
                           alpha_loss=alpha_loss.item())
            self.alpha_opt.zero_grad()
            alpha_loss.backward()
            record["grads"].append(("alpha", self.log_alpha.grad.detach().reshape(1).clone()))
            self.alpha_opt.step()
        if self.updates % cfg.target_update_interval == 0:
            with torch.no_grad():
                for target, online in zip(self.target.parameters(), self.critic.parameters()):
                    target.copy_((1.0 - cfg.tau) * target + cfg.tau * online)
        # ACE's code: the reset comes after the whole update, target step included, at every multiple of the
        # interval (from the actor's latest gradients, whether or not this update stepped the actor)
        resets = cfg.get("dormant_reset", False)  # sac has no ACE keys
        if resets and self.updates >= cfg.reset_start and self.updates % cfg.reset_interval == 0:
            self.reset()
        record["metrics"] = metrics
        self.records.append(record)
        return record

    def reset(self) -> None:
        cfg = self.cfg
        fraction = dormant_fraction_ref(self.actor.layers, cfg.dormant_tau)
        factor = min(max(cfg.reset_factor_min, 1.0 - fraction), cfg.reset_factor_max)
        fresh = [fresh_actor_ref(self.actor), fresh_critic_ref(self.critic), fresh_critic_ref(self.target)]
        with torch.no_grad():
            for module, tensors in zip((self.actor, self.critic, self.target), fresh):
                for param, new in zip(module.parameters(), tensors):
                    param.copy_(factor * param + (1.0 - factor) * new)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_learning_rate)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_learning_rate)
        self.resets.append({"update": self.updates, "fraction": fraction, "factor": factor})


# -- comparisons --------------------------------------------------------------------------------------------------
def assert_same_networks(policy, ref, atol=1e-5):
    for name in ("actor", "critic", "target"):
        pairs = zip(getattr(policy, name).named_parameters(), getattr(ref, name).parameters())
        for (pname, got), want in pairs:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=atol,
                                       msg=lambda m, where=f"{name}.{pname}": f"{where}: {m}")
    torch.testing.assert_close(policy.state_dict()["log_alpha"], ref.log_alpha.detach(), rtol=1e-5, atol=1e-6)


def assert_same_grads(recorded: list[torch.Tensor], records: list[dict]):
    expected = [(kind, grad) for record in records for kind, grad in record["grads"]]
    assert len(recorded) == len(expected), [kind for kind, _ in expected]
    for got, (kind, want) in zip(recorded, expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=lambda m, kind=kind: f"{kind} grad: {m}")


def assert_same_metrics(metrics: dict, expected: dict):
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key


def assert_state_equal(a, b, where="state"):
    """Exact equality of nested state dicts (tensors, arrays, numbers, None)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_state_equal(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), f"{where} differs"
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b, f"{where}: {a} != {b}"


# -- 1. one update and several ----------------------------------------------------------------------------------
def test_one_update_matches_reference():
    policy, replay = make_policy(), make_replay()
    ref = ReferenceSAC(policy)
    torch.manual_seed(11)
    expected = ref.learn(replay)
    record = ref.records[0]
    # The minibatch has plain, terminated-only and truncated-only transitions, and the choice matters.
    terminated, truncated = record["terminated"], record["truncated"]
    assert (terminated & ~truncated).any() and (truncated & ~terminated).any() and (~terminated & ~truncated).any()
    torch.manual_seed(11)
    either = ReferenceSAC(policy, done="either")
    either.learn(replay)
    assert (either.records[0]["y"] - record["y"]).abs().max() > 0.1
    assert (record["y"][terminated] - torch.as_tensor(replay.reward[record["rows"]])[terminated]).abs().max() == 0

    torch.manual_seed(11)
    ctx = RecordingContext()
    metrics = policy.learn(replay, ctx)
    assert_same_grads(ctx.grads, ref.records)
    assert_same_metrics(metrics, expected)
    assert set(expected) <= set(metrics)
    assert policy.state_dict()["updates"] == 1
    assert_same_networks(policy, ref)
    # The actor's loss reaches the actor only: the critics still hold their own loss's gradient.
    torch.testing.assert_close(flat_grad(policy.critic), record["grads"][0][1], rtol=1e-4, atol=1e-5)


def test_several_updates_in_one_call_match_reference():
    # Tight log-std bounds: the actor's raw log-std output falls on both sides of them.
    policy, replay = make_policy(seed=3, log_std_min=-0.1, log_std_max=0.05), make_replay(seed=4)
    with torch.no_grad():
        raw = actor_forward(policy.actor, torch.as_tensor(replay.obs), (-np.inf, np.inf))[1]
    assert (raw < -0.1).any() and (raw > 0.05).any() and ((raw > -0.1) & (raw < 0.05)).any()
    ref = ReferenceSAC(policy)
    torch.manual_seed(5)
    expected = ref.learn(replay, updates=3)
    torch.manual_seed(5)
    ctx = RecordingContext(updates=3)
    metrics = policy.learn(replay, ctx)
    assert_same_grads(ctx.grads, ref.records)
    assert_same_metrics(metrics, expected)
    assert policy.state_dict()["updates"] == 3
    assert_same_networks(policy, ref)


# -- 2. the log-prob ----------------------------------------------------------------------------------------------
def test_sample_log_prob_matches_rl_utils_values_and_gradients():
    policy = make_policy(seed=2, log_std_min=-1.0, log_std_max=3.0)  # sigma about e
    g = torch.Generator().manual_seed(0)
    obs = 3.0 * torch.randn(64, OBS_DIM, generator=g)  # wide pre-tanh samples: the Jacobian term matters
    torch.manual_seed(7)
    action, per_dim, weighted = policy._sample(obs)
    torch.manual_seed(7)
    noise = torch.randn(64, ACT_DIM)
    mu, log_std = policy.actor(obs)
    pre = mu + log_std.exp() * noise
    expected = tanh_gaussian_log_prob(mu, log_std.exp(), pre, reduce=False)
    assert pre.abs().max() > 3.0
    torch.testing.assert_close(per_dim, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(action, torch.tanh(pre), rtol=0.0, atol=1e-6)
    torch.testing.assert_close(weighted, expected.sum(-1), rtol=1e-5, atol=1e-5)
    params = list(policy.actor.parameters())
    coef = torch.randn(64, ACT_DIM, generator=g)
    got = torch.autograd.grad((per_dim * coef).sum() + (action * coef).sum(), params)
    want = torch.autograd.grad((expected * coef).sum() + (torch.tanh(pre) * coef).sum(), params)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


# -- 3. delays ----------------------------------------------------------------------------------------------------
def test_actor_and_target_delays_match_reference():
    policy = make_policy(seed=5, actor_update_interval=2, target_update_interval=3)
    replay = make_replay(seed=6)
    ref = ReferenceSAC(policy)
    for update in range(1, 7):
        before = copy.deepcopy(policy.state_dict())
        torch.manual_seed(100 + update)
        expected = ref.learn(replay)
        torch.manual_seed(100 + update)
        ctx = RecordingContext()
        metrics = policy.learn(replay, ctx)
        after = policy.state_dict()
        assert_same_grads(ctx.grads, ref.records[-1:])
        assert_same_metrics(metrics, expected)
        assert_same_networks(policy, ref)
        actor_moved = any(not torch.equal(before["actor"][k], after["actor"][k]) for k in after["actor"])
        alpha_moved = not torch.equal(before["log_alpha"], after["log_alpha"])
        target_moved = any(not torch.equal(before["target"][k], after["target"][k]) for k in after["target"])
        assert actor_moved == alpha_moved == (update % 2 == 0), update
        assert target_moved == (update % 3 == 0), update
        assert ("actor_loss" in metrics) == (update % 2 == 0)


# -- 4. causal weights in the three entropy terms ---------------------------------------------------------------
WEIGHTS = [1.6, 0.4]


def test_causal_weights_replace_log_prob_in_target_actor_and_alpha_losses():
    policy = make_policy(SACACEPolicy, seed=7, dormant_reset=False)
    set_causal_weights(policy, WEIGHTS)
    replay = make_replay(seed=8)

    def reference(weighted):
        ref = ReferenceSAC(policy, weights=WEIGHTS, weighted=weighted)
        torch.manual_seed(21)
        return ref, ref.learn(replay)

    ref, expected = reference(("target", "actor", "alpha"))
    full = dict(ref.records[0]["grads"])
    # The batch makes each of the three terms visible: leaving any one unweighted changes its gradient.
    for term, grad in (("target", "critic"), ("actor", "actor"), ("alpha", "alpha")):
        partial, _ = reference(tuple(t for t in ("target", "actor", "alpha") if t != term))
        assert (dict(partial.records[0]["grads"])[grad] - full[grad]).abs().max() > 1e-3, term
    torch.manual_seed(21)
    ctx = RecordingContext()
    metrics = policy.learn(replay, ctx)
    assert_same_grads(ctx.grads, ref.records)
    assert_same_metrics(metrics, expected)
    assert_same_networks(policy, ref)
    assert [metrics["causal_weight_0"], metrics["causal_weight_1"]] == pytest.approx(WEIGHTS)


def test_causal_weights_leave_sampling_unchanged():
    weighted, plain = make_policy(SACACEPolicy, seed=9), make_policy(SACPolicy, seed=9)
    set_causal_weights(weighted, WEIGHTS)
    obs = torch.randn(20, OBS_DIM, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(3)
    a = weighted.collect(obs).action
    torch.manual_seed(3)
    b = plain.collect(obs).action
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(weighted.evaluate(obs), plain.evaluate(obs))


# -- 5. the causal weight schedule ------------------------------------------------------------------------------
def pending(schedule):
    return schedule.state_dict()["pending"]


def test_schedule_starts_at_interval_multiples_once_the_replay_holds_sample_size():
    data = causal_transitions(500, 0, seed=1)
    enough = replay_of(data, capacity=2000)
    schedule = CausalWeightSchedule(ACT_DIM, interval=100, sample_size=500, apply_after=0)
    np.testing.assert_array_equal(schedule.weights, np.ones(ACT_DIM))  # before the first fit
    schedule.maybe_start(enough, 99, 0)
    assert pending(schedule) is None
    short = CausalWeightSchedule(ACT_DIM, interval=100, sample_size=501, apply_after=0)
    short.maybe_start(enough, 100, 0)
    assert pending(short) is None
    schedule.maybe_start(enough, 100, 0)
    assert pending(schedule) is not None
    assert schedule.maybe_apply(0)
    np.testing.assert_allclose(schedule.weights, causal_action_weights(data.obs, data.action, data.reward),
                               rtol=1e-12)
    assert schedule.weights.sum() == pytest.approx(ACT_DIM)
    schedule.maybe_start(enough, 199, 1)
    assert pending(schedule) is None
    schedule.maybe_start(enough, 730, 1)  # past several fit points: one fit, the next at 800
    assert pending(schedule) is not None
    schedule.maybe_apply(1)
    schedule.maybe_start(enough, 799, 2)
    assert pending(schedule) is None
    schedule.maybe_start(enough, 800, 2)
    assert pending(schedule) is not None
    schedule.close()


def test_schedule_fits_the_most_recent_rows_and_applies_them_apply_after_updates_later():
    old, new = causal_transitions(4000, 1, seed=2), causal_transitions(3000, 0, seed=3)
    replay = replay_of(old, new, capacity=5000)  # the newest rows wrap around the ring
    schedule = CausalWeightSchedule(ACT_DIM, interval=100, sample_size=3000, apply_after=5)
    schedule.maybe_start(replay, 100, 7)
    state = copy.deepcopy(schedule.state_dict())  # waits for the fit: it has finished from here on
    want = causal_action_weights(new.obs, new.action, new.reward)
    assert want[0] > 1.5 and want.sum() == pytest.approx(ACT_DIM)
    assert state["pending"]["apply_at"] == 12
    np.testing.assert_allclose(state["pending"]["weights"], want, rtol=1e-12)
    restored = CausalWeightSchedule(ACT_DIM, interval=100, sample_size=3000, apply_after=5)
    restored.load_state_dict(copy.deepcopy(state))
    for sched in (schedule, restored):
        assert not sched.maybe_apply(11)
        np.testing.assert_array_equal(sched.weights, np.ones(ACT_DIM))
        assert sched.maybe_apply(12)
        np.testing.assert_allclose(sched.weights, want, rtol=1e-12)
        assert sched.state_dict()["pending"] is None
        assert sched.state_dict()["next_fit_at"] == 200
    schedule.close()


def test_policy_uses_a_fit_exactly_apply_after_updates_after_it_started():
    data = causal_transitions(300, 0, seed=4, low=ACT_SPACE.low, high=ACT_SPACE.high)
    data.terminated[::5] = True
    replay = replay_of(data)
    policy = make_policy(SACACEPolicy, seed=1, dormant_reset=False, batch_size=16, causal_interval=1000,
                         causal_sample_size=300, causal_apply_after=3)
    fitted = causal_action_weights(data.obs, data.action, data.reward)
    assert fitted[0] > 1.5
    ref = ReferenceSAC(policy)  # unweighted (all ones) until the fit applies
    seen = []
    for call in range(5):
        if call == 3:  # the fourth update is the first one apply_after = 3 updates after the start
            ref.weights = torch.as_tensor(fitted, dtype=torch.float32)
        torch.manual_seed(call)
        ref.learn(replay)
        torch.manual_seed(call)
        ctx = RecordingContext(updates=1, env_steps=1000)
        metrics = policy.learn(replay, ctx)
        assert_same_grads(ctx.grads, ref.records[-1:])
        assert_same_networks(policy, ref)
        seen.append([metrics["causal_weight_0"], metrics["causal_weight_1"]])
        if call == 0:
            assert policy.state_dict()["causal"]["pending"]["apply_at"] == 3  # waits: the thread has finished
    assert seen[:3] == [[1.0, 1.0]] * 3
    np.testing.assert_allclose(seen[3], fitted, rtol=1e-12)
    assert seen[4] == seen[3] and sum(seen[3]) == pytest.approx(ACT_DIM)
    policy.close()


# -- 6. causal weights where the truth is known -----------------------------------------------------------------
@pytest.mark.parametrize(("effect_dim", "effect"), [(0, 2.0), (2, -2.0)])
def test_causal_weights_favour_the_action_dimension_the_reward_depends_on(effect_dim, effect):
    data = causal_transitions(4000, effect_dim, seed=10 + effect_dim, action_dim=3, effect=effect)
    weights = causal_action_weights(data.obs, data.action, data.reward)  # signed effects, as ACE's code
    if effect > 0:
        assert int(np.argmax(weights)) == effect_dim and weights[effect_dim] > 2.0
    else:  # a dimension that lowers the reward weighs least
        assert int(np.argmin(weights)) == effect_dim and weights[effect_dim] < 0.2
    assert weights.sum() == pytest.approx(3.0) and (weights > 0).all()
    absolute = causal_action_weights(data.obs, data.action, data.reward, use_abs=True)  # the size alone counts
    assert int(np.argmax(absolute)) == effect_dim and absolute[effect_dim] > 2.0
    space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    policy = make_policy(SACACEPolicy, seed=0, action_space=space, dormant_reset=False, batch_size=8,
                         causal_interval=4000, causal_sample_size=4000, causal_apply_after=0)
    torch.manual_seed(0)
    metrics = policy.learn(replay_of(data, action_dim=3), LearnContext(updates=1, env_steps=4000))
    learned = [metrics[f"causal_weight_{k}"] for k in range(3)]
    np.testing.assert_allclose(learned, weights, rtol=1e-12)
    policy.close()


# -- 7. dormancy and resets ---------------------------------------------------------------------------------------
def linear_with_row_norms(norms, fan_in=4, bias_grad=100.0):
    """A Linear whose weight-gradient rows have the given norms (and large bias gradients, which must not count)."""
    layer = torch.nn.Linear(fan_in, len(norms))
    grad = torch.zeros(len(norms), fan_in)
    for row, norm in enumerate(norms):
        grad[row, row % fan_in] = norm
    layer.weight.grad = grad
    layer.bias.grad = torch.full((len(norms),), bias_grad)
    return layer


def test_gradient_dormant_fraction_counts_rows_below_tau_times_their_layers_mean():
    first = linear_with_row_norms([5.0, 5.0, 4.0, 1.0, 0.1])  # mean 3.02
    second = linear_with_row_norms([200.0, 5.0, 0.5], fan_in=3)  # mean 68.5
    # tau 0.05: 0.1 (first) and 0.5 (second) are dormant; a global mean threshold would give 3/8, a mean of
    # per-layer fractions 0.267, bias gradients in the norm 0.
    assert gradient_dormant_fraction([first, second], 0.05) == 2 / 8
    assert gradient_dormant_fraction([first, second], 0.4) == 4 / 8
    assert gradient_dormant_fraction([first], 0.4) == 2 / 5
    on_threshold = linear_with_row_norms([1.0, 1.0, 1.0, 5.0])  # mean 2: three rows exactly at 0.5 * mean
    assert gradient_dormant_fraction([on_threshold], 0.5) == 0.0
    assert gradient_dormant_fraction([on_threshold], 0.51) == 3 / 4


def test_reset_factor_is_one_minus_the_fraction_clipped():
    assert reset_factor(0.0, 0.2, 0.9) == 0.9
    assert reset_factor(0.1, 0.2, 0.9) == pytest.approx(0.9)
    assert reset_factor(0.3, 0.2, 0.9) == pytest.approx(0.7)
    assert reset_factor(0.8, 0.2, 0.9) == pytest.approx(0.2)
    assert reset_factor(0.95, 0.2, 0.9) == 0.2
    assert reset_factor(1.0, 0.2, 0.9) == 0.2
    assert reset_factor(0.5, 0.6, 0.7) == 0.6
    assert reset_factor(0.25) == pytest.approx(0.75)


@pytest.mark.parametrize(("actor_interval", "reset_interval", "reset_start", "expected"), [
    (1, 2, 3, [0, 0, 0, 1, 1, 2, 2, 3]),  # multiples of 2 from 3 on: 4, 6, 8
    (3, 2, 0, [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6]),  # every multiple, actor update or not (ACE's code): 2, 4, ...
])
def test_resets_happen_at_reset_interval_multiples_from_reset_start(
        actor_interval, reset_interval, reset_start, expected):
    policy = make_policy(SACACEPolicy, seed=2, causal_weights=False, batch_size=8,
                         actor_update_interval=actor_interval, reset_interval=reset_interval, reset_start=reset_start)
    replay = make_replay(seed=3)
    resets = []
    for update in range(len(expected)):
        torch.manual_seed(update)
        metrics = policy.learn(replay, LearnContext(updates=1))
        resets.append(int(metrics.get("resets", 0)))
        if resets[-1]:
            assert 0.0 <= metrics["dormant_fraction"] <= 1.0 and 0.2 <= metrics["reset_factor"] <= 0.9
    assert resets == expected


def test_dormancy_reset_perturbs_towards_fresh_weights_and_forgets_actor_and_critic_moments():
    cfg = {"causal_weights": False, "reset_interval": 2, "reset_start": 2, "dormant_tau": 0.6,
           "reset_factor_min": 0.05, "reset_factor_max": 0.95}
    policy = make_policy(SACACEPolicy, seed=4, **cfg)
    replay = make_replay(seed=5)
    ref = ReferenceSAC(policy)
    for update in range(1, 4):
        torch.manual_seed(200 + update)
        expected = ref.learn(replay)
        torch.manual_seed(200 + update)
        ctx = RecordingContext()
        metrics = policy.learn(replay, ctx)
        assert_same_grads(ctx.grads, ref.records[-1:])
        assert_same_metrics(metrics, expected)
        assert_same_networks(policy, ref)
        state = policy.state_dict()
        if update == 2:
            (reset,) = ref.resets
            assert reset["update"] == 2 and 0.05 < reset["factor"] < 0.95  # not clipped: the fraction shows
            assert metrics["dormant_fraction"] == pytest.approx(reset["fraction"])
            assert metrics["reset_factor"] == pytest.approx(reset["factor"])
            assert metrics["resets"] == 1.0
            for name in ("actor_optimizer", "critic_optimizer"):
                assert state[name]["steps"] == 0
                assert not state[name]["exp_avg"].any() and not state[name]["exp_avg_sq"].any()
            assert state["alpha_optimizer"]["steps"] == 2 and state["alpha_optimizer"]["exp_avg"].any()
    assert len(ref.resets) == 1 and policy.state_dict()["resets"] == 1


# -- 8. HL-Gauss critics ------------------------------------------------------------------------------------------
HL = {"critic_loss": "hl_gauss", "hl_gauss_min": -10.0, "hl_gauss_max": 10.0, "hl_gauss_bins": 21}


def test_hl_gauss_critic_outputs_expectations_and_update_matches_reference():
    policy = make_policy(seed=6, **HL)
    replay = make_replay(seed=7, reward_scale=3.0)
    replay.reward[3] = 30.0  # beyond the support: clamped
    g = torch.Generator().manual_seed(2)
    obs, action = torch.randn(10, OBS_DIM, generator=g), torch.rand(10, ACT_DIM, generator=g) * 2 - 1
    logits = policy.critic(obs, action)
    assert logits.shape == (2, 10, 21)
    edges = torch.linspace(-10.0, 10.0, 22)
    centers = (edges[:-1] + edges[1:]) / 2
    torch.testing.assert_close(policy.q_values(obs, action), (torch.softmax(logits, -1) * centers).sum(-1))
    target_logits = policy.target(obs, action)
    torch.testing.assert_close(policy.q_values(obs, action, target=True),
                               (torch.softmax(target_logits, -1) * centers).sum(-1))
    # The hand-written binning agrees with rl_utils' HLGauss.
    y = torch.tensor([-12.0, -3.3, 0.0, 4.9, 11.0])
    support = HLGauss(-10.0, 10.0, 21, 0.75)
    some_logits = torch.randn(5, 21, generator=g)
    want = -(hl_gauss_probs_ref(y, -10.0, 10.0, 21, 0.75 * 20 / 21) * torch.log_softmax(some_logits, -1)).sum(-1)
    torch.testing.assert_close(support.loss(some_logits, y), want.mean(), rtol=1e-5, atol=1e-6)

    ref = ReferenceSAC(policy)
    torch.manual_seed(31)
    expected = ref.learn(replay, updates=2)
    assert 3 in ref.records[0]["rows"] or 3 in ref.records[1]["rows"]
    torch.manual_seed(31)
    ctx = RecordingContext(updates=2)
    metrics = policy.learn(replay, ctx)
    assert_same_grads(ctx.grads, ref.records)
    assert_same_metrics(metrics, expected)
    assert_same_networks(policy, ref)


@pytest.mark.parametrize("support", [{"hl_gauss_min": None, "hl_gauss_max": 0.0},
                                     {"hl_gauss_min": -1.0, "hl_gauss_max": None},
                                     {"hl_gauss_min": None, "hl_gauss_max": None},
                                     {"hl_gauss_min": 5.0, "hl_gauss_max": 5.0}])
def test_hl_gauss_without_a_support_is_a_config_error(support):
    with pytest.raises(ConfigError) as error:
        make_policy(**{**HL, **support})
    message = str(error.value)
    assert "hl_gauss_min" in message and "hl_gauss_max" in message and "\n" not in message


# -- 9. state, acting-only, actor weights -----------------------------------------------------------------------
def test_state_dict_round_trip_resumes_exactly():
    cfg = {"batch_size": 16, "actor_update_interval": 2, "causal_interval": 100, "causal_sample_size": 200,
           "causal_apply_after": 9, "reset_interval": 4, "reset_start": 0}
    data = causal_transitions(300, 0, seed=6, low=ACT_SPACE.low, high=ACT_SPACE.high)
    data.terminated[::7] = True
    replay = replay_of(data)
    first = make_policy(SACACEPolicy, seed=0, **cfg)
    torch.manual_seed(1)
    # Actor updates at 2, 4, 6 and a reset at 4; a fit starts at update 0 and applies at 9.
    first.learn(replay, LearnContext(updates=7, env_steps=100))
    state = copy.deepcopy(first.state_dict())
    assert state["updates"] == 7 and state["resets"] == 1 and state["causal"]["pending"]["apply_at"] == 9
    assert state["actor_optimizer"]["steps"] == 1 and state["critic_optimizer"]["steps"] == 3
    second = make_policy(SACACEPolicy, seed=123, **cfg)
    second.load_state_dict(state)
    assert_state_equal(first.state_dict(), second.state_dict())
    for call in range(2):  # updates 8 to 13: resets at 8 and 12, the causal weights from update 10 on
        results = []
        for policy in (first, second):
            torch.manual_seed(50 + call)
            results.append(policy.learn(replay, LearnContext(updates=3, env_steps=150)))
        assert results[0] == results[1]
        assert_state_equal(first.state_dict(), second.state_dict())
    final = first.state_dict()
    assert final["resets"] == 3 and final["updates"] == 13 and final["causal"]["fits"] == 1
    assert abs(final["causal"]["weights"][0] - 1.0) > 0.5
    first.close()
    second.close()


def test_acting_only_policy_has_no_critic_and_evaluates_tanh_mu_in_the_bounds():
    full = make_policy(seed=8)
    actor_only = make_policy(seed=99, acting_only=True)
    for name in ("critic", "target", "actor_optimizer", "critic_optimizer", "alpha_optimizer", "alpha_module"):
        assert getattr(actor_only, name, None) is None, name
    assert not any(k in actor_only.state_dict() for k in ("critic", "target", "log_alpha", "critic_optimizer"))
    actor_only.load_state_dict(full.state_dict())
    obs = 2.0 * torch.randn(16, OBS_DIM, generator=torch.Generator().manual_seed(3))
    mu, _ = actor_forward(full.actor, obs, (full.cfg.log_std_min, full.cfg.log_std_max))
    low, high = torch.as_tensor(ACT_SPACE.low), torch.as_tensor(ACT_SPACE.high)
    expected = ((high + low) / 2 + (high - low) / 2 * torch.tanh(mu)).detach().numpy()
    np.testing.assert_allclose(actor_only.evaluate(obs), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(full.evaluate(obs), actor_only.evaluate(obs))


def test_actor_state_dict_copies_only_the_actor():
    source, dest = make_policy(seed=10), make_policy(seed=11)
    weights = source.actor_state_dict()
    assert set(weights) == set(source.actor.state_dict())
    for tensor in weights.values():
        tensor.add_(1.0)  # a copy: the source is untouched
    assert not torch.equal(weights["layers.0.weight"], source.actor.state_dict()["layers.0.weight"])
    weights = source.actor_state_dict()
    critic, target, log_alpha = (copy.deepcopy(dest.state_dict()[k]) for k in ("critic", "target", "log_alpha"))
    dest.load_actor_state_dict(weights)
    assert_state_equal(dest.actor_state_dict(), weights)
    assert_state_equal(dest.state_dict()["critic"], critic)
    assert_state_equal(dest.state_dict()["target"], target)
    assert torch.equal(dest.state_dict()["log_alpha"], log_alpha)
    # The loaded actor is the one that learns.
    replay = make_replay(seed=12)
    ref = ReferenceSAC(dest)
    torch.manual_seed(4)
    ref.learn(replay)
    torch.manual_seed(4)
    dest.learn(replay, LearnContext(updates=1))
    assert_same_networks(dest, ref)


# -- 10. spaces ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("space", [
    gym.spaces.Discrete(3),
    gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
    gym.spaces.Box(np.array([-1.0, -np.inf], np.float32), np.array([1.0, 1.0], np.float32), dtype=np.float32),
    gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32),
], ids=["discrete", "unbounded", "half_unbounded", "2d"])
def test_check_spaces_refuses_unsupported_action_spaces(space):
    with pytest.raises(ConfigError, match="action space") as error:
        SACPolicy.check_spaces(OBS_SPACE, space)
    assert str(space) in str(error.value)
    with pytest.raises(ConfigError):
        make_policy(action_space=space)
    SACPolicy.check_spaces(OBS_SPACE, ACT_SPACE)


# -- 11. non-finite rewards ---------------------------------------------------------------------------------------
def test_nan_reward_skips_the_critic_step_and_reports_a_nan_loss():
    # Sync-free: the critic's step is skipped on the device (its weights and moments as they were) and its loss
    # metric is NaN, which stops the run at the iteration's metrics row (test_offpolicy's pipeline tests).
    policy, replay = make_policy(seed=13), make_replay(seed=14)
    replay.reward[5] = np.nan
    torch.manual_seed(8)
    assert 5 in torch.randint(len(replay), (SENSITIVE["batch_size"],))
    before = copy.deepcopy(policy.state_dict())
    torch.manual_seed(8)
    metrics = policy.learn(replay, LearnContext(updates=1))
    assert math.isnan(float(metrics["critic_loss"]))
    assert all(math.isfinite(float(metrics[key])) for key in ("actor_loss", "alpha_loss", "q_mean"))
    after = policy.state_dict()
    for name in ("critic", "critic_optimizer"):
        assert_state_equal(after[name], before[name], name)
    assert not torch.equal(after["actor"]["layers.0.weight"], before["actor"]["layers.0.weight"])
