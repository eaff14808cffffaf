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
