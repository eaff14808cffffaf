"""Centered sums (deriv/centered.py): the adjoint drops `sum_k c (x - mean_k x)`, exactly zero,
only there.  Each case checks the decision, then the gradient against float64 central
differences (and torch for the normalizations)."""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.deriv.centered import is_centered_zero
from texpr_ad.te.expr import Read, Reduce
from texpr_ad.te.visit import walk
from texpr_ad.ops import elementwise as E
from texpr_ad.testing import numerical_grad

N, M = 3, 6


def _mean(x, n=M, lo=0, name="mean"):
    k = te.reduce_axis((lo, n), "k")
    red = te.compute((N,), lambda i: te.sum(x[i, k], axis=k), name=name + "_red")
    return te.compute((N,), lambda i: red[i] / float(n - lo), name=name)


def _sum_over_row(body, name="t"):
    k = te.reduce_axis((0, M), "r")
    return te.compute((N,), lambda i: te.sum(body(i, k), axis=k), name=name), k


def _decision(x, mean, body):
    t, k = _sum_over_row(body)
    return is_centered_zero(t.op.body[0].source[0], (k,))


def test_recognized_and_rejected_sums():
    x = te.placeholder((N, M), "float64", name="x")
    m = _mean(x)
    assert _decision(x, m, lambda i, k: x[i, k] - m[i])
    assert _decision(x, m, lambda i, k: -(x[i, k] - m[i]) - (x[i, k] - m[i]))   # the variance's term
    assert _decision(x, m, lambda i, k: 3.0 * m[i] - 3.0 * x[i, k])
    assert not _decision(x, m, lambda i, k: x[i, k] - 2.0 * m[i])               # c_x != -c_mean
    assert not _decision(x, m, lambda i, k: (x[i, k] - m[i]) * x[i, k])         # not linear
    assert not _decision(x, m, lambda i, k: x[i, (k + 1) % M] - m[i])           # another read
    assert not _decision(x, m, lambda i, k: x[(i + 1) % N, k] - m[i])           # another row
    assert not _decision(x, _mean(x, lo=1), lambda i, k: x[i, k] - _mean(x, lo=1)[i])  # part of a row
    y = te.placeholder((N, M), "float64", name="y")
    assert not _decision(x, m, lambda i, k: y[i, k] - m[i])                    # not the mean of y


def _ln(x, g, b, eps=1e-5):
    mean = _mean(x)
    k = te.reduce_axis((0, M), "k2")
    var_red = te.compute((N,), lambda i: te.sum((x[i, k] - mean[i]) * (x[i, k] - mean[i]), axis=k),
                         name="var_red")
    var = te.compute((N,), lambda i: var_red[i] / float(M), name="var")
    return te.compute((N, M), lambda i, j: (x[i, j] - mean[i]) * te.rsqrt(var[i] + eps) * g[j] + b[j],
                      name="y")


@pytest.mark.parametrize("form", ["plain", "registry"])
def test_layer_norm_adjoint_drops_the_mean_term_and_stays_right(form):
    torch = pytest.importorskip("torch")
    x, g, b = (te.placeholder(s, "float64", name=n) for s, n in (((N, M), "x"), ((M,), "g"), ((M,), "b")))
    y = _ln(x, g, b) if form == "plain" else E.layer_norm(x, g, b, 1e-5)
    h = te.placeholder(y.shape, "float64", name="h")
    grads = ta.grad(y, [x, g, b], head=h)
    names = {t.name for t in te.topo_order(grads)}
    assert not any(n.endswith("mean_red2") for n in names), names  # no pass for a zero sum
    rng = np.random.default_rng(7)
    arrs = [rng.standard_normal((N, M)), rng.standard_normal(M), rng.standard_normal(M)]
    hv = rng.standard_normal((N, M))
    got = te.evaluate(list(grads), {x: arrs[0], g: arrs[1], b: arrs[2], h: hv})

    def loss(*a):
        (yv,) = te.evaluate([y], {x: a[0], g: a[1], b: a[2]})
        return float(np.sum(yv * hv))

    for k in range(3):
        np.testing.assert_allclose(got[k], numerical_grad(loss, arrs, k), rtol=1e-5, atol=1e-7)
    ts = [torch.tensor(a, requires_grad=True) for a in arrs]
    torch.nn.functional.layer_norm(ts[0], (M,), ts[1], ts[2], 1e-5).backward(torch.tensor(hv))
    for k in range(3):
        np.testing.assert_allclose(got[k], ts[k].grad.numpy(), rtol=1e-10, atol=1e-12)


