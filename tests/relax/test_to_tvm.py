"""Forward translation texpr_ad te -> tvm.te, compiled with tvm.compile(target="llvm").

References: the NumPy reference evaluator `te.evaluate` (independent of the
bridge) and, for several cases, NumPy written out by hand.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("tvm")

from texpr_ad import te  # noqa: E402
from texpr_ad.relax_bridge.to_tvm import build  # noqa: E402
from texpr_ad.te.expr import Const, IterVar  # noqa: E402
from texpr_ad.te.tensor import ScatterOp, Tensor  # noqa: E402

SEED = 20240611
print("seed", SEED)
RNG = np.random.default_rng(SEED)


def rand(*shape: int, dtype: str = "float32", lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(dtype)


def check(outs: list[Tensor], ins: list[Tensor], arrays: list[np.ndarray], rtol: float = 1e-5,
          atol: float = 1e-6) -> list[np.ndarray]:
    got = build(outs, ins)(*arrays)
    want = te.evaluate(outs, dict(zip(ins, arrays, strict=True)))
    for g, w, t in zip(got, want, outs, strict=True):
        assert g.dtype == np.dtype(t.dtype), (t.name, g.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=t.name)
    return got


def test_matmul() -> None:
    A = te.placeholder((4, 5), "float32", name="A")
    W = te.placeholder((5, 3), "float32", name="W")
    k = te.reduce_axis((0, 5), name="k")
    Y = te.compute((4, 3), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="Y")
    a, w = rand(4, 5), rand(5, 3)
    (y,) = check([Y], [A, W], [a, w])
    np.testing.assert_allclose(y, a @ w, rtol=1e-5, atol=1e-6)


def test_conv2d_with_padding_guards() -> None:
    n, c, h, w, o, kh, pad = 1, 2, 5, 5, 3, 3, 1
    X = te.placeholder((n, c, h, w), "float32", name="X")
    K = te.placeholder((o, c, kh, kh), "float32", name="K")
    P = te.compute((n, c, h + 2 * pad, w + 2 * pad), lambda b, ci, y, x: te.if_then_else(
        te.all(y >= pad, y < h + pad, x >= pad, x < w + pad), X[b, ci, y - pad, x - pad], 0.0),
        name="P")
    rc = te.reduce_axis((0, c), "rc")
    ry = te.reduce_axis((0, kh), "ry")
    rx = te.reduce_axis((0, kh), "rx")
    Y = te.compute((n, o, h, w), lambda b, f, y, x: te.sum(
        P[b, rc, y + ry, x + rx] * K[f, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
    xa, ka = rand(n, c, h, w), rand(o, c, kh, kh)
    (y,) = check([Y], [X, K], [xa, ka])
    xp = np.pad(xa, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((n, o, h, w), "float32")
    for i in range(h):
        for j in range(w):
            ref[:, :, i, j] = np.einsum("bcyx,fcyx->bf", xp[:, :, i:i + 3, j:j + 3], ka)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_conv_guard_inline_is_lazy() -> None:
    """The guard sits inside the reduction: out-of-bounds reads must never execute."""
    X = te.placeholder((6,), "float32", name="X")
    r = te.reduce_axis((0, 3), "r")
    Y = te.compute((6,), lambda i: te.sum(te.if_then_else(
        te.all(i + r - 1 >= 0, i + r - 1 < 6), X[i + r - 1], 0.0), axis=r), name="Y")
    x = rand(6)
    (y,) = check([Y], [X], [x])
    np.testing.assert_allclose(y, np.convolve(x, np.ones(3), "same"), rtol=1e-5, atol=1e-6)


def test_softmax_nested_reductions() -> None:
    X = te.placeholder((3, 7), "float32", name="X")
    k = te.reduce_axis((0, 7), "k")
    m = te.reduce_axis((0, 7), "m")
    Y = te.compute((3, 7), lambda i, j: te.exp(X[i, j] - te.max(X[i, k], axis=k)) / te.sum(
        te.exp(X[i, m] - te.max(X[i, k], axis=k)), axis=m), name="softmax")
    x = rand(3, 7, lo=-3, hi=3)
    (y,) = check([Y], [X], [x])
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def _argmax() -> te.Reducer:
    def fcombine(x, y):  # (index, value); ties go to the smaller index
        take_x = te.any(x[1] > y[1], te.all(x[1] == y[1], x[0] < y[0]))
        return te.if_then_else(take_x, x[0], y[0]), te.if_then_else(take_x, x[1], y[1])

    return te.comm_reducer(fcombine, lambda t0, t1: (te.const(-1, t0), te.min_value(t1)),
                           name="argmax")


def test_argmax_tuple_reducer() -> None:
    X = te.placeholder((4, 6), "float32", name="X")
    k = te.reduce_axis((0, 6), "k")
    idx, val = te.compute((4,), lambda i: _argmax()((k, X[i, k]), axis=k), name="am")
    x = rand(4, 6)
    x[2, 4] = x[2, 1] = 5.0  # a tie
    got = check([idx, val], [X], [x])
    np.testing.assert_array_equal(got[0], x.argmax(1))
    np.testing.assert_array_equal(got[1], x.max(1))


def test_where_cumsum_through_compile() -> None:
    """TVM 0.27's create_prim_func drops where=; the bridge must keep it."""
    X = te.placeholder((8,), "float32", name="X")
    k = te.reduce_axis((0, 8), "k")
    C = te.compute((8,), lambda i: te.sum(X[k], axis=k, where=k <= i), name="cumsum")
    x = rand(8)
    (c,) = check([C], [X], [x])
    np.testing.assert_allclose(c, np.cumsum(x), rtol=1e-5, atol=1e-6)


