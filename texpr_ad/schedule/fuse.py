"""CPU refine step 8 (fuse): consecutive stages share loops; the result is the plan's `nest`.

One rewrite: a stage joins the loop that the stages before it share when its own loop has the
same range and it reads what they write only at the shared index.  The loop kinds
(loopnest.LoopKind) differ only in what that loop is, and `FUSIONS` holds one rule per kind:

- PRANGE: stages whose leading loops have equal extents (row-wise chains: softmax,
  normalizations), in one prange over as many of them as the widest member fuses (a layer
  norm over (batch, tokens, channels): its statistics and its rows over batch * tokens),
  reading earlier members only at their own row; a small serial stage joins too (one
  iteration's work: batch_norm's per-channel scalars would otherwise cut the chain).
- CHUNKS: reductions split into the same chunks (step 7) over loops of the same extents in the
  same order, reading nothing the group writes (partial results are complete only after the
  loops): each chunk reads its rows once for every partial result (layer_norm's dgamma and
  dbeta).  Results are bit-identical: each partial result folds the same terms in the same order.

    for c in prange(16):               # dgamma, then dbeta in dgamma's loops
        for j in range(m): dgamma_part[c, j] = 0; dbeta_part[c, j] = 0
        for i in range(c * 256, ...):
            for j in range(m):
                dgamma_part[c, j] += dy[i, j] * xhat[i, j]
                dbeta_part[c, j] += dy[i, j]

Three refinements of the same rewrite:

- order (`pull`): a stage that would open a prange of its own moves back to just after an earlier
  group it can join, past stages that write nothing it reads (plain batch_norm's `dgamma`, listed
  after `dx`, then reads each channel's rows while they are in cache).  A scalar stepped-lanes sum
  over (rows, columns) right before column sums over the same rows and columns moves after them
  and rides in their CHUNKS loops (`_rider_map`; ew_chain's forward: 5.3 -> 2.4 ms), its
  accumulators stepping in the row loop as before.
- ROW: in a prange, a lanes reduction `s[i] = sum_k e[i, k]` right after the elementwise stage
  `e[i, j]` that it reads only at `[i, k]` folds in `e`'s row loop as each element is stored
  (softmax's exp and sum: one pass over the row, the same terms in the same order).
- SIBLINGS: in a prange, a lanes (or serial one-axis sum) reduction over the same loops as an
  earlier one (same extents, one reduction each of the same accumulation) that reads nothing
  written from that one on moves up next to it, and they fold in one loop nest (`_sibling_map`;
  group-norm's gradient sums over each group, and its dgamma and dbeta over each channel;
  grid_sample's two channel sums of dgrid over the same gathered taps).
- place: an intermediate that only later members of its prange read becomes a per-iteration
  row buffer.
"""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping

from ..te.expr import Expr, IterVar, Read, Reduce, ReduceKind, always, const
from ..te.tensor import Tensor
from ..te.visit import reads_in, transform, walk
from .loopnest import REASONS, SIBLING_STORES, Loop, LoopKind, Node, Place, StageRef, refs
from .nest import default_fuse
from .plan import Accumulate, ComputeStage, ScatterStage, Stage, wide_sum
from .plan import with_cpu as _cpu

Overrides = Mapping[str, Mapping[str, Any]]


@dataclass
class _Group:
    """Consecutive stages sharing a loop of `kind` (None: a stage alone), while fusing."""

    kind: LoopKind | None
    members: list[Stage]

    def add(self, st: Stage) -> None:
        """Append `st`; in a PRANGE, every member then runs over as many leading axes as it."""
        self.members.append(st)
        if self.kind is LoopKind.PRANGE and isinstance(st, ComputeStage):  # (st: the widest)
            self.members = [replace(m, fused=st.fused) for m in self.members]  # type: ignore[arg-type]


