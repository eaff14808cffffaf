"""te.evaluate, the living definition of the IR, divides integers by a zero read from data as
NumPy and the CPU kernels do (x // 0 == x % 0 == 0); it returned x for x // 0 and x / 0."""
import numpy as np

import texpr_ad as ta
from texpr_ad import te


def test_integer_division_by_data_zero_matches_numpy_and_kernels():
    I = te.placeholder((4,), "int64", name="I")
    J = te.placeholder((4,), "int64", name="J")
    outs = [te.compute((4,), lambda i: I[i] // J[i], name="q"),
            te.compute((4,), lambda i: I[i] % J[i], name="r"),
            te.compute((4,), lambda i: I[i] / J[i], name="d")]  # integer `/` is floordiv
    iv, jv = np.array([7, -7, 0, -7]), np.array([0, 0, 0, 2])
    with np.errstate(divide="ignore"):
        want = [iv // jv, iv % jv, iv // jv]
    got = te.evaluate(outs, {I: iv, J: jv})
    kernel = ta.build(outs, [I, J])(iv, jv)
    for g, k, w in zip(got, kernel, want, strict=True):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(k, w)
        assert g.dtype == w.dtype
