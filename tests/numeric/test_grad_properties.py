"""Property tests: derived adjoints of random compute definitions vs float64 central differences.

Hypothesis generates a random single-output compute `Y` over one or two float64
placeholders (a `Case`, plain data, shrinkable and printed on failure) and this
file builds it with the DSL:

* index maps: per read dim an affine map `offset + sum(c * v)` of up to two loop
  variables (output or reduce axes) with strides c in {+-1, +-2, +-3}, sometimes
  followed by `te.floordiv`/`te.floormod` by 2 or 3.  Maps drawn per dim give
  transposes (`A[j, i]`), broadcasts (an output axis no read uses), repeated
  variables (`A[i, i]`, `A[i + k, k]`) and constant indices.  Each read stays in
  bounds in one of two styles: "extent" (the offset shifts the map's minimum over
  the domain to >= 0 and the placeholder's extent is computed from the maximum of
  every such read) or "guarded" (a random offset, the read wrapped in
  `te.if_then_else(all(0 <= idx < extent), read, 0.0)`);
* bodies: trees of depth <= 2 of reads, smooth intrinsics (exp, tanh, sigmoid,
  sin, cos, x*x, and log/sqrt where the argument is positive: all inputs are then
  drawn in [0.5, 2] and guarded reads default to 1.0), `+`, `-`, `*` of two
  subtrees (products of two reads), and `te.if_then_else` on index comparisons;
* reductions: `te.sum/max/min/prod` over 0-2 reduce axes (lower bound 0 or 1),
  sometimes with a `where=` index condition, sometimes with `init=` (sum/max/min);
  the reduction is the whole body or sits inside an outer expression (an
  intrinsic of it, plus/times a read, a select), which splits it into its own
  stage.

For each case: random inputs and head `dY`, `grads = ta.grad(Y, inputs, head=dY)`
evaluated by the NumPy reference evaluator `te.evaluate`, and for every input a
random direction `t` with the central difference
`fd = (<dY, Y(x + h t)> - <dY, Y(x - h t)>) / 2h` at `h = 1e-6`.  Tolerance
(the scale-free error of `texpr_ad.report.checks.check_grad`, plus a roundoff term):

    |<g, t> - fd| <= 1e-6 * |g| |t| + 1e-9 * (sum |dY * Y| + 1)

where the last term bounds the cancellation error of the difference quotient
(~ eps * sum |dY * Y| / h).  max/min reductions are not differentiable where two
different elements nearly tie for the extreme; such cases (and max/min over an
empty `where=` domain, which gives +-inf) are skipped with `assume`, exact ties
(the same element read twice, symmetric products) are kept: there the function
is smooth and the even split is exact.

A smaller test compiles the adjoints for the CPU (`ta.build`) and compares them
with the reference evaluator (rtol 1e-9).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import numpy as np
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.te.expr import Expr
from texpr_ad.te.tensor import Tensor

H = 1e-6            # central-difference step
REL_TOL = 1e-6      # scale-free tolerance on the directional derivative
ROUND_TOL = 1e-9    # times sum |dY * Y| + 1: roundoff of the difference quotient
TIE_GAP = 1e-4      # max/min: skip when the runner-up is this close (relative) to the extreme

OUT_NAMES = ("i", "j")
RED_NAMES = ("k", "l")
IN_NAMES = ("A", "B")

# -- the case description (plain data: printed and shrunk by Hypothesis) ------------------


@dataclass(frozen=True)
class Affine:
    """`offset + sum(coef * slot)`, then `floordiv`/`floormod` by a constant when `div` is set.

    Slots number the loop variables: the output axes first, then the reduce axes.
    """

    terms: tuple[tuple[int, int], ...]
    offset: int
    div: tuple[str, int] | None = None


@dataclass(frozen=True)
class ReadSpec:
    tensor: int                 # which placeholder
    index: tuple[Affine, ...]
    guarded: bool               # wrapped in if_then_else(in range, read, default)


@dataclass(frozen=True)
class Cmp:
    op: str                     # < <= > >= == !=
    lhs: Affine
    rhs: Affine


@dataclass(frozen=True)
class Cond:
    join: str                   # all | any
    parts: tuple[Cmp, ...]


@dataclass(frozen=True)
class Leaf:
    read: ReadSpec


@dataclass(frozen=True)
class Unary:
    fn: str
    arg: Node


@dataclass(frozen=True)
class Binary:
    op: str                     # + - *
    lhs: Node
    rhs: Node


@dataclass(frozen=True)
class Select:
    cond: Cond
    then: Node
    other: Node


@dataclass(frozen=True)
class Hole:
    """The reduction's value inside the outer expression."""


