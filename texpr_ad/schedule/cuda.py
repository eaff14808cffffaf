"""CUDA decisions on top of a `Plan` (pure; the CUDA renderer only spells them out).

`refine(plan, overrides)` re-plans the loop nests of a target-neutral plan for a
GPU, and `strategy(stage)` (kept in `stage.cuda`) says how each stage runs:

| strategy | when | kernel shape |
| --- | --- | --- |
| `thread` | a compute stage with data axes | one thread per output point: all data axes fused into one grid-stride loop, reductions in registers |
| `block` | a reduction with few output points and a long reduction (`is_block_reduce`) | one block per output point (grid-stride over blocks), threads stride over the flattened reduction, tree-combined in shared memory |
| `injective` | a scatter with an axis that one index dim equals exactly | grid-stride over that axis, plain `+=` (no two threads hit one element) |
| `atomic` | any other scatter of an atomically addable dtype | grid-stride over the rectangular leading axes, `cuda.atomic.add` |
| `single` | zero-dim or serial-by-override stages, scatters of other dtypes | one thread runs the whole loop nest |

User overrides `parallel`/`fuse` of a compute stage are kept as given.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

from ..te.expr import Const, Expr, IterVar, Reduce
from ..te.visit import bounds_depend_on_axes, walk
from .plan import ComputeStage, CudaStagePlan, CudaStrategy, Plan, ScatterStage, Stage

BLOCK_MAX_POINTS = 4096   # block reduction only if the stage has at most this many output points
BLOCK_MIN_REDUCE = 256    # ... and each point reduces over at least this many iterations
ATOMIC_DTYPES = ("float32", "float64", "int32", "int64", "uint32", "uint64")


def _count(exts: list[Expr]) -> float:
    n = 1.0
    for e in exts:
        n *= int(e.value) if isinstance(e, Const) else math.inf
    return n


def reductions(st: ComputeStage) -> list[Reduce]:
    """One Reduce per distinct reduction loop of the stage (tuple reducers share one)."""
    seen: dict[tuple, Reduce] = {}
    for b in st.bodies:
        for x in walk(b):
            if isinstance(x, Reduce):
                seen.setdefault(x.loop_key, x)
    return list(seen.values())


def is_block_reduce(st: ComputeStage) -> bool:
    """Few output points, long reductions: a block per point beats a thread per point."""
    reds = reductions(st)
    if not reds:
        return False
    points = _count([a.extent for a in st.axes])
    shortest = min(_count([a.extent for a in r.axis]) for r in reds)
    return points <= BLOCK_MAX_POINTS and shortest >= BLOCK_MIN_REDUCE


def rectangular_prefix(axes: tuple[IterVar, ...]) -> int:
    """How many leading axes have bounds free of loop variables (so they can be flattened)."""
    n = 0
    for a in axes:
        if bounds_depend_on_axes(a):
            break
        n += 1
    return n


def strategy(st: Stage) -> CudaStrategy:
    match st:
        case ComputeStage():
            if not st.axes:
                return CudaStrategy.BLOCK if is_block_reduce(st) else CudaStrategy.SINGLE
            if not st.parallel or st.fused == 0:
                return CudaStrategy.SINGLE
            return CudaStrategy.BLOCK if is_block_reduce(st) else CudaStrategy.THREAD
        case ScatterStage():
            if st.parallel_axis is not None:
                return CudaStrategy.INJECTIVE
            if st.order and st.tensor.dtype in ATOMIC_DTYPES:
                return CudaStrategy.ATOMIC
            return CudaStrategy.SINGLE
    raise TypeError(f"unknown stage {st!r}")


def _note(st: Stage) -> str:
    match strategy(st):
        case CudaStrategy.THREAD:
            return (f"cuda: one thread per point of {' * '.join(a.name for a in st.order[:st.fused])}"
                    f" (grid-stride), reductions in registers")
        case CudaStrategy.BLOCK:
            return ("cuda: one block per output point, threads stride over the reduction and "
                    "combine in a shared-memory tree")
        case CudaStrategy.INJECTIVE:
            return f"cuda: grid-stride over {st.parallel_axis.name}, plain += (injective)"
        case CudaStrategy.ATOMIC:
            n = rectangular_prefix(st.order)
            return (f"cuda: grid-stride over {' * '.join(a.name for a in st.order[:n])}, "
                    f"cuda.atomic.add (a true scatter)")
    return "cuda: a single thread runs this stage"


def refine(plan: Plan, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
    """The plan with every compute stage's data axes fused into the grid, a strategy per
    stage (`stage.cuda`) and CUDA notes."""
    overrides = overrides or {}
    stages: list[Stage] = []
    for st in plan.stages:
        ov = overrides.get(st.name, {})
        if isinstance(st, ComputeStage) and st.order and "parallel" not in ov and "fuse" not in ov:
            n = rectangular_prefix(st.order) or 1
            st = replace(st, parallel=True, fused=n,
                         notes=tuple(x for x in st.notes if not x.startswith("serial:")))
        st = replace(st, cuda=CudaStagePlan(strategy(st)))
        stages.append(replace(st, notes=(*st.notes, _note(st))))
    return replace(plan, target="cuda", stages=tuple(stages))


plan_for_cuda = refine  # the name tools and tests used
