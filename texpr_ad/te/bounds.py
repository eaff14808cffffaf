"""Proving reads in bounds: each index dim is PROVEN, RUNTIME (checked by the kernel) or UNSAFE.

A read `X[g(i)]` at dim d is safe when `0 <= g <= extent - 1` over its iteration domain.
Both sides are "e >= 0" goals, proved by bounding `e` from below:

* the affine form of `e` (te.affine) is bounded atom by atom: an IterVar by its `lo` or
  `lo + extent - 1` (which may hold other axes: substituted until none is left, so bounds
  that depend on outer axes work), floordiv/floormod by constants, min/max, casts;
* what is left is affine in the symbolic dims (`te.var`, >= 0): nonnegative coefficients and
  constant prove the goal; a constant below zero means the read can fall outside (UNSAFE);
  symbolic dims or tensor values (a read in the index or in an axis bound) make it RUNTIME.

Guards are facts `f >= 0` collected from select conditions, `where=` and the left side of
`&`/`|` (`te.all`/`te.any` padding idioms): the goal `e >= 0` also holds when
`e - f` (or `e - f1 - f2`) is bounded below by 0.  Example, padding:

    P[h] = if_then_else(all(h - 1 >= 0, h - 1 < 4), X[h - 1], 0)    facts: h - 1 >= 0, 3 - (h - 1) >= 0
    goal h - 1 >= 0:        (h - 1) - (h - 1) = 0 >= 0           PROVEN
    goal 3 - (h - 1) >= 0:  (3 - (h - 1)) - (3 - (h - 1)) = 0    PROVEN

A read whose guard is false (a fact bounded above below 0) or whose axes are empty is dead.
What the substitution cannot prove over a static domain of at most ENUMERATE_MAX points is
settled by enumerating it (TOPI's adaptive pooling writes a window end as a ceil by select).
Reads the kernels must check are reported by `unproven_dims`; `te.compute` rejects UNSAFE ones.

Every part is bounded, so a definition never hangs: the prover per read dim (BUDGET steps,
MAX_DEPTH nesting, TIME_BUDGET seconds; then enumeration, else RUNTIME), `bound` (BOUND_WORK,
BOUND_DEPTH; then unknown), `guarded_reads` (GUARD_VISITS, MAX_FACTS; then a read's guards are
not tracked and it is checked at run time), and the walks over expressions are iterative.
"""
from __future__ import annotations

import time
from enum import Enum
from itertools import combinations
from typing import Any, Iterator, Sequence

from . import dtype as dt
from .affine import to_affine
from .expr import Call, Const, Expr, IterVar, Read, Reduce, Var
from .intervals import interval
from .ops import Op
from .visit import children, walk

Lin = tuple[dict[Expr, int], int]  # sum coeff * symbolic dim + const
MAX_PAIRS = 8  # facts beyond this count are used one at a time only


class Verdict(Enum):
    PROVEN = "proven"
    RUNTIME = "runtime"  # depends on symbolic dims or tensor values: checked when the kernel runs
    UNSAFE = "unsafe"  # can be out of bounds for every choice of symbolic dims and values


# -- bounds ----------------------------------------------------------------------------------

def _add(acc: dict[Expr, int], b: dict[Expr, int], k: int) -> None:
    for v, c in b.items():
        acc[v] = acc.get(v, 0) + k * c


BOUND_WORK = 2000  # atoms one `bound` call may visit (selects and min/max visit both sides)
BOUND_DEPTH = 32  # atoms nested inside atoms; past either limit the bound is unknown (None)


class _Work:
    """What one `bound` call has left to spend."""

    def __init__(self) -> None:
        self.left, self.depth = BOUND_WORK, 0


def bound(e: Expr, upper: bool, work: _Work | None = None) -> Lin | None:
    """A bound of integer `e` (upper or lower) affine in the symbolic dims; None: depends on
    tensor values (or unknown, or past the BOUND_WORK / BOUND_DEPTH budget)."""
    w = work or _Work()
    aff = to_affine(e)
    if aff is None:
        return None
    terms, c = aff
    acc: dict[Expr, int] = {}
    for atom, k in terms.items():
        b = _atom_bound(atom, upper if k > 0 else not upper, w)
        if b is None:
            return None
        _add(acc, b[0], k)
        c += k * b[1]
    return {v: k for v, k in acc.items() if k}, c