Node = Union[Leaf, Unary, Binary, Select, Hole]


@dataclass(frozen=True)
class Reduction:
    kind: str                                   # sum | max | min | prod
    axes: tuple[tuple[int, int], ...]           # (lo, extent) per reduce axis
    where: Cond | None
    init: Node | None                           # over the output axes only


@dataclass(frozen=True)
class Case:
    out_shape: tuple[int, ...]
    in_shapes: tuple[tuple[int, ...], ...]
    positive: bool                              # inputs in [0.5, 2]: log/sqrt allowed
    reduction: Reduction | None
    source: Node                                # the reduction's source, or the whole body
    outer: Node                                 # contains one Hole (just Hole(): no outer)
    seed: int


# -- building te expressions from a case ----------------------------------------------------

Env = list[Expr]                                # slot -> loop variable (or an expression of one)


def _affine(a: Affine, env: Env) -> Expr:
    e: Expr | None = None
    for slot, c in a.terms:
        v = env[slot]
        t = v if c == 1 else -v if c == -1 else v * c
        e = t if e is None else e + t
    if e is None:
        e = te.const(a.offset, "int32")
    elif a.offset:
        e = e + a.offset
    if a.div is not None:
        kind, c = a.div
        e = te.floordiv(e, c) if kind == "div" else te.floormod(e, c)
    return e


