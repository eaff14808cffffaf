"""A CPU plan lowered to one loop tree per node of its nest: what `print(plan)` shows and the CPU
renderer prints, a rule per node kind (`stageloops.LINES`, `cpu_render.NODE_RULES`).

A stage of its own is announced (`Alloc`: its arrays) and runs its own loops (`Scope`: the nodes
of stageloops.py; a BLAS contraction or an accumulation, one `Opaque` node).  A shared prange
(loopnest.Loop, PRANGE) announces every member first, then one `Shared` loop in which each
`Member` binds its parallel axes from the shared index and runs its serial loops; the loops in
which stages fold together (ROW, SIBLINGS, CHUNKS with its STEPPED riders) are `Opaque` nodes
of the fold they are (cpu_fold.py), printed with their reasons:

    Alloc(softmax_max) Alloc(softmax_exp, joined, row buffer) ...
    Shared(prange(n))
      Member(softmax_max):  for j / fold max over k / store
      Member(softmax_exp):  Opaque(row: exp stored, its sum folded as it is)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .loopnest import PLACES, Loop, LoopKind, Node, Place, StageRef, refs
from .loopnest import lines as nest_lines
from .plan import ComputeStage, Plan, ScatterStage
from .stageloops import LINES, SNode, inner_loops, scatter_loops, stage_loops
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
class Opaque:
    """A stage, or stages folding together, that one renderer routine writes whole: `kind`
    "blas" (a contraction), "accumulate" (row accumulation, split partial results), or a
    shared loop's kind (ROW, SIBLINGS, CHUNKS); `loop`, that loop; `text`, what it is."""

    kind: str
    stages: tuple[str, ...]
    text: tuple[str, ...]
    loop: Loop | None = None


KNode = Alloc | Scope | Shared | Member | Opaque


def kernel_nodes(plan: Plan, node: Node) -> tuple[SNode | KNode, ...]:
    """The loop tree of one node of the plan's nest."""
    if isinstance(node, StageRef):
        st = plan.stage(node.name)
        own: tuple[SNode | KNode, ...]
        if isinstance(st, ScatterStage):
            own = scatter_loops(st)
        elif st.cpu.contraction is not None:
            own = (Opaque("blas", (st.name,), (st.cpu.contraction.describe(),)),)
        elif st.cpu.accumulate is not None:
            own = (Opaque("accumulate", (st.name,), (st.cpu.accumulate.describe(),)),)
        else:
            own = stage_loops(st)
        return Alloc(st.name), Scope(st.name, own)
    members = list(refs((node,)))
    allocs = tuple(Alloc(r.name, k > 0, r.place is Place.ROW_BUFFER)
                   for k, r in enumerate(members))
    if node.kind is LoopKind.CHUNKS:
        return (*allocs, _opaque(node))
    body = []
    for child in node.body:
        refs_ = list(refs((child,))) if isinstance(child, Loop) and \
            child.kind is LoopKind.SIBLINGS else [next(refs((child,)))]
        st = plan.stage(refs_[-1].name)
        assert isinstance(st, ComputeStage)
        inner = (_opaque(child),) if isinstance(child, Loop) else \
            inner_loops(st, st.order[st.fused:])
        body.append(Member(tuple(r.name for r in refs_),
                           tuple(r.place is Place.ROW_BUFFER for r in refs_), inner))
    return (*allocs, Shared(node, tuple(body)))


def _opaque(loop: Loop) -> Opaque:
    return Opaque(str(loop.kind), tuple(r.name for r in refs((loop,))),
                  tuple(nest_lines((loop,), 0)), loop)


def _names(n: Member | Scope) -> list[str]:
    if isinstance(n, Scope):
        return [n.stage]
    if isinstance(n.body[0], Opaque):  # (the loop lists its members)
        return []
    row = f"  [row buffer: {PLACES[Place.ROW_BUFFER]}]"
    return [", ".join(s + row * r for s, r in zip(n.stages, n.rows, strict=True))]


# each node's own line(s), with its reason (the stage's own nodes: stageloops.LINES)
KERNEL_LINES: dict[type, Callable[[Any], list[str]]] = {
    **LINES, Alloc: lambda n: [], Scope: _names, Member: _names, Opaque: lambda n: list(n.text),
    Shared: lambda n: nest_lines((n.loop,), 0)[:1]}


def lines(plan: Plan, depth: int = 1) -> list[str]:
    """The plan's loop trees, one node a line with its reason, bodies indented beneath."""
    return [x for node in plan.tree for x in
            stage_lines(kernel_nodes(plan, node), depth, KERNEL_LINES)]
