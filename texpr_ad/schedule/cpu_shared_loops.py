"""CPU refine step 8b (after join): stages share loops.  Split reductions share their chunk
loops; a row reduction folds in the loop of the elementwise stage it reduces.

Two reductions split into partial results the same way (step 7) each stream every row of
their inputs once: layer_norm's column sums over the rows, `dgamma[j] = sum_i dy[i, j] *
xhat[i, j]` and `dbeta[j] = sum_i dy[i, j]`, read `dy` twice from memory.  When the stages
are consecutive, split into the same chunks, and loop over axes of the same extents in the
same order, the later one runs in the earlier one's prange over chunks and in its loops
(`join`, its axes renamed to the earlier stage's): each chunk reads its rows once and folds
every stage's partial result, then each stage combines its partials as before.  Results are
bit-identical (each partial result folds the same terms in the same order).

Not shared: vector (stepped-lanes) chunks, a stage that reads an earlier stage of the group
(its partial results are complete only after the loops), different extents or loop orders.
One exception: a scalar stepped-lanes sum over (rows, columns) right before column sums over
the same rows and columns rides in their loops (`_rider_map`): its accumulators step in the
row loop and fold once per row as before (bit-identical), and the terms both compute are
evaluated once (plain ew_chain's forward: its sum and the dw/db sums saved for the backward
share tanh and exp: 5.3 -> 2.4 ms).

    for c in prange(16):               # dgamma, then dbeta in dgamma's loops
        for j in range(m): dgamma_part[c, j] = 0; dbeta_part[c, j] = 0
        for i in range(c * 256, ...):
            for j in range(m):
                dgamma_part[c, j] += dy[i, j] * xhat[i, j]
                dbeta_part[c, j] += dy[i, j]

`fold_into_row_loops`: in a joined prange, a lanes reduction `s[i] = sum_k e[i, k]` (or
max/min) right after the elementwise stage `e[i, j] = f(..)` that it reads only at `[i, k]`,
over the same range, accumulates in `e`'s loop over j as each element is stored (`in_row_loop`,
its axes renamed to `e`'s): softmax's `exp` and row sum make one pass over the row, not two.
The sum adds the same terms in the same order (lanes may regroup either way).

    for i in prange(n):
        acc = 0
        for j in range(m):
            e[j] = exp(x[i, j] - mx)
            acc = radd(acc, e[j])
        s[i] = acc
"""
from __future__ import annotations

from dataclasses import replace

from ..te.expr import Expr, IterVar, Read, Reduce
from ..te.visit import reads_in, transform, walk
from .plan import Accumulate, ComputeStage, Stage


def share_split_loops(stages: list[Stage]) -> list[Stage]:
    """Mark each split reduction that can run in the previous split stage's chunk loops; a
    scalar one (stepped lanes) right before a row-accumulated split stage over the same rows
    rides in that stage's loops instead (`_rider_map`), moved after it."""
    out: list[Stage] = []
    group: list[ComputeStage] = []  # the current group of split stages sharing loops
    pending: ComputeStage | None = None  # a scalar split reduction waiting for its head
    for st in stages:
        if pending is not None:
            m = _rider_map(st, pending)
            out.append(st)
            if m is not None:
                group = [st, on_loops_of(pending, m)]
                out.append(group[-1])
                pending = None
                continue
            out[-1:] = [pending, st]
            pending = None
            group = [st] if _split(st) is not None else []
            continue
        if _scalar_lanes(st) is not None:
            pending = st  # type: ignore[assignment]
            continue
        m = _axis_map(group[0], st) if group else None
        written = {id(t) for g in group for t in g.tensors if t is not None}
        if m is not None and not any(id(r.tensor) in written for r in _reads(st)):
            st = on_loops_of(st, m)
            group.append(st)
        else:
            group = [st] if _split(st) is not None else []
        out.append(st)
    if pending is not None:
        out.append(pending)
    return out


def _scalar_lanes(st: Stage) -> Accumulate | None:
    """The split accumulation of a scalar (no data axes) stepped-lanes reduction over two
    axes (rows, then columns), else None."""
    if not isinstance(st, ComputeStage) or st.cpu is None or st.cpu.join or st.axes:
        return None
    acc = st.cpu.accumulate
    if acc is None or acc.split is None or not acc.vector or len(st.bodies) != 1:
        return None
    r = _reduce(st)
    return acc if len(r.axis) == 2 and r.axis[0] is acc.split else None


def _rider_map(head: Stage, st: ComputeStage) -> dict[IterVar, IterVar] | None:
    """`st`'s reduce axes (rows, columns) -> `head`'s (split, row), if the scalar split
    reduction `st` can fold in the loops of `head`, a row-accumulated split reduction over the
    same rows and columns that does not read it: plain ew_chain's sum and the weight and bias
    gradient sums its forward computes (`residuals.py`) then evaluate their common terms in
    one pass.  `st` keeps its stepped accumulators (the same sum, in the same order)."""
    a, b = _split(head), _scalar_lanes(st)
    if a is None or b is None or a.row is None or a.chunks != b.chunks:
        return None
    assert isinstance(head, ComputeStage)
    ra, (i, j) = _reduce(head), _reduce(st).axis
    if len(ra.axis) != 1 or head.axes != (a.row,) or any(
            not (x.lo.same_as(y.lo) and x.extent.same_as(y.extent))
            for x, y in ((i, a.split), (j, a.row))):
        return None
    mine = {id(t) for t in st.tensors}
    if any(id(x.tensor) in mine for x in _reads(head)):
        return None
    return {i: a.split, j: a.row}