def _cmp(c: Cmp, env: Env) -> Expr:
    x, y = _affine(c.lhs, env), _affine(c.rhs, env)
    ops: dict[str, Callable[[Expr, Expr], Expr]] = {
        "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b, "==": lambda a, b: a.eq(b), "!=": lambda a, b: a.ne(b)}
    return ops[c.op](x, y)


def _cond(c: Cond, env: Env) -> Expr:
    parts = [_cmp(p, env) for p in c.parts]
    return te.all(*parts) if c.join == "all" else te.any(*parts)


UNARY: dict[str, Callable[[Expr], Expr]] = {
    "exp": te.exp, "tanh": te.tanh, "sigmoid": te.sigmoid, "sin": te.sin, "cos": te.cos,
    "log": te.log, "sqrt": te.sqrt, "square": lambda x: x * x,
}
POSITIVE_ONLY = ("log", "sqrt")


def _expr(n: Node, env: Env, inputs: list[Tensor], positive: bool, hole: Expr | None = None) -> Expr:
    def go(m: Node) -> Expr:
        match m:
            case Hole():
                assert hole is not None
                return hole
            case Leaf(read=r):
                X = inputs[r.tensor]
                idx = [_affine(a, env) for a in r.index]
                if not r.guarded:
                    return X[tuple(idx)]
                inside = te.all(*[c for ix, n_ in zip(idx, X.shape, strict=True)
                                  for c in (ix >= 0, ix < n_)])
                return te.if_then_else(inside, X[tuple(idx)], 1.0 if positive else 0.0)
            case Unary(fn=fn, arg=a):
                return UNARY[fn](go(a))
            case Binary(op=op, lhs=a, rhs=b):
                x, y = go(a), go(b)
                return x + y if op == "+" else x - y if op == "-" else x * y
            case Select(cond=c, then=a, other=b):
                return te.if_then_else(_cond(c, env), go(a), go(b))
        raise TypeError(m)

    return go(n)


def build_case(case: Case) -> tuple[Tensor, list[Tensor]]:
    """The te definition `Y` of the case and its placeholders."""
    inputs = [te.placeholder(s, "float64", name=IN_NAMES[k]) for k, s in enumerate(case.in_shapes)]
    red = case.reduction
    raxes = [te.reduce_axis((lo, lo + n), name=RED_NAMES[d]) for d, (lo, n) in enumerate(red.axes)] \
        if red is not None else []

    def body(*out: Expr) -> Expr:
        env: Env = list(out) + list(raxes)
        value = _expr(case.source, env, inputs, case.positive)
        if red is not None:
            where = _cond(red.where, env) if red.where is not None else None
            init = _expr(red.init, env, inputs, case.positive) if red.init is not None else None
            reducer = {"sum": te.sum, "max": te.max, "min": te.min, "prod": te.prod}[red.kind]
            value = reducer(value, axis=raxes, where=where, init=init)
        return _expr(case.outer, list(out), inputs, case.positive, hole=value)

    body.axis_names = list(OUT_NAMES[: len(case.out_shape)])  # type: ignore[attr-defined]
    Y = te.compute(case.out_shape, body, name="Y")
    return Y, inputs


def extreme_values(case: Case, inputs: list[Tensor], arrays: list[np.ndarray]
                   ) -> list[np.ndarray] | None:
    """For a max/min reduction: per output point, the values it reduces (init included)."""
    red = case.reduction
    if red is None or red.kind not in ("max", "min"):
        return None
    nan = te.const(float("nan"), "float64")

    def probe(*v: Expr) -> Expr:
        nout = len(case.out_shape)
        env: Env = list(v[:nout]) + [x + lo if lo else x for x, (lo, _) in zip(v[nout:], red.axes, strict=True)]
        src = _expr(case.source, env, inputs, case.positive)
        return te.if_then_else(_cond(red.where, env), src, nan) if red.where is not None else src

    shape = case.out_shape + tuple(n for _, n in red.axes)
    P = te.compute(shape, probe, name="probe")
    feed = dict(zip(inputs, arrays, strict=True))
    (p,) = te.evaluate([P], feed)
    vals = p.reshape(case.out_shape + (-1,))
    if red.init is not None:
        I0 = te.compute(case.out_shape, lambda *o: _expr(red.init, list(o), inputs, case.positive),
                        name="probe_init")
        (i0,) = te.evaluate([I0], feed)
        vals = np.concatenate([vals, i0[..., None]], axis=-1)
    flat = vals.reshape(-1, vals.shape[-1])
    return [row[~np.isnan(row)] for row in flat]


def skip_near_ties(case: Case, inputs: list[Tensor], arrays: list[np.ndarray]) -> None:
    """`assume` away max/min cases with an empty domain or a near (but not exact) tie."""
    rows = extreme_values(case, inputs, arrays)
    if rows is None:
        return
    kind = case.reduction.kind  # type: ignore[union-attr]
    for row in rows:
        assume(row.size > 0)  # empty where= domain: the output is -inf/+inf
        top = row.max() if kind == "max" else row.min()
        gaps = np.abs(row - top)
        gaps = gaps[gaps > 0]
        assume(gaps.size == 0 or gaps.min() > TIE_GAP * (1.0 + abs(top)))


# -- strategies ---------------------------------------------------------------------------

COEFS = (1, -1, 2, 3, -2, -3)
DIVS = (None, None, None, None, ("div", 2), ("mod", 2), ("div", 3), ("mod", 3))
FUNCS = ("tanh", "exp", "sigmoid", "sin", "cos", "square", "log", "sqrt")
CMPS = ("<", "<=", ">", ">=", "==", "!=")

Range = tuple[int, int]  # inclusive bounds of a loop variable


def _bounds(a: Affine, ranges: list[Range]) -> Range:
    """Inclusive bounds of an affine map over the box (exact for distinct slots)."""
    lo = hi = a.offset
    for slot, c in a.terms:
        x0, x1 = ranges[slot]
        lo += min(c * x0, c * x1)
        hi += max(c * x0, c * x1)
    if a.div is not None:
        kind, c = a.div
        lo, hi = (lo // c, hi // c) if kind == "div" else (0, c - 1)
    return lo, hi


class _Gen:
    """Draws the parts of one case; records the extent every unguarded read needs."""

    def __init__(self, draw: st.DrawFn, in_ranks: tuple[int, ...], positive: bool):
        self.draw, self.in_ranks, self.positive = draw, in_ranks, positive
        self.needed = [[1] * r for r in in_ranks]
        self.guarded_dims: list[list[bool]] = [[False] * r for r in in_ranks]

    def linear(self, ranges: list[Range], max_terms: int) -> tuple[tuple[int, int], ...]:
        d = self.draw
        slots = d(st.lists(st.integers(0, len(ranges) - 1), unique=True,
                           max_size=min(max_terms, len(ranges)))) if ranges else []
        return tuple((s, d(st.sampled_from(COEFS))) for s in slots)

    def index(self, ranges: list[Range], guarded: bool) -> Affine:
        d = self.draw
        terms = self.linear(ranges, 2)
        div = d(st.sampled_from(DIVS)) if terms else None
        lo, _ = _bounds(Affine(terms, 0), ranges)
        shift = d(st.integers(-2, 2)) if guarded else d(st.integers(0, 2))
        return Affine(terms, shift - lo, div)

    def read(self, ranges: list[Range]) -> ReadSpec:
        d = self.draw
        t = d(st.integers(0, len(self.in_ranks) - 1))
        guarded = d(st.booleans())
        index = tuple(self.index(ranges, guarded) for _ in range(self.in_ranks[t]))
        if not guarded:
            for dim, a in enumerate(index):
                self.needed[t][dim] = max(self.needed[t][dim], _bounds(a, ranges)[1] + 1)
        return ReadSpec(t, index, guarded)

    def cond(self, ranges: list[Range]) -> Cond:
        d = self.draw
        parts = []
        for _ in range(d(st.integers(1, 2))):
            lhs = Affine(((d(st.integers(0, len(ranges) - 1)), d(st.sampled_from((1, -1, 2)))),), 0)
            lhs = Affine(lhs.terms, 0, d(st.sampled_from((None, None, None, ("mod", 2)))))
            rhs = Affine(self.linear(ranges, 1), d(st.integers(-1, 3)))
            parts.append(Cmp(d(st.sampled_from(CMPS)), lhs, rhs))
        return Cond(d(st.sampled_from(("all", "any"))), tuple(parts))

    def node(self, ranges: list[Range], depth: int) -> tuple[Node, bool]:
        """A random expression and whether it is positive (for log/sqrt)."""
        d = self.draw
        kind = d(st.sampled_from(("read", "unary", "binary", "select"))) if depth > 0 else "read"
        if kind == "read":
            return Leaf(self.read(ranges)), self.positive
        if kind == "unary":
            arg, pos = self.node(ranges, depth - 1)
            fns = FUNCS if pos else tuple(f for f in FUNCS if f not in POSITIVE_ONLY)
            fn = d(st.sampled_from(fns))
            return Unary(fn, arg), fn in ("exp", "sigmoid") or (pos and fn in ("sqrt", "square", "tanh"))
        if kind == "binary":
            (a, pa), (b, pb) = self.node(ranges, depth - 1), self.node(ranges, depth - 1)
            op = d(st.sampled_from(("*", "+", "-")))
            return Binary(op, a, b), pa and pb and op != "-"
        if not ranges:  # a 0-dim output outside any reduction: nothing to compare
            return self.node(ranges, depth - 1)
        c = self.cond(ranges)
        (a, pa), (b, pb) = self.node(ranges, depth - 1), self.node(ranges, depth - 1)
        return Select(c, a, b), pa and pb

    def outer(self, out_ranges: list[Range]) -> Node:
        d = self.draw
        kind = d(st.sampled_from(("none", "unary", "add", "mul", "select")))
        if kind == "unary":
            return Unary(d(st.sampled_from(("tanh", "sigmoid", "sin", "cos", "square"))), Hole())
        if kind in ("add", "mul"):
            return Binary("+" if kind == "add" else "*", Hole(), Leaf(self.read(out_ranges)))
        if kind == "select" and out_ranges:
            return Select(self.cond(out_ranges), Hole(), Leaf(self.read(out_ranges)))
        return Hole()

    def shapes(self) -> tuple[tuple[int, ...], ...]:
        d = self.draw
        return tuple(tuple(n + d(st.integers(0, 1)) for n in need) for need in self.needed)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    out_shape = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=2)))
    in_ranks = tuple(draw(st.lists(st.sampled_from((2, 1, 3, 0)), min_size=1, max_size=2)))
    positive = draw(st.booleans())
    g = _Gen(draw, in_ranks, positive)
    out_ranges: list[Range] = [(0, n - 1) for n in out_shape]
    nred = draw(st.integers(0, 2))
    red: Reduction | None = None
    ranges = list(out_ranges)
    if nred:
        kind = draw(st.sampled_from(("sum", "max", "min", "prod")))
        axes = tuple((draw(st.integers(0, 1)), draw(st.integers(1, 4))) for _ in range(nred))
        ranges += [(lo, lo + n - 1) for lo, n in axes]
        where = g.cond(ranges) if draw(st.booleans()) else None
        init = None
        if kind != "prod" and draw(st.integers(0, 3)) == 0:
            init = Leaf(g.read(out_ranges))
        red = Reduction(kind, axes, where, init)
    source, _ = g.node(ranges, draw(st.integers(0, 2)))
    outer = g.outer(out_ranges) if red is not None else Hole()
    return Case(out_shape, g.shapes(), positive, red, source, outer,
                draw(st.integers(0, 2**32 - 1)))


