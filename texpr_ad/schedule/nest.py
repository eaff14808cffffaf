"""Compute loop nests (planner step 4): loop order, parallel fusion, reduction notes.

The data loops run in declared order (the last axis, contiguous in memory, innermost);
the leading axes are fused into one `prange` until it has at least
`MIN_PARALLEL_CHUNKS` iterations (never the innermost axis unless the stage is 1-d);
stages with fewer than `MIN_PARALLEL_WORK` known iterations run serially.
"""
from __future__ import annotations

import collections
import math
from typing import Any, Mapping, Protocol, Sequence

from ..te.expr import Call, Const, Expr, IterVar, Reduce, ReduceKind, always
from ..te.ops import Op
from ..te.printer import expr_str
from ..te.tensor import ComputeOp, Tensor
from ..te.visit import bounds_depend_on_axes, walk
from .plan import LONG_SUM, ComputeStage, ScheduleError, sum_terms, wide_sum

MIN_PARALLEL_WORK = 1024  # stages with fewer known point*reduction iterations run serially
MIN_PARALLEL_CHUNKS = 64  # fuse leading axes until the prange has this many iterations


class Expander(Protocol):
    """The planner's inliner: substitutes inlined stages into an expression."""

    def __call__(self, e: Expr) -> Expr: ...

    def names_in(self, exprs: Sequence[Expr]) -> tuple[str, ...]: ...


def const_int(e: Expr) -> int | None:
    return int(e.value) if isinstance(e, Const) else None


def loop_extents(axes: Sequence[IterVar], bodies: Sequence[Expr]) -> list[Expr]:
    """The extents of the data axes and of each body's first reduction."""
    exts = [a.extent for a in axes]
    for b in bodies:
        exts += next(([a.extent for a in x.axis] for x in walk(b) if isinstance(x, Reduce)), [])
    return exts


def iteration_count(axes: Sequence[IterVar], bodies: Sequence[Expr]) -> float:
    """Known iteration count (data points times reduction points); unknown extents count as large."""
    return extent_product(loop_extents(axes, bodies))


def extent_product(exts: Sequence[Expr], symbolic: float = math.inf) -> float:
    """The product of `exts`, a symbolic one counted as `symbolic`."""
    return math.prod((symbolic if (c := const_int(e)) is None else c for e in exts), start=1.0)


def at_most(exts: Sequence[Expr], than: Sequence[Expr]) -> bool:
    """Whether the product of `exts` is at most that of `than` at every size: their symbolic
    extents are the same (`max(n, 0)` is n: sizes are not negative) and the static ones' product
    is at most theirs."""
    def split(es: Sequence[Expr]) -> tuple[int, collections.Counter]:
        sym = [e.args[0] if isinstance(e, Call) and e.op is Op.MAX and const_int(e.args[1]) == 0
               else e for e in es if const_int(e) is None]
        return math.prod(c for e in es if (c := const_int(e)) is not None), collections.Counter(sym)
    (n, s), (m, t) = split(exts), split(than)
    return n <= m and s == t


def default_fuse(order: Sequence[IterVar], inner: bool = False) -> int:
    """How many leading axes of `order` a prange fuses: until it has MIN_PARALLEL_CHUNKS
    iterations, the innermost kept serial (it vectorizes) unless `inner`."""
    if len(order) <= 1:
        return len(order)
    fused, chunks = 0, 1
    for a in order if inner else order[:-1]:  # (a symbolic extent may be small: it counts as 1)
        fused += 1
        chunks *= const_int(a.extent) or 1
        if chunks >= MIN_PARALLEL_CHUNKS:
            break
    return fused


def reduction_notes(bodies: Sequence[Expr], axes: Sequence[IterVar]) -> tuple[str, ...]:
    groups: dict[tuple, Reduce] = {}
    for b in bodies:
        for x in walk(b):
            if isinstance(x, Reduce):
                groups.setdefault(x.loop_key, x)
    notes = []
    for r in groups.values():
        kind = (r.combiner.kind if r.combiner.kind is not ReduceKind.CUSTOM
                else f"custom {r.combiner.name!r}")
        wide = wide_sum(r)
        accs = "float64" if wide else ", ".join(s.dtype for s in r.source)
        txt = (f"{kind} over {', '.join(a.name for a in r.axis)} in a local {accs} accumulator"
               f"{'s' if len(r.source) > 1 else ''} (serial, in axis order)")
        if wide:
            n = sum_terms(r)
            txt += (f"; wide: {'a count known at the call' if math.isinf(n) else int(n)} "
                    f"{r.dtype} terms (more than {LONG_SUM}), rounded to {r.dtype} once")
        if len(r.source) > 1:
            txt += f"; tuple reducer computing {len(r.source)} values in one loop"
        if not always(r.condition):
            txt += f"; where {expr_str(r.condition)}"
        if r.init:
            txt += f"; init {', '.join(expr_str(i) for i in r.init)}"
        dep = [a.name for a in r.axis
               if bounds_depend_on_axes(a)]
        if dep:
            txt += f"; bounds of {', '.join(dep)} depend on the enclosing axes"
        notes.append(txt)
    return tuple(notes)


def compute_stage(op: ComputeOp, name: str, is_output: bool, expand: Expander,
                   ov: Mapping[str, Any], tensors_of: dict[tuple[int, int], Tensor]) -> ComputeStage:
    bodies = tuple(expand(b) for b in op.body)
    for b in bodies:
        for x in walk(b):
            if isinstance(x, Reduce) and any(isinstance(y, Reduce) for s in x.source for y in walk(s)):
                raise ScheduleError(f"stage {name!r}: a reduction nested inside another reduction "
                                    f"is not supported; build it with te.compute, which splits it")
    notes: list[str] = [f"override {k}={v!r}" for k, v in ov.items()]
    order = tuple(op.axis)
    if "order" in ov:
        by = {a.name: a for a in op.axis}
        want = list(ov["order"])
        if sorted(want) != sorted(by) or len(by) != len(op.axis):
            raise ScheduleError(f"stage {name!r}: order override {want} must be a permutation of "
                                f"the axis names {[a.name for a in op.axis]}")
        order = tuple(by[n] for n in want)
    work = iteration_count(op.axis, bodies)
    parallel = bool(ov.get("parallel", len(order) > 0 and work >= MIN_PARALLEL_WORK))
    if not order:
        parallel = False
    elif "parallel" not in ov and not parallel:
        notes.append(f"serial: only {int(work)} iterations (< {MIN_PARALLEL_WORK})")
    fused = int(ov.get("fuse", default_fuse(order))) if parallel else 0
    if parallel and not 1 <= fused <= len(order):
        raise ScheduleError(f"stage {name!r}: fuse={fused} must be between 1 and {len(order)}")
    tensors = tuple(tensors_of.get((id(op), k)) for k in range(len(bodies)))
    return ComputeStage(name, tensors, tuple(op.axis), bodies, order,
                        fused, parallel, is_output, reduction_notes(bodies, op.axis),
                        expand.names_in(op.body), tuple(notes))

