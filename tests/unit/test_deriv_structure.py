"""Structure of derived adjoints: gathers where index maps invert, scatters only for data-dependent
reads, work of the same order as the forward, conventions at ties and zeros, errors."""
import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.te.tensor import ComputeOp, ScatterOp


def _stages(t):
    return [s for s in te.topo_order([t]) if not isinstance(s.op, te.PlaceholderOp)]


def _has_scatter(ts):
    return any(isinstance(s.op, ScatterOp) for t in ts for s in te.topo_order([t]))


def _conv(stride=1, pad=0, dil=1, n=9, k=3):
    X = te.placeholder((2, 3, n, n), "float64", name="X")
    W = te.placeholder((4, 3, k, k), "float64", name="W")
    P = te.compute((2, 3, n + 2 * pad, n + 2 * pad), lambda b, c, h, w: te.if_then_else(
        te.all(h >= pad, h < n + pad, w >= pad, w < n + pad), X[b, c, h - pad, w - pad], 0.0), name="P")
    o = (n + 2 * pad - dil * (k - 1) - 1) // stride + 1
    rc, rh, rw = (te.reduce_axis((0, e), name=nm) for e, nm in ((3, "rc"), (k, "rh"), (k, "rw")))
    Y = te.compute((2, 4, o, o), lambda b, f, y, x: te.sum(
        P[b, rc, y * stride + rh * dil, x * stride + rw * dil] * W[f, rc, rh, rw], axis=[rc, rh, rw]), name="Y")
    return X, W, Y


def test_dense_adjoint_is_one_contraction():
    A = te.placeholder((8, 16), "float32", name="A")
    W = te.placeholder((16, 4), "float32", name="W")
    k = te.reduce_axis((0, 16), name="k")
    Y = te.compute((8, 4), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="Y")
    dY = te.placeholder(Y.shape, "float32", name="dY")
    dA, dW = ta.grad(Y, [A, W], head=dY)
    assert str(dA).splitlines()[-1] == 'dA = compute((8, 16), lambda i, k: sum(dY[i, j] * W[k, j], axis=j), name="dA")'
    assert str(dW).splitlines()[-1] == 'dW = compute((16, 4), lambda k, j: sum(dY[i, j] * A[i, k], axis=i), name="dW")'
    assert len(_stages(dA)) == 1 and len(_stages(dW)) == 1


@pytest.mark.parametrize("stride,pad,dil", [(1, 1, 1), (2, 1, 1), (1, 0, 2), (3, 2, 1)])
def test_conv_adjoints_are_gathers_of_forward_order_work(stride, pad, dil):
    X, W, Y = _conv(stride, pad, dil)
    dY = te.placeholder(Y.shape, "float64", name="dY")
    dX, dW = ta.grad(Y, [X, W], head=dY)
    assert not _has_scatter([dX, dW])
    fwd = ta.work([Y])
    # strided taps are parametrized (about K/s per dim), so dX costs about the forward
    assert ta.work([dX]) <= 2.5 * fwd, (ta.work([dX]), fwd)
    assert ta.work([dW]) <= 1.5 * fwd
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((2, 3, 9, 9)), rng.standard_normal((4, 3, 3, 3))
    g = rng.standard_normal(tuple(int(s.value) for s in Y.shape))
    gx, gw = te.evaluate([dX, dW], {X: x, W: w, dY: g})
    import torch
    tx = torch.tensor(x, requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=pad, dilation=dil)
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_two_reads_of_one_tensor_are_two_gathers_not_a_jacobian():
    A = te.placeholder((32, 32), "float64", name="A")
    B = te.compute((32, 32), lambda i, j: A[i, j] + A[j, i], name="B")
    dB = te.placeholder(B.shape, "float64", name="dB")
    (dA,) = ta.grad(B, [A], head=dB)
    assert not _has_scatter([dA])
    assert ta.work([dA]) <= 2 * ta.work([B])
    g = np.random.default_rng(0).standard_normal((32, 32))
    np.testing.assert_allclose(te.evaluate([dA], {A: g, dB: g})[0], g + g.T)