# -- the checks ---------------------------------------------------------------------------


@dataclass
class Derived:
    Y: Tensor
    inputs: list[Tensor]
    head: Tensor
    grads: list[Tensor]
    arrays: list[np.ndarray]
    dy: np.ndarray
    rng: np.random.Generator

    @property
    def feed(self) -> dict[Tensor, np.ndarray]:
        return {**dict(zip(self.inputs, self.arrays, strict=True)), self.head: self.dy}

    def describe(self) -> str:
        decl = "\n".join(f'{x.name} = placeholder({tuple(a.shape)}, "float64", name="{x.name}")'
                         for x, a in zip(self.inputs, self.arrays, strict=True))
        adj = "\n".join(f"# adjoint of {x.name}:\n{g}" for x, g in zip(self.inputs, self.grads, strict=True))
        return f"{decl}\n{self.Y}\n{adj}"


def derive(case: Case) -> Derived:
    """Build the case, draw its inputs and head, skip near-ties, and derive the adjoints."""
    Y, inputs = build_case(case)
    note(str(Y))
    rng = np.random.default_rng(case.seed)
    arrays = [rng.uniform(0.5, 2.0, s) if case.positive else rng.standard_normal(s)
              for s in case.in_shapes]
    skip_near_ties(case, inputs, arrays)
    head = te.placeholder(Y.shape, "float64", name="dY")
    dy = rng.standard_normal(case.out_shape)
    grads = ta.grad(Y, inputs, head=head)
    assert all(g is not None for g in grads)
    d = Derived(Y, inputs, head, grads, arrays, dy, rng)  # type: ignore[arg-type]
    note(d.describe())
    return d


