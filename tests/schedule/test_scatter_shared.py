"""What every update of a scatter computes from the same loads at a point is computed once per
point, before the first update's store (schedule/cpu_scatter.shared_values: the plan's
`shared`: a Let node of its loop tree, schedule/stageloops.py).  Bilinear grid sampling's input gradient
(four taps sharing floor(grid ...) and the weights), resizing's (four unconditional taps sharing
the incoming gradient) and max pooling's (alternative updates: nothing hoisted).  Decisions on
the plan and the source, gradients against float64 NumPy.  No timing."""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops.nn import max_pool2d
from texpr_ad.ops.vision import np_resize_bilinear, resize2d
from texpr_ad.schedule.loopnest import LoopKind, refs
from texpr_ad.schedule.plan import ScatterStage

C, H, W, HO, WO = 16, 6, 7, 5, 3


def _grid_sample_grad(n: int, dtype: str, c: int = C, h: int = H, w: int = W, ho: int = HO,
                      wo: int = WO):
    """F.grid_sample(bilinear, zeros, align_corners=False) of x (n, c, h, w) at grid
    (n, ho, wo, 2), and its gradients: dx a scatter-add at floor(grid) (+1), four taps."""
    x = te.placeholder((n, c, h, w), dtype, name="x")
    g = te.placeholder((n, ho, wo, 2), dtype, name="grid")

    def body(b, f, i, j):
        fx = ((g[b, i, j, 0] + 1.0) * w - 1.0) * 0.5
        fy = ((g[b, i, j, 1] + 1.0) * h - 1.0) * 0.5
        x0, y0 = te.floor(fx), te.floor(fy)
        ax, ay = fx - x0, fy - y0
        xi, yi = x0.astype("int32"), y0.astype("int32")

        def tap(yy, xx):
            inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            return te.if_then_else(inside, x[b, f, yy, xx], 0.0)
        return ((tap(yi, xi) * (1.0 - ax) + tap(yi, xi + 1) * ax) * (1.0 - ay)
                + (tap(yi + 1, xi) * (1.0 - ax) + tap(yi + 1, xi + 1) * ax) * ay)
    y = te.compute((n, c, ho, wo), body, name="gs")
    head = te.placeholder((n, c, ho, wo), dtype, name="head")
    dx, dg = ta.grad(y, [x, g], head=head)
    return ta.build([dx, dg], [x, g, head])


