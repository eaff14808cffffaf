"""A reduction stage whose leading data axes give a short prange fuses its innermost data axis too
(cpu.fuse_points), and fuse.py narrows it back where a stage over its leading axes alone can then
share its prange.  Values against NumPy; no timing, no thread count."""
from __future__ import annotations

import numpy as np

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.schedule.loopnest import Loop, StageRef


def _group_stats(b: int, g: int):
    x = te.placeholder((b, g, 512), "float32", name="x")
    k = te.reduce_axis((0, 512), name="k")
    s = te.compute((b, g), lambda i, j: te.sum(x[i, j, k] * x[i, j, k], axis=k), name="s")
    return x, s


def test_a_reduction_over_few_rows_fuses_its_innermost_data_axis():
    x, s = _group_stats(8, 8)
    k = ta.build([s], [x])
    st = k.plan.stage("s")
    assert st.fused == 2 and [a.name for a in st.parallel_axes] == ["i", "j"], k.plan
    assert "prange(8 * 8)" in k.source, k.source
    xs = np.random.default_rng(0).standard_normal((8, 8, 512)).astype(np.float32)
    np.testing.assert_allclose(k(xs)[0], (xs.astype(np.float64) ** 2).sum(-1), rtol=1e-5)


def test_enough_rows_or_a_symbolic_batch_keep_the_innermost_axis_serial():
    x, s = _group_stats(64, 8)
    assert ta.build([s], [x]).plan.stage("s").fused == 1
    n = te.var("n")
    x = te.placeholder((n, 8, 512), "float32", name="x")
    k = te.reduce_axis((0, 512), name="k")
    s = te.compute((n, 8), lambda i, j: te.sum(x[i, j, k], axis=k), name="s")
    assert ta.build([s], [x]).plan.stage("s").fused == 1


def test_a_stage_over_the_leading_axes_alone_still_shares_the_prange():
    """The gradient of a padded 1-d convolution's input: the padded sum over (n, c, w + 2) and
    its crop over (n, c, w) share a prange over (n, c), the crop reading a row buffer."""
    x = te.placeholder((2, 3, 64), "float32", name="x")
    k = te.reduce_axis((0, 4), name="k")
    p = te.compute((2, 3, 66), lambda n, c, w: te.sum(
        te.if_then_else(te.all(w - k >= 0, w - k < 64), x[n, c, te.max(w - k, 0)], 0.0),
        axis=k), name="p")
    y = te.compute((2, 3, 60), lambda n, c, w: p[n, c, w + 3] * 2.0, name="y")
    kern = ta.build([y], [x])
    (node,) = kern.plan.tree
    assert isinstance(node, Loop) and [r.name for r in node.body if isinstance(r, StageRef)] == \
        ["p", "y"], kern.plan
    assert kern.plan.stage("p").fused == 2, kern.plan
    xs = np.random.default_rng(1).standard_normal((2, 3, 64)).astype(np.float32)
    pad = np.zeros((2, 3, 66 + 3), np.float64)
    for w in range(66):
        for kk in range(4):
            if 0 <= w - kk < 64:
                pad[:, :, w] += xs[:, :, w - kk]
    np.testing.assert_allclose(kern(xs)[0], pad[:, :, 3:63] * 2.0, rtol=1e-5, atol=1e-6)
