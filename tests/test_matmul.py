"""zoo.accel.matmul: float32 products through oneDNN (forced here, whatever the CPU) against float64 references,
values and gradients, the ensemble form against baddbmm, and the cases that keep torch's own product (few rows,
autocast, tracing for export, float64)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from zoo.accel import matmul
from zoo.accel.compiled import compiler_status

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def onednn(monkeypatch):
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        pytest.skip("this torch build has no oneDNN")
    monkeypatch.setattr(matmul, "_mode", "onednn")


def spy(monkeypatch) -> list[int]:
    calls: list[int] = []
    original = matmul._onednn_linear

    def counted(*args):
        calls.append(1)
        return original(*args)
    monkeypatch.setattr(matmul, "_onednn_linear", counted)
    return calls


@pytest.mark.parametrize("shape", [(40, 7), (3, 20, 7)])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("transposed_weight", [False, True])
def test_linear_matches_a_float64_reference_in_values_and_gradients(onednn, monkeypatch, shape, with_bias,
                                                                    transposed_weight):
    calls = spy(monkeypatch)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g, requires_grad=True)
    weight = (torch.randn(7, 5, generator=g).t() if transposed_weight else torch.randn(5, 7, generator=g))
    weight.requires_grad_(True)
    bias = torch.randn(5, generator=g, requires_grad=True) if with_bias else None
    out = matmul.linear(x, weight, bias)
    upstream = torch.randn(out.shape, generator=g)
    grads = torch.autograd.grad((out * upstream).sum(), [x, weight, *([bias] if with_bias else [])])
    assert calls, "the oneDNN product was not used"
    x64, w64 = x.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
    b64 = bias.detach().double().requires_grad_() if with_bias else None
    ref = F.linear(x64, w64, b64)
    ref_grads = torch.autograd.grad((ref * upstream.double()).sum(), [x64, w64, *([b64] if with_bias else [])])
    assert out.dtype == torch.float32 and out.shape == ref.shape
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("column_major", [False, True])
def test_the_weight_gradient_comes_out_in_the_weights_own_layout(onednn, column_major):
    # ensemble_linear passes weight[e].t() (an (in, out) parameter's view): a gradient in the other layout made the
    # compiled SAC update copy every critic weight gradient through a transposing scalar loop
    g = torch.Generator().manual_seed(3)
    x = torch.randn(32, 6, generator=g)
    leaf = torch.randn(*((6, 4) if column_major else (4, 6)), generator=g, requires_grad=True)
    weight = leaf.t() if column_major else leaf
    seen: list[tuple[int, ...]] = []
    if column_major:  # a view: its gradient passes through a hook before reaching the leaf
        weight.register_hook(lambda grad: seen.append(grad.stride()))
    out = matmul.linear(x, weight)
    grad = torch.autograd.grad(out.square().sum(), leaf)[0]
    assert matmul.column_major(weight) is column_major
    if column_major:
        assert seen == [weight.stride()] and grad.is_contiguous()
    torch.testing.assert_close(grad, torch.autograd.grad(F.linear(x, weight).square().sum(), leaf)[0], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("shared", [True, False])
def test_ensemble_linear_matches_the_batched_products(onednn, monkeypatch, shared):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*(() if shared else (2,)), 32, 6, generator=g, requires_grad=True)
    weight = torch.randn(2, 6, 4, generator=g, requires_grad=True)
    bias = torch.randn(2, 1, 4, generator=g, requires_grad=True)
    calls = spy(monkeypatch)
    out = matmul.ensemble_linear(x, weight, bias)
    assert len(calls) == 2 and out.shape == (2, 32, 4)
    grads = torch.autograd.grad(out.square().sum(), [x, weight, bias])
    ref = torch.matmul(x, weight) + bias if shared else torch.baddbmm(bias, x, weight)
    ref_grads = torch.autograd.grad(ref.square().sum(), [x, weight, bias])
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


def test_ensemble_mlp_runs_members_apart_with_the_layer_by_layer_numbers(onednn, monkeypatch):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(32, 6, generator=g, requires_grad=True)
    weights = [torch.randn(2, 6, 8, generator=g, requires_grad=True), torch.randn(2, 8, 1, generator=g,
                                                                                   requires_grad=True)]
    biases = [torch.randn(2, 1, 8, generator=g, requires_grad=True), torch.randn(2, 1, 1, generator=g,
                                                                                 requires_grad=True)]
    calls = spy(monkeypatch)
    out = matmul.ensemble_mlp(x, weights, biases, [torch.relu])
    assert len(calls) == 4 and out.shape == (2, 32, 1)  # 2 members x 2 layers, each its own product
    grads = torch.autograd.grad(out.square().sum(), [x, *weights, *biases])
    assert len(calls) == 12  # and 2 per product backwards
    ref = torch.relu(torch.matmul(x, weights[0]) + biases[0])
    ref = torch.baddbmm(biases[1], ref, weights[1])
    ref_grads = torch.autograd.grad(ref.square().sum(), [x, *weights, *biases])
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    monkeypatch.setattr(matmul, "_mode", "default")  # torch's products: the batched layers
    torch.testing.assert_close(matmul.ensemble_mlp(x, weights, biases, [torch.relu]), ref, rtol=1e-5, atol=1e-5)
    assert len(calls) == 12


def test_a_shape_mismatch_names_the_shapes_as_torch_does(onednn):
    x, weight = torch.randn(32, 14), torch.randn(64, 11)
    with pytest.raises(RuntimeError) as torch_error:
        F.linear(x, weight)
    with pytest.raises(RuntimeError, match=r"^mat1 and mat2 shapes cannot be multiplied \(32x14 and 11x64\)$") as ours:
        matmul.linear(x, weight)
    assert str(ours.value) == str(torch_error.value)


def test_torch_keeps_the_products_it_does_well_or_must_export(onednn, monkeypatch):
    calls = spy(monkeypatch)
    weight = torch.randn(5, 7)
    matmul.linear(torch.randn(matmul.MIN_ROWS - 1, 7), weight)  # acting: a few rows
    matmul.linear(torch.randn(64, 7, dtype=torch.float64), weight.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # bf16 products go to oneDNN already, in bf16
        assert matmul.linear(torch.randn(64, 7), weight).dtype == torch.bfloat16
    traced = torch.jit.trace(lambda x: matmul.linear(x, weight), torch.randn(64, 7), check_trace=False)  # export
    assert "zoo::onednn_linear" not in str(traced.graph)
    assert not calls
    monkeypatch.setattr(matmul, "_mode", "default")
    matmul.linear(torch.randn(64, 7), weight)
    assert not calls


AVX2_BANNER = "Intel(R) Advanced Vector Extensions 2 (Intel(R) AVX2) enabled processors"
AVX512_BANNER = "Intel(R) Advanced Vector Extensions 512 (Intel(R) AVX-512)"


@pytest.mark.parametrize("flags, mkl, expected", [
    ({"avx2", "avx512f"}, AVX2_BANNER, "onednn"),  # AVX-512 that MKL leaves unused (an AMD Zen 4/5): oneDNN
    ({"avx2", "avx512f"}, AVX512_BANNER, "default"),  # MKL runs AVX-512 itself
    ({"avx2", "fma"}, AVX2_BANNER, "default"),  # AVX2 only (a Zen 3): nothing wider for oneDNN, torch's default
    ({"avx2", "avx512f"}, None, "default"),  # no MKL, or its banner unreadable: torch's default
])
def test_auto_follows_what_the_cpu_and_mkl_do_never_the_vendor(monkeypatch, flags, mkl, expected):
    monkeypatch.setattr(matmul, "_mode", None)
    monkeypatch.setattr(matmul, "cpu_flags", lambda: frozenset(flags))
    monkeypatch.setattr(matmul, "mkl_code_path", lambda: mkl)
    available = matmul.torch_internals.onednn_linear_available()
    assert matmul.fp32_products() == (expected if available else "default")
    assert matmul.set_fp32_products("onednn") == ("onednn" if available else "default")  # asked for
    assert matmul.set_fp32_products("default") == "default"
    with pytest.raises(ValueError, match="fp32 products 'fast' is unknown"):
        matmul.set_fp32_products("fast")


def test_a_run_asks_for_its_path_and_only_a_process_that_takes_such_products_probes_mkl(monkeypatch):
    """configure() (every process of a run) only asks; the probe behind auto (most of a second) runs at the first
    fp32_products() call, which on-policy runs never make."""
    from zoo.accel import settings

    probes = []
    monkeypatch.setattr(matmul, "mkl_code_path", lambda: probes.append(1) or AVX2_BANNER)
    monkeypatch.setattr(matmul, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    try:
        settings.configure({"fp32_products": "auto"})
        assert matmul._mode is None and probes == []
        available = matmul.torch_internals.onednn_linear_available()
        assert matmul.fp32_products() == ("onednn" if available else "default") and probes == [1]
        settings.configure({"fp32_products": "default"})  # a new request drops the decided path
        assert matmul.fp32_products() == "default" and probes == [1]
        with pytest.raises(ValueError, match="fp32 products 'fast' is unknown"):
            matmul.request_fp32_products("fast")
    finally:
        settings.configure(None)


def test_mkls_code_path_is_read_from_its_banner_and_the_output_is_left_as_it_was(capfd):
    if not torch.backends.mkl.is_available():
        pytest.skip("this torch has no MKL")
    path = matmul.mkl_code_path()  # read once per process (MKL writes its banner only the first time)
    assert path is not None and "Intel(R)" in path and "AVX" in path and "Lnx" not in path, path
    capfd.readouterr()
    print("before", flush=True)
    matmul.mkl_code_path.__wrapped__()  # read again: its verbose lines go to the temporary file, not here
    print("after", flush=True)
    assert capfd.readouterr().out == "before\nafter\n"


@pytest.mark.slow  # one compile, a few seconds
@pytest.mark.skipif(compiler_status() is not None, reason=f"torch.compile unusable here: {compiler_status()}")
def test_a_compiled_graph_calls_the_onednn_product_and_its_gradient(onednn):
    import torch._dynamo

    torch._dynamo.config.trace_autograd_ops = True
    weight = torch.randn(8, 6, requires_grad=True)

    def step(x: torch.Tensor) -> torch.Tensor:
        (grad,) = torch.autograd.grad(matmul.linear(x, weight).tanh().sum(), [weight])
        return grad

    x = torch.randn(32, 6)
    torch.testing.assert_close(torch.compile(step, fullgraph=True)(x), step(x), rtol=1e-5, atol=1e-6)


def test_dense_layout_names_the_views_onednn_multiplies_at_full_speed():
    assert matmul.dense_layout((256, 11), (11, 1)) and matmul.dense_layout((256, 11), (1, 256))  # row/column major
    assert matmul.dense_layout((1, 256), (0, 1)) and matmul.dense_layout((256, 1), (1, 0))  # vectors, any stride
    assert matmul.dense_layout((1, 1), (0, 0))
    assert not matmul.dense_layout((11, 256), (1, 14))  # the first 11 columns of a 14-wide matrix, transposed
    assert not matmul.dense_layout((256, 11), (14, 1))
    assert not matmul.dense_layout((256, 1), (14, 1)) and not matmul.dense_layout((1, 256), (1, 14))
    assert not matmul.dense_layout((256, 256), (0, 1))  # a broadcast row


@pytest.mark.slow  # one compile, a few seconds
@pytest.mark.skipif(compiler_status() is not None, reason=f"torch.compile unusable here: {compiler_status()}")
def test_a_lowered_graph_calls_onednn_itself_on_any_view_with_eagers_numbers(onednn):
    import torch._dynamo
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import run_and_get_code

    assert matmul.lower_for_inductor() and matmul.lower_for_inductor()  # idempotent
    assert matmul.LOWERING_TAG in torch.compiler.config.cache_key_tag
    torch._dynamo.config.trace_autograd_ops = True
    torch.manual_seed(0)
    first, second = torch.randn(64, 11, requires_grad=True), torch.randn(14, 14, requires_grad=True)

    def step(obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        joint = torch.cat([obs, action], -1)  # a 14-wide input whose first 11 columns the graph may reuse
        hidden = matmul.linear(joint, second.t()).relu()
        loss = matmul.linear(obs, first).tanh().sum() + matmul.linear(hidden, second).square().mean()
        return (loss.detach(), *torch.autograd.grad(loss, [first, second]))

    obs, action = torch.randn(32, 11), torch.randn(32, 3)
    expected = step(obs, action)
    torch._dynamo.reset()
    with inductor_config.patch(force_disable_caches=True):
        got, (code, *_) = run_and_get_code(torch.compile(step, fullgraph=True), obs, action)
    assert "mkldnn._linear_pointwise" in code and "zoo.onednn_linear.default(" not in code
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_an_on_policy_run_neither_probes_mkl_nor_imports_scipy(tmp_path):
    """Start-up: a whole recurrent PPO run (zoo.train, the CLI's path) never asks for the off-policy products (MKL's
    verbose probe, most of a second) and never imports scipy (a tenth of a second; zoo imports it where it uses it)."""
    import subprocess
    import sys

    code = ("import sys, zoo\n"
            "from zoo.accel import matmul\n"
            f"zoo.train('configs/ppo_lstm_cartpole_novel.py', ['runs_dir={tmp_path}', 'pipeline.max_env_steps=512',\n"
            "           'pipeline.stop_return=None', 'logger.progress=false'])\n"
            "print(matmul._mode, 'scipy' in sys.modules)\n")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=root)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "None False", done.stderr[-2000:]
