"""User mistakes get exceptions that name the tensor/argument and the fix (pinned messages)."""
import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad._env import flags
from texpr_ad.kernels import KernelArgumentError


@pytest.fixture
def mm():
    A = te.placeholder((4, 3), "float64", name="A")
    W = te.placeholder((3, 2), "float64", name="W")
    k = te.reduce_axis((0, 3), name="k")
    Y = te.compute((4, 2), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="Y")
    return A, W, Y


def test_kernel_arguments_of_wrong_dtype_or_shape(mm):
    A, W, Y = mm
    kern = ta.build([Y], [A, W])
    with pytest.raises(KernelArgumentError, match="'A'.*float64"):
        kern(np.zeros((4, 3), "float32"), np.zeros((3, 2)))
    with pytest.raises(KernelArgumentError, match="'W'"):
        kern(np.zeros((4, 3)), np.zeros((2, 3)))


def test_missing_kernel_input_is_named(mm):
    A, W, Y = mm
    with pytest.raises(Exception, match="'W'"):
        ta.build([Y], [A])


def test_gradient_of_integer_output_and_bad_head(mm):
    A, W, Y = mm
    with pytest.raises(ta.GradientError, match="head 'h'"):
        ta.grad(Y, [A], head=te.placeholder((2, 4), "float64", name="h"))
    with pytest.raises(ta.GradientError, match="float64"):
        ta.grad(Y, [A], head=te.placeholder((4, 2), "float32", name="h"))
    I = te.compute((4,), lambda i: A[i, 0].astype("int32"), name="I")
    with pytest.raises(ta.GradientError, match="only float outputs"):
        ta.grad(I, [A], head=te.placeholder((4,), "int32", name="h"))


def test_inputs_must_be_tensors_and_unused_ones_get_zeros(mm):
    A, W, Y = mm
    with pytest.raises(ta.GradientError, match=r"inputs\[1\] is a ndarray, not a te tensor"):
        ta.grad(Y, [A, np.zeros((4, 3))])
    other = te.placeholder((5,), "float64", name="other")  # not in Y's DAG: an exact zero
    (d,) = ta.grad(Y, [other], head=te.placeholder((4, 2), "float64", name="h"))
    assert d.op.attrs.get("zero") and te.evaluate([d], {})[0].tolist() == [0.0] * 5


def test_integer_input_gets_no_gradient(mm):
    A, W, Y = mm
    idx = te.placeholder((4,), "int32", name="idx")
    Z = te.compute((4,), lambda i: A[idx[i], 0], name="Z")
    dA, didx = ta.grad(Z, [A, idx], head=te.placeholder((4,), "float64", name="h"))
    assert didx is None and dA is not None


def test_out_of_bounds_and_arity_and_python_control_flow():
    X = te.placeholder((3,), name="X")
    with pytest.raises(te.TensorError, match="out of bounds in dim 0 of tensor 'X'"):
        te.compute((3,), lambda i: X[i + 5])
    with pytest.raises(te.TensorError, match="lambda takes 2 arguments"):
        te.compute((3,), lambda i, j: X[i])
    with pytest.raises(TypeError, match="te.if_then_else"):
        te.compute((3,), lambda i: X[i] if i > 0 else X[0])
    with pytest.raises(TypeError, match="unsupported dtype"):
        te.placeholder((3,), "complex64")


def test_not_differentiable_reducer_is_named():
    X = te.placeholder((3, 4), "float64", name="X")
    r = te.reduce_axis((0, 4), name="r")
    lse = te.comm_reducer(lambda x, y: te.log(te.exp(x) + te.exp(y)), lambda t: te.min_value(t), name="lse")
    L = te.compute((3,), lambda i: lse(X[i, r], axis=r), name="L")
    with pytest.raises(ta.NotDifferentiableError, match="stage 'L'.*'lse'"):
        ta.grad(L, [X], head=te.placeholder((3,), "float64", name="h"))


def test_debug_level_one_prints_adjoints(mm, capsys):
    A, W, Y = mm
    with flags(debug=1):
        ta.grad(Y, [A], head=te.placeholder((4, 2), "float64", name="dY"))
    assert "# adjoint of A" in capsys.readouterr().out


def test_numpy_functions_on_te_expressions_name_te_intrinsics():
    """`np.exp(X[i])` in a compute body was NumPy's object-loop TypeError ('loop of ufunc does
    not support argument 0 of type Read which has no callable exp method'); NumPy scalars in
    arithmetic keep building te arithmetic, `==` keeps te's meaning."""
    X = te.placeholder((4,), "float32", name="X")
    for fn in (np.exp, np.tanh, np.maximum, np.sqrt):
        args = (X[0], 0.0) if fn is np.maximum else (X[0],)
        with pytest.raises(ta.TexprError, match=rf"np\.{fn.__name__} cannot take the te "
                                                 r"expression `X\[0\]`; .*te\.exp"):
            te.compute((4,), lambda i: fn(*(X[i] if a is X[0] else a for a in args)))
    y = te.compute((4,), lambda i: np.float32(2) * X[i] - np.float32(1) / (X[i] + np.int32(3)), name="y")
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(ta.build([y], [X])(x)[0], 2 * x - 1 / (x + 3), rtol=1e-6)
    assert str(np.float32(1) == X[0]) == "X[0] == 1.0" and not bool(np.float32(1) == X[0])
