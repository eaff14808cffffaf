"""A reduction's `where=` on the data axes alone is tested once before its loops (not per term);
one on the reduce axes stays inside them.  Values against NumPy."""
from __future__ import annotations

import numpy as np

import texpr_ad as ta
from texpr_ad import te


def _loop_lines(src: str) -> list[str]:
    return [ln.strip() for ln in src.splitlines() if ln.strip().startswith(("for ", "if "))]


def test_a_condition_on_data_axes_skips_the_whole_reduction():
    x = te.placeholder((6, 2, 50), "float32", name="x")
    k = te.reduce_axis((0, 50), name="k")
    y = te.compute((6, 2), lambda i, c: te.sum(x[i, c, k] * 2.0, axis=k, where=c == 0), name="y")
    kern = ta.build([y], [x])
    lines = _loop_lines(kern.source)
    cond = next(n for n, ln in enumerate(lines) if ln.startswith("if ") and "== 0" in ln)
    assert lines[cond + 1].startswith("for k in range"), kern.source  # the test, then the loop
    xs = np.random.default_rng(0).standard_normal((6, 2, 50)).astype(np.float32)
    (got,) = kern(xs)
    want = np.stack([2 * xs[:, 0].astype(np.float64).sum(1), np.zeros(6)], 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_condition_on_reduce_axes_stays_per_term():
    x = te.placeholder((6, 50), "float32", name="x")
    k = te.reduce_axis((0, 50), name="k")
    y = te.compute((6,), lambda i: te.sum(x[i, k], axis=k, where=x[i, k] > 0), name="y")
    kern = ta.build([y], [x])
    lines = _loop_lines(kern.source)
    loop = next(n for n, ln in enumerate(lines) if ln.startswith("for k in range"))
    assert lines[loop + 1].startswith("if "), kern.source
    xs = np.random.default_rng(1).standard_normal((6, 50)).astype(np.float32)
    (got,) = kern(xs)
    np.testing.assert_allclose(got, np.where(xs > 0, xs, 0).sum(1), rtol=1e-5, atol=1e-5)
