"""Elementwise siblings (schedule/fuse.py `_sibling_map`, `_siblings`): in a prange, elementwise
stages over the same loops that do not read each other run in one loop nest, a store each, so
the rows they share are read once and a common term (here exp(t - lse(t))) is computed once.
Decisions on the plan and the source; values against float64 NumPy.  No timing."""
from __future__ import annotations

import numpy as np

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.schedule.loopnest import Loop, LoopKind, refs


def _kl(n: int, c: int):
    """KL(softmax(t) || softmax(s)) over rows, written plainly (a distillation loss)."""
    s, t = te.placeholder((n, c), "float32", name="s"), te.placeholder((n, c), "float32", name="t")
    ks = [te.reduce_axis((0, c), f"k{j}") for j in range(5)]

    def lse(x, a, b, nm):
        mx = te.compute((n,), lambda i: te.max(x[i, a], axis=a), name=nm + "_max")
        return te.compute((n,), lambda i: te.log(te.sum(te.exp(x[i, b] - mx[i]), axis=b)) + mx[i],
                          name=nm + "_lse")
    ls, lt = lse(s, ks[0], ks[1], "s"), lse(t, ks[2], ks[3], "t")
    i, j = te.reduce_axis((0, n), "i"), ks[4]
    kl = te.compute((), lambda: te.sum(te.exp(t[i, j] - lt[i]) * ((t[i, j] - lt[i])
                                       - (s[i, j] - ls[i])), axis=[i, j]) / float(n), name="kl")
    return kl, s, t


def _loops(nodes):
    for x in nodes:
        if isinstance(x, Loop):
            yield x
            yield from _loops(x.body)


def test_two_gradients_over_the_same_rows_run_in_one_loop_nest():
    """dS and dT are elementwise over the rows of one prange, dT reads two row scalars computed
    after dS (s_lse, dt_lse's sum), which do not read dS: dS moves down next to dT and both
    are stored in one loop over the row (before: two loops, exp(t - lse(t)) computed twice)."""
    kl, s, t = _kl(37, 53)
    fwd, bwd = ta.vjp([kl], [s, t])
    plan = bwd.pullback.backward_kernel.plan
    sib = [x for x in _loops(plan.nest) if x.kind is LoopKind.SIBLINGS]
    assert any({r.name for r in refs((x,))} == {"ds", "dt"} for x in sib), str(plan)
    assert "elementwise stages over the same loops" in str(plan), str(plan)
    r = np.random.default_rng(0)
    sa, ta_ = [(r.standard_normal((37, 53)) * 2).astype("f4") for _ in range(2)]
    (y,), res = fwd(sa, ta_)
    g = np.array(1.7, np.float32)
    got_s, got_t = bwd(res, g)
    s64, t64 = sa.astype(np.float64), ta_.astype(np.float64)

    def logsm(x):
        m = x.max(1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(1, keepdims=True))
    ls, lt = logsm(s64), logsm(t64)
    pt, ps = np.exp(lt), np.exp(ls)
    row = (pt * (lt - ls)).sum(1, keepdims=True)
    np.testing.assert_allclose(y, row.sum() / 37, rtol=1e-5)
    np.testing.assert_allclose(got_s, 1.7 / 37 * (ps - pt), rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(got_t, 1.7 / 37 * pt * (lt - ls - row), rtol=2e-4, atol=1e-6)