def test_take_becomes_a_marked_scatter():
    T = te.placeholder((10, 4), "float64", name="T")
    idx = te.placeholder((6,), "int32", name="idx")
    Y = te.compute((6, 4), lambda i, d: T[idx[i], d], name="Y")
    dY = te.placeholder(Y.shape, "float64", name="dY")
    dT, didx = ta.grad(Y, [T, idx], head=dY)
    assert didx is None
    assert isinstance(dT.op, ScatterOp)
    ix = np.array([1, 3, 1, 9, 0, 1], "int32")
    g = np.random.default_rng(1).standard_normal((6, 4))
    want = np.zeros((10, 4))
    np.add.at(want, ix, g)
    np.testing.assert_allclose(te.evaluate([dT], {T: np.zeros((10, 4)), idx: ix, dY: g})[0], want)


def test_max_ties_split_evenly_and_prod_with_zeros():
    X = te.placeholder((2, 3), "float64", name="X")
    r = te.reduce_axis((0, 3), name="r")
    M = te.compute((2,), lambda i: te.max(X[i, r], axis=r), name="M")
    P = te.compute((2,), lambda i: te.prod(X[i, r], axis=r), name="P")
    h = te.placeholder((2,), "float64", name="h")
    (dM,) = ta.grad(M, [X], head=h)
    (dP,) = ta.grad(P, [X], head=h)
    x = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 5.0]])
    np.testing.assert_allclose(te.evaluate([dM], {X: x, h: np.ones(2)})[0], [[0, 0.5, 0.5], [0, 0, 1]])
    np.testing.assert_allclose(te.evaluate([dP], {X: x, h: np.ones(2)})[0], [[9, 3, 3], [0, 10, 0]])
    x2 = np.array([[0.0, 0.0, 2.0], [1.0, 2.0, 4.0]])
    np.testing.assert_allclose(te.evaluate([dP], {X: x2, h: np.ones(2)})[0], [[0, 0, 0], [8, 4, 2]])


def _prod_hessian(x: np.ndarray, init: float | None) -> np.ndarray:
    """d2/dxa dxb of init * prod(x): the product of the other factors, 0 on the diagonal."""
    f = list(x) + ([init] if init is not None else [])
    return np.array([[0.0 if a == b else np.prod([f[c] for c in range(len(f)) if c not in (a, b)])
                      for b in range(len(x))] for a in range(len(x))])


