"""Property tests for forward mode and second order over the random definitions of
test_grad_properties.py (the same generator, random_compute.py, and the same `derive_*`).

For each random case, with random inputs x, head dY and tangent directions t (one per input):

* `ta.jvp` tangents vs float64 central differences, elementwise:
  `tY ~ (Y(x + h t) - Y(x - h t)) / 2h`, Richardson-extrapolated over h and 2h;
* the two modes agree: `<dY, jvp(t)> == sum_k <t_k, vjp(dY)_k>` (an identity of the
  linearization, so up to roundoff only);
* second order: `jvp` of the adjoints (Hessian-vector products, forward over reverse) vs central
  differences of the adjoints, and `grad` of `<u, adjoint>` (reverse over reverse) against it:
  `<grad(<u, g>), t> == <u, jvp(g)(t)>`.

Tolerances are those of test_grad_properties.py: `1e-6 |a| |b|` scale-free plus a roundoff term
`1e-9 (sum |w * F| + 1)` for a difference quotient of F weighted by w.  Near ties of max/min,
empty max/min domains and overflow are skipped with `assume`, as there.  Second order is checked
where it exists: piecewise-constant parts (tie counts, the zero count of a prod) have exact
zero derivatives, so cases whose prod inputs sit at a zero are not drawn (inputs are continuous).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, note, settings
from random_compute import Case, Chain, cases, chains
from test_grad_properties import BASE, H, REL_TOL, ROUND_TOL, Derived, derive_case, derive_chain

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.te.tensor import Tensor


def _shape(t: Tensor) -> tuple[int, ...]:
    return tuple(int(n.value) for n in t.shape)  # type: ignore[attr-defined]


def _tangents(d: Derived) -> tuple[list[Tensor], list[np.ndarray]]:
    ts = [te.placeholder(x.shape, x.dtype, name=f"t{x.name}") for x in d.inputs]
    return ts, [d.rng.standard_normal(a.shape) for a in d.arrays]


def _finite(ok: bool) -> None:
    assert ok, "non-finite values near the point"


def _richardson(f, arrays: list[np.ndarray], dirs: list[np.ndarray], require=assume) -> list[np.ndarray]:
    """Central differences of the arrays `f(arrays)` along `dirs`, Richardson-extrapolated
    (`require` rejects points where they overflow: `assume` in property tests)."""

    def diff(h: float) -> list[np.ndarray]:
        plus = f([a + h * t for a, t in zip(arrays, dirs, strict=True)])
        minus = f([a - h * t for a, t in zip(arrays, dirs, strict=True)])
        require(all(np.isfinite(p).all() and np.isfinite(m).all() for p, m in zip(plus, minus, strict=True)))
        return [(p - m) / (2 * h) for p, m in zip(plus, minus, strict=True)]

    d1, d2 = diff(H), diff(2 * H)
    return [a + (a - b) / 3 for a, b in zip(d1, d2, strict=True)]


def _close(got: np.ndarray, want: np.ndarray, scale: float, what: str) -> None:
    tol = REL_TOL * scale + ROUND_TOL * (float(np.abs(want).sum()) + 1.0)
    err = float(np.abs(got - want).max(initial=0.0))
    assert err <= tol, f"{what}: max |diff| {err:.3e} > tol {tol:.3e}\ngot  {got.tolist()}\nwant {want.tolist()}"


def check_jvp(d: Derived) -> None:
    """Forward-mode tangents vs central differences, and <dY, jvp(t)> == <t, vjp(dY)>."""
    ts, dirs = _tangents(d)
    (tY,) = ta.jvp(d.Y, d.inputs, ts)
    note(f"# tangent of Y:\n{tY}")
    feed = {**d.feed, **dict(zip(ts, dirs, strict=True))}
    y, ty, *grads = te.evaluate([d.Y, tY, *d.grads], feed)
    assume(np.isfinite(y).all())
    assert ty.shape == y.shape and np.isfinite(ty).all(), f"tangent {ty}"

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        return te.evaluate([d.Y], dict(zip(d.inputs, arrays, strict=True)))

    (fd,) = _richardson(run, d.arrays, dirs)
    norm_t = float(np.sqrt(sum(np.vdot(t, t) for t in dirs)))
    _close(ty, fd, norm_t * (float(np.abs(ty).max(initial=0.0)) + 1.0), "jvp vs central difference")
    fwd = float(np.vdot(d.dy, ty))
    rev = float(sum(np.vdot(g, t) for g, t in zip(grads, dirs, strict=True)))
    scale = float(np.linalg.norm(d.dy) * np.linalg.norm(ty)) + sum(
        float(np.linalg.norm(g) * np.linalg.norm(t)) for g, t in zip(grads, dirs, strict=True))
    assert abs(fwd - rev) <= 1e-9 * (scale + 1.0), f"<dY, jvp(t)> = {fwd!r} but <vjp(dY), t> = {rev!r}"


def check_second_order(d: Derived) -> None:
    """Forward over reverse (jvp of the adjoints) vs central differences of the adjoints, and
    reverse over reverse: <grad(<u, g>), t> == <u, jvp(g)(t)>."""
    ts, dirs = _tangents(d)
    hv = ta.jvp(d.grads, d.inputs, ts)
    us = [te.placeholder(g.shape, g.dtype, name=f"u{k}") for k, g in enumerate(d.grads)]
    u = [d.rng.standard_normal(_shape(g)) for g in d.grads]
    gg = ta.grad(d.grads, d.inputs, head=us)
    feed = {**d.feed, **dict(zip(ts, dirs, strict=True)), **dict(zip(us, u, strict=True))}
    got = te.evaluate([*hv, *gg], feed)
    hvs, ggs = got[: len(hv)], got[len(hv):]

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        return te.evaluate(d.grads, {**d.feed, **dict(zip(d.inputs, arrays, strict=True))})

    fds = _richardson(run, d.arrays, dirs)
    norm_t = float(np.sqrt(sum(np.vdot(t, t) for t in dirs)))
    for k, (h, fd) in enumerate(zip(hvs, fds, strict=True)):
        _close(h, fd, norm_t * (float(np.abs(h).max(initial=0.0)) + 1.0), f"jvp of adjoint {k}")
    fwd = float(sum(np.vdot(a, b) for a, b in zip(u, hvs, strict=True)))
    rev = float(sum(np.vdot(g, t) for g, t in zip(ggs, dirs, strict=True)))
    scale = float(sum(np.linalg.norm(a) * np.linalg.norm(b) for a, b in zip(u, hvs, strict=True))) + float(
        sum(np.linalg.norm(g) * np.linalg.norm(t) for g, t in zip(ggs, dirs, strict=True)))
    assert abs(fwd - rev) <= 1e-9 * (scale + 1.0), f"<u, jvp(g)> = {fwd!r} but <grad(<u, g>), t> = {rev!r}"


@settings(BASE, max_examples=150)
@given(cases())
def test_random_definition_jvp_matches_finite_differences_and_vjp(case: Case) -> None:
    check_jvp(derive_case(case))


@settings(BASE, max_examples=40)
@given(chains())
def test_two_stage_definition_jvp(chain: Chain) -> None:
    check_jvp(derive_chain(chain))


@settings(BASE, max_examples=60)
@given(cases())
def test_random_definition_second_order(case: Case) -> None:
    check_second_order(derive_case(case))


# -- the reducer table: kind x init x mode, on the examples ----------------------------


def _jvp_at(Y: Tensor, inputs: list[Tensor], arrays: list[np.ndarray], dirs: list[np.ndarray]) -> np.ndarray:
    ts = [te.placeholder(x.shape, x.dtype, name=f"t{x.name}") for x in inputs]
    (tY,) = ta.jvp(Y, inputs, ts)
    return te.evaluate([tY], {**dict(zip(inputs, arrays, strict=True)), **dict(zip(ts, dirs, strict=True))})[0]


def test_jvp_of_max_with_init_routes_to_init():
    """Issue #13 class 5: te.max(..., init=B[i]) gave tangent [0, 0, 0]."""
    A = te.placeholder((3, 2), "float64", name="A")
    B = te.placeholder((3,), "float64", name="B")
    k = te.reduce_axis((0, 2), name="k")
    Y = te.compute((3,), lambda i: te.max(A[i, k], axis=k, init=B[i]), name="Y")
    a, b = np.array([[0.0, 1], [5, 1], [0, -1]]), np.array([3.0, 0, 2])
    assert _jvp_at(Y, [A, B], [a, b], [np.zeros((3, 2)), np.ones(3)]).tolist() == [1, 0, 1]
    assert _jvp_at(Y, [A, B], [a, b], [np.ones((3, 2)), np.zeros(3)]).tolist() == [0, 1, 0]
    # a tie between init and one element splits the tangent half and half (as the adjoint does)
    assert _jvp_at(Y, [A, B], [a, np.array([1.0, 0, 2])], [np.zeros((3, 2)), np.ones(3)])[0] == 0.5


