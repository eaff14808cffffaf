"""A Python int that does not fit a narrow integer operand's dtype (int8, int16, uint8).

Before: `q + 200` with an int8 `q` built `const(200, "int8")` silently; te.evaluate and
ta.build then failed with NumPy's bare `OverflowError: Python integer 200 out of bounds for
int8`, naming no tensor or fix. TVM refuses such a literal at definition ("Literal value 200
exceeds maximum of int8"); so does texpr_ad now, with an ExprTypeError naming the value, the
dtype's range and the cast to write.
"""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te


@pytest.mark.parametrize("dtype, value", [("int8", 200), ("int16", 40000), ("uint8", -1), ("uint8", 256)])
def test_out_of_range_literal_is_refused_at_definition(dtype, value):
    q = te.placeholder((3,), dtype, name="q")
    with pytest.raises(te.ExprTypeError, match=rf"{value} does not fit {dtype}.*astype"):
        te.compute((3,), lambda i: q[i] + value, name="o")
    with pytest.raises(te.ExprTypeError, match=rf"{value} does not fit {dtype}"):
        te.const(value, dtype)
    with pytest.raises(ta.TexprError):
        te.compute((3,), lambda i: q[i] > value, name="c")


def test_in_range_literals_and_the_suggested_cast_work():
    q = te.placeholder((3,), "int8", name="q")
    x = np.array([-128, 5, 127], "int8")
    lo = te.compute((3,), lambda i: q[i] + (-128) * 0 + 127 - 127, name="lo")
    wide = te.compute((3,), lambda i: q[i].astype("int32") + 200, name="wide")
    k = ta.build([lo, wide], [q])
    got_lo, got_wide = k(x)
    np.testing.assert_array_equal(got_lo, x)
    np.testing.assert_array_equal(got_wide, x.astype("int32") + 200)
    np.testing.assert_array_equal(te.evaluate([wide], {q: x})[0], x.astype("int32") + 200)