def fuse(stages: list[Stage], overrides: Overrides) -> tuple[list[Stage], tuple[Node, ...]]:
    """The stages, reordered and rewritten over the loops they share, and the plan's nest."""
    groups = _groups(pull(stages, overrides), overrides)
    readers: dict[int, set[str]] = {}
    for st in (s for g in groups for s in g.members):
        for r in stage_reads(st):
            readers.setdefault(id(r.tensor), set()).add(st.name)
    out: list[Stage] = []
    nest: list[Node] = []
    for g in groups:
        if len(g.members) == 1:
            out += g.members
            nest.append(StageRef(g.members[0].name))
            continue
        members, nodes = _prange_body(g.members, readers) if g.kind is LoopKind.PRANGE else (
            g.members, tuple(map(_chunk_node, g.members)))
        out += members
        head = members[0]
        assert isinstance(head, ComputeStage)
        acc = head.cpu.accumulate
        ext = const(acc.chunks, "int64") if g.kind is LoopKind.CHUNKS and acc else \
            functools.reduce(operator.mul, (a.extent for a in head.parallel_axes))
        nest.append(Loop(g.kind, ext, nodes, REASONS[g.kind]))  # type: ignore[arg-type]
    return out, tuple(nest)


def _groups(stages: list[Stage], overrides: Overrides) -> list[_Group]:
    """Each stage joins the previous group where its kind's rule allows, else opens one."""
    out: list[_Group] = []
    for st in stages:
        pinned = bool({"order", "fuse", "parallel"} & set(overrides.get(st.name, {})))
        g = out[-1] if out else None
        if g is not None and g.kind is not None and (
                new := FUSIONS[g.kind](g, st, pinned)) is not None:
            g.add(new)
        elif g is not None and len(g.members) == 1 and (m := _rider_map(st, g.members[0])):
            out[-1] = _Group(LoopKind.CHUNKS, [st, on_loops_of(g.members[0], m)])  # type: ignore[arg-type]
        else:
            kind = (LoopKind.PRANGE if _joinable(st) and not pinned else
                    LoopKind.CHUNKS if _split(st) is not None and LoopKind.CHUNKS in FUSIONS else None)
            out.append(_Group(kind, []))
            out[-1].add(st)
    return out


def pull(stages: list[Stage], overrides: Overrides) -> list[Stage]:
    """Move a stage that would open a prange of its own back to just after an earlier group
    that it can join, past stages that write nothing it reads; nothing it reads moves."""
    out: list[Stage] = []
    for st in stages:
        out.append(st)
        pinned = bool({"order", "fuse", "parallel"} & set(overrides.get(st.name, {})))
        if pinned or not _joinable(st) or len(out) < 3 or _joins(out, overrides):
            continue
        reads = {id(r.tensor) for r in stage_reads(st)}
        for k in range(len(out) - 2, 0, -1):
            if any(id(t) in reads for t in _written(out[k])):
                break  # st reads what out[k] writes: it stays after it
            if _joins([*out[:k], st], overrides):
                out[k:] = [st, *out[k:-1]]
                break
    return out


def _joins(stages: list[Stage], overrides: Overrides) -> bool:
    """Whether the last stage joins a prange that an earlier one opens."""
    g = _groups(stages, overrides)[-1]
    return g.kind is LoopKind.PRANGE and len(g.members) > 1


def _prange_member(g: _Group, st: Stage, pinned: bool) -> Stage | None:
    """`st` if it can run in `g`'s prange (a small serial stage made parallel), else None.

    The prange runs over the leading axes of the member that fuses the most (a batched
    softmax's row max over n, k and its exp over n, k, i: all over n * k * i) where every
    member keeps its innermost data loop (a reduction its reduce loop) and has axes of the
    same extents there."""
    ok = _joinable(st) and not pinned
    if not (ok or (not pinned and _rides_along(st))):
        return None
    assert isinstance(st, ComputeStage)
    head = g.members[0]
    assert isinstance(head, ComputeStage)
    # (or over the head's leading axes alone, where cpu.fuse_points widened it to its innermost)
    own = st.fused if ok else 1
    width = next((w for w in dict.fromkeys((max(own, head.fused),
                                             max(own, default_fuse(head.order))))
                  if _shares_rows(g, st, w)), 0)
    if not width:
        return None
    return replace(st, fused=width) if ok else _cpu(st, parallel=True, fused=width, notes=(
        *st.notes, "joined although small: the prange of its group is there"))