@pytest.mark.parametrize("init", [None, 3.0, 0.0])
def test_prod_second_derivative_with_zero_factors(init):
    """A Hessian-vector product through prod where factors are zero: the first-order rule
    branched on the zero count, right at the point but constant around it, so the second
    derivative lost the cross terms ([2, 0, 5, 7] gave 0 for d2/dx0 dx1 instead of 35)."""
    X = te.placeholder((4,), "float64", name="X")
    k = te.reduce_axis((0, 4), name="k")
    Y = te.compute((), lambda: te.prod(X[k], axis=k, init=init), name="Y")
    h, v = te.placeholder((), "float64", name="h"), te.placeholder((4,), "float64", name="v")
    (dX,) = ta.grad(Y, [X], head=h)
    (hv,) = ta.grad(dX, [X], head=v)
    kern = ta.build([hv], [X, h, v])
    vv = np.array([1.0, -2.0, 0.5, 3.0])
    for x in ([2.0, 3.0, 5.0, 7.0], [2.0, 0.0, 5.0, 7.0], [0.0, 0.0, 5.0, 7.0], [0.0, 0.0, 0.0, 7.0]):
        x = np.array(x)
        want = _prod_hessian(x, init) @ vv
        feed = {X: x, h: np.array(1.0), v: vv}
        np.testing.assert_allclose(te.evaluate([hv], feed)[0], want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(kern(x, np.array(1.0), vv)[0], want, rtol=1e-12, atol=1e-12)


def test_max_pool_backward_costs_like_forward():
    X = te.placeholder((2, 3, 16, 16), "float64", name="X")
    ry, rx = te.reduce_axis((0, 2), name="ry"), te.reduce_axis((0, 2), name="rx")
    Y = te.compute((2, 3, 8, 8), lambda n, c, h, w: te.max(X[n, c, 2 * h + ry, 2 * w + rx], axis=[ry, rx]), name="Y")
    dY = te.placeholder(Y.shape, "float64", name="dY")
    (dX,) = ta.grad(Y, [X], head=dY)
    assert not _has_scatter([dX])
    assert ta.work([dX]) <= 3 * ta.work([Y])


def test_jacobian_jvp_and_hessian_vector_product():
    A = te.placeholder((4,), "float64", name="A")
    k = te.reduce_axis((0, 4), name="k")
    Y = te.compute((3,), lambda i: te.sum(te.tanh(A[k] * (i + 1.0)), axis=k), name="Y")
    (J,) = ta.grad(Y, [A])
    a = np.random.default_rng(5).standard_normal(4)
    jac = te.evaluate([J], {A: a})[0]
    want = np.array([(i + 1) * (1 - np.tanh(a * (i + 1)) ** 2) for i in range(3)])
    np.testing.assert_allclose(jac, want, rtol=1e-12)
    T = te.placeholder((4,), "float64", name="T")
    (dY,) = ta.jvp(Y, [A], [T])
    t = np.arange(4.0)
    np.testing.assert_allclose(te.evaluate([dY], {A: a, T: t})[0], want @ t, rtol=1e-12)
    L = te.compute((), lambda: te.sum(te.exp(A[k]) * A[k], axis=k), name="L")
    h = te.placeholder((), "float64", name="h")
    (dA,) = ta.grad(L, [A], head=h)
    v = te.placeholder((4,), "float64", name="v")
    (hv,) = ta.grad(dA, [A], head=v)
    vv = np.ones(4)
    np.testing.assert_allclose(te.evaluate([hv], {A: a, h: np.array(1.0), v: vv})[0], np.exp(a) * (a + 2), rtol=1e-12)


def test_errors_name_the_tensor_and_fix():
    A = te.placeholder((3, 4), "float64", name="A")
    Y = te.compute((3,), lambda i: A[i, 0] * 2.0, name="Y")
    with pytest.raises(ta.GradientError, match="head 'bad'.*shape"):
        ta.grad(Y, [A], head=te.placeholder((4,), "float64", name="bad"))
    I = te.compute((3,), lambda i: A[i, 0].astype("int32"), name="I")
    with pytest.raises(ta.GradientError, match="'I'.*int32"):
        ta.grad(I, [A], head=te.placeholder((3,), "int32", name="h"))
    B = te.placeholder((2,), "float64", name="B")
    dA, dB = ta.grad(Y, [A, B], head=te.placeholder((3,), "float64", name="h"))
    assert isinstance(dB.op, ComputeOp) and dB.op.attrs.get("zero")


def test_custom_reducers_that_are_builtin_kinds_differentiate():
    X = te.placeholder((3, 5), "float64", name="X")

    def fcombine(x, y):
        return te.select(x[1] >= y[1], x[0], y[0]), te.select(x[1] >= y[1], x[1], y[1])

    argmax = te.comm_reducer(fcombine, lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
    mysum = te.comm_reducer(lambda x, y: x + y, lambda t: te.const(0, t), name="mysum")
    r = te.reduce_axis((0, 5), "r")
    idx, val = te.compute((3,), lambda i: argmax((r, X[i, r]), axis=r), name="am")
    S = te.compute((3,), lambda i: mysum(X[i, r] * X[i, r], axis=r), name="S")
    h = te.placeholder((3,), "float64", name="h")
    x = np.random.default_rng(2).standard_normal((3, 5))
    (dval,) = ta.grad(val, [X], head=h)
    want = np.zeros((3, 5))
    want[np.arange(3), x.argmax(1)] = 1.0
    np.testing.assert_allclose(te.evaluate([dval], {X: x, h: np.ones(3)})[0], want)
    (dS,) = ta.grad(S, [X], head=h)
    np.testing.assert_allclose(te.evaluate([dS], {X: x, h: np.ones(3)})[0], 2 * x)
    lse = te.comm_reducer(lambda x, y: te.log(te.exp(x) + te.exp(y)), lambda t: te.min_value(t), name="lse")
    L = te.compute((3,), lambda i: lse(X[i, r], axis=r), name="L")
    with pytest.raises(ta.NotDifferentiableError, match="'lse'"):
        ta.grad(L, [X], head=h)


def test_invariant_factors_leave_sums_and_equal_sums_are_shared():
    x = te.placeholder((4, 3, 5), "float64", name="x")
    g = te.placeholder((3,), "float64", name="g")
    b = te.placeholder((3,), "float64", name="b")
    m = te.placeholder((3,), "float64", name="m")
    y = te.compute((4, 3, 5), lambda n, c, w: (x[n, c, w] - m[c]) * g[c] + b[c], name="y")
    h = te.placeholder(y.shape, "float64", name="h")
    dx, dg, db, dm = ta.grad(y, [x, g, b, m], head=h)
    # dm = sum_{n,w} -h * g[c] = -g[c] * sum h: the sum is db itself, not a second reduction
    assert any(s is db for s in te.topo_order([dm]))
    reductions = {id(s.op) for t in (dx, dg, db, dm) for s in te.topo_order([t])
                  if isinstance(s.op, ComputeOp) and isinstance(s.op.body[0], te.Reduce)}
    assert len(reductions) == 2  # sum h and sum h * (x - m)
    assert ta.work([dx, dg, db, dm]) <= 3.5 * ta.work([y])
    rng = np.random.default_rng(0)
    xs, gs, bs, ms, hs = (rng.standard_normal(s) for s in ((4, 3, 5), (3,), (3,), (3,), (4, 3, 5)))
    env = {x: xs, g: gs, b: bs, m: ms, h: hs}
    got = te.evaluate([dx, dg, db, dm], env)
    want = [hs * gs[None, :, None], (hs * (xs - ms[None, :, None])).sum((0, 2)), hs.sum((0, 2)),
            -gs * hs.sum((0, 2))]
    for a, w in zip(got, want):
        np.testing.assert_allclose(a, w, rtol=1e-12, atol=1e-12)


def test_cse_keeps_outputs_and_merges_only_equal_stages():
    a = te.placeholder((6, 4), "float64", name="a")
    k = te.reduce_axis((0, 4), name="k")
    s1 = te.compute((6,), lambda i: te.sum(a[i, k], axis=k), name="s1")
    k2 = te.reduce_axis((0, 4), name="kk")
    s2 = te.compute((6,), lambda j: te.sum(a[j, k2], axis=k2), name="s2")  # s1 under other names
    k3 = te.reduce_axis((0, 4), name="k")
    s3 = te.compute((6,), lambda i: te.sum(a[i, k3] * 2.0, axis=k3), name="s3")  # different
    out = te.compute((6,), lambda i: s2[i] + s3[i], name="out")
    new_out, new_s1 = te.dag.cse([out, s1])
    assert new_s1 is s1
    names = [t.name for t in te.topo_order([new_out]) if not isinstance(t.op, te.PlaceholderOp)]
    assert "s2" not in names and "s1" in names and "s3" in names
    av = np.arange(24.0).reshape(6, 4)
    np.testing.assert_allclose(te.evaluate([new_out], {a: av})[0], av.sum(1) * 3)
