"""CUDA decisions on top of a `Plan` (pure; the CUDA renderer only spells them out).

`refine(plan, overrides)` re-plans the loop nests of a target-neutral plan for a
GPU, and `strategy(stage)` (kept in `stage.cuda`) says how each stage runs:

| strategy | when | kernel shape |
| --- | --- | --- |
| `thread` | a compute stage with data axes | one thread per output point: all data axes fused into one grid-stride loop, reductions in registers |
| `block` | a reduction with few output points and a long reduction (`is_block_reduce`) | one block per output point (grid-stride over blocks), threads stride over the flattened reduction, tree-combined in shared memory; with fewer points than `SPLIT_BLOCKS`, each point's reduction is split over several blocks (`block_split`) and a second kernel combines their partials |
| `injective` | a scatter with an axis that one index dim equals exactly, long enough to fill the GPU (`INJECTIVE_MIN_POINTS`) | grid-stride over that axis, plain `+=` (no two threads hit one element) |
| `atomic` | any other scatter of an atomically addable dtype (also an injective one whose axis is short: max-pool's gradient over 64 channels ran 64 threads) | grid-stride over the rectangular leading axes, `cuda.atomic.add` |
| `single` | zero-dim or serial-by-override stages, scatters of other dtypes | one thread runs the whole loop nest |
| `tile` | a contraction `sum a * b` (`contraction.normal_form`) whose axes are batch, M, N and K only, static, from 0, large enough in M, N and K and in tiles (`tile_form`) | a block per tile of outputs (the largest of `TILES` giving enough blocks) (per batch entry): the operands' slices of K staged through shared memory by all threads, each thread accumulating `reg` x `reg` outputs in registers |

User overrides `parallel`/`fuse` of a compute stage are kept as given.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from ..te.expr import IterVar, Reduce, is_zero
from ..te.visit import bounds_depend_on_axes, walk
from .checks import node_checks
from .contraction import Role, SumOfProduct, normal_form
from .nest import const_int, extent_product
from .plan import ComputeStage, CudaStagePlan, CudaStrategy, Plan, ScatterStage, Stage, Tile
from .stageloops import LINES, Adds, inner_loops, loops_over, reduce_groups, stores
from .stageloops import lines as stage_lines

BLOCK_MAX_POINTS = 4096   # block reduction only if the stage has at most this many output points
BLOCK_MIN_REDUCE = 256    # ... and each point reduces over at least this many iterations
ATOMIC_DTYPES = ("float32", "float64", "int32", "int64", "uint32", "uint64")
SPLIT_BLOCKS = 1024       # a block reduction over fewer points is split to about this many blocks
SPLIT_MIN_PER_THREAD = 8  # ... keeping at least this many iterations per thread of a chunk
REDUCE_THREADS = 256      # threads per block of block reductions (LaunchConfig.reduce_threads)
INJECTIVE_MIN_POINTS = 1 << 16  # an injective axis shorter than this: atomics over more axes


def reductions(st: ComputeStage) -> list[Reduce]:
    """One Reduce per distinct reduction loop of the stage (tuple reducers share one)."""
    return [g[0] for g in reduce_groups(st.bodies)]


def is_block_reduce(st: ComputeStage) -> bool:
    """Few output points, long reductions: a block per point beats a thread per point."""
    reds = reductions(st)
    if not reds:
        return False
    points = extent_product([a.extent for a in st.axes])
    shortest = min(extent_product([a.extent for a in r.axis]) for r in reds)
    return points <= BLOCK_MAX_POINTS and shortest >= BLOCK_MIN_REDUCE


def threads_over(r: Reduce) -> int:
    """How many of `r`'s axes a block's threads stride over, flattened: all, unless their
    bounds depend on each other (then the outermost; the rest run serially)."""
    return 1 if any(v is b for a in r.axis for e in (a.lo, a.extent) for v in walk(e)
                    for b in r.axis) else len(r.axis)


def block_split(st: ComputeStage) -> int:
    """How many blocks reduce each output point of a block reduction: 1 unless the points are
    too few to fill the GPU (a sum to a scalar ran on one block: latency-bound) and every
    reduction is long, static and flattenable, and the data axes start at 0."""
    points = extent_product([a.extent for a in st.axes])
    reds = reductions(st)
    if not reds or points >= SPLIT_BLOCKS / 2 or any(not is_zero(a.lo) for a in st.axes):
        return 1
    if any(threads_over(r) < len(r.axis) for r in reds):
        return 1
    shortest = min(extent_product([a.extent for a in r.axis]) for r in reds)
    per_chunk = REDUCE_THREADS * SPLIT_MIN_PER_THREAD
    if math.isinf(shortest) or math.isinf(points):
        return 1
    split = int(min(SPLIT_BLOCKS // points, shortest // per_chunk))
    return split if split >= 2 else 1


# The simulator runs each thread as a Python thread: tiny tiles keep the tests fast.
_SIM = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
TILES = (Tile(2, 2, 2),) if _SIM else (Tile(16, 4, 16), Tile(16, 2, 16))  # largest first
TILE_MIN = 32  # M, N and K each at least this long for a tiled contraction
TILE_MIN_BLOCKS = 1 if _SIM else 256  # ... and at least this many tiles (a GPU's worth of blocks)


def tile_form(st: ComputeStage) -> SumOfProduct | None:
    """The stage's contraction normal form when it runs as tiles: a plain sum (no init or
    `where=`) of two reads indexed by the stage's axes alone, every data axis a batch, M or N
    axis and every reduction axis a K axis, all static and from 0, M, N and K at least
    `TILE_MIN` long (shorter ones run a thread per point)."""
    f = normal_form(st)
    if f is None or not f.simple or not (f.a.closed and f.b.closed):
        return None
    axes = (*f.data, *f.red)
    if f.axes(Role.OTHER) or any(const_int(a.extent) is None or not is_zero(a.lo) for a in axes):
        return None
    if any(extent_product([a.extent for a in f.axes(r)]) < TILE_MIN for r in (Role.M, Role.N, Role.K)):
        return None
    return f if tile_shape(f) is not None else None


def tile_shape(f: SumOfProduct) -> Tile | None:
    """The largest of `TILES` that cuts the contraction into at least `TILE_MIN_BLOCKS` tiles
    (fewer blocks than that leave most of a GPU idle), or None."""
    return next((t for t in TILES if math.prod(tile_counts(f, t.size)) >= TILE_MIN_BLOCKS), None)


def tile_counts(f: SumOfProduct, size: int) -> tuple[int, int, int]:
    """Batch entries, M tiles and N tiles of a static contraction in `size` x `size` tiles."""
    b, m, n = (int(extent_product([a.extent for a in f.axes(r)]))
               for r in (Role.BATCH, Role.M, Role.N))
    return b, -(-m // size), -(-n // size)


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
            if tile_form(st) is not None:
                return CudaStrategy.TILE
            return CudaStrategy.BLOCK if is_block_reduce(st) else CudaStrategy.THREAD
        case ScatterStage():
            atomic = bool(st.order) and st.tensor.dtype in ATOMIC_DTYPES
            if st.parallel_axis is not None and not (
                    atomic and extent_product([st.parallel_axis.extent]) < INJECTIVE_MIN_POINTS
                    and extent_product([a.extent for a in st.order[:rectangular_prefix(st.order)]])
                    >= 4 * extent_product([st.parallel_axis.extent])):
                return CudaStrategy.INJECTIVE
            if atomic:
                return CudaStrategy.ATOMIC
            return CudaStrategy.SINGLE
    raise TypeError(f"unknown stage {st!r}")


@dataclass(frozen=True)
class Grid:
    """One thread per point of the flattened `axes`: a grid-stride loop (THREAD)."""

    axes: tuple[IterVar, ...]
    body: tuple[Any, ...]


@dataclass(frozen=True)
class Single:
    """`body` run by one thread of the grid (SINGLE)."""

    body: tuple[Any, ...]


@dataclass(frozen=True)
class Tiles:
    """A block per tile of `tile.size` x `tile.size` outputs (of M x N, per batch entry of
    `form`): a grid-stride loop over the tiles, each thread's `reg` x `reg` accumulators."""

    form: SumOfProduct
    tile: Tile
    body: tuple[Any, ...]


