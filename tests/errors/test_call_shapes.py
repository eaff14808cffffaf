"""Issue 13, class 2: arrays at the call must agree with the definition and with each other.

custom_op and ta.build kernels reject wrong counts, shapes, dtypes and non-arrays with texpr_ad
errors that name the argument; nothing returns garbage (the README's `mm` on a (8, 10) `A` used
to return 64.0 and NaN).
"""
import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.kernels import KernelArgumentError


def _mm_op(name: str = "mm") -> ta.CustomOp:
    k = te.reduce_axis((0, 64), name="k")
    return ta.custom_op(lambda A, W: te.compute((A.shape[0], W.shape[1]),
                                                lambda i, j: te.sum(A[i, k] * W[k, j], axis=k)),
                        name=name)


@pytest.fixture(scope="module")
def mm():
    op = _mm_op()
    a = np.random.default_rng(0).random((8, 64)).astype("float32")
    w = np.random.default_rng(1).random((64, 32)).astype("float32")
    return op, a, w


def test_readme_mm_with_a_too_narrow_A_is_an_error_not_nan():
    op = _mm_op()
    a, w = np.ones((8, 10), "float32"), np.ones((64, 32), "float32")
    # caught where the definition is made (te bounds check) or by custom_op's own check
    with pytest.raises(ta.ArrayArgumentError, match=r"mm.*'?A'? \(8, 10\).*A\[i, k\].*"
                                                    r"\[0, 63\]"):
        op(a, w)
    with pytest.raises(ta.ArrayArgumentError, match="'A'"):
        op.vjp(np.ones((8, 32), "float32"), a, w)


def test_too_few_or_too_many_arrays_name_the_parameters():
    op = _mm_op()
    a = np.ones((8, 64), "float32")
    with pytest.raises(ta.CustomOpError, match=r"mm takes 2 arrays \(A, W\), got 1"):
        op(a)
    with pytest.raises(ta.CustomOpError, match="got 3"):
        op(a, a.T, a)
    with pytest.raises(ta.CustomOpError, match="got 0"):
        op.vjp(np.ones(3, "float32"))


def test_star_args_te_function_gets_one_placeholder_per_array():
    op = ta.custom_op(lambda *xs: te.compute(xs[0].shape, lambda i: xs[0][i] * xs[1][i]), "mul")
    x, y = np.arange(3.0), np.full(3, 2.0)
    np.testing.assert_array_equal(op(x, y), x * y)
    gx, gy = op.vjp(np.ones(3), x, y)
    np.testing.assert_array_equal(gx, y)
    np.testing.assert_array_equal(gy, x)


def test_star_args_still_checks_what_the_body_reads():
    op = ta.custom_op(lambda *xs: te.compute(xs[0].shape, lambda i: xs[0][i] * xs[1][i]), "mul")
    with pytest.raises(ta.ArrayArgumentError, match=r"xs1.*\(2,\)"):
        op(np.ones(3), np.ones(2))


def test_cotangent_count_shape_and_dtype(mm):
    op, a, w = mm
    y = op(a, w)
    np.testing.assert_allclose(y, a @ w, rtol=1e-5)
    with pytest.raises(ta.CustomOpError, match=r"got 2 cotangent\(s\) for 1 output"):
        op.vjp([y, y], a, w)
    with pytest.raises(ta.ArrayArgumentError, match=r"cotangent 0 has shape \(3, 3\).*\(8, 32\)"):
        op.vjp(np.ones((3, 3), "float32"), a, w)
    with pytest.raises(ta.ArrayArgumentError, match="cotangent 0 has dtype complex128"):
        op.vjp(np.ones((8, 32), complex), a, w)
    ga, gw = op.vjp([np.ones_like(y)], a, w)  # a one-element list is that one cotangent
    np.testing.assert_allclose(ga, np.ones_like(y) @ w.T, rtol=1e-5)


