"""Python's abs() on a te expression is te.abs (it was a raw TypeError: bad operand type for
abs(): 'Read'), with te.abs's gradient (0 at 0)."""
import numpy as np

import texpr_ad as ta
from texpr_ad import te


def test_builtin_abs_is_te_abs():
    X = te.placeholder((5,), "float64", name="X")
    Y = te.compute((5,), lambda i: abs(X[i]) * 2.0, name="Y")
    assert str(Y) == str(te.compute((5,), lambda i: te.abs(X[i]) * 2.0, name="Y"))
    x = np.array([-2.0, -0.5, 0.0, 1.5, 3.0])
    (y,) = ta.build([Y], [X])(x)
    np.testing.assert_array_equal(y, 2 * np.abs(x))
    H = te.placeholder((5,), "float64", name="H")
    (dX,) = ta.grad(Y, [X], head=H)
    (g,) = ta.build([dX], [X, H])(x, np.ones(5))
    np.testing.assert_array_equal(g, 2 * np.sign(x))
    I = te.placeholder((3,), "int32", name="I")
    K = te.compute((3,), lambda i: abs(I[i] - 1), name="K")
    (k,) = te.evaluate([K], {I: np.array([-3, 1, 4], "int32")})
    np.testing.assert_array_equal(k, [4, 0, 3])
