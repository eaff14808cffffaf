"""A gated adjoint sum whose gate is on axes the sum does not otherwise use is a select around
the sum (deriv/adjoint.py `_gate_aside`), so its lifted stage runs without those axes; two such
serial sums over the same loops fold in one loop nest (schedule/fuse.py SIBLINGS,
`scalar_sibling`).  grid_sample's d/dgrid[.., 0] and [.., 1] each summed the four bilinear taps
over the channels in a stage over (b, i, ax3, j) whose other ax3 value ran an empty sum: now
one pass over the channels loads the taps once for both.  Values against NumPy in float64; no
timing."""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.schedule.loopnest import LoopKind, refs

N, C, H, W, HO, WO = 2, 8, 12, 10, 9, 11


def _inside(*pairs):
    out = None
    for i, n in pairs:
        c = (i >= 0) & (i < n)
        out = c if out is None else out & c
    return out


def _grid_sample(x, grid):
    def body(b, f, i, j):
        fx = ((grid[b, i, j, 0] + 1.0) * W - 1.0) * 0.5
        fy = ((grid[b, i, j, 1] + 1.0) * H - 1.0) * 0.5
        x0, y0 = te.floor(fx), te.floor(fy)
        ax, ay = fx - x0, fy - y0
        xi, yi = x0.astype("int32"), y0.astype("int32")

        def tap(yy, xx):
            return te.if_then_else(_inside((yy, H), (xx, W)), x[b, f, yy, xx], 0.0)

        return ((tap(yi, xi) * (1.0 - ax) + tap(yi, xi + 1) * ax) * (1.0 - ay)
                + (tap(yi + 1, xi) * (1.0 - ax) + tap(yi + 1, xi + 1) * ax) * ay)
    return te.compute((N, C, HO, WO), body, name="gs")


def _numpy_grads(x, grid, dy):
    fx = ((grid[..., 0] + 1) * W - 1) / 2
    fy = ((grid[..., 1] + 1) * H - 1) / 2
    x0, y0 = np.floor(fx).astype(int), np.floor(fy).astype(int)
    ax, ay = (fx - x0)[:, None], (fy - y0)[:, None]
    b = np.arange(N)[:, None, None, None]
    f = np.arange(C)[None, :, None, None]
    dx = np.zeros_like(x)

    def tap(yy, xx, wgt):
        ok = ((yy >= 0) & (yy < H) & (xx >= 0) & (xx < W))[:, None]
        yc, xc = np.clip(yy, 0, H - 1)[:, None], np.clip(xx, 0, W - 1)[:, None]
        np.add.at(dx, (np.broadcast_to(b, dy.shape), np.broadcast_to(f, dy.shape),
                       np.broadcast_to(yc, dy.shape), np.broadcast_to(xc, dy.shape)),
                  np.where(ok, dy * wgt, 0.0))
        return np.where(ok, x[b, f, yc, xc], 0.0)
    v00 = tap(y0, x0, (1 - ax) * (1 - ay))
    v01 = tap(y0, x0 + 1, ax * (1 - ay))
    v10 = tap(y0 + 1, x0, (1 - ax) * ay)
    v11 = tap(y0 + 1, x0 + 1, ax * ay)
    dfx = ((1 - ay) * (v01 - v00) + ay * (v11 - v10)) * dy
    dfy = ((1 - ax) * (v10 - v00) + ax * (v11 - v01)) * dy
    dgrid = np.stack([dfx.sum(axis=1) * W / 2, dfy.sum(axis=1) * H / 2], axis=-1)
    return dx, dgrid


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_grid_sample_grid_gradient_sums_the_taps_once(dtype):
    x = te.placeholder((N, C, H, W), dtype, name="x")
    g = te.placeholder((N, HO, WO, 2), dtype, name="grid")
    y = _grid_sample(x, g)
    h = te.placeholder(y.shape, dtype, name="head")
    k = ta.build(ta.grad(y, [x, g], head=h), [x, g, h])
    reds = [st for st in k.plan.stages if st.name.startswith("dgrid_red")]
    assert len(reds) == 2, str(k.plan)
    for st in reds:  # over (b, i, j): the coordinate axis is a select around the sum
        assert tuple(int(d) for d in st.tensors[0].shape) == (N, HO, WO), str(k.plan)
    sib = [n for t in k.plan.tree for n in getattr(t, "body", ())
           if getattr(n, "kind", None) is LoopKind.SIBLINGS]
    assert len(sib) == 1 and {r.name for r in refs((sib[0],))} == {st.name for st in reds}, \
        str(k.plan)
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((N, C, H, W))
    gv = rng.uniform(-1.1, 1.1, (N, HO, WO, 2))
    dyv = rng.standard_normal((N, C, HO, WO))
    want_dx, want_dg = _numpy_grads(xv, gv, dyv)
    dx, dg = k(xv.astype(dtype), gv.astype(dtype), dyv.astype(dtype))
    tol = 1e-12 if dtype == "float64" else 2e-4
    np.testing.assert_allclose(dx, want_dx, rtol=tol, atol=tol)
    np.testing.assert_allclose(dg, want_dg, rtol=tol, atol=tol * 10)


def test_gate_on_an_unused_axis_leaves_the_sum_without_it():
    """dx[n, c] = sum_m dy[n, m] * w[m] where c == 0 (and sum_m dy[n, m] where c == 2): sums
    over n alone, selected by c."""
    x = te.placeholder((5, 3), "float64", name="x")
    w = te.placeholder((7,), "float64", name="w")
    y = te.compute((5, 7), lambda n, m: x[n, 0] * w[m] + x[n, 2], name="y")
    h = te.placeholder(y.shape, "float64", name="head")
    k = ta.build(ta.grad(y, [x], head=h), [x, w, h])
    red = [st for st in k.plan.stages if "_red" in st.name]
    assert [tuple(int(d) for d in st.tensors[0].shape) for st in red] == [(5,), (5,)], str(k.plan)
    rng = np.random.default_rng(1)
    xv, wv, hv = rng.standard_normal((5, 3)), rng.standard_normal(7), rng.standard_normal((5, 7))
    want = np.zeros((5, 3))
    want[:, 0] = hv @ wv
    want[:, 2] = hv.sum(axis=1)
    got = k(xv, wv, hv)
    got = got[0] if isinstance(got, (tuple, list)) else got
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
