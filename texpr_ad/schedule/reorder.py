"""CPU rewrites of a reduction's loops: `where=` bounds become its range (`tighten`), and its
axes run in memory order, the unit-stride axis innermost (`reorder_reductions`).

A band or causal mask written as `where=(k <= i) & (i - k < 64)` is a condition tested at all
256 values of k; the same sum written with `reduce_axis((i - 63, i + 1))` loops over 64.  A
formulation's spelling should not change its cost, so `tighten` folds every affine condition
on the reduction's axes into their bounds (deriv.solver.invert, Fourier-Motzkin: each axis'
bounds use only outer axes), keeping the rest as the condition.

An index expression fixes its reduction axes in the order the author (or the differentiator)
listed them, not in the order its reads are laid out: group norm's backward sums
`dy[b, g * cg + c, i, j]` over (i, j, c), so the innermost loop strides by H*W elements, misses
the cache on every term and does not vectorize.  A sum, max or min of independent axes (each
running over bounds that use no other loop axis) may fold its terms in any order, so this
rewrite orders the axes by the smallest stride at which the source reads each in its largest
tensors (what misses the cache; largest stride outermost, ties as written), and the later CPU steps (lanes, row accumulation) see
the unit-stride axis innermost.  Sums then regroup within float rounding, as lanes do already;
max and min are exact in any order.
"""
from __future__ import annotations

import functools
import math
from dataclasses import replace

from ..deriv.solver import invert
from ..te.expr import Const, Expr, IterVar, Read, Reduce, ReduceKind, const
from ..te.visit import substitute, transform, walk
from .nest import reduction_notes
from .plan import ComputeStage

KINDS = (ReduceKind.SUM, ReduceKind.MAX, ReduceKind.MIN)  # reducers whose terms commute exactly
#                                                          or within float rounding


def tighten(st: ComputeStage) -> ComputeStage:
    """`st` with the affine `where=` conditions of its reductions folded into their ranges."""
    done: dict[tuple, Reduce | None] = {}
    for r in (x for b in st.bodies for x in walk(b) if isinstance(x, Reduce)):
        if r.loop_key not in done:
            done[r.loop_key] = _tightened(r)
    new = {k: v for k, v in done.items() if v is not None}
    if not new:
        return st

    def fn(x: Expr) -> Expr | None:
        if isinstance(x, Reduce) and x.loop_key in new:
            t = new[x.loop_key]
            assert t is not None
            return replace(t, value_index=x.value_index, dtype=x.dtype)
        return None
    bodies = tuple(transform(b, fn) for b in st.bodies)
    return replace(st, bodies=bodies, reduction=reduction_notes(bodies, st.axes), notes=(
        *st.notes, "tightened: the affine where= conditions of its reduction are its loop range"))


def _tightened(r: Reduce) -> Reduce | None:
    """`r` over the ranges its condition allows, or None where no condition part is affine."""
    if isinstance(r.condition, Const) and r.condition.value is True:
        return None
    inv = invert([], list(r.axis), [], [r.condition])
    if inv is None or not inv.new_axes or (len(inv.conditions) == 1 and
                                           inv.conditions[0].same_as(r.condition)):
        return None  # (no axes left: a one-term range, `s <= i` over [0, 1), keeps its loop)
    sub = {a: v for a, v in inv.subst.items() if v is not a}
    cond = functools.reduce(lambda a, b: a & b, inv.conditions) if inv.conditions else const(True)
    return replace(r, axis=inv.new_axes, condition=substitute(cond, sub) if sub else cond,
                   source=tuple(substitute(e, sub) for e in r.source) if sub else r.source,
                   init=tuple(substitute(e, sub) for e in r.init) if sub else r.init)


def reorder_reductions(st: ComputeStage) -> ComputeStage:
    """`st` with each reduction's axes in memory order (see the module docstring)."""
    done: dict[tuple, tuple[IterVar, ...]] = {}
    for r in (x for b in st.bodies for x in walk(b) if isinstance(x, Reduce)):
        if r.loop_key not in done:
            done[r.loop_key] = _memory_order(r)
    new = {k: v for k, v in done.items() if v != k[2]}
    if not new:
        return st

    def fn(x: Expr) -> Expr | None:
        if isinstance(x, Reduce) and x.loop_key in new:
            return replace(x, axis=new[x.loop_key])
        return None
    notes = [f"reordered: reduction loops {' > '.join(a.name for a in axes)} (written "
             f"{' > '.join(a.name for a in key[2])}): innermost the axis read at the smallest "
             f"stride" for key, axes in new.items()]
    bodies = tuple(transform(b, fn) for b in st.bodies)
    return replace(st, bodies=bodies, reduction=reduction_notes(bodies, st.axes),
                   notes=(*st.notes, *notes))


def _memory_order(r: Reduce) -> tuple[IterVar, ...]:
    """`r`'s axes, largest read stride first, or as written where reordering is not sound."""
    if len(r.axis) < 2 or r.combiner.kind not in KINDS or any(
            isinstance(v, IterVar) for a in r.axis for e in (a.lo, a.extent) for v in walk(e)):
        return r.axis
    stride = {a: math.inf for a in r.axis}
    reads = [x for s in r.source for x in walk(s) if isinstance(x, Read)]
    big = max((static_size(x.tensor.shape) for x in reads), default=0.0)
    for x in (x for x in reads if static_size(x.tensor.shape) == big):  # what misses the cache: the largest
        for d, ix in enumerate(x.indices):
            s = _dim_stride(x, d)
            for v in walk(ix):
                if v in stride:
                    stride[v] = min(stride[v], s)  # type: ignore[index]
    return tuple(sorted(r.axis, key=lambda a: -stride[a]))  # stable: ties as written


def _dim_stride(x: Read, d: int) -> float:
    """The row-major stride of dim `d` of the tensor `x` reads (inf past a symbolic dim)."""
    return static_size(x.tensor.shape[d + 1:])


def static_size(shape: tuple[Expr, ...]) -> float:
    """Elements of a tensor of `shape` (inf when a dim is symbolic)."""
    n = 1.0
    for e in shape:
        n *= float(e.value) if isinstance(e, Const) else math.inf
    return n
