"""Reductions for both AD modes: recognizing custom reducers as built-ins, and one
linearization per built-in kind (`LINEARIZE`) that forward and reverse mode both read.

Custom reducers that are sum/prod/max/min on one component are rewritten first:

`te.comm_reducer(lambda x, y: x + y, ...)` is a sum, and the value component of
an argmax reducer, `select(x1 >= y1, x1, y1)`, is a max: such reductions are
rewritten to the built-in kind so the differentiator's rules apply.  Other
custom reducers are not differentiable (an error names them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .. import te
from ..te import dtype as dt
from ..te import reduce as tr
from ..te.expr import Call, Const, Expr, IterVar, Reduce, ReduceKind, Var, const
from ..te.ops import Op
from ..te.tensor import Tensor
from ..te.visit import free_vars, substitute
from .errors import NotDifferentiableError

_MAX, _MIN = ReduceKind.MAX, ReduceKind.MIN
_BUILTIN = {ReduceKind.SUM: tr.sum, ReduceKind.PROD: tr.prod, _MAX: tr.max, _MIN: tr.min}
_SYMMETRIC = {Op.ADD: ReduceKind.SUM, Op.MUL: ReduceKind.PROD, Op.MAX: _MAX, Op.MIN: _MIN}
# select(x OP y, x, y): which extreme it keeps
_SELECT_KEEP_X = {Op.GE: _MAX, Op.GT: _MAX, Op.LE: _MIN, Op.LT: _MIN}


def classify(result: Expr, x: Var, y: Var) -> ReduceKind | None:
    """The built-in kind of `result` as a function of (x, y), or None."""
    if set(free_vars(result)) - {x, y}:
        return None
    match result:
        case Call(op=op, args=(a, b)) if op in _SYMMETRIC and {a, b} == {x, y} and not a.same_as(b):
            return _SYMMETRIC[op]
        case Call(op=Op.SELECT, args=(Call(op=cmp, args=(ca, cb)), t, f)) if cmp in _SELECT_KEEP_X:
            kind = _SELECT_KEEP_X[cmp]
            flip = {_MAX: _MIN, _MIN: _MAX}
            if ca.same_as(y) and cb.same_as(x):  # y OP x
                kind = flip[kind]
            elif not (ca.same_as(x) and cb.same_as(y)):
                return None
            if t.same_as(x) and f.same_as(y):
                return kind
            if t.same_as(y) and f.same_as(x):
                return flip[kind]
    return None


def as_builtin(body: Reduce) -> Reduce | None:
    """`body` as a single-source built-in reduction, or None when it is not one."""
    comb = body.combiner
    if comb.kind in _BUILTIN:
        return _guard_as_condition(body)
    k = body.value_index
    kind = classify(comb.result[k], comb.lhs[k], comb.rhs[k])
    if kind is None:
        return None
    builtin = _BUILTIN[kind].make([body.dtype])
    init = (body.init[k],) if body.init else ()
    return _guard_as_condition(Reduce(builtin, (body.source[k],), body.axis, body.condition, 0,
                                      body.dtype, init))


# the value a max/min element takes where a guard masks it out: the reduction's identity
_IDENTITY: dict[ReduceKind, Callable[[str], Expr]] = {_MAX: tr.min_value, _MIN: tr.max_value}


def _guard_as_condition(body: Reduce) -> Reduce:
    """`max_r select(c, v, -inf)` (padding written as a guard in the body) is `max_{r : c} v`:
    the guard joins the reduction's condition, so masked elements are not counted as attaining
    the extreme (a window of -inf keeps its whole cotangent, as with `where=`) and the
    arg-extreme code skips them.  Values are unchanged; likewise min with +inf."""
    ident = _IDENTITY.get(body.combiner.kind)
    match body.source[0]:
        case Call(op=Op.SELECT, args=(c, v, Const() as f)) if ident and f.same_as(ident(body.dtype)):
            cond = c if _is_true(body.condition) else body.condition & c
            return Reduce(body.combiner, (v,), body.axis, cond, 0, body.dtype, body.init)
    return body


def _is_true(e: Expr) -> bool:
    return isinstance(e, Const) and e.value is True


def builtin_or_raise(body: Reduce, where: str) -> Reduce:
    """`as_builtin(body)`, or a NotDifferentiableError naming the custom reducer."""
    b = as_builtin(body)
    if b is None:
        raise NotDifferentiableError(
            f"{where}: custom reducer {body.combiner.name or 'reducer'!r} has a float output that is "
            "not a sum/prod/max/min of its component; only those reductions are differentiable")
    return b


# -- one linearization per reduction kind, read by both AD modes --------------------------
#
# A built-in reduction `Y[i] = init(i) (+) reduce_{r : cond} src(i, r)` is linearized as
#
#     dY[i] = sum_{r : src_guards} src_scale(d src(i, r)) + [init_guards] init_scale(d init(i))
#
# Forward mode (`forward.py`) applies the scales to tangents; reverse mode (`adjoint.py`)
# applies them to the head and transposes the sum into gathers/scatters.  A scale is a function,
# not a coefficient, so `x / cnt` stays a division (one rounding) and a unit scale adds no `* 1`.

Scale = Callable[[Expr], Expr]


@dataclass(frozen=True)
class Linearization:
    src_scale: Scale
    src_guards: tuple[Expr, ...]     # over the data and reduce axes
    init_scale: Scale
    init_guards: tuple[Expr, ...]    # over the data axes


def _same(x: Expr) -> Expr:
    return x


def _sub(e: Expr, data: tuple[IterVar, ...], i: tuple[IterVar, ...]) -> Expr:
    return substitute(e, dict(zip(data, i, strict=True)))


def _sum(body: Reduce, Y: Tensor, data: tuple[IterVar, ...]) -> Linearization:
    """sum: d Y / d src(i, r) = 1 where the condition holds; d Y / d init = 1."""
    return Linearization(_same, (body.condition,), _same, ())


def attains(v: Expr, y: Expr) -> Expr:
    """`v` takes part in the max/min `y` of its window: `v == y`, or `y` is NaN (max and min
    propagate NaN).  A NaN extreme equals no element, so every element's share of it is
    0 / 0 = NaN (JAX's max, PyTorch's amax): its window is credited with a NaN count
    (`tie_count`, `ArgExtreme`), and the whole window's gradient is NaN."""
    return v.eq(y) | y.ne(y) if v.dtype.startswith("float") else v.eq(y)


