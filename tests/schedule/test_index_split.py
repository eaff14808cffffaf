"""Index-set splitting of an elementwise stage's innermost loop at its selects' breakpoints
(schedule/cpu_ranges.py): the plan says so, the source has one loop per range and no select on
the axis, and every value is the unsplit one."""
import math
import re

import numpy as np

import texpr_ad as ta
from texpr_ad import te


def _geglu(n: int, f: int):
    x = te.placeholder((n, 2 * f), "float32", name="x")
    c = math.sqrt(2.0 / math.pi)

    def body(i, j):
        a, g = x[i, j], x[i, j + f]
        return a * (0.5 * g * (1.0 + te.tanh(c * (g + 0.044715 * g * g * g))))
    y = te.compute((n, f), body, name="geglu")
    h = te.placeholder(y.shape, "float32", name="h")
    (dx,) = ta.grad(y, [x], head=h)
    return ta.build([dx], [x, h])


def _geglu_reference(x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """GEGLU's dx in float64 NumPy (d tanh = 1 - tanh^2 and the product rule)."""
    f = h.shape[1]
    a, g, h = x[:, :f].astype(np.float64), x[:, f:].astype(np.float64), h.astype(np.float64)
    c = math.sqrt(2.0 / math.pi)
    t = np.tanh(c * (g + 0.044715 * g ** 3))
    da = h * 0.5 * g * (1 + t)
    dg = h * a * (0.5 * (1 + t) + 0.5 * g * (1 - t * t) * c * (1 + 3 * 0.044715 * g * g))
    return np.concatenate([da, dg], 1)


def test_geglu_backward_splits_at_the_half_and_matches_numpy():
    k = _geglu(8, 256)
    st = k.plan.stage("dx")
    assert st.cpu.ranges is not None and "index split: j split at 256 into [0, 256), [256, 512)" \
        in str(k.plan)
    body = k.source.split("def texpr_kernel")[1]
    assert " if " not in body and "if j" not in body and body.count("range(") == 3
    rng = np.random.default_rng(0)
    x, h = rng.standard_normal((8, 512)).astype(np.float32), rng.standard_normal((8, 256)).astype(np.float32)
    np.testing.assert_allclose(k(x, h)[0], _geglu_reference(x, h), rtol=2e-5, atol=2e-5)


def test_math_calls_repeated_in_a_select_branch_are_bound_once_under_its_guard():
    # GEGLU's backward too short to split: dx = (dA if j < f else 0) + (dG if j >= f else 0),
    # the derivative dG spells tanh(u) five times.  The branch binds it once, in an `if` that
    # keeps x[i, j - f] under its guard (it was 9 calls, inline).
    k = _geglu(8, 32)
    src = k.source
    assert src.count("tanh_f32(") == 2, src  # one per branch
    assert re.search(r"\n( +)if j >= 32:\n\1    dx_t = tanh_f32\(", src), src
    rng = np.random.default_rng(0)
    xv, hv = (rng.standard_normal(s_, dtype=np.float32) for s_ in ((8, 64), (8, 32)))
    np.testing.assert_allclose(k(xv, hv)[0], _geglu_reference(xv, hv), rtol=2e-5, atol=2e-6)


def test_three_ranges_breakpoints_outside_the_loop_and_reads_only_in_their_range():
    """A pad-like tanh: x[i, j - 3] is read only in [3, n + 3) (out of bounds elsewhere; no run-time
    check either); a test true on the whole loop (`j < 10**6`) and one false on it (`j >= -5` is
    always true, its breakpoint below the loop) leave only the real ranges."""
    n = 200
    x = te.placeholder((4, n), "float32", name="x")
    y = te.compute((4, n + 6), lambda i, j: te.if_then_else(
        (j - 3 >= 0) & (j < n + 3) & (j < 10 ** 6) & (j >= -5), te.tanh(x[i, j - 3]), -1.0), name="p")
    k = ta.build([y], [x])
    assert "index split: j split at 3, 203 into [0, 3), [3, 203), [203, 206)" in str(k.plan)
    body = k.source.split("def texpr_kernel")[1]
    assert "if " not in body and "_chk" not in body and body.count("tanh_f32(") == 1
    xv = np.random.default_rng(1).standard_normal((4, n)).astype(np.float32)
    want = np.full((4, n + 6), -1.0)
    want[:, 3:n + 3] = np.tanh(xv.astype(np.float64))
    np.testing.assert_allclose(k(xv)[0], want, rtol=1e-6, atol=1e-6)
    unsplit = ta.build([y], [x], plan_overrides={"p": {"parallel": False}})  # same values
    np.testing.assert_allclose(unsplit(xv)[0], k(xv)[0], rtol=0, atol=0)


def test_cheap_selects_short_loops_and_outer_axis_breakpoints_keep_their_selects():
    s = te.placeholder((256, 256), "float32", name="s")
    for body in (lambda i, j: te.if_then_else(j <= i, te.exp(s[i, j]), 0.0),  # of outer axes
                 lambda i, j: te.if_then_else(j >= 8, s[i, j], 0.0)):  # a blend
        k = ta.build([te.compute((256, 256), body, name="m")], [s])
        assert k.plan.stage("m").cpu.ranges is None and "index split" not in str(k.plan)
    short = te.placeholder((4, 64), "float32", name="t")
    k = ta.build([te.compute((4, 64), lambda i, j: te.if_then_else(j >= 8, te.exp(short[i, j]), 0.0),
                             name="m")], [short])
    assert k.plan.stage("m").cpu.ranges is None
