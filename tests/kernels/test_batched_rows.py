"""Row-wise chains over batched rows share one prange over all leading axes (schedule/fuse.py):
a layer norm over (batch, tokens, channels) or a softmax over (batch, heads, queries, keys)
whose statistics run over fewer leading axes than the elementwise stages still make one pass
over each row.  Each decision is checked on the plan's tree and each kernel against float64
NumPy.  No timing."""
from __future__ import annotations

import numpy as np

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.schedule.loopnest import Loop, LoopKind, refs

B, T, C = 3, 40, 24  # the (b, t) statistics fuse b alone, the (b, t, c) stages b * t


def rng() -> np.random.Generator:
    return np.random.default_rng(2026)


def _layer_norm(shape: tuple[int, ...]):
    x = te.placeholder(shape, "float64", name="x")
    *lead, c = shape
    n = len(lead)
    k1, k2 = te.reduce_axis((0, c), "k1"), te.reduce_axis((0, c), "k2")
    mu = te.compute(tuple(lead), lambda *i: te.sum(x[(*i, k1)], axis=k1) / float(c), name="mu")
    d = te.compute(shape, lambda *i: x[i] - mu[i[:n]], name="d")
    var = te.compute(tuple(lead), lambda *i: te.sum(d[(*i, k2)] * d[(*i, k2)], axis=k2) / float(c),
                     name="var")
    y = te.compute(shape, lambda *i: d[i] / te.sqrt(var[i[:n]] + 1e-5), name="y")
    return x, y


def _one_prange(plan) -> Loop:
    """The plan's only top-level node, a PRANGE loop holding every stage."""
    assert len(plan.nest) == 1, str(plan)
    loop = plan.nest[0]
    assert isinstance(loop, Loop) and loop.kind is LoopKind.PRANGE, str(plan)
    assert {r.name for r in refs(plan.nest)} == {s.name for s in plan.stages}, str(plan)
    return loop


def test_layer_norm_over_batched_rows_runs_in_one_prange_over_every_row():
    x, y = _layer_norm((B, T, C))
    k = ta.build([y], [x])
    loop = _one_prange(k.plan)
    assert int(loop.extent.value) == B * T  # type: ignore[attr-defined]
    assert all(s.fused == 2 for s in k.plan.stages), str(k.plan)
    a = rng().standard_normal((B, T, C))
    d = a - a.mean(-1, keepdims=True)
    want = d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(k(a)[0], want, rtol=1e-12, atol=1e-12)


def test_layer_norm_gradient_over_batched_rows_runs_in_one_prange():
    x, y = _layer_norm((B, T, C))
    g = te.placeholder((B, T, C), "float64", name="g")
    dx, = ta.grad(y, [x], g)
    k = ta.build([dx], [x, g])
    _one_prange(k.plan)
    a, h = rng().standard_normal((B, T, C)), rng().standard_normal((B, T, C))
    d = a - a.mean(-1, keepdims=True)
    sd = np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5)
    xh = d / sd  # dx = (g - mean(g) - xh mean(g xh)) / sd
    want = (h - h.mean(-1, keepdims=True) - xh * (h * xh).mean(-1, keepdims=True)) / sd
    np.testing.assert_allclose(k(a, h)[0], want, rtol=1e-10, atol=1e-12)


def test_softmax_over_heads_folds_its_sum_into_the_exp_row_loop():
    shape = (2, 3, 5, 40)
    x = te.placeholder(shape, "float64", name="x")
    k1, k2 = te.reduce_axis((0, 40), "k1"), te.reduce_axis((0, 40), "k2")
    m = te.compute(shape[:3], lambda n, h, i: te.max(x[n, h, i, k1], axis=k1), name="m")
    e = te.compute(shape, lambda n, h, i, j: te.exp(x[n, h, i, j] - m[n, h, i]), name="e")
    s = te.compute(shape[:3], lambda n, h, i: te.sum(e[n, h, i, k2], axis=k2), name="s")
    y = te.compute(shape, lambda n, h, i, j: e[n, h, i, j] / s[n, h, i], name="y")
    k = ta.build([y], [x])
    loop = _one_prange(k.plan)
    assert int(loop.extent.value) == 2 * 3 * 5  # type: ignore[attr-defined]
    row = [n for n in loop.body if isinstance(n, Loop)]
    assert [n.kind for n in row] == [LoopKind.ROW], str(k.plan)
    assert [r.name for r in refs(tuple(row))] == ["e", "s"], str(k.plan)
    a = rng().standard_normal(shape) * 4
    z = np.exp(a - a.max(-1, keepdims=True))
    np.testing.assert_allclose(k(a)[0], z / z.sum(-1, keepdims=True), rtol=1e-12, atol=1e-15)


def test_a_stage_reading_another_row_of_the_statistics_keeps_its_own_prange():
    x = te.placeholder((B, T, C), "float64", name="x")
    r = te.reduce_axis((0, C), "r")
    s = te.compute((B, T), lambda b, t: te.sum(x[b, t, r], axis=r), name="s")
    y = te.compute((B, T, C), lambda b, t, c: x[b, t, c] * s[b, T - 1 - t], name="y")
    k = ta.build([y], [x])
    assert not any(isinstance(n, Loop) for n in k.plan.nest), str(k.plan)
    a = rng().standard_normal((B, T, C))
    np.testing.assert_allclose(k(a)[0], a * a.sum(-1)[:, ::-1, None], rtol=1e-12)
