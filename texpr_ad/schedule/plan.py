"""The loop-nest plan of a kernel: what the scheduler decided and why.

A `Plan` is a small tree of frozen dataclasses.  The renderer turns it into
source text without making any decision of its own; `print(plan)` shows, stage
by stage, what is materialized or inlined, the loop order, which axes are fused
into the parallel loop, the reduction strategy and the scatter strategy.

Change a decision with `build(..., plan_overrides={"Y": {"parallel": False}})`
(see `texpr_ad.schedule.planner.OVERRIDE_KEYS`); the plan is then recomputed
with the override and says so in its notes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

from ..errors import TexprError
from ..te.bounds import bound
from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce, ReduceKind, Var
from ..te.printer import expr_str
from ..te.tensor import ScatterUpdate, Tensor, shape_str
from ..te.visit import walk
from .loopnest import Kind, Loop, Node, Place, StageRef, refs
from .stageloops import Zeroing

LONG_SUM = 4096  # a float16/float32 sum of more terms than this (or of a count unknown until
#                  the call) accumulates wide: see `wide_sum`
SUM_CHAIN = 64  # a wide sum's float32 chains add at most this many terms (6e-7 off at worst)
SUM_BLOCK = 4 * SUM_CHAIN  # terms per block of a wide sum's vectorized loop: SUM_CHAIN a lane
ACCUMULATION = ("reductions fold into a local scalar of the reduction's dtype; a float16/float32 "
                f"sum of more than {LONG_SUM} terms (or a count known only at the call) folds "
                f"into float64 through float32 chains of at most {SUM_CHAIN} terms (vectorized "
                f"loops: blocks of {SUM_BLOCK}) and is rounded once; integer arithmetic runs in "
                "int64 and wraps to the tensor dtype on store")



def sum_terms(r: Reduce) -> float:
    """The most terms the reduction `r` folds per output point: the product of its axes'
    extents, each bounded above where it depends on outer axes (a causal window); inf when
    one is known only at the call (symbolic or read from data)."""
    n = 1.0
    for a in r.axis:
        b = bound(a.extent, True)
        if b is None or b[0]:
            return math.inf
        n *= max(b[1], 0)
    return n


def wide_sum(r: Reduce) -> bool:
    """A float16/float32 sum of more than LONG_SUM terms accumulates wide: into float64,
    rounded once to its dtype, through float32 partial sums of at most SUM_CHAIN terms each
    (a vectorized loop: blocks of SUM_BLOCK terms, at least 4 lanes).  One float32
    accumulator adding n terms is off by up to about n/4 units of its last place on constant
    data (1e6 terms of 0.1: 100958.3 for 100000.0); float32 chains of 64 terms are off by
    6e-7 at worst, and a float64 add costs what a float32 one does in a serial chain (both
    latency-bound), so the sum is within float32 rounding at the same speed."""
    return (r.combiner.kind is ReduceKind.SUM and len(r.source) == 1
            and r.dtype in ("float16", "float32") and sum_terms(r) > LONG_SUM)


class ScheduleError(TexprError, ValueError):
    """A DAG the scheduler cannot plan, or an illegal override (names the stage and the fix)."""


@dataclass(frozen=True)
class Inline:
    """Stage `stage` is substituted into the one expression that reads it."""

    stage: str
    into: str
    reason: str


@dataclass(frozen=True)
class Window:
    """The B operand of a contraction read in place as a sliding window over a padded tensor
    (an implicit im2col, `cpu_implicit.py`): row k of batch entry q is the run of `cols`
    elements of `b[q]` (flattened) from `base + sum_i k_i * strides[i]`, k's digits k_i running
    over `extents`; the strides are positive (rows ascend in memory, as prefetchers like): a
    K axis whose rows would descend (a flipped kernel, in an input gradient) runs reversed,
    and `flip` marks it, for A's matching dim.  The product is computed on the padded grid
    `grid` (the output's trailing dims, each but the first widened to the padded tensor's)
    and cropped to `out`.  With `side` "a" (a weight gradient) the window is A instead: row k
    of A for batch entry q is the run of `cols` elements from the same start, the product is
    summed over the batch, its K the padded grid of the sliding axes `out` (the other operand,
    zero in the padded columns, has `grid`'s pitch)."""

    extents: tuple[int, ...]
    strides: tuple[int, ...]
    flip: tuple[bool, ...]
    base: int
    grid: tuple[int, ...]
    out: tuple[int, ...]
    side: str = "b"

    @property
    def cols(self) -> int:
        """Columns of the product: the last valid point of the padded grid, plus one."""
        pitch = [math.prod(self.grid[d + 1:]) for d in range(len(self.grid))]
        return sum((o - 1) * p for o, p in zip(self.out, pitch)) + 1


@dataclass(frozen=True)
class Contraction:
    """A stage `O[axes] = sum_K A[..] * B[..]` run as one (batched) matrix product (BLAS).

    `a_perm`/`b_perm` permute the operands' dims to (batch, M, K) and (batch, K, N);
    `sizes` are the flattened (batch, M, K, N) extents; `out_perm` (None: identity)
    permutes the (batch, M, N) result to the output's axis order.  `shared` ("a" or "b";
    "" for neither) names the operand without batch dims (its perm has none), one matrix
    multiplied with every batch entry of the other: the output's leading axes are then the
    batch, so the result needs no permutation.  `window`: B is read as a sliding window over
    `b` (b_perm unused; the output is (batch, M, window.out)).
    """

    a: Tensor
    b: Tensor
    a_perm: tuple[int, ...]
    b_perm: tuple[int, ...]
    sizes: tuple[Expr, Expr, Expr, Expr]
    bmn_shape: tuple[Expr, ...]
    out_perm: tuple[int, ...] | None
    shared: str = ""
    window: Window | None = None

    def describe(self) -> str:
        b, m, k, n = (str(x.value) if isinstance(x, Const) else expr_str(x) for x in self.sizes)
        if self.window is not None and self.window.side == "a":
            return (f"contraction -> GEMM: a sliding window over {self.a.name} ({m} rows of "
                    f"{k}) @ {self.b.name} ({k} x {n}), summed over {b} batch entries, read in "
                    f"place (implicit im2col of a weight gradient)")
        if self.window is not None:
            w = self.window
            return (f"contraction -> GEMM: {self.a.name} ({m} x {k}) @ a sliding window over "
                    f"{self.b.name} ({k} rows of {w.cols}) per batch entry ({b}), read in place "
                    f"(implicit im2col), on the padded grid {'x'.join(map(str, w.grid))} "
                    f"cropped to {'x'.join(map(str, w.out))}")
        ba, bb = ("1" if self.shared == "a" else b), ("1" if self.shared == "b" else b)
        shared = (f"; {(self.a if self.shared == 'a' else self.b).name} shared by the {b} batch "
                  f"entries (the output's leading axes), so the result is not permuted"
                  if self.shared else "")
        return (f"contraction -> BLAS: {self.a.name} ({ba} x {m} x {k}) @ {self.b.name} "
                f"({bb} x {k} x {n}) as np.matmul{shared}")


@dataclass(frozen=True)
class Accumulate:
    """How a stage's reduction accumulates, when not in a scalar per output point.

    `row`: the reduction loops run outside the innermost data axis `row`, folding a
    whole row into a local array (k-i-j order), so reads stream along `row`.
    `split`: the reduction axis `split` is cut into `chunks` parallel partial results
    (one per chunk, for every output point), combined afterwards; used when the
    output is too small to parallelize over.  `vector`: a split chunk of a float
    sum/max/min folds in scalar accumulators stepped like lanes (vecmath's radd,
    fmaximum, fminimum), so its innermost loop vectorizes.
    """

    row: IterVar | None
    split: IterVar | None
    chunks: int
    vector: bool = False
    unroll: int = 1  # row accumulation: terms of the innermost reduce loop per row element load
    row_block: int = 0  # a wide sum's rows: terms of the outer axis per float32 row (0: none)
    indices: tuple[Expr, ...] = ()  # data-dependent indices computed once per row (row_folds)

    def describe(self) -> str:
        parts = []
        if self.row is not None:
            parts.append(f"reduction loops outside {self.row.name}, accumulating whole rows "
                         f"(contiguous reads along {self.row.name})")
        if self.split is not None:
            parts.append(f"{self.split.name} split into {self.chunks} parallel partial "
                         f"results, combined afterwards")
        if self.vector:
            parts.append("each chunk folds in scalar accumulators stepped like lanes (its "
                         "innermost loop vectorizes; sums within float rounding)")
        if self.row_block:
            parts.append(f"the float64 row adds a float32 row per {self.row_block} terms of the "
                         f"outer reduce axis (the row loop stays float32 SIMD)")
        if self.unroll > 1:
            parts.append(f"the innermost reduce loop unrolled by {self.unroll} (each row element "
                         f"loaded and stored once per {self.unroll} terms, in the same order)")
        if self.indices:
            parts.append(f"indices read from data ({', '.join(map(expr_str, self.indices))}) "
                         f"computed and checked once per row, before its loop (which vectorizes)")
        return "; ".join(parts)


@dataclass(frozen=True)
class Split:
    """`axis` iterated as `hi` (outer) and `lo` (inner, extent `factor`)."""

    axis: IterVar
    hi: IterVar
    lo: IterVar
    factor: int


@dataclass(frozen=True)
class IndexSplit:
    """The innermost loop `axis` run as one loop per range (schedule/cpu_ranges.py): `pieces`
    are each range's axis (its bounds) with the bodies there, where every select testing `axis`
    (`tests`) is resolved."""

    axis: IterVar
    pieces: tuple[tuple[IterVar, tuple[Expr, ...]], ...]
    tests: tuple[Expr, ...]

    def describe(self) -> str:
        rng = ", ".join(f"[{expr_str(a.lo)}, {expr_str(a.extent.args[0] if isinstance(a.extent, Call) else a.lo + a.extent)})" for a, _ in self.pieces)
        cuts = ", ".join(expr_str(a.lo) for a, _ in self.pieces[1:])
        return (f"{self.axis.name} split at {cuts} into "
                f"{rng}, each loop with its selects resolved to the branch taken there (the "
                f"tests {', '.join(map(expr_str, self.tests))} are constant on each range): no "
                f"branch evaluated per element, and a branch's reads only in its own range")


class StageKind(Kind):
    """What a stage is: the key of `OVERRIDE_KEYS` (schedule/planner.py)."""

    COMPUTE = "compute"
    SCATTER = "scatter"


class CudaStrategy(Kind):
    """How a stage runs on CUDA (see schedule/cuda.py for when each is chosen)."""

    THREAD = "thread"
    BLOCK = "block"
    INJECTIVE = "injective"
    ATOMIC = "atomic"
    SINGLE = "single"
    TILE = "tile"


@dataclass(frozen=True)
class CpuStagePlan:
    """The CPU refine step's decisions for one stage (None: not taken), each one directive
    independent of the others, as Halide's; stageloops and lower make its loop tree.

    Compute stages: `contraction` (a BLAS matrix product), `accumulate` (row
    accumulation / split partial sums), `lanes` (> 1: the reduction's accumulation may
    regroup into SIMD lanes), `split` (the innermost loop axis runs as two loops, axis =
    factor * hi + lo, as the bodies use it only as axis // factor and axis % factor: a
    reshape's unflattening), `ranges` (the innermost loop runs once per range of its selects'
    breakpoints, each body with the selects resolved), `hoisted` (loop-invariant values
    computed once before the serial loops, in order), `reciprocals` (hoisted float32 divisors
    whose quotients become products with the reciprocal) and `fold_hoisted` (values a
    reduction's terms share, computed once before its loops).  Scatter stages: `block`
    (prange over blocks of that many values of the parallel axis, innermost), `block_indices`
    (index dims computed and checked before the block loop), `shared` (values the updates
    share, computed once per point before them), `zero` (how the target is zeroed).  Both:
    `workspace` (the stage's intermediates passed in as preallocated arrays, reused across
    calls); `views` ((view, input) pairs: the stage reads the input reshaped,
    reorder.collapse_reductions).  Which stages share a loop is not a stage decision: it is
    the plan's `nest` (loopnest.py).
    """

    contraction: Contraction | None = None
    accumulate: Accumulate | None = None
    lanes: int = 1
    split: Split | None = None
    ranges: IndexSplit | None = None
    hoisted: tuple[Expr, ...] = ()
    shared: tuple[Expr, ...] = ()
    block_indices: tuple[Expr, ...] = ()
    reciprocals: tuple[Expr, ...] = ()
    fold_hoisted: tuple[Expr, ...] = ()
    block: int = 0
    zero: Zeroing = Zeroing.SERIAL
    workspace: tuple[Tensor, ...] = ()
    views: tuple[tuple[Tensor, Tensor], ...] = ()


@dataclass(frozen=True)
class Tile:
    """A tiled contraction's shape: `threads` x `threads` threads per block, each accumulating
    `reg` x `reg` outputs in registers (a block covers `size` x `size` outputs), over slices of
    `depth` terms of the reduction staged in shared memory (float32 chains of `depth` terms
    fold into float64 where the sum is wide, as `wide_sum` asks)."""

    threads: int = 16
    reg: int = 4
    depth: int = 16

    @property
    def size(self) -> int:
        return self.threads * self.reg


@dataclass(frozen=True)
class CudaStagePlan:
    """The CUDA refine step's decisions for one stage.  `split` > 1 (block reductions only):
    each output point's reduction is cut into `split` interleaved chunks reduced by as many
    blocks into a partials array, then a second kernel combines them per point.  `tile` (the
    TILE strategy): the shape of its tiles."""

    strategy: CudaStrategy
    split: int = 1
    tile: Tile | None = None


@dataclass(frozen=True)
class ComputeStage:
    """A materialized compute: `tensors[k][axes] = bodies[k]` at every point of `axes`.

    `bodies` already have inlined stages substituted.  The data loops run in
    `order` (outer to inner); when `parallel`, the first `fused` axes of `order`
    are flattened into one `prange`.
    """

    name: str
    tensors: tuple[Tensor | None, ...]  # None: an output of the op that nothing reads
    axes: tuple[IterVar, ...]
    bodies: tuple[Expr, ...]
    order: tuple[IterVar, ...]
    fused: int
    parallel: bool
    is_output: bool
    reduction: tuple[str, ...]
    inlined: tuple[str, ...]
    notes: tuple[str, ...]
    cpu: CpuStagePlan = CpuStagePlan()  # the CPU refine step's decisions (schedule/cpu.py)
    cuda: CudaStagePlan | None = None  # the CUDA refine step's decisions (schedule/cuda.py)

    @property
    def parallel_axes(self) -> tuple[IterVar, ...]:
        return self.order[: self.fused] if self.parallel else ()


@dataclass(frozen=True)
class ScatterStage:
    """`tensor = zeros(shape); tensor[index] += value where condition` over `order`, for each
    of `updates` in turn at every point.

    `parallel_axis` (outermost in `order`) is an axis that index dim
    `parallel_dim` of every update equals exactly, so distinct iterations write
    distinct elements and a `prange` over it is race-free; None means serial.
    """

    name: str
    tensor: Tensor
    shape: tuple[Expr, ...]
    order: tuple[IterVar, ...]
    updates: tuple[ScatterUpdate, ...]
    parallel_axis: IterVar | None
    parallel_dim: int
    is_output: bool
    inlined: tuple[str, ...]
    notes: tuple[str, ...]
    cpu: CpuStagePlan = CpuStagePlan()  # the CPU refine step's decisions (schedule/cpu.py)
    cuda: CudaStagePlan | None = None  # the CUDA refine step's decisions (schedule/cuda.py)

    @property
    def strategy(self) -> str:
        if self.parallel_axis is None:
            return "serial"
        p = self.parallel_axis.name
        s = f"parallel over {p} (injective: index dim {self.parallel_dim} is {p})"
        block = self.cpu.block
        if block:
            s += (f"; blocks of {block} {p} values per prange iteration, {p} innermost "
                  f"(contiguous)")
            if self.gathers_rows:
                s = s[:-1] + ("; a gathered row: every block walks all the indices again and "
                              "misses on their rows again, so blocks are whole rows of up to 256)")
        return s

    @property
    def gathers_rows(self) -> bool:
        """Whether a target index dim other than the parallel one reads a tensor: rows in the
        order the data lists them (embedding_bag's gradient, dw[idx[n, r], k])."""
        return any(isinstance(x, Read) for u in self.updates for d, i in enumerate(u.index)
                   if d != self.parallel_dim for x in walk(i))


Stage = ComputeStage | ScatterStage


S = TypeVar("S", ComputeStage, ScatterStage)
_CPU_FIELDS = {f.name for f in fields(CpuStagePlan)}


def with_cpu(st: S, **kw: Any) -> S:
    """`st` with fields of its CPU sub-record (and, for stage fields, of itself) replaced."""
    own = {k: kw.pop(k) for k in list(kw) if k not in _CPU_FIELDS}
    return replace(st, cpu=replace(st.cpu, **kw), **own)


@dataclass(frozen=True, eq=False)
class Checks:
    """A node's run-time bounds checks (schedule/checks.py): `unproven`, read -> its dims
    checked where read; `at_entry`, loop axis -> (read, dim, offset) checked at its entry."""

    unproven: dict[Read, set[int]] = field(default_factory=dict)
    at_entry: dict[IterVar, list[tuple[Read, int, int]]] = field(default_factory=dict)

    def lines(self, name: str) -> list[str]:
        entry = {(id(r), d) for rs in self.at_entry.values() for r, d, _ in rs}
        where = [f"{expr_str(r)} dim {d}" for r, ds in self.unproven.items() for d in sorted(ds)
                 if (id(r), d) not in entry]
        where += [f"{expr_str(r)} dim {d} at the entry of loop {a.name}"
                  for a, rs in self.at_entry.items() for r, d, _ in rs]
        return [f"  {name}: {'; '.join(where)}"] if where else []


@dataclass(frozen=True)
class Plan:
    """The whole kernel: inputs, symbolic dims, the materialized stages in order, and (CPU)
    the loops they share, `nest` (loopnest.py; empty: each stage runs its own loops)."""

    target: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    params: tuple[Var, ...]
    stages: tuple[Stage, ...]
    inlined: tuple[Inline, ...]
    accumulation: str = ACCUMULATION
    nest: tuple[Node, ...] = ()
    checks: dict[str, Checks] = field(default_factory=dict, compare=False)  # by tree node

    @property
    def tree(self) -> tuple[Node, ...]:
        """The nest, each stage outside a shared loop a node of its own."""
        return self.nest or tuple(StageRef(s.name) for s in self.stages)

    def loop_of(self, name: str) -> Loop | None:
        """The innermost shared loop that stage `name` runs in, or None."""
        def find(nodes: tuple[Node, ...], inside: Loop | None) -> Loop | None:
            for n in nodes:
                if isinstance(n, Loop):
                    if (hit := find(n.body, n)) is not None:
                        return hit
                elif n.name == name:
                    return inside
            return None
        return find(self.tree, None)

    def joined(self, name: str) -> bool:
        """Whether stage `name` runs in a loop that an earlier stage opened."""
        for n in self.tree:
            names = [r.name for r in refs((n,))]
            if name in names:
                return names[0] != name
        return False

    def place(self, name: str) -> Place:
        """Where stage `name`'s array lives."""
        return next(r.place for r in refs(self.tree) if r.name == name)

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"plan has no materialized stage {name!r}; stages: "
                       f"{[s.name for s in self.stages]}")

    @property
    def workspace(self) -> tuple[Tensor, ...]:
        """The intermediates passed to the kernel as preallocated arrays, in argument order."""
        return tuple(t for s in self.stages for t in s.cpu.workspace)

    @property
    def zeroed(self) -> tuple[Tensor, ...]:
        """The scatter targets passed in zeroed (`Zeroing.FRESH`), after the workspace."""
        return tuple(s.tensor for s in self.stages
                     if isinstance(s, ScatterStage) and s.cpu.zero is Zeroing.FRESH)

    def __str__(self) -> str:
        ins = ", ".join(f"{t.name}: {shape_str(t.shape)} {t.dtype}" for t in self.inputs)
        outs = ", ".join(t.name for t in self.outputs)
        lines = [f"Plan(target={self.target})",
                 f"  inputs: {ins or '-'}",
                 f"  outputs: {outs}",
                 f"  symbolic dims (bound from input shapes): "
                 f"{', '.join(v.name for v in self.params) or '-'}",
                 f"  accumulation: {self.accumulation}"]
        from . import cuda, lower  # (they lower plans: a cycle at import time)
        if self.target == "cuda":
            lines += ["", "kernels (one per stage, each with its loops):", *cuda.lines(self)]
        else:
            lines += ["", "loop nest (the loops stages share, with each stage's own beneath it):",
                      *lower.lines(self)]
        for s in self.stages:
            lines += ["", *_stage_lines(s)]
        checked = [x for name, c in self.checks.items() for x in c.lines(name)]
        if checked:
            lines += ["", "run-time bounds checks (reads te.bounds cannot prove in range):", *checked]
        if self.inlined:
            lines += ["", "inlined (not materialized):"]
            lines += [f"  {i.stage} -> {i.into}: {i.reason}" for i in self.inlined]
        return "\n".join(lines)

    __repr__ = __str__


