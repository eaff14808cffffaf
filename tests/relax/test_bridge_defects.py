"""Bridge defects met as a new user (issue 12, item 5), fixed in to_tvm, with regression tests.

(a) A reduce axis whose bounds depend on an outer index reaches TVM 0.27 with a wrong block
    domain (silently wrong results); to_tvm runs it from its own start: exactly over its window
    when its bounds use data axes only, else over its widest window with a guard.
(b) `==`/`!=` on bools do not compile in TVM's LLVM backend; to_tvm lowers them to And/Or/Not.
"""
from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from tvm import relax  # noqa: E402

from texpr_ad import te  # noqa: E402
from texpr_ad.relax_bridge import TranslationError, call_te_with_auto_grad, prepare_for_build  # noqa: E402
from texpr_ad.relax_bridge.to_tvm import build, static_reduce_range  # noqa: E402
from texpr_ad.te.visit import substitute  # noqa: E402

SEED = 4412
RNG = np.random.default_rng(SEED)


def exclusive_cumsum_of_squares(x):
    k = te.reduce_axis((0, 7), "k")
    return te.compute((3, 7), lambda b, i: te.sum(x[b, k] * x[b, k], axis=k, where=k < i), name="excl")


def _loss(x, c):
    sq = x * x
    return float(((np.cumsum(sq, 1) - sq) * c).sum())


def test_exclusive_cumsum_adjoint_through_relax_gradient_and_vm():
    """The adjoint's reduce axis runs over (k + 1, 7): it was off by up to 1.0 through TVM."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, 7), "float64"))
    c = relax.Var("c", relax.TensorType((3, 7), "float64"))
    with bb.function("main", [x, c]):
        with bb.dataflow():
            y = bb.emit(call_te_with_auto_grad(bb, exclusive_cumsum_of_squares, x))
            s = bb.emit_output(relax.op.sum(relax.op.multiply(y, c)))
        bb.emit_func_output(s)
    mod = relax.transform.Gradient("main", require_grads=[bb.get()["main"].params[0]])(bb.get())
    vm = relax.VirtualMachine(tvm.compile(prepare_for_build(mod), target="llvm"), tvm.cpu())
    xa, ca = RNG.normal(size=(3, 7)), RNG.normal(size=(3, 7))
    val, (gx,) = vm["main_adjoint"](tvm.runtime.tensor(xa), tvm.runtime.tensor(ca))
    assert np.isclose(float(val.numpy()), _loss(xa, ca))
    eps, num = 1e-6, np.zeros_like(xa)
    for pos in np.ndindex(xa.shape):
        d = np.zeros_like(xa)
        d[pos] = eps
        num[pos] = (_loss(xa + d, ca) - _loss(xa - d, ca)) / (2 * eps)
    np.testing.assert_allclose(gx.numpy(), num, rtol=1e-6, atol=1e-8, err_msg=f"seed {SEED}")


def test_static_reduce_range_rule():
    """The rule on its own: a dependent range becomes its own start plus a static width (the
    largest extent), with the end as a guard; the work stays that of the window."""
    i = te.compute((7,), lambda i: i, name="probe").op.axis[0]  # a data axis over [0, 7)
    k = te.IterVar("k", i + 1, 6 - i, "reduce")  # the exclusive cumsum adjoint's (i + 1, 7)
    width, guard = static_reduce_range(k, "s")
    assert int(width) == 6
    grid = te.compute((7, 6), lambda a, r: te.if_then_else(
        substitute(guard, {i: a, k: a + 1 + r}), 1, 0), name="g")  # the guard at every (i, r)
    got = te.evaluate([grid], {})[0]
    want = [[int(iv + 1 + r < 7) for r in range(6)] for iv in range(7)]
    np.testing.assert_array_equal(got, want)
    const = te.reduce_axis((0, 5), "r")
    assert static_reduce_range(const, "s") == (const.extent, None)
    n = te.var("n")
    sym = te.IterVar("s", i, n - i, "reduce")
    with pytest.raises(TranslationError, match="no static bound"):
        static_reduce_range(sym, "stage")


def test_index_dependent_windows_forward_through_tvm():
    """Inclusive cumsum and adaptive-pool-style windows (both bounds move with the index)."""
    X = te.placeholder((2, 9), "float64", name="X")

    a = te.compute((2, 4), lambda b, o: _window_sum(X, b, o), name="adaptive")
    c = te.compute((2, 9), lambda b, i: _prefix_sum(X, b, i), name="cumsum")
    xa = RNG.normal(size=(2, 9))
    got_a, got_c = build([a, c], [X])(xa)
    want_a = np.stack([xa[:, (o * 9) // 4:-((-(o + 1) * 9) // 4)].sum(1) for o in range(4)], 1)
    np.testing.assert_allclose(got_a, want_a, rtol=1e-12)
    np.testing.assert_allclose(got_c, np.cumsum(xa, 1), rtol=1e-12)


def _window_sum(X, b, o):
    start = te.floordiv(o * 9, 4)
    end = -te.floordiv(-(o + 1) * 9, 4)
    k = te.IterVar("k", start, end - start, "reduce")
    return te.sum(X[b, k], axis=k)


def _prefix_sum(X, b, i):
    k = te.IterVar("k", te.const(0), i + 1, "reduce")
    return te.sum(X[b, k], axis=k)


def test_bool_equality_compiles_for_llvm():
    A = te.placeholder((6,), "float64", name="A")
    B = te.placeholder((6,), "float64", name="B")
    Y = te.compute((6,), lambda i: te.if_then_else((A[i] > 0).eq(B[i] > 0), 1.0, 0.0)
                   + te.if_then_else((A[i] > 0).ne(B[i] < 0), 2.0, 0.0), name="Y")
    a, b = RNG.normal(size=6), RNG.normal(size=6)
    (got,) = build([Y], [A, B])(a, b)
    np.testing.assert_array_equal(got, ((a > 0) == (b > 0)) * 1.0 + ((a > 0) != (b < 0)) * 2.0)


def test_window_on_a_data_axis_with_a_symbolic_end():
    """A window whose bounds use data axes only runs over its own extent (an empty one gives the
    identity), so a symbolic end needs no static bound: a suffix sum, one build for n = 1 and 6
    (it raised "no static bound" while such windows ran over their widest width)."""
    n = te.var("n")
    X = te.placeholder((n,), "float64", name="X")

    def suffix(i):
        k = te.IterVar("k", i, n - i, "reduce")
        return te.sum(X[k], axis=k)

    f = build([te.compute((n,), suffix, name="suffix")], [X])
    for m in (1, 6):
        xa = RNG.normal(size=m)
        np.testing.assert_allclose(f(xa)[0], np.cumsum(xa[::-1])[::-1], rtol=1e-12)