def test_where_with_max_min_prod_and_init() -> None:
    X = te.placeholder((3, 6), "float32", name="X")
    k = te.reduce_axis((0, 6), "k")
    Mx = te.compute((3, 6), lambda i, j: te.max(X[i, k], axis=k, where=k <= j), name="cummax")
    Mn = te.compute((3, 6), lambda i, j: te.min(X[i, k], axis=k, where=k >= j), name="revmin")
    Pr = te.compute((3, 6), lambda i, j: te.prod(X[i, k], axis=k, where=k < j, init=2.0),
                    name="cumprod")
    x = rand(3, 6, lo=0.5, hi=1.5)
    mx, mn, pr = check([Mx, Mn, Pr], [X], [x])
    np.testing.assert_allclose(mx, np.maximum.accumulate(x, 1), rtol=1e-6)
    np.testing.assert_allclose(mn, np.minimum.accumulate(x[:, ::-1], 1)[:, ::-1], rtol=1e-6)
    ref = 2 * np.concatenate([np.ones((3, 1)), np.cumprod(x, 1)[:, :-1]], 1)
    np.testing.assert_allclose(pr, ref, rtol=1e-5)


def test_dependent_reduce_domain() -> None:
    """Reduce axes whose lo/extent depend on data axes and on an earlier reduce axis."""
    X = te.placeholder((7,), "float32", name="X")

    def window(i):
        r = te.reduce_axis((i, te.min(i + 3, 7)), "r")
        return te.sum(X[r], axis=r)

    W = te.compute((7,), window, name="window")
    k1 = te.reduce_axis((0, 7), "k1")
    k2 = te.reduce_axis((0, k1 + 1), "k2")
    T = te.compute((), lambda: te.sum(X[k2], axis=[k1, k2]), name="tri")
    x = rand(7)
    w, t = check([W, T], [X], [x])
    np.testing.assert_allclose(w, [x[i:i + 3].sum() for i in range(7)], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t, np.cumsum(x).sum(), rtol=1e-5)


