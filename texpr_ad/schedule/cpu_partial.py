"""CPU refine step 6b (partial sums): a sum over rows that another reduction already walks is
split into per-row partial sums, computed in that reduction's loops, and a small fold.

Instance norm's backward sums `dgamma[f] = sum_{b, i, j} dy[b, f, i, j] * xhat[b, f, i, j]` and
`dbeta[f]` over the same (b, f) rows that its per-row gradient sums (`sum_{i, j} dy * (x -
mean)`, `sum_{i, j} dy`) walk in one prange: as stages of their own they read dy and x a second
time from memory (16x64x56x56: 51 MB read instead of 26).  A sum stage R whose term reads a
tensor at plain axes where an earlier parallel reduction S reads it, with R's data axes on S's
data axes, some of R's reduce axes on S's other data axes (the outer ones) and the rest on S's
reduce axes (the inner ones, same extents), becomes

    R_part[S's data axes] = sum_inner term        (joins S's prange; folds with S's loops)
    R[R's data axes]      = sum_outer R_part[..]  (a few terms per point)

when everything the term reads is written before S.  The partial sums are ordinary reductions
over S's rows (the accumulation rule of their own term count, as S's), so the rounding is that
of a sum in two levels instead of one wide float64 sum.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, NamedTuple, Sequence

from ..te.expr import Expr, IterVar, Read, Reduce, ReduceKind, always
from ..te.tensor import ComputeOp, Tensor
from ..te.visit import walk
from .cpu_contract import NO_EXPAND
from .fuse import first_reduction, rename_axes, stage_reads
from .nest import compute_stage, const_int
from .plan import ComputeStage, CpuStagePlan, ScatterStage, Stage

Axes = dict[IterVar, IterVar]


class _PlainRead(NamedTuple):
    tensor: Tensor
    indices: tuple[IterVar, ...]


def partial_sums(stages: Sequence[Stage], pinned: set[str],
                 strategies: Callable[[ComputeStage], ComputeStage]) -> list[Stage]:
    """The stages, each sum that an earlier reduction's rows cover split as the module says,
    the two new stages given their CPU `strategies` (stages named in `pinned`, those with
    overrides, are kept)."""
    out, k = list(stages), -1
    while (k := k + 1) < len(out):
        r = out[k]
        if not isinstance(r, ComputeStage) or r.name in pinned or not _plain_sum(r):
            continue
        for s_at in range(k):
            s = out[s_at]
            if not isinstance(s, ComputeStage) or s.name in pinned:
                continue
            m = _row_map(r, s)
            if m is None or _written_from(out[s_at:k]) & {id(x.tensor) for x in stage_reads(r)}:
                continue
            part, fold = _split(r, s, m)
            out[k] = strategies(fold)
            out.insert(s_at + 1, strategies(part))
            k += 1  # (R moved one place down)
            break
    return out


def _plain_sum(st: ComputeStage) -> bool:
    """One body that is a whole unconditioned float sum over static extents."""
    b = st.bodies[0] if len(st.bodies) == 1 else None
    return (isinstance(b, Reduce) and b.combiner.kind is ReduceKind.SUM and len(b.source) == 1
            and not b.init and always(b.condition) and b.dtype.startswith("float")
            and st.tensors[0] is not None and st.cpu.contraction is None
            and all(const_int(a.extent) is not None for a in (*st.axes, *b.axis)))


def _row_map(r: ComputeStage, s: ComputeStage) -> Axes | None:
    """R's data and reduce axes -> S's, through a tensor both read at plain distinct axes, when
    R's data axes land on S's data axes, S's data axes are all covered (some by R's reduce axes)
    and S's reduce axes are exactly the images of R's other reduce axes; else None."""
    if not (s.parallel and len(s.bodies) == 1 and isinstance(s.bodies[0], Reduce)
            and not (s.cpu.contraction or s.cpu.accumulate or s.cpu.split)):
        return None
    rr, sr = first_reduction(r), first_reduction(s)
    if sr.init or not always(sr.condition):
        return None
    s_reads = _plain_reads(sr.source)
    for x in _plain_reads(rr.source):
        for y in (y for y in s_reads if y.tensor is x.tensor):
            m = dict(zip(x.indices, y.indices))
            if _covers(m, r, rr, s, sr):
                return m
    return None


def _plain_reads(es: Sequence[Expr]) -> list[_PlainRead]:
    """The reads in `es` at distinct bare axes, as (tensor, those axes)."""
    out = []
    for x in (x for e in es for x in walk(e) if isinstance(x, Read)):
        axes = [i for i in x.indices if isinstance(i, IterVar)]
        if len(axes) == len(x.indices) == len(set(axes)):
            out.append(_PlainRead(x.tensor, tuple(axes)))
    return out


def _covers(m: Axes, r: ComputeStage, rr: Reduce, s: ComputeStage, sr: Reduce) -> bool:
    if set(m) != {*r.axes, *rr.axis} or len(set(m.values())) != len(m):
        return False
    if not all(a.lo.same_as(b.lo) and a.extent.same_as(b.extent) for a, b in m.items()):
        return False
    outer = [a for a in rr.axis if m[a] in s.axes]
    return (all(m[a] in s.axes for a in r.axes) and bool(outer)
            and set(m.values()) == {*s.axes, *sr.axis})


def _written_from(stages: Sequence[Stage]) -> set[int]:
    return {id(t) for st in stages for t in (
        st.tensors if isinstance(st, ComputeStage) else (st.tensor,) if isinstance(
            st, ScatterStage) else ()) if t is not None}


def _split(r: ComputeStage, s: ComputeStage, m: Axes) -> tuple[ComputeStage, ComputeStage]:
    """(the partial sums over S's loops, R as the fold of them)."""
    rr = first_reduction(r)
    inv = {b: a for a, b in m.items()}
    src = [inv[a] for a in s.order]  # R's axes at S's loops, in S's loop order
    fresh = {a: IterVar(a.name, a.lo, a.extent, "data") for a in src}
    inner = tuple(inv[a] for a in first_reduction(s).axis)
    outer = tuple(a for a in rr.axis if a not in inner)
    body = replace(rr, source=(rename_axes(rr.source[0], fresh),), axis=inner)
    op = ComputeOp(f"{r.name}_part", tuple(fresh[a] for a in src), (body,))
    t = Tensor(op, 0, tuple(a.extent for a in src), rr.dtype)
    part = compute_stage(op, op.name, False, NO_EXPAND, {}, {(id(op), 0): t})
    part = replace(part, notes=(f"materialized: partial sums of {r.name} over {s.name}'s loops "
                                f"(one pass over what both read)",))
    fold = replace(rr, source=(Read(t, tuple(src), rr.dtype),), axis=outer)
    fop = ComputeOp(r.name, r.axes, (fold,))
    assert r.tensors[0] is not None  # (_plain_sum)
    folded = compute_stage(fop, r.name, r.is_output, NO_EXPAND, {}, {(id(fop), 0): r.tensors[0]})
    folded = replace(folded, order=r.order, notes=(*r.notes, f"split: sums {t.name} over "
                                    f"{', '.join(a.name for a in outer)}"))
    return replace(part, cpu=CpuStagePlan()), replace(folded, cpu=CpuStagePlan())
