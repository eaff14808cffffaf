"""Values every term of a reduction shares are computed once before its loops
(schedule/cpu_invariants.hoist: `fold_hoisted`), also under a select or a `where=` when their
reads are in bounds without the guard; a guarded read stays in place.  Plan, source and
float64 NumPy; no timing."""
from __future__ import annotations

import numpy as np

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.te.printer import expr_str

N, M, K = 64, 24, 40


def _build():
    x = te.placeholder((N, M, K), "float32", name="x")
    s = te.placeholder((N, M), "float32", name="s")

    def body(i, j):
        k = te.reduce_axis((0, K), "k")
        nxt = te.if_then_else(j + 1 < M, s[i, j + 1], 0.0)  # in bounds only under its guard
        return te.sum(x[i, j, k] * te.log(s[i, j]) + nxt, axis=k, where=j % 2 == 0)
    y = te.compute((N, M), body, name="y")
    return ta.build([y], [x, s])


def test_shared_values_leave_the_reduction_loops_guarded_reads_stay():
    k = _build()
    st = k.plan.stage("y")
    assert k.plan.stage("y").order[1:], str(k.plan)  # j is a serial loop around the reduction
    hoisted = [expr_str(e) for e in st.cpu.fold_hoisted]
    assert "log(s[i, j])" in hoisted, str(k.plan)
    assert not any("s[i, j + 1]" in h for h in hoisted), hoisted
    assert "hoisted out of its reduction loops" in str(k.plan)
    lines = k.source.splitlines()
    loop = next(n for n, ln in enumerate(lines) if ln.strip().startswith("for k in range("))
    assert any("log" in ln and "(s[i, j])" in ln for ln in lines[:loop]), k.source
    assert not any("log" in ln for ln in lines[loop:]), k.source
    assert any("s[i, j + 1]" in ln for ln in lines[loop:]), k.source  # guarded: stays inside
    r = np.random.default_rng(5)
    xs = r.standard_normal((N, M, K)).astype("f4")
    ss = r.uniform(0.5, 2.0, (N, M)).astype("f4")
    (got,) = k(xs, ss)
    x64, s64 = xs.astype(np.float64), ss.astype(np.float64)
    nxt = np.concatenate([s64[:, 1:], np.zeros((N, 1))], axis=1)
    want = (x64 * np.log(s64)[:, :, None] + nxt[:, :, None]).sum(2)
    want[:, 1::2] = 0.0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_a_scale_read_in_a_select_branch_leaves_the_row_loop():
    """Smooth-L1's backward: the mean's scale `g[()]` is read in both branches of the select;
    in bounds without the guard, it is loaded once before the row loop (the loop then
    vectorizes: LLVM reloads it after every store otherwise).  A guarded read stays."""
    p = te.placeholder((N, M), "float32", name="p")
    g = te.placeholder((), "float32", name="g")

    def body(i, j):
        d = p[i, j]
        nxt = te.if_then_else(j + 1 < M, p[i, j + 1], 0.0)
        return te.if_then_else(te.abs(d) < 1.0, g[()] * d, g[()] * te.sign(d)) + nxt
    y = te.compute((N, M), body, name="y")
    k = ta.build([y], [p, g])
    hoisted = [expr_str(e) for e in k.plan.stage("y").cpu.hoisted]
    assert hoisted == ["g[()]"], str(k.plan)
    ps = np.random.default_rng(6).standard_normal((N, M)).astype("f4") * 2
    (got,) = k(ps, np.array(0.25, np.float32))
    p64 = ps.astype(np.float64)
    nxt = np.concatenate([p64[:, 1:], np.zeros((N, 1))], axis=1)
    want = np.where(np.abs(p64) < 1, 0.25 * p64, 0.25 * np.sign(p64)) + nxt
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
