"""FlatOptimizer against torch.optim (Adam, RMSprop) and clip_grad_norm_, step for step."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from zoo.policies.optim import FlatOptimizer


def make_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))


def optimizer_pair(algorithm: str) -> tuple[nn.Module, FlatOptimizer, nn.Module, torch.optim.Optimizer]:
    """Two equal networks: one with zoo's FlatOptimizer, one with torch's own ``algorithm`` at the same settings."""
    ours, ref = make_net(), make_net()
    flat = FlatOptimizer(ours, algorithm, lr=3e-3, eps=1e-5)
    if algorithm == "adam":
        return ours, flat, ref, torch.optim.Adam(ref.parameters(), lr=3e-3, eps=1e-5)
    return ours, flat, ref, torch.optim.RMSprop(ref.parameters(), lr=3e-3, alpha=0.99, eps=1e-5)


def loss_of(net: nn.Module, step: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(step)
    x, y = torch.randn(32, 5, generator=gen), torch.randn(32, 3, generator=gen)
    return (net(x) - y).pow(2).mean() * (1 + step % 3)  # varying scale: clipping engages on some steps


@pytest.mark.parametrize("algorithm", ["adam", "rmsprop"])
@pytest.mark.parametrize("max_norm", [None, 0.3])
def test_matches_torch_optim(algorithm, max_norm):
    ours, flat, ref, torch_opt = optimizer_pair(algorithm)
    for step in range(60):
        if step == 30:  # a schedule changes the learning rate between steps
            flat.lr = 1e-3
            for group in torch_opt.param_groups:
                group["lr"] = 1e-3
        flat.zero_grad()
        loss_of(ours, step).backward()
        torch_opt.zero_grad()
        loss_of(ref, step).backward()
        if max_norm is not None:
            norm = flat.clip_grad_norm(max_norm)
            ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
            assert norm == pytest.approx(float(ref_norm), rel=1e-5)
        flat.step()
        torch_opt.step()
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_parameters_and_grads_are_views_of_the_flat_buffers():
    net = make_net()
    flat = FlatOptimizer(net, "adam", lr=1e-3)
    loss_of(net, 0).backward()
    assert flat.grad.abs().sum() > 0
    for p in net.parameters():
        assert p.untyped_storage().data_ptr() == flat.flat.untyped_storage().data_ptr()
        assert p.grad.untyped_storage().data_ptr() == flat.grad.untyped_storage().data_ptr()
    before = flat.grad.clone()
    loss_of(net, 1).backward()  # accumulates in place, as with torch.optim
    assert not torch.equal(flat.grad, before)
    flat.zero_grad()
    assert all(p.grad.abs().sum() == 0 for p in net.parameters())


def test_state_dict_round_trip_continues_identically():
    net_a = make_net()
    opt_a = FlatOptimizer(net_a, "adam", lr=1e-3)
    for step in range(5):
        opt_a.zero_grad()
        loss_of(net_a, step).backward()
        opt_a.step()
    net_b = make_net()
    opt_b = FlatOptimizer(net_b, "adam", lr=0.5)
    net_b.load_state_dict(copy.deepcopy(net_a.state_dict()))
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))
    for net, opt in ((net_a, opt_a), (net_b, opt_b)):
        opt.zero_grad()
        loss_of(net, 9).backward()
        opt.step()
    for a, b in zip(net_a.parameters(), net_b.parameters()):
        assert torch.equal(a, b)


def test_mismatched_state_is_refused():
    opt = FlatOptimizer(make_net(), "adam", lr=1e-3)
    with pytest.raises(ValueError, match="expected rmsprop"):
        FlatOptimizer(make_net(), "rmsprop", lr=1e-3).load_state_dict(opt.state_dict())
    with pytest.raises(ValueError, match="unknown: use 'adam' or 'rmsprop'"):
        FlatOptimizer(make_net(), "sgd", lr=1e-3)


def test_sync_parameter_gradients_averages_every_gradient_through_one_flat_buffer():
    from zoo.policies import LearnContext, sync_parameter_gradients

    class Halving(LearnContext):  # stands for the all-reduce mean of two learners whose other gradient is zero
        def sync_gradients(self, grad):
            self.calls = getattr(self, "calls", 0) + 1
            grad.mul_(0.5)

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    model(torch.ones(5, 3)).sum().backward()
    before = [p.grad.clone() for p in model.parameters()]
    serial = Halving(world_size=1)
    sync_parameter_gradients(model.parameters(), serial)
    assert all(torch.equal(p.grad, b) for p, b in zip(model.parameters(), before, strict=True))
    assert getattr(serial, "calls", 0) == 0  # serially: nothing, not even a copy
    model[1].bias.grad = None  # a parameter without a gradient takes part as zeros
    parallel = Halving(world_size=2)
    sync_parameter_gradients(model.parameters(), parallel)
    assert parallel.calls == 1  # one collective for all of them
    for p, b in zip(list(model.parameters())[:3], before[:3], strict=True):
        torch.testing.assert_close(p.grad, 0.5 * b)
    assert torch.equal(model[1].bias.grad, torch.zeros(2))


@pytest.mark.parametrize("algorithm", ["adam", "rmsprop"])
@pytest.mark.parametrize("max_norm", [0.0, 0.3])
def test_minimize_matches_torch_optim_step_for_step(algorithm, max_norm):
    # The sync-free step (autograd.grad, a step masked on the device): torch's arithmetic to float32 rounding. Its
    # bias corrections must not lose digits: 1 - pow(0.999, t) in float32 drifted 1e-6 from torch in 60 steps.
    ours, flat, ref, torch_opt = optimizer_pair(algorithm)
    for step in range(60):
        returned = flat.minimize(loss_of(ours, step), max_norm)
        torch_opt.zero_grad()
        loss = loss_of(ref, step)
        loss.backward()
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
        torch_opt.step()
        assert float(returned) == pytest.approx(float(loss), rel=1e-5)
    assert flat.steps == 60
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_minimize_skips_a_non_finite_step_and_returns_nan():
    net = make_net()
    flat = FlatOptimizer(net, "adam", lr=1e-3)
    flat.minimize(loss_of(net, 0))
    before = {name: value.clone() for name, value in flat.state_dict().items() if isinstance(value, torch.Tensor)}
    weights = flat.flat.clone()
    returned = flat.minimize(loss_of(net, 1) * float("nan"))
    assert torch.isnan(returned) and flat.steps == 1 and torch.equal(flat.flat, weights)
    for name, value in before.items():
        assert torch.equal(flat.state_dict()[name], value), name
    returned = flat.minimize(loss_of(net, 2))
    assert torch.isfinite(returned) and flat.steps == 2 and not torch.equal(flat.flat, weights)


@pytest.mark.parametrize("algorithm", ["adam", "rmsprop"])
def test_a_traced_step_stacks_its_scalars_and_keeps_the_eager_numbers(algorithm):
    # Inductor inlines each 0-d expression (bias corrections, the finiteness mask, the clip factor) into the
    # elementwise loop that reads it and evaluates it again per vector of parameters: traced, the step stacks them
    # into one tensor, computed once. The values are the eager ones, bit for bit.
    eager, traced = FlatOptimizer(make_net(), algorithm, lr=3e-3), FlatOptimizer(make_net(), algorithm, lr=3e-3)
    graphs = []

    def recording(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    traced_step = torch.compile(traced.apply_gradient, backend=recording, fullgraph=True)
    for step in range(4):
        grad = torch.randn(eager.flat.numel(), generator=torch.Generator().manual_seed(step)) * (1 + step)
        loss = torch.tensor(float(step))
        assert torch.equal(eager.apply_gradient(grad, loss, 0.3), traced_step(grad, loss, 0.3))
    assert torch.equal(eager.flat, traced.flat) and eager.steps == traced.steps == 4
    assert graphs and all(any(node.target is torch.stack for node in graph.graph.nodes) for graph in graphs)