def test_several_outputs_need_one_cotangent_each():
    op = ta.custom_op(lambda x: [te.compute(x.shape, lambda i: x[i] * 2.0, name="a"),
                                 te.compute(x.shape, lambda i: x[i] * 3.0, name="b")], "two")
    x = np.ones(4)
    with pytest.raises(ta.CustomOpError, match=r"got 1 cotangent\(s\) for 2 output\(s\) \(a, b\)"):
        op.vjp([np.ones(4)], x)
    (gx,) = op.vjp([np.ones(4), np.ones(4)], x)
    np.testing.assert_array_equal(gx, np.full(4, 5.0))


def test_non_arrays_and_unsupported_dtypes(mm):
    op, a, w = mm
    with pytest.raises(ta.ArrayArgumentError, match="array 0 is not an array"):
        op([[1.0, 2.0], [3.0]], w)
    with pytest.raises(ta.ArrayArgumentError, match="array 1 is not an array of numbers"):
        op(a, None)
    with pytest.raises(ta.ArrayArgumentError, match="'A' has dtype complex64"):
        op(a.astype("complex64"), w)
    with pytest.raises(ta.CustomOpError, match="expected a te function"):
        ta.custom_op(42)
    bad = ta.custom_op(lambda x: 3.0, "bad")
    with pytest.raises(ta.CustomOpError, match="must return a te tensor"):
        bad(np.ones(2))


def test_lists_views_and_foreign_byte_order_are_accepted(mm):
    op, a, w = mm
    ref = op(a, w)
    np.testing.assert_array_equal(op(np.asfortranarray(a), w), ref)  # non-contiguous: copied
    np.testing.assert_array_equal(op(a.astype(">f4"), w), ref)       # big-endian: converted
    x = np.arange(4.0)
    sq = ta.custom_op(lambda x: te.compute(x.shape, lambda i: x[i] * x[i]), "sq")
    np.testing.assert_array_equal(sq(x.tolist()), x * x)              # a list of floats
    np.testing.assert_array_equal(sq(np.arange(8.0)[::2]), np.arange(8.0)[::2] ** 2)


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    sq = ta.custom_op(lambda x: te.compute(x.shape, lambda i: x[i] * x[i]), "sq")
    t = torch.arange(4.0, requires_grad=True)
    with pytest.raises(ta.ArrayArgumentError, match=r"detach\(\)"):
        sq(t)
    np.testing.assert_array_equal(sq(t.detach()), np.arange(4.0, dtype="float32") ** 2)


def test_zero_size_dims(mm):
    op, a, w = mm
    assert op(a[:0], w).shape == (0, 32)
    ga, gw = op.vjp(np.ones((0, 32), "float32"), a[:0], w)
    assert ga.shape == (0, 64) and not gw.any()


def test_symbolic_dims_must_agree_across_kernel_arrays():
    n = te.var("n")
    A = te.placeholder((n, 3), "float64", name="A")
    B = te.placeholder((n,), "float64", name="B")
    C = te.compute((n, 3), lambda i, j: A[i, j] * B[i], name="C")
    kern = ta.build([C], [A, B])
    np.testing.assert_array_equal(kern(np.ones((2, 3)), np.full(2, 2.0))[0], np.full((2, 3), 2.0))
    with pytest.raises(KernelArgumentError, match=r"'B' must have shape \(n,\) = \(2,\) "
                                                  r"\(with n=2\), got \(5,\)"):
        kern(np.ones((2, 3)), np.ones(5))
    with pytest.raises(KernelArgumentError, match="'A' must have 2 dims"):
        kern(np.ones(2), np.ones(2))
    with pytest.raises(KernelArgumentError, match="expects 2 arrays"):
        kern(np.ones((2, 3)))
    with pytest.raises(ta.ArrayArgumentError, match="input 'B' is not an array of numbers"):
        kern(np.ones((2, 3)), [object(), object()])
    assert kern(np.ones((0, 3)), np.ones(0))[0].shape == (0, 3)


