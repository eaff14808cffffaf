"""Issue #13, class 4: malformed definitions are TensorErrors at definition, naming the fix."""
import math

import numpy as np
import pytest

from texpr_ad import te
from texpr_ad.errors import TexprError
from texpr_ad.te.expr import NotConstantError

X = te.placeholder((4, 5), "float64", name="X")


def _k():
    return te.reduce_axis((0, 5), name="k")


# -- the repros ------------------------------------------------------------------------------

def test_data_axis_as_reduce_axis():
    """Was silently `x + j` (the elementwise form of te.sum)."""
    with pytest.raises(te.TensorError, match="axis 'j' is a data axis"):
        te.compute((4, 5), lambda i, j: te.sum(X[i, j], axis=j))
    with pytest.raises(te.TensorError, match="axis 'j' is a data axis"):
        te.compute((4, 5), lambda i, j: te.prod(X[i, j], j))
    Y = te.compute((4, 5), lambda i, j: te.max(X[i, j], j))  # max/min: the elementwise form
    x = np.random.default_rng(0).standard_normal((4, 5))
    np.testing.assert_allclose(te.evaluate([Y], {X: x})[0], np.maximum(x, np.arange(5.0)))


def test_empty_axis_list():
    with pytest.raises(te.TensorError, match="axis= is empty"):
        te.compute((4,), lambda i: te.sum(X[i, 0], axis=[]))


def test_reduce_axis_missing_from_axis_or_outside_its_reduction():
    """Was an internal error ("please report it")."""
    k, r = _k(), te.reduce_axis((0, 4), name="r")
    with pytest.raises(te.TensorError, match="reduce axis 'k' is used outside a reduction"):
        te.compute((4,), lambda i: te.sum(X[r, k], axis=r))
    with pytest.raises(te.TensorError, match="reduce axis 'k' is used outside a reduction"):
        te.compute((4,), lambda i: X[i, k])
    with pytest.raises(te.TensorError, match="reduce axis 'k' is used outside a reduction"):
        te.compute((4,), lambda i: te.sum(X[i, k], axis=k) + X[i, k])
    with pytest.raises(te.TensorError, match="reduce axis 'k' is used outside"):  # init= is outside
        te.compute((4,), lambda i: te.sum(X[i, k], axis=k, init=X[i, k]))


@pytest.mark.parametrize("index", [lambda i: i // 0, lambda i: te.floordiv(i, 0),
                                   lambda i: te.floormod(i, 0), lambda i: i % 0])
def test_integer_division_by_constant_zero(index):
    """Was a silent read of element 0."""
    with pytest.raises(te.TensorError, match="divides by the constant 0"):
        te.compute((4,), lambda i: X[index(i), 0])


# -- other members of the class ------------------------------------------------------------------------

def test_reduce_axis_reduced_twice():
    k = _k()
    with pytest.raises(te.TensorError, match="reduce axis 'k' is reduced twice"):
        te.compute((4,), lambda i: te.sum(te.sum(X[i, k], axis=k), axis=k))
    with pytest.raises(te.TensorError, match="reduce axis 'k' is reduced twice"):
        te.compute((4,), lambda i: te.sum(X[i, k], axis=[k, k]))


def test_one_axis_in_two_separate_reductions_is_fine():
    k = _k()
    Y = te.compute((4,), lambda i: te.sum(X[i, k], axis=k) + te.max(X[i, k], axis=k))
    x = np.random.default_rng(0).standard_normal((4, 5))
    np.testing.assert_allclose(te.evaluate([Y], {X: x})[0], x.sum(1) + x.max(1))


@pytest.mark.parametrize("make, match", [
    (lambda: te.compute((4,), lambda i: X[i]), "has 2 dims .* read with 1 indices"),
    (lambda: te.compute((4,), lambda i: X[i * 0.5, 0]), "indices must be integers"),
    (lambda: te.compute((-1,), lambda i: X[0, 0]), "dimension -1 is negative"),
    (lambda: te.compute((2.5,), lambda i: X[0, 0]), "must be an integer"),
    (lambda: te.compute((4,), lambda i, j: X[i, j]), "lambda takes 2 arguments"),
    (lambda: te.compute((4,), lambda i: te.sum(X[i, _k()], axis=_k(), init=(1.0, 2.0))),
     "init= has 2 values for 1"),
    (lambda: te.compute((4,), lambda i: te.sum(X[i, 0], axis=[1, 2])), "axis= must be reduce axes"),
])
def test_other_malformed_definitions(make, match):
    with pytest.raises(te.TensorError, match=match):
        make()


def _pair_reducer():
    return te.comm_reducer(lambda x, y: (x[0] + y[0],), lambda a, b: (te.const(0, a), te.const(0, b)))


@pytest.mark.parametrize("make, match", [
    (lambda: te.reduce_axis(5), "dom must be a pair"),
    (lambda: te.reduce_axis((0,)), "dom must be a pair"),
    (lambda: te.reduce_axis((3, 1)), r"range \(3, 1\) ends before it starts"),
    (lambda: te.reduce_axis((0.5, 2)), "must be integers"),
    (lambda: te.reduce_axis((0, 10**12)), "does not fit int32"),
    (lambda: te.placeholder(None, "float32"), "shape must be a tuple"),
    (lambda: te.placeholder(((3,),), "float32"), "is a sequence"),
    (lambda: te.compute((4,), lambda i: te.comm_reducer(lambda x: x, lambda t: te.const(0, t))(
        X[i, 0], axis=_k())),
     r"calling fcombine\(x, y\) failed"),
    (lambda: te.compute((4,), lambda i: _pair_reducer()((X[i, 0], X[i, 1]), axis=_k())),
     "fcombine returned 1 values for 2"),
])
def test_bad_ranges_shapes_and_reducers(make, match):
    """Were builtins TypeError/ValueError (unpacking, zip, a user lambda's arity) or, for a range
    past int32, an OverflowError in te.evaluate."""
    with pytest.raises(te.TensorError, match=match):
        make()


