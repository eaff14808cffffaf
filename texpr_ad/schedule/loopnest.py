"""The loop structure of a CPU plan: which stages share a loop, and where each stage's array lives.

A plan's `nest` is a small immutable tree.  A `StageRef` names a materialized stage (its own loop
nest is in the stage record: order, parallel axes, accumulation); a `Loop` is a loop that several
stages share, made by the fusion rewrite (`fuse.py`):

- `PRANGE`: one parallel loop over the stages' leading axes; each reads what earlier members write
  only at its own index (softmax's max, exp and sum; a normalization's statistics);
- `CHUNKS`: the chunk prange and loops of split reductions over the same rows (layer_norm's
  dgamma and dbeta read `dy` once);
- `ROW`: an elementwise stage's row loop, in which a reduction of that row folds each element as
  it is stored (softmax's `exp` and its sum: one pass over the row).
- `SIBLINGS`: reductions of a prange over the same loops that do not read each other, folding
  in one loop nest with an accumulator each (a normalization gradient's sums: one pass); or
  elementwise stages likewise, a store each (two gradients over the same rows: one pass).
- `STEPPED`: in a CHUNKS loop, a scalar sum over the same rows and columns whose stepped
  accumulators ride in the row loop of the chunks (ew_chain's forward: one pass).

A member's `place` says where its array lives: a fresh array per call, or (`ROW_BUFFER`) a buffer
per iteration of the enclosing prange, without that dim, when only later members read it.

    prange(n) [PRANGE]
      softmax_maxelem
      softmax_exp (row buffer)  \\ row loop [ROW]
      softmax_expsum            /
      softmax_norm
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterator

from ..te.expr import Const, Expr
from ..te.printer import expr_str


class Kind(str, Enum):
    """An enum whose members are also their string values (equal to them, printed as them),
    so JSON, printed plans and older callers comparing with "block" keep working."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class LoopKind(Kind):
    """What a shared loop runs over (see the module docstring)."""

    PRANGE = "prange"
    CHUNKS = "chunks"
    ROW = "row"
    SIBLINGS = "siblings"
    STEPPED = "stepped"


class Place(Kind):
    """Where a stage's array lives."""

    ARRAY = "array"
    ROW_BUFFER = "row buffer"


@dataclass(frozen=True)
class StageRef:
    """A materialized stage (`Plan.stage(name)`), with where its array lives."""

    name: str
    place: Place = Place.ARRAY


@dataclass(frozen=True)
class Loop:
    """A loop of `extent` iterations shared by `body`, in order; `reason` says why they may."""

    kind: LoopKind
    extent: Expr
    body: tuple[Node, ...]
    reason: str


Node = StageRef | Loop

REASONS = {
    LoopKind.PRANGE: "stages with the same leading parallel axes, each reading the earlier ones "
                     "only at its own index, run in one prange",
    LoopKind.CHUNKS: "split reductions into the same chunks over loops of the same extents fold "
                     "their partial results in one chunk prange and loop nest (they do not read "
                     "each other): one pass over the rows for all",
    LoopKind.ROW: "a reduction of this row folds each element as it is stored (one pass over the "
                  "row; same terms, same order)",
    LoopKind.SIBLINGS: "reductions over the same loops that do not read each other fold in one "
                       "loop nest, an accumulator each (one pass over what they read; same "
                       "terms, same order)",
    LoopKind.STEPPED: "a scalar sum over the chunks' rows and columns steps its accumulators in "
                      "their row loop (one pass over the rows for it too; same terms, same order)",
}
SIBLING_STORES = ("elementwise stages over the same loops that do not read each other run in one "
                  "loop nest, a store each (one pass over what they read; a term they share "
                  "computed once)")
PLACES = {Place.ROW_BUFFER: "only later stages of this prange read it, at the same parallel "
                            "index: a buffer per iteration without that dim, which stays in cache"}


def refs(nodes: tuple[Node, ...]) -> Iterator[StageRef]:
    """The stages under `nodes`, in order."""
    for n in nodes:
        if isinstance(n, Loop):
            yield from refs(n.body)
        else:
            yield n


def lines(nodes: tuple[Node, ...], depth: int = 1) -> list[str]:
    """The tree, one node a line, indented by depth, each loop with its reason."""
    out, pad = [], "  " * depth
    for n in nodes:
        if isinstance(n, Loop):
            ext = n.extent.value if isinstance(n.extent, Const) else expr_str(n.extent)
            out.append(f"{pad}{n.kind}({ext}): {n.reason}")
            out += lines(n.body, depth + 1)
        else:
            where = f"  [{n.place}: {PLACES[n.place]}]" if n.place in PLACES else ""
            out.append(f"{pad}{n.name}{where}")
    return out