def _shares_rows(g: _Group, st: ComputeStage, width: int) -> bool:
    """Whether `g`'s members and `st` can run in one prange over their first `width` axes:
    each has them, of the same extents, and reads the earlier ones only at its own parallel
    index (reduce bounds count too: `k < L[i + 1]` is another row)."""
    head = g.members[0]
    assert isinstance(head, ComputeStage)
    if not all(isinstance(m, ComputeStage) and _widens(m, width) and all(
            a.extent.same_as(b.extent) for a, b in zip(m.order[:width], head.order))
            for m in (*g.members, st)):
        return False
    rows: dict[int, tuple[int, ...]] = {}
    for m in (*g.members, st):
        assert isinstance(m, ComputeStage)
        own = list(m.order[:width])
        if any([x.indices[d] for d in rows[id(x.tensor)]] != own for x in reads_in(m.bodies)
               if id(x.tensor) in rows):
            return False
        rows.update({id(t): tuple(m.axes.index(a) for a in own) for t in m.tensors if t is not None})
    return True


def _widens(st: ComputeStage, width: int) -> bool:
    """Whether `st` can run with its first `width` axes in the prange, a split of its innermost
    axis kept serial (a lower-rank member may lose its innermost loop: per-row values)."""
    return width == st.fused or width <= len(st.order) - (st.cpu.split is not None)


def _chunk_member(g: _Group, st: Stage, pinned: bool) -> Stage | None:
    """`st` over the head's axes if it can fold its partial results in `g`'s chunk loops."""
    m = _axis_map(g.members[0], st)  # type: ignore[arg-type]
    written = {id(t) for x in g.members for t in _written(x)}
    if m is None or any(id(r.tensor) in written for r in stage_reads(st)):
        return None
    return on_loops_of(st, m)  # type: ignore[arg-type]


FUSIONS: dict[LoopKind, Callable[[_Group, Stage, bool], Stage | None]] = {
    LoopKind.PRANGE: _prange_member,
    LoopKind.CHUNKS: _chunk_member,
}


def _chunk_node(st: Stage) -> Node:
    """A CHUNKS member's node: a scalar rider (`_rider_map`) steps in the chunks' row loop."""
    acc = st.cpu.accumulate
    if isinstance(st, ComputeStage) and acc is not None and acc.vector:  # (members fold loops)
        return Loop(LoopKind.STEPPED, first_reduction(st).axis[1].extent, (StageRef(st.name),),
                    REASONS[LoopKind.STEPPED])
    return StageRef(st.name)


def _prange_body(members: list[Stage], readers: dict[int, set[str]]
                 ) -> tuple[list[Stage], tuple[Node, ...]]:
    """A prange group's members (a row-folded reduction over its producer's axes) and nodes:
    row buffers placed, each row fold a ROW loop of its producer and reduction."""
    names = {s.name for s in members}
    place = {s.name: Place.ROW_BUFFER for s in members[:-1] if _row_buffer(s, names, readers)}
    out: list[Stage] = []
    nodes: list[Node] = []
    for st in members:
        hit = _siblings(st, out, nodes) if LoopKind.SIBLINGS in NESTED else None
        if hit is not None:
            k, sm, down = hit
            st = renamed(st, sm)  # type: ignore[arg-type]
            if down:
                names = {r.name for r in refs((nodes[k],))}
                nodes.append(nodes.pop(k))
                out = [x for x in out if x.name not in names] + [x for x in out if x.name in names]
                k = len(nodes) - 1
            node = nodes[k]
            body = node.body if isinstance(node, Loop) else (node,)
            outer = st.order[st.fused] if len(st.order) > st.fused else first_reduction(st).axis[0]
            nodes[k] = Loop(LoopKind.SIBLINGS, outer.extent, (
                *body, StageRef(st.name, place.get(st.name, Place.ARRAY))),
                SIBLING_STORES if _stores(st) else REASONS[LoopKind.SIBLINGS])
            last = max(i for i, x in enumerate(out) if x.name in {r.name for r in refs((nodes[k],))})
            out.insert(last + 1, st)
            continue
        prev = out[-1] if out else None
        m = NESTED[LoopKind.ROW](prev, st) if LoopKind.ROW in NESTED and isinstance(
            prev, ComputeStage) and nodes and isinstance(nodes[-1], StageRef) else None
        if m is not None:
            assert isinstance(st, ComputeStage) and isinstance(prev, ComputeStage)
            st = renamed(st, m)
            nodes[-1] = Loop(LoopKind.ROW, prev.order[prev.fused].extent,
                             (nodes[-1], StageRef(st.name)), REASONS[LoopKind.ROW])
        else:
            nodes.append(StageRef(st.name, place.get(st.name, Place.ARRAY)))
        out.append(st)
    return out, tuple(nodes)


