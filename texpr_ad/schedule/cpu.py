"""CPU strategies of the planner (steps 6-10).  Stages with symbolic sizes (known only at the
call) get BLAS contractions, memory-order reductions and lanes, not split sums or im2col.

6. contraction  - a stage `sum_K A[..] * B[..]` (contraction.py) whose indices are plain axes
                  covering whole operand dims (matmul, dense, batch_matmul and their adjoints)
                  runs as one batched `np.matmul` (BLAS, called in Numba object mode),
                  when its size is at least `MIN_BLAS_WORK` multiply-adds (or symbolic) and it is
                  a matrix-matrix product (dots and matrix-vector products stay loops); of
                  A @ B and B @ A the one copying the fewest elements (then with more rows)
                  is taken.  `im2col`: when one operand is read at affine indices (a
                  convolution, its weight gradient), that read is first gathered into its
                  own stage, laid out to stream along the contiguous axis.  The gathered read
                  is normalized first (normalize.py): a padding guard stays in the gather, a
                  padding stage is folded into it (and dropped when nothing else reads it),
                  windows depending on the output point are boxed to their hull.  An output
                  whose leading axes only the gather indexes (the batch) runs one product per
                  entry with the other operand shared, writing the output in place.
                  On texpr_ad's float32 GEMM a stride-1 gather is not stored at all
                  (`cpu_implicit.py`): the product reads a padded copy of the input in place,
                  as B's rows (a convolution, its input gradient) or A's (its weight gradient).
                  `factor_contraction`: when the other reduction axes have bounds depending
                  on the output point (a convolution's input gradient), the constant axes
                  indexing both operands plainly are summed by a contraction `P` first,
                  and the stage sums the few remaining terms of P.
   reorder      - (reorder.py) a reduction's independent axes loop in memory order, the axis
                  read at unit stride innermost (an adjoint's sums list them as derived).
7. accumulate   - a reduction whose reads stream along the innermost data axis but not
                  along the reduction accumulates whole rows (k-i-j order); a reduction
                  with too few output points to parallelize over is split into parallel
                  partial results over its outermost axis (of a row accumulation: the
                  outermost long enough, moved outermost), combined afterwards; a long
                  reduction contiguous in its innermost axis is vectorized into SIMD lanes
                  (`lanes`: its sum may regroup; max/min are exact); any other reduction's
                  prange takes its innermost data axis too where it is short (`fuse_points`).
   partial sums - (cpu_partial.py) a sum over rows that an earlier parallel reduction walks
                  (instance norm's dgamma over (batch, h, w), its row sums over (h, w)) sums
                  per row in that reduction's prange, then folds the rows.
8. fuse         - (fuse.py) consecutive stages share loops, the plan's `nest` (loopnest.py):
                  a prange over rows when each reads the earlier ones only at its own row
                  (softmax, normalizations; an intermediate only they read becomes a row
                  buffer), the chunk loops of split reductions over the same rows, and an
                  elementwise stage's row loop folding its row reduction.
   scatter      - (cpu_scatter.py) a scatter parallel over the target's last dim runs its prange
                  over blocks of it; what its updates share is computed once per point, before
                  their stores (grid sampling's four taps); how its target is zeroed.
9. hoist        - (steps 9 and 10 live in cpu_invariants.py) values that the serial loops of a stage do not change (`softmax_max[i]`,
                  `log(s[i])` in a row loop over j) are computed once before them: LLVM cannot
                  hoist loads past stores to another array it cannot prove distinct, nor
                  calls, and the loop would not vectorize.  A float32 division by such a value
                  becomes a product with its reciprocal (at most 1 ulp from the quotient;
                  PyTorch's softmax scales the same way).
10. workspace   - intermediates of at least `WORKSPACE_MIN_BYTES` (static shapes) are kernel
                  arguments, allocated by the caller once per thread and reused across calls.

11. ranges      - (cpu_ranges.py) an elementwise stage's innermost loop runs once per range of its
                  selects' constant breakpoints, each with the selects resolved (GEGLU's backward).

`refine(plan, overrides)` applies them all to a target-neutral plan (planner.plan_stages).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Iterator, Mapping

from ..te.bounds import bound
from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce, ReduceKind, always, const, is_zero
from ..te.ops import Op
from ..te.simplify import simplify
from ..te.visit import bounds_depend_on_axes, children, substitute, walk
from . import cpu_implicit
from .cpu_col2im import col2im_scatter
from .cpu_contract import (MIN_BLAS_WORK, NO_EXPAND, contraction_of, factor_contraction, im2col,
                           pre_stage)
from .cpu_partial import partial_sums
from .cpu_ranges import split_ranges
from .checks import node_checks, plain
from .cpu_invariants import hoist, workspace
from .cpu_scatter import scatter_block, shared_values, zeroing
from .fuse import first_reduction, fuse
from .reorder import collapse_rows, reorder_reductions, reorderable, static_size, tighten
from .fuse import stage_reads as _reads
from .loopnest import Loop, LoopKind, Node, Place, StageRef, refs
from .nest import MIN_PARALLEL_CHUNKS, default_fuse, extent_product
from .nest import const_int as _const, iteration_count as _work
from .plan import (SUM_CHAIN, Accumulate, ComputeStage, CpuStagePlan, Inline, Plan,
                   ScatterStage, ScheduleError, Split, Stage, wide_sum)
from .plan import with_cpu as _cpu


SPLIT_MAX_POINTS = 1 << 16  # split a reduction only if its output has at most this many points
SPLIT_MIN_WORK = 1 << 15  # ... and it has at least this many iterations
SPLIT_CHUNKS = 16  # partial results of a split reduction (>= the thread count, for balance)
SPLIT_LOOPS = {"parallel": True, "fused": 0}  # a split stage's own loops: its chunk prange
CACHE_RESIDENT = 1 << 15  # elements of a tensor read from cache wherever it is read (128 KiB)
LANE_KINDS = (ReduceKind.SUM, ReduceKind.MAX, ReduceKind.MIN)  # reducers with a vector step
LANES = 8  # float32 SIMD lanes (AVX2) a contiguous reduction is vectorized into (see _lanes)
ROW_UNROLL = 4  # terms of the innermost reduce loop folded into a row element per load and store


def refine(plan: Plan, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
    """The CPU plan: steps 6-10 on the stages of a target-neutral plan."""
    overrides = overrides or {}
    stages: list[Stage] = []
    for st in plan.stages:
        ov = overrides.get(st.name, {})
        st = replace(st, cpu=CpuStagePlan())
        if isinstance(st, ComputeStage):
            pre, st = im2col(st, ov, NO_EXPAND)
            if not pre and st.cpu.contraction is None:
                col, st = factor_contraction(st, ov, NO_EXPAND)
                if col is not None:
                    pre = (cpu_strategies(col, {}),)
                    st = (not ov and col2im_scatter(st, pre[0].tensors[0])) or st
            if not pre and not ov and isinstance(st, ComputeStage) and st.cpu.contraction is None:
                pads, st = cpu_implicit.pad_windows(st)
                pre = tuple(pre_stage(t, f"a zero-padded copy read by stage {st.name}")
                            for t in pads)
            stages.extend(_cpu(c) for c in pre)
            st = cpu_strategies(st, ov) if isinstance(st, ComputeStage) else scatter_block(st)
        else:
            st = scatter_block(st) if "parallel" not in ov else st
            st = shared_values(st)
        stages.append(zeroing(st, plan.outputs) if isinstance(st, ScatterStage) else st)
    stages = partial_sums(stages, set(overrides), lambda st: cpu_strategies(st, {}))
    stages, cropped = fold_crops(stages, overrides)
    stages, dropped = drop_unread(stages, plan)
    dropped = cropped + dropped
    stages, nest = fuse(stages, overrides)
    stages = [hoist(st, overrides.get(st.name, {})) for st in stages]
    outs = {id(t) for t in plan.outputs}
    buffers = {r.name for r in refs(nest) if r.place is Place.ROW_BUFFER}
    stages = [st if st.name in buffers else workspace(st, outs, overrides.get(st.name, {}))
              for st in stages]
    merged = collapse_rows(stages, nest, plan.inputs, set(overrides))
    stages = row_folds([_relaned(m, s) for m, s in zip(merged, stages)], nest)
    stages = split_ranges(stages, nest)
    out = replace(plan, target="cpu", stages=tuple(stages), inlined=plan.inlined + dropped,
                  nest=nest)
    groups = [[out.stage(r.name) for r in refs((n,))] for n in out.tree]
    return replace(out, checks={g[-1].name: node_checks(g, plain(g)) for g in groups})


def fold_crops(stages: list[Stage], overrides: Mapping[str, Mapping[str, Any]]
               ) -> tuple[list[Stage], tuple[Inline, ...]]:
    """A window contraction (implicit im2col) read only by the next stage, a copy of a box of
    it, is computed by that stage on that box alone (`cpu_implicit.crop`)."""
    readers: dict[int, int] = {}
    for st in stages:
        for t in {id(r.tensor) for r in _reads(st)}:
            readers[t] = readers.get(t, 0) + 1
    out: list[Stage] = []
    folded: list[Inline] = []
    for st in stages:
        s = out[-1] if out else None
        new = None
        if (isinstance(s, ComputeStage) and isinstance(st, ComputeStage) and not s.is_output
                and s.cpu.contraction is not None and s.cpu.contraction.window is not None
                and readers.get(id(s.tensors[0])) == 1 and not overrides.get(st.name)):
            new = cpu_implicit.crop(s, st)
        if new is not None:
            out[-1] = new
            folded.append(Inline(s.name, st.name, "a window contraction computed only on the "
                                 "box its one reader copies"))
        else:
            out.append(st)
    return out, tuple(folded)


def drop_unread(stages: list[Stage], plan: Plan) -> tuple[list[Stage], tuple[Inline, ...]]:
    """Drop the intermediate stages nothing reads any more: padding stages that every reader's
    im2col gather folded in (`normalize.gather_operand`).  Each is listed as inlined into the
    stages that read it in the target-neutral plan."""
    before: dict[int, list[str]] = {}
    for st in plan.stages:
        for r in _reads(st):
            before.setdefault(id(r.tensor), []).append(st.name)
    out: list[Stage] = []
    dropped: list[Inline] = []
    read: set[int] = set()  # tensors read by the stages kept so far (the later ones)
    for st in reversed(stages):  # last first: a dropped stage frees its sources
        ts = [t for t in st.tensors if t is not None] if isinstance(st, ComputeStage) else []
        if ts and not st.is_output and not any(id(t) in read for t in ts):
            into = ", ".join(dict.fromkeys(n for t in ts for n in before.get(id(t), [])))
            dropped.append(Inline(st.name, into or "-", "a padding stage evaluated inside the "
                                  "im2col gathers (or implicit im2col's padded copies) of its "
                                  "readers"))
            continue
        out.append(st)
        read.update(id(r.tensor) for r in _reads(st))
    return out[::-1], tuple(dropped[::-1])


def cpu_strategies(st: ComputeStage, ov: Mapping[str, Any]) -> ComputeStage:
    if st.cpu.contraction is not None:
        return st  # an implicit im2col (decided by `im2col`)
    loop_keys = {"order", "fuse", "parallel"} & set(ov)
    if ov.get("blas", not loop_keys):
        c = contraction_of(st)
        if c is not None:
            return _cpu(st, contraction=c, parallel=False, fused=0)
        if ov.get("blas"):
            raise ScheduleError(f"stage {st.name!r} is not a contraction sum_k A[..] * B[..] over "
                                f"plain axes covering whole operand dims with static sizes of at "
                                f"least {MIN_BLAS_WORK} multiply-adds; remove the 'blas' override")
    if not loop_keys:
        st = tighten(st)
    if _symbolic(st) and loop_keys:  # sizes known at the call: memory order, rows, split sums
        return st  # (chunk sizes computed at the call), lanes and div/mod splits as static ones
    if not loop_keys:
        st = reorder_reductions(st)
    if ov.get("accumulate", not loop_keys):
        if (acc := _accumulate(st)) is not None:  # split partial results run a chunk prange
            st = st if acc.split is None else _split_first(st, acc.split)
            return _cpu(st, accumulate=acc, **({} if acc.split is None else SPLIT_LOOPS))
        if (lanes := _lanes(st)) > 1:
            return _cpu(st if loop_keys else fuse_points(st), lanes=lanes)
    if not loop_keys:
        return _split_div_mod(fuse_points(st))
    return st


def fuse_points(st: ComputeStage) -> ComputeStage:
    """A stage whose every body folds a reduction in scalars (no row accumulation, split or
    BLAS) keeps no data axis serial to vectorize along (its folds run innermost): its prange
    fuses the innermost data axis too, where the leading ones give fewer than
    MIN_PARALLEL_CHUNKS iterations (a group norm's statistics over (batch 8, groups 8):
    prange(8) -> prange(64)).  fuse.py may narrow it back, to share a prange with a stage that
    has only the leading axes."""
    if not st.parallel or st.fused >= len(st.order) or not all(
            any(isinstance(x, Reduce) for x in walk(b)) for b in st.bodies) or any(
                _const(a.extent) is None for a in st.order[:st.fused]):
        return st  # (a symbolic leading extent: known at the call, most likely a large batch)
    return _cpu(st, fused=f) if (f := default_fuse(st.order, inner=True)) > st.fused else st


def _symbolic(st: ComputeStage) -> bool:
    """Whether a loop's extent has no static bound (a symbolic dim); a band's bounds that the
    data axes set (`k in [i - 63, i]`) are bounded."""
    exts = [a.extent for a in st.axes] + [a.extent for b in st.bodies for x in walk(b)
                                           if isinstance(x, Reduce) for a in x.axis]
    return any(not isinstance(e, Const) and ((b := bound(e, True)) is None or bool(b[0]))
               for e in exts)


def _split_div_mod(st: ComputeStage) -> ComputeStage:
    """Iterate the innermost axis `a` as (a // c, a % c) when the bodies use it only that way:
    `x[i, a // 64, j, a % 64]` becomes `x[i, hi, j, lo]`, a loop that streams and vectorizes."""
    if not st.order or any(isinstance(x, Reduce) for b in st.bodies for x in walk(b)):
        return st
    a = st.order[-1]
    ext = _const(a.extent)
    if ext is None or not is_zero(a.lo) or (st.parallel and st.fused >= len(st.order)):
        return st
    factors: set[int] = set()
    bare = any(b is a for b in st.bodies)
    for x in (x for b in st.bodies for x in walk(b)):  # iterative: any depth
        divmod_a = (isinstance(x, Call) and x.op in (Op.FLOORDIV, Op.FLOORMOD)
                    and x.args[0] is a and isinstance(x.args[1], Const))
        if divmod_a:
            factors.add(int(x.args[1].value))  # type: ignore[attr-defined]
        bare = bare or any(c is a for c in children(x)[1 if divmod_a else 0:])
    if bare or len(factors) != 1:
        return st
    (c,) = factors
    if c <= 1 or ext % c:
        return st
    hi = IterVar(f"{a.name}_hi", const(0), const(ext // c))
    lo = IterVar(f"{a.name}_lo", const(0), const(c))
    bodies = tuple(simplify(substitute(b, {a: hi * c + lo})) for b in st.bodies)
    return _cpu(st, bodies=bodies, split=Split(a, hi, lo, c))


def _lanes(st: ComputeStage) -> int:
    """LANES if the stage has one single-valued sum/max/min reduction whose innermost axis is
    long (or symbolic) and contiguous in some read, else 1.  The kernel then accumulates with
    vecmath's `radd` (an add LLVM may regroup into SIMD lanes: within float rounding) or
    `fmaximum`/`fminimum` (exact), about 5x faster than a scalar chain on rows in cache."""
    reds = {r.loop_key for b in st.bodies for r in walk(b) if isinstance(r, Reduce)}
    if len(reds) != 1:
        return 1
    comb, src, axes, cond, _ = next(iter(reds))
    if len(src) != 1 or comb.kind not in (ReduceKind.SUM, ReduceKind.MAX, ReduceKind.MIN) or src[0].dtype not in (
            "float32", "float64") or not (isinstance(cond, Const) and cond.value is True):
        return 1
    k, n = axes[-1], _const(axes[-1].extent)
    if n is not None and n < 4 * LANES:
        return 1  # short (a symbolic extent counts as long)
    if (len(axes) > 1 and (not isinstance(k.lo, Const) or any(map(bounds_depend_on_axes, axes)))
            or any(isinstance(x, Read) for e in (k.lo, k.extent) for x in walk(e))):
        return 1  # one axis may run over bounds set by the data axes (a band), not read from
        #           data (its reads are then checked at loop entry, which lanes would lose)
    reads = [x for x in walk(src[0]) if isinstance(x, Read)]
    return LANES if any(k in _last_index_axes(x) for x in reads) else 1


def _relaned(st: Stage, before: Stage) -> Stage:
    """A stage whose reduction loops collapse_rows merged, its lanes decided again on the merged
    axis (rows of 28 are too short for lanes, one of 784 is not: a squeeze-excite's mean over
    28 x 28, 4.6 -> 2.6 ms)."""
    if st is before or not isinstance(st, ComputeStage) or st.cpu.lanes > 1 \
            or st.cpu.accumulate is not None:
        return st
    return _cpu(st, lanes=_lanes(st))


def _last_index_axes(r: Read) -> set[IterVar]:
    return {x for x in walk(r.indices[-1]) if isinstance(x, IterVar)} if r.indices else set()


def _resident(x: Read) -> bool:
    """Whether `x` reads a tensor small enough to stay in cache (CACHE_RESIDENT elements)."""
    return static_size(x.tensor.shape) <= CACHE_RESIDENT


def _at_least(e: Expr, n: int) -> bool:
    """Whether extent `e` is at least `n`, a symbolic one (known at the call) counting as large."""
    return (c := _const(e)) is None or c >= n


def _accumulate(st: ComputeStage) -> Accumulate | None:
    """Row accumulation and/or a split into partial results, or None (scalar accumulators); a
    symbolic row axis (unknown `points`) may split, its partial rows allocated at the call."""
    groups = [[x for x in walk(b) if isinstance(x, Reduce)] for b in st.bodies]
    reds = {r.loop_key for g in groups for r in g}
    if len(reds) != 1:
        return None
    r = next(x for g in groups for x in g)
    if len(r.source) != 1 or r.combiner.kind is ReduceKind.CUSTOM:
        return None
    dependent = {v for a in r.axis for e in (a.lo, a.extent) for v in walk(e)
                 if isinstance(v, IterVar)}  # data axes the reduction's bounds use (a band)
    reads = [x for x in walk(r.source[0]) if isinstance(x, Read)]
    red = set(r.axis)
    row = None
    if st.order and st.order[-1] is st.axes[-1] and st.axes[-1] not in dependent:
        j = st.axes[-1]
        # reads along j stream contiguously (j last, no reduction axis last); reads not
        # depending on j (mean[i], ...) are invariant in the inner loop, and beside a read
        # that streams, a cache-resident tensor (a table of powers) need not
        along = [x for x in reads if any(v is j for i in x.indices for v in walk(i))]
        along = [x for x in along if not _resident(x)] or along
        if _at_least(j.extent, 16) and along and all(
                j in _last_index_axes(x) and not _last_index_axes(x) & red for x in along):
            row = j
    points = _work(st.axes, ())
    work = _work(st.axes, st.bodies)
    outer = _work([a for a in st.axes if a is not row], ())
    split = None
    first = _split_axis(r, row)
    if ((points <= SPLIT_MAX_POINTS or (row is not None and math.isinf(points)))
            and work >= SPLIT_MIN_WORK and outer < MIN_PARALLEL_CHUNKS and not dependent
            and _at_least(first.extent, 2 * SPLIT_CHUNKS)):
        split = first
    if split is None and st.parallel and st.fused >= len(st.order):
        row = None  # the prange already runs over the row axis
    if row is None and split is None:
        return None
    vector = split is not None and row is None and r.combiner.kind in LANE_KINDS and \
        r.source[0].dtype in ("float32", "float64") and always(r.condition)
    return Accumulate(row, split, SPLIT_CHUNKS if split is not None else 0, vector)


def _split_axis(r: Reduce, row: IterVar | None) -> IterVar:
    """The reduce axis a split cuts: the outermost, or in a row accumulation (a bias gradient
    over batch 8 x 1024 tokens) where that is too short and the axes may loop in any order, the
    outermost one that is not, moved outermost; else prange(row), each term a strided scalar."""
    long = [a for a in r.axis if _at_least(a.extent, 2 * SPLIT_CHUNKS)]
    return long[0] if row is not None and long and reorderable(r) else r.axis[0]


def _split_first(st: ComputeStage, s: IterVar) -> ComputeStage:
    a = first_reduction(st).axis[0]
    return st if a is s else reorder_reductions(
        st, lambda r: (s, *(x for x in r.axis if x is not s)), f"a split cuts the outermost loop "
        f"into {SPLIT_CHUNKS} chunks, and {a.name} ({a.extent}) is shorter than {2 * SPLIT_CHUNKS}")


def row_folds(stages: list[Stage], nest: tuple[Node, ...]) -> list[Stage]:
    """How the row-accumulated stages of each tree node fold their rows (`Accumulate`): a wide
    sum's float64 row adds a float32 row per `row_block` terms of the outer reduce axis (at most
    SUM_CHAIN terms to an element; not beside a STEPPED rider, which folds in lanes), the
    innermost reduce loop of the fold, if any, is unrolled by ROW_UNROLL where no member's
    reduction has a condition, and indices read from data that the row does not change
    (`w[ids[n, r], k]`: a gather-sum, embedding bag or graph neighbours) are computed and checked
    once per row: checked in the row loop, they kept it scalar."""
    by = {st.name: st for st in stages}
    for node in nest or tuple(StageRef(s.name) for s in stages):
        kids = node.body if isinstance(node, Loop) and node.kind is LoopKind.CHUNKS else (node,)
        group = [st for k in kids if isinstance(k, StageRef) and isinstance(st := by[k.name], ComputeStage)
                 and st.cpu.accumulate is not None and st.cpu.accumulate.row is not None]
        if not group:
            continue
        reds = [first_reduction(s) for s in group]
        per = int(SUM_CHAIN // extent_product([a.extent for a in reds[0].axis[1:]]))
        wide = [per >= 1 and len(group) == len(kids) and wide_sum(r) for r in reds]
        split = group[0].cpu.accumulate.split is not None  # type: ignore[union-attr]
        axes = reds[0].axis[1:] if split or any(wide) else reds[0].axis
        unroll = ROW_UNROLL if axes and all(always(r.condition) for r in reds) else 1
        for s, w, r in zip(group, wide, reds):
            row = s.cpu.accumulate.row  # type: ignore[union-attr]
            idx = dict.fromkeys(i for x in _strict_reads(r.source[0]) for i in x.indices
                                if always(r.condition) and all(v is not row for v in walk(i))
                                and any(isinstance(v, Read) for v in walk(i)))
            by[s.name] = _cpu(s, accumulate=replace(s.cpu.accumulate, unroll=unroll,  # type: ignore[type-var]
                                                    row_block=per if w else 0, indices=tuple(idx)))
    return [by[s.name] for s in stages]


def _strict_reads(e: Expr) -> Iterator[Read]:
    """The reads of `e` evaluated wherever it is: not in a select's branches, the right side of
    `&`/`|` or a conditioned reduction (a guard may keep their indices in bounds)."""
    stack = [e]
    while stack:
        x = stack.pop()
        match x:
            case Read():
                yield x
                stack += x.indices
            case Call(op=Op.SELECT | Op.AND | Op.OR, args=(c, *_)):
                stack.append(c)
            case Reduce() if not always(x.condition):
                stack.append(x.condition)
            case _:
                stack += children(x)