def _nan_if_nan(y: Expr, n: Expr) -> Expr:
    """`n`, or NaN (`y` itself) where the extreme `y` is NaN: the count of a NaN extreme."""
    return te.if_then_else(y.eq(y), n, y)


def tie_count(body: Reduce, Y: Tensor, data: tuple[IterVar, ...]) -> Tensor:
    """`cnt[i] = sum_r [src(i, r) == Y[i]]` (+ the init): how many attain the extreme; NaN
    where Y[i] is NaN (`attains`)."""
    one, zero, y = const(1.0, Y.dtype), const(0.0, Y.dtype), Y[data]
    start = te.if_then_else(body.init[0].eq(y), one, zero) if body.init else zero
    n = te.sum(te.if_then_else(body.source[0].eq(y), one, zero), axis=list(body.axis),
               where=body.condition, init=_nan_if_nan(y, start))  # one stage, no epilogue
    return _at(Y.shape, n, data, f"{Y.name}_ties")


def _at(shape: tuple[Expr, ...], e: Expr, data: tuple[IterVar, ...], name: str) -> Tensor:
    """`e`, written over the forward stage's axes `data`, as a stage of its own (its reductions'
    bounds may use `data`: `reduce_axis((offsets[s], offsets[s + 1]))`; `substitute` moves them)."""
    return te.compute(shape, lambda *i: _sub(e, data, i), name=name, tag="adjoint")


def _extreme(body: Reduce, Y: Tensor, data: tuple[IterVar, ...]) -> Linearization:
    """max/min: the derivative goes to the arg-extremes, init included; ties split it evenly,
    and a NaN result's is NaN over its whole window (JAX's max, PyTorch's amax; `attains`).

        cnt[i] = sum_r [src(i, r) == Y[i]] + [init(i) == Y[i]]    (NaN where Y[i] is NaN)
        d Y / d src(i, r) = [src(i, r) attains Y[i]] / cnt[i]     d Y / d init(i) = [init(i) attains Y[i]] / cnt[i]
    """
    cnt, yi = tie_count(body, Y, data)[data], Y[data]
    share: Scale = lambda x: x / cnt  # noqa: E731
    init_guards = (attains(body.init[0], yi),) if body.init else ()
    return Linearization(share, (body.condition, attains(body.source[0], yi)), share, init_guards)


@dataclass(frozen=True)
class ArgExtreme:
    """max/min through *where* it is attained, for a reverse mode that scatters each output's
    cotangent to its one arg-extreme instead of gathering over every window a point lies in.
    The forward keeps one integer per output (a reduction that reads no cotangent, so
    `schedule/residuals.py` computes it in the forward), over a window of constant size R:

        code[i] = sum_{r : cond, src(i, r) attains Y[i]} (M + lin(r))      0 <= lin(r) < R

    with M = R(R-1)/2 + 1 > the sum of any distinct lin(r), so the tie count is `code // M`, and
    where it is 1 the arg-extreme is `r = unravel(code - M)`.
    The convention is `_extreme`'s: ties (rare) still split the cotangent evenly, and a NaN
    extreme (every element attains it) is tied with a NaN count.
    """

    pin: dict[IterVar, Expr]   # each reduce axis at the unique arg-extreme, from code[i]
    unique: Expr               # one element attains Y[i] (M <= code < M + R: `pin` is in the window)
    tied: Expr                 # several do
    share: Scale               # x / (their count)


