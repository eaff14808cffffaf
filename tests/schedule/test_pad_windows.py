"""Windows guarded by their own bounds read a zero-padded copy (schedule/cpu_implicit.pad_windows):
a padded 2-d convolution or pool written plainly with `if_then_else` loses the selects in its
reduction loops.  Decisions on the plan and the source; values against NumPy, NaN and inf
included (the copy holds the guard's zeros, so 0 * inf stays NaN).  No timing."""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te

N, C, H = 2, 3, 9


def _inside(*pairs):
    c = None
    for i, n in pairs:
        d = (i >= 0) & (i < n)
        c = d if c is None else c & d
    return c


def _conv(k: int, mask: bool = False, H: int = H):
    x = te.placeholder((N, C, H, H), "float32", name="x")
    w = te.placeholder((C, k, k), "float32", name="w")
    r, s, p = te.reduce_axis((0, k), "r"), te.reduce_axis((0, k), "s"), k // 2

    def body(b, f, i, j):
        iy, ix = i + r - p, j + s - p
        guard = _inside((iy, H), (ix, H))
        if mask:
            guard = guard & (r != 1)  # a masked tap: more than the bounds
        return te.sum(te.if_then_else(guard, x[b, f, iy, ix], 0.0) * w[f, r, s], axis=[r, s])
    return x, w, te.compute((N, C, H, H), body, name="y")


def _reference(xs, ws, mask=False):
    k = ws.shape[-1]
    p = k // 2
    xp = np.zeros((N, C, H + 2 * p, H + 2 * p), np.float64)
    xp[:, :, p:p + H, p:p + H] = xs
    out = np.zeros((N, C, H, H))
    for r in range(k):
        for s in range(k):
            if mask and r == 1:
                continue
            with np.errstate(invalid="ignore"):
                out += xp[:, :, r:r + H, s:s + H] * ws[None, :, r, s, None, None].astype(np.float64)
    return out


@pytest.mark.parametrize("k", [3, 7])
def test_a_guarded_2d_window_reads_a_zero_padded_copy(k):
    x, w, y = _conv(k)
    kern = ta.build([y], [x, w])
    assert "stage x_padded" in str(kern.plan) and "padded: its reduction reads x_padded" in \
        str(kern.plan), str(kern.plan)
    body = kern.source.split("# stage y")[1]
    assert " if " not in body, kern.source  # no select left in the reduction's loops
    rng = np.random.default_rng(k)
    xs = rng.standard_normal((N, C, H, H)).astype(np.float32)
    ws = rng.standard_normal((C, k, k)).astype(np.float32)
    ws[1, 0, 0] = np.inf  # meets the padding's zeros at the top-left border: NaN, as written
    (got,) = kern(xs, ws)
    want = _reference(xs, ws)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.isnan(got[:, 1, 0, 0]).all() and np.isnan(want[:, 1, 0, 0]).all()


def test_masks_one_dim_windows_and_weight_gradients_keep_their_guards():
    x, w, y = _conv(3, mask=True)
    kern = ta.build([y], [x, w])
    assert "x_padded" not in str(kern.plan), str(kern.plan)
    rng = np.random.default_rng(5)
    xs, ws = rng.standard_normal((N, C, H, H)).astype("f4"), rng.standard_normal((C, 3, 3)).astype("f4")
    np.testing.assert_allclose(kern(xs, ws)[0], _reference(xs, ws, mask=True), rtol=1e-5, atol=1e-5)
    t = te.placeholder((N, C, 64), "float32", name="t")
    q = te.reduce_axis((0, 4), "q")
    causal = te.compute((N, C, 64), lambda b, f, i: te.sum(te.if_then_else(
        i + q - 3 >= 0, t[b, f, i + q - 3], 0.0), axis=q), name="causal")
    assert "t_padded" not in str(ta.build([causal], [t]).plan)  # one guarded dim: masked loads
    x, w, y = _conv(3, H=32)
    h = te.placeholder(y.shape, "float32", name="h")
    (dw,) = ta.grad(y, [w], head=h)
    plan = ta.build([dw], [x, w, h]).plan
    assert "x_padded" not in str(plan), str(plan)  # its window runs over the 32 x 32 image