def test_batch_norm_adjoint_drops_the_mean_term_and_matches_torch():
    torch = pytest.importorskip("torch")
    x = te.placeholder((4, 3, 2, 5), "float64", name="x")
    g, b = te.placeholder((3,), "float64", name="g"), te.placeholder((3,), "float64", name="b")
    y = E.batch_norm_train(x, g, b, 1, 1e-5)
    h = te.placeholder(y.shape, "float64", name="h")
    grads = ta.grad(y, [x, g, b], head=h)
    assert not any(t.name.endswith("mean_red2") for t in te.topo_order(grads))
    rng = np.random.default_rng(8)
    arrs = [rng.standard_normal((4, 3, 2, 5)), rng.standard_normal(3), rng.standard_normal(3)]
    hv = rng.standard_normal((4, 3, 2, 5))
    got = te.evaluate(list(grads), {x: arrs[0], g: arrs[1], b: arrs[2], h: hv})
    ts = [torch.tensor(a, requires_grad=True) for a in arrs]
    torch.nn.functional.batch_norm(ts[0], None, None, ts[1], ts[2], True, 0.0, 1e-5).backward(
        torch.tensor(hv))
    for k in range(3):
        np.testing.assert_allclose(got[k], ts[k].grad.numpy(), rtol=1e-10, atol=1e-12)


def test_a_non_centered_sum_keeps_its_gradient():
    """sum_k (x - 2 mean): not zero, so the mean's adjoint keeps it (finite differences)."""
    x = te.placeholder((N, M), "float64", name="x")
    m = _mean(x)
    t, _ = _sum_over_row(lambda i, k: (x[i, k] - 2.0 * m[i]) * (x[i, k] - 2.0 * m[i]))
    h = te.placeholder(t.shape, "float64", name="h")
    (dx,) = ta.grad(t, [x], head=h)
    rng = np.random.default_rng(9)
    a, hv = rng.standard_normal((N, M)), rng.standard_normal(N)
    (got,) = te.evaluate([dx], {x: a, h: hv})
    want = numerical_grad(lambda av: float(np.sum(te.evaluate([t], {x: av})[0] * hv)), [a], 0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_a_group_mean_spelled_g_times_c_is_recognized_and_the_gradient_stays_right():
    """Group statistics index channels as `g * 4 + rc`; the adjoint spells it `4 * g + rc`: the
    two spellings are one index (group-norm's variance term was kept before)."""
    x = te.placeholder((2, 8, 3), "float64", name="x")
    rc, rw = te.reduce_axis((0, 4), "rc"), te.reduce_axis((0, 3), "rw")
    mean_red = te.compute((2, 2), lambda b, g: te.sum(x[b, g * 4 + rc, rw], axis=[rc, rw]),
                          name="mean_red")
    mean = te.compute((2, 2), lambda b, g: mean_red[b, g] / 12.0, name="mean")
    sc, sw = te.reduce_axis((0, 4), "sc"), te.reduce_axis((0, 3), "sw")

    def sq(b, g):
        d = x[b, g * 4 + sc, sw] - mean[b, g]
        return d * d
    var = te.compute((2, 2), lambda b, g: te.sum(sq(b, g), axis=[sc, sw]) / 12.0, name="var")
    y = te.compute((2, 8, 3), lambda b, f, w: (x[b, f, w] - mean[b, f // 4])
                   * te.rsqrt(var[b, f // 4] + 1e-5), name="y")
    h = te.placeholder(y.shape, "float64", name="h")
    (dx,) = ta.grad(y, [x], head=h)
    sums_of_x_minus_mean = [t.name for t in te.topo_order([dx]) if isinstance(t.op, te.ComputeOp)
                            and isinstance(t.op.body[0], Reduce) and t.name.startswith("dmean")
                            and {x.tensor.name for x in walk(t.op.body[0].source[0])
                                 if isinstance(x, Read)} == {"x", "mean"}]
    assert not sums_of_x_minus_mean, sums_of_x_minus_mean
    r = np.random.default_rng(5)
    xv, hv = r.standard_normal((2, 8, 3)), r.standard_normal((2, 8, 3))
    (g,) = te.evaluate([dx], {x: xv, h: hv})

    def loss(a):
        (yv,) = te.evaluate([y], {x: a})
        return float(np.sum(yv * hv))
    np.testing.assert_allclose(g, numerical_grad(loss, [xv], 0), rtol=1e-6, atol=1e-8)