def _row_buffer(st: Stage, group: set[str], readers: dict[int, set[str]]) -> bool:
    """Whether `st` (not the last of its prange) keeps a row per iteration: only later members
    read it, it has a dim besides the parallel one, and it accumulates no rows."""
    ts = _written(st) if isinstance(st, ComputeStage) else ()
    return (not st.is_output and bool(ts) and len(st.axes) > st.fused  # type: ignore[union-attr]
            and st.cpu.accumulate is None
            and all(readers.get(id(t), set()) <= group - {st.name} for t in ts))


def _joinable(st: Stage) -> bool:
    return (isinstance(st, ComputeStage) and st.parallel and st.fused >= 1 and bool(st.order)
            and st.cpu.contraction is None and st.cpu.accumulate is None)


def _rides_along(st: Stage) -> bool:
    """A serial (small) loop-nest stage, which may join a prange but not open one."""
    return (isinstance(st, ComputeStage) and not st.parallel and bool(st.order)
            and st.cpu.contraction is None and st.cpu.accumulate is None and st.cpu.split is None)


def _written(st: Stage) -> tuple[Tensor, ...]:
    if isinstance(st, ScatterStage):
        return (st.tensor,)
    return tuple(t for t in st.tensors if t is not None)


def stage_reads(st: Stage) -> Iterator[Read]:
    """Every tensor read of a stage, reduction and scatter-domain bounds and BLAS operands included."""
    if isinstance(st, ComputeStage):
        yield from reads_in(st.bodies)
    else:
        yield from reads_in([e for u in st.updates for e in u.exprs], st.order)
    if isinstance(st, ComputeStage) and (c := st.cpu.contraction) is not None:
        yield from (Read(t, (), t.dtype) for t in (c.a, c.b))


def _split(st: Stage) -> Accumulate | None:
    """The stage's split accumulation, when its chunks fold in loops (not stepped lanes)."""
    if not isinstance(st, ComputeStage):
        return None
    acc = st.cpu.accumulate
    return acc if acc is not None and acc.split is not None and not acc.vector else None


def _scalar_lanes(st: Stage) -> Accumulate | None:
    """The split accumulation of a scalar (no data axes) stepped-lanes reduction over two
    axes (rows, then columns), else None."""
    if not isinstance(st, ComputeStage) or st.axes:
        return None
    acc = st.cpu.accumulate
    if acc is None or acc.split is None or not acc.vector or len(st.bodies) != 1:
        return None
    r = first_reduction(st)
    return acc if len(r.axis) == 2 and r.axis[0] is acc.split else None


def _rider_map(head: Stage, st: Stage) -> dict[IterVar, IterVar] | None:
    """`st`'s reduce axes (rows, columns) -> `head`'s (split, row), if the scalar split
    reduction `st` can fold in the loops of `head`, a row-accumulated split reduction over the
    same rows and columns that does not read it."""
    a, b = _split(head), _scalar_lanes(st)
    if a is None or b is None or a.row is None or a.chunks != b.chunks \
            or LoopKind.CHUNKS not in FUSIONS:
        return None
    assert isinstance(head, ComputeStage) and isinstance(st, ComputeStage)
    ra, (i, j) = first_reduction(head), first_reduction(st).axis
    if len(ra.axis) != 1 or head.axes != (a.row,) or any(
            not (x.lo.same_as(y.lo) and x.extent.same_as(y.extent))
            for x, y in ((i, a.split), (j, a.row))):
        return None
    mine = {id(t) for t in st.tensors}
    if any(id(x.tensor) in mine for x in stage_reads(head)):
        return None
    return {i: a.split, j: a.row}


