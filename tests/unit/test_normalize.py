"""schedule/normalize.py on expressions (no kernels): guarded reads, padding stages folded into
a gather, and dependent reduction windows boxed to their hull, checked by enumeration."""
from __future__ import annotations

import itertools

import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops import nn
from texpr_ad.schedule import normalize
from texpr_ad.te.expr import Const, IterVar, Read, Reduce, const
from texpr_ad.te.simplify import simplify
from texpr_ad.te.visit import substitute


def _body(t):
    return t.op.body[0]


def test_guard_recognizes_reads_and_zero_else_selects_only():
    x = te.placeholder((8,), "float32", name="x")
    g = normalize.guard(_body(te.compute((8,), lambda i: te.if_then_else(i >= 1, x[i - 1], 0.0))))
    assert g is not None and isinstance(g.read, Read) and g.cond is not None
    assert normalize.guard(_body(te.compute((8,), lambda i: x[i]))).cond is None
    one = te.compute((8,), lambda i: te.if_then_else(i >= 1, x[i - 1], 1.0))
    assert normalize.guard(_body(one)) is None  # pads with 1, not 0
    by_value = te.compute((8,), lambda i: te.if_then_else(x[i] > 0, x[i], 0.0))
    assert normalize.guard(_body(by_value)) is None  # a condition on values is not a guard


def test_gather_operand_folds_a_pad_of_a_pad():
    x = te.placeholder((2, 5), "float32", name="x")
    p1 = nn.pad(x, (0, 1), name="p1")
    p2 = nn.pad(p1, (0, 2), name="p2")
    y = te.compute((2, 3), lambda i, j: p2[i, j + 6], name="y")  # the last column is padding
    g = normalize.gather_operand(_body(y))
    assert g.read.tensor is x and g.folded == ("p2", "p1")
    # the folded guard and index agree with the two pads at every point
    (i, j) = y.op.axis
    for a, b in itertools.product(range(2), range(3)):
        env = {i: const(a), j: const(b)}
        holds = bool(simplify(substitute(g.cond, env)).value)
        src = b + 6 - 3  # p2 shifts by 2, p1 by 1
        assert holds == (0 <= src < 5)
        if holds:
            assert [int(simplify(substitute(e, env)).value) for e in g.read.indices] == [a, src]


def _window_points(red: Reduce, env: dict) -> set[tuple[int, ...]]:
    rng = []
    for k in red.axis:
        lo = int(simplify(substitute(k.lo, env)).value)
        n = int(simplify(substitute(k.extent, env)).value)
        rng.append(range(lo, lo + n))
    return set(itertools.product(*rng))


@pytest.mark.parametrize("h", [5, 12])
def test_boxed_windows_match_the_derived_bounds(h):
    """The hull with its guard visits exactly the points of the dependent windows."""
    x = te.placeholder((1, 2, h, h), "float64", name="x")
    w = te.placeholder((3, 2, 3, 3), "float64", name="w")
    y = nn.conv2d(x, w, 1, 1)
    head = te.placeholder(y.shape, "float64", name="head")
    (dpad,) = [t for t in _producers(ta.grad(y, [x], head=head)[0]) if t.op.name == "dconv2d_pad"]
    red = _body(dpad)
    box = normalize.boxed(red, dpad.op.axis)
    assert box is not None and [lo for _, lo, _ in box.hulls] == [0, 0]
    assert [hi for _, _, hi in box.hulls] == [3, 3]
    assert all(isinstance(k.extent, Const) for k in box.body.axis)
    data = dpad.op.axis
    dep = [k for k in red.axis if not isinstance(k.extent, Const)]
    new = [k for k in box.body.axis if k.name in {d.name for d in dep}]
    for a2, a3 in itertools.product(range(int(data[2].extent.value)), repeat=2):
        env = {data[2]: const(a2), data[3]: const(a3)}
        want = _window_points(Reduce(red.combiner, red.source, tuple(dep), red.condition,
                                     red.value_index, red.dtype, red.init), env)
        got = {pt for pt in itertools.product(*(range(int(k.extent.value)) for k in new))
               if simplify(substitute(box.cond, {**env, **dict(zip(new, map(const, pt)))})).value}
        assert got == want, (a2, a3)


def test_boxing_refuses_a_hull_much_larger_than_the_windows():
    x = te.placeholder((1, 2, 12, 12), "float32", name="x")
    w = te.placeholder((3, 2, 3, 3), "float32", name="w")
    y = nn.conv2d(x, w, 2, 1)  # stride 2: each window holds 1-2 of the 6 output positions
    head = te.placeholder(y.shape, "float32", name="head")
    (dpad,) = [t for t in _producers(ta.grad(y, [x], head=head)[0]) if t.op.name == "dconv2d_pad"]
    assert normalize.boxed(_body(dpad), dpad.op.axis) is None


def test_boxing_refuses_triangular_windows():
    x = te.placeholder((6, 6), "float32", name="x")
    k1 = te.reduce_axis((0, 6), name="k1")
    # a reduce axis whose bounds use another reduce axis is not a window of the output point
    k2 = IterVar("k2", k1, const(6) - k1, "reduce")
    red = Reduce(te.sum(x[0, k1], axis=k1).combiner, (x[k1, k2],), (k1, k2), const(True), 0,
                 "float32", ())
    assert normalize.boxed(red, ()) is None


def _producers(t):
    out, stack, seen = [], [t], set()
    while stack:
        u = stack.pop()
        if id(u) in seen:
            continue
        seen.add(id(u))
        out.append(u)
        stack.extend(u.op.inputs if hasattr(u.op, "inputs") else [])
    return out


def test_ungated_moves_the_gate_into_the_condition():
    """A strided dilated window's gated adjoint (`f < select(ax2 % 2 == 0 & .., 8, 0)`) as a
    `where=` over f in [0, 8): the same points at every output point, by enumeration."""
    x = te.placeholder((1, 2, 9, 9), "float64", name="x")
    w = te.placeholder((4, 2, 3, 3), "float64", name="w")
    y = nn.conv(x, w, (2, 2), (2, 2), (2, 2))
    head = te.placeholder(y.shape, "float64", name="head")
    (dpad,) = [t for t in _producers(ta.grad(y, [x], head=head)[0]) if t.op.name == "dconv_pad"]
    red, data = _body(dpad), dpad.op.axis
    assert not isinstance(red.axis[0].extent, Const)  # the gate
    un = normalize.ungated(red)
    assert isinstance(un.axis[0].extent, Const) and un.axis[0].extent.value == 4
    assert [k.extent for k in un.axis[1:]] == [k.extent for k in red.axis[1:]]
    assert normalize.ungated(un) is un
    for a2, a3 in itertools.product(range(int(data[2].extent.value)), repeat=2):
        env = {data[2]: const(a2), data[3]: const(a3)}
        holds = bool(simplify(substitute(un.condition, env)).value)
        assert _window_points(red, env) == (_window_points(un, env) if holds else set()), (a2, a3)
