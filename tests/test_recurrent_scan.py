"""The compiled recurrent loops (zoo.accel.recurrent_scan): an LSTM or GRU unroll with its resets inside equals torch's
own module stepped one step at a time with the state zeroed before each episode start, outputs, final state and every
gradient, including resets at the first, the last and every step, T=1 and B=1; where the loops apply and where
torch's modules stay."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from zoo.accel import recurrent_kernels, recurrent_scan, settings
from zoo.policies.recurrent import RecurrentCore

pytestmark = pytest.mark.skipif(not recurrent_scan.available(), reason="zoo.accel._crecurrent was not built")


def _stepwise(rnn: nn.Module, kind: str, x: torch.Tensor, state, keep: torch.Tensor):
    """The reference: torch's module one step at a time, every layer's state zeroed where keep[t] is 0."""
    outputs = []
    for t in range(x.shape[0]):
        k = keep[t][None, :, None]
        state = (state[0] * k, state[1] * k) if kind == "lstm" else state * k
        out, state = rnn(x[t:t + 1], state)
        outputs.append(out)
    return torch.cat(outputs), state


def _loss(out, state, weights):
    """A loss that reads every output and the final state (with different weights: a swapped h and c shows)."""
    finals = state if isinstance(state, tuple) else (state,)
    return (out * weights).sum() + sum((i + 1.0) * f.square().sum() for i, f in enumerate(finals))


@pytest.fixture(params=["in the loop", "before the loop"])
def projection(request, monkeypatch):
    """The input projection both ways: step by step inside the loops (inputs of at most STEP_INPUTS features) and
    as one product before them (wider inputs)."""
    monkeypatch.setattr(recurrent_kernels, "STEP_INPUTS", 10_000 if request.param == "in the loop" else 0)
    return request.param


KEEPS = {
    "none": lambda T, B: torch.ones(T, B),
    "first": lambda T, B: torch.ones(T, B).index_fill_(0, torch.tensor([0]), 0.0),
    "last": lambda T, B: torch.ones(T, B).index_fill_(0, torch.tensor([T - 1]), 0.0),
    "every": lambda T, B: torch.zeros(T, B),
    "random": lambda T, B: (torch.rand(T, B, generator=torch.Generator().manual_seed(3)) > 0.3).float(),
}


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("resets", list(KEEPS))
@pytest.mark.parametrize("steps,batch", [(9, 5), (1, 3), (6, 1)])
def test_the_loop_equals_the_module_stepped_with_resets(kind, layers, resets, steps, batch, projection):
    torch.manual_seed(0)
    hidden, width = 7, 3
    rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(width, hidden, layers)
    for parameter in rnn.parameters():  # biases off zero, so that a dropped bias shows
        nn.init.uniform_(parameter, -0.6, 0.6)
    x = torch.randn(steps, batch, width, requires_grad=True)
    h0 = torch.randn(layers, batch, hidden, requires_grad=True)
    c0 = torch.randn(layers, batch, hidden, requires_grad=True)
    state = (h0, c0) if kind == "lstm" else h0
    keep = KEEPS[resets](steps, batch)
    weights = torch.randn(steps, batch, hidden)
    inputs = [x, h0, *([c0] if kind == "lstm" else []), *rnn.parameters()]

    ref_out, ref_state = _stepwise(rnn, kind, x, state, keep)
    ref_grads = torch.autograd.grad(_loss(ref_out, ref_state, weights), inputs)
    out, final = recurrent_scan.unroll(rnn, kind, x, state, keep)
    grads = torch.autograd.grad(_loss(out, final, weights), inputs)

    torch.testing.assert_close(out, ref_out, atol=2e-6, rtol=1e-5)
    for got, want in zip(final if kind == "lstm" else (final,), ref_state if kind == "lstm" else (ref_state,),
                         strict=True):
        torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("hidden", [64, 100])
@pytest.mark.parametrize("batch", [8, 7])
def test_a_wider_core_matches_too(kind, hidden, batch, projection):
    """At real widths with resets inside: the same values as the module. The products' register tiles (4 rows x 64
    columns) whole, with columns left over (100 units: 36 of the backward's, 16 of the LSTM forward's 400) and with
    rows left over (7 sequences: one tile of 4, then 3 rows one at a time)."""
    torch.manual_seed(1)
    rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(5, hidden, 1)
    x = torch.randn(32, batch, 5, requires_grad=True)
    zeros = torch.zeros(1, batch, hidden)
    state = (zeros, zeros.clone()) if kind == "lstm" else zeros
    keep = KEEPS["random"](32, batch)
    weights = torch.randn(32, batch, hidden)
    ref_out, ref_state = _stepwise(rnn, kind, x, state, keep)
    ref = torch.autograd.grad(_loss(ref_out, ref_state, weights), [x, *rnn.parameters()])
    out, final = recurrent_scan.unroll(rnn, kind, x, state, keep)
    got = torch.autograd.grad(_loss(out, final, weights), [x, *rnn.parameters()])
    torch.testing.assert_close(out, ref_out, atol=2e-6, rtol=1e-5)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("layers,hidden", [(1, 64), (2, 7)])
def test_cores_unrolled_together_equal_each_unrolled_alone(kind, layers, hidden, projection):
    """unroll_cores (an actor's and a critic's core: one input projection, each core's loop on its columns of it)
    gives each rnn the outputs, final state and gradients (of x, the states and every parameter) it has alone."""
    torch.manual_seed(4)
    rnns = [(nn.LSTM if kind == "lstm" else nn.GRU)(5, hidden, layers) for _ in range(3)]
    for rnn in rnns:
        for parameter in rnn.parameters():
            nn.init.uniform_(parameter, -0.5, 0.5)
    x = torch.randn(10, 6, 5, requires_grad=True)
    keep = KEEPS["random"](10, 6)
    states = [tuple(torch.randn(layers, 6, hidden, requires_grad=True) for _ in range(2)) if kind == "lstm"
              else torch.randn(layers, 6, hidden, requires_grad=True) for _ in rnns]
    weights = [torch.randn(10, 6, hidden) for _ in rnns]

    def grads(results):
        loss = sum(_loss(out, final, w) for (out, final), w in zip(results, weights, strict=True))
        leaves = [x, *(t for s in states for t in (s if kind == "lstm" else (s,))),
                  *(p for rnn in rnns for p in rnn.parameters())]
        return torch.autograd.grad(loss, leaves)

    together = recurrent_scan.unroll_cores(rnns, kind, x, states, keep)
    with pytest.raises(ValueError, match="of one size"):
        recurrent_scan.unroll_cores([rnns[0], (nn.LSTM if kind == "lstm" else nn.GRU)(5, hidden + 1, layers)], kind,
                                    x, states[:2], keep)
    alone = [recurrent_scan.unroll(rnn, kind, x, state, keep) for rnn, state in zip(rnns, states, strict=True)]
    for (out, final), (ref_out, ref_final) in zip(together, alone, strict=True):
        torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-6)
        for got, want in zip(final if kind == "lstm" else (final,), ref_final if kind == "lstm" else (ref_final,),
                             strict=True):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    for got, want in zip(grads(together), grads(alone), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("final", [True, False])
def test_the_core_gives_the_same_with_the_loops_and_with_torchs_modules(kind, final, monkeypatch):
    """RecurrentCore on sequences with episode starts inside: the loops, and (accel.recurrent_kernel off) torch's
    modules on padded segments or step by step, give the same outputs, memory and gradients."""
    torch.manual_seed(2)
    core = RecurrentCore(kind, 4, 16, layers=2)
    x = torch.randn(12, 6, 4)
    starts = torch.rand(12, 6, generator=torch.Generator().manual_seed(5)) < 0.25
    memory = torch.randn(6, 2, core.state_size)

    def run():
        out, after = core(x, memory, starts, final=final)
        loss = out.square().sum() + (after.sum() if after is not None else 0.0)
        return out.detach(), after, torch.autograd.grad(loss, list(core.parameters()))

    assert recurrent_scan.applies(x)
    fast = run()
    monkeypatch.setattr(settings.settings(), "recurrent_kernel", False)
    assert not recurrent_scan.applies(x)
    slow = run()
    torch.testing.assert_close(fast[0], slow[0], atol=2e-6, rtol=1e-5)
    assert (fast[1] is None) == (slow[1] is None) == (not final)
    if final:
        torch.testing.assert_close(fast[1], slow[1], atol=2e-6, rtol=1e-5)
    for a, b in zip(fast[2], slow[2], strict=True):
        torch.testing.assert_close(a, b, atol=5e-5, rtol=1e-4)


def test_a_few_input_features_are_projected_inside_the_loops():
    """Inputs of up to STEP_INPUTS features: no projection made before the loops (each core gets x, W_ih^T and its
    bias); wider ones: one product for all cores."""
    limit = recurrent_kernels.STEP_INPUTS
    w_ihs, biases = [torch.randn(8, limit + 1) for _ in range(2)], [torch.randn(8) for _ in range(2)]
    xproj, stepwise = recurrent_kernels.inputs(torch.randn(3, 2, limit), [w[:, :limit] for w in w_ihs], biases)
    assert xproj is None and [s[1].shape for s in stepwise] == [(limit, 8)] * 2
    xproj, stepwise = recurrent_kernels.inputs(torch.randn(3, 2, limit + 1), w_ihs, biases)
    assert xproj.shape == (3, 2, 16) and stepwise == [None, None]


def test_where_the_loops_apply():
    x = torch.zeros(2, 3, 4)
    assert recurrent_scan.applies(x)
    assert not recurrent_scan.applies(x.double())  # float32 only
    assert not recurrent_scan.applies(x.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # its products would hand the loops bf16
        assert not recurrent_scan.applies(x)
    rnn = nn.LSTM(4, 5)
    with pytest.raises(TypeError, match="takes float32 CPU tensors, got torch.float64"):
        recurrent_scan.unroll(rnn.double(), "lstm", x.double(), (torch.zeros(1, 3, 5).double(),) * 2,
                              torch.ones(2, 3))
    seen = []

    def probe(t):
        seen.append(recurrent_scan.applies(t))
        return t * 2

    torch.jit.trace(probe, (x,), check_trace=False)  # zoo export traces the module: torch's modules there
    assert seen == [False]


@pytest.mark.parametrize("options", [{"bidirectional": True}, {"batch_first": True}, {"bias": False},
                                     {"num_layers": 2, "dropout": 0.5}])
def test_an_rnn_the_loops_do_not_implement_is_refused(options):
    rnn = nn.LSTM(3, 4, **options)
    with pytest.raises(ValueError, match="one-directional, time-major rnns with biases"):
        recurrent_scan.unroll(rnn, "lstm", torch.zeros(2, 1, 3), (torch.zeros(1, 1, 4),) * 2, torch.ones(2, 1))


def test_the_setting_comes_from_the_accel_section():
    try:
        assert settings.configure({"recurrent_kernel": False}).recurrent_kernel is False
        assert not recurrent_scan.applies(torch.zeros(2, 3, 4))
    finally:
        settings.configure(None)
    assert settings.settings().recurrent_kernel is True


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_past_the_measured_size_torchs_module_runs_unless_it_would_step_one_step_at_a_time(kind):
    """Beyond LOOP_LIMITS (hidden units x sequences) torch's fused kernel is faster: the core keeps it for learning's
    unroll; where torch would step one step at a time (the memory after the last step, episodes starting inside)
    the loops run whatever the size. Both give the module's values."""
    hidden = 64
    batch = recurrent_scan.LOOP_LIMITS[kind] // hidden + 1
    core = RecurrentCore(kind, 3, hidden)
    x = torch.randn(5, batch, 3)
    starts = torch.zeros(5, batch, dtype=torch.bool)
    starts[2, 0] = True
    memory = torch.randn(batch, 1, core.state_size)
    assert not core.uses_loops(x, starts, final=False)
    assert core.uses_loops(x, starts, final=True)
    assert not core.uses_loops(x, None, final=True)  # no starts inside: one fused call
    assert core.uses_loops(x[:, : batch - 1], starts[:, : batch - 1], final=False)  # within the limit
    with torch.no_grad():
        out, after = core(x, memory, starts, final=True)
        reference_out, reference_after = _stepwise(core.rnn, kind, x, core._state(memory), (~starts).float())
    torch.testing.assert_close(out, reference_out, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(after, core._memory(reference_after), atol=2e-6, rtol=1e-5)