def _row_map(e: ComputeStage, st: Stage) -> dict[IterVar, IterVar] | None:
    """`st`'s parallel and reduce axes -> `e`'s (parallel axes, row), if `st` can fold in `e`'s row loop."""
    c, ce = st.cpu, e.cpu
    if not (isinstance(st, ComputeStage) and c is not None and ce is not None
            and c.lanes > 1 and len(st.order) == st.fused and len(st.bodies) == 1
            and st.tensors[0] is not None):
        return None
    if (ce.accumulate or ce.contraction or ce.split or ce.lanes > 1
            or not e.parallel or len(e.order) != e.fused + 1 or e.fused != st.fused
            or len(e.bodies) != 1 or e.tensors[0] is None
            or any(isinstance(x, Reduce) for x in walk(e.bodies[0]))):
        return None
    *ps, j = e.order
    r = first_reduction(st)
    if len(r.axis) != 1 or not (r.axis[0].lo.same_as(j.lo) and r.axis[0].extent.same_as(j.extent)):
        return None
    m = {**dict(zip(st.order, ps)), r.axis[0]: j}
    mine = {a: b for b, a in m.items()}
    want = [mine[a] for a in e.axes]
    reads = [x for x in reads_in(st.bodies) if x.tensor is e.tensors[0]]
    if not reads or any(list(x.indices) != want for x in reads):
        return None
    return m


def _sibling_map(head: ComputeStage, st: Stage) -> dict[IterVar, IterVar] | None:
    """`st`'s data and reduce axes -> `head`'s, if both are lanes reductions (one reduction of
    one body each, unconditioned) over loops of the same extents and accumulation, or both
    elementwise (`_stores`) over serial loops of the same extents, so that `st` can fold in
    `head`'s loop nest; None otherwise."""
    if _stores(head) or _stores(st):
        pairs = list(zip(head.order, st.order))
        ok = _stores(head) and _stores(st) and len(head.order) == len(st.order) \
            and head.fused == st.fused  # type: ignore[union-attr]
        return {y: x for x, y in pairs} if ok and all(
            x.lo.same_as(y.lo) and x.extent.same_as(y.extent) for x, y in pairs) else None
    c, ch = st.cpu, head.cpu
    if not (isinstance(st, ComputeStage) and c is not None and ch is not None
            and c.lanes == ch.lanes and len(st.bodies) == len(head.bodies) == 1
            and st.tensors[0] is not None and len(st.order) == len(head.order) >= 1):
        return None
    if any(x.accumulate or x.contraction or x.split for x in (c, ch)) or not all(
            any(isinstance(x, Reduce) for x in walk(s.bodies[0])) for s in (head, st)):
        return None
    ra, rb = first_reduction(head), first_reduction(st)
    if len(ra.axis) != len(rb.axis) or wide_sum(ra) != wide_sum(rb) or ra.init or rb.init \
            or not (always(ra.condition) and always(rb.condition)):
        return None
    if c.lanes <= 1 and not all(scalar_sibling(r) for r in (ra, rb)):
        return None
    pairs = [*zip(head.order, st.order), *zip(ra.axis, rb.axis)]
    if not all(x.lo.same_as(y.lo) and x.extent.same_as(y.extent) for x, y in pairs):
        return None
    m = {y: x for x, y in pairs}
    bound = {id(v) for a in rb.axis for e in (a.lo, a.extent) for v in walk(e)}
    if bound & {id(a) for a in st.order[st.fused:]}:
        return None  # reduce bounds over a serial data axis: keep its own loops
    return m


def scalar_sibling(r: Reduce) -> bool:
    """A serial reduction (no lanes) that may fold with a sibling: a sum of one value over one
    axis, not wide, each accumulator then stepping `acc + term` in axis order as it would
    alone (grid_sample's two sums over the channels of the same four gathered taps,
    d/dgrid[.., 0] and [.., 1]: the taps loaded once for both)."""
    return (r.combiner.kind is ReduceKind.SUM and len(r.source) == 1 and len(r.axis) == 1
            and not wide_sum(r))


