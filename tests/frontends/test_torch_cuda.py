"""texpr_ad.torch ops on CUDA tensors, on a GPU (skipped where torch or Numba finds none: this
machine and CI have none; bench/gpu_session.sh runs it on a GPU lease).  Values and gradients
against torch's own ops on the same GPU, the eager fast path (no torch.library dispatch), a
retained graph's second backward, double backward through the registered ops, no_grad."""
from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU for torch", allow_module_level=True)
from texpr_ad.kernels.cuda_runtime import gpu_available  # noqa: E402

if not gpu_available():
    pytest.skip("Numba finds no CUDA GPU", allow_module_level=True)

import texpr_ad.torch as tt  # noqa: E402
from texpr_ad import te  # noqa: E402

_ids = itertools.count()


def _rms_scale(x, g):
    n, d = x.shape
    j = te.reduce_axis((0, d), name="j")
    ms = te.compute((n,), lambda i: te.sum(x[i, j] * x[i, j], axis=j) / float(d.value), name="ms")
    return te.compute((n, d), lambda i, c: x[i, c] * g[c] * te.rsqrt(ms[i] + 1e-6), name="y")


def _torch_rms_scale(x, g):
    return x * g * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-6)


def _op():
    return tt.custom_op(_rms_scale, name=f"test_cuda_rms_{next(_ids)}")


def _inputs(dtype=torch.float64):
    torch.manual_seed(0)
    x = torch.randn(37, 129, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn(129, device="cuda", dtype=dtype, requires_grad=True)
    return x, g


def test_values_and_gradients_match_torch_on_the_gpu_without_the_dispatcher(monkeypatch):
    op = _op()
    calls = []
    monkeypatch.setattr(op, "forward_op", lambda *a: calls.append(a) or pytest.fail("dispatched"))
    x, g = _inputs()
    gy = torch.randn(37, 129, device="cuda", dtype=torch.float64)
    y = op(x, g)
    assert y.is_cuda and y.shape == (37, 129)
    dx, dg = torch.autograd.grad(y, [x, g], gy)
    ry = _torch_rms_scale(x, g)
    rdx, rdg = torch.autograd.grad(ry, [x, g], gy)
    torch.testing.assert_close(y, ry)
    torch.testing.assert_close(dx, rdx)
    torch.testing.assert_close(dg, rdg)
    assert calls == []
    with torch.no_grad():
        torch.testing.assert_close(op(x, g), ry.detach())


def test_float32_training_steps_and_a_retained_graph_on_the_gpu():
    op = _op()
    x, g = _inputs(torch.float32)
    y = op(x, g)
    loss = (y * y).sum()
    loss.backward(retain_graph=True)
    first = x.grad.clone(), g.grad.clone()
    x.grad = g.grad = None
    loss.backward()
    torch.testing.assert_close((x.grad, g.grad), first)
    rx, rg = (t.detach().clone().requires_grad_(True) for t in (x, g))
    (_torch_rms_scale(rx, rg) ** 2).sum().backward()
    torch.testing.assert_close(x.grad, rx.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(g.grad, rg.grad, rtol=1e-4, atol=1e-4)


def test_only_the_inputs_that_require_grad_get_one_and_double_backward_works():
    op = _op()
    x, g = _inputs()
    g.requires_grad_(False)
    (dx,) = torch.autograd.grad(op(x, g).sum(), [x], create_graph=True)
    (rdx,) = torch.autograd.grad(_torch_rms_scale(x, g).sum(), [x], create_graph=True)
    torch.testing.assert_close(dx, rdx)
    (ddx,) = torch.autograd.grad((dx * dx).sum(), [x])
    (rddx,) = torch.autograd.grad((rdx * rdx).sum(), [x])
    torch.testing.assert_close(ddx, rddx)


def test_a_cpu_tensor_next_to_cuda_ones_is_a_clear_error():
    op = _op()
    x, g = _inputs()
    with pytest.raises(tt.TorchDeviceError, match=r"argument 1 \('g'\) is on cpu"):
        op(x, g.detach().cpu())
