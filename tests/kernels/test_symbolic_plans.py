"""Symbolic dims (torch.compile's dynamic shapes) plan as static ones do.  Sums whose output is a
row (a column sum, layer norm's dgamma) accumulate whole rows in chunks, the chunk size computed
at the call (they had read columns with a stride of the row length); an elementwise stage read
once per term of a sum over as many terms as it has points is inlined (it had been stored)."""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops import elementwise as ew
from texpr_ad.ops import nn
from texpr_ad.schedule import plan_kernel


def _column_sum(n, m):
    x = te.placeholder((n, m), "float32", name="x")
    i = te.reduce_axis((0, n), name="i")
    return x, te.compute((m,), lambda j: te.sum(x[i, j], axis=i), name="colsum")


def test_symbolic_column_sum_accumulates_rows_in_chunks():
    x, s = _column_sum(te.var("n"), te.var("m"))
    acc = plan_kernel([s], [x]).stage("colsum").cpu.accumulate
    assert acc is not None and acc.row is not None and acc.split is not None


@pytest.mark.parametrize("n, m", [(0, 5), (1, 1), (3, 40), (31, 17), (1000, 33)])
def test_symbolic_column_sum_matches_float64(n, m):
    x, s = _column_sum(te.var("n"), te.var("m"))
    k = ta.build([s], [x])
    xs = np.random.default_rng(n * 100 + m).standard_normal((n, m)).astype(np.float32)
    (got,) = k(xs)
    np.testing.assert_allclose(got, xs.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n, m", [(2, 3), (37, 20), (600, 24)])
def test_symbolic_layer_norm_gradients_match_static(n, m):
    """One symbolic backward kernel for every size, equal to the static kernel of each size
    (float64, so both are checked to 1e-10 of each other)."""
    def grads(shape, xs, gs, bs, dy):
        x = te.placeholder(shape, "float64", name="x")
        g = te.placeholder(shape[1:], "float64", name="g")
        b = te.placeholder(shape[1:], "float64", name="b")
        fwd, bwd = ta.vjp([ew.layer_norm(x, g, b, 1e-5)], [x, g, b])
        return bwd(fwd(xs, gs, bs)[1], dy), bwd
    r = np.random.default_rng(n)
    xs, gs, bs = r.standard_normal((n, m)), r.standard_normal(m), r.standard_normal(m)
    dy = r.standard_normal((n, m))
    sym, bwd = grads((te.var("n"), te.var("m")), xs, gs, bs, dy)
    acc = bwd.kernel.plan.stage("dg").cpu.accumulate
    assert acc is not None and acc.row is not None and acc.split is not None
    static, _ = grads((n, m), xs, gs, bs, dy)
    for a, b in zip(sym, static, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
    # dgamma and dbeta against their closed form
    mu, var = xs.mean(1, keepdims=True), xs.var(1, keepdims=True)
    xhat = (xs - mu) / np.sqrt(var + 1e-5)
    np.testing.assert_allclose(sym[1], (dy * xhat).sum(0), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(sym[2], dy.sum(0), rtol=1e-9, atol=1e-9)


def test_symbolic_elementwise_stage_read_by_a_sum_is_inlined():
    """sum(tanh(x * w) * sigmoid(x)) over (n, 64): the same iterations as the stage's points at
    every n, so the stage is evaluated in the sum's loop, as with static sizes."""
    n = te.var("n")
    x = te.placeholder((n, 64), "float32", name="x")
    w = te.placeholder((64,), "float32", name="w")
    e = te.compute((n, 64), lambda i, j: te.tanh(x[i, j] * w[j]) * te.sigmoid(x[i, j]), name="e")
    i, j = te.reduce_axis((0, n), name="i"), te.reduce_axis((0, 64), name="j")
    s = te.compute((), lambda: te.sum(e[i, j], axis=[i, j]), name="s")
    plan = plan_kernel([s], [x, w])
    assert [st.name for st in plan.stages] == ["s"], str(plan)
    xs = np.random.default_rng(0).standard_normal((300, 64)).astype(np.float32)
    ws = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    (got,) = ta.build([s], [x, w])(xs, ws)
    x64 = xs.astype(np.float64)
    want = (np.tanh(x64 * ws) / (1 + np.exp(-x64))).sum()
    np.testing.assert_allclose(got, want, rtol=1e-5)


def _conv_s2(x, w):
    """A stride-2, padding-1, 3x3 convolution written in te over symbolic sizes."""
    n, c, h, wd = x.shape
    rc, ry, rx = te.reduce_axis((0, c), "rc"), te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")

    def body(b, f, i, j):
        yy, xx = 2 * i + ry - 1, 2 * j + rx - 1
        inside = te.all(yy >= 0, yy < h, xx >= 0, xx < wd)
        return te.sum(te.if_then_else(inside, x[b, rc, yy, xx], 0.0) * w[f, rc, ry, rx],
                      axis=[rc, ry, rx])
    return te.compute((n, w.shape[0], (h - 1) // 2 + 1, (wd - 1) // 2 + 1), body, name="y")


@pytest.mark.parametrize("sizes", ["batch", "all"])
def test_symbolic_strided_convolution_runs_blas(sizes):
    """A stride-2 convolution with a symbolic batch plans as with a static one: an im2col gather
    and a BLAS product for the forward, the factored product and its col2im scatter for the
    input gradient, a gather and BLAS over the symbolic batch for the weight gradient (loops
    had been 31x and 77x slower).  With every dim symbolic the kernels stay correct.  Values
    against float64 torch."""
    torch = pytest.importorskip("torch")
    n = te.var("n")
    dims = (n, 4, 18, 18) if sizes == "batch" else (n, te.var("c"), te.var("h"), te.var("h"))
    x = te.placeholder(dims, "float32", name="x")
    w = te.placeholder((16, dims[1], 3, 3), "float32", name="w")
    y = nn.conv2d(x, w, 2, 1) if sizes == "batch" else _conv_s2(x, w)
    fwd, bwd = ta.vjp([y], [x, w])
    if sizes == "batch":
        fplan, bplan = fwd.kernel.plan, bwd.kernel.plan
        assert fplan.stage(y.name).cpu.contraction is not None, str(fplan)
        assert bplan.stage("dw").cpu.contraction is not None, str(bplan)
        assert any(s.name.endswith("_factor") and s.cpu.contraction is not None
                   for s in bplan.stages), str(bplan)
    for batch in (1, 3):
        r = np.random.default_rng(batch)
        xs = r.standard_normal((batch, 4, 18, 18)).astype(np.float32)
        ws = r.standard_normal((16, 4, 3, 3)).astype(np.float32)
        (got,), res = fwd(xs, ws)
        hs = r.standard_normal(got.shape).astype(np.float32)
        got_dx, got_dw = bwd(res, hs)
        tx, tw = (torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (xs, ws))
        ty = torch.nn.functional.conv2d(tx, tw, stride=2, padding=1)
        gx, gw = torch.autograd.grad(ty, [tx, tw], torch.from_numpy(hs.astype(np.float64)))
        for a, b in ((got, ty.detach()), (got_dx, gx), (got_dw, gw)):
            scale = float(np.abs(b.numpy()).max())
            np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5 * scale)


def test_symbolic_intermediate_is_a_workspace_resized_with_the_batch():
    """An intermediate with a symbolic dim is a workspace (a fresh array of a batch's size
    faulted its pages in on every call: ew_chain's backward 3x slower than static); it is
    allocated anew when the batch changes, and results stay right at every size."""
    n = te.var("n")
    x = te.placeholder((n, 64), "float32", name="x")
    e = te.compute((n, 64), lambda i, j: te.exp(x[i, j]), name="e")
    i = te.reduce_axis((0, n), name="i")
    s = te.compute((64,), lambda j: te.sum(e[i, j], axis=i), name="s")  # e read twice
    y = te.compute((n, 64), lambda i, j: e[i, j] / s[j], name="y")
    k = ta.build([y], [x])
    assert any(t.name == "e" for t in k.plan.workspace), str(k.plan)
    for rows in (5, 3, 5, 40):
        xs = np.random.default_rng(rows).standard_normal((rows, 64)).astype(np.float32)
        (got,) = k(xs)
        ex = np.exp(xs.astype(np.float64))
        np.testing.assert_allclose(got, ex / ex.sum(0), rtol=1e-5)


def test_symbolic_batch_fuses_the_prange_as_a_static_one():
    """A symbolic leading dim may be 1: the prange goes on fusing axes until 64 chunks, so an
    average pool's backward runs over n * c as with a static batch."""
    x = te.placeholder((te.var("n"), 64, 16, 16), "float32", name="x")
    st = plan_kernel([nn.avg_pool2d(x, 2, 2)], [x]).stages[0]
    assert st.fused == 2, str(st)


def test_strided_slice_over_a_symbolic_batch():
    """A slice from a start >= 0 to the end of a symbolic dim, with a positive stride, keeps the
    dim symbolic (its length max((n - start + stride - 1) // stride, 0)); forward and gradient
    equal NumPy's slicing at every batch, an empty one included.  Other slices of a symbolic dim
    are an error naming the dim."""
    from texpr_ad.ops import reduction
    n = te.var("n")
    x = te.placeholder((n, 12), "float64", name="x")
    fwd, bwd = ta.vjp([reduction.strided_slice(x, [1, 1], [None, None], [2, 3])], [x])
    for rows in (0, 1, 2, 5, 8):
        xs = np.random.default_rng(rows).standard_normal((rows, 12))
        (out,), res = fwd(xs)
        np.testing.assert_array_equal(out, xs[1::2, 1::3])
        g = np.random.default_rng(9).standard_normal(out.shape)
        want = np.zeros_like(xs)
        want[1::2, 1::3] = g
        np.testing.assert_array_equal(bwd(res, g)[0], want)
    with pytest.raises(te.TensorError, match=r"dim 0 of 'x' is symbolic \(n\)"):
        reduction.strided_slice(x, [0], [4], [1])
