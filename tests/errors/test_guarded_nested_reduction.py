"""A guard around a reduction nested in a larger body still guards it once te.compute lifts the
reduction into a stage of its own.

`if_then_else(i >= 1, te.sum(x[i - 1, r], axis=r), 0) * 2` reads x[i - 1] only where i >= 1, so
te.compute accepts it; the lifted stage `y_red1` used to run on the whole of i in [0, 5), so
the kernel raised KernelIndexError ("stage y_red1", x[-1, r]) and te.evaluate an
EvaluateIndexError.  The stage now carries the guards on its own axes in its where=; a guard it
cannot carry (on an axis the reduction does not use) that keeps a read in bounds is refused at
definition, naming the tensor and the index.
"""
import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.te.expr import Read, always
from texpr_ad.te.visit import walk
from texpr_ad.testing.ops import cpu_runner, vjp_error


def _stage(y):
    """The body of the stage y's body reads (the lifted reduction)."""
    (t,) = {x.tensor for x in walk(y.op.body[0]) if isinstance(x, Read) and "_red" in x.tensor.name}
    return t.op.body[0]


def _check(y, ins, arrays, want):
    for got in (te.evaluate([y], dict(zip(ins, arrays, strict=True)))[0],
                ta.build([y], ins)(*arrays)[0]):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    h = te.placeholder(y.shape, y.dtype, name="h")
    grads = ta.grad(y, ins, head=h)
    err = vjp_error([y], ins, arrays, ins, grads, [h], cpu_runner, np.random.default_rng(0))
    assert err < 1e-6, err


def test_a_guard_on_the_stage_axes_joins_its_where():
    x = te.placeholder((5, 4), "float64", name="x")
    r = te.reduce_axis((0, 4), "r")
    y = te.compute((5,), lambda i: te.if_then_else(
        i >= 1, te.sum(x[i - 1, r], axis=r), 0.0) * 2.0, name="y")
    a = np.random.default_rng(1).random((5, 4))
    _check(y, [x], [a], np.r_[0.0, a[:-1].sum(1)] * 2.0)
    assert str(_stage(y).condition) == "i >= 1"


def test_and_combined_and_else_branch_guards_are_all_carried():
    x = te.placeholder((5, 4), "float64", name="x")
    w = te.placeholder((4, 4), "float64", name="w")
    r = te.reduce_axis((0, 4), "r")
    y = te.compute((5, 4), lambda i, j: te.if_then_else(
        i < 1, -1.0, te.if_then_else(te.all(j < 3, i + j >= 2),
                                     te.sum(x[i - 1, r] * w[j + 1, r], axis=r), 0.0)) * 2.0,
        name="y")
    rng = np.random.default_rng(2)
    a, b = rng.random((5, 4)), rng.random((4, 4))
    want = np.full((5, 4), -2.0)
    for i in range(1, 5):
        for j in range(4):
            want[i, j] = 2.0 * (a[i - 1] @ b[j + 1]) if j < 3 and i + j >= 2 else 0.0
    _check(y, [x, w], [a, b], want)
    assert str(_stage(y).condition) == "logical_not(i < 1) & ((j < 3) & (i + j >= 2))"


def test_a_nested_reduction_without_a_guard_is_unchanged():
    x = te.placeholder((5, 4), "float64", name="x")
    r = te.reduce_axis((0, 4), "r")
    y = te.compute((5,), lambda i: te.sum(x[i, r], axis=r) * 2.0, name="y")
    assert always(_stage(y).condition)
    a = np.random.default_rng(3).random((5, 4))
    _check(y, [x], [a], a.sum(1) * 2.0)


def test_a_guard_the_stage_cannot_carry_is_refused_at_definition():
    x = te.placeholder((5, 4), "float32", name="x")
    r = te.reduce_axis((0, 4), "r")
    with pytest.raises(te.TensorError, match=r"read x\[i \+ 1, r\] of tensor 'x'.*index `i \+ 1`"
                       r".*stage 'y_red1' over \(i\)"):
        # i < j keeps i + 1 <= 4, but the stage over i alone cannot know j
        te.compute((5, 5), lambda i, j: te.if_then_else(
            i < j, te.sum(x[i + 1, r], axis=r), 0.0) * 2.0, name="y")