def _reference(x: np.ndarray, g: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both gradients in float64, tap by tap (floor held constant, as its derivative is 0)."""
    x, g, h = (a.astype(np.float64) for a in (x, g, h))
    (_, c, hh, ww), (_, ho, wo, _) = x.shape, g.shape
    dx, dg = np.zeros_like(x), np.zeros_like(g)
    for b in range(g.shape[0]):
        for i in range(ho):
            for j in range(wo):
                fx, fy = ((g[b, i, j, 0] + 1) * ww - 1) / 2, ((g[b, i, j, 1] + 1) * hh - 1) / 2
                x0, y0 = int(np.floor(fx)), int(np.floor(fy))
                ax, ay = fx - x0, fy - y0
                v = {}
                for yy, wy in ((y0, 1 - ay), (y0 + 1, ay)):
                    for xx, wx in ((x0, 1 - ax), (x0 + 1, ax)):
                        ok = 0 <= yy < hh and 0 <= xx < ww
                        v[yy - y0, xx - x0] = x[b, :, yy, xx] if ok else np.zeros(c)
                        if ok:
                            dx[b, :, yy, xx] += h[b, :, i, j] * wy * wx
                d_ax = (1 - ay) * (v[0, 1] - v[0, 0]) + ay * (v[1, 1] - v[1, 0])
                d_ay = (1 - ax) * (v[1, 0] - v[0, 0]) + ax * (v[1, 1] - v[0, 1])
                dg[b, i, j, 0] = np.sum(h[b, :, i, j] * d_ax) * ww / 2
                dg[b, i, j, 1] = np.sum(h[b, :, i, j] * d_ay) * hh / 2
    return dx, dg


def _check_values(k, dtype: str, seed: int) -> None:
    """`_grid_sample_grad`'s kernel on random arrays of its input shapes, against `_reference`."""
    r = np.random.default_rng(seed)
    xs, gs, hs = (tuple(int(d) for d in t.shape) for t in k.inputs)
    x = r.standard_normal(xs).astype(dtype)
    g = r.uniform(-1.2, 1.2, gs).astype(dtype)  # some taps fall outside
    h = r.standard_normal(hs).astype(dtype)
    dx, dg = k(x, g, h)
    want_dx, want_dg = _reference(x, g, h)
    tol = 1e-12 if dtype == "float64" else 2e-5
    np.testing.assert_allclose(dx, want_dx, rtol=tol, atol=tol)
    np.testing.assert_allclose(dg, want_dg, rtol=tol, atol=tol)


def _dx_source(k) -> str:
    return k.source.split("# stage dx: scatter-add")[1].split("# stage")[0].split("return (")[0]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_taps_share_the_coordinates_and_weights(dtype):
    """The four taps' bounds tests, indices and weights all use floor(grid[b, i, j, ...]): it and
    the fractions are computed once per point, before the first tap's store; no tap loads grid
    or calls floor again."""
    k = _grid_sample_grad(8, dtype)
    st = k.plan.stage("dx")
    hoisted = [str(e) for e in st.cpu.shared]
    assert sum("floor(" in h and h.endswith('.astype("int32")') for h in hoisted) == 2, hoisted
    assert sum(h.count("floor(") == 1 and " - floor(" in h for h in hoisted) == 2, hoisted
    assert "(shared by the updates: computed once per point before their stores" in str(k.plan)
    src = _dx_source(k)
    taps = src[src.index("if "):]
    assert src.count("+=") == 4 and "np.floor" not in taps and "grid[" not in taps, src
    _check_values(k, dtype, seed=1)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_grid_gradient_sums_the_taps_once(dtype):
    """dgrid[.., 0] and [.., 1] (deriv `_gate_aside`: the coordinate axis is a select around
    each sum, not part of its domain) are sums over (b, i, j) that fold in one SIBLINGS loop
    over the channels (fuse.py `scalar_sibling`): the taps are loaded once for both."""
    k = _grid_sample_grad(2, dtype, c=8, h=12, w=10, ho=9, wo=11)
    reds = [st for st in k.plan.stages if st.name.startswith("dgrid_red")]
    assert len(reds) == 2, str(k.plan)
    for st in reds:
        assert tuple(int(d) for d in st.tensors[0].shape) == (2, 9, 11), str(k.plan)
    sib = [n for t in k.plan.tree for n in getattr(t, "body", ())
           if getattr(n, "kind", None) is LoopKind.SIBLINGS]
    assert len(sib) == 1 and {r.name for r in refs((sib[0],))} == {st.name for st in reds}, \
        str(k.plan)
    _check_values(k, dtype, seed=0)


def test_unconditional_taps_share_their_load():
    """Resizing's four taps always run and all multiply dresize[b, f, y, x]: it is loaded once
    (their indices and weights are integer and float arithmetic on the loop axes alone, which
    LLVM reuses past a store)."""
    n, c, h, w, oh, ow = 2, 3, 4, 5, 7, 9
    x = te.placeholder((n, c, h, w), "float64", name="x")
    y = resize2d(x, (oh, ow), "bilinear")
    head = te.placeholder((n, c, oh, ow), "float64", name="head")
    (dx,) = ta.grad(y, [x], head=head)
    k = ta.build([dx], [head])
    st = k.plan.stages[-1]
    assert [str(e) for e in st.cpu.shared] == ["head[b, f, y, x]"], str(k.plan)
    r = np.random.default_rng(5)
    hs = r.standard_normal((n, c, oh, ow))
    basis = np.eye(h * w).reshape(h * w, 1, h, w)  # the forward's matrix, a column per pixel
    m = np_resize_bilinear(basis, oh, ow).reshape(h * w, oh * ow)
    want = (hs.reshape(n, c, oh * ow) @ m.T).reshape(n, c, h, w)
    np.testing.assert_allclose(k(hs)[0], want, rtol=1e-12, atol=1e-12)


def test_alternative_updates_keep_their_loads_behind_their_conditions():
    """Max pooling's gradient goes to the argmax (one update) or, on ties, is shared among the
    maxima (the other): their shared loads sit behind conditions rarely true, so nothing is
    hoisted."""
    x = te.placeholder((2, 3, 8, 8), "float64", name="x")
    fwd, bwd = ta.vjp([max_pool2d(x, 3, 2, 1)], [x])
    k = fwd.pullback.backward_kernel
    scatters = [s for s in k.plan.stages if isinstance(s, ScatterStage)]
    assert scatters and all(not s.cpu.shared for s in scatters), str(k.plan)
    r = np.random.default_rng(6)
    xs, hs = r.standard_normal((2, 3, 8, 8)), r.standard_normal((2, 3, 4, 4))  # no ties
    _, res = fwd(xs)
    (got,) = bwd(res, hs)
    pad = np.pad(xs, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    want = np.zeros((2, 3, 10, 10))
    for b, c, i, j in np.ndindex(2, 3, 4, 4):
        win = pad[b, c, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
        di, dj = np.unravel_index(np.argmax(win), (3, 3))
        want[b, c, 2 * i + di, 2 * j + dj] += hs[b, c, i, j]
    np.testing.assert_allclose(got, want[:, :, 1:-1, 1:-1], rtol=1e-12, atol=1e-12)
