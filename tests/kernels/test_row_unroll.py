"""Row accumulation folds ROW_UNROLL terms (the plan's `Accumulate.unroll`) of its innermost reduce loop per load and store of a
row element, in the same order as one term at a time: bit-identical results, any trip count."""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.schedule import cpu


def _causal_mix(b: int, t: int, c: int):
    """y[n, i, f] = sum_{s <= i} w[i - s, f] * x[n, s, f]: rows along f, s from 0 to i."""
    x = te.placeholder((b, t, c), "float32", name="x")
    w = te.placeholder((t, c), "float32", name="w")
    s = te.reduce_axis((0, t), "s")
    y = te.compute((b, t, c), lambda n, i, f: te.sum(w[i - s, f] * x[n, s, f], axis=s,
                                                     where=s <= i), name="y")
    return y, [x, w]


def test_unrolled_rows_match_one_term_at_a_time(monkeypatch):
    y, ins = _causal_mix(3, 11, 128)  # trip counts 1..11: every remainder of 4
    k = ta.build([y], ins)
    assert "accumulating whole rows" in str(k.plan), str(k.plan)
    assert k.plan.stage("y").cpu.accumulate.unroll == cpu.ROW_UNROLL > 1, str(k.plan)
    assert f"s_g in range((i + 1) // {cpu.ROW_UNROLL})" in k.source, k.source
    r = np.random.default_rng(0)
    x, w = r.standard_normal((3, 11, 128)).astype(np.float32), r.standard_normal((11, 128)).astype(np.float32)
    (got,) = k(x, w)
    monkeypatch.setattr(cpu, "ROW_UNROLL", 1)
    y1, ins1 = _causal_mix(3, 11, 128)
    (one,) = ta.build([y1], ins1)(x, w)
    np.testing.assert_array_equal(got, one)  # the same additions in the same order
    ref = np.zeros((3, 11, 128))
    for i in range(11):
        for s in range(i + 1):
            ref[:, i] += w[i - s].astype(np.float64) * x[:, s]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("t", [1, 3, 4, 5])
def test_short_rows(t):
    y, ins = _causal_mix(2, t, 64)
    k = ta.build([y], ins)
    r = np.random.default_rng(t)
    x, w = r.standard_normal((2, t, 64)).astype(np.float32), r.standard_normal((t, 64)).astype(np.float32)
    (got,) = k(x, w)
    ref = np.stack([sum(w[i - s].astype(np.float64) * x[:, s] for s in range(i + 1))
                    for i in range(t)], 1)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
