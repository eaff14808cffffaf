"""A CPU plan lowered to one loop tree per node of its nest: what `print(plan)` shows and the CPU
renderer prints, a rule per node kind (`KERNEL_LINES`, `cpu_render.NODE_RULES`).

A stage of its own is announced (`Alloc`: its arrays) and runs its own loops (`Scope`: the nodes
of stageloops.py; a BLAS contraction, one `Blas` node).  A shared prange
(loopnest.Loop, PRANGE) announces every member first, then one `Shared` loop in which each
`Member` binds its parallel axes from the shared index and runs its serial loops.  Stages that
fold together in its iteration (`Together`: ROW, SIBLINGS) share one loop nest, each node `In`
its stage's environment: `Folds` steps several accumulators in one nest, `RowFold` folds a
row's elements as they are stored.  A row accumulation is `RowAcc`, `FoldRows`, `Finish`;
split sums (alone, or sharing chunks: CHUNKS, with STEPPED riders) are their `Partials`, a
prange over the chunks folding them (`ChunkFold`), then each one's `Combine`.

    Alloc(softmax_max_red1) Alloc(softmax_exp, joined, row buffer) ...
    Shared(prange(n))
      Member(softmax_max_red1): Fold max over k, Store
      Member(softmax_exp): Together(row): In(..Hoist), In(RowFold(i1, Store exp, sum), Store)
      Member(softmax): Hoist, For(i1, Store)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..te.expr import IterVar, Reduce
from ..te.visit import walk
from .loopnest import PLACES, Loop, LoopKind, Node, Place, StageRef, refs
from .loopnest import lines as nest_lines
from .plan import ComputeStage, Plan, ScatterStage
from .stageloops import (LINES, Fold, For, Let, Par, SNode, Store, fold_shared, hoist, inner_loops,
                         loops_over, reduce_groups, scatter_loops, stage_loops, stores)
from .stageloops import lines as stage_lines


@dataclass(frozen=True)
class Alloc:
    """Stage `stage` announced (a comment) and its arrays allocated before the loops; `joined`:
    it runs in a loop an earlier stage opened; `row_buffer`: its array is allocated in each
    iteration of the shared prange instead, without the parallel dims (its `Member`)."""

    stage: str
    joined: bool = False
    row_buffer: bool = False


@dataclass(frozen=True)
class Scope:
    """The nodes of stage `stage`, with its names."""

    stage: str
    body: tuple[SNode | KNode, ...]


@dataclass(frozen=True)
class Shared:
    """A prange several stages share (loopnest.Loop of kind PRANGE), over the first member's
    parallel axes."""

    loop: Loop
    body: tuple[Member, ...]


@dataclass(frozen=True)
class Member:
    """Stages `stages` of a shared prange (one, or SIBLINGS): their row buffers (`rows`)
    allocated, their parallel axes bound from the shared index, then `body`."""

    stages: tuple[str, ...]
    rows: tuple[bool, ...]
    body: tuple[SNode | KNode, ...]


@dataclass(frozen=True)
class Blas:
    """A contraction run as a BLAS matrix product (plan.Contraction): `text` says how."""

    stage: str
    text: str


@dataclass(frozen=True)
class Together:
    """Stages folding in one loop nest (loopnest.Loop of kind ROW or SIBLINGS, in a shared
    prange's iteration; CHUNKS: split sums sharing a chunk prange), `body` the nest."""

    loop: Loop
    body: tuple[SNode | KNode, ...]


@dataclass(frozen=True)
class In:
    """`body` in stage `stage`'s environment (its hoisted values, reciprocals, accumulators:
    those of `env_of`, where given), within a loop nest that several stages share."""

    stage: str
    body: tuple[SNode | KNode, ...]
    env_of: str = ""


@dataclass(frozen=True)
class Folds:
    """Reductions (stage, group) over the same loops folding in one loop nest, an accumulator
    each stepping in the innermost (`serial`: as scalar sums, in axis order)."""

    folds: tuple[tuple[str, tuple[Reduce, ...]], ...]
    serial: bool


@dataclass(frozen=True)
class Narrow:
    """A group's accumulator as a value of its dtype (a wide sum's float64 one, rounded)."""

    group: tuple[Reduce, ...]


@dataclass(frozen=True)
class RowFold:
    """The loop of `axis` storing `store` (a row of the producer) and folding `group` of each
    element as it is stored, then the fold's init (a ROW loop)."""

    axis: IterVar
    store: Store
    group: tuple[Reduce, ...]


@dataclass(frozen=True)
class RowAcc:
    """A local row of `stage`'s accumulators along `row` (its innermost data axis), each set to
    the reduction's identity (row accumulation: plan.Accumulate)."""

    stage: str
    row: IterVar


@dataclass(frozen=True)
class FoldRows:
    """Every term of `stage`'s reduction folded into its row: the reduce loops outside the row
    loop (a wide sum's float32 row blocks, the innermost reduce loop unrolled, indices read from
    data computed once per row: plan.Accumulate)."""

    stage: str
    row: IterVar


@dataclass(frozen=True)
class Finish:
    """At each point of the row: the accumulator rounded, the init applied, the bodies stored."""

    stage: str


@dataclass(frozen=True)
class Partials:
    """Split sums: the chunk count and size of the split axis (computed at the call where it is
    symbolic) and each stage's array of partial results, one per chunk."""

    stages: tuple[str, ...]
    chunks: int


@dataclass(frozen=True)
class ChunkFold:
    """In a chunk of the split axis: each stage's terms folded into its partial result (`vector`:
    scalar accumulators stepped like lanes; else its row), the STEPPED `riders` (their indices)
    stepping scalar accumulators in the row loop."""

    stages: tuple[str, ...]
    riders: tuple[int, ...]
    vector: bool
    stepped: tuple[str, ...] = ()  # the STEPPED loops, printed


@dataclass(frozen=True)
class Combine:
    """The partial results of `stage` combined in chunk order, then finished (`Finish`)."""

    stage: str


KNode = Alloc | Scope | Shared | Member | Blas | Together | In | Folds | Narrow | RowFold | \
    RowAcc | FoldRows | Finish | Partials | ChunkFold | Combine


def kernel_nodes(plan: Plan, node: Node) -> tuple[SNode | KNode, ...]:
    """The loop tree of one node of the plan's nest."""
    if isinstance(node, StageRef):
        st = plan.stage(node.name)
        own: tuple[SNode | KNode, ...]
        if isinstance(st, ScatterStage):
            own = scatter_loops(st)
        elif st.cpu.contraction is not None:
            own = (Blas(st.name, st.cpu.contraction.describe()),)
        elif st.cpu.accumulate is not None:
            own = _accumulate(st) if st.cpu.accumulate.split is None else _split([st])
        else:
            own = stage_loops(st)
        return Alloc(st.name), Scope(st.name, own)
    members = list(refs((node,)))
    allocs = tuple(Alloc(r.name, k > 0, r.place is Place.ROW_BUFFER)
                   for k, r in enumerate(members))
    if node.kind is LoopKind.CHUNKS:
        group = [st for r in members if isinstance(st := plan.stage(r.name), ComputeStage)]
        steps = [(k, n) for k, n in enumerate(node.body) if isinstance(n, Loop)]
        return (*allocs, Together(node, (In(group[0].name, _split(
            group, tuple(k for k, _ in steps), tuple(nest_lines(tuple(n for _, n in steps), 1)))),)))
    body = []
    for child in node.body:
        refs_ = list(refs((child,))) if isinstance(child, Loop) and \
            child.kind is LoopKind.SIBLINGS else [next(refs((child,)))]
        st = plan.stage(refs_[-1].name)
        assert isinstance(st, ComputeStage)
        inner: tuple[SNode | KNode, ...]
        if isinstance(child, Loop):
            folding = [s for r in refs((child,)) if isinstance(s := plan.stage(r.name), ComputeStage)]
            inner = (Together(child, (_siblings if child.kind is LoopKind.SIBLINGS else _row)(
                folding)),)
        else:
            inner = inner_loops(st, st.order[st.fused:])
        body.append(Member(tuple(r.name for r in refs_),
                           tuple(r.place is Place.ROW_BUFFER for r in refs_), inner))
    return (*allocs, Shared(node, tuple(body)))


def _siblings(stages: list[ComputeStage]) -> tuple[SNode | KNode, ...]:
    """Their hoisted values, the loops once, then each one's store; reductions: each one's fold
    stepping in the innermost loop of one nest, then rounded and stored."""
    first = stages[0]
    body: tuple[SNode | KNode, ...] = tuple(In(s.name, stores(s)) for s in stages)
    if any(isinstance(x, Reduce) for s in stages for x in walk(s.bodies[0])):
        groups = [tuple(reduce_groups(s.bodies)[0]) for s in stages]
        shared = [fold_shared(s, g[0]) for s, g in zip(stages, groups)]
        body = (*(In(s.name, (Let(h, "h"),)) for s, h in zip(stages, shared) if h),
                Folds(tuple((s.name, g) for s, g in zip(stages, groups)), first.cpu.lanes <= 1),
                *(In(s.name, (Narrow(g), *stores(s))) for s, g in zip(stages, groups)))
    return (*(In(s.name, (hoist(s),)) for s in stages),
            *loops_over(first.order[first.fused:], body))


def _row(stages: list[ComputeStage]) -> tuple[SNode | KNode, ...]:
    """The producer's row loop storing each element and folding it as it is stored, in one
    environment (both stages' hoisted values), then the reducer's store."""
    e, st = stages
    group = tuple(reduce_groups(st.bodies)[0])
    (store,) = stores(e)  # (fuse joins one-body stages only)
    return (In(e.name, (hoist(e),)), In(st.name, (hoist(st),), e.name),
            In(st.name, (RowFold(e.order[e.fused], store, group), *stores(st)), e.name))


def _accumulate(st: ComputeStage) -> tuple[SNode | KNode, ...]:
    """Row accumulation: the data loops but the row (the leading ones a prange), a row of
    accumulators, the reduce loops folding into it, then the row finished."""
    row = st.cpu.accumulate.row  # type: ignore[union-attr]
    assert row is not None
    outer = [a for a in st.order if a is not row]
    inner = (RowAcc(st.name, row), FoldRows(st.name, row), For(row, (Finish(st.name),)))
    if st.parallel and st.fused:
        return (Par(st.order[: st.fused], loops_over(outer[st.fused:], inner)),)
    return loops_over(outer, inner)


def _split(stages: list[ComputeStage], riders: tuple[int, ...] = (), stepped: tuple[str, ...] = ()
           ) -> tuple[SNode | KNode, ...]:
    """Split sums over the same chunks: their partial results, a prange over the chunks running
    their data loops (but the row) and folds, then each one's partial results combined."""
    st, acc = stages[0], stages[0].cpu.accumulate
    assert acc is not None and acc.split is not None
    folds = loops_over([a for a in st.order if a is not acc.row], (ChunkFold(
        tuple(s.name for s in stages), riders, acc.vector, stepped),))
    combine = [Scope(s.name, (Par(s.order[:1], loops_over(s.order[1:], (Combine(s.name),))),)
                     if s.order else (Combine(s.name),)) for s in stages]
    return (Partials(tuple(s.name for s in stages), acc.chunks),
            Par((acc.split,), folds, acc.chunks), *combine)


def _names(n: Member | Scope) -> list[str]:
    if isinstance(n, Scope):
        return [n.stage]
    rows = [s for s, r in zip(n.stages, n.rows, strict=True) if r]
    mark = f"  [{', '.join(rows)}: row buffer{'s' * (len(rows) > 1)}: " \
           f"{PLACES[Place.ROW_BUFFER]}]" if rows else ""
    return [", ".join(n.stages) + mark]


# each node's own line(s), with its reason (the stage's own nodes: stageloops.LINES)
KERNEL_LINES: dict[type, Callable[[Any], list[str]]] = {
    RowAcc: lambda n: [f"a row of accumulators along {n.row.name}: the reduce loops outside it, "
                       f"reads stream along it"],
    FoldRows: lambda n: [f"fold every term into the row (reduce loops outside {n.row.name})"],
    Finish: lambda n: [f"store {n.stage} from its accumulator"],
    Partials: lambda n: [f"partial results of {', '.join(n.stages)}: {n.chunks} each"],
    ChunkFold: lambda n: [f"fold the chunk's terms into {', '.join(n.stages)}'s partial results"
                          + ("" if not n.vector else " (scalar accumulators stepped like lanes)")
                          + (f"; {', '.join(n.stages[k] for k in n.riders)} step in its row loop"
                             if n.riders else ""), *n.stepped],
    Combine: lambda n: [f"{n.stage}: its partial results combined in chunk order, then stored"],
    **LINES, Alloc: lambda n: [], Scope: _names, Member: _names, Blas: lambda n: [n.text],
    Shared: lambda n: nest_lines((n.loop,), 0)[:1], Together: lambda n: nest_lines((n.loop,), 0)[:1],
    In: lambda n: [], Narrow: lambda n: [],
    Folds: lambda n: ["fold " + ", ".join(f"{LINES[Fold](Fold(g, 1))[0][5:]} ({s})"
                                          for s, g in n.folds) + " in one loop nest"],
    RowFold: lambda n: [f"for {n.axis.name} in its row: store {n.store.tensor.name} and "
                        f"{LINES[Fold](Fold(n.group, 1))[0]} of each element as it is stored"]}


def lines(plan: Plan, depth: int = 1) -> list[str]:
    """The plan's loop trees, one node a line with its reason, bodies indented beneath."""
    return [x for node in plan.tree for x in
            stage_lines(kernel_nodes(plan, node), depth, KERNEL_LINES)]