def loss(d: Derived, arrays: list[np.ndarray]) -> tuple[float, float]:
    """<dY, Y(arrays)> and its absolute scale sum |dY * Y|."""
    (y,) = te.evaluate([d.Y], dict(zip(d.inputs, arrays, strict=True)))
    return float(np.vdot(d.dy, y)), float(np.abs(d.dy * y).sum())


def check_against_finite_differences(case: Case) -> None:
    d = derive(case)
    _, scale = loss(d, d.arrays)
    assume(np.isfinite(scale))
    adj = te.evaluate(d.grads, d.feed)
    for k, (x, g) in enumerate(zip(d.inputs, adj, strict=True)):
        assert g.shape == d.arrays[k].shape, f"adjoint of {x.name} has shape {g.shape}\n{d.describe()}"
        assert np.isfinite(g).all(), f"adjoint of {x.name} is not finite: {g}\n{d.describe()}"
        t = d.rng.standard_normal(g.shape)
        plus, minus = list(d.arrays), list(d.arrays)
        plus[k], minus[k] = d.arrays[k] + H * t, d.arrays[k] - H * t
        fd = (loss(d, plus)[0] - loss(d, minus)[0]) / (2 * H)
        an = float(np.vdot(g, t))
        tol = REL_TOL * float(np.linalg.norm(g) * np.linalg.norm(t)) + ROUND_TOL * (scale + 1.0)
        assert abs(an - fd) <= tol, (
            f"d{x.name}: <g, t> = {an!r} but central difference = {fd!r} "
            f"(|diff| {abs(an - fd):.3e} > tol {tol:.3e})\n{d.describe()}\n"
            f"{x.name} = np.array({d.arrays[k].tolist()!r})\ndY = np.array({d.dy.tolist()!r})")


@settings(max_examples=250, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases())
def test_random_definition_gradients_match_finite_differences(case: Case) -> None:
    check_against_finite_differences(case)


@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases())
def test_compiled_cpu_adjoint_matches_reference(case: Case) -> None:
    d = derive(case)
    want = te.evaluate(d.grads, d.feed)
    kernel = ta.build(d.grads, d.inputs + [d.head], target="cpu")
    got = kernel(*d.arrays, d.dy)
    for x, g, w in zip(d.inputs, got, want, strict=True):
        atol = 1e-12 * max(float(np.abs(w).max(initial=0.0)), 1.0)
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=atol,
                                   err_msg=f"adjoint of {x.name}\n{d.describe()}")