@dataclass(frozen=True)
class Slices:
    """The K axes `axes` in slices of `depth` terms: each staged, then folded."""

    axes: tuple[IterVar, ...]
    depth: int
    body: tuple[Any, ...]


@dataclass(frozen=True)
class StageSlice:
    """All threads copy operand `operand`'s (0: A, over M; 1: B, over N) slice into shared
    memory, consecutive threads along K where `along_k` (its last index runs along K), else
    along its M (N) axes: coalesced reads either way; zero past the ends."""

    operand: int
    along_k: bool


@dataclass(frozen=True)
class Products:
    """Each thread steps its accumulators over the staged slice (a wide sum: float32 chains of
    a slice, folded into float64 after it)."""


@dataclass(frozen=True)
class TileStores:
    """Each thread's outputs stored, those inside the output."""


@dataclass(frozen=True)
class BlockShared:
    """A block reduction's shared arrays, `REDUCE_THREADS` elements per value of each of
    `groups` (its reductions), and the thread's index; `partial`: the partials arrays too."""

    groups: tuple[tuple[Reduce, ...], ...]
    partial: bool = False


@dataclass(frozen=True)
class BlockPoints:
    """One block per point of the flattened `axes`: a grid-stride loop over blocks (BLOCK);
    `split` > 1 with `partial`: `split` blocks per point, each over one chunk of the reductions."""

    axes: tuple[IterVar, ...]
    split: int
    partial: bool
    body: tuple[Any, ...]