def test_jvp_and_grad_of_prod_with_init_count_the_init_factor():
    """Issue #13 class 5: te.prod(..., init=2.0) gave half the tangent; reverse mode refused init=."""
    A = te.placeholder((3, 2), "float64", name="A")
    B = te.placeholder((3,), "float64", name="B")
    k = te.reduce_axis((0, 2), name="k")
    P = te.compute((3,), lambda i: te.prod(A[i, k], axis=k, init=2.0), name="P")
    a = np.array([[1.0, 2], [6, 2], [1, 0]])
    assert _jvp_at(P, [A], [a], [np.ones((3, 2))]).tolist() == [6, 16, 2]
    Q = te.compute((3,), lambda i: te.prod(A[i, k], axis=k, init=B[i]), name="Q")
    b = np.array([0.0, 3, 2])  # a zero init: d/dA needs it, d/dB is the product of the A row
    assert _jvp_at(Q, [A, B], [a, b], [np.zeros((3, 2)), np.ones(3)]).tolist() == [2, 12, 0]
    dQ = te.placeholder((3,), "float64", name="dQ")
    gA, gB = te.evaluate(ta.grad(Q, [A, B], head=dQ), {A: a, B: b, dQ: np.ones(3)})
    assert gA.tolist() == [[0, 0], [6, 18], [0, 2]] and gB.tolist() == [2, 12, 0]


