"""CPU step 8 (schedule/fuse.py): consecutive split reductions share their chunk prange and
loops (a CHUNKS loop of the plan's nest).  Each decision is checked on the plan, and each kernel against the kernel
built without the step and a float64 NumPy reference.  Sums that fold the same terms in the same
order are bit-identical; sums stepped in SIMD lanes (vecmath.radd) regroup with the vector width
LLVM picks for each loop, which differs between CPUs (8 float32 lanes on AVX2, 16 on AVX-512)
and between the two kernels' loops, so those are compared within float32 rounding
(`assert_regrouped`).  No timing."""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops import elementwise as ew
from texpr_ad.schedule import fuse, plan_kernel
from texpr_ad.schedule.fuse import rename_axes
from texpr_ad.te.expr import Reduce
from texpr_ad.te.visit import walk

SEED = 2026
N, M = 1024, 64  # column reductions over 1024 rows into 64 points: split into partial results


def rng() -> np.random.Generator:
    print(f"seed {SEED}")
    return np.random.default_rng(SEED)


def assert_regrouped(a: np.ndarray, b: np.ndarray, chain: int, abs_sum: np.ndarray | float) -> None:
    """`a` and `b` are float32 sums of the same terms in two groupings whose float32 chains add
    at most `chain` terms: each is within (chain - 1) eps * sum|terms| of the exact sum (the
    recursive-summation bound), so they differ by at most twice that (`abs_sum`: sum|terms|)."""
    eps = float(np.finfo(np.float32).eps)
    bound = 2 * (chain - 1) * eps * np.asarray(abs_sum, np.float64)
    diff = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    assert (diff <= bound).all(), (float(diff.max()), float(np.max(bound)))


def _unshared(monkeypatch: pytest.MonkeyPatch, outs: list, ins: list):
    with monkeypatch.context() as m:
        m.delitem(fuse.FUSIONS, "chunks")
        k = ta.build(outs, ins)
    assert "chunks(" not in str(k.plan), str(k.plan)
    return k


