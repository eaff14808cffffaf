"""schedule/contraction.py: the normal form of a stage `O[data] = sum_red a * b` on hand-written
stages.  Each expected role is read off the math: an output axis both factors read is BATCH, one
only `a` reads M, one only `b` reads N, a reduction axis both read K, anything else OTHER."""
from __future__ import annotations

import math

import numpy as np

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops import nn
from texpr_ad.schedule.contraction import Role, SumOfProduct, normal_form
from texpr_ad.schedule.planner import plan_stages
from texpr_ad.te.expr import Read
from texpr_ad.te.visit import walk

B, M, N, K = Role.BATCH, Role.M, Role.N, Role.K
PLAIN, AFFINE, OTHER = "plain", "affine", "other"


def form(y, *inputs) -> SumOfProduct | None:
    """The normal form of the stage computing `y` (planned from `inputs`)."""
    return normal_form(plan_stages([y], list(inputs)).stage(y.op.name))


def roles(f: SumOfProduct) -> dict[str, Role]:
    return {x.name: f.role(x) for x in (*f.data, *f.red)}


def kinds(f: SumOfProduct, side: str) -> list[str]:
    return [PLAIN if ix.plain is not None else OTHER if ix.affine is None else AFFINE
            for ix in getattr(f, side).index]


def oriented(f: SumOfProduct, a) -> SumOfProduct:
    """`f` with the factor reading tensor `a` first (a derived adjoint's order is not ours)."""
    return f if f.a.read.tensor is a else f.swapped()


def test_matmul():
    a = te.placeholder((16, 32), "float32", name="A")
    b = te.placeholder((32, 8), "float32", name="B")
    k = te.reduce_axis((0, 32), name="k")
    y = te.compute((16, 8), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="Y")
    f = form(y, a, b)
    assert roles(f) == {"i": M, "j": N, "k": K}
    assert kinds(f, "a") == kinds(f, "b") == [PLAIN, PLAIN]
    assert f.a.plain and f.b.plain and f.a.closed and f.b.closed
    assert f.simple  # no init, no condition
    assert [f.extent(x) for x in (*f.data, *f.red)] == [16, 8, 32]
    assert f.work == 16 * 8 * 32
    sw = f.swapped()  # B @ A: the roles of i and j trade places, k stays
    assert roles(sw) == {"i": N, "j": M, "k": K} and sw.a.read.tensor is b


def test_batch_matmul():
    a = te.placeholder((4, 16, 32), "float32", name="A")
    b = te.placeholder((4, 32, 8), "float32", name="B")
    k = te.reduce_axis((0, 32), name="k")
    y = te.compute((4, 16, 8), lambda q, i, j: te.sum(a[q, i, k] * b[q, k, j], axis=k), name="Y")
    f = form(y, a, b)
    assert roles(f) == {"q": B, "i": M, "j": N, "k": K}
    assert [x.name for x in f.axes(B)] == ["q"] and [x.name for x in f.axes(M, N)] == ["i", "j"]
    assert f.leading(B) == [f.data[0]] and f.leading(M) == []


def test_dense_adjoints():
    """Y[i, o] = sum_k X[i, k] W[o, k]: dX[i, k] = sum_o dY[i, o] W[o, k] and
    dW[o, k] = sum_i dY[i, o] X[i, k], each a plain product of the head with one input."""
    x = te.placeholder((16, 32), "float32", name="X")
    w = te.placeholder((8, 32), "float32", name="W")
    y = nn.dense(x, w)
    dy = te.placeholder(y.shape, "float32", name="dY")
    dx, dw = ta.grad(y, [x, w], head=dy)
    fx = oriented(form(dx, x, w, dy), dy)
    (i, k), (o,) = fx.data, fx.red
    assert (fx.role(i), fx.role(k), fx.role(o)) == (M, N, K)  # i: dY only, k: W only, o: both
    assert fx.b.read.tensor is w and fx.a.plain and fx.b.plain
    fw = oriented(form(dw, x, w, dy), dy)
    (o, k), (i,) = fw.data, fw.red
    assert (fw.role(o), fw.role(k), fw.role(i)) == (M, N, K)  # o: dY only, k: X only, i: both
    assert fw.b.read.tensor is x