def test_symbolic_dim_one_build_two_sizes() -> None:
    n = te.var("n")
    A = te.placeholder((n, 4), "float32", name="A")
    W = te.placeholder((4, 3), "float32", name="W")
    k = te.reduce_axis((0, 4), "k")
    Y = te.compute((n, 3), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="Y")
    Z = te.compute((n * 2,), lambda i: A[i // 2, i % 2] + 1.0, name="Z")
    f = build([Y, Z], [A, W])
    for rows in (2, 5):
        a, w = rand(rows, 4), rand(4, 3)
        y, z = f(a, w)
        np.testing.assert_allclose(y, a @ w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(z, a[:, :2].reshape(-1) + 1, rtol=1e-6)


def test_int_ops_casts_logic() -> None:
    I = te.placeholder((9,), "int32", name="I")
    F = te.placeholder((9,), "float32", name="F")
    outs = [
        te.compute((9,), lambda i: te.floordiv(I[i], 3), name="fdiv"),
        te.compute((9,), lambda i: te.floormod(I[i], 4), name="fmod"),
        te.compute((9,), lambda i: te.floordiv(I[i], -2) + te.floormod(I[i], -3), name="negdiv"),
        te.compute((9,), lambda i: I[i] / 2, name="intdiv"),
        te.compute((9,), lambda i: (te.abs(I[i]) << 2) + (te.abs(I[i]) >> 1), name="shifts"),
        te.compute((9,), lambda i: te.if_then_else((I[i] > 0) & ~(I[i] == 2) | (I[i] < -3),
                                                    I[i] * I[i], -I[i]), name="logic"),
        te.compute((9,), lambda i: (I[i] != 1).astype("int32") + (I[i] <= 0).astype("int32")
                   + (I[i] >= 3).astype("int32"), name="cmp"),
        te.compute((9,), lambda i: F[i].astype("int32"), name="f2i"),
        te.compute((9,), lambda i: I[i].astype("float64") * 0.5, name="i2f"),
        te.compute((9,), lambda i: te.max(I[i], 1) - te.min(I[i], -1) + te.sign(I[i]), name="mm"),
        te.compute((9,), lambda i: I[i].astype("int64") * 3_000_000_000, name="i64"),
        te.compute((9,), lambda i: te.power(te.abs(I[i]), 2), name="ipow"),
        te.compute((9,), lambda i: te.floordiv(F[i], 0.75) + te.floormod(F[i], 0.75), name="ffdiv"),
    ]
    iv = np.arange(-4, 5).astype("int32")
    fv = np.linspace(-2.6, 2.6, 9).astype("float32")
    got = check(outs, [I, F], [iv, fv])
    np.testing.assert_array_equal(got[0], iv // 3)
    np.testing.assert_array_equal(got[1], iv % 4)
    np.testing.assert_array_equal(got[2], iv // -2 + iv % -3)
    np.testing.assert_array_equal(got[7], np.trunc(fv).astype("int32"))


def test_intrinsics() -> None:
    X = te.placeholder((11,), "float32", name="X")
    fns = {
        "exp": (te.exp, np.exp), "log": (lambda x: te.log(te.abs(x) + 0.1), lambda x: np.log(np.abs(x) + 0.1)),
        "log1p": (lambda x: te.log1p(te.abs(x)), lambda x: np.log1p(np.abs(x))),
        "sqrt": (lambda x: te.sqrt(te.abs(x)), lambda x: np.sqrt(np.abs(x))),
        "rsqrt": (lambda x: te.rsqrt(te.abs(x) + 0.5), lambda x: 1 / np.sqrt(np.abs(x) + 0.5)),
        "tanh": (te.tanh, np.tanh), "sigmoid": (te.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
        "erf": (te.erf, np.vectorize(math.erf)), "sin": (te.sin, np.sin), "cos": (te.cos, np.cos),
        "atan": (te.atan, np.arctan), "abs": (te.abs, np.abs), "floor": (te.floor, np.floor),
        "ceil": (te.ceil, np.ceil), "trunc": (te.trunc, np.trunc), "round": (te.round, np.round),
        "sign": (te.sign, np.sign), "pow": (lambda x: te.power(te.abs(x), 1.5),
                                           lambda x: np.abs(x) ** 1.5),
        "neg": (lambda x: -x, np.negative),
    }
    def stage(f, name):
        return te.compute((11,), lambda i: f(X[i]), name=name)

    outs = [stage(f, n) for n, (f, _) in fns.items()]
    x = np.array([-2.5, -1.5, -0.5, -0.3, 0.0, 0.3, 0.5, 1.5, 2.5, 1.2, -1.7], "float32")
    got = check(outs, [X], [x], rtol=2e-6, atol=2e-6)
    for g, (name, (_, ref)) in zip(got, fns.items(), strict=True):
        np.testing.assert_allclose(g, ref(x.astype("float64")), rtol=1e-5, atol=1e-6, err_msg=name)


def test_custom_reducer_and_multi_output() -> None:
    X = te.placeholder((3, 5), "float32", name="X")
    logsumexp = te.comm_reducer(lambda a, b: te.max(a, b) + te.log1p(te.exp(-te.abs(a - b))),
                                lambda t: te.min_value(t), name="lse")
    k = te.reduce_axis((0, 5), "k")
    L = te.compute((3,), lambda i: logsumexp(X[i, k], axis=k), name="lse")
    A, B = te.compute((3, 5), lambda i, j: [X[i, j] * 2.0, X[i, j] - 1.0], name="two")
    j2 = te.reduce_axis((0, 5), "j2")
    k3 = te.reduce_axis((0, 5), "k3")
    S, M = te.compute((3,), lambda i: [te.sum(A[i, j2], axis=j2), te.max(B[i, k3], axis=k3)],
                      name="sm")
    x = rand(3, 5)
    lse, s, m = check([L, S, M], [X], [x])
    np.testing.assert_allclose(lse, np.log(np.exp(x).sum(1)), rtol=1e-5)
    np.testing.assert_allclose(s, 2 * x.sum(1), rtol=1e-5)
    np.testing.assert_allclose(m, x.max(1) - 1, rtol=1e-6)


def test_zero_dim_and_scalar_reads() -> None:
    X = te.placeholder((4,), "float32", name="X")
    k = te.reduce_axis((0, 4), "k")
    S = te.compute((), lambda: te.sum(X[k] * X[k], axis=k), name="S")
    Y = te.compute((4,), lambda i: X[i] / te.sqrt(S[()]), name="Y")
    x = rand(4)
    s, y = check([S, Y], [X], [x])
    np.testing.assert_allclose(y, x / np.linalg.norm(x), rtol=1e-5)


def _scatter_add(values: Tensor, index: Tensor, rows: int) -> Tensor:
    """out[index[i], d] += values[i, d] where index[i] >= 0 (a hand-built ScatterOp)."""
    n, d = (int(s.value) for s in values.shape)  # type: ignore[attr-defined]
    i = IterVar("i", Const(0, "int32"), Const(n, "int32"), "data")
    j = IterVar("j", Const(0, "int32"), Const(d, "int32"), "data")
    shape = (Const(rows, "int32"), Const(d, "int32"))
    op = ScatterOp("scatter", shape, "float32", (i, j), (index[i], j), values[i, j] * 2.0,
                   index[i] >= 0)
    return Tensor(op, 0, shape, "float32")


def test_scatter_op_through_extern() -> None:
    V = te.placeholder((6, 3), "float32", name="V")
    I = te.placeholder((6,), "int32", name="I")
    S = _scatter_add(V, I, 4)
    Y = te.compute((4, 3), lambda r, c: S[r, c] + 1.0, name="Y")  # a consumer after the extern
    v = rand(6, 3)
    idx = np.array([0, 3, 0, -1, 2, 0], "int32")  # duplicates and one masked entry
    s, y = check([S, Y], [V, I], [v, idx])
    ref = np.zeros((4, 3), "float32")
    for r, t in enumerate(idx):
        if t >= 0:
            ref[t] += 2 * v[r]
    np.testing.assert_allclose(s, ref, rtol=1e-6)
    np.testing.assert_allclose(y, ref + 1, rtol=1e-6)
