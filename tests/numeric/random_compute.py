"""Random compute definitions for the property tests (test_grad_properties.py).

A `Case` is plain data (Hypothesis prints and shrinks it); `build_stage` turns it into a te
compute with the DSL; `cases()` / `chains()` are the strategies; `features()` names what a case
covers (for `--hypothesis-show-statistics`); `skip_near_ties` rejects max/min inputs whose
extreme is not differentiable.  What is generated is listed in test_grad_properties.py.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from texpr_ad import te
from texpr_ad.te.expr import Expr
from texpr_ad.te.tensor import Tensor

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


Node = Leaf | Unary | Binary | Select | Hole


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
        e = e + a.offset if a.offset > 0 else e - (-a.offset)
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


def _expr(n: Node, env: Env, inputs: list[Tensor], positive: bool,
          hole: Expr | None = None) -> Expr:
    """The te expression of `n`; guarded reads default to 1.0 for positive cases, else 0.0."""

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


def build_stage(case: Case, tensors: list[Tensor], name: str) -> Tensor:
    """The compute of one case over `tensors` (a read's `tensor` field indexes this list)."""
    red = case.reduction
    axes = red.axes if red is not None else ()
    raxes = [te.reduce_axis((lo, lo + n), name=RED_NAMES[d]) for d, (lo, n) in enumerate(axes)]

    def body(*out: Expr) -> Expr:
        env: Env = list(out) + list(raxes)
        value = _expr(case.source, env, tensors, case.positive)
        if red is not None:
            where = _cond(red.where, env) if red.where is not None else None
            init = _expr(red.init, env, tensors, case.positive) if red.init is not None else None
            reducer = {"sum": te.sum, "max": te.max, "min": te.min, "prod": te.prod}[red.kind]
            value = reducer(value, axis=raxes, where=where, init=init)
        return _expr(case.outer, list(out), tensors, case.positive, hole=value)

    body.axis_names = list(OUT_NAMES[: len(case.out_shape)])  # type: ignore[attr-defined]
    return te.compute(case.out_shape, body, name=name)


def placeholders(case: Case) -> list[Tensor]:
    return [te.placeholder(s, "float64", name=IN_NAMES[k]) for k, s in enumerate(case.in_shapes)]


def extreme_values(case: Case, tensors: list[Tensor], feed: dict[Tensor, np.ndarray]
                   ) -> list[np.ndarray] | None:
    """For a max/min reduction: per output point, the values it reduces (init included)."""
    red = case.reduction
    if red is None or red.kind not in ("max", "min"):
        return None
    nan = te.const(float("nan"), "float64")
    nout = len(case.out_shape)

    def probe(*v: Expr) -> Expr:
        shifted = [x + lo if lo else x for x, (lo, _) in zip(v[nout:], red.axes, strict=True)]
        env: Env = list(v[:nout]) + shifted
        src = _expr(case.source, env, tensors, case.positive)
        return te.if_then_else(_cond(red.where, env), src, nan) if red.where is not None else src

    P = te.compute(case.out_shape + tuple(n for _, n in red.axes), probe, name="probe")
    (p,) = te.evaluate([P], feed)
    vals = p.reshape(case.out_shape + (-1,))
    if red.init is not None:
        init = red.init
        Q = te.compute(case.out_shape, lambda *o: _expr(init, list(o), tensors, case.positive),
                       name="probe_init")
        (q,) = te.evaluate([Q], feed)
        vals = np.concatenate([vals, q[..., None]], axis=-1)
    return [row[~np.isnan(row)] for row in vals.reshape(-1, vals.shape[-1])]


def skip_near_ties(case: Case, tensors: list[Tensor], feed: dict[Tensor, np.ndarray]) -> None:
    """`assume` away max/min cases with an empty domain or a near (but not exact) tie."""
    rows = extreme_values(case, tensors, feed)
    if rows is None or case.reduction is None:
        return
    for row in rows:
        assume(row.size > 0)  # empty where= domain: the output is -inf/+inf
        top = row.max() if case.reduction.kind == "max" else row.min()
        gaps = np.abs(row - top)
        gaps = gaps[gaps > 0]
        assume(gaps.size == 0 or gaps.min() > TIE_GAP * (1.0 + abs(top)))


# -- strategies ---------------------------------------------------------------------------

COEFS = (1, -1, 2, 3, -2, -3)                  # strides (Hypothesis shrinks towards the first)
TERMS = (1, 0, 2, 1)                            # loop variables per index dim
KINDS = ("read", "unary", "binary", "unary", "select")
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
    """Draws the parts of one case.

    `fixed[t]` is the shape of tensor t when it is already known (an earlier
    stage), else None: its extents are then computed from its unguarded reads.
    """

    def __init__(self, draw: st.DrawFn, ranks: tuple[int, ...], positive: bool,
                 fixed: tuple[tuple[int, ...] | None, ...] | None = None):
        self.draw, self.ranks, self.positive = draw, ranks, positive
        self.fixed = fixed or (None,) * len(ranks)
        self.needed = [[1] * r for r in ranks]

    def linear(self, ranges: list[Range], max_terms: int) -> tuple[tuple[int, int], ...]:
        d = self.draw
        n = min(d(st.sampled_from(TERMS)), max_terms, len(ranges))
        if n == 0:
            return ()
        slots = d(st.permutations(range(len(ranges))))[:n]
        return tuple((s, d(st.sampled_from(COEFS))) for s in slots)

    def index(self, ranges: list[Range], guarded: bool) -> Affine:
        d = self.draw
        terms = self.linear(ranges, 2)
        div = d(st.sampled_from(DIVS)) if terms else None
        lo, _ = _bounds(Affine(terms, 0), ranges)
        shift = d(st.integers(-1, 1)) if guarded else d(st.integers(0, 2))
        return Affine(terms, shift - lo, div)

    def read(self, ranges: list[Range]) -> ReadSpec:
        d = self.draw
        t = d(st.integers(0, len(self.ranks) - 1))
        guarded = d(st.booleans())
        index = tuple(self.index(ranges, guarded) for _ in range(self.ranks[t]))
        his = [_bounds(a, ranges)[1] for a in index]
        shape = self.fixed[t]
        if shape is not None and any(h >= n for h, n in zip(his, shape, strict=True)):
            guarded = True  # does not fit the earlier stage's shape
        if shape is None:  # a guarded read is cut off at the far end by 0-2 points
            trim = d(st.integers(0, 2)) if guarded else 0
            self.needed[t] = [max(n, h + 1 - trim)
                              for n, h in zip(self.needed[t], his, strict=True)]
        return ReadSpec(t, index, guarded)

    def cond(self, ranges: list[Range]) -> Cond:
        d = self.draw
        parts = []
        for _ in range(d(st.integers(1, 2))):
            slot = d(st.integers(0, len(ranges) - 1))
            lhs = Affine(((slot, d(st.sampled_from((1, -1, 2)))),), 0,
                         d(st.sampled_from((None, None, None, ("mod", 2)))))
            rhs = Affine(self.linear(ranges, 1), d(st.integers(-1, 3)))
            parts.append(Cmp(d(st.sampled_from(CMPS)), lhs, rhs))
        return Cond(d(st.sampled_from(("all", "any"))), tuple(parts))

    def node(self, ranges: list[Range], depth: int) -> tuple[Node, bool]:
        """A random expression, and whether it is positive (log/sqrt may take it)."""
        d = self.draw
        kind = d(st.sampled_from(KINDS)) if depth > 0 else "read"
        if kind == "read":
            return Leaf(self.read(ranges)), self.positive
        if kind == "unary":
            arg, pos = self.node(ranges, depth - 1)
            fn = d(st.sampled_from(FUNCS + POSITIVE_ONLY if pos else
                                   tuple(f for f in FUNCS if f not in POSITIVE_ONLY)))
            positive = fn in ("exp", "sigmoid") or (pos and fn in ("sqrt", "square", "tanh"))
            return Unary(fn, arg), positive
        if kind == "binary":
            (a, pa), (b, pb) = self.node(ranges, depth - 1), self.node(ranges, depth - 1)
            op = d(st.sampled_from(("*", "+", "-")))
            return Binary(op, a, b), pa and pb and op != "-"
        if not ranges:  # a 0-dim output outside any reduction: no index to compare
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
        """Placeholder shapes: what the reads need, plus 0 or 1."""
        d = self.draw
        return tuple(tuple(n + d(st.integers(0, 1)) for n in need) for need in self.needed)


def _stage(draw: st.DrawFn, g: _Gen, seed: int) -> Case:
    """One random compute over `g`'s tensors (`in_shapes` left to the caller)."""
    out_shape = tuple(draw(st.lists(st.integers(1, 4), max_size=2)))
    out_ranges: list[Range] = [(0, n - 1) for n in out_shape]
    ranges = list(out_ranges)
    red: Reduction | None = None
    nred = draw(st.integers(0, 2))
    if nred:
        kind = draw(st.sampled_from(("sum", "max", "min", "prod")))
        axes = tuple((draw(st.integers(0, 1)), draw(st.integers(1, 4))) for _ in range(nred))
        ranges += [(lo, lo + n - 1) for lo, n in axes]
        where = g.cond(ranges) if draw(st.booleans()) else None
        init = Leaf(g.read(out_ranges)) if draw(st.integers(0, 3)) == 0 else None
        red = Reduction(kind, axes, where, init)
    source, _ = g.node(ranges, draw(st.integers(0, 2)))
    outer = g.outer(out_ranges) if red is not None else Hole()
    return Case(out_shape, (), g.positive, red, source, outer, seed)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """A compute `Y` over one or two placeholders of rank 0-3."""
    ranks = tuple(draw(st.lists(st.sampled_from((2, 1, 3, 0)), min_size=1, max_size=2)))
    g = _Gen(draw, ranks, draw(st.booleans()))
    case = _stage(draw, g, draw(st.integers(0, 2**32 - 1)))
    return replace(case, in_shapes=g.shapes())


@dataclass(frozen=True)
class Chain:
    """`Z = first(A, B)`, then `Y = second(Z, A, B)`: tensor 0 of `second` is Z."""

    first: Case
    second: Case


@st.composite
def chains(draw: st.DrawFn) -> Chain:
    first = draw(cases())
    shapes = (first.out_shape,) + first.in_shapes
    g = _Gen(draw, tuple(len(s) for s in shapes), False, shapes)
    second = _stage(draw, g, first.seed)
    return Chain(first, replace(second, in_shapes=shapes))


def features(case: Case) -> list[str]:
    """What a case exercises (reported by --hypothesis-show-statistics)."""
    out: set[str] = set()
    nout = len(case.out_shape)
    red = case.reduction
    out.add(f"reduction {red.kind} over {len(red.axes)} axes" if red else "no reduction")
    if red and red.where:
        out.add("where=")
    if red and red.init:
        out.add("init=")
    used: set[int] = set()

    def visit(n: Node | None) -> None:
        match n:
            case Leaf(read=r):
                out.add("guarded read" if r.guarded else "in-bounds read (computed extent)")
                slots = [s for a in r.index for s, _ in a.terms]
                used.update(slots)
                if len(slots) != len(set(slots)):
                    out.add("repeated variable")
                if any(a.div for a in r.index):
                    out.add("floordiv/floormod index")
                if any(abs(c) > 1 for a in r.index for _, c in a.terms):
                    out.add("stride > 1")
                if any(c < 0 for a in r.index for _, c in a.terms):
                    out.add("negative stride")
                firsts = [a.terms[0][0] for a in r.index if len(a.terms) == 1]
                if firsts != sorted(firsts):
                    out.add("transposed read")
            case Unary(fn=fn, arg=a):
                out.add(f"intrinsic {fn}")
                visit(a)
            case Binary(op=op, lhs=a, rhs=b):
                if op == "*" and isinstance(a, Leaf) and isinstance(b, Leaf):
                    out.add("product of two reads")
                visit(a)
                visit(b)
            case Select(then=a, other=b):
                out.add("if_then_else")
                visit(a)
                visit(b)

    for n in (case.source, case.outer, red.init if red else None):
        visit(n)
    if any(s not in used for s in range(nout)):
        out.add("broadcast (unused output axis)")
    return sorted(out)
