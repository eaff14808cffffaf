"""Issue #29: strided windows' adjoints do work of the forward's order.

The ratio is the adjoint's loop iterations (`ta.work`) over max(the forward's, the gradient's
size): an adjoint must at least write its gradient.  A strided window `x[s*i + d*r - p]` has,
for a given j, taps only where d*r = j + p (mod s); with g = gcd(s, d) > 1 (or a 1x1 window,
where the taps are fixed) no tap exists unless g | j + p, and the gather used to iterate every
tap and every other reduce axis (output channels) under that divisibility `where=`: s^2 (up
to 8.7x here) times the forward.  deriv.solver's `gate` makes the reduce domain empty there.

The TOPI spellings (conv2d_nchw, pool2d with dilation) through the bridge's import are in
tests/relax/test_te_gradient.py; the values of gated adjoints are checked against torch below.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops import nn

STRIDES, DILATIONS, KERNELS = (2, 3), (1, 2, 3), (1, 2, 3)
BOUND = 4.0


def work_ratio(y: te.Tensor, xs: list[te.Tensor]) -> float:
    """Adjoint work over max(forward work, gradient size) (issue #29's measure)."""
    head = te.placeholder(y.shape, y.dtype, name="H")
    grads = [g for g in ta.grad(y, xs, head=head) if g is not None]
    size = sum(int(np.prod([int(s.value) for s in x.shape])) for x in xs)
    return ta.work(grads) / max(ta.work([y]), size, 1)


def _conv(s: int, d: int, k: int) -> tuple[te.Tensor, list[te.Tensor]]:
    X = te.placeholder((2, 8, 12, 12), "float64", name="X")  # enough channels that the
    W = te.placeholder((8, 8, k, k), "float64", name="W")  # gradient's size does not hide it
    return nn.conv2d(X, W, s, d * (k - 1) // 2, d), [X, W]


def _pool(kind: str, s: int, k: int) -> tuple[te.Tensor, list[te.Tensor]]:
    X = te.placeholder((2, 8, 12, 12), "float64", name="X")
    return nn.pool(X, k, s, k // 2, kind, name=f"{kind}_pool2d"), [X]


CASES = [("conv2d", s, d, k) for s, d, k in itertools.product(STRIDES, DILATIONS, KERNELS)] + [
    (f"{kind}_pool2d", s, 1, k) for kind in ("max", "avg") for s, k in itertools.product(STRIDES, KERNELS)]


@pytest.mark.parametrize("op,s,d,k", CASES, ids=[f"{o}-s{s}-d{d}-k{k}" for o, s, d, k in CASES])
def test_strided_window_adjoint_work_is_bounded(op, s, d, k):
    y, xs = _conv(s, d, k) if op == "conv2d" else _pool(op.split("_")[0], s, k)
    r = work_ratio(y, xs)
    print(f"{op} stride {s} dilation {d} kernel {k}: work ratio {r:.2f}")
    assert r <= BOUND, f"{op} stride {s} dilation {d} kernel {k}: adjoint work {r:.2f}x > {BOUND}x"


@pytest.mark.parametrize("s,d,k", [(2, 2, 3), (3, 3, 2), (3, 1, 1), (2, 3, 1)])
def test_gated_conv_adjoint_matches_torch(s, d, k):
    """The cases whose gather is gated (g = gcd(s, d) > 1, or 1x1 taps) against torch, float64."""
    torch = pytest.importorskip("torch")
    y, (X, W) = _conv(s, d, k)
    H = te.placeholder(y.shape, "float64", name="H")
    dX, dW = ta.grad(y, [X, W], head=H)
    assert "where=" not in str(dX)  # the divisibility is the reduce domain, not a test in it
    rng = np.random.default_rng(29)
    x, w = rng.standard_normal((2, 8, 12, 12)), rng.standard_normal((8, 8, k, k))
    g = rng.standard_normal(tuple(int(e.value) for e in y.shape))
    gx, gw = te.evaluate([dX, dW], {X: x, W: w, H: g})
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    torch.nn.functional.conv2d(tx, tw, stride=s, padding=d * (k - 1) // 2, dilation=d).backward(
        torch.tensor(g))
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-10, atol=1e-12)
