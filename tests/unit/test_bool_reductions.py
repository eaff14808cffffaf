"""The library's sum and cumsum count bool data (int64), as NumPy does; te.sum itself refuses a
bool sum (a logical or is never what a sum of conditions means: tests/errors/test_malformed.py)."""
from __future__ import annotations

import numpy as np

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops import reduction


def test_sum_and_cumsum_of_bool_data_count_like_numpy():
    b = te.placeholder((3, 5), "bool", name="b")
    outs = [reduction.sum(b, axis=1), reduction.sum(b), reduction.cumsum(b, axis=1),
            reduction.cumsum(b, axis=0, exclusive=True)]
    assert [o.dtype for o in outs] == ["int64"] * 4
    v = np.array([[1, 1, 1, 0, 1], [0, 0, 0, 0, 0], [1, 0, 1, 0, 1]], bool)
    got = ta.build(outs, [b])(v)
    want = [v.sum(1), v.sum(), np.cumsum(v, 1),
            np.concatenate([np.zeros((1, 5), np.int64), np.cumsum(v, 0)[:-1]])]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