def arg_extreme(body: Reduce, Y: Tensor, data: tuple[IterVar, ...]) -> ArgExtreme | None:
    """The `ArgExtreme` of a built-in max/min without init over constant-size axes, else None."""
    if body.combiner.kind not in (_MAX, _MIN) or body.init:
        return None
    if not all(isinstance(a.lo, Const) and isinstance(a.extent, Const) and a.extent.value > 0
               for a in body.axis):
        return None
    extents = [int(a.extent.value) for a in body.axis]  # type: ignore[attr-defined]
    strides = [math.prod(extents[k + 1:]) for k in range(len(extents))]
    size = math.prod(extents)
    big = size * (size - 1) // 2 + 1       # M
    top = (size + 1) * big                 # > any code
    itype = "int32" if top < 2 ** 31 else "int64" if top < 2 ** 63 else None
    if itype is None:
        return None
    src = body.source[0]

    def code(*i: IterVar) -> Expr:
        pos: Expr = const(big, itype)
        for a, st in zip(body.axis, strides, strict=True):
            off = a if isinstance(a.lo, Const) and a.lo.value == 0 else a - a.lo
            pos = pos + (off * const(st, a.dtype) if st > 1 else off).astype(itype)
        hit = te.if_then_else(attains(_sub(src, data, i), Y[i]), pos, const(0, itype))
        return te.sum(hit, axis=list(body.axis), where=_sub(body.condition, data, i))

    c = te.compute(Y.shape, code, name=f"{Y.name}_argext", tag="adjoint")[data]
    at = c - const(big, itype)
    pin: dict[IterVar, Expr] = {}
    for k, (a, ext, st) in enumerate(zip(body.axis, extents, strides, strict=True)):
        q = te.floordiv(at, const(st, itype)) if st > 1 else at
        q = te.floormod(q, const(ext, itype)) if k > 0 else q
        pin[a] = a.lo + q.astype(a.dtype)
    y = Y[data]
    count = _nan_if_nan(y, te.floordiv(c, const(big, itype)).astype(Y.dtype))
    unique = (c < const(big + size, itype)) & (c >= const(big, itype))
    tied = c >= const(2 * big, itype)
    if dt.is_float(Y.dtype):  # a NaN extreme: the whole window shares it, each share NaN
        unique, tied = unique & y.eq(y), tied | y.ne(y)
    return ArgExtreme(pin, unique, tied, lambda x: x / count)


def _prod(body: Reduce, Y: Tensor, data: tuple[IterVar, ...]) -> Linearization:
    """prod: `Y = init * prod_r src`, each factor's derivative without dividing by zero.  With
    z = #zero factors, p = the product of the non-zero ones (init counted as a factor) and
    s = z - stop_gradient(z), which is 0 but has the derivative of the zero factors' sum (z
    counts each zero factor f as 1 + f),

        d Y / d f = p c / f,  c = 1 if z == 0, s if z == 1, else 0    where f != 0
                  = [z == 1] p + [z == 2] p (s - f)                where f == 0

    Each branch is the product of the other factors near the point too, not only at it, so
    differentiating again is right where factors are zero (d/dg of p s / f is p / f for the
    zero factor g; branching on z alone lost those terms: a Hessian through prod was wrong).
    """
    src = body.source[0]
    one, zero, two = const(1.0, Y.dtype), const(0.0, Y.dtype), const(2.0, Y.dtype)
    init = body.init[0] if body.init else None
    zeros = te.sum(te.if_then_else(src.eq(zero), one + src, zero), axis=list(body.axis),
                   where=body.condition)
    nonzero_prod = te.prod(te.if_then_else(src.eq(zero), one, src), axis=list(body.axis),
                           where=body.condition)
    if init is not None:
        zeros = zeros + te.if_then_else(init.eq(zero), one + init, zero)
        nonzero_prod = nonzero_prod * te.if_then_else(init.eq(zero), one, init)
    z = _at(Y.shape, zeros, data, f"{Y.name}_zeros")[data]
    p = _at(Y.shape, nonzero_prod, data, f"{Y.name}_nonzero_prod")[data]
    s = z - te.stop_gradient(z)

    def partial(f: Expr) -> Expr:
        at_zero = te.if_then_else(z.eq(one), p, te.if_then_else(z.eq(two), p * (s - f), zero))
        off_zero = p * te.if_then_else(z.eq(zero), one, te.if_then_else(z.eq(one), s, zero)) / f
        return te.if_then_else(f.eq(zero), at_zero, off_zero)

    def by(f: Expr) -> Scale:
        return lambda x: x * partial(f)

    return Linearization(by(src), (body.condition,), by(init) if init is not None else _same, ())


# built-in reduction kind -> its linearization `(body, Y, data) -> Linearization`
LINEARIZE: dict[ReduceKind, Callable[[Reduce, Tensor, tuple[IterVar, ...]], Linearization]] = {
    ReduceKind.SUM: _sum, _MAX: _extreme, _MIN: _extreme, ReduceKind.PROD: _prod,
}


def linearize(body: Reduce, Y: Tensor, data: tuple[IterVar, ...], where: str) -> tuple[Reduce, Linearization]:
    """The built-in form of reduction `body` (stage output `Y` over `data`) and its linearization."""
    b = builtin_or_raise(body, where)
    return b, LINEARIZE[b.combiner.kind](b, Y, data)
