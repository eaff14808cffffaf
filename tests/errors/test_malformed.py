"""Issue #13, class 4: malformed definitions are TensorErrors at definition, naming the fix."""
import numpy as np
import pytest

from texpr_ad import te
from texpr_ad.errors import TexprError

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


def test_all_are_texpr_errors():
    assert issubclass(te.TensorError, TexprError)
