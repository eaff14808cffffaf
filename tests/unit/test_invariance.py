"""Shift invariance (deriv/invariance.py): a row max whose shift provably cancels in every output
gets no gradient without `stop_gradient`; every other use of a max keeps its gradient.  Each
case checks the decision, and the gradient against float64 central differences."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.deriv.invariance import shift_invariant
from texpr_ad.testing import numerical_grad

N, M = 3, 5


def _row_max(x: te.Tensor, name: str = "m") -> te.Tensor:
    k = te.reduce_axis((0, M), "k")
    return te.compute((N,), lambda i: te.max(x[i, k], axis=k), name=name)


def _row_sum(e: te.Tensor, name: str = "s") -> te.Tensor:
    k = te.reduce_axis((0, M), "k2")
    return te.compute((N,), lambda i: te.sum(e[i, k], axis=k), name=name)


def softmax(x, m):
    e = te.compute((N, M), lambda i, j: te.exp(x[i, j] - m[i]), name="e")
    s = _row_sum(e)
    return te.compute((N, M), lambda i, j: e[i, j] / s[i], name="y")


def log_softmax(x, m):
    s = _row_sum(te.compute((N, M), lambda i, j: te.exp(x[i, j] - m[i]), name="e"))
    return te.compute((N, M), lambda i, j: x[i, j] - m[i] - te.log(s[i]), name="y")


def tempered_softmax(x, m):  # exp((x - m) / 2): the shift scales every term by exp(-d / 2)
    e = te.compute((N, M), lambda i, j: te.exp((x[i, j] - m[i]) / 2.0), name="e")
    s = _row_sum(e)
    return te.compute((N, M), lambda i, j: e[i, j] / s[i], name="y")


def shifted(x, m):  # x - max x: the shift shows in the output
    return te.compute((N, M), lambda i, j: x[i, j] - m[i], name="y")


def exp_only(x, m):  # exp(x - m): scaled, not cancelled
    return te.compute((N, M), lambda i, j: te.exp(x[i, j] - m[i]), name="y")


def mismatched_powers(x, m):  # exp(2 (x - m)) / sum exp(x - m): exp(-2d) / exp(-d) remains
    e = te.compute((N, M), lambda i, j: te.exp(x[i, j] - m[i]), name="e")
    s = _row_sum(e)
    return te.compute((N, M), lambda i, j: e[i, j] * e[i, j] / s[i], name="y")


def other_row(x, m):  # the divisor is the next row's sum: the rows' shifts differ
    e = te.compute((N, M), lambda i, j: te.exp(x[i, j] - m[i]), name="e")
    s = _row_sum(e)
    return te.compute((N, M), lambda i, j: e[i, j] / s[(i + 1) % N], name="y")


def column_sum(x, m):  # the sum runs across rows, mixing their shifts
    e = te.compute((N, M), lambda i, j: te.exp(x[i, j] - m[i]), name="e")
    k = te.reduce_axis((0, N), "r")
    s = te.compute((M,), lambda j: te.sum(e[k, j], axis=k), name="s")
    return te.compute((N, M), lambda i, j: e[i, j] / s[j], name="y")


def plus_max(x, m):  # softmax + m: the output reads the max itself
    y = softmax(x, m)
    return te.compute((N, M), lambda i, j: y[i, j] + m[i], name="z")


def selected(x, m):  # a select between shifted and unshifted values: no rule, no claim
    return te.compute((N, M), lambda i, j: te.if_then_else(x[i, j] > 0.0, x[i, j] - m[i], x[i, j]),
                      name="y")


def masked_softmax(x, m):  # where(band, exp(x - m), 0): a scaled branch against 0 stays scaled
    e = te.compute((N, M), lambda i, j: te.if_then_else(j <= i + 1, te.exp(x[i, j] - m[i]), 0.0),
                   name="e")
    s = _row_sum(e)
    return te.compute((N, M), lambda i, j: e[i, j] / s[i], name="y")


def masked_by_one(x, m):  # where(band, exp(x - m), 1): the constant 1 does not scale with them
    e = te.compute((N, M), lambda i, j: te.if_then_else(j <= i + 1, te.exp(x[i, j] - m[i]), 1.0),
                   name="e")
    s = _row_sum(e)
    return te.compute((N, M), lambda i, j: e[i, j] / s[i], name="y")


def select_by_value(x, m):  # the condition reads x - m itself: which branch is taken may move
    e = te.compute((N, M), lambda i, j: te.if_then_else(x[i, j] - m[i] > -1.0,
                                                        te.exp(x[i, j] - m[i]), 0.0), name="e")
    s = _row_sum(e)
    return te.compute((N, M), lambda i, j: e[i, j] / s[i], name="y")


CASES: dict[str, tuple[Callable, bool]] = {
    "masked_softmax": (masked_softmax, True),
    "masked_by_one": (masked_by_one, False),
    "select_by_value": (select_by_value, False),
    "softmax": (softmax, True),
    "log_softmax": (log_softmax, True),
    "tempered_softmax": (tempered_softmax, True),
    "shifted": (shifted, False),
    "exp_only": (exp_only, False),
    "mismatched_powers": (mismatched_powers, False),
    "other_row": (other_row, False),
    "column_sum": (column_sum, False),
    "plus_max": (plus_max, False),
    "selected": (selected, False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_decision_and_gradient_against_finite_differences(name):
    build, invariant = CASES[name]
    x = te.placeholder((N, M), "float64", name="x")
    m = _row_max(x)
    y = build(x, m)
    found = shift_invariant([y])
    assert (m in found) is invariant, found
    if invariant:
        assert "invariant to a per-row shift of 'm'" in found[m]
    h = te.placeholder(y.shape, "float64", name="h")
    (dx,) = ta.grad(y, [x], head=h)
    stages = {t.name for t in te.topo_order([dx])}
    assert ("m_ties" not in stages) is invariant  # no tie routing of the max when it cancels
    rng = np.random.default_rng(3)
    a, hv = rng.standard_normal((N, M)), rng.standard_normal((N, M))
    a[1, 2] = a[1, 4] = a[1].max() + 0.5  # a tie: both elements are the row max
    (g,) = te.evaluate([dx], {x: a, h: hv})

    def loss(av):
        (yv,) = te.evaluate([y], {x: av})
        return float(np.sum(yv * hv))

    np.testing.assert_allclose(g, numerical_grad(loss, [a], 0), rtol=1e-6, atol=1e-7)
    (yv,) = te.evaluate([y], {x: a})
    assert np.isfinite(yv).all()


def test_matches_torch_and_the_registry_softmax():
    torch = pytest.importorskip("torch")
    from texpr_ad.ops import elementwise as E
    x = te.placeholder((N, M), "float64", name="x")
    y, ref = softmax(x, _row_max(x)), E.softmax(x, 1)
    h = te.placeholder(y.shape, "float64", name="h")
    rng = np.random.default_rng(5)
    a, hv = rng.standard_normal((N, M)), rng.standard_normal((N, M))
    g, gref = te.evaluate([ta.grad(y, [x], head=h)[0], ta.grad(ref, [x], head=h)[0]],
                          {x: a, h: hv})
    t = torch.tensor(a, requires_grad=True)
    torch.softmax(t, 1).backward(torch.tensor(hv))
    np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(g, gref, rtol=1e-12, atol=1e-14)


def test_outputs_inputs_and_several_outputs():
    x = te.placeholder((N, M), "float64", name="x")
    m = _row_max(x)
    y = softmax(x, m)
    assert m not in shift_invariant([m])                 # the max is itself an output
    assert m not in shift_invariant([y], keep=[m])       # asked for: its gradient is computed
    assert m not in shift_invariant([y, shifted(x, m)])  # one output moves with it
    assert m in shift_invariant([y, log_softmax(x, m)])  # both cancel it
    dm = ta.grad(y, [m], head=te.placeholder(y.shape, "float64", name="h"))[0]
    assert dm is not None and not dm.op.attrs.get("zero")  # computed: zero only up to rounding
