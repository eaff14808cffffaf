"""The run-time bounds checks a plan's kernels make (te.bounds proves the other reads in range).

Per node of the plan's tree (a stage, or the stages sharing a loop), the read dims that te.bounds
cannot prove inside their tensor are checked where they are read; a dim indexed `a + c` by a
loop axis whose bounds are read from data (`reduce_axis((0, L[i]))`) is checked once at the
loop's entry instead, at both ends of its range (the index is monotone in `a`), where the
stage's loops are plain (`plain`): the innermost loop then pays nothing.  The plan holds them
(`Plan.checks`, printed under "run-time bounds checks"); the renderers print them.
"""
from __future__ import annotations

from typing import Sequence

from ..te.affine import to_affine
from ..te.bounds import facts, unproven_dims
from ..te.expr import Expr, IterVar, Read
from ..te.visit import walk
from .plan import Checks, ComputeStage, ScatterStage

Group = Sequence[ComputeStage | ScatterStage]


def node_checks(group: Group, hoist: bool) -> Checks:
    """The checks of one node's stages; `hoist`: its loops may check at loop entry."""
    unproven = stage_unproven(group)
    return Checks(unproven, loop_entry_checks(unproven) if hoist else {})


def plain(group: Group) -> bool:
    """A single stage whose loops are all plain range loops (no lanes, BLAS, row accumulation):
    where a check may move to a loop's entry."""
    return len(group) == 1 and isinstance(st := group[0], ComputeStage) and st.cpu.lanes <= 1 \
        and st.cpu.accumulate is None and st.cpu.contraction is None


def stage_unproven(group: Group) -> dict[Read, set[int]]:
    """Read dims of a stage (or joined group) that te.bounds cannot prove in bounds; a read in
    several places is checked if one of them needs it."""
    parts: list[tuple[Expr, tuple[Expr, ...]]] = []
    for st in group:
        if isinstance(st, ComputeStage):
            pieces = st.cpu.ranges.pieces if st.cpu.ranges else ((None, st.bodies),)
            parts += [(b, ()) for _, bodies in pieces for b in bodies]  # as rendered
        else:
            for u in st.updates:
                parts += [(u.condition, ())]
                parts += [(e, tuple(facts(u.condition))) for e in (*u.index, u.value)]
    out: dict[Read, set[int]] = {}
    for e, known in parts:
        for r, dims in unproven_dims([e], known).items():
            out.setdefault(r, set()).update(dims)
    return out


def loop_entry_checks(unproven: dict[Read, set[int]]) -> dict[IterVar, list[tuple[Read, int, int]]]:
    """Unproven read dims indexed `a + c` by a loop axis `a` whose bounds are read from data."""
    out: dict[IterVar, list[tuple[Read, int, int]]] = {}
    for r, dims in unproven.items():
        for d in sorted(dims):
            aff = to_affine(r.indices[d])
            if aff is None or len(aff[0]) != 1:
                continue
            ((a, k),) = aff[0].items()
            if k == 1 and isinstance(a, IterVar) and any(
                    isinstance(x, Read) for b in (a.lo, a.extent) for x in walk(b)):
                out.setdefault(a, []).append((r, d, aff[1]))
    return out
