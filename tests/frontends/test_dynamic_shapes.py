"""Symbolic dimensions (issue #27 item 1): kernels per rank and dtype, sizes bound at the call.

`custom_op(..., dynamic=True)` gives every dim a `te.var` (`static_dims` pins some); a front end
passing symbolic sizes (torch.compile's SymInts) makes those dims symbolic.  Counted with
`CustomOp.builds`: a second and third batch size build no kernel.
"""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.errors import TexprWarning
from texpr_ad.ops import nn
from texpr_ad.te.expr import Var

_ids = itertools.count()


def rms(x, g):
    """Row RMS normalization with a scale, written with symbolic sizes (`d.astype`)."""
    n, d = x.shape
    j = te.reduce_axis((0, d), name="j")
    ms = te.compute((n,), lambda i: te.sum(x[i, j] * x[i, j], axis=j) / d.astype("float32"),
                    name="ms")
    return te.compute((n, d), lambda i, c: x[i, c] * g[c] * te.rsqrt(ms[i] + 1e-6), name="y")


def rms_ref(x, g):
    return x * g / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)


def _rng():
    return np.random.default_rng(0)


def test_dynamic_op_builds_once_per_rank_and_dtype():
    seen = []

    def fn(x, g):
        seen.append(x.shape[0])
        return rms(x, g)

    op = ta.custom_op(fn, "rms_dyn", dynamic=True)
    g = _rng().standard_normal(8).astype(np.float32)
    builds = []
    for n in (3, 5, 8, 2):  # 8 == the feature size: that kernel still fits
        x = _rng().standard_normal((n, 8)).astype(np.float32)
        np.testing.assert_allclose(op(x, g), rms_ref(x, g), rtol=1e-5, atol=1e-6)
        (y,), res = op.forward(x, g)
        gx, gg = op.backward(res, np.ones_like(y))
        assert gx.shape == x.shape and gg.shape == g.shape
        builds.append(op.builds)
    assert builds == [3, 3, 3, 3]  # call, forward with residuals, backward
    assert isinstance(seen[0], Var)  # the te function saw a symbolic size


def test_static_dims_pin_dims_and_a_bias_gradient_binds_its_size():
    # before: the bias's gradient is shaped by the bias, which the backward does not read:
    # ScheduleError "symbolic dim(s) ['b_dim0'] ... not a dimension of any input"
    op = ta.custom_op(lambda x, w, b: nn.dense(x, w, b), "dense_dyn", dynamic=True,
                      static_dims={"w": (0, -1)})
    rng = _rng()
    w, b = rng.standard_normal((6, 8)), rng.standard_normal(6)
    for n in (3, 5):
        x = rng.standard_normal((n, 8))
        np.testing.assert_allclose(op(x, w, b), x @ w.T + b)
        gx, gw, gb = op.vjp(np.ones((n, 6)), x, w, b)
        np.testing.assert_allclose(gb, np.full(6, float(n)))
        np.testing.assert_allclose(gx, np.ones((n, 6)) @ w)
    (sig,) = op._defs
    assert sig[1][0] == (6, 8) and all(isinstance(d, str) for d in sig[0][0])
    assert op.builds == 2  # the forward, and vjp's backward (it recomputes)


def test_static_by_default():
    op = ta.custom_op(rms, "rms_static")
    g = np.ones(4, np.float32)
    for n in (2, 3):
        op(np.ones((n, 4), np.float32), g)
    assert op.builds == 2


def test_a_te_function_needing_concrete_sizes_is_built_per_shape_with_a_warning():
    def scaled(x):
        return te.compute(x.shape, lambda i: x[i] * float(x.shape[0].value), name="y")

    op = ta.custom_op(scaled, "scaled_dyn", dynamic=True)
    with pytest.warns(TexprWarning, match="built per shape"):
        np.testing.assert_allclose(op(np.ones(3, np.float32)), np.full(3, 3.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(op(np.ones(4, np.float32)), np.full(4, 4.0))
    assert op.builds == 2


def test_static_dims_must_name_dims():
    with pytest.raises(ta.CustomOpError, match="static_dims maps parameter names"):
        ta.custom_op(rms, "bad", dynamic=True, static_dims={"w": "all"})


# -- PyTorch ---------------------------------------------------------------------------------

def _torch_rms(name, **kw):
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt
    return torch, tt.custom_op(rms, name=f"{name}_{next(_ids)}", **kw)


def _train_sizes(torch, op, f, sizes):
    g = torch.randn(8, dtype=torch.float64, requires_grad=True)
    builds = []
    for n in sizes:
        x = torch.randn(n, 8, dtype=torch.float64, requires_grad=True)
        f(x, g).backward()
        xr, gr = x.detach().requires_grad_(), g.detach().requires_grad_()
        want = torch.autograd.grad(
            (xr * gr * torch.rsqrt((xr * xr).mean(-1, keepdim=True) + 1e-6)).sum(), [xr, gr])
        torch.testing.assert_close(x.grad, want[0])
        builds.append(op.core.builds)
        g.grad = None
    return builds


def test_torch_compile_dynamic_true_builds_no_kernel_for_new_batch_sizes():
    torch, op = _torch_rms("rms_compile_dyn")  # a static op: torch.compile's SymInts make it dynamic
    torch._dynamo.reset()
    f = torch.compile(lambda x, g: op(x, g).sum(), dynamic=True, backend="aot_eager",
                      fullgraph=True)
    assert _train_sizes(torch, op, f, (2, 3, 5)) == [2, 2, 2]  # before: unhashable SymInt


def test_torch_compile_automatic_dynamic_shapes():
    torch, op = _torch_rms("rms_auto", dynamic=True)
    torch._dynamo.reset()
    f = torch.compile(lambda x, g: op(x, g).sum(), backend="aot_eager", fullgraph=True)
    assert _train_sizes(torch, op, f, (4, 3, 6)) == [2, 2, 2]
    torch, op = _torch_rms("rms_auto_static")  # a static op: the first size has its own kernels
    torch._dynamo.reset()
    f = torch.compile(lambda x, g: op(x, g).sum(), backend="aot_eager", fullgraph=True)
    assert _train_sizes(torch, op, f, (4, 3, 6)) == [2, 4, 4]


def test_torch_opcheck_dynamic_forward_and_backward_ops():
    torch, op = _torch_rms("rms_opcheck", dynamic=True)
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    g = torch.randn(8, dtype=torch.float64, requires_grad=True)
    args = (x, g, [True, True]) if op._names else ([x, g], [True, True])
    torch.library.opcheck(op.forward_op, args)  # all tests, test_aot_dispatch_dynamic included
    ys = op.forward_op(*args)
    torch.library.opcheck(op.vjp_op, ([torch.ones_like(ys[0])], [x, g], list(ys), [True, True]))
