"""CPU refine step 8 (join): consecutive stages share one prange.

`join_stages` marks a stage that runs inside the previous stage's prange: one parallel axis of
the same extent, reading the earlier stages of the group only at its own parallel index
(row-wise chains: softmax, normalizations); a small serial stage rides along.
`pull_into_pranges` first moves a stage that would open a prange of its own back to just
after an earlier group it can join.  `row_buffers` turns an intermediate that only later
stages of its prange read into a per-iteration buffer.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping

from ..te.expr import Expr, Read
from ..te.tensor import Tensor
from ..te.visit import reads_in
from .plan import ComputeStage, ScatterStage, Stage
from .plan import with_cpu as _cpu


def _joinable(st: Stage) -> bool:
    return (isinstance(st, ComputeStage) and st.parallel and st.fused == 1 and bool(st.order)
            and st.cpu.contraction is None and st.cpu.accumulate is None)  # type: ignore[union-attr]


def _rides_along(st: Stage) -> bool:
    """A serial (small) loop-nest stage, which may join a prange but not open one: the
    per-channel scalars between batch_norm's reductions would otherwise cut the chain."""
    return (isinstance(st, ComputeStage) and not st.parallel and bool(st.order)
            and st.cpu.contraction is None and st.cpu.accumulate is None  # type: ignore[union-attr]
            and st.cpu.split is None)  # type: ignore[union-attr]


def pull_into_pranges(stages: list[Stage], overrides: Mapping[str, Mapping[str, Any]]
                      ) -> list[Stage]:
    """Move a stage that would open a prange of its own back to just after an earlier prange
    group that it can join (step 8 then joins it), past stages that write nothing it reads:
    a plain batch_norm's `dgamma`, a per-channel sum over the same rows as `dvar`, listed
    after `dx`, then reads each channel's rows while they are in cache instead of in a pass
    of its own.  Stages reading it still come after it; nothing it reads moves."""
    out: list[Stage] = []
    for st in stages:
        out.append(st)
        pinned = bool({"order", "fuse", "parallel"} & set(overrides.get(st.name, {})))
        if pinned or not _joinable(st) or len(out) < 3 or join_stages(out, overrides)[-1].cpu.join:  # type: ignore[union-attr]
            continue
        reads = {id(r.tensor) for r in stage_reads(st)}
        for k in range(len(out) - 2, 0, -1):
            if any(id(t) in reads for t in _written(out[k])):
                break  # st reads what out[k] writes: it stays after it
            if join_stages([*out[:k], st], overrides)[-1].cpu.join:  # type: ignore[union-attr]
                out[k:] = [st, *out[k:-1]]
                break
    return out


def _written(st: Stage) -> tuple[Tensor, ...]:
    if isinstance(st, ScatterStage):
        return (st.tensor,)
    return tuple(t for t in st.tensors if t is not None)


def join_stages(stages: list[Stage], overrides: Mapping[str, Mapping[str, Any]]) -> list[Stage]:
    """Mark stages that run inside the previous stage's prange (step 8); a small serial stage
    joins too (it becomes one prange iteration's work), so the group goes on after it."""
    out: list[Stage] = []
    rows: dict[int, int] = {}  # tensor id -> dim written at the shared parallel index
    ext: Expr | None = None
    for st in stages:
        pinned = bool({"order", "fuse", "parallel"} & set(overrides.get(st.name, {})))
        ok = _joinable(st) and not pinned
        small = not ok and not pinned and ext is not None and _rides_along(st)
        if (ok or small) and ext is not None and st.order[0].extent.same_as(ext):  # type: ignore[union-attr]
            p = st.order[0]  # type: ignore[union-attr]
            reads = [x for x in reads_in(st.bodies)  # type: ignore[union-attr]
                     if id(x.tensor) in rows]  # in reduce bounds too: `k < L[i + 1]` is another row
            if all(x.indices[rows[id(x.tensor)]] is p for x in reads):
                st = _cpu(st, join=True) if ok else _cpu(
                    st, join=True, parallel=True, fused=1,
                    notes=(*st.notes, "joined although small: the prange of its group is there"))
                ok = True
            else:
                rows, ext = {}, None
        else:
            rows, ext = {}, None
        if ok:
            if ext is None:
                ext = st.order[0].extent  # type: ignore[union-attr]
            d = st.axes.index(st.order[0])  # type: ignore[union-attr]
            rows.update({id(t): d for t in st.tensors if t is not None})  # type: ignore[union-attr]
        out.append(st)
    return out


def stage_reads(st: Stage) -> Iterator[Read]:
    """Every tensor read of a stage, reduction and scatter-domain bounds and BLAS operands included."""
    if isinstance(st, ComputeStage):
        yield from reads_in(st.bodies)
    else:
        yield from reads_in([e for u in st.updates for e in u.exprs], st.order)
    if isinstance(st, ComputeStage) and st.cpu.contraction is not None:  # type: ignore[union-attr]
        c = st.cpu.contraction  # type: ignore[union-attr]
        yield from (Read(t, (), t.dtype) for t in (c.a, c.b))


def row_buffers(stages: list[Stage]) -> list[Stage]:
    """Joined intermediates read only inside their own prange become per-iteration buffers."""
    group: list[int] = []  # the current joined group, as positions in `stages`
    groups: list[list[int]] = []
    for k, st in enumerate(stages):
        if st.cpu.join and group:  # type: ignore[union-attr]
            group.append(k)
        else:
            group = [k]
            groups.append(group)
    readers: dict[int, set[int]] = {}  # tensor id -> positions of the stages reading it
    for k, st in enumerate(stages):
        for r in stage_reads(st):
            readers.setdefault(id(r.tensor), set()).add(k)
    out = list(stages)
    for g in groups:
        for k in g[:-1] if len(g) > 1 else ():
            st = out[k]
            ts = [t for t in st.tensors if t is not None]  # type: ignore[union-attr]
            if (not st.is_output and ts and len(st.axes) > 1  # type: ignore[union-attr]
                    and st.cpu.accumulate is None  # type: ignore[union-attr]
                    and all(readers.get(id(t), set()) <= set(g) - {k} for t in ts)):
                out[k] = _cpu(st, row_buffer=True)
    return out