def test_convolution_reads_a_window():
    """Y[n, f, y, x] = sum_{c, ry, rx} W[f, c, ry, rx] * X[n, c, y + ry, x + rx]: f is W's own
    axis (M); n, y and x are X's (N), y and x inside windows y + ry and x + rx (affine)."""
    xs = te.placeholder((2, 3, 10, 12), "float32", name="X")
    ws = te.placeholder((4, 3, 3, 3), "float32", name="W")
    c, ry, rx = (te.reduce_axis((0, e), name=s) for e, s in ((3, "c"), (3, "ry"), (3, "rx")))
    y = te.compute((2, 4, 8, 10), lambda n, f, y, x: te.sum(
        ws[f, c, ry, rx] * xs[n, c, y + ry, x + rx], axis=[c, ry, rx]), name="Y")
    fm = form(y, xs, ws)
    assert roles(fm) == {"n": N, "f": M, "y": N, "x": N, "c": K, "ry": K, "rx": K}
    assert kinds(fm, "a") == [PLAIN] * 4 and kinds(fm, "b") == [PLAIN, PLAIN, AFFINE, AFFINE]
    assert fm.a.plain and not fm.b.plain and fm.b.closed
    n, _, yy, _ = fm.data
    terms, const = fm.b.index[2].affine
    assert terms == {yy: 1, fm.red[1]: 1} and const == 0
    assert fm.leading(N) == [n]  # the images lead the output


def test_padding_guard_and_padding_stage():
    """A guard `if_then_else(inside, X[..], 0)` stays on the operand; a padding stage read
    through is folded into the operand an im2col gathers, which then reads X itself."""
    xs = te.placeholder((2, 3, 10, 10), "float32", name="X")
    ws = te.placeholder((4, 3, 3, 3), "float32", name="W")
    c, ry, rx = (te.reduce_axis((0, e), name=s) for e, s in ((3, "c"), (3, "ry"), (3, "rx")))

    def body(n, f, y, x):
        yy, xx = y + ry - 1, x + rx - 1
        inside = te.all(yy >= 0, yy < 10, xx >= 0, xx < 10)
        return te.sum(ws[f, c, ry, rx] * te.if_then_else(inside, xs[n, c, yy, xx], 0.0),
                      axis=[c, ry, rx])

    g = form(te.compute((2, 4, 10, 10), body, name="Y"), xs, ws)
    assert g.b.g.cond is not None and g.b.read.tensor is xs and not g.b.plain
    assert roles(g)["y"] is N and roles(g)["f"] is M
    y = nn.conv2d(xs, ws, stride=1, padding=1)
    f = form(y, xs, ws)
    f = f if f.a.plain else f.swapped()
    assert f.b.read.tensor is not xs  # as written: a read of the padding stage
    gathered = f.gathered()
    assert gathered.b.read.tensor is xs and gathered.b.g.folded and gathered.b.g.cond is not None
    assert roles(gathered) == roles(f)


def test_non_contractions_have_no_form():
    a = te.placeholder((8, 16), "float32", name="A")
    b = te.placeholder((16,), "float32", name="B")
    ai = te.placeholder((8, 16), "int32", name="I")
    k = te.reduce_axis((0, 16), name="k")
    cases = [
        te.compute((8,), lambda i: te.sum(a[i, k], axis=k), name="Y"),  # no product
        te.compute((8,), lambda i: te.sum(a[i, k] * b[k] + b[k], axis=k), name="Y"),  # two terms
        te.compute((8,), lambda i: te.max(a[i, k] * b[k], axis=k), name="Y"),  # not a sum
        te.compute((8,), lambda i: te.sum(te.exp(a[i, k]) * b[k], axis=k), name="Y"),  # not a read
        te.compute((8,), lambda i: te.sum(ai[i, k] * ai[i, k], axis=k), name="Y"),  # integers
        te.compute((8, 16), lambda i, j: a[i, j] * b[j], name="Y"),  # no sum at all
    ]
    for y in cases:
        read = {r.tensor for r in walk(y.op.body[0]) if isinstance(r, Read)}
        assert form(y, *[t for t in (a, b, ai) if t in read]) is None, y


def test_axes_not_read_by_both_factors_are_other():
    """Y[i, j] = sum_k A[i, k] * B[i]: i is read by both (BATCH), k by A alone (a sum of A,
    not a contraction axis: OTHER), j by neither (a broadcast: OTHER)."""
    a = te.placeholder((8, 16), "float32", name="A")
    b = te.placeholder((8,), "float32", name="B")
    k = te.reduce_axis((0, 16), name="k")
    y = te.compute((8, 4), lambda i, j: te.sum(a[i, k] * b[i], axis=k), name="Y")
    assert roles(form(y, a, b)) == {"i": B, "j": Role.OTHER, "k": Role.OTHER}