def _argmax_value(src: te.Expr, axis, init=None):
    """The value component of an argmax tuple reducer (index 0 is the position)."""

    def fcombine(x, y):
        return te.select(x[1] >= y[1], x[0], y[0]), te.select(x[1] >= y[1], x[1], y[1])

    am = te.comm_reducer(fcombine, lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
    return am((axis, src), axis=axis, init=None if init is None else (te.const(-1, "int32"), init))[1]


_csum = te.comm_reducer(lambda x, y: x + y, lambda t: te.const(0, t), name="csum")
REDUCERS = {
    "sum": te.sum, "max": te.max, "min": te.min, "prod": te.prod,
    "argmax": _argmax_value, "comm_reducer sum": lambda s, axis, init=None: _csum(s, axis=axis, init=init),
}


@pytest.mark.parametrize("init", [False, True], ids=["no init", "init"])
@pytest.mark.parametrize("kind", list(REDUCERS))
def test_reducer_table_kind_x_init_x_mode(kind: str, init: bool) -> None:
    """Every reducer kind, with and without init=, in both modes: jvp and grad against central
    differences (sources and init in general position, so no ties and no zeros)."""
    A = te.placeholder((3, 4), "float64", name="A")
    B = te.placeholder((3,), "float64", name="B")
    k = te.reduce_axis((0, 4), name="k")
    red = REDUCERS[kind]
    Y = te.compute((3,), lambda i: red(te.sin(A[i, k]) + 1.5, axis=k, init=B[i] if init else None),
                   name="Y")
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal(3) + np.array([3.0, -3.0, 0.5])
    dirs = [rng.standard_normal((3, 4)), rng.standard_normal(3)]

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        return te.evaluate([Y], {A: arrays[0], B: arrays[1]})

    (fd,) = _richardson(run, [a, b], dirs, require=_finite)
    np.testing.assert_allclose(_jvp_at(Y, [A, B], [a, b], dirs), fd, rtol=1e-7, atol=1e-9)
    dY = te.placeholder((3,), "float64", name="dY")
    dy = rng.standard_normal(3)
    gA, gB = te.evaluate(ta.grad(Y, [A, B], head=dY), {A: a, B: b, dY: dy})
    assert abs(np.vdot(gA, dirs[0]) + np.vdot(gB, dirs[1]) - np.vdot(dy, fd)) <= 1e-7 * (np.abs(dy).sum() + 1)
    if not init:
        assert not gB.any()


def test_compiled_jvp_of_reductions_with_init_matches_reference() -> None:
    """The tangent kernels (data-dependent tie guards, prod zero counts) compile for the CPU."""
    A = te.placeholder((3, 4), "float64", name="A")
    B = te.placeholder((3,), "float64", name="B")
    k, r = te.reduce_axis((0, 4), name="k"), te.reduce_axis((0, 4), name="r")
    M = te.compute((3,), lambda i: te.max(A[i, k], axis=k, init=B[i]), name="M")
    P = te.compute((3,), lambda i: te.prod(A[i, r], axis=r, init=B[i]), name="P")
    tA, tB = te.placeholder((3, 4), "float64", name="tA"), te.placeholder((3,), "float64", name="tB")
    tans = ta.jvp([M, P], [A, B], [tA, tB])
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((3, 4)), np.array([5.0, -5.0, 0.0])
    a[2, 1] = 0.0  # a zero init and a zero source in one row
    args = [a, b, rng.standard_normal((3, 4)), rng.standard_normal(3)]
    want = te.evaluate(tans, dict(zip([A, B, tA, tB], args, strict=True)))
    got = ta.build(tans, [A, B, tA, tB])(*args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
