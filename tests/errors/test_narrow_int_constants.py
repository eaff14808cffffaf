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


@pytest.mark.parametrize("dtype, value, wider", [("int32", 2**31, "int64"), ("int32", -2**31 - 1, "int64"),
                                                 ("int32", 3_000_000_000, "int64"),
                                                 ("int64", 2**63, "float64")])
def test_a_literal_past_int32_or_int64_is_refused_too(dtype, value, wider):
    """Before: `i32[i] + 2**31` built const(2147483648, "int32"); the kernel wrapped it to
    -2147483648 silently (every output off by 2**32) and te.evaluate raised NumPy's bare
    OverflowError. Checked by te.compute (the planner's own int32 bounds may pass 2**31)."""
    q = te.placeholder((3,), dtype, name="q")
    with pytest.raises(te.ExprTypeError, match=rf"'o': the constant {value} does not fit {dtype}.*"
                                               rf"astype\(\"{wider}\"\)"):
        te.compute((3,), lambda i: q[i] + value, name="o")
    with pytest.raises(te.ExprTypeError, match=rf"'c': the constant {value} does not fit {dtype}"):
        te.compute((3,), lambda i: q[i] * te.const(value, dtype), name="c")


def test_the_cast_to_int64_computes_past_int32():
    q = te.placeholder((3,), "int32", name="q")
    x = np.array([-5, 0, 2**31 - 1], "int32")
    o = te.compute((3,), lambda i: q[i].astype("int64") + 2**31, name="o")
    np.testing.assert_array_equal(ta.build([o], [q])(x)[0], x.astype("int64") + 2**31)
    np.testing.assert_array_equal(te.evaluate([o], {q: x})[0], x.astype("int64") + 2**31)