@pytest.mark.parametrize("make, match", [
    (lambda: te.compute((4,), lambda i: None), "cannot use None"),
    (lambda: te.compute((4,), lambda i: X), "cannot use .* in a te expression"),
    (lambda: te.placeholder((3,), "float99"), "unsupported dtype"),
    (lambda: te.compute((4,), lambda i: te.sum(X[i, _k()], axis=_k(), where=X[i, 0])),
     "where= must be a condition"),
    (lambda: te.compute((4,), lambda i: te.if_then_else(X[i, 0], 1.0, 0.0)), "compare it"),
    (lambda: te.compute((4,), lambda i: te.sum(X[i, 0], axis=None)), "needs axis="),
])
def test_wrong_kinds_are_expr_type_errors(make, match):
    """Were builtins TypeError; ExprTypeError is still a TypeError, and a TexprError."""
    with pytest.raises(te.ExprTypeError, match=match):
        make()
    assert issubclass(te.ExprTypeError, TypeError)


def test_all_are_texpr_errors():
    assert issubclass(te.TensorError, TexprError)


@pytest.mark.parametrize("make, match", [
    (lambda: te.compute((4,), lambda i: round(X[i, 0])), r"round\(\) cannot take .*te.round\(x\)"),
    (lambda: te.compute((4,), lambda i: round(X[i, 0], 2)), r"round\(\) cannot take"),
    (lambda: te.compute((4,), lambda i: math.floor(X[i, 0])), r"floor\(\) cannot take .*te.floor"),
    (lambda: te.compute((4,), lambda i: math.ceil(X[i, 0])), r"ceil\(\) cannot take .*te.ceil"),
    (lambda: te.compute((4,), lambda i: math.trunc(X[i, 0])), r"trunc\(\) cannot take .*te.trunc"),
])
def test_python_rounding_builtins_on_expressions_name_te_functions(make, match):
    """round() was builtins TypeError `type Read doesn't define __round__ method`; math.floor/
    ceil/trunc said only that the expression has no float value."""
    with pytest.raises(te.ExprTypeError, match=match):
        make()


def test_math_functions_on_expressions_name_te_intrinsics_and_constants_still_convert():
    with pytest.raises(NotConstantError, match=r"no float value; .*intrinsics \(te.exp"):
        te.compute((4,), lambda i: math.exp(X[i, 0]))
    assert (round(te.const(2.6)), math.floor(te.const(2.6)), math.ceil(te.const(2, "int32")),
            math.trunc(te.const(-2.5)), round(te.const(2.567, "float64"), 2)) == (3, 2, 2, -2, 2.57)


def test_sum_of_a_condition_is_refused_not_a_logical_or():
    """Was silently a bool: te.sum over [1, 1, 1, 0, 1] gave True (a logical or), not 4."""
    B = te.placeholder((5,), "bool", name="B")
    k = te.reduce_axis((0, 5), name="k")
    with pytest.raises(te.ExprTypeError, match=r"te.sum of the condition `B\[k\]` \(dtype bool\).*"
                                               r"astype\(\"int32\"\)"):
        te.compute((1,), lambda i: te.sum(B[k], axis=k))
    with pytest.raises(te.ExprTypeError, match=r"te.sum of the condition `X\[i, k\] > 0.0`"):
        te.compute((4,), lambda i: te.sum(X[i, k] > 0, axis=k))
    count = te.compute((1,), lambda i: te.sum(B[k].astype("int32"), axis=k), name="count")
    some = te.compute((1,), lambda i: te.max(B[k], axis=k), name="some")
    b = np.array([1, 1, 1, 0, 1], bool)
    assert [v.tolist() for v in te.evaluate([count, some], {B: b})] == [[4], [True]]


@pytest.mark.parametrize("make, what", [
    (lambda: te.placeholder((4,), "float32", name=None), "te.placeholder"),
    (lambda: te.compute((4,), lambda i: X[i, 0], name=5), "te.compute"),
    (lambda: te.reduce_axis((0, 4), name=None), "te.reduce_axis"),
    (lambda: te.var(("n",)), "te.var"),
])
def test_names_must_be_strings(make, what):
    """Were accepted: a reduce axis named None could not even be printed (repr() raised
    `TypeError: __repr__ returned non-string`), and messages named the tensor None or 5."""
    with pytest.raises(te.ExprTypeError, match=rf"{what}: name= must be a string, got"):
        make()


def test_max_of_three_values_says_to_nest():
    """Was `te.max: where= must be a condition (bool), got `1.0``: the third value was taken as
    a positional where=, which the user never wrote."""
    V = te.placeholder((5,), "float32", name="V")
    with pytest.raises(te.ExprTypeError, match=r"te.max of more than two values.*"
                                               r"te.max\(te.max\(a, b\), c\)"):
        te.compute((5,), lambda i: te.max(V[i], 0.0, 1.0))
    k = _k()  # a positional where= after the axis is still TVM's reduction form
    te.compute((4,), lambda i: te.max(X[i, k], k, X[i, k] > 0))