def _const_bound(e: Expr, upper: bool, work: _Work | None = None) -> int | None:
    b = bound(e, upper, work)
    return b[1] if b is not None and not b[0] else None


def _atom_bound(a: Expr, upper: bool, w: _Work) -> Lin | None:
    w.left -= 1
    if w.left < 0 or w.depth >= BOUND_DEPTH:
        return None
    w.depth += 1
    try:
        return _atom_bound_rule(a, upper, w)
    finally:
        w.depth -= 1


def _atom_bound_rule(a: Expr, upper: bool, w: _Work) -> Lin | None:
    match a:
        case Var():
            return {a: 1}, 0
        case IterVar(lo=lo, extent=n):
            return bound(lo + n - 1 if upper else lo, upper, w)
        case Call(op=Op.CAST, args=(x,)) if dt.is_int(x.dtype):
            return bound(x, upper, w)
        case Call(op=Op.FLOORDIV, args=(x, Const(value=int() as c))) if c > 0:
            b = bound(x, upper, w)
            if b is None or any(k % c for k in b[0].values()):
                return _interval_bound(a, upper)
            return {v: k // c for v, k in b[0].items()}, b[1] // c
        case Call(op=Op.FLOORMOD, args=(x, Const(value=int() as c))) if c > 0:
            iv = _interval_bound(a, upper)
            return iv if iv is not None else ({}, c - 1 if upper else 0)
        case Call(op=Op.MIN | Op.MAX, args=(x, y)):
            bx, by = _const_bound(x, upper, w), _const_bound(y, upper, w)
            pick = min if a.op is Op.MIN else max
            if bx is not None and by is not None:
                return {}, pick(bx, by)
            if upper == (a.op is Op.MIN):  # min's upper bound: either side's will do
                return bound(x, upper, w) or bound(y, upper, w)
            return None
        case Call(op=Op.SELECT, args=(_, x, y)):
            bx = _const_bound(x, upper, w)
            by = _const_bound(y, upper, w) if bx is not None else None
            if bx is None or by is None:
                return None
            return {}, (max if upper else min)(bx, by)
    return _interval_bound(a, upper)


def _lin_expr(b: Lin, dtype: str) -> Expr:
    out: Expr = Const(b[1], dtype)
    for v, k in b[0].items():
        out = out + k * v
    return out


def _interval_bound(a: Expr, upper: bool) -> Lin | None:
    if any(isinstance(x, (Read, Var)) for x in walk(a)):
        return None
    lo, hi = interval(a)
    v = hi if upper else lo
    return None if v is None else ({}, v)


# -- facts from conditions -----------------------------------------------------------------------

def facts(cond: Expr, holds: bool = True) -> list[Expr]:
    """Integer expressions known to be >= 0 where `cond` is `holds` (affine comparisons only)."""
    match cond:
        case Const(value=v):
            return [] if bool(v) == holds else [Const(-1, "int64")]  # false guard: a dead read
        case Call(op=Op.NOT, args=(x,)):
            return facts(x, not holds)
        case Call(op=Op.AND, args=(x, y)) if holds:
            return facts(x) + facts(y)
        case Call(op=Op.OR, args=(x, y)) if not holds:
            return facts(x, False) + facts(y, False)
        case Call(op=Op.LT | Op.LE | Op.GT | Op.GE | Op.EQ | Op.NE as op, args=(x, y)) \
                if dt.is_int(x.dtype) and dt.is_int(y.dtype):
            rel = op if holds else _NEGATE[op]
            return [Call(Op.NE, (x, y), "bool")] if rel is Op.NE else _compare(rel, x, y)
    return []


_NEGATE = {Op.LT: Op.GE, Op.LE: Op.GT, Op.GT: Op.LE, Op.GE: Op.LT, Op.EQ: Op.NE, Op.NE: Op.EQ}


def _compare(op: Op, x: Expr, y: Expr) -> list[Expr]:
    match op:
        case Op.LT:
            return [y - x - 1]
        case Op.LE:
            return [y - x]
        case Op.GT:
            return [x - y - 1]
        case Op.GE:
            return [x - y]
        case Op.EQ:
            return [x - y, y - x]
    return []


# -- reads with their guards --------------------------------------------------------------------

GUARD_VISITS = 20000  # (node, facts) pairs guarded_reads visits before it stops tracking guards
MAX_FACTS = 64  # facts tracked on one path (guards nested deeper stop being tracked there)
# An opaque fact `g >= 0` (g a symbolic dim no expression uses): it proves nothing, but a goal it
# appears in is never UNSAFE, only unproven (RUNTIME: checked when the kernel runs).
UNKNOWN_GUARD = Var("unknown_guard", "int64")


def guarded_reads(e: Expr, known: Sequence[Expr] = ()) -> Iterator[tuple[Read, tuple[Expr, ...]]]:
    """Every read in `e` (axis bounds of reductions included) with the facts that hold where it
    is evaluated: select branches and the right side of `&`/`|` are lazy, a reduction's source
    is evaluated only where its `where=` holds.

    A subexpression reached under several guards is visited once per distinct fact set.  Past
    GUARD_VISITS visits (selects nested on a shared value multiply the paths), or below more
    than MAX_FACTS guards, a node is visited with `known` and UNKNOWN_GUARD for facts: the work
    stays linear, and a read whose guards were not tracked is checked when the kernel runs
    instead of being rejected."""
    stack: list[tuple[Expr, tuple[Expr, ...]]] = [(e, tuple(known))]
    seen: set[tuple[int, tuple[Expr, ...]]] = set()  # a shared subexpression is visited once
    untracked = (*known, UNKNOWN_GUARD)
    while stack:
        x, fs = stack.pop()
        if len(seen) >= GUARD_VISITS or len(fs) > MAX_FACTS:
            fs = untracked
        if (id(x), fs) in seen:
            continue
        seen.add((id(x), fs))
        match x:
            case Read():
                yield x, fs
                stack.extend((i, fs) for i in x.indices)
            case Call(op=Op.SELECT, args=(c, a, b)):
                stack += [(c, fs), (a, fs + tuple(facts(c))), (b, fs + tuple(facts(c, False)))]
            case Call(op=Op.AND | Op.OR, args=(a, b)):
                stack += [(a, fs), (b, fs + tuple(facts(a, x.op is Op.AND)))]
            case Reduce():  # a gated axis (extent `select(c, E, 0)`) runs only where c holds
                inner = fs + tuple(facts(x.condition)) + tuple(
                    f for ax in x.axis if _gated(ax.extent) for f in facts(ax.extent.args[0]))  # type: ignore[attr-defined]
                stack += [(s, inner) for s in x.source] + [(i, fs) for i in x.init]
                stack.append((x.condition, fs))
                stack += [(b, fs) for ax in x.axis for b in (ax.lo, ax.extent)]
            case _:
                stack.extend((c, fs) for c in children(x))


# -- the prover ---------------------------------------------------------------------------------

# The prover's budget per read dim; past any of them the goal is unproven (RUNTIME: enumerated
# if the domain is small and static, else checked when the kernel runs), never a hang.  The
# registry and all Relax legalizations need at most ~250 steps and depth 16 (adaptive pooling).
BUDGET = 1000  # substitution steps
MAX_DEPTH = 24  # nested substitutions on one path (TOPI's reflect padding nests selects deeply)
TIME_BUDGET = 0.5  # seconds: a backstop for huge expressions, where one step is already slow


def _and(a: Verdict, b: Verdict) -> Verdict:
    if Verdict.UNSAFE in (a, b):
        return Verdict.UNSAFE
    return Verdict.RUNTIME if Verdict.RUNTIME in (a, b) else Verdict.PROVEN


def _or(a: Verdict, b: Verdict) -> Verdict:
    if Verdict.PROVEN in (a, b):
        return Verdict.PROVEN
    return Verdict.RUNTIME if Verdict.RUNTIME in (a, b) else Verdict.UNSAFE


def _gated(n: Expr) -> bool:
    """An extent `select(c, E, 0)`: the loop is empty where c fails (deriv.solver's gate)."""
    return (isinstance(n, Call) and n.op is Op.SELECT and isinstance(n.args[2], Const)
            and n.args[2].value == 0 and dt.is_int(n.dtype))


def _live_extent(n: Expr) -> Expr:
    """`max(E, 0)` and `select(c, E, 0)` are E wherever the loop runs (an empty loop reads nothing)."""
    while _gated(n):
        n = n.args[1]  # type: ignore[attr-defined]
    while isinstance(n, Call) and n.op is Op.MAX:
        a, b = n.args
        if isinstance(b, Const) and b.value == 0:
            n = a
        elif isinstance(a, Const) and a.value == 0:
            n = b
        else:
            break
    return n


def _excluded(v: IterVar, known: Sequence[Expr]) -> set[int]:
    """Constants `v` differs from (`c != 0` guards of `c == 0 ? ... : c == 1 ? ... : X[c - 2]`)."""
    out = set()
    for f in known:
        if isinstance(f, Call) and f.op is Op.NE:
            x, y = f.args
            if isinstance(y, IterVar):
                x, y = y, x
            if x.same_as(v) and isinstance(y, Const):
                out.add(int(y.value))
    return out


def _inside(a: Expr) -> Iterator[Expr]:
    if isinstance(a, IterVar):
        yield from walk(a.lo)
        yield from walk(a.extent)
    else:
        yield from walk(a)


def _multiples(e: Expr, f: Expr) -> list[int]:
    """Positive m for which `e - m * f` cancels an atom of `e` (1 always)."""
    ae, af = to_affine(e), to_affine(f)
    ms = {1}
    if ae is not None and af is not None:
        for a, k in af[0].items():
            q, r = divmod(ae[0].get(a, 0), k)
            if r == 0 and q > 1:
                ms.add(q)
    return sorted(ms)


class _Prover:
    """Substitutes atoms by their extreme values, innermost first, until only symbolic dims are
    left: `e >= 0` is then PROVEN, RUNTIME or UNSAFE (see the module docstring)."""

    def __init__(self) -> None:
        self.steps = 0
        self.depth = 0
        self.deadline = time.monotonic() + TIME_BUDGET

    def exhausted(self) -> bool:
        return self.steps > BUDGET or self.depth > MAX_DEPTH or time.monotonic() > self.deadline

    def goal(self, e: Expr, known: Sequence[Expr]) -> Verdict:
        """`e >= 0` using the facts `known` (one at a time, or two)."""
        if self.exhausted():
            return Verdict.RUNTIME
        lin = [f for f in known if dt.is_int(f.dtype)]
        cands = [e, *(e - m * f for f in lin for m in _multiples(e, f))]
        if len(lin) <= MAX_PAIRS:
            cands += [e - f - g for f, g in combinations(lin, 2)]
        out = Verdict.UNSAFE
        for d in cands:
            out = _or(out, self.prove(d, known))
            if out is Verdict.PROVEN or self.exhausted():
                break
        return out

    def prove(self, e: Expr, known: Sequence[Expr]) -> Verdict:
        self.steps += 1
        if self.exhausted():
            return Verdict.RUNTIME
        self.depth += 1
        try:
            return self._prove(e, known)
        finally:
            self.depth -= 1

    def _prove(self, e: Expr, known: Sequence[Expr]) -> Verdict:
        aff = to_affine(e)
        if aff is None:
            return Verdict.RUNTIME
        terms, c = aff
        atoms = [a for a in terms if not isinstance(a, Var)]
        if not atoms:
            if c >= 0 and all(k >= 0 for k in terms.values()):
                return Verdict.PROVEN
            return Verdict.RUNTIME if terms else Verdict.UNSAFE
        # outermost first: an atom inside another atom or in an axis' bounds waits for it
        inner = {x for a in atoms for x in _inside(a) if x is not a}
        ready = [a for a in atoms if a not in inner] or atoms
        composite = [a for a in ready if not isinstance(a, IterVar)]
        a = composite[0] if composite else max(ready, key=lambda v: v.uid)  # type: ignore[attr-defined]
        k = terms[a]
        rest = e - k * a
        return self.atom(a, k, rest, known)

    def atom(self, a: Expr, k: int, rest: Expr, known: Sequence[Expr]
             ) -> Verdict:
        """Prove `rest + k * a >= 0` by replacing atom `a` (k > 0 wants its minimum)."""
        low = k > 0
        sub = lambda x: self.prove(rest + k * x, known)  # noqa: E731
        match a:
            case IterVar(lo=lo, extent=n):
                if low:
                    ex = _excluded(a, known)
                    if isinstance(lo, Const) and int(lo.value) in ex:
                        m = int(lo.value)
                        while m in ex:
                            m += 1
                        lo = Const(m, lo.dtype)
                    return sub(lo)
                return sub(lo + _live_extent(n) - 1)
            case Call(op=Op.CAST, args=(x,)) if dt.is_int(x.dtype) and \
                    dt.NARROW.get(x.dtype, (k, k))[0] <= k <= dt.NARROW.get(x.dtype, (k, k))[1]:
                # built without the operators: they would cast `x` back to `rest`'s dtype (a `k`
                # that `x`'s narrow dtype cannot hold, -1 for a uint8 index: the interval below)
                kx = Call(Op.MUL, (Const(k, x.dtype), x), x.dtype)
                return self.prove(Call(Op.ADD, (rest, kx), rest.dtype), known)
            case Call(op=Op.MIN | Op.MAX, args=(x, y)):
                both = low == (a.op is Op.MIN)  # min's minimum: both sides must do
                vx = sub(x)
                if both:
                    return _and(vx, sub(y)) if vx is not Verdict.UNSAFE else vx
                return vx if vx is Verdict.PROVEN else _or(vx, sub(y))
            case Call(op=Op.SELECT, args=(cond, x, y)):
                vx = self.goal(rest + k * x, [*known, *facts(cond)])
                return _and(vx, self.goal(rest + k * y, [*known, *facts(cond, False)]))
            case Call(op=Op.FLOORDIV, args=(y, Const(value=int() as c))) \
                    if c > 0 and dt.is_int(a.dtype):
                # y // c at its extreme floor(min y / c) or floor(max y / c), where y's bound is
                # free of loop axes; else c * (rest + k * (y // c)) = c * rest + k * (y - y % c),
                # exact and affine in y (reshapes: `x - 6 * (x // 6)` cancels to `x % 6`)
                b = bound(y, not low)
                v = Verdict.UNSAFE
                if b is not None and all(kv % c == 0 for kv in b[0].values()):
                    v = sub(_lin_expr(({x: kv // c for x, kv in b[0].items()}, b[1] // c), a.dtype))
                if v is Verdict.PROVEN:
                    return v
                return _or(v, self.prove(c * rest + k * (y - Call(Op.FLOORMOD, (y, Const(c, y.dtype)),
                                                                   a.dtype)), known))
            case Call(op=Op.FLOORMOD, args=(y, Const(value=int() as c))) if c > 0:
                ilo, ihi = interval(a) if not any(isinstance(x, (Read, Var)) for x in walk(a)) \
                    else (None, None)
                return sub(Const((0 if ilo is None else ilo) if low else
                                 (c - 1 if ihi is None else ihi), a.dtype))
            case Read():
                return Verdict.RUNTIME
        b = _interval_bound(a, not low)
        return Verdict.RUNTIME if b is None else sub(Const(b[1], a.dtype))


def dead(idx: Sequence[Expr], known: Sequence[Expr]) -> bool:
    """The read never happens: a guard is false everywhere, or an axis it uses is empty."""
    if any(dt.is_int(f.dtype) and (b := _const_bound(f, True)) is not None and b < 0
           for f in known):
        return True
    axes = {x for i in idx for x in walk(i) if isinstance(x, IterVar)}
    return any((n := _const_bound(a.extent, True)) is not None and n <= 0 for a in axes)


def dim_verdict(index: Expr, extent: Expr, known: Sequence[Expr] = ()) -> Verdict:
    """Is `0 <= index < extent` wherever the facts `known` hold (both sides proven)?  Where the
    prover fails (or runs out of budget) on constant bounds, a small domain is settled by
    enumerating it."""
    p = _Prover()
    v = p.goal(index, known)
    if v is not Verdict.UNSAFE:
        v = _and(v, p.goal(extent - 1 - index, known))
    if v is not Verdict.PROVEN and (e := enumerate_in_bounds(index, extent, known)) is not None:
        return Verdict.PROVEN if e else Verdict.UNSAFE
    return v


ENUMERATE_MAX = 1 << 16  # points


def enumerate_in_bounds(index: Expr, extent: Expr, known: Sequence[Expr]) -> bool | None:
    """`0 <= index < extent` at every point where `known` holds, by enumeration; None when the
    domain is symbolic, data-dependent or larger than ENUMERATE_MAX."""
    return enumerate_holds(Call(Op.AND, (index >= 0, index < extent), "bool"), known)


def enumerate_holds(cond: Expr, known: Sequence[Expr] = ()) -> bool | None:
    """Whether bool `cond` holds at every point (of the axes it and `known` use) where `known`
    holds, by enumeration; None when the domain is symbolic, data-dependent or larger than
    ENUMERATE_MAX."""
    import numpy as np
    exprs = [cond, *known]
    axes: set[IterVar] = set()
    todo = [x for e in exprs for x in walk(e) if isinstance(x, IterVar)]
    while todo:
        a = todo.pop()
        if a not in axes:
            axes.add(a)
            todo += [x for b in (a.lo, a.extent) for x in walk(b) if isinstance(x, IterVar)]
    if any(isinstance(x, (Var, Read)) for e in exprs + [b for a in axes for b in (a.lo, a.extent)]
           for x in walk(e)):
        return None
    env: dict[Expr, Any] = {}
    npts = 1
    for a in sorted(axes, key=lambda v: v.uid):  # an axis' bounds use earlier axes only
        lo = np.broadcast_to(int_eval(a.lo, env, npts), (npts,))
        cnt = np.maximum(np.broadcast_to(int_eval(a.extent, env, npts), (npts,)), 0)
        total = int(cnt.sum())
        if total > ENUMERATE_MAX:
            return None
        rep = np.repeat(np.arange(npts), cnt)
        offs = np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        env = {k: v[rep] for k, v in env.items()}
        env[a] = np.repeat(lo, cnt) + offs
        npts = total
    live = np.ones(npts, bool)
    for f in known:
        val = int_eval(f, env, npts)
        live &= val.astype(bool) if f.dtype == "bool" else val >= 0
    return bool(np.all(np.broadcast_to(int_eval(cond, env, npts), (npts,)).astype(bool) | ~live))


def int_eval(e: Expr, env: dict[Expr, Any], npts: int) -> Any:
    """Integer/bool expression `e` at every enumerated point (eager selects, no division by 0).
    Iterative, a shared subexpression evaluated once: depth and sharing cost no more than the
    distinct nodes."""
    memo: dict[int, Any] = {}
    stack: list[tuple[Expr, bool]] = [(e, False)]
    while stack:
        x, ready = stack.pop()
        if id(x) in memo:
            continue
        kids = x.args if isinstance(x, Call) else ()
        if kids and not ready:
            stack.append((x, True))
            stack += [(k, False) for k in kids if id(k) not in memo]
            continue
        memo[id(x)] = _int_node(x, [memo[id(k)] for k in kids], env, npts)
    return memo[id(e)]


def _int_node(e: Expr, args: list[Any], env: dict[Expr, Any], npts: int) -> Any:
    """`int_eval` of node `e`, given its arguments' values."""
    import numpy as np
    from .interp import NUMPY_IMPL
    match e:
        case Const(value=v):
            return np.full(npts, v, dtype=bool if isinstance(v, bool) else np.int64)
        case IterVar():
            return env[e]
        case Call(op=Op.CAST):
            return args[0].astype(bool) if e.dtype == "bool" else args[0].astype(np.int64)
        case Call(op=Op.SELECT):
            return np.where(*args)
        case Call(op=Op.FLOORDIV | Op.FLOORMOD | Op.DIV):
            return NUMPY_IMPL[e.op](args[0], np.where(args[1] == 0, 1, args[1]))
        case Call(op=op):
            return NUMPY_IMPL[op](*args)
    raise TypeError(f"cannot enumerate `{e}`")


def read_verdicts(r: Read, known: Sequence[Expr] = ()) -> list[Verdict]:
    """One verdict per dim of read `r`."""
    if dead(r.indices, known):
        return [Verdict.PROVEN] * len(r.indices)
    return [dim_verdict(i, n, known) for i, n in zip(r.indices, r.tensor.shape, strict=True)]


def unproven_dims(exprs: Sequence[Expr], known: Sequence[Expr] = ()) -> dict[Read, set[int]]:
    """The dims of reads in `exprs` not proven in bounds: a kernel checks them when it runs."""
    out: dict[Read, set[int]] = {}
    for e in exprs:
        for r, fs in guarded_reads(e, known):
            for d, v in enumerate(read_verdicts(r, fs)):
                if v is not Verdict.PROVEN:
                    out.setdefault(r, set()).add(d)
    return out