def _column_sums():
    x = te.placeholder((N, M), "float32", name="x")
    i1, i2, i3, i4 = (te.reduce_axis((0, N), name="i") for _ in range(4))
    h = te.reduce_axis((0, N // 2), name="h")
    s1 = te.compute((M,), lambda j: te.sum(x[i1, j], axis=i1), name="s1")
    s2 = te.compute((M,), lambda j: te.sum(x[i2, j] * x[i2, j], axis=i2), name="s2")
    mx = te.compute((M,), lambda j: te.max(x[i3, j], axis=i3), name="mx")
    pos = te.compute((M,), lambda j: te.sum(x[i4, j], axis=i4, where=x[i4, j] > 0), name="pos")
    half = te.compute((M,), lambda j: te.sum(x[h, j], axis=h), name="half")
    return x, [s1, s2, mx, pos, half]


def test_column_reductions_over_the_same_rows_share_one_pass(monkeypatch):
    x, outs = _column_sums()
    k = ta.build(outs, [x])
    st = {s.name: s for s in k.plan.stages}
    assert all(st[n].cpu.accumulate.split is not None for n in st), str(k.plan)
    head = st["s1"]
    assert not k.plan.joined("s1")
    for n in ("s2", "mx", "pos"):  # same chunks, extents, order: in s1's loops, on s1's axes
        assert k.plan.joined(n) and st[n].axes == head.axes, str(k.plan)
        assert k.plan.loop_of(n) is k.plan.loop_of("s1") and k.plan.loop_of(n).kind == "chunks"
        assert st[n].cpu.accumulate.split is head.cpu.accumulate.split
    assert k.plan.loop_of("half") is None  # half the rows: its own chunks
    assert "one pass over the rows" in str(k.plan)
    assert k.source.count("in prange(16)") == 2, k.source  # s1's group, then half
    xs = rng().standard_normal((N, M)).astype(np.float32)
    got, ref = k(xs), _unshared(monkeypatch, outs, [x])(xs)
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_array_equal(a, b)
    x64 = xs.astype(np.float64)
    want = [x64.sum(0), (x64 * x64).sum(0), x64.max(0), np.where(x64 > 0, x64, 0).sum(0),
            x64[: N // 2].sum(0)]
    for a, w in zip(got, want, strict=True):
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-4)


def test_a_reduction_reading_an_earlier_one_keeps_its_own_loops():
    x = te.placeholder((N, M), "float32", name="x")
    i1, i2 = te.reduce_axis((0, N), name="i"), te.reduce_axis((0, N), name="i")
    s1 = te.compute((M,), lambda j: te.sum(x[i1, j], axis=i1), name="s1")
    c = te.compute((M,), lambda j: te.sum((x[i2, j] - s1[j]) * x[i2, j], axis=i2), name="c")
    plan = plan_kernel([s1, c], [x])
    assert plan.stage("c").cpu.accumulate.split is not None
    assert not plan.joined("c"), str(plan)  # s1 is complete only after its loops


def test_rename_axes_renames_reduction_axes_and_their_reads():
    x, (s1, s2, *_) = _column_sums()
    r1 = next(e for e in walk(s1.op.body[0]) if isinstance(e, Reduce))
    r2 = next(e for e in walk(s2.op.body[0]) if isinstance(e, Reduce))
    j1, j2 = s1.op.axis[0], s2.op.axis[0]
    out = rename_axes(s2.op.body[0], {r2.axis[0]: r1.axis[0], j2: j1})
    red = next(e for e in walk(out) if isinstance(e, Reduce))
    assert red.axis == r1.axis
    used = {e for e in walk(out) if e in (r1.axis[0], r2.axis[0], j1, j2)}
    assert used == {r1.axis[0], j1}


def test_layer_norm_dgamma_and_dbeta_share_one_pass(monkeypatch):
    x = te.placeholder((N, M), "float32", name="x")
    g, b = te.placeholder((M,), "float32", name="gamma"), te.placeholder((M,), "float32", name="beta")
    y = ew.layer_norm(x, g, b, 1e-5)
    head = te.placeholder(y.shape, "float32", name="head")
    grads = ta.grad(y, [x, g, b], head=head)
    k = ta.build(grads, [x, g, b, head])
    dg, db = (k.plan.stage(t.op.name) for t in grads[1:])
    assert dg.cpu.accumulate.split is not None and not k.plan.joined(dg.name), str(k.plan)
    assert k.plan.joined(db.name) and db.cpu.accumulate.split is dg.cpu.accumulate.split, str(k.plan)
    r = rng()
    xs, gs, bs, hs = (r.standard_normal(s).astype(np.float32) for s in ((N, M), (M,), (M,), (N, M)))
    got = k(xs, gs, bs, hs)
    for a, w in zip(got, _unshared(monkeypatch, grads, [x, g, b, head])(xs, gs, bs, hs), strict=True):
        np.testing.assert_array_equal(a, w)
    x64, h64 = xs.astype(np.float64), hs.astype(np.float64)
    mu, var = x64.mean(1, keepdims=True), x64.var(1, keepdims=True)
    xhat = (x64 - mu) / np.sqrt(var + 1e-5)
    np.testing.assert_allclose(got[1], (h64 * xhat).sum(0), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got[2], h64.sum(0), rtol=1e-4, atol=1e-3)


# -- ROW loops: a joined lanes reduction in the loop of the stage it reduces ------------------

R, C = 64, 256  # rows of 256: long enough for lanes


def _unfolded(monkeypatch: pytest.MonkeyPatch, outs: list, ins: list):
    with monkeypatch.context() as m:
        m.delitem(fuse.NESTED, "row")
        k = ta.build(outs, ins)
    assert "row(" not in str(k.plan)
    return k


def test_softmax_row_sum_folds_into_the_exp_loop(monkeypatch):
    x = te.placeholder((R, C), "float32", name="x")
    y = ew.softmax(x, -1)
    k = ta.build([y], [x])
    (prange,) = k.plan.nest
    folded = [k.plan.stage(n.body[1].name) for n in prange.body if getattr(n, "kind", "") == "row"]
    assert [s.name for s in folded] == ["softmax_expsum"], str(k.plan)
    exp = k.plan.stage("softmax_exp")
    assert folded[0].bodies[0].axis[0] is exp.order[1]  # reduces over exp's own loop axis
    assert "row(256): a reduction of this row folds each element" in str(k.plan), str(k.plan)
    lines = k.source.splitlines()
    store = next(n for n, ln in enumerate(lines) if ln.strip().startswith("softmax_exp[i1] ="))
    assert "radd(softmax_expsum_acc, softmax_exp[i1])" in lines[store + 1], k.source
    xs = rng().standard_normal((R, C)).astype(np.float32) * 4
    (got,) = k(xs)
    # the row sums (positive terms) regroup: softmax = e * (1 / s) differs by the sums'
    # relative difference, plus the reciprocal's and the product's roundings in each kernel
    assert_regrouped(got, _unfolded(monkeypatch, [y], [x])(xs)[0], C + 2, got)
    e = np.exp(xs.astype(np.float64) - xs.max(1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-7)


def test_a_max_of_an_elementwise_stage_folds_and_is_exact(monkeypatch):
    x = te.placeholder((R, C), "float32", name="x")
    k_ = te.reduce_axis((0, C), name="k")
    e = te.compute((R, C), lambda i, j: te.tanh(x[i, j]) * 3, name="e")
    m = te.compute((R,), lambda i: te.max(e[i, k_], axis=k_), name="m")
    y = te.compute((R, C), lambda i, j: e[i, j] - m[i], name="y")
    k = ta.build([y, m], [x])
    assert k.plan.loop_of("m").kind == "row", str(k.plan)
    xs = rng().standard_normal((R, C)).astype(np.float32)
    xs[3, 7] = np.nan  # max propagates NaN, folded or not
    got, ref = k(xs), _unfolded(monkeypatch, [y, m], [x])(xs)
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_array_equal(a, b)
    assert np.isnan(got[1][3]) and not np.isnan(got[1][4])


@pytest.mark.parametrize("read", ["shifted", "reversed", "shorter"])
def test_a_reduction_not_over_the_stored_element_keeps_its_loop(read):
    x = te.placeholder((R, C), "float32", name="x")
    e = te.compute((R, C), lambda i, j: te.exp(x[i, j]), name="e")
    n = C - 1 if read != "reversed" else C
    k_ = te.reduce_axis((0, n), name="k")
    at = {"shifted": lambda i: e[i, k_ + 1], "reversed": lambda i: e[i, C - 1 - k_],
          "shorter": lambda i: e[i, k_]}[read]
    s = te.compute((R,), lambda i: te.sum(at(i), axis=k_), name="s")
    y = te.compute((R, C), lambda i, j: e[i, j] / s[i], name="y")
    plan = plan_kernel([y], [x])
    assert plan.joined("s") and plan.stage("s").cpu.lanes > 1, str(plan)
    assert plan.loop_of("s").kind == "prange", str(plan)


def test_a_scalar_sum_rides_in_the_column_sums_loops(monkeypatch):
    """A scalar (stepped-lanes) split sum right before column sums over the same rows and
    columns folds in their loops (fuse._rider_map), moved after the first: plain
    ew_chain's forward, whose sum and saved dw/db sums share tanh and exp.  The column sums are
    bit-identical to the kernel without the step (same terms, same order); the scalar sum's
    float32 chains are its 256-term rows, in lanes that each kernel's loop groups its own way
    (the rows add in float64: a long sum, plan.wide_sum)."""
    x = te.placeholder((N, 256), "float32", name="x")
    w = te.placeholder((256,), "float32", name="w")
    i, j = te.reduce_axis((0, N), name="i"), te.reduce_axis((0, 256), name="j")
    i2, i3 = te.reduce_axis((0, N), name="i"), te.reduce_axis((0, N), name="i")
    total = te.compute((), lambda: te.sum(te.tanh(x[i, j] * w[j]), axis=[i, j]), name="total")
    dw = te.compute((256,), lambda c: te.sum(te.tanh(x[i2, c] * w[c]) * x[i2, c], axis=i2), name="dw")
    db = te.compute((256,), lambda c: te.sum(te.tanh(x[i3, c] * w[c]), axis=i3), name="db")
    k = ta.build([total, dw, db], [x, w])
    names = [s.name for s in k.plan.stages]
    assert names.index("dw") < names.index("total") < names.index("db"), str(k.plan)
    assert all(k.plan.joined(n) for n in ("total", "db")), str(k.plan)
    assert k.plan.loop_of("total").kind == "stepped" and k.plan.loop_of("db").kind == "chunks"
    assert "stepped(256): a scalar sum" in str(k.plan), str(k.plan)
    assert "ew_chain" not in k.source and k.source.count("prange(16)") == 1, k.source
    r = rng()
    xs, ws = r.standard_normal((N, 256)).astype("float32"), r.standard_normal(256).astype("float32")
    got = k(xs, ws)
    ref = _unshared(monkeypatch, [total, dw, db], [x, w])(xs, ws)
    t = np.tanh(xs.astype(np.float64) * ws)
    assert_regrouped(got[0], ref[0], 256, np.abs(t).sum() * 1.001)  # 1.001: tanh_f32's 4 ulp
    for a, b in zip(got[1:], ref[1:]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(got[0], t.sum(), rtol=1e-4)
    np.testing.assert_allclose(got[1], (t * xs).sum(0), rtol=1e-4, atol=1e-3)


def _group_stats(n: int = 4, c: int = 32, hw: int = 32):
    """Per-(sample, group) sums of x*g and of g, and per-channel ones: what a group-norm's
    gradient reduces, written as four independent reductions."""
    x = te.placeholder((n, c, hw, hw), "float32", name="x")
    g = te.placeholder((n, c, hw, hw), "float32", name="g")
    groups, cg = 4, c // 4
    r1 = [te.reduce_axis((0, e), name=s) for e, s in ((cg, "rc"), (hw, "rh"), (hw, "rw"))]
    r2 = [te.reduce_axis((0, e), name=s) for e, s in ((cg, "sc"), (hw, "sh"), (hw, "sw"))]
    sxg = te.compute((n, groups), lambda b, q: te.sum(
        x[b, q * cg + r1[0], r1[1], r1[2]] * g[b, q * cg + r1[0], r1[1], r1[2]], axis=r1), name="sxg")
    sg = te.compute((n, groups), lambda b, q: te.sum(g[b, q * cg + r2[0], r2[1], r2[2]], axis=r2),
                    name="sg")
    k1 = [te.reduce_axis((0, e), name=s) for e, s in ((n, "b1"), (hw, "i1"), (hw, "j1"))]
    k2 = [te.reduce_axis((0, e), name=s) for e, s in ((n, "b2"), (hw, "i2"), (hw, "j2"))]
    dgamma = te.compute((c,), lambda f: te.sum(x[k1[0], f, k1[1], k1[2]] * g[k1[0], f, k1[1], k1[2]],
                                                axis=k1), name="dgamma")
    dbeta = te.compute((c,), lambda f: te.sum(g[k2[0], f, k2[1], k2[2]], axis=k2), name="dbeta")
    return [sxg, sg, dgamma, dbeta], [x, g]


def test_sibling_reductions_fold_in_one_loop_nest(monkeypatch):
    outs, ins = _group_stats()
    k = ta.build(outs, ins)
    sib = [n for top in k.plan.nest if hasattr(top, "body") for n in top.body
           if getattr(n, "kind", "") == "siblings"]
    assert [[r.name for r in n.body] for n in sib] == [["sxg", "sg"], ["dgamma", "dbeta"]], str(k.plan)
    assert "reductions over the same loops that do not read each other" in str(k.plan)
    lines = k.source.splitlines()
    step = next(i for i, ln in enumerate(lines) if "radd(sxg_" in ln and ("x[" in ln or "x_flat[" in ln))
    assert "radd(sg_" in lines[step + 1], k.source  # both step in the same innermost loop
    with monkeypatch.context() as m:  # the same kernel without the rule: separate loops
        m.delitem(fuse.NESTED, "siblings")
        k0 = ta.build(outs, ins)
    assert "siblings(" not in str(k0.plan)
    r = rng()
    x, g = (r.standard_normal((4, 32, 32, 32)).astype(np.float32) for _ in range(2))
    got, want = k(x, g), k0(x, g)
    for a, b in zip(got, want, strict=True):  # same terms in the same order: bit-identical
        np.testing.assert_array_equal(a, b)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    ref = [(x64 * g64).reshape(4, 4, -1).sum(-1), g64.reshape(4, 4, -1).sum(-1),
           (x64 * g64).sum((0, 2, 3)), g64.sum((0, 2, 3))]
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


def test_a_reduction_reading_its_sibling_keeps_its_own_loops():
    x = te.placeholder((8, 512), "float32", name="x")
    ka, kb = te.reduce_axis((0, 512), name="ka"), te.reduce_axis((0, 512), name="kb")
    s = te.compute((8,), lambda i: te.sum(x[i, ka], axis=ka), name="s")
    d = te.compute((8,), lambda i: te.sum(x[i, kb] * s[i], axis=kb), name="d")
    k = ta.build([s, d], [x])
    assert "siblings(" not in str(k.plan), str(k.plan)
    xs = rng().standard_normal((8, 512)).astype(np.float32)
    got_s, got_d = k(xs)
    x64 = xs.astype(np.float64)
    np.testing.assert_allclose(got_d, x64.sum(1) * x64.sum(1), rtol=1e-4)