def _stores(st: Stage) -> bool:
    """An elementwise stage of one body over serial loops, with no loop decision of its own."""
    c = st.cpu
    return (isinstance(st, ComputeStage) and len(st.bodies) == 1 and st.tensors[0] is not None
            and len(st.order) > st.fused and c.lanes <= 1 and not (
                c.accumulate or c.contraction or c.split or c.ranges or c.views)
            and not any(isinstance(x, Reduce) for x in walk(st.bodies[0])))


def _siblings(st: Stage, out: list[Stage], nodes: list[Node]
              ) -> tuple[int, dict[IterVar, IterVar], bool] | None:
    """(index in `nodes`, axis map, whether that node moves down to the end) of the earliest
    plain member or SIBLINGS loop that `st` can fold with, when `st` reads nothing written by
    it or by any member after it; else None.  An elementwise `st` that reads a member after
    it may instead fold with it where no member after it reads what it writes: that node
    moves down to `st` (a gradient's row loop next to another's, past the row scalars that
    only the other reads)."""
    reads = {id(r.tensor) for r in stage_reads(st)}
    blocked = False  # a member at or after the candidate writes what `st` reads
    for k in range(len(nodes) - 1, -1, -1):
        node = nodes[k]
        names = {r.name for r in refs((node,))}
        writes = {id(t) for x in out if x.name in names for t in _written(x)}
        if writes & reads:
            if not _stores(st):
                return None
            blocked = True
            continue
        if isinstance(node, StageRef) or node.kind is LoopKind.SIBLINGS:
            head = next(x for x in out if x.name == next(refs((node,))).name)
            m = NESTED[LoopKind.SIBLINGS](head, st) if isinstance(head, ComputeStage) else None
            later = {r.name for n in nodes[k + 1:] for r in refs((n,))}
            if m is not None and not (blocked and any(
                    id(r.tensor) in writes for x in out if x.name in later
                    for r in stage_reads(x))):
                return k, m, blocked
    return None


def renamed(st: ComputeStage, m: dict[IterVar, IterVar]) -> ComputeStage:
    """`st` over the axes `m` maps its own to, its CPU decisions' expressions included."""
    c = st.cpu
    cpu = replace(c, hoisted=tuple(rename_axes(e, m) for e in c.hoisted),
                  reciprocals=tuple(rename_axes(e, m) for e in c.reciprocals),
                  fold_hoisted=tuple(rename_axes(e, m) for e in c.fold_hoisted))
    return replace(st, axes=tuple(m.get(a, a) for a in st.axes),
                   order=tuple(m.get(a, a) for a in st.order),
                   bodies=tuple(rename_axes(b, m) for b in st.bodies), cpu=cpu)


# loops nested in a prange: the rule mapping a member's axes onto an earlier member's loops
NESTED: dict[LoopKind, Callable[[ComputeStage, Stage], dict[IterVar, IterVar] | None]] = {
    LoopKind.ROW: _row_map,
    LoopKind.SIBLINGS: _sibling_map,
}


def first_reduction(st: ComputeStage) -> Reduce:
    """The stage's first reduction (its only one where the callers ask: split, lanes and row folds)."""
    return next(x for b in st.bodies for x in walk(b) if isinstance(x, Reduce))


def _axis_map(head: ComputeStage, st: Stage) -> dict[IterVar, IterVar] | None:
    """`st`'s data and reduce axes -> `head`'s, if `st` can run in `head`'s loops, else None."""
    a, b = _split(head), _split(st)
    if a is None or b is None or a.chunks != b.chunks:
        return None
    assert isinstance(st, ComputeStage)
    ra, rb = first_reduction(head), first_reduction(st)
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
    """`st` written over the axes of the stage whose loops it shares (`m`: its axes to those)."""
    acc = st.cpu.accumulate
    assert acc is not None and acc.split is not None
    st = renamed(st, m)
    return replace(st, cpu=replace(st.cpu, accumulate=replace(
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
