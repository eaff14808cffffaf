"""An adjoint that is a cotangent unchanged (`dx = dy` of a residual add `y = x + g * h`) is not
computed by the backward kernel (`Pullback.forwarded`): the NumPy vjp returns a copy of the
cotangent, PyTorch's autograd gets the cotangent tensor itself (as from torch's own add, so
autograd copies it where the caller still holds it).  Values are checked against PyTorch."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te

torch = pytest.importorskip("torch")
import texpr_ad.torch as tt  # noqa: E402

SHAPE = (4, 16, 8)


def layer_scale(x, g, h):
    return te.compute(x.shape, lambda b, t, c: x[b, t, c] + g[c] * h[b, t, c], name="y")


@functools.cache
def _torch_op():
    return tt.custom_op(layer_scale, name="layer_scale_forwarded")


def _placeholders():
    return [te.placeholder(SHAPE, "float32", name="x"), te.placeholder(SHAPE[-1:], "float32", name="g"),
            te.placeholder(SHAPE, "float32", name="h")]


def test_the_backward_kernel_does_not_copy_a_forwarded_cotangent():
    xs = _placeholders()
    fwd, bwd = ta.vjp([layer_scale(*xs)], xs)
    p = bwd.pullback
    assert p.forwarded == {0: len(p.input_positions) + len(p.slots)}  # dx is the cotangent dy
    assert [t.name for t in bwd.kernel.plan.outputs] == ["dg", "dh"]


def test_the_numpy_vjp_returns_a_copy_of_the_cotangent():
    rng = np.random.default_rng(0)
    a, g, h, dy = (rng.standard_normal(s).astype(np.float32) for s in (SHAPE, SHAPE[-1:], SHAPE, SHAPE))
    xs = _placeholders()
    fwd, bwd = ta.vjp([layer_scale(*xs)], xs)
    (y,), res = fwd(a, g, h)
    dx, dg, dh = bwd(res, dy)
    np.testing.assert_array_equal(dx, dy)
    assert not np.shares_memory(dx, dy)
    np.testing.assert_allclose(dg, (dy * h).sum((0, 1)), rtol=1e-5)
    np.testing.assert_allclose(dh, dy * g, rtol=1e-6)


@pytest.mark.parametrize("hold", [True, False])
def test_torch_gradients_equal_torchs_and_a_held_cotangent_is_not_aliased(hold):
    op = _torch_op()
    leaves = [torch.randn(s, requires_grad=True) for s in (SHAPE, SHAPE[-1:], SHAPE)]
    ref = [t.detach().clone().requires_grad_() for t in leaves]
    w = torch.randn(SHAPE)
    if hold:  # the caller keeps the cotangent and changes it after backward
        gy = torch.randn(SHAPE)
        op(*leaves).backward(gy)
        (ref[0] + ref[1] * ref[2]).backward(gy)
        gy.zero_()
    else:  # a training step: the cotangent is an intermediate of autograd's
        (op(*leaves) * w).sum().backward()
        ((ref[0] + ref[1] * ref[2]) * w).sum().backward()
    for a, b in zip(leaves, ref):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)
