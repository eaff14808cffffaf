"""Planner step 3: an elementwise stage read once inside its reader's one reduction is inlined
when the reduction runs no more iterations than the stage has points (nll's gather of one
log_softmax entry per row), and stays materialized when inlining would recompute it.  The
decision is checked on the plan, the kernel against a float64 NumPy reference."""
from __future__ import annotations

import numpy as np

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops import elementwise as ew
from texpr_ad.ops import losses
from texpr_ad.schedule import plan_kernel

SEED = 7


def test_nll_gathers_log_softmax_entries_without_storing_the_rows():
    n, c = 64, 100
    x = te.placeholder((n, c), "float32", name="x")
    t = te.placeholder((n,), "int64", name="target")
    y = losses.nll_loss(ew.log_softmax(x, -1), t, "mean")
    k = ta.build([y], [x, t])
    assert "log_softmax" not in [s.name for s in k.plan.stages], str(k.plan)
    (why,) = [i.reason for i in k.plan.inlined if i.stage == "log_softmax"]
    assert "once per iteration of its reader's reduction" in why
    print(f"seed {SEED}")
    r = np.random.default_rng(SEED)
    xs, ts = r.standard_normal((n, c)).astype(np.float32) * 3, r.integers(0, c, n)
    x64 = xs.astype(np.float64)
    mx = x64.max(1, keepdims=True)
    lsm = x64 - mx - np.log(np.exp(x64 - mx).sum(1, keepdims=True))
    np.testing.assert_allclose(k(xs, ts)[0], -lsm[np.arange(n), ts].mean(), rtol=2e-6)


def test_a_reduction_rereading_the_stage_keeps_it_materialized():
    n, m = 32, 48
    x = te.placeholder((m,), "float32", name="x")
    e = te.compute((m,), lambda j: te.exp(x[j]), name="e")
    k_ = te.reduce_axis((0, m), name="k")
    s = te.compute((n,), lambda i: te.sum(e[k_] * i, axis=k_), name="s")  # n * m reads of m points
    plan = plan_kernel([s], [x])
    assert "e" in [st.name for st in plan.stages], str(plan)
    assert any("read inside a reduction" in note for note in plan.stage("e").notes)
