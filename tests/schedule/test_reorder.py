"""The `reorder` rewrite (schedule/reorder.py): a reduction's independent axes loop in memory
order.  Each decision is checked on the plan; each kernel against float64 NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.schedule import plan_kernel
from texpr_ad.te.expr import Const, Reduce
from texpr_ad.te.visit import walk


def _axes(plan, name):
    (r,) = {x for b in plan.stage(name).bodies for x in walk(b) if isinstance(x, Reduce)}
    return [a.name for a in r.axis]


def test_a_sum_written_channel_last_loops_channel_outermost():
    """Group norm's backward shape: the sum over (i, j, c) of x[b, c, i, j] strides by H*W
    in its innermost loop as written; reordered, j (unit stride) is innermost and vectorizes."""
    x = te.placeholder((4, 16, 24, 40), "float32", name="x")
    g = te.placeholder((16,), "float32", name="g")  # small: stays in cache, does not vote
    c, i, j = (te.reduce_axis((0, n), nm) for n, nm in ((16, "c"), (24, "i"), (40, "j")))
    s = te.compute((4,), lambda b: te.sum(x[b, c, i, j] * g[c], axis=[i, j, c]), name="s")
    plan = plan_kernel([s], [x, g])
    assert _axes(plan, "s") == ["c", "i_j"], str(plan)  # i > j then run as one loop (below)
    assert "reordered: reduction loops c > i > j (written i > j > c)" in str(plan)
    assert plan.stage("s").cpu.lanes > 1, str(plan)  # unit stride innermost: SIMD lanes
    r = np.random.default_rng(7)
    xs, gs = r.standard_normal((4, 16, 24, 40)).astype("f4"), r.standard_normal(16).astype("f4")
    (got,) = ta.build([s], [x, g])(xs, gs)
    want = np.einsum("bcij,c->b", xs.astype(np.float64), gs.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_dependent_bounds_and_memory_order_are_left_as_written():
    x = te.placeholder((32, 64), "float32", name="x")
    i = te.reduce_axis((0, 32), "i")
    j = te.reduce_axis((0, 64), "j")
    s = te.compute((1,), lambda _: te.sum(x[i, j], axis=[i, j]), name="s")
    assert _axes(plan_kernel([s], [x]), "s") == ["i", "j"]  # already in memory order

    def tri(n):
        k = te.reduce_axis((0, n + 1), "k")
        m = te.reduce_axis((0, 64), "m")
        return te.sum(x[k, m], axis=[m, k])  # k's bound uses n, a data axis: kept as written
    t = te.compute((32,), tri, name="t")
    plan = plan_kernel([t], [x])
    assert _axes(plan, "t") == ["m", "k"], str(plan)
    xs = np.random.default_rng(8).standard_normal((32, 64)).astype("f4")
    (got,) = ta.build([t], [x])(xs)
    want = np.cumsum(xs.astype(np.float64).sum(1))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_symbolic_dims_keep_memory_order_and_lanes():
    """Sizes known only at the call rule out BLAS and split sums, not the loop-order rewrites:
    the sum over (i, c) of x[b, c, i] with symbolic dims loops c > i and runs in lanes."""
    n, c_, h = te.var("n"), te.var("c"), te.var("h")
    x = te.placeholder((n, c_, h), "float32", name="x")
    c, i = te.reduce_axis((0, c_), "c"), te.reduce_axis((0, h), "i")
    s = te.compute((n,), lambda b: te.sum(x[b, c, i], axis=[i, c]), name="s")
    plan = plan_kernel([s], [x])
    assert _axes(plan, "s") == ["c", "i"], str(plan)
    assert plan.stage("s").cpu.lanes > 1, str(plan)
    xs = np.random.default_rng(9).standard_normal((3, 5, 70)).astype("f4")
    (got,) = ta.build([s], [x])(xs)
    np.testing.assert_allclose(got, xs.astype(np.float64).sum((1, 2)), rtol=1e-5, atol=1e-4)


def test_a_band_written_as_where_loops_over_the_band_only():
    """Sliding-window attention's row max and sum: `where=(k <= i) & (i - k < 16)` over 128
    columns becomes k in [max(i - 15, 0), i], as `reduce_axis` bounds would say it, and the
    band's loop runs in lanes; the values are NumPy's."""
    t, band = 128, 16
    s = te.placeholder((4, t, t), "float32", name="s")
    k1, k2 = te.reduce_axis((0, t), "k"), te.reduce_axis((0, t), "k")

    def inside(i, k):
        return te.all(k <= i, i - k < band)
    mx = te.compute((4, t), lambda b, i: te.max(s[b, i, k1], axis=k1, where=inside(i, k1)), name="mx")
    tot = te.compute((4, t), lambda b, i: te.sum(s[b, i, k2] * 2.0, axis=k2, where=inside(i, k2)),
                     name="tot")
    plan = plan_kernel([mx, tot], [s])
    for name in ("mx", "tot"):
        st = plan.stage(name)
        (r,) = {x for b in st.bodies for x in walk(b) if isinstance(x, Reduce)}
        assert isinstance(r.condition, Const) and r.condition.value is True, str(plan)
        assert "tightened" in " ".join(st.notes) and not isinstance(r.axis[0].lo, Const), str(plan)
        assert st.cpu.lanes > 1, str(plan)
    xs = np.random.default_rng(10).standard_normal((4, t, t)).astype("f4")
    got_mx, got_tot = ta.build([mx, tot], [s])(xs)
    i, k = np.arange(t)[:, None], np.arange(t)[None, :]
    keep = (k <= i) & (i - k < band)
    np.testing.assert_array_equal(got_mx, np.where(keep, xs, -np.inf).max(-1))
    np.testing.assert_allclose(got_tot, np.where(keep, 2.0 * xs.astype(np.float64), 0).sum(-1),
                               rtol=1e-5, atol=1e-5)


def test_a_causal_sum_over_a_small_table_accumulates_rows():
    """An EMA written as its unrolled scan, y[n, i, f] = sum_{s <= i} pw[f, i - s] x[n, s, f]:
    the causal where= becomes s in [0, i] (tighten), and the sum accumulates whole rows over f
    although pw is read across f at a stride: a 32 Ki-element table stays in cache."""
    b, t, c = 8, 64, 128  # x: 64 Ki elements (streams), pw: 8 Ki (cached); f is the row
    x = te.placeholder((b, t, c), "float32", name="x")
    pw = te.placeholder((c, t), "float32", name="pw")
    s = te.reduce_axis((0, t), "s")
    y = te.compute((b, t, c), lambda n, i, f: te.sum(pw[f, i - s] * x[n, s, f], axis=s,
                                                     where=s <= i), name="y")
    plan = plan_kernel([y], [x, pw])
    acc = plan.stage("y").cpu.accumulate
    assert acc is not None and acc.row is not None and acc.row.name == "f", str(plan)
    r = np.random.default_rng(11)
    xs, ps = r.standard_normal((b, t, c)).astype("f4"), r.standard_normal((c, t)).astype("f4")
    (got,) = ta.build([y], [x, pw])(xs, ps)
    want = np.zeros((b, t, c))
    for i in range(t):
        for j in range(i + 1):
            want[:, i] += ps[:, i - j].astype(np.float64) * xs[:, j]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _sum_plan(shape, axes, index, where=None, extra=None):
    x = te.placeholder(shape, "float32", name="x")
    rs = [te.reduce_axis((0, n), nm) for n, nm in axes]
    y = te.placeholder((shape[-1],), "float32", name="y")
    s = te.compute((shape[1],), lambda c: te.sum(
        x[index(c, *rs)] * (extra(y, *rs) if extra else 1.0), axis=rs,
        where=where(*rs) if where else None), name="s")
    return s, x, y


def test_inner_reduce_axes_over_whole_input_dims_run_as_one_loop():
    """Batch norm's sums over (n, h, w) of x[n, c, h, w]: h and w collapse into one unit-stride
    loop over x.reshape(n, c, h * w) (56 x 56 rows of 56 ran in LLVM's scalar remainder); a
    sum over all three trailing dims collapses twice, through a view of a view, while the
    inner loop is shorter than SHORT_ROW."""
    r = np.random.default_rng(10)
    xs = r.standard_normal((3, 5, 14, 9)).astype("f4")
    s, x, _ = _sum_plan((3, 5, 14, 9), ((3, "n"), (14, "h"), (9, "w")),
                        lambda c, n, h, w: (n, c, h, w))
    plan = plan_kernel([s], [x])
    assert _axes(plan, "s") == ["n", "h_w"], str(plan)
    (view, base), = plan.stage("s").cpu.views
    assert base is x and [int(d.value) for d in view.shape] == [3, 5, 126]
    assert "x_flat = x.reshape(3, 5, 126)" in str(plan)
    (got,) = ta.build([s], [x])(xs)
    np.testing.assert_allclose(got, xs.astype(np.float64).sum((0, 2, 3)), rtol=1e-5, atol=1e-5)
    x3 = te.placeholder((3, 5, 4, 9), "float32", name="x")
    c, h, w = (te.reduce_axis((0, n), nm) for n, nm in ((5, "c"), (4, "h"), (9, "w")))
    t = te.compute((3,), lambda n: te.sum(x3[n, c, h, w], axis=[c, h, w]), name="t")
    plan = plan_kernel([t], [x3])
    assert _axes(plan, "t") == ["c_h_w"], str(plan)
    (view, base), = plan.stage("t").cpu.views
    assert base is x3 and [int(d.value) for d in view.shape] == [3, 180]
    (got,) = ta.build([t], [x3])(xs[:, :, :4])
    np.testing.assert_allclose(got, xs[:, :, :4].astype(np.float64).sum((1, 2, 3)), rtol=1e-5,
                               atol=1e-5)
    s, x, _ = _sum_plan((3, 5, 14, 64), ((3, "n"), (14, "h"), (64, "w")),
                        lambda c, n, h, w: (n, c, h, w))
    assert _axes(plan_kernel([s], [x]), "s") == ["n", "h", "w"]  # rows of 64 fill a vector loop


@pytest.mark.parametrize("case", ["part of a dim", "axis read alone too", "condition"])
def test_inner_reduce_axes_stay_apart_unless_they_index_only_whole_dims(case):
    shape, axes = (3, 5, 14, 9), ((3, "n"), (14, "h"), (9, "w"))
    idx = lambda c, n, h, w: (n, c, h, w)  # noqa: E731
    kw = {"part of a dim": dict(axes=((3, "n"), (7, "h"), (9, "w"))),
          "axis read alone too": dict(extra=lambda y, n, h, w: y[w]),
          "condition": dict(where=lambda n, h, w: h + w < 15)}[case]
    s, x, y = _sum_plan(kw.get("shape", shape), kw.get("axes", axes), kw.get("index", idx),
                        kw.get("where"), kw.get("extra"))
    ins = [x] + ([y] if case == "axis read alone too" else [])
    plan = plan_kernel([s], ins)
    assert not plan.stage("s").cpu.views and len(_axes(plan, "s")) == 3, str(plan)
    arrays = [np.random.default_rng(11).standard_normal([int(d.value) for d in t.shape]
                                                        ).astype("f4") for t in ins]
    (got,) = ta.build([s], ins)(*arrays)
    (want,) = te.evaluate([s], dict(zip(ins, arrays)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch", [4, 64])
def test_an_intermediate_is_viewed_whole_but_not_as_a_row_buffer(batch):
    """Collapsing runs after fusion: a whole intermediate array is read through a view (a group
    norm backward's sums over dgn); a row buffer (a per-iteration array without the prange's
    dim, here with 64 rows of work) keeps its loops."""
    x = te.placeholder((batch, 5, 6, 7), "float32", name="x")
    e = te.compute((batch, 5, 6, 7), lambda b, c, h, w: te.exp(x[b, c, h, w]) + x[b, 0, 0, 0],
                   name="e")
    rs = [te.reduce_axis((0, n), nm) for n, nm in ((5, "c"), (6, "h"), (7, "w"))]
    s = te.compute((batch,), lambda b: te.sum(e[b, rs[0], rs[1], rs[2]], axis=rs), name="s")
    ov = {"e": {"inline": False}}
    plan = plan_kernel([s], [x], overrides=ov)
    row_buffer = "row buffer" in str(plan)
    assert row_buffer == (batch == 64), str(plan)
    assert _axes(plan, "s") == (["c", "h", "w"] if row_buffer else ["c_h_w"]), str(plan)
    xs = np.random.default_rng(12).standard_normal((batch, 5, 6, 7)).astype("f4")
    (got,) = ta.build([s], [x], plan_overrides=ov)(xs)
    want = (np.exp(xs.astype(np.float64)) + xs[:, :1, :1, :1]).sum((1, 2, 3))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_elementwise_short_rows_write_and_read_through_views():
    """An elementwise stage over x[n, c, h, w] with rows of 9: one loop over h * w, written
    through a view of its own (whole, 4-d) array; a read of the inner axis alone keeps the
    loops."""
    x = te.placeholder((4, 64, 14, 9), "float32", name="x")
    s = te.placeholder((64,), "float32", name="s")
    wv = te.placeholder((9,), "float32", name="wv")
    y = te.compute(x.shape, lambda n, c, h, w: x[n, c, h, w] * 2.0 + s[c], name="y")
    z = te.compute(x.shape, lambda n, c, h, w: x[n, c, h, w] * wv[w], name="z")
    r = np.random.default_rng(13)
    xs, ss, ws = (r.standard_normal(t.shape and [int(d.value) for d in t.shape]).astype("f4")
                  for t in (x, s, wv))
    py, pz = plan_kernel([y], [x, s]), plan_kernel([z], [x, wv])
    assert [a.name for a in py.stage("y").order][-1] == "h_w", str(py)
    assert "collapsed: loops h > w run as one loop h_w of 126" in str(py)
    assert [a.name for a in pz.stage("z").order][-2:] == ["h", "w"], str(pz)
    (got,) = ta.build([y], [x, s])(xs, ss)
    assert got.shape == xs.shape
    np.testing.assert_array_equal(got, xs * np.float32(2.0) + ss[:, None, None])
    (got,) = ta.build([z], [x, wv])(xs, ws)
    np.testing.assert_array_equal(got, xs * ws)


def test_lanes_are_decided_on_the_collapsed_reduction_loop():
    """A squeeze-excite's mean over 28 x 28: each row of 28 is too short for SIMD lanes, the
    collapsed loop of 784 is not, so the stage accumulates in lanes (vecmath's radd) after
    collapse_rows merged the rows; the sum stays within float32 rounding of NumPy's."""
    x = te.placeholder((4, 16, 28, 28), "float32", name="x")
    rh, rw = te.reduce_axis((0, 28), "rh"), te.reduce_axis((0, 28), "rw")
    s = te.compute((4, 16), lambda b, f: te.sum(x[b, f, rh, rw], axis=[rh, rw]) / 784.0,
                   name="squeeze")
    k = ta.build([s], [x])
    assert _axes(k.plan, "squeeze_red1") == ["rh_rw"], str(k.plan)
    assert k.plan.stage("squeeze_red1").cpu.lanes > 1, str(k.plan)
    assert "radd(" in k.source, k.source
    xs = np.random.default_rng(11).standard_normal((4, 16, 28, 28)).astype("f4")
    (got,) = k(xs)
    np.testing.assert_allclose(got, xs.astype(np.float64).mean((2, 3)), rtol=1e-5, atol=1e-6)
    y = te.compute((4, 16), lambda b, f: te.sum(x[b, f, rh, 27 - rw], axis=[rh, rw]), name="y")
    assert ta.build([y], [x]).plan.stage("y").cpu.lanes == 1  # rows stay apart: short, no lanes


def test_a_row_accumulated_split_cuts_the_outermost_reduce_axis_long_enough_to_split():
    """A layer-scale or bias gradient over (batch 8, 512 tokens) of x[a, b, k]: the batch axis
    is too short to cut into SPLIT_CHUNKS chunks, so the split cuts b, moved outermost (printed
    with its reason), and the column sum accumulates whole rows along k.  Before, the stage ran
    prange(k) with a scalar accumulator striding by 96 elements per term.  A reduction whose
    bounds depend on another axis keeps its order."""
    from texpr_ad.schedule.cpu import SPLIT_CHUNKS
    a_, b_, k_ = 8, 512, 96
    assert a_ < 2 * SPLIT_CHUNKS <= b_
    x = te.placeholder((a_, b_, k_), "float32", name="x")
    y = te.placeholder((a_, b_, k_), "float32", name="y")
    a, b = te.reduce_axis((0, a_), "a"), te.reduce_axis((0, b_), "b")
    col = te.compute((k_,), lambda k: te.sum(x[a, b, k] * y[a, b, k], axis=[a, b]), name="col")
    plan = plan_kernel([col], [x, y])
    acc = plan.stage("col").cpu.accumulate
    assert acc is not None and acc.split is not None and acc.split.name == "b", str(plan)
    assert acc.row is not None and acc.row.name == "k", str(plan)
    assert _axes(plan, "col") == ["b", "a"], str(plan)
    assert "reordered: reduction loops b > a (written a > b): a split cuts the outermost " \
           "loop into 16 chunks, and a (8) is shorter than 32" in str(plan), str(plan)
    r = np.random.default_rng(11)
    xs, ys = (r.standard_normal((a_, b_, k_)).astype("f4") for _ in range(2))
    (got,) = ta.build([col], [x, y])(xs, ys)
    x64 = xs.astype(np.float64)
    np.testing.assert_allclose(got, (x64 * ys).sum((0, 1)), rtol=1e-5, atol=1e-4)

    def tri(k):  # b's range depends on a: not reorderable, the split stays on a (or none)
        a3 = te.reduce_axis((0, a_), "a")
        b3 = te.reduce_axis((0, 64 * a3 + 64), "b")
        return te.sum(x[a3, b3, k], axis=[a3, b3])
    t = te.compute((k_,), tri, name="t")
    plan = plan_kernel([t], [x])
    assert _axes(plan, "t") == ["a", "b"], str(plan)
    (got,) = ta.build([t], [x])(xs)
    want = sum(x64[i, :64 * i + 64].sum(0) for i in range(a_))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_a_row_accumulation_over_short_rows_runs_one_row_over_both_dims():
    """AlexNet's local response norm sums x[n, c + r - 2, h, w]^2 over 5 channels: a row
    accumulation along w, whose rows of 20 are too short to vectorize; h and w index whole
    adjacent dims of every read, so the row is h * w = 240 long, written through a view (the
    plan says so).  Before, the row was w alone.  A read of w alone keeps the rows of 20."""
    n, c, h, w = 2, 32, 12, 20
    x = te.placeholder((n, c, h, w), "float32", name="x")
    wv = te.placeholder((w,), "float32", name="wv")

    def lrn_sum(wt):
        r = te.reduce_axis((0, 5), "r")
        def body(b, f, i, j):
            cc = f + r - 2
            v = te.if_then_else(te.all(cc >= 0, cc < c), x[b, cc, i, j], 0.0)
            return te.sum(v * v * (1.0 if wt is None else wt[j]), axis=r)
        return te.compute((n, c, h, w), body, name="s")
    s, s2 = lrn_sum(None), lrn_sum(wv)
    plan, plan2 = plan_kernel([s], [x]), plan_kernel([s2], [x, wv])
    acc = plan.stage("s").cpu.accumulate
    assert acc is not None and acc.row is not None and acc.row.name == "i_j", str(plan)
    assert "collapsed: loops i > j run as one loop i_j of 240" in str(plan), str(plan)
    acc2 = plan2.stage("s").cpu.accumulate
    assert acc2 is not None and acc2.row is not None and acc2.row.name == "j", str(plan2)
    xs = np.random.default_rng(17).standard_normal((n, c, h, w)).astype("f4")
    ws = np.random.default_rng(18).standard_normal(w).astype("f4")
    sq = np.pad(xs.astype(np.float64) ** 2, ((0, 0), (2, 2), (0, 0), (0, 0)))
    want = sum(sq[:, k:k + c] for k in range(5))
    (got,) = ta.build([s], [x])(xs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (got,) = ta.build([s2], [x, wv])(xs, ws)
    np.testing.assert_allclose(got, want * ws, rtol=1e-5, atol=1e-5)
