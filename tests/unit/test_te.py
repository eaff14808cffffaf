"""The IR: construction, printing (re-evaluable), equality semantics, evaluator, errors."""
import numpy as np
import pytest

from texpr_ad import te


def test_matmul_print_and_eval():
    n = te.var("n")
    A = te.placeholder((n, 4), "float64", name="A")
    W = te.placeholder((4, 3), "float64", name="W")
    k = te.reduce_axis((0, 4), name="k")
    Y = te.compute((n, 3), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="Y")
    assert str(Y).splitlines()[-1] == 'Y = compute((n, 3), lambda i, j: sum(A[i, k] * W[k, j], axis=k), name="Y")'
    rng = np.random.default_rng(0)
    for rows in (2, 7):
        a, w = rng.standard_normal((rows, 4)), rng.standard_normal((4, 3))
        np.testing.assert_allclose(te.evaluate([Y], {A: a, W: w})[0], a @ w, rtol=1e-12)


def test_printed_body_reevaluates_to_equal_expression():
    X = te.placeholder((3, 5), "float64", name="X")
    k = te.reduce_axis((0, 5), name="k")
    body = lambda i: te.sum(te.exp(X[i, k] - 1.5) * te.if_then_else((k >= 1) & (k < 4), 2.0, X[i, k] ** 2.0), axis=k)  # noqa: E731
    Y = te.compute((3,), body, name="Y")
    ns = {n: getattr(te, n) for n in te.__all__}
    ns.update(X=X, k=k, i=Y.op.axis[0])
    again = eval(te.expr_str(Y.op.body[0]), ns)
    assert again.same_as(Y.op.body[0])
    assert hash(again) == hash(Y.op.body[0])


def test_equality_is_structural_for_dicts_and_ir_in_bodies():
    i = te.reduce_axis((0, 4), name="i")
    j = te.reduce_axis((0, 4), name="i")  # same name, different axis
    assert (i + 1) == (i + 1)
    assert not ((i + 1) == (j + 1))
    assert {i + 1: "x"}[i + 1] == "x"
    c = te.if_then_else(i == 0, 1.0, 2.0)
    assert "i == 0" in str(c)


def test_bool_of_expression_is_a_clear_error():
    X = te.placeholder((4,), name="X")
    with pytest.raises(TypeError, match="if_then_else"):
        te.compute((4,), lambda i: X[i] if X[i] > 0 else 0.0)


def test_padding_guard_is_lazy_and_bounds_are_checked():
    X = te.placeholder((4,), "float64", name="X")
    P = te.compute((6,), lambda i: te.if_then_else(te.all(i >= 1, i < 5), X[i - 1], 0.0), name="P")
    x = np.arange(4.0)
    np.testing.assert_array_equal(te.evaluate([P], {X: x})[0], [0, 0, 1, 2, 3, 0])
    with pytest.raises(te.TensorError, match="'X'"):  # X[-1] at i == 0: rejected at definition
        te.compute((6,), lambda i: X[i - 1], name="bad")
    with pytest.raises(te.TensorError, match="out of bounds"):
        te.compute((2,), lambda i: X[i + 9])


def test_nested_reduction_split_and_shared():
    X = te.placeholder((3, 5), "float64", name="X")
    m = te.reduce_axis((0, 5), "m")
    s = te.reduce_axis((0, 5), "s")
    S = te.compute((3, 5), lambda i, j: te.exp(X[i, j] - te.max(X[i, m], axis=m))
                   / te.sum(te.exp(X[i, s] - te.max(X[i, m], axis=m)), axis=s), name="S")
    stages = [t.name for t in te.topo_order([S])]
    assert stages == ["X", "S_red1", "S_red2", "S"]
    x = np.random.default_rng(3).standard_normal((3, 5))
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(te.evaluate([S], {X: x})[0], e / e.sum(1, keepdims=True), rtol=1e-12)


def test_tuple_reducer_argmax_and_init_and_where():
    X = te.placeholder((3, 5), "float64", name="X")

    def fcombine(x, y):
        return te.select(x[1] >= y[1], x[0], y[0]), te.select(x[1] >= y[1], x[1], y[1])

    argmax = te.comm_reducer(fcombine, lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
    r = te.reduce_axis((0, 5), "r")
    idx, val = te.compute((3,), lambda i: argmax((r, X[i, r]), axis=r), name="am")
    x = np.random.default_rng(4).standard_normal((3, 5))
    got_i, got_v = te.evaluate([idx, val], {X: x})
    np.testing.assert_array_equal(got_i, x.argmax(1))
    np.testing.assert_allclose(got_v, x.max(1))
    k = te.reduce_axis((0, 5), "k")
    C = te.compute((3, 5), lambda i, j: te.sum(X[i, k], axis=k, where=k <= j, init=10.0), name="C")
    np.testing.assert_allclose(te.evaluate([C], {X: x})[0], np.cumsum(x, 1) + 10.0)


def test_reduce_axis_with_data_dependent_bounds():
    X = te.placeholder((6,), "float64", name="X")

    def f(i):
        t = te.reduce_axis((te.max(i - 2, 0), i + 1), name="t")
        return te.sum(X[t], axis=t)

    Y = te.compute((6,), f, name="Y")
    x = np.arange(6.0)
    np.testing.assert_array_equal(te.evaluate([Y], {X: x})[0], [0, 1, 3, 6, 9, 12])


def test_wrong_arity_and_dtype_errors_name_the_tensor():
    X = te.placeholder((3, 4), name="X")
    with pytest.raises(te.TensorError, match="'X' has 2 dims"):
        te.compute((3,), lambda i: X[i])
    with pytest.raises(ValueError, match="'X'"):
        te.evaluate([te.compute((3,), lambda i: X[i, 0])], {X: np.zeros((4, 4), "float32")})
