"""A strided convolution's input gradient: its sum over f is factored into a contraction P and
what is left (the few P elements whose window covers each input point) runs as a scatter of P
(`schedule.cpu_col2im`, Caffe's col2im) instead of a gather with per-point window bounds.

Checked in float64 against a NumPy loop written from the definition (every tap of every output
adds head * w to the input point it read), for windows that overlap (kernel > stride), that
leave input points unread, dilated ones, and padding the gradient crops away.
"""
import itertools

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops import nn
from texpr_ad.schedule import plan_kernel
from texpr_ad.schedule.plan import ScatterStage


def conv_input_grad(x_shape, w, head, stride, pad, dil):
    """d sum(head * conv(x, w)) / dx by its definition, one tap at a time."""
    nd = w.ndim - 2
    gx = np.zeros(x_shape)
    for o in itertools.product(*map(range, head.shape[2:])):
        for k in itertools.product(*map(range, w.shape[2:])):
            p = tuple(o[d] * stride[d] + k[d] * dil[d] - pad[d] for d in range(nd))
            if all(0 <= p[d] < x_shape[2 + d] for d in range(nd)):
                # gx[n, c, p] += sum_f head[n, f, o] * w[f, c, k]
                gx[(slice(None), slice(None), *p)] += head[(slice(None), slice(None), *o)] @ \
                    w[(slice(None), slice(None), *k)]
    return gx


CASES = {  # spatial, channels (c, o), kernel, stride, padding, dilation
    "2d_overlap": ((13, 12), (6, 10), (3, 3), (2, 2), (1, 1), (1, 1)),
    "2d_k5_s3": ((17, 16), (4, 8), (5, 5), (3, 3), (2, 1), (1, 1)),
    "2d_k4_s3_uncovered": ((14, 14), (5, 9), (4, 4), (3, 3), (0, 0), (1, 1)),  # x[13] unread
    "2d_dilated": ((15, 15), (4, 8), (3, 3), (2, 2), (2, 2), (2, 2)),
    "1d_s2": ((40,), (8, 16), (4,), (2,), (1,), (1,)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_strided_input_gradient_scatters_p(case):
    sp, (c, o), k, s, p, d = CASES[case]
    x = te.placeholder((2, c, *sp), "float64", name="x")
    w = te.placeholder((o, c, *k), "float64", name="w")
    y = nn.conv(x, w, s, p, d)
    head = te.placeholder(y.shape, "float64", name="head")
    (dx,) = ta.grad(y, [x], head=head)
    plan = plan_kernel([dx], [x, w, head])
    col = [st for st in plan.stages if isinstance(st, ScatterStage)
           and any(n.startswith("col2im:") for n in st.notes)]
    assert col and col[0].parallel_axis is not None, str(plan)
    r = np.random.default_rng(7)
    ws = r.standard_normal((o, c, *k))
    hs = r.standard_normal(tuple(int(e.value) for e in y.shape))
    xs = r.standard_normal((2, c, *sp))
    (got,) = ta.build([dx], [x, w, head])(xs, ws, hs)
    want = conv_input_grad(xs.shape, ws, hs, s, p, d)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
