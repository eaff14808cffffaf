"""A gated adjoint sum whose gate is on axes the sum does not otherwise use is a select around
the sum (deriv/adjoint.py `_gate_aside`), so its lifted stage runs without those axes.  Values
against NumPy in float64; no timing.  grid_sample's two dgrid sums, which this made sums over
the same points folding in one SIBLINGS loop (schedule/fuse.py `scalar_sibling`), are checked
beside its other backward decisions in test_scatter_shared.py."""
from __future__ import annotations

import numpy as np

import texpr_ad as ta
from texpr_ad import te


def test_gate_on_an_unused_axis_leaves_the_sum_without_it():
    """dx[n, c] = sum_m dy[n, m] * w[m] where c == 0 (and sum_m dy[n, m] where c == 2): sums
    over n alone, selected by c."""
    x = te.placeholder((5, 3), "float64", name="x")
    w = te.placeholder((7,), "float64", name="w")
    y = te.compute((5, 7), lambda n, m: x[n, 0] * w[m] + x[n, 2], name="y")
    h = te.placeholder(y.shape, "float64", name="head")
    k = ta.build(ta.grad(y, [x], head=h), [x, w, h])
    red = [st for st in k.plan.stages if "_red" in st.name]
    assert [tuple(int(d) for d in st.tensors[0].shape) for st in red] == [(5,), (5,)], str(k.plan)
    rng = np.random.default_rng(1)
    xv, wv, hv = rng.standard_normal((5, 3)), rng.standard_normal(7), rng.standard_normal((5, 7))
    want = np.zeros((5, 3))
    want[:, 0] = hv @ wv
    want[:, 2] = hv.sum(axis=1)
    got = k(xv, wv, hv)
    got = got[0] if isinstance(got, (tuple, list)) else got
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
