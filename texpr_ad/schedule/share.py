"""Planner rewrite `share`: a stage that recomputes an earlier stage's whole value reads it.

Inlining substitutes a stage into each reader, so two readers of one elementwise gradient both
compute it: bias + GELU's backward computes `dx[i, j] = head * gelu'(x + b)` and then
`db[j] = sum_i head * gelu'(x + b)` again (erf and exp per element, twice) where it could sum
`dx[i, j]`.  After the stages are built, every occurrence in a later stage of an earlier
compute stage's body, at loop axes running over that stage's whole dims, becomes a read of it.
The value is the same expression, evaluated once; only non-trivial bodies (a call beyond one
arithmetic operation on reads) are shared, so no load replaces a cheaper computation.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ..te.expr import Call, Expr, IterVar, Read, Reduce
from ..te.visit import children, transform, walk
from .nest import reduction_notes
from .plan import ComputeStage, Stage

MIN_OPS = 3  # calls a body must hold to be worth a shared array instead of recomputing


def share(stages: Sequence[Stage]) -> list[Stage]:
    """The stages, each later one reading the earlier single-body compute stages it recomputes."""
    out: list[Stage] = []
    for st in stages:
        if isinstance(st, ComputeStage):
            for src in out:
                if isinstance(src, ComputeStage) and _shareable(src):
                    st = _read_instead(st, src)
        out.append(st)
    return out


def _shareable(st: Stage) -> bool:
    if not isinstance(st, ComputeStage) or len(st.bodies) != 1 or st.tensors[0] is None:
        return False
    xs = list(walk(st.bodies[0]))
    return not any(isinstance(x, Reduce) for x in xs) and sum(isinstance(x, Call) for x in xs) >= MIN_OPS


def _read_instead(st: ComputeStage, src: ComputeStage) -> ComputeStage:
    """`st` with each occurrence of `src`'s body replaced by a read of `src`."""
    pattern, t = src.bodies[0], src.tensors[0]
    assert t is not None

    def fn(e: Expr) -> Expr | None:
        bind: dict[IterVar, Expr] = {}
        if e.dtype == pattern.dtype and _match(pattern, e, src.axes, bind) \
                and all(_covers(bind.get(a), a) for a in src.axes):
            return Read(t, tuple(bind[a] for a in src.axes), e.dtype)
        return None
    bodies = tuple(transform(b, fn) for b in st.bodies)
    if all(a is b for a, b in zip(bodies, st.bodies)):
        return st
    return replace(st, bodies=bodies, reduction=reduction_notes(bodies, st.axes),
                   notes=(*st.notes, f"shared: reads {src.name} instead of recomputing its value"))


def _covers(e: Expr | None, a: IterVar) -> bool:
    """`e` is a loop axis over exactly `a`'s range (so the read stays inside the array)."""
    return isinstance(e, IterVar) and e.lo.same_as(a.lo) and e.extent.same_as(a.extent)


def _match(p: Expr, e: Expr, axes: Sequence[IterVar], bind: dict[IterVar, Expr]) -> bool:
    """Whether `e` is `p` with each of `axes` replaced consistently (recorded in `bind`)."""
    stack = [(p, e)]
    while stack:
        p, e = stack.pop()
        if isinstance(p, IterVar) and p in axes:
            if bind.setdefault(p, e) is not e and not bind[p].same_as(e):
                return False
            continue
        if type(p) is not type(e) or p.dtype != e.dtype:
            return False
        if isinstance(p, Call) and isinstance(e, Call):
            same = p.op is e.op and len(p.args) == len(e.args)
        elif isinstance(p, Read) and isinstance(e, Read):
            same = p.tensor is e.tensor
        elif p.same_as(e):
            continue  # a leaf (or a reduction) equal as it is
        else:
            return False
        if not same:
            return False
        stack.extend(zip(children(p), children(e)))
    return True