@dataclass(frozen=True)
class BlockFold:
    """One reduction of a block's point: each thread folds its stride of the flattened reduction
    axes (`split` > 1: of its chunk's; `from_parts`: of the point's `split` partials), then the
    block combines them in a shared-memory tree; `partial`: thread 0 writes the chunk's result
    to the partials, else it is rounded (a wide sum) and its init folded in."""

    group: tuple[Reduce, ...]
    split: int
    partial: bool
    from_parts: bool
    flat: int  # the leading reduction axes the threads stride over, flattened (`threads_over`)


@dataclass(frozen=True)
class FirstThread:
    """`body` run by thread 0 of the block."""

    body: tuple[Any, ...]


def stage_nodes(st: Stage, partial: bool = False) -> tuple[Any, ...]:
    """A refined stage's loop tree: a THREAD stage's grid-stride loop or a SINGLE one's thread
    over its own loops (stageloops.inner_loops), a BLOCK stage's blocks over its points, a
    scatter's updates over its loops (INJECTIVE, ATOMIC: the leading ones a grid-stride loop),
    a TILE stage's tiles.  `partial`: a split BLOCK stage's first kernel, which reduces the
    chunks into partials (the second combines them)."""
    how = strategy(st)
    if isinstance(st, ComputeStage) and how is CudaStrategy.TILE:
        f, t = tile_form(st), st.cuda.tile if st.cuda else None
        assert f is not None and t is not None, "refine sets the tile shape"
        along = [any(a in f.red for a in x.index[-1].axes) for x in (f.a, f.b)]
        return (Tiles(f, t, (Slices(tuple(f.axes(Role.K)), t.depth, (
            StageSlice(0, along[0]), StageSlice(1, along[1]), Products())), TileStores())),)
    if isinstance(st, ComputeStage) and how is CudaStrategy.BLOCK:
        split = st.cuda.split if st.cuda else 1
        groups = tuple(tuple(g) for g in reduce_groups(st.bodies))
        folds = tuple(BlockFold(g, split, partial, split > 1 and not partial, threads_over(g[0]))
                      for g in groups)
        return (BlockShared(groups, partial),
                BlockPoints(st.order, split, partial,
                            folds if partial else (*folds, FirstThread(stores(st)))))
    if isinstance(st, ComputeStage) and how is CudaStrategy.THREAD:
        return (Grid(st.order[: st.fused], inner_loops(st, st.order[st.fused:])),)
    if isinstance(st, ComputeStage) and how is CudaStrategy.SINGLE:
        return (Single(inner_loops(st, st.order)),)
    if isinstance(st, ScatterStage):  # its updates over its loops, the leading ones the grid's
        n = {CudaStrategy.INJECTIVE: 1, CudaStrategy.ATOMIC: rectangular_prefix(st.order)}.get(how)
        if n is None:
            return (Single(loops_over(st.order, (Adds(),))),)
        adds = Adds(how is CudaStrategy.ATOMIC)
        return (Grid(st.order[:n], loops_over(st.order[n:], (adds,))),)
    raise TypeError(f"stage {st.name}: no CUDA loop tree for strategy {how}")