def _stage_lines(s: Stage) -> list[str]:
    role = "output" if s.is_output else "intermediate"
    match s:
        case ComputeStage():
            shape = shape_str(tuple(a.extent for a in s.axes))
            head = (f"stage {s.name} [{role}, materialized] compute {shape} "
                    + ", ".join(b.dtype for b in s.bodies))
            c = s.cpu
            out = [head]
            out += [f"  reduction: {r}" for r in s.reduction] or ["  reduction: none"]
            out += _cpu_lines(c)
        case ScatterStage():
            head = (f"stage {s.name} [{role}, materialized] scatter-add into zeros"
                    f"{shape_str(s.shape)} {s.tensor.dtype}")
            idx = "; ".join("[" + ", ".join(expr_str(i) for i in u.index) + "]" for u in s.updates)
            out = [head, f"  target index {idx}", f"  scatter: {s.strategy}"]
            out += _cpu_lines(s.cpu)
    if s.inlined:
        out.append(f"  inlined: {', '.join(s.inlined)}")
    out += [f"  note: {n}" for n in s.notes]
    return out


def _cpu_lines(c: CpuStagePlan) -> list[str]:
    """The CPU decisions of a stage outside its loop tree, one line each with its reason."""
    out = []
    if c.accumulate is not None:
        out.append(f"  accumulate: {c.accumulate.describe()}")
    if c.workspace:
        out.append(f"  workspace: {', '.join(t.name for t in c.workspace)} (at least 1 MiB or "
                   f"sized at the call: allocated once per thread, reused by later calls)")
    return out
