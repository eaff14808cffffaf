"""Normal forms of a contraction's operands, so that how a user writes an operator does not
decide whether it reaches the fast path (used by `contraction.py`).

A convolution's input is read either through a separate padding stage (the registry's
`nn.conv2d`) or through a guard in the body (`if_then_else(in_range, X[h + r - 1, ..], 0)`,
and the gathers of derived adjoints carry the same guards).  Both are one *guarded read*:

    guard(e) = (cond, X[idx])   where e == if_then_else(cond, X[idx], 0)   (cond: True if none)

`gather_operand` returns that form for an operand, with padding-like producers folded in:
a read `P[j]` of a stage `P[i] = if_then_else(c(i), X[f(i)], 0)` (or `P[i] = X[f(i)]`) is
`if_then_else(c(j), X[f(j)], 0)`, recursively.  Folding only re-evaluates a select and an
affine index at each gathered element, which the gather does anyway, and it spares the
materialized padded copy (see `cpu.drop_unread`).

The adjoint of a convolution wrt its input comes out of the index solver as a sum whose
window bounds depend on the output point (`r` in `[max(h - 10, 0), min(h + 1, 2) + 1)`):
the guards became iteration bounds.  `boxed` turns them back into a guard over the constant
hull of the windows (`r` in `[0, 3)`, guard `max(h - 10, 0) <= r < min(h + 1, 2) + 1`) when
the hull is at most `BOX_MAX_RATIO` times the widest windows, so the sum is again a
contraction with a guarded gather (the head convolved with the weight).

A strided window's adjoint may come *gated* (`deriv.solver.invert(gate=True)`: a condition on
the output point alone is the first reduction axis' extent `select(c, E, 0)`); `ungated` gives
`normal_form` that sum as `where=c` over [lo, lo + E), the form the GEMM strategies take.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..te.bounds import ENUMERATE_MAX, int_eval
from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce, Var, const, is_zero
from ..te.intrin import all as te_all
from ..te.ops import Op
from ..te.simplify import simplify
from ..te.tensor import ComputeOp, PlaceholderOp
from ..te.visit import bounds_depend_on_axes, substitute, walk

FOLD_DEPTH = 4  # padding-like producers folded into one gather at most (a pad of a pad ...)
BOX_MAX_RATIO = 2.0  # hull of dependent reduction windows / widest windows, at most (work)


@dataclass(frozen=True)
class Guarded:
    """`if_then_else(cond, read, 0)`; `cond` is None when the read is unconditional.
    `folded`: names of the padding-like stages substituted to reach `read`."""

    cond: Expr | None
    read: Read
    folded: tuple[str, ...] = ()

    @property
    def expr(self) -> Expr:
        if self.cond is None:
            return self.read
        return Call(Op.SELECT, (self.cond, self.read, const(0.0, self.read.dtype)), self.read.dtype)


def guard(e: Expr) -> Guarded | None:
    """`e` as a guarded read (cond free of tensor reads), or None."""
    match e:
        case Read():
            return Guarded(None, e)
        case Call(op=Op.SELECT, args=(c, Read() as r, z)) if is_zero(z) and not any(
                isinstance(x, (Read, Reduce)) for x in walk(c)):
            return Guarded(c, r)
    return None


def _and(a: Expr | None, b: Expr | None) -> Expr | None:
    if a is None or b is None:
        return b if a is None else a
    return Call(Op.AND, (a, b), "bool")


def _producer(r: Read) -> Guarded | None:
    """The guarded read that defines the element `r` reads, when `r.tensor` is a padding-like
    stage (one body that is a guarded read of another tensor), else None."""
    op = r.tensor.op
    if isinstance(op, PlaceholderOp) or not isinstance(op, ComputeOp) or len(op.body) != 1:
        return None
    g = guard(op.body[0])
    if g is None or g.read.dtype != r.dtype:
        return None
    sub: dict = dict(zip(op.axis, r.indices, strict=True))
    cond = None if g.cond is None else simplify(substitute(g.cond, sub))
    read = simplify(substitute(g.read, sub))
    if not isinstance(read, Read):
        return None
    return Guarded(cond, read, (op.name,))


def gather_operand(e: Expr) -> Guarded | None:
    """`e` as a guarded read with padding-like producers folded in (see the module docstring)."""
    g = guard(e)
    return None if g is None else folded(g)


def folded(g: Guarded, cond: Expr | None = None) -> Guarded:
    """`g` with the padding-like producers of its read folded in, read only where `cond` holds
    too."""
    for _ in range(FOLD_DEPTH):
        p = _producer(g.read)
        if p is None:
            break
        g = Guarded(_and(g.cond, p.cond), p.read, g.folded + p.folded)
    return Guarded(_and(cond, g.cond), g.read, g.folded)


def ungated(body: Reduce) -> Reduce:
    """`body` with each gated axis (extent `select(c, E, 0)`, an empty loop where c fails) over
    [lo, lo + E) and `c` in its `where=`: the same sum.  A strided dilated convolution's input
    gradient `sum_{f < select(j % 2 == 0, 8, 0), ry, rx}` is again `sum_{f < 8, ry, rx} where
    j % 2 == 0`, whose sum over f `cpu_contract.factor_contraction` pulls out (then `cpu_col2im`)."""
    sub: dict[IterVar, IterVar] = {}  # the axes rebuilt (gated, or bounds on a rebuilt one)
    conds = [body.condition]
    for k in body.axis:
        lo, ext = substitute(k.lo, sub), substitute(k.extent, sub)
        match ext:
            case Call(op=Op.SELECT, args=(c, e, z)) if is_zero(z):
                conds, ext = [*conds, c], e
        if lo is not k.lo or ext is not k.extent:
            sub[k] = IterVar(k.name, lo, ext, k.kind)
    if not sub:
        return body
    cond = simplify(substitute(te_all(*conds), sub))
    return Reduce(body.combiner, tuple(substitute(x, sub) for x in body.source),
                  tuple(sub.get(k, k) for k in body.axis), cond, body.value_index, body.dtype,
                  tuple(substitute(x, sub) for x in body.init))


@dataclass(frozen=True)
class Boxed:
    """A sum over the constant hull of its reduction windows: `body` (every axis with constant
    bounds), `cond` (the original windows, in the new axes) and the hull `(name, lo, hi)` of
    each widened axis."""

    body: Reduce
    cond: Expr
    hulls: tuple[tuple[str, int, int], ...]


def _window(k: IterVar, data: Sequence[IterVar]) -> tuple[int, int, int] | None:
    """(hull lo, hull hi, widest window) of reduction axis `k` over the static data axes its
    bounds use, by enumeration; None if they use anything else or too many points."""
    used = [v for e in (k.lo, k.extent) for v in walk(e) if isinstance(v, (IterVar, Var, Read))]
    dep = [a for a in data if a in used]
    if any(v not in dep for v in used) or not dep:
        return None  # another reduction axis (a triangle), a symbolic dim or a tensor value
    if not all(isinstance(a.lo, Const) and isinstance(a.extent, Const) for a in dep):
        return None
    exts = [int(a.extent.value) for a in dep]  # type: ignore[attr-defined]
    if math.prod(exts) > ENUMERATE_MAX:
        return None
    starts = [int(a.lo.value) for a in dep]  # type: ignore[attr-defined]
    grids = np.meshgrid(*[np.arange(lo, lo + n) for lo, n in zip(starts, exts, strict=True)],
                        indexing="ij")
    env: dict[Expr, Any] = {a: g.ravel() for a, g in zip(dep, grids, strict=True)}
    npts = math.prod(exts)
    try:
        lo = np.broadcast_to(int_eval(k.lo, env, npts), (npts,))
        n = np.broadcast_to(int_eval(k.extent, env, npts), lo.shape)
    except TypeError:
        return None
    live = n > 0
    if not live.any():
        return None
    return int(lo[live].min()), int((lo + n)[live].max()), int(n.max())


def boxed(body: Reduce, data: Sequence[IterVar]) -> Boxed | None:
    """`body` summed over the constant hull of its windows, or None: no dependent bounds, a
    window enumeration cannot bound, or a hull over BOX_MAX_RATIO times the widest windows."""
    if not any(bounds_depend_on_axes(k) for k in body.axis):
        return None
    sub: dict[Expr, Expr] = {}
    conds: list[Expr] = []
    hulls: list[tuple[str, int, int]] = []
    axes: list[IterVar] = []
    ratio = 1.0
    for k in body.axis:
        if not bounds_depend_on_axes(k):
            axes.append(k)
            continue
        w = _window(k, data)
        if w is None:
            return None
        lo, hi, widest = w
        ratio *= (hi - lo) / widest
        new = IterVar(k.name, const(0), const(hi - lo), k.kind)
        at = new + lo if lo else new
        sub[k] = at
        conds += [at >= k.lo, at < k.lo + k.extent]
        hulls.append((k.name, lo, hi))
        axes.append(new)
    if ratio > BOX_MAX_RATIO:
        return None
    cond = conds[0]
    for c in conds[1:]:
        cond = Call(Op.AND, (cond, c), "bool")
    new_body = Reduce(body.combiner, tuple(substitute(x, sub) for x in body.source), tuple(axes),
                      substitute(body.condition, sub), body.value_index, body.dtype, body.init)
    return Boxed(new_body, simplify(cond), tuple(hulls))
