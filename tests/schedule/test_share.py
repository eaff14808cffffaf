"""The planner's `share` rewrite (schedule/share.py): a stage that recomputes an earlier
stage's whole value reads it instead.  Plan, source and NumPy; no timing."""
from __future__ import annotations

import math

import numpy as np

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.schedule import plan_kernel


def _bias_gelu(n=64, d=48):
    x = te.placeholder((n, d), "float32", name="x")
    b = te.placeholder((d,), "float32", name="b")

    def body(i, j):
        v = x[i, j] + b[j]
        return 0.5 * v * (1.0 + te.erf(v * (1.0 / math.sqrt(2.0))))
    y = te.compute((n, d), body, name="y")
    h = te.placeholder((n, d), "float32", name="head")
    return x, b, h, ta.grad(y, [x, b], head=h)


def test_the_bias_gradient_sums_dx_instead_of_recomputing_it():
    """dx[i, j] = head * gelu'(x + b) is db's summand too: db reads dx (erf/exp once)."""
    x, b, h, (dx, db) = _bias_gelu()
    plan = plan_kernel([dx, db], [x, b, h])
    st = plan.stage(db.op.name)
    assert any(f"reads {dx.op.name} instead" in n for n in st.notes), str(plan)
    k = ta.build([dx, db], [x, b, h])
    body = k.source[k.source.index(f"# stage {db.op.name}"):]
    assert "erf" not in body and "exp" not in body, k.source
    r = np.random.default_rng(12)
    xs, bs, hs = r.standard_normal((64, 48)), r.standard_normal(48), r.standard_normal((64, 48))
    xs, bs, hs = (a.astype("f4") for a in (xs, bs, hs))
    gx, gb = k(xs, bs, hs)
    from math import erf, pi, sqrt
    v = xs.astype(np.float64) + bs
    cdf = 0.5 * (1 + np.vectorize(erf)(v / sqrt(2)))
    want = hs * (cdf + v * np.exp(-v * v / 2) / sqrt(2 * pi))
    np.testing.assert_allclose(gx, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gb, want.sum(0), rtol=1e-4, atol=1e-4)


def test_a_value_at_other_indices_or_a_cheap_body_is_not_shared():
    x = te.placeholder((32, 32), "float32", name="x")
    e = te.compute((32, 32), lambda i, j: te.exp(te.tanh(x[i, j]) * 2.0 + 1.0), name="e")
    # the same value at the transposed point, and at a shifted point that leaves e's range
    t = te.compute((32, 32), lambda i, j: te.exp(te.tanh(x[j, i]) * 2.0 + 1.0) + e[i, j], name="t")
    s = te.compute((31, 32), lambda i, j: te.exp(te.tanh(x[i + 1, j]) * 2.0 + 1.0), name="s")
    plan = plan_kernel([e, t, s], [x])
    assert any("reads e instead" in n for n in plan.stage("t").notes), str(plan)  # e[j, i]
    assert not any("shared" in n for n in plan.stage("s").notes), str(plan)  # i + 1: not an axis
    xs = np.random.default_rng(13).standard_normal((32, 32)).astype("f4")
    ge, gt, gs = ta.build([e, t, s], [x])(xs)
    f = np.exp(np.tanh(xs.astype(np.float64)) * 2 + 1)
    np.testing.assert_allclose(gt, f.T + f, rtol=1e-5)
    np.testing.assert_allclose(gs, f[1:], rtol=1e-5)


def test_a_value_read_twice_at_one_point_is_inlined_and_computed_once():
    """SiLU of a normalization, y * sigmoid(y): the normalized y is read twice by one reader at
    one point, so it is inlined (no array) and rendered once, as a local, with its math."""
    x = te.placeholder((64, 48), "float32", name="x")
    y = te.compute((64, 48), lambda i, j: te.tanh(x[i, j]) * 3.0 + 1.0, name="y")
    z = te.compute((64, 48), lambda i, j: y[i, j] * te.sigmoid(y[i, j]), name="z")
    k = ta.build([z], [x])
    assert [s.name for s in k.plan.stages] == ["z"], str(k.plan)
    assert "read 2 times at one point" in str(k.plan)
    assert k.source.split("def texpr_kernel")[1].count("tanh") == 1, k.source  # once, a local
    xs = np.random.default_rng(14).standard_normal((64, 48)).astype("f4")
    v = np.tanh(xs.astype(np.float64)) * 3 + 1
    np.testing.assert_allclose(k(xs)[0], v / (1 + np.exp(-v)), rtol=1e-5, atol=1e-6)
