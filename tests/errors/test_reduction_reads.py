"""Reads inside a reduction are checked at definition like elementwise reads.

A reduction nested in a larger body (`te.sum(...) * 2`) is lifted into a stage of its own;
te.compute checked reads only after that split, so the lifted stage's reads were never checked:
an out-of-range `w[j, r]` was a run-time KernelIndexError ("stage y_red1") without grad and a
TensorError naming the derived compute 'dx' with grad, instead of the ArrayArgumentError at the
call naming the array, its shape and the call's shapes.  Guards (`where=`, if_then_else inside
the reduction) still make padded reads valid.
"""
import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te

BAD = r"called with x \(6, 4\).*w \(5, 3\).*read w\[j, r\].*'w' \(shape \(5, 3\)\)"


def _lin(nested: bool):
    def lin(x, w):
        r = te.reduce_axis((0, x.shape[1]), "r")
        s = lambda i, j: te.sum(x[i, r] * w[j, r], axis=r)  # noqa: E731
        body = (lambda i, j: s(i, j) * 2.0) if nested else s
        return te.compute((x.shape[0], w.shape[0]), body, name="y")
    return lin


@pytest.mark.parametrize("nested", [False, True])
def test_core_op_refuses_an_out_of_range_read_in_a_reduction(nested):
    op = ta.custom_op(_lin(nested), name=f"lin_bad_{nested}")
    x, w = np.ones((6, 4), "float32"), np.ones((5, 3), "float32")
    with pytest.raises(ta.ArrayArgumentError, match=BAD):
        op(x, w)
    with pytest.raises(ta.ArrayArgumentError, match=BAD):
        op.vjp(np.ones((6, 5), "float32"), x, w)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("nested", [False, True])
def test_torch_op_refuses_an_out_of_range_read_in_a_reduction(nested, grad):
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt
    op = tt.custom_op(_lin(nested), name=f"lin_bad_{nested}_{grad}")
    x = torch.randn(6, 4, requires_grad=grad)
    w = torch.randn(5, 3, requires_grad=grad)
    with pytest.raises(ta.ArrayArgumentError, match=BAD):
        op(x, w)
    with torch.no_grad(), pytest.raises(ta.ArrayArgumentError, match=BAD):
        op(x, w)


def _padded_conv(x, k):
    """3x3 'same' convolution, padding by guards inside the (nested) reduction."""
    n, m = x.shape
    r, s = te.reduce_axis((0, 3), "r"), te.reduce_axis((0, 3), "s")
    inside = lambda y, z: te.all(y + r - 1 >= 0, y + r - 1 < n, z + s - 1 >= 0, z + s - 1 < m)  # noqa: E731
    a = te.compute((n, m), lambda y, z: te.sum(
        te.if_then_else(inside(y, z), x[y + r - 1, z + s - 1], 0.0) * k[r, s], axis=[r, s]) + 1.0,
        name="a")
    b = te.compute((n, m), lambda y, z: te.sum(
        x[y + r - 1, z + s - 1] * k[r, s], axis=[r, s], where=inside(y, z)) * 2.0, name="b")
    return [a, b]


def test_guarded_reads_in_a_reduction_are_accepted():
    op = ta.custom_op(_padded_conv, name="padded_conv")
    rng = np.random.default_rng(0)
    x, k = rng.random((5, 4)), rng.random((3, 3))
    a, b = op(x, k)
    p = np.pad(x, 1)
    want = sum(p[r:r + 5, s:s + 4] * k[r, s] for r in range(3) for s in range(3))
    np.testing.assert_allclose(a, want + 1.0)
    np.testing.assert_allclose(b, want * 2.0)
    gx, gk = op.vjp([np.ones((5, 4)), np.ones((5, 4))], x, k)
    assert gx.shape == (5, 4) and gk.shape == (3, 3)
