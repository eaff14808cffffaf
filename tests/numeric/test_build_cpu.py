"""Built Numba CPU kernels against the reference evaluator `te.evaluate` (and NumPy).

Every construct of the IR appears in some kernel below.  Kernels are built once
per module (compilation dominates the run time), so several constructs share a
kernel as separate outputs.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest

from texpr_ad import te
from texpr_ad.kernels import KernelArgumentError, build, cache
from texpr_ad.schedule import ScheduleError
from texpr_ad.te.expr import IterVar, const
from texpr_ad.te.tensor import ScatterOp, Tensor

SEED = 20240611


def rng(extra: int = 0) -> np.random.Generator:
    print(f"seed = {SEED + extra}")
    return np.random.default_rng(SEED + extra)


def check(kernel, outputs, feed, rtol=1e-5, atol=1e-5, var_values=None):
    got = kernel(*[feed[t] for t in kernel.inputs])
    want = te.evaluate(outputs, feed, var_values)
    assert len(got) == len(want)
    for t, g, w in zip(outputs, got, want, strict=True):
        assert g.shape == w.shape, t.name
        assert g.dtype == np.dtype(t.dtype), t.name
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=t.name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=t.name)
    return got


# -- matmul + epilogue, symbolic batch dim, inlining --------------------------------------

@pytest.fixture(scope="module")
def mlp():
    n = te.var("n")
    A = te.placeholder((n, 48), "float32", name="A")
    W = te.placeholder((48, 40), "float32", name="W")
    b = te.placeholder((40,), "float32", name="b")
    k = te.reduce_axis((0, 48), name="k")
    Y = te.compute((n, 40), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="Y")
    Yb = te.compute((n, 40), lambda i, j: Y[i, j] + b[j], name="Yb")          # inlined into Z
    Z = te.compute((n, 40), lambda i, j: te.max(Yb[i, j], te.const(0.0, "float32")), name="Z")
    return build([Z], [A, W, b]), (A, W, b, Z)


@pytest.mark.parametrize("rows", [3, 70])
def test_matmul_relu_symbolic_dim(mlp, rows):
    kern, (A, W, b, Z) = mlp
    r = rng(rows)
    a = r.standard_normal((rows, 48), dtype=np.float32)
    w = r.standard_normal((48, 40), dtype=np.float32)
    bb = r.standard_normal(40, dtype=np.float32)
    (z,) = check(kern, [Z], {A: a, W: w, b: bb}, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(z, np.maximum(a.astype(np.float64) @ w + bb, 0), rtol=1e-4, atol=1e-4)
    assert [s.name for s in kern.plan.stages] == ["Y", "Z"]
    assert [i.stage for i in kern.plan.inlined] == ["Yb"]


# -- conv2d with padding guards, stride 2 ------------------------------------------------------

def test_conv2d_padding_guards():
    N, C, H, Wd, F, K, P, S = 2, 3, 9, 8, 4, 3, 1, 2
    X = te.placeholder((N, C, H, Wd), "float64", name="X")
    Wt = te.placeholder((F, C, K, K), "float64", name="Wt")
    Ho, Wo = (H + 2 * P - K) // S + 1, (Wd + 2 * P - K) // S + 1
    c = te.reduce_axis((0, C), name="c")
    ry = te.reduce_axis((0, K), name="ry")
    rx = te.reduce_axis((0, K), name="rx")

    def body(n, f, y, x):
        iy, ix = y * S + ry - P, x * S + rx - P
        inside = te.all(iy >= 0, iy < H, ix >= 0, ix < Wd)
        return te.sum(te.if_then_else(inside, X[n, c, iy, ix], 0.0) * Wt[f, c, ry, rx],
                      axis=[c, ry, rx])

    Y = te.compute((N, F, Ho, Wo), body, name="conv")
    kern = build([Y], [X, Wt])
    r = rng(1)
    feed = {X: r.standard_normal((N, C, H, Wd)), Wt: r.standard_normal((F, C, K, K))}
    (y,) = check(kern, [Y], feed, rtol=1e-12, atol=1e-12)
    # independent NumPy reference
    xp = np.pad(feed[X], ((0, 0), (0, 0), (P, P), (P, P)))
    ref = np.zeros_like(y)
    for yy in range(Ho):
        for xx in range(Wo):
            win = xp[:, :, yy * S:yy * S + K, xx * S:xx * S + K]
            ref[:, :, yy, xx] = np.einsum("nckl,fckl->nf", win, feed[Wt])
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
    assert kern.plan.stages[0].parallel


# -- softmax: nested reductions split into stages ---------------------------------------------

def test_softmax_nested_reductions():
    n = te.var("n")
    X = te.placeholder((n, 33), "float32", name="X")
    k1 = te.reduce_axis((0, 33), name="k1")
    k2 = te.reduce_axis((0, 33), name="k2")
    Y = te.compute((n, 33), lambda i, j: te.exp(X[i, j] - te.max(X[i, k1], axis=k1)) / te.sum(
        te.exp(X[i, k2] - te.max(X[i, k1], axis=k1)), axis=k2), name="softmax")
    kern = build([Y], [X])
    for rows in (1, 40):
        x = rng(rows).standard_normal((rows, 33), dtype=np.float32) * 3
        (y,) = check(kern, [Y], {X: x}, rtol=1e-5, atol=1e-6)
        e = np.exp(x - x.max(1, keepdims=True))
        np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


# -- argmax tuple reducer, where=, init=, prod/min, zero-dim output ---------------------------

@pytest.fixture(scope="module")
def reductions():
    M, K = 20, 37
    X = te.placeholder((M, K), "float32", name="X")
    s = te.placeholder((), "float32", name="s")          # zero-dim input
    b = te.placeholder((M,), "float32", name="b")

    def fcomb(x, y):
        keep = x[1] >= y[1]  # ties keep the first index (the fold runs in axis order)
        return te.if_then_else(keep, x[0], y[0]), te.if_then_else(keep, x[1], y[1])

    def fid(t0, t1):
        return te.const(-1, t0), te.min_value(t1)

    argmax = te.comm_reducer(fcomb, fid, name="argmax")
    k = te.reduce_axis((0, K), name="k")
    idx, val = te.compute((M,), lambda i: argmax((k.astype("int32"), X[i, k]), axis=k), name="am")
    k2 = te.reduce_axis((0, K), name="k2")
    pos = te.compute((M,), lambda i: te.sum(X[i, k2], axis=k2, where=X[i, k2] > 0, init=b[i]),
                     name="possum")
    k3 = te.reduce_axis((0, 5), name="k3")
    pr = te.compute((M,), lambda i: te.prod(X[i, k3] + 1.5, axis=k3), name="prod")
    k4 = te.reduce_axis((0, K), name="k4")
    mn = te.compute((M,), lambda i: te.min(X[i, k4], axis=k4, where=k4 % 3 == 0) * s[()],
                    name="minw")
    i5 = te.reduce_axis((0, M), name="i5")
    k5 = te.reduce_axis((0, K), name="k5")
    tot = te.compute((), lambda: te.sum(X[i5, k5] * X[i5, k5], axis=[i5, k5]), name="total")
    outs = [idx, val, pos, pr, mn, tot]
    return build(outs, [X, s, b]), outs, (X, s, b)


def test_reductions(reductions):
    kern, outs, (X, s, b) = reductions
    r = rng(2)
    x = r.standard_normal((20, 37)).astype(np.float32)
    x[3, 5] = x[3, 9] = 10.0  # a tie: argmax keeps the first
    feed = {X: x, s: np.array(2.0, np.float32), b: r.standard_normal(20).astype(np.float32)}
    idx, val, pos, pr, mn, tot = check(kern, outs, feed, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(idx, x.argmax(1))
    assert idx[3] == 5
    np.testing.assert_allclose(val, x.max(1))
    np.testing.assert_allclose(pos, np.where(x > 0, x, 0).sum(1) + feed[b], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pr, np.prod(x[:, :5] + 1.5, axis=1), rtol=1e-5)
    np.testing.assert_allclose(mn, x[:, ::3].min(1) * 2)
    assert tot.shape == () and tot.dtype == np.float32
    np.testing.assert_allclose(tot, (x.astype(np.float64) ** 2).sum(), rtol=1e-5)


def test_argmax_index_only():
    """Only one output of a tuple reduction is read: the other value still folds, unstored."""
    X = te.placeholder((6, 9), "float64", name="X")

    def fcomb(x, y):
        keep = x[1] >= y[1]
        return te.if_then_else(keep, x[0], y[0]), te.if_then_else(keep, x[1], y[1])

    argmax = te.comm_reducer(fcomb, lambda t0, t1: (te.const(-1, t0), te.min_value(t1)))
    k = te.reduce_axis((0, 9), name="k")
    idx, _ = te.compute((6,), lambda i: argmax((k.astype("int32"), X[i, k]), axis=k), name="am")
    plus = te.compute((6,), lambda i: idx[i] + 1, name="plus")
    kern = build([plus], [X])
    x = rng(3).standard_normal((6, 9))
    (p,) = check(kern, [plus], {X: x})
    np.testing.assert_array_equal(p, x.argmax(1) + 1)


# -- elementwise: every op, casts, int semantics, lazy select, multi-output ---------------------

@pytest.fixture(scope="module")
def elementwise():
    F = te.placeholder((64,), "float32", name="F")
    G = te.placeholder((64,), "float64", name="G")
    I = te.placeholder((64,), "int32", name="I")  # noqa: E741
    J = te.placeholder((64,), "int32", name="J")  # nonzero divisors, both signs
    n = 64
    f_ops = te.compute((n,), lambda i: [
        te.erf(F[i]), te.sigmoid(F[i]), te.rsqrt(te.abs(F[i]) + 0.5), te.log1p(te.abs(F[i])),
        te.atan(F[i]), te.tanh(F[i]), te.sin(F[i]) + te.cos(F[i]), te.exp(F[i]),
        te.log(te.abs(F[i]) + 1.0), te.sqrt(te.abs(F[i])), te.floor(F[i]), te.ceil(F[i]),
        te.trunc(F[i]), te.round(F[i]), te.sign(F[i]), te.abs(F[i]), -F[i],
        te.power(te.abs(F[i]), 1.5), F[i] / (te.abs(F[i]) + 1.0),
        te.floordiv(F[i], 0.75), te.floormod(F[i], 0.75), te.max(F[i], 0.25), te.min(F[i], 0.25),
    ], name="fops")
    i_ops = te.compute((n,), lambda i: [
        te.floordiv(I[i], J[i]), te.floormod(I[i], J[i]), I[i] / J[i], te.floordiv(I[i], 4),
        te.floormod(I[i], -3), I[i] << 2, te.right_shift(I[i], 1), te.abs(I[i]), te.sign(I[i]),
        I[i] * J[i] - 7, te.max(I[i], J[i]), te.min(I[i], J[i]), te.power(J[i], 2),
    ], name="iops")
    c_ops = te.compute((n,), lambda i: [
        F[i].astype("int32"), G[i].astype("int64"), F[i].astype("float64"), I[i].astype("float32"),
        (F[i] > 0).astype("float32"), I[i].astype("bool"), I[i].astype("int8"),
        G[i].astype("float32"), te.if_then_else(te.all(F[i] > -0.5, I[i] != 3), F[i], G[i].astype("float32")),
        te.if_then_else(te.any(F[i] < -1.0, ~(I[i] <= 2)), 1, 0), (I[i] == J[i]) | (I[i] >= 10),
    ], name="cops")
    # lazy select: the guarded read J[i - 1] is out of bounds at i == 0
    lazy = te.compute((n,), lambda i: te.if_then_else(i > 0, J[te.max(i, 1) - 1] + J[i - 1], -1),
                      name="lazy")
    outs = [*f_ops, *i_ops, *c_ops, lazy]
    return build(outs, [F, G, I, J]), outs, (F, G, I, J)


def test_elementwise_ops(elementwise):
    kern, outs, (F, G, I, J) = elementwise
    r = rng(4)
    f = (r.standard_normal(64) * 3).astype(np.float32)
    f[:8] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.0, -3.0]  # round half to even
    j = r.integers(1, 9, 64).astype(np.int32) * r.choice([-1, 1], 64).astype(np.int32)
    feed = {F: f, G: (r.standard_normal(64) * 100).astype(np.float64),
            I: r.integers(-50, 50, 64).astype(np.int32), J: j}
    got = check(kern, outs, feed, rtol=2e-6, atol=2e-6)
    names = [t.name for t in outs]
    rnd = got[names.index("fops_v13")]
    np.testing.assert_array_equal(rnd[:8], [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 0.0, -3.0])
    # Python floor semantics on ints, independently of te.evaluate
    i, jj = feed[I].astype(np.int64), j.astype(np.int64)
    np.testing.assert_array_equal(got[names.index("iops")], [a // c for a, c in zip(i, jj)])
    np.testing.assert_array_equal(got[names.index("iops_v1")], [a % c for a, c in zip(i, jj)])
    np.testing.assert_array_equal(got[names.index("cops")], np.trunc(f).astype(np.int32))
    assert got[names.index("lazy")][0] == -1


# -- gathers with data-dependent indices, bounds checked ----------------------------------------

@pytest.fixture(scope="module")
def gather():
    E = te.placeholder((10, 16), "float32", name="E")
    ids = te.placeholder((30,), "int32", name="ids")
    Y = te.compute((30, 16), lambda i, d: E[ids[i], d] * 2.0, name="take")
    return build([Y], [E, ids]), (E, ids, Y)


def test_gather(gather):
    kern, (E, ids, Y) = gather
    r = rng(5)
    e = r.standard_normal((10, 16)).astype(np.float32)
    ii = r.integers(0, 10, 30).astype(np.int32)
    (y,) = check(kern, [Y], {E: e, ids: ii})
    np.testing.assert_allclose(y, e[ii] * 2)


def test_gather_out_of_bounds_raises(gather):
    kern, (E, ids, Y) = gather
    ii = np.zeros(30, np.int32)
    ii[7] = 10
    with pytest.raises(IndexError, match="take"):
        kern(np.zeros((10, 16), np.float32), ii)
    ii[7] = -1
    with pytest.raises(IndexError, match="computed from tensor values"):
        kern(np.zeros((10, 16), np.float32), ii)


# -- hand-built scatter-add stages -----------------------------------------------------------------

def _scatter(name, shape, dtype, axes, index, value, cond=None):
    op = ScatterOp(name, tuple(const(s) for s in shape), dtype, tuple(axes), tuple(index), value,
                   const(True) if cond is None else cond)
    return Tensor(op, 0, op.shape, dtype)


@pytest.fixture(scope="module")
def scatters():
    ids = te.placeholder((50,), "int32", name="ids")
    g = te.placeholder((50, 8), "float64", name="g")
    t = IterVar("t", const(0), const(50), "data")
    d = IterVar("d", const(0), const(8), "data")
    # embedding backward: dim 1 of the index is exactly axis d -> parallel over d
    emb = _scatter("emb_grad", (12, 8), "float64", (t, d), (ids[t], d), g[t, d])
    t2 = IterVar("t2", const(0), const(50), "data")
    d2 = IterVar("d2", const(0), const(8), "data")
    # histogram of ids where g > 0: every dim is data dependent -> serial
    hist = _scatter("hist", (12,), "float64", (t2, d2), (ids[t2],), g[t2, d2] * 0.5,
                    g[t2, d2] > 0)
    return build([emb, hist], [ids, g]), (ids, g, emb, hist)


def test_scatter(scatters):
    kern, (ids, g, emb, hist) = scatters
    r = rng(6)
    feed = {ids: r.integers(0, 12, 50).astype(np.int32), g: r.standard_normal((50, 8))}
    e, h = check(kern, [emb, hist], feed, rtol=1e-12, atol=1e-12)
    ref = np.zeros((12, 8))
    np.add.at(ref, feed[ids], feed[g])
    np.testing.assert_allclose(e, ref, rtol=1e-12, atol=1e-12)
    s_emb, s_hist = kern.plan.stages
    assert s_emb.parallel_axis is not None and s_emb.parallel_axis.name == "d"
    assert s_emb.parallel_dim == 1
    assert s_hist.parallel_axis is None
    bad = feed[ids].copy()
    bad[3] = 12
    with pytest.raises(IndexError, match="out of bounds"):
        kern(bad, feed[g])


# -- reduction bounds that depend on the data axes (as the differentiator emits) ----------------

def test_data_dependent_reduce_bounds():
    N, K = 30, 4
    X = te.placeholder((N,), "float32", name="X")
    Wt = te.placeholder((K,), "float32", name="Wt")

    # the adjoint of a 1-d valid correlation y[i] = sum_r x[i + r] w[r], written as a gather:
    # dx[j] = sum_{t = max(0, j-K+1)}^{min(j, N-K)} dy[t] * w[j - t]
    def body(j):
        lo = te.max(j - (K - 1), 0)
        hi = te.min(j, N - K) + 1
        t = IterVar("t", lo, hi - lo, "reduce")
        return te.sum(X[t] * Wt[j - t], axis=t)

    Y = te.compute((N,), body, name="dx")
    kern = build([Y], [X, Wt])
    r = rng(7)
    dy = np.zeros(N, np.float32)
    dy[: N - K + 1] = r.standard_normal(N - K + 1)
    w = r.standard_normal(K).astype(np.float32)
    (dx,) = check(kern, [Y], {X: dy, Wt: w})
    ref = np.zeros(N)
    for i in range(N - K + 1):
        ref[i:i + K] += dy[i] * w
    np.testing.assert_allclose(dx, ref, rtol=1e-5, atol=1e-5)
    assert "depend on the enclosing axes" in str(kern.plan)


# -- plans can be overridden; the result is unchanged ------------------------------------------

def test_override_serial_and_order():
    A = te.placeholder((6, 7, 8), "float32", name="A")
    Y = te.compute((6, 7, 8), lambda a, b, c: A[a, b, c] * 2.0 + 1.0, name="Y")
    kern = build([Y], [A], plan_overrides={"Y": {"parallel": True, "order": ["b", "a", "c"],
                                                 "fuse": 3}})
    st = kern.plan.stages[0]
    assert [a.name for a in st.order] == ["b", "a", "c"] and st.fused == 3
    x = rng(8).standard_normal((6, 7, 8)).astype(np.float32)
    check(kern, [Y], {A: x})
    with pytest.raises(ScheduleError, match="permutation"):
        build([Y], [A], plan_overrides={"Y": {"order": ["a", "c"]}})


# -- outputs that are inputs or listed twice, empty and zero-dim arrays ---------------------------

def test_identity_duplicate_and_empty_outputs():
    n = te.var("n")
    A = te.placeholder((n, 4), "float32", name="A")
    s = te.placeholder((), "float64", name="s")
    Y = te.compute((n, 4), lambda i, j: A[i, j] + s[()].astype("float32"), name="Y")
    kern = build([A, Y, Y, s], [A, s])
    for rows in (0, 5):
        a = rng(rows).standard_normal((rows, 4)).astype(np.float32)
        a_out, y1, y2, s_out = check(kern, [A, Y, Y, s], {A: a, s: np.array(2.0)})
        assert a_out is not a and s_out.shape == ()
        y1[...] = 7  # outputs never alias each other
        np.testing.assert_allclose(y2, a + 2)


# -- on-disk cache ------------------------------------------------------------------------------

def test_disk_cache_warm_start(tmp_path, monkeypatch):
    """A fresh module object (as in a second process) loads machine code from the cache."""
    monkeypatch.setenv("TEXPR_CACHE_DIR", str(tmp_path))
    A = te.placeholder((5,), "float64", name="A")
    Y = te.compute((5,), lambda i: A[i] * 3.0 + 0.5, name="cached")
    k1 = build([Y], [A])
    x = np.arange(5.0)
    np.testing.assert_allclose(k1(x)[0], x * 3 + 0.5)
    files = sorted(p.name for p in tmp_path.rglob("*"))
    assert any(f.endswith(".py") and f.startswith("texpr_") for f in files)
    assert any(f.endswith(".nbi") for f in files), files
    assert "def texpr_kernel(A):" in inspect.getsource(k1._fn.py_func)  # tracebacks show it
    cache._MODULES.clear()  # forget the in-process module
    k2 = build([Y], [A])
    assert k2.source == k1.source
    np.testing.assert_allclose(k2(x)[0], x * 3 + 0.5)
    assert sum(k2._fn.stats.cache_hits.values()) == 1


# -- errors ---------------------------------------------------------------------------------------

def test_wrong_arguments(mlp):
    kern, (A, W, b, Z) = mlp
    a, w, bb = np.zeros((4, 48), np.float32), np.zeros((48, 40), np.float32), np.zeros(40, np.float32)
    with pytest.raises(KernelArgumentError, match=r"'A' must have dtype float32, got float64"):
        kern(a.astype(np.float64), w, bb)
    with pytest.raises(KernelArgumentError, match=r"'W' must have shape \(48, 40\), got \(40, 48\)"):
        kern(a, w.T.copy(), bb)
    with pytest.raises(KernelArgumentError, match=r"'A' must have 2 dims"):
        kern(a[0], w, bb)
    with pytest.raises(KernelArgumentError, match=r"expects 3 arrays \(A, W, b\), got 2"):
        kern(a, w)


def test_symbolic_dim_mismatch():
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.placeholder((n,), "float32", name="B")
    Y = te.compute((n,), lambda i: A[i] + B[i], name="Y")
    kern = build([Y], [A, B])
    with pytest.raises(KernelArgumentError, match=r"'B' must have shape \(n,\) = \(3,\) \(with n=3\)"):
        kern(np.zeros(3, np.float32), np.zeros(4, np.float32))


def test_build_errors():
    A = te.placeholder((4,), "float32", name="A")
    B = te.placeholder((4,), "float32", name="B")
    Y = te.compute((4,), lambda i: A[i] + B[i], name="Y")
    with pytest.raises(ScheduleError, match=r"\['B'\].*not listed in inputs"):
        build([Y], [A])
    with pytest.raises(ScheduleError, match="'Y' is not a placeholder"):
        build([Y], [A, B, Y])
    with pytest.raises(ValueError, match="unknown target 'tpu'"):
        build([Y], [A, B], target="tpu")
    with pytest.raises(ScheduleError, match="stage 'Q'"):
        build([Y], [A, B], plan_overrides={"Q": {"parallel": False}})
    m = te.var("m")
    C = te.placeholder((4,), "float32", name="C")
    Z = te.compute((m,), lambda i: C[0] * 1.0, name="Z")
    with pytest.raises(ScheduleError, match=r"symbolic dim\(s\) \['m'\]"):
        build([Z], [C])
    T = te.compute((4,), lambda i: A[i] * 2.0, name="T")
    U = te.compute((4,), lambda i: T[i] + T[3 - i], name="U")
    with pytest.raises(ScheduleError, match="cannot inline stage 'T': it is read 2 times"):
        build([U], [A], plan_overrides={"T": {"inline": True}})
