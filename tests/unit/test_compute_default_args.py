"""A compute lambda that captures a loop value with a default argument (`lambda n, j, t=t:`).

Before: building stages in a Python loop (an unrolled RNN) with the usual capture idiom failed
with "shape has 2 dims but the lambda takes 3 arguments", though the lambda takes 2 indices.
Parameters with defaults are now left to their defaults; the axes are the others.
"""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te


def test_default_arguments_are_not_axes():
    x = te.placeholder((2, 3, 4), "float64", name="x")
    steps = [te.compute((3, 4), lambda n, j, t=t: x[t, n, j] * (t + 1), name=f"s{t}") for t in range(2)]
    total = te.compute((3, 4), lambda n, j: steps[0][n, j] + steps[1][n, j], name="total")
    assert [iv.name for iv in steps[0].op.axis] == ["n", "j"]
    xs = np.random.default_rng(0).standard_normal((2, 3, 4))
    (y,) = ta.build([total], [x])(xs)
    np.testing.assert_allclose(y, xs[0] + 2 * xs[1])


def test_wrong_count_still_refused():
    x = te.placeholder((3,), "float64", name="x")
    with pytest.raises(ta.TexprError, match="lambda takes 2"):
        te.compute((3,), lambda i, j: x[i], name="bad")
    with pytest.raises(ta.TexprError, match="lambda takes 3"):
        te.compute((3,), lambda i, j, t=0: x[i], name="bad2")
