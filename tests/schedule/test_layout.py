"""Intermediate layouts (schedule/layout.py): an intermediate read along its first dim by the
loop that makes the big operands contiguous is stored with that dim last; values against NumPy."""
from __future__ import annotations

import numpy as np

import texpr_ad as ta
from texpr_ad import te


def _ema(b: int = 4, t: int = 16, c: int = 64):
    x = te.placeholder((b, t, c), "float32", name="x")
    p = te.placeholder((c,), "float32", name="p")
    pw = te.compute((c, t), lambda f, k: te.power(te.sigmoid(p[f]), k.astype("float32")),
                    name="powers")
    s = te.reduce_axis((0, t), "s")
    y = te.compute((b, t, c), lambda n, i, f: te.sum(pw[f, i - s] * x[n, s, f], axis=s,
                                                     where=s <= i), name="ema")
    return y, [x, p]


def _ema_ref(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    a = 1 / (1 + np.exp(-p.astype(np.float64)))
    h, out = np.zeros_like(x[:, 0], dtype=np.float64), []
    for i in range(x.shape[1]):
        h = a * h + x[:, i]
        out.append(h)
    return np.stack(out, 1)


def test_an_intermediate_read_along_its_first_dim_is_stored_transposed():
    y, ins = _ema()
    k = ta.build([y], ins)
    st = k.plan.stage("powers")
    assert [a.name for a in st.axes] == ["k", "f"], str(k.plan)
    assert "layout: stored as [k, f] (written [f, k])" in str(k.plan)
    assert "powers[i - s, f" in k.source.replace("f_1", "f").replace("f_2", "f"), k.source
    r = np.random.default_rng(0)
    x, p = r.standard_normal((4, 16, 64)).astype(np.float32), r.standard_normal(64).astype(np.float32)
    (got,) = k(x, p)
    np.testing.assert_allclose(got, _ema_ref(x, p), rtol=1e-4, atol=1e-5)


def test_gradients_through_a_transposed_intermediate_match_central_differences():
    y, (x, p) = _ema(2, 5, 8)
    x64 = te.placeholder(x.shape, "float64", name="x")
    p64 = te.placeholder(p.shape, "float64", name="p")
    pw = te.compute((8, 5), lambda f, k: te.power(te.sigmoid(p64[f]), k.astype("float64")),
                    name="powers")
    s = te.reduce_axis((0, 5), "s")
    y64 = te.compute((2, 5, 8), lambda n, i, f: te.sum(pw[f, i - s] * x64[n, s, f], axis=s,
                                                       where=s <= i), name="ema")
    h = te.placeholder(y64.shape, "float64", name="h")
    dx, dp = ta.grad(y64, [x64, p64], head=h)
    k = ta.build([dx, dp], [x64, p64, h])
    assert "layout: stored as" in str(k.plan), str(k.plan)
    r = np.random.default_rng(1)
    xv, pv, hv = r.standard_normal((2, 5, 8)), r.standard_normal(8), r.standard_normal((2, 5, 8))
    gx, gp = k(xv, pv, hv)
    from texpr_ad.testing import numerical_grad

    def loss(a, b):
        return float(np.sum(_ema_ref(a, b) * hv))
    np.testing.assert_allclose(gx, numerical_grad(loss, [xv, pv], 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gp, numerical_grad(loss, [xv, pv], 1), rtol=1e-6, atol=1e-8)


def test_an_intermediate_read_along_its_last_dim_keeps_its_layout():
    x = te.placeholder((64, 256), "float32", name="x")
    e = te.compute((64, 256), lambda i, j: te.exp(x[i, j]), name="e")
    k2 = te.reduce_axis((0, 256), "k2")
    s = te.compute((64,), lambda i: te.sum(e[i, k2] * x[i, k2], axis=k2), name="s")
    k = ta.build([s], [x])
    if "e" in [st.name for st in k.plan.stages]:
        assert [a.name for a in k.plan.stage("e").axes] == ["i", "j"]
    assert "layout:" not in str(k.plan)


def test_a_batch_of_small_gathered_products_stays_in_loops():
    """The EMA's input gradient is `sum_{i >= s} g[n, i, f] * pw[i - s, f]`: a product per
    channel f of (n x i) by a gathered (i x s) window matrix.  512 products of 16 x 64 x 64 do
    not pay for an im2col gather and 512 BLAS calls (cpu_contract.IM2COL_MIN_ENTRY): row loops instead."""
    from texpr_ad.schedule import cpu_contract
    y, (x, p) = _ema(16, 64, 512)
    h = te.placeholder(y.shape, "float32", name="h")
    (dx,) = ta.grad(y, [x], head=h)
    k = ta.build([dx], [x, p, h])
    st = k.plan.stage("dx")
    assert st.cpu.contraction is None and st.cpu.accumulate is not None, str(k.plan)
    assert "im2col" not in str(k.plan)
    assert 16 * 64 * 64 < cpu_contract.IM2COL_MIN_ENTRY
    r = np.random.default_rng(2)
    pv = r.standard_normal(512).astype(np.float32)
    hv = r.standard_normal((16, 64, 512)).astype(np.float32)
    (got,) = k(r.standard_normal((16, 64, 512)).astype(np.float32), pv, hv)
    a = 1 / (1 + np.exp(-pv.astype(np.float64)))
    want = np.zeros((16, 64, 512))
    for s in range(64):
        for i in range(s, 64):
            want[:, s] += hv[:, i] * a ** (i - s)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