def fold_into_row_loops(stages: list[Stage]) -> list[Stage]:
    """Mark each joined lanes reduction that folds in the previous stage's row loop."""
    out: list[Stage] = []
    for st in stages:
        prev = out[-1] if out else None
        m = _row_map(prev, st) if isinstance(prev, ComputeStage) else None
        if m is not None:
            assert isinstance(st, ComputeStage)
            st = replace(st, axes=tuple(m[a] for a in st.axes), order=tuple(m[a] for a in st.order),
                         bodies=tuple(rename_axes(b, m) for b in st.bodies),
                         cpu=replace(st.cpu, in_row_loop=True))
        out.append(st)
    return out


def _row_map(e: ComputeStage, st: Stage) -> dict[IterVar, IterVar] | None:
    """`st`'s parallel and reduce axes -> `e`'s (p, j), if `st` can fold in `e`'s row loop."""
    c, ce = st.cpu, e.cpu
    if not (isinstance(st, ComputeStage) and c is not None and ce is not None and c.join
            and c.lanes > 1 and len(st.order) == 1 and len(st.bodies) == 1
            and st.tensors[0] is not None):
        return None
    if (ce.accumulate or ce.contraction or ce.split or ce.in_row_loop or ce.lanes > 1
            or not e.parallel or e.fused != 1 or len(e.order) != 2 or len(e.bodies) != 1
            or e.tensors[0] is None or any(isinstance(x, Reduce) for x in walk(e.bodies[0]))):
        return None
    (p, j), r = e.order, _reduce(st)
    if len(r.axis) != 1 or not (r.axis[0].lo.same_as(j.lo) and r.axis[0].extent.same_as(j.extent)):
        return None
    m = {st.order[0]: p, r.axis[0]: j}
    want = [st.order[0] if a is p else r.axis[0] for a in e.axes]
    mine = [x for x in _reads(st) if x.tensor is e.tensors[0]]
    if not mine or any(list(x.indices) != want for x in mine):
        return None
    return m


def _split(st: Stage) -> Accumulate | None:
    """The stage's split accumulation, when its chunks fold in loops (not stepped lanes)."""
    if not isinstance(st, ComputeStage) or st.cpu is None or st.cpu.join:
        return None
    acc = st.cpu.accumulate
    return acc if acc is not None and acc.split is not None and not acc.vector else None


def _reduce(st: ComputeStage) -> Reduce:
    """The stage's one reduction (a split stage has exactly one, see cpu._accumulate)."""
    return next(x for b in st.bodies for x in walk(b) if isinstance(x, Reduce))


def _axis_map(head: ComputeStage, st: Stage) -> dict[IterVar, IterVar] | None:
    """`st`'s data and reduce axes -> `head`'s, if `st` can run in `head`'s loops, else None."""
    a, b = _split(head), _split(st)
    if a is None or b is None or a.chunks != b.chunks:
        return None
    assert isinstance(st, ComputeStage)
    ra, rb = _reduce(head), _reduce(st)
    pairs = [*zip(head.axes, st.axes), *zip(ra.axis, rb.axis)]
    if len(head.axes) != len(st.axes) or len(ra.axis) != len(rb.axis) or not all(
            x.lo.same_as(y.lo) and x.extent.same_as(y.extent) for x, y in pairs):
        return None
    m = {y: x for x, y in pairs}
    if tuple(m[y] for y in st.order) != head.order or m[b.split] is not a.split \
            or (b.row is None) != (a.row is None) or (b.row is not None and m[b.row] is not a.row):
        return None
    return m


def on_loops_of(st: ComputeStage, m: dict[IterVar, IterVar]) -> ComputeStage:
    """`st` joined to the stage whose axes `m` maps its own to, written over those axes."""
    acc = st.cpu.accumulate  # type: ignore[union-attr]
    assert acc is not None and acc.split is not None
    return replace(
        st, axes=tuple(m[a] for a in st.axes), order=tuple(m[a] for a in st.order),
        bodies=tuple(rename_axes(b, m) for b in st.bodies),
        cpu=replace(st.cpu, join=True, accumulate=replace(
            acc, split=m[acc.split], row=None if acc.row is None else m.get(acc.row))))


def rename_axes(e: Expr, m: dict[IterVar, IterVar]) -> Expr:
    """`e` with the axes in `m` replaced, as index leaves and as the axes of its reductions."""
    def fn(x: Expr) -> Expr | None:
        if isinstance(x, IterVar):
            return m.get(x)
        if isinstance(x, Reduce) and any(a in m for a in x.axis):
            return replace(x, axis=tuple(m.get(a, a) for a in x.axis))
        return None
    return transform(e, fn)


def _reads(st: ComputeStage) -> list[Read]:
    return list(reads_in(st.bodies))  # reduce bounds included