def test_index_kinds_and_condition():
    """`A[i // 2, k]` is not affine (OTHER); `B[k, k]` reads one axis twice (not plain); a
    slice `C[k, j]` over 8 of C's 16 rows is affine but not plain; `where=` is the condition."""
    a = te.placeholder((4, 8), "float32", name="A")
    b = te.placeholder((8, 8), "float32", name="B")
    cc = te.placeholder((16, 6), "float32", name="C")
    k = te.reduce_axis((0, 8), name="k")
    y = te.compute((8,), lambda i: te.sum(a[i // 2, k] * b[k, k], axis=k, where=k < i), name="Y")
    f = form(y, a, b)
    assert kinds(f, "a") == [OTHER, PLAIN] and kinds(f, "b") == [PLAIN, PLAIN]
    assert not f.a.plain and not f.b.plain  # b: the same axis twice
    assert not f.simple and roles(f) == {"i": M, "k": K}
    z = te.compute((4, 6), lambda i, j: te.sum(a[i, k] * cc[k, j], axis=k), name="Z")
    assert kinds(form(z, a, cc), "b") == [AFFINE, PLAIN]


def test_gather_index_is_not_closed():
    """`E[idx[i], k]`: an index read from a tensor (an embedding) is OTHER, and the operand is
    not closed over the stage's axes."""
    e = te.placeholder((32, 16), "float32", name="E")
    idx = te.placeholder((8,), "int32", name="idx")
    w = te.placeholder((16, 4), "float32", name="Wt")
    k = te.reduce_axis((0, 16), name="k")
    y = te.compute((8, 4), lambda i, j: te.sum(e[idx[i], k] * w[k, j], axis=k), name="Y")
    f = form(y, e, idx, w)
    assert kinds(f, "a") == [OTHER, PLAIN] and not f.a.closed and f.b.closed
    assert roles(f) == {"i": M, "j": N, "k": K}  # i is read (through idx) by E alone


def test_symbolic_extents():
    """Y[i, j] = sum_k A[i, k] W[k, j] with i over a symbolic n: the roles of matmul, the
    extent of i unknown (None), the work infinite; k and j keep their static extents."""
    n = te.var("n")
    a = te.placeholder((n, 64), "float32", name="A")
    w = te.placeholder((64, 32), "float32", name="W")
    k = te.reduce_axis((0, 64), name="k")
    y = te.compute((n, 32), lambda i, j: te.sum(a[i, k] * w[k, j], axis=k), name="Y")
    f = form(y, a, w)
    assert roles(f) == {"i": M, "j": N, "k": K} and f.a.plain and f.b.plain
    i, j = f.data
    assert (f.extent(i), f.extent(j), f.extent(f.red[0])) == (None, 32, 64)
    assert math.isinf(f.work) and f.per_entry([i]) == 32 * 64  # per row of A: static


def test_symbolic_matmul_gradients_run_as_blas():
    """A dense layer over a batch known only at the call: both gradients are matrix products
    (the reduction over the batch has the differentiator's extent max(n, 0), which covers the
    dim), so they go to BLAS instead of loops (100x slower on a 1024-row batch)."""
    n = te.var("n")
    x, w = te.placeholder((n, 64), "float32", name="x"), te.placeholder((64, 32), "float32", name="w")
    k = te.reduce_axis((0, 64), "k")
    y = te.compute((n, 32), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="y")
    h = te.placeholder((n, 32), "float32", name="head")
    dx, dw = ta.grad(y, [x, w], head=h)
    kern = ta.build([dx, dw], [x, w, h])
    assert all(kern.plan.stage(t.op.name).cpu.contraction is not None for t in (dx, dw)), str(kern.plan)
    r = np.random.default_rng(2)
    for rows in (3, 200):  # one kernel, two batch sizes
        xs, ws, hs = (r.standard_normal(s).astype("f4") for s in ((rows, 64), (64, 32), (rows, 32)))
        gx, gw = kern(xs, ws, hs)
        np.testing.assert_allclose(gx, hs.astype(np.float64) @ ws.T, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(gw, xs.T.astype(np.float64) @ hs, rtol=1e-5, atol=1e-4)