def test_a_symbolic_shape_that_comes_out_negative_names_the_array():
    """Q[i] = P[i + 1] - P[i] over m - 1 points, called with m = 0: the kernel's np.empty raised
    NumPy's raw 'negative dimensions are not allowed'; the static path was already an error."""
    m = te.var("m")
    P = te.placeholder((m,), "float64", name="P")
    kern = ta.build([te.compute((m - 1,), lambda i: P[i + 1] - P[i], name="Q")], [P])
    np.testing.assert_array_equal(kern(np.array([1.0, 4.0, 9.0]))[0], [3.0, 5.0])
    with pytest.raises(KernelArgumentError, match=r"output 'Q' would have shape \(m - 1,\) = "
                                                  r"\(-1,\) \(with m=0\); pass arrays"):
        kern(np.zeros(0))
    op = ta.custom_op(lambda P: te.compute((P.shape[0] - 1,), lambda i: P[i + 1] - P[i]),
                      name="diff", dynamic=True)
    with pytest.raises(ta.TexprError, match="would have shape"):
        op(np.zeros(0))


def test_a_cast_in_a_symbolic_divisor_is_evaluated():
    """E[I[i] % n] with an int64 I and the int32 dim n casts n: the per-call divisor check could
    not evaluate the cast (KeyError: Op.CAST)."""
    n, m = te.var("n"), te.var("m")
    E = te.placeholder((n,), "float64", name="E")
    I = te.placeholder((m,), "int64", name="I")
    kern = ta.build([te.compute((m,), lambda i: E[I[i] % n], name="g")], [E, I])
    np.testing.assert_array_equal(kern(np.arange(5.0), np.array([1, 7, 3]))[0], [1.0, 2.0, 3.0])
    with pytest.raises(KernelArgumentError, match="divides by"):
        kern(np.zeros(0), np.array([1]))


def test_every_call_error_is_a_texpr_error():
    for cls in (ta.ArrayArgumentError, ta.CustomOpError, KernelArgumentError):
        assert issubclass(cls, ta.TexprError)


def test_keyword_arrays_are_refused_naming_them(mm):
    """`op(A=a, W=w)` was Python's bare 'unexpected keyword argument'; the torch and jax ops
    already named the keyword and the fix."""
    op, a, w = mm
    with pytest.raises(ta.OpArgumentError, match=r"mm: got keyword argument\(s\) 'A', 'W'; pass the "
                                                 r"arguments positionally"):
        op(A=a, W=w)
    assert op(a, w).shape == (8, 32)


def test_arrays_by_keyword_are_refused_naming_the_positional_order():
    """Were builtins TypeError: `CpuKernel.__call__() got an unexpected keyword argument 'X'`
    (and `Forward.__call__() ...` for a vjp's forward), naming no input."""
    X = te.placeholder((3,), "float32", name="X")
    S = te.placeholder((), "float32", name="S")
    Y = te.compute((3,), lambda i: X[i] * S, name="Y")
    kern = ta.build([Y], [X, S])
    x, s = np.arange(3, dtype="float32"), np.array(2, "float32")
    with pytest.raises(KernelArgumentError, match=r"kernel got keyword argument\(s\) 'X', 'S'; "
                                                  r"pass the arrays positionally.*\(X, S\)"):
        kern(X=x, S=s)
    fwd, bwd = ta.vjp([Y], [X, S])
    with pytest.raises(KernelArgumentError, match=r"forward got keyword argument\(s\) 'S'.*\(X, S\)"):
        fwd(x, S=s)
    (y,), res = fwd(x, s)
    with pytest.raises(KernelArgumentError, match=r"backward got keyword argument\(s\) 'dY'.*"
                                                  r"residuals, then one cotangent per output: \(Y\)"):
        bwd(res, dY=np.ones(3, "float32"))
    np.testing.assert_array_equal(kern(x, s)[0], x * 2)  # positionally: unchanged
    np.testing.assert_array_equal(bwd(res, np.ones(3, "float32"))[0], np.full(3, 2, "float32"))