KERNEL_LINES: dict[type, Callable[[Any], list[str]]] = {
    Grid: lambda n: [f"grid-stride over {' * '.join(a.name for a in n.axes)}: one thread per "
                     f"point"],
    Adds: lambda n: ["target[index] += value for each update, under its condition" + (
        ": cuda.atomic.add, points may collide" if n.atomic else "")],
    Single: lambda n: ["one thread of the grid"],
    Tiles: lambda n: [f"grid-stride over tiles of {n.tile.size} x {n.tile.size} outputs of "
                      f"{_names(n.form.axes(Role.M))} x {_names(n.form.axes(Role.N))}"
                      + (f" per {_names(n.form.axes(Role.BATCH))}" if n.form.axes(Role.BATCH)
                         else "") + f", a block each: {n.tile.threads} x {n.tile.threads} "
                      f"threads, {n.tile.reg} x {n.tile.reg} outputs a thread in registers"],
    Slices: lambda n: [f"for {_names(list(n.axes))} in slices of {n.depth} terms"],
    StageSlice: lambda n: [f"stage {'AB'[n.operand]}'s slice: all threads, consecutive ones "
                           f"along {'K' if n.along_k else 'MN'[n.operand]} (coalesced)"],
    Products: lambda n: ["each thread steps its accumulators over the slice"],
    TileStores: lambda n: ["store each thread's outputs inside the output"],
    BlockShared: lambda n: [f"shared: {REDUCE_THREADS} elements per reduction value" + (
        ", and the partials arrays (chunk last)" if n.partial else "")],
    BlockPoints: lambda n: [f"grid-stride over blocks, one per point of "
                            f"{' * '.join(a.name for a in n.axes) or 'the stage'}" + (
                                f" and chunk ({n.split} per point: too few points to fill the "
                                f"GPU)" if n.partial else "")],
    BlockFold: lambda n: [f"fold {n.group[0].combiner.kind.value} over "
                          f"{', '.join(a.name for a in n.group[0].axis)}: " + (
                              f"threads stride over the point's {n.split} partials"
                              if n.from_parts else "threads stride over "
                              + ("their chunk" if n.partial else "it")) +
                          ", then combine in a shared-memory tree" +
                          ("; thread 0 writes the chunk's partial" if n.partial else "")],
    FirstThread: lambda n: ["thread 0 of the block"],
}


def _names(axes: list[IterVar]) -> str:
    return " * ".join(a.name for a in axes)


def lines(plan: Plan) -> list[str]:
    """The plan's kernels, one per stage (a split block reduction: two), each with its loop
    tree."""
    table = {**LINES, **KERNEL_LINES}
    out = []
    for st in plan.stages:
        if isinstance(st, ComputeStage) and st.cuda and st.cuda.split > 1:
            out += [f"  k_{st.name}_part", *stage_lines(stage_nodes(st, True), 2, table)]
        out += [f"  k_{st.name}", *stage_lines(stage_nodes(st), 2, table)]
    return out


def refine(plan: Plan, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
    """The plan with every compute stage's data axes fused into the grid and a strategy per
    stage (`stage.cuda`)."""
    overrides = overrides or {}
    stages: list[Stage] = []
    for st in plan.stages:
        ov = overrides.get(st.name, {})
        if isinstance(st, ComputeStage) and st.order and "parallel" not in ov and "fuse" not in ov:
            n = rectangular_prefix(st.order) or 1
            st = replace(st, parallel=True, fused=n,
                         notes=tuple(x for x in st.notes if not x.startswith("serial:")))
        how = strategy(st)
        split = block_split(st) if how is CudaStrategy.BLOCK else 1  # type: ignore[arg-type]
        tile = tile_shape(tile_form(st)) if how is CudaStrategy.TILE else None  # type: ignore[arg-type]
        stages.append(replace(st, cuda=CudaStagePlan(how, split, tile)))
    return replace(plan, target="cuda", stages=tuple(stages),
                   checks={st.name: node_checks([st], False) for st in stages})

