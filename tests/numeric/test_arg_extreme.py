"""Max/min over overlapping windows: the reverse mode scatters each cotangent to its window's
arg-extreme, decoded from one integer per output that the forward keeps (`deriv.reducers.
ArgExtreme`), instead of gathering over every window a point lies in.

The inputs take three values, so most windows tie; the gradient must still split each window's
cotangent evenly over the elements that attain its extreme (the library's tie convention), on
the reference evaluator and the CPU kernels, against a NumPy loop written from the definition.
"""
import itertools

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops import nn
from texpr_ad.ops import reduction as R
from texpr_ad.te.dag import topo_order
from texpr_ad.te.tensor import ScatterOp


def split_ties_grad(x: np.ndarray, kernel: tuple, stride: tuple, pad: tuple, head: np.ndarray,
                    kind: str = "max") -> np.ndarray:
    """d sum(head * pool(x)) / dx over the trailing len(kernel) dims, ties splitting evenly."""
    nd = len(kernel)
    g = np.zeros_like(x)
    for lead in itertools.product(*map(range, x.shape[:-nd])):
        for o in itertools.product(*map(range, head.shape[-nd:])):
            pts = [p for p in itertools.product(*(range(o[d] * stride[d] - pad[d],
                                                        o[d] * stride[d] - pad[d] + kernel[d])
                                                  for d in range(nd)))
                   if all(0 <= p[d] < x.shape[x.ndim - nd + d] for d in range(nd))]
            vals = [x[lead + p] for p in pts]
            ext = max(vals) if kind == "max" else min(vals)
            hits = [p for p, v in zip(pts, vals) if v == ext]
            for p in hits:
                g[lead + p] += head[lead + o] / len(hits)
    return g


def _check(y: te.Tensor, x: te.Tensor, a: np.ndarray, want_fn) -> None:
    h = te.placeholder(y.shape, y.dtype, name="h")
    (g,) = ta.grad(y, [x], head=h)
    names = {t.name for t in topo_order([g])}
    assert f"{y.name}_argext" in names  # the arg-extreme path was taken
    assert any(isinstance(t.op, ScatterOp) for t in topo_order([g]))
    head = np.random.default_rng(1).standard_normal(tuple(int(s) for s in y.shape))
    want = want_fn(head)
    np.testing.assert_allclose(te.evaluate([g], {x: a, h: head})[0], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ta.build([g], [x, h])(a, head)[0], want, rtol=1e-12, atol=1e-12)


# strided and padded, stride 1 padded, unpadded (no guard): (3, 1, 0) is the unpadded case with
# k = 3, the same kernel as (2, 1, 0) but for the window extent, which (3, 1, 1) covers
@pytest.mark.parametrize("k,s,p", [(3, 2, 1), (3, 1, 1), (2, 1, 0)])
def test_max_pool2d_ties_split_evenly(k, s, p):
    a = np.random.default_rng(0).integers(0, 3, (2, 3, 7, 6)).astype("float64")
    x = te.placeholder(a.shape, "float64", name="x")
    _check(nn.max_pool2d(x, k, s, p), x, a,
           lambda h: split_ties_grad(a, (k, k), (s, s), (p, p), h))


def test_max_pool1d_and_3d_ties():
    rng = np.random.default_rng(2)
    a1 = rng.integers(0, 3, (2, 2, 11)).astype("float64")
    x1 = te.placeholder(a1.shape, "float64", name="x1")
    _check(nn.max_pool1d(x1, 3, 2, 1), x1, a1, lambda h: split_ties_grad(a1, (3,), (2,), (1,), h))
    a3 = rng.integers(0, 3, (1, 2, 4, 5, 4)).astype("float64")
    x3 = te.placeholder(a3.shape, "float64", name="x3")
    _check(nn.max_pool3d(x3, 2, 1, 0), x3, a3,
           lambda h: split_ties_grad(a3, (2,) * 3, (1,) * 3, (0,) * 3, h))


def test_sliding_min_written_by_hand():
    """A user's overlapping min (not a registry op), reduce axis starting at 1."""
    a = np.random.default_rng(3).integers(0, 3, (3, 12)).astype("float64")
    x = te.placeholder(a.shape, "float64", name="x")
    r = te.reduce_axis((1, 4), name="r")
    y = te.compute((3, 8), lambda i, j: te.min(x[i, j + r], axis=r), name="slide_min")
    _check(y, x, a, lambda h: np.concatenate(
        [np.zeros((3, 1)), split_ties_grad(a[:, 1:], (3,), (1,), (0,), h, "min")], axis=1))


def test_non_overlapping_max_keeps_the_gather():
    """A row max reads each element once: its gather is elementwise, no arg-extreme code."""
    x = te.placeholder((4, 6), "float64", name="x")
    y = R.max(x, 1)
    (g,) = ta.grad(y, [x], head=te.placeholder(y.shape, "float64", name="h"))
    names = {t.name for t in topo_order([g])}
    assert not any(n.endswith("_argext") for n in names)
    assert not any(isinstance(t.op, ScatterOp) for t in topo_order([g]))


def test_padding_written_as_a_guard_is_the_reduction_condition():
    """`max(select(inside, x, -inf))`, padding as a user writes it, differentiates like the
    registry's `where=inside`: ties split among real elements only (an all -inf input keeps
    every window's cotangent), and the arg-extreme path is taken."""
    a = np.random.default_rng(4).integers(0, 2, (1, 2, 5, 6)).astype("float64")
    a[0, 1] = -np.inf
    x = te.placeholder(a.shape, "float64", name="x")
    r, s = te.reduce_axis((0, 3), "r"), te.reduce_axis((0, 3), "s")

    def body(b, f, y, z):
        iy, ix = y * 2 + r - 1, z * 2 + s - 1
        inside = te.all(iy >= 0, iy < 5, ix >= 0, ix < 6)
        return te.max(te.if_then_else(inside, x[b, f, iy, ix], float("-inf")), axis=[r, s])

    y = te.compute((1, 2, 3, 3), body, name="guarded_pool")
    _check(y, x, a, lambda h: split_ties_grad(a, (3, 3), (2, 2), (1, 1), h))
