"""Stage layouts and gathers a plain formulation should not pay for: a reduction nested in a
larger body is a stage over the reader's axis order, and a depthwise convolution (no
contraction rows to share a gathered column) is not gathered by im2col.  Plan and float64
NumPy; no timing."""
from __future__ import annotations

import numpy as np

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.schedule import plan_kernel

TAPS = 4


def _dwconv(b=2, c=16, t=64):
    """Mamba's causal depthwise conv1d as a user writes it: a guarded tap sum plus a bias."""
    x = te.placeholder((b, c, t), "float32", name="x")
    w = te.placeholder((c, TAPS), "float32", name="w")
    bias = te.placeholder((c,), "float32", name="bias")
    k = te.reduce_axis((0, TAPS), "k")

    def body(n, f, s):
        p = s + k - (TAPS - 1)
        return te.sum(te.if_then_else(p >= 0, x[n, f, p], 0.0) * w[f, k], axis=k) + bias[f]
    return x, w, bias, te.compute((b, c, t), body, name="dwconv")


def test_a_nested_reduction_is_a_stage_in_the_readers_axis_order():
    x, w, bias, y = _dwconv()
    red = y.op.body[0].args[0].tensor.op  # the lifted sum, read by the bias add
    assert [a.name for a in red.axis] == ["n", "f", "s"]  # the guard names s first: not its order


def test_a_depthwise_convolution_is_not_gathered():
    x, w, bias, y = _dwconv()
    h = te.placeholder(y.shape, "float32", name="head")
    grads = ta.grad(y, [x, w, bias], head=h)
    for plan in (plan_kernel([y], [x, w, bias]), plan_kernel(list(grads), [x, w, bias, h])):
        assert not any("im2col" in s.name for s in plan.stages), str(plan)
    r = np.random.default_rng(4)
    xs, ws, bs = r.standard_normal((2, 16, 64)), r.standard_normal((16, TAPS)), r.standard_normal(16)
    xs, ws, bs = (a.astype("f4") for a in (xs, ws, bs))
    (got,) = ta.build([y], [x, w, bias])(xs, ws, bs)
    pad = np.concatenate([np.zeros((2, 16, TAPS - 1)), xs.astype(np.float64)], axis=2)
    want = sum(pad[:, :, k:k + 64] * ws[None, :, k, None] for k in range(TAPS)) + bs[None, :, None]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
