"""A sum over rows that an earlier parallel reduction walks is split into per-row partial sums in
that reduction's loops plus a fold over the rows (schedule/cpu_partial.py): instance norm's
backward, whose dgamma and dbeta summed over (batch, h, w) in a second pass over dy and x, sums
them per (batch, channel) in the prange of its row gradients.  Values against NumPy in float64; no
timing."""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.schedule.loopnest import LoopKind, refs

N, C, H, W = 4, 32, 24, 24
EPS = 1e-5


def _instance_norm_grads(dtype: str):
    x = te.placeholder((N, C, H, W), dtype, name="x")
    g = te.placeholder((C,), dtype, name="gamma")
    b = te.placeholder((C,), dtype, name="beta")
    r1 = [te.reduce_axis((0, H), "rh"), te.reduce_axis((0, W), "rw")]
    r2 = [te.reduce_axis((0, H), "rh"), te.reduce_axis((0, W), "rw")]
    mean = te.compute((N, C), lambda n, c: te.sum(x[n, c, r1[0], r1[1]], axis=r1) / (H * W),
                      name="mean")
    var = te.compute((N, C), lambda n, c: te.sum(
        (x[n, c, r2[0], r2[1]] - mean[n, c]) * (x[n, c, r2[0], r2[1]] - mean[n, c]), axis=r2)
        / (H * W), name="var")
    y = te.compute((N, C, H, W), lambda n, c, i, j: (x[n, c, i, j] - mean[n, c])
                   * te.rsqrt(var[n, c] + EPS) * g[c] + b[c], name="y")
    h = te.placeholder(y.shape, dtype, name="head")
    return ta.grad(y, [x, g, b], head=h), [x, g, b, h]


def _numpy_grads(x, g, h):
    mean = x.mean(axis=(2, 3), keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axis=(2, 3), keepdims=True) + EPS)
    xhat = (x - mean) * rstd
    dgamma, dbeta = (h * xhat).sum(axis=(0, 2, 3)), h.sum(axis=(0, 2, 3))
    dxhat = h * g[None, :, None, None]
    dx = rstd * (dxhat - dxhat.mean(axis=(2, 3), keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=(2, 3), keepdims=True))
    return dx, dgamma, dbeta


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_instance_norm_weight_grads_sum_in_the_row_loops(dtype):
    grads, ins = _instance_norm_grads(dtype)
    k = ta.build(grads, ins)
    names = [st.name for st in k.plan.stages]
    parts = [n for n in names if n.endswith("_part")]
    assert len(parts) == 2, str(k.plan)  # dgamma's and dbeta's partial sums
    rows = next(t for t in k.plan.tree if getattr(t, "kind", None) is LoopKind.PRANGE)
    assert {*parts, "dvar_red1", "dx"} <= {r.name for r in refs((rows,))}, str(k.plan)
    for p in parts:  # per (batch, channel), in the prange of the row reductions
        assert tuple(int(d) for d in k.plan.stage(p).tensors[0].shape) == (N, C)
    assert "split: sums" in str(k.plan)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, H, W)) * 2 + 0.5
    g, b = 1 + 0.1 * rng.standard_normal(C), 0.1 * rng.standard_normal(C)
    h = rng.standard_normal((N, C, H, W))
    got = k(*(a.astype(dtype) for a in (x, g, b, h)))
    tol = 1e-10 if dtype == "float64" else 2e-5
    for a, w in zip(got, _numpy_grads(x, g, h)):
        np.testing.assert_allclose(a, w, rtol=tol, atol=tol * np.abs(w).max())


def test_a_sum_over_a_reduction_axis_of_the_rows_is_not_split():
    """Layer norm's dgamma sums over the rows that its row reductions run in parallel (its data
    axis is their reduce axis): a partial per row would be no sum at all; it stays whole."""
    x = te.placeholder((512, 256), "float32", name="x")
    h = te.placeholder((512, 256), "float32", name="h")
    k1, k2 = te.reduce_axis((0, 256), "k"), te.reduce_axis((0, 512), "n")
    s = te.compute((512,), lambda i: te.sum(x[i, k1] * h[i, k1], axis=k1), name="s")
    d = te.compute((256,), lambda c: te.sum(x[k2, c] * h[k2, c], axis=k2), name="d")
    k = ta.build([s, d], [x, h])
    assert not any(st.name.endswith("_part") for st in k.plan.stages), str(k.plan)
    rng = np.random.default_rng(1)
    xa, ha = rng.standard_normal((2, 512, 256))
    got = k(xa.astype(np.float32), ha.astype(np.float32))
    np.testing.assert_allclose(got[0], (xa * ha).sum(1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1], (xa * ha).sum(0), rtol=1e-4, atol=1e-4)


def test_a_sum_reading_what_is_written_after_the_rows_keeps_its_own_loops():
    """`t` sums `e`, which is computed after the row sums `s`: its partial sums cannot run in
    `s`'s loops, so it is left whole (and right)."""
    x = te.placeholder((64, 32, 128), "float32", name="x")
    r1 = te.reduce_axis((0, 128), "r")
    s = te.compute((64, 32), lambda b, f: te.sum(x[b, f, r1], axis=r1), name="s")
    e = te.compute((64, 32, 128), lambda b, f, j: te.exp(x[b, f, j] - s[b, f] / 128), name="e")
    rb, rj = te.reduce_axis((0, 64), "rb"), te.reduce_axis((0, 128), "rj")
    t = te.compute((32,), lambda f: te.sum(e[rb, f, rj] * x[rb, f, rj], axis=[rb, rj]), name="t")
    k = ta.build([e, t], [x])
    assert not any(st.name.endswith("_part") for st in k.plan.stages), str(k.plan)
    xa = np.random.default_rng(2).standard_normal((64, 32, 128))
    ea = np.exp(xa - xa.mean(2, keepdims=True))
    got = k(xa.astype(np.float32))
    np.testing.assert_allclose(got[1], (ea * xa).sum((0, 2)), rtol=1e-4, atol=1e-3)
