"""The scheduler: turn a tensor DAG into a `Plan` (pure; emits no source text).

Steps, each a small function below:

1. `_stages`     - the compute/scatter operations in dependency order, with unique names.
2. `_uses`       - every read of every tensor, with where it happens (under a reduction,
                   in a reduction bound) and its index.
3. `_inline_ok`  - a stage is inlined only if it is an intermediate single-output
                   elementwise compute (no reduction) read exactly once, outside any
                   reduction, at an index that is a permutation of all the reader's
                   data axes: each of its elements is then computed at most once, so
                   inlining never duplicates work.  A stage that is one plain read (a
                   copy, broadcast or transpose) or a constant is inlined wherever it
                   is read: a load from its source costs what a load from it would, and
                   the store is saved.  Everything else is materialized.
4. `_loop_nest`  - data loops in declared order (the last axis, contiguous in memory,
                   innermost); the leading axes are fused into one `prange` until the
                   parallel loop has at least `MIN_PARALLEL_CHUNKS` iterations (never
                   the innermost axis unless the stage is 1-d); tiny stages run serially.
5. `_scatter`    - a scatter-add runs in parallel only over an axis that one index dim
                   equals exactly (an injective map, so no two iterations hit the same
                   element); otherwise serially.

6. `_contraction` (CPU) - a stage `sum_K A[..] * B[..]` whose indices are plain axes
                   covering whole operand dims (matmul, dense, batch_matmul and their
                   adjoints) runs as one batched `np.matmul` (BLAS, called in Numba object
                   mode), when its static size is at least `MIN_BLAS_WORK` multiply-adds.
                   `_im2col`: when one operand is read at affine indices (a convolution,
                   its weight gradient), that read is first gathered into its own stage
                   `col[axes] = B[..]`.  `_factor_contraction`: when the other reduction
                   axes have bounds depending on the output point (a convolution's input
                   gradient), the constant axes indexing both operands plainly are summed
                   by a contraction `P` first, and the stage sums the few remaining terms
                   of `P`.  These CPU strategies apply to stages with static sizes only.
7. `_accumulate` (CPU) - a reduction whose reads stream along the innermost data axis
                   but not along the reduction accumulates whole rows (k-i-j order); a
                   reduction with too few output points to parallelize over is split into
                   parallel partial results over its outermost axis, combined afterwards;
                   a long reduction contiguous in its innermost axis is unrolled into
                   `LANES` independent accumulators (`_lanes`).
8. `_join_stages` (CPU) - consecutive stages with one parallel axis of the same extent run
                   in one `prange` when each reads the earlier ones only at its own parallel
                   index (row-wise chains: softmax, normalizations): one barrier instead of
                   one per stage, and the row stays in cache.
   `_scatter_block` (CPU) - a scatter parallel over the target's last dim runs the prange
                   over blocks of it, with the block innermost (contiguous, still race-free).

Overrides (`build(..., plan_overrides={stage: {key: value}})`), keys in `OVERRIDE_KEYS`:
`inline` (bool; True only where legal), `parallel` (bool), `fuse` (int, leading axes of
the order flattened into the prange), `order` (list of the stage's axis names),
`blas` (bool: False keeps a contraction in loops), `accumulate` (bool: False keeps the
scalar accumulator per output point, without lanes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping, Sequence

from ..te.dag import topo_order
from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce, Var, const
from ..te.ops import Op
from ..te.printer import expr_str
from ..te.tensor import ComputeOp, PlaceholderOp, ScatterOp, Tensor
from ..te.visit import children, substitute, transform, walk
from .plan import Accumulate, ComputeStage, Contraction, Inline, Plan, ScatterStage, Stage

MIN_PARALLEL_WORK = 1024  # stages with fewer known point*reduction iterations run serially
MIN_PARALLEL_CHUNKS = 64  # fuse leading axes until the prange has this many iterations
MIN_BLAS_WORK = 4096  # contractions with fewer multiply-adds stay in loops
MAX_IM2COL = 1 << 26  # elements of an im2col gather stage (256 MiB of float32) at most
SPLIT_MAX_POINTS = 1 << 16  # split a reduction only if its output has at most this many points
SPLIT_MIN_WORK = 1 << 15  # ... and it has at least this many iterations
SPLIT_CHUNKS = 16  # partial results of a split reduction (>= the thread count, for balance)
SCATTER_BLOCK = 64  # values of a scatter's parallel axis per prange iteration (when it is last)
LANES = 8  # independent accumulators of a contiguous reduction (breaks the add dependency chain)
OVERRIDE_KEYS = {"compute": {"inline", "parallel", "fuse", "order", "blas", "accumulate"},
                 "scatter": {"parallel"}}


class ScheduleError(ValueError):
    """A DAG the scheduler cannot plan, or an illegal override (names the stage and the fix)."""


@dataclass(frozen=True)
class _Use:
    reader: ComputeOp | ScatterOp
    read: Read
    under_reduce: bool
    in_bound: bool


def plan_kernel(outputs: Sequence[Tensor], inputs: Sequence[Tensor], target: str = "cpu",
                overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
    """Schedule `outputs` (computed from the placeholders `inputs`) into a loop-nest plan."""
    outputs, inputs = tuple(outputs), tuple(inputs)
    _check_io(outputs, inputs)
    ops, names = _stages(outputs)
    for op in ops:
        if any(x.dtype == "float16" for e in _exprs(op) for x in walk(e)):
            raise ScheduleError(f"stage {names[id(op)]!r} computes in float16, which the Numba "
                                f"CPU backend does not support; use float32")
    overrides = dict(overrides or {})
    _check_overrides(overrides, ops, names)
    uses = _uses(ops)
    out_ops = {id(t.op) for t in outputs}
    inlined: dict[int, list[_Use]] = {}
    why_kept: dict[int, str] = {}
    for op in ops:
        ov = overrides.get(names[id(op)], {})
        why = _inline_ok(op, uses.get(id(op), []), id(op) in out_ops)
        why_kept[id(op)] = why or "inlining turned off by override"
        want = ov.get("inline", why is None)
        if want and why is not None:
            raise ScheduleError(f"cannot inline stage {names[id(op)]!r}: {why}; "
                                f"remove the 'inline' override")
        if want:
            inlined[id(op)] = uses[id(op)]
    expand = _Expander(set(inlined), names)
    stages: list[Stage] = []
    tensors_of = _tensors_of(outputs)
    for op in ops:
        if id(op) in inlined:
            continue
        ov = overrides.get(names[id(op)], {})
        make = _compute_stage if isinstance(op, ComputeOp) else _scatter_stage
        st = make(op, names[id(op)], id(op) in out_ops, expand, ov, tensors_of)  # type: ignore[arg-type]
        if target == "cpu" and isinstance(st, ComputeStage):
            col, st = _im2col(st, ov, expand)
            if col is None:
                col, st = _factor_contraction(st, ov, expand)
                if col is not None:
                    col = _cpu_strategies(col, {})
            if col is not None:
                stages.append(col)
            st = _cpu_strategies(st, ov)
        elif target == "cpu" and isinstance(st, ScatterStage) and "parallel" not in ov:
            st = _scatter_block(st)
        if id(op) not in out_ops:
            st = replace(st, notes=(f"materialized: {why_kept[id(op)]}", *st.notes))
        stages.append(st)
    if target == "cpu":
        stages = _row_buffers(_join_stages(stages, overrides))
    inl = tuple(Inline(names[k], ", ".join(dict.fromkeys(names[id(u.reader)] for u in us)),
                       f"read once, outside any reduction, at the reader's own data axes "
                       f"({expr_str(us[0].read)})" if len(us) == 1 and not us[0].under_reduce else
                       "a plain read of its source (copy, broadcast, transpose): re-reading the "
                       "source where it is used costs what reading it back would")
                for k, us in inlined.items())
    return Plan(target, inputs, outputs, _params(inputs, outputs, ops), tuple(stages), inl)


# -- 1. stages and checks ------------------------------------------------------------

def _check_io(outputs: tuple[Tensor, ...], inputs: tuple[Tensor, ...]) -> None:
    if not outputs:
        raise ScheduleError("build needs at least one output tensor")
    for t in (*outputs, *inputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"build takes te tensors, got {type(t).__name__} {t!r}")
    for t in inputs:
        if not isinstance(t.op, PlaceholderOp):
            raise ScheduleError(f"input {t.name!r} is not a placeholder; inputs must be "
                                f"te.placeholder tensors (computed tensors are built, not passed)")
    seen: set[int] = set()
    for t in inputs:
        if id(t) in seen:
            raise ScheduleError(f"input {t.name!r} is listed twice in inputs")
        seen.add(id(t))
    missing = [t.name for t in topo_order(outputs)
               if isinstance(t.op, PlaceholderOp) and id(t) not in seen]
    if missing:
        raise ScheduleError(f"placeholder(s) {missing} are read by the outputs but not listed "
                            f"in inputs; add them to the inputs list")
    for t in topo_order(outputs):
        if t.dtype == "float16":
            raise ScheduleError(f"tensor {t.name!r} is float16, which the Numba CPU backend does "
                                f"not support; use float32")


def _stages(outputs: tuple[Tensor, ...]) -> tuple[list[ComputeOp | ScatterOp], dict[int, str]]:
    ops: list[ComputeOp | ScatterOp] = []
    seen: set[int] = set()
    for t in topo_order(outputs):
        if isinstance(t.op, (ComputeOp, ScatterOp)) and id(t.op) not in seen:
            seen.add(id(t.op))
            ops.append(t.op)
    names: dict[int, str] = {}
    taken: set[str] = set()
    for op in ops:
        n, k = op.name, 1
        while n in taken:
            n, k = f"{op.name}_{k}", k + 1
        taken.add(n)
        names[id(op)] = n
    return ops, names


def _check_overrides(ov: dict[str, Mapping[str, Any]], ops: list, names: dict[int, str]) -> None:
    by_name = {names[id(op)]: op for op in ops}
    for stage, keys in ov.items():
        if stage not in by_name:
            raise ScheduleError(f"plan_overrides names stage {stage!r}, which is not in this "
                                f"kernel; stages: {sorted(by_name)}")
        kind = "compute" if isinstance(by_name[stage], ComputeOp) else "scatter"
        bad = set(keys) - OVERRIDE_KEYS[kind]
        if bad:
            raise ScheduleError(f"plan_overrides[{stage!r}]: unknown key(s) {sorted(bad)} for a "
                                f"{kind} stage; allowed: {sorted(OVERRIDE_KEYS[kind])}")


# -- 2. uses --------------------------------------------------------------------------

def _exprs(op: ComputeOp | ScatterOp) -> tuple[Expr, ...]:
    return op.body if isinstance(op, ComputeOp) else (*op.index, op.value, op.condition)


def _uses(ops: list[ComputeOp | ScatterOp]) -> dict[int, list[_Use]]:
    """Every read occurrence (a tree count: a read written twice is two uses), by producer op."""
    out: dict[int, list[_Use]] = {}

    def go(e: Expr, op: ComputeOp | ScatterOp, under: bool, bound: bool) -> None:
        if isinstance(e, Read):
            out.setdefault(id(e.tensor.op), []).append(_Use(op, e, under, bound))
        if isinstance(e, Reduce):
            for ax in e.axis:
                go(ax.lo, op, True, True)
                go(ax.extent, op, True, True)
            under = True
        for c in children(e):
            go(c, op, under, bound)

    for op in ops:
        for e in _exprs(op):
            go(e, op, False, False)
    return out


# -- 3. inlining ----------------------------------------------------------------------

def _inline_ok(op: ComputeOp | ScatterOp, uses: list[_Use], is_output: bool) -> str | None:
    """None if `op` may be inlined into its single reader, else the reason it may not."""
    if isinstance(op, ScatterOp):
        return "a scatter-add is always materialized"
    if is_output:
        return "it is an output of the kernel"
    if len(op.body) > 1:
        return "it has several outputs"
    if any(isinstance(x, Reduce) for x in walk(op.body[0])):
        return "it contains a reduction (inlining could repeat its work)"
    if _plain_read(op.body[0]) and not any(u.in_bound for u in uses):
        return None  # a copy/broadcast/transpose: re-reading its source costs what reading it would
    if len(uses) != 1:
        return f"it is read {len(uses)} times (inlining would recompute it)"
    u = uses[0]
    if u.under_reduce or u.in_bound:
        return "it is read inside a reduction (inlining would recompute it per iteration)"
    ix = u.read.indices
    if not (all(isinstance(i, IterVar) and i.kind == "data" for i in ix)
            and len(set(ix)) == len(ix) == len(u.reader.axis) and set(ix) == set(u.reader.axis)):
        return f"it is read at {expr_str(u.read)}, not at a permutation of the reader's axes"
    return None


def _plain_read(e: Expr) -> bool:
    """A constant, or one read at indices computed from loop axes only (no data-dependent index)."""
    if isinstance(e, Call) and e.op is Op.STOP_GRADIENT:  # an identity to the kernels
        e = e.args[0]
    return isinstance(e, Const) or (isinstance(e, Read) and not any(
        isinstance(x, Read) for i in e.indices for x in walk(i)))


class _Expander:
    """Substitute inlined stages into expressions, recursively and memoized."""

    def __init__(self, inlined: set[int], names: dict[int, str]) -> None:
        self.inlined, self.names = inlined, names

    def __call__(self, e: Expr) -> Expr:
        def fn(x: Expr) -> Expr | None:
            if isinstance(x, Read) and id(x.tensor.op) in self.inlined:
                op = x.tensor.op
                body = substitute(op.body[0], dict(zip(op.axis, x.indices, strict=True)))
                return self(body)
            return None
        return transform(e, fn)

    def names_in(self, exprs: Sequence[Expr]) -> tuple[str, ...]:
        """Names of the inlined stages read (directly or through each other) by `exprs`."""
        found: dict[str, None] = {}

        def scan(es: Sequence[Expr]) -> None:
            for e in es:
                for x in walk(e):
                    if isinstance(x, Read) and id(x.tensor.op) in self.inlined:
                        found[self.names[id(x.tensor.op)]] = None
                        scan(x.tensor.op.body)
        scan(exprs)
        return tuple(found)


# -- 4. compute loop nests --------------------------------------------------------------

def _const(e: Expr) -> int | None:
    return int(e.value) if isinstance(e, Const) else None


def _work(axes: Sequence[IterVar], bodies: Sequence[Expr]) -> float:
    """Known iteration count (data points times reduction points); unknown extents count as large."""
    exts = [a.extent for a in axes]
    for b in bodies:
        for x in walk(b):
            if isinstance(x, Reduce):
                exts += [a.extent for a in x.axis]
                break
    n = 1.0
    for e in exts:
        c = _const(e)
        n *= math.inf if c is None else c
    return n


def _default_fuse(order: Sequence[IterVar]) -> int:
    if len(order) <= 1:
        return len(order)
    fused, chunks = 0, 1
    for a in order[:-1]:
        fused += 1
        c = _const(a.extent)
        if c is None:
            break
        chunks *= c
        if chunks >= MIN_PARALLEL_CHUNKS:
            break
    return fused


def _reduction_notes(bodies: Sequence[Expr], axes: Sequence[IterVar]) -> tuple[str, ...]:
    groups: dict[tuple, Reduce] = {}
    for b in bodies:
        for x in walk(b):
            if isinstance(x, Reduce):
                groups.setdefault((x.combiner, x.source, x.axis, x.condition, x.init), x)
    notes = []
    for r in groups.values():
        kind = r.combiner.kind if r.combiner.kind != "custom" else f"custom {r.combiner.name!r}"
        accs = ", ".join(s.dtype for s in r.source)
        txt = (f"{kind} over {', '.join(a.name for a in r.axis)} in a local {accs} accumulator"
               f"{'s' if len(r.source) > 1 else ''} (serial, in axis order)")
        if len(r.source) > 1:
            txt += f"; tuple reducer computing {len(r.source)} values in one loop"
        if not (isinstance(r.condition, Const) and r.condition.value is True):
            txt += f"; where {expr_str(r.condition)}"
        if r.init:
            txt += f"; init {', '.join(expr_str(i) for i in r.init)}"
        dep = [a.name for a in r.axis
               if any(isinstance(v, IterVar) for e in (a.lo, a.extent) for v in walk(e))]
        if dep:
            txt += f"; bounds of {', '.join(dep)} depend on the enclosing axes"
        notes.append(txt)
    return tuple(notes)


def _compute_stage(op: ComputeOp, name: str, is_output: bool, expand: _Expander,
                   ov: Mapping[str, Any], tensors_of: dict[tuple[int, int], Tensor]) -> ComputeStage:
    bodies = tuple(expand(b) for b in op.body)
    for b in bodies:
        for x in walk(b):
            if isinstance(x, Reduce) and any(isinstance(y, Reduce) for s in x.source for y in walk(s)):
                raise ScheduleError(f"stage {name!r}: a reduction nested inside another reduction "
                                    f"is not supported; build it with te.compute, which splits it")
    notes: list[str] = [f"override {k}={v!r}" for k, v in ov.items()]
    order = tuple(op.axis)
    if "order" in ov:
        by = {a.name: a for a in op.axis}
        want = list(ov["order"])
        if sorted(want) != sorted(by) or len(by) != len(op.axis):
            raise ScheduleError(f"stage {name!r}: order override {want} must be a permutation of "
                                f"the axis names {[a.name for a in op.axis]}")
        order = tuple(by[n] for n in want)
    work = _work(op.axis, bodies)
    parallel = bool(ov.get("parallel", len(order) > 0 and work >= MIN_PARALLEL_WORK))
    if not order:
        parallel = False
    elif "parallel" not in ov and not parallel:
        notes.append(f"serial: only {int(work)} iterations (< {MIN_PARALLEL_WORK})")
    fused = int(ov.get("fuse", _default_fuse(order))) if parallel else 0
    if parallel and not 1 <= fused <= len(order):
        raise ScheduleError(f"stage {name!r}: fuse={fused} must be between 1 and {len(order)}")
    tensors = tuple(tensors_of.get((id(op), k)) for k in range(len(bodies)))
    return ComputeStage(name, tensors, tuple(op.axis), bodies, order,
                        fused, parallel, is_output, _reduction_notes(bodies, op.axis),
                        expand.names_in(op.body), tuple(notes))


# -- 6./7. CPU strategies: BLAS contractions, row accumulation, split reductions ---------------

def _factor_contraction(st: ComputeStage, ov: Mapping[str, Any],
                        expand: _Expander) -> tuple[ComputeStage | None, ComputeStage]:
    """Pull the constant-bound reduction axes that index both operands plainly out of a sum
    whose other axes have dependent bounds (the input gradient of a convolution):
    `sum_{R, C} A * B = sum_R P[..]` with `P = sum_C A * B` over whole dims, a contraction
    (BLAS) of a size comparable to the stage's output."""
    loop_keys = {"order", "fuse", "parallel"} & set(ov)
    if not ov.get("blas", not loop_keys) or len(st.bodies) != 1 or st.tensors[0] is None:
        return None, st
    body = st.bodies[0]
    if not (isinstance(body, Reduce) and body.combiner.kind == "sum" and len(body.source) == 1
            and not body.init and body.dtype in ("float32", "float64")):
        return None, st
    src = body.source[0]
    if not (isinstance(src, Call) and src.op is Op.MUL
            and all(isinstance(a, Read) and a.dtype == body.dtype for a in src.args)):
        return None, st
    ra, rb = src.args
    if any(isinstance(x, Read) for r in (ra, rb) for i in r.indices for x in walk(i)):
        return None, st

    def plain_in(k: IterVar, r: Read) -> bool:
        return sum(1 for i in r.indices if i is k) == 1 and all(
            i.extent.same_as(d) for i, d in zip(r.indices, r.tensor.shape, strict=True)
            if i is k)

    const_axes = [k for k in body.axis if _is_zero(k.lo) and isinstance(k.extent, Const)
                  and plain_in(k, ra) and plain_in(k, rb)
                  and not any(k in walk(c) for c in (body.condition,))]
    rest = [k for k in body.axis if k not in const_axes]
    if not const_axes or not rest:
        return None, st
    cset = set(const_axes)
    keep = [[(d, i) for d, i in enumerate(r.indices) if i not in cset] for r in (ra, rb)]
    if any(k in walk(i) for g in keep for _, i in g for k in const_axes):
        return None, st
    # P's dims: the kept dims of each operand, the group indexed by the stage's innermost loop
    # axis last, so the stage reads P contiguously (Caffe's col2im layout for a convolution)
    inner = st.order[-1] if st.order else None
    first = 1 if inner is not None and any(inner in walk(i) for _, i in keep[0]) else 0
    groups = [(ra, keep[0]), (rb, keep[1])][first:] + [(ra, keep[0]), (rb, keep[1])][:first]
    dims = [r.tensor.shape[d] for r, g in groups for d, _ in g]
    size = _work([IterVar("_", const(0), e) for e in dims], ())
    points = _work(st.axes, ())
    if math.isinf(size) or size > MAX_IM2COL or size > 16 * points \
            or size * _work(const_axes, ()) < MIN_BLAS_WORK:
        return None, st
    from ..te import tensor as tt
    from ..te.reduce import sum as te_sum
    from ..te.tensor import reduce_axis
    name = f"{st.name}_factor"
    names = [f"p{k}" for k in range(len(dims))]

    def fcompute(*ax: IterVar) -> Expr:
        cs = {k: reduce_axis((0, k.extent), k.name) for k in const_axes}
        it = iter(ax)
        idx = {id(r): [cs[i] if i in cset else next(it) for i in r.indices] for r, _ in groups}
        return te_sum(ra.tensor[tuple(idx[id(ra)])] * rb.tensor[tuple(idx[id(rb)])],
                      axis=list(cs.values()))

    fcompute.axis_names = names  # type: ignore[attr-defined]
    p = tt.compute(tuple(dims), fcompute, name=name)
    p_stage = _compute_stage(p.op, name, False, expand, {}, {(id(p.op), 0): p})
    p_stage = replace(p_stage, notes=(f"materialized: the sum over "
                                      f"{', '.join(k.name for k in const_axes)} of stage {st.name}, "
                                      f"factored out as a contraction",))
    new_body = replace(body, source=(p[tuple(i for _, g in groups for _, i in g)],), axis=tuple(rest))
    return p_stage, replace(st, bodies=(new_body,),
                            reduction=_reduction_notes((new_body,), st.axes),
                            notes=(*st.notes, f"factored: the sum over "
                                   f"{', '.join(k.name for k in const_axes)} is stage {name}"))


def _cpu_strategies(st: ComputeStage, ov: Mapping[str, Any]) -> ComputeStage:
    loop_keys = {"order", "fuse", "parallel"} & set(ov)
    if math.isinf(_work(st.axes, st.bodies)) and not ov.get("blas"):
        return st  # symbolic dims: sizes unknown until the call, keep the plain loop nest
    if ov.get("blas", not loop_keys):
        c = _contraction(st)
        if c is not None:
            return replace(st, contraction=c, parallel=False, fused=0)
        if ov.get("blas"):
            raise ScheduleError(f"stage {st.name!r} is not a contraction sum_k A[..] * B[..] over "
                                f"plain axes covering whole operand dims with static sizes of at "
                                f"least {MIN_BLAS_WORK} multiply-adds; remove the 'blas' override")
    if ov.get("accumulate", not loop_keys):
        acc = _accumulate(st)
        if acc is not None:
            if acc.split is not None:
                return replace(st, accumulate=acc, parallel=True, fused=0)
            return replace(st, accumulate=acc)
    if ov.get("accumulate", not loop_keys):
        lanes = _lanes(st)
        if lanes > 1:
            return replace(st, lanes=lanes)
    return st


def _lanes(st: ComputeStage) -> int:
    """LANES if the stage has one single-valued sum/max/min reduction whose innermost axis is
    static, long, and contiguous in some read (unrolled into independent accumulators: max/min
    give identical results, sums are reassociated within float rounding), else 1."""
    reds = {(r.combiner, r.source, r.axis, r.condition, r.init)
            for b in st.bodies for r in walk(b) if isinstance(r, Reduce)}
    if len(reds) != 1:
        return 1
    comb, src, axes, cond, _ = next(iter(reds))
    if len(src) != 1 or comb.kind not in ("sum", "max", "min") or src[0].dtype not in (
            "float32", "float64") or not (isinstance(cond, Const) and cond.value is True):
        return 1
    k = axes[-1]
    if not isinstance(k.lo, Const) or (_const(k.extent) or 0) < 4 * LANES:
        return 1
    if math.isinf(_work(st.axes, st.bodies)):
        return 1  # symbolic dims: like BLAS dispatch, only for static sizes
    if any(isinstance(v, IterVar) for a in axes for e in (a.lo, a.extent) for v in walk(e)):
        return 1
    reads = [x for x in walk(src[0]) if isinstance(x, Read)]
    return LANES if any(k in _last_index_axes(x) for x in reads) else 1


def _is_zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 0


def _plain(r: Read, axes: set[IterVar]) -> bool:
    """Every index of `r` is a distinct axis of `axes` running over the whole dim."""
    return len(set(r.indices)) == len(r.indices) and all(
        isinstance(ix, IterVar) and ix in axes and _is_zero(ix.lo) and ix.extent.same_as(dim)
        for ix, dim in zip(r.indices, r.tensor.shape, strict=True))


def _im2col(st: ComputeStage, ov: Mapping[str, Any],
            expand: _Expander) -> tuple[ComputeStage | None, ComputeStage]:
    """Split `sum_K A[plain] * B[affine]` (a convolution and its weight gradient) into a gather
    stage `col[data axes of B, K] = B[..]` and a contraction of A with `col` (then BLAS)."""
    loop_keys = {"order", "fuse", "parallel"} & set(ov)
    if not ov.get("blas", not loop_keys):
        return None, st
    body = _single_sum(st)
    if body is None:
        return None, st
    src = body.source[0]
    if not (isinstance(src, Call) and src.op is Op.MUL
            and all(isinstance(a, Read) and a.dtype == body.dtype for a in src.args)):
        return None, st
    data, red = tuple(st.axes), tuple(body.axis)
    allax = set(data) | set(red)
    if any(not (_is_zero(k.lo) and isinstance(k.extent, Const)) for k in red):
        return None, st
    plain = [_plain(r, allax) for r in src.args]
    if plain != [True, False] and plain != [False, True]:
        return None, st
    a, g = (src.args[0], src.args[1]) if plain[0] else (src.args[1], src.args[0])
    used = {v for i in g.indices for v in walk(i)}
    if any(isinstance(v, (Read, Reduce)) for v in used) or any(
            isinstance(v, IterVar) and v not in allax for v in used):
        return None, st
    if any(k not in used or k not in a.indices for k in red):
        return None, st
    # the group (data axes of the gather, or K) holding the longest axis of B's contiguous dim
    # goes last: the gather then streams along it on both sides, and the product's operand
    # is a plain reshape of `col` (rows K x columns data for a convolution: Caffe's layout)
    inner = [v for v in walk(g.indices[-1]) if isinstance(v, IterVar) and v in allax]
    last = max(inner, key=lambda v: _const(v.extent) or 0) if inner else None
    cols = [x for x in data if x in used]
    axes = list(red) + cols if last in cols else cols + list(red)
    size = _work(axes, ())
    if math.isinf(size) or size > MAX_IM2COL or _work(data, (body,)) < MIN_BLAS_WORK:
        return None, st
    from ..te.tensor import compute
    name = f"{st.name}_im2col"

    def gather(*new: IterVar) -> Expr:
        return substitute(g, dict(zip(axes, new, strict=True)))

    gather.axis_names = [x.name for x in axes]  # type: ignore[attr-defined]
    col = compute(tuple(x.extent for x in axes), gather, name=name)
    col_stage = _compute_stage(col.op, name, False, expand, {}, {(id(col.op), 0): col})
    col_stage = replace(col_stage, notes=(f"materialized: im2col gather of {g.tensor.name} for "
                                          f"the contraction -> BLAS of stage {st.name}",))
    new_src = Call(Op.MUL, (a, col[tuple(axes)]), body.dtype)
    new_body = replace(body, source=(new_src,))
    return col_stage, replace(st, bodies=(new_body,),
                              notes=(*st.notes, f"im2col: {g.tensor.name} gathered by {name}"))


def _product(exts: Sequence[Expr]) -> Expr:
    out: Expr = const(1, "int64")
    for e in exts:
        if isinstance(out, Const) and isinstance(e, Const):
            out = const(int(out.value) * int(e.value), "int64")
        else:
            out = e if isinstance(out, Const) and out.value == 1 else out * e
    return out


def _single_sum(st: ComputeStage) -> Reduce | None:
    """The stage's body if it is one unconditional float sum without init, else None."""
    if len(st.bodies) != 1 or st.tensors[0] is None:
        return None
    b = st.bodies[0]
    if not (isinstance(b, Reduce) and b.combiner.kind == "sum" and len(b.source) == 1
            and not b.init and isinstance(b.condition, Const) and b.condition.value is True
            and b.dtype in ("float32", "float64")):
        return None
    return b


def _contraction(st: ComputeStage) -> Contraction | None:
    """A (batched) matrix product `O = sum_K A * B`, or None (see the module docstring)."""
    body = _single_sum(st)
    if body is None:
        return None
    src = body.source[0]
    if not (isinstance(src, Call) and src.op is Op.MUL
            and all(isinstance(a, Read) for a in src.args)):
        return None
    ra, rb = src.args
    data, red = tuple(st.axes), tuple(body.axis)
    for r in (ra, rb):
        if r.dtype != body.dtype or len(set(r.indices)) != len(r.indices):
            return None
        for ix, dim in zip(r.indices, r.tensor.shape, strict=True):
            if not (isinstance(ix, IterVar) and (ix in data or ix in red) and _is_zero(ix.lo)
                    and ix.extent.same_as(dim)):
                return None
    sa, sb = set(ra.indices), set(rb.indices)
    if not red or any(k not in sa or k not in sb for k in red):
        return None
    if not all(a in sa or a in sb for a in data):
        return None
    batch = [a for a in data if a in sa and a in sb]
    rest = [a for a in data if a not in sa or a not in sb]
    if not any(a in sa for a in rest) and not any(a in sb for a in rest):
        return None  # batched dot products: memory-bound, the loop strategies do better
    work = _work(data, (body,))
    if work < MIN_BLAS_WORK or math.isinf(work):
        return None  # small, or symbolic dims (size unknown until the call): loops
    # A @ B or B @ A: whichever copies the fewest elements into BLAS layout, then the one with
    # more rows (OpenBLAS sgemm runs tall products faster, and the rows are split over threads)
    return min((_orient(x, y, batch, rest, red, data) for x, y in ((ra, rb), (rb, ra))),
               key=lambda c: (_copied(c), -(_const(c.sizes[1]) or 0)))


def _orient(ra: Read, rb: Read, batch: list[IterVar], rest: list[IterVar],
            red: tuple[IterVar, ...], data: tuple[IterVar, ...]) -> Contraction:
    """The contraction with `ra` as the (batch, M, K) operand and `rb` as (batch, K, N)."""
    m = [a for a in rest if a in ra.indices]
    n = [a for a in rest if a in rb.indices]
    a_perm = tuple(ra.indices.index(x) for x in (*batch, *m, *red))
    b_perm = tuple(rb.indices.index(x) for x in (*batch, *red, *n))
    natural = (*batch, *m, *n)
    out_perm = None if natural == data else tuple(natural.index(a) for a in data)
    sizes = tuple(_product([a.extent for a in g]) for g in (batch, m, red, n))
    return Contraction(ra.tensor, rb.tensor, a_perm, b_perm, sizes,  # type: ignore[arg-type]
                       tuple(a.extent for a in natural), out_perm)


def _copied(c: Contraction) -> float:
    """Elements a contraction copies: each operand that is not a (batch, rows, cols) view of
    its array, and the result when it must be permuted into the output's order."""
    def size(shape: Sequence[Expr]) -> float:
        return float(math.prod(_const(e) or 0 for e in shape))
    n = sum(size(t.shape) for t, p in ((c.a, c.a_perm), (c.b, c.b_perm)) if not _blas_view(p))
    return n + (size(c.bmn_shape) if c.out_perm is not None else 0.0)


def _blas_view(perm: tuple[int, ...]) -> bool:
    """True if dims in this order merge into a (batch, rows, cols) view without a copy: the
    identity, or the identity with one trailing block moved to the front of the rest (a
    transposed matrix, which BLAS reads with its transpose flag)."""
    n = len(perm)
    if perm == tuple(range(n)):
        return True
    for b in range(n):  # leading batch dims in place, then two increasing runs swapped
        if perm[:b] != tuple(range(b)):
            break
        for s in range(b + 1, n):
            if perm[b:] == (*range(s, n), *range(b, s)):
                return True
    return False


def _last_index_axes(r: Read) -> set[IterVar]:
    return {x for x in walk(r.indices[-1]) if isinstance(x, IterVar)} if r.indices else set()


def _accumulate(st: ComputeStage) -> Accumulate | None:
    """Row accumulation and/or a split into partial results, or None (scalar accumulators)."""
    groups = [[x for x in walk(b) if isinstance(x, Reduce)] for b in st.bodies]
    reds = {(r.combiner, r.source, r.axis, r.condition, r.init) for g in groups for r in g}
    if len(reds) != 1:
        return None
    r = next(x for g in groups for x in g)
    if len(r.source) != 1 or r.combiner.kind not in ("sum", "max", "min", "prod"):
        return None
    if any(isinstance(v, IterVar) for a in r.axis for e in (a.lo, a.extent) for v in walk(e)):
        return None  # bounds depend on the data axes
    reads = [x for x in walk(r.source[0]) if isinstance(x, Read)]
    red = set(r.axis)
    row = None
    if st.order and st.order[-1] is st.axes[-1]:
        j = st.axes[-1]
        # reads along j stream contiguously (j last, no reduction axis last); reads not
        # depending on j (mean[i], ...) are invariant in the inner loop
        along = [x for x in reads if any(v is j for i in x.indices for v in walk(i))]
        if (_const(j.extent) or 0) >= 16 and along and all(
                j in _last_index_axes(x) and not _last_index_axes(x) & red for x in along):
            row = j
    points = _work(st.axes, ())
    work = _work(st.axes, st.bodies)
    outer = _work([a for a in st.axes if a is not row], ())
    split = None
    first = r.axis[0]
    if (points <= SPLIT_MAX_POINTS and work >= SPLIT_MIN_WORK and outer < MIN_PARALLEL_CHUNKS
            and _const(first.extent) is not None and _const(first.extent) >= 2 * SPLIT_CHUNKS):
        split = first
    if split is None and st.parallel and st.fused >= len(st.order):
        row = None  # the prange already runs over the row axis
    if row is None and split is None:
        return None
    return Accumulate(row, split, SPLIT_CHUNKS if split is not None else 0)


def _scatter_block(st: ScatterStage) -> ScatterStage:
    """Block the parallel axis of a scatter when it is the target's last (contiguous) dim: the
    prange runs over blocks of it, the other loops inside, the block innermost (race-free:
    blocks write disjoint elements)."""
    p = st.parallel_axis
    if (p is None or st.parallel_dim != len(st.index) - 1 or len(st.order) < 2
            or not _is_zero(p.lo) or (_const(p.extent) or 0) < 2 * SCATTER_BLOCK):
        return st
    return replace(st, block=SCATTER_BLOCK)


def _joinable(st: Stage) -> bool:
    return (isinstance(st, ComputeStage) and st.parallel and st.fused == 1 and bool(st.order)
            and st.contraction is None and st.accumulate is None)


def _join_stages(stages: list[Stage], overrides: Mapping[str, Mapping[str, Any]]) -> list[Stage]:
    """Mark stages that run inside the previous stage's prange (step 8)."""
    out: list[Stage] = []
    rows: dict[int, int] = {}  # tensor id -> dim written at the shared parallel index
    ext: Expr | None = None
    for st in stages:
        ok = _joinable(st) and not ({"order", "fuse", "parallel"} & set(overrides.get(st.name, {})))
        if ok and ext is not None and st.order[0].extent.same_as(ext):  # type: ignore[union-attr]
            p = st.order[0]  # type: ignore[union-attr]
            reads = [x for b in st.bodies for x in walk(b)  # type: ignore[union-attr]
                     if isinstance(x, Read) and id(x.tensor) in rows]
            if all(x.indices[rows[id(x.tensor)]] is p for x in reads):
                st = replace(st, join=True)  # type: ignore[arg-type]
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


def _reads(st: Stage) -> Iterator[Read]:
    """Every tensor read of a stage, reduction bounds and BLAS operands included."""
    exprs = st.bodies if isinstance(st, ComputeStage) else (*st.index, st.value, st.condition)
    for e in exprs:
        for x in walk(e):
            if isinstance(x, Read):
                yield x
            elif isinstance(x, Reduce):
                yield from (r for a in x.axis for b in (a.lo, a.extent) for r in walk(b)
                            if isinstance(r, Read))
    if isinstance(st, ComputeStage) and st.contraction is not None:
        c = st.contraction
        yield from (Read(t, (), t.dtype) for t in (c.a, c.b))


def _row_buffers(stages: list[Stage]) -> list[Stage]:
    """Joined intermediates read only inside their own prange become per-iteration buffers."""
    group: list[int] = []  # the current joined group, as positions in `stages`
    groups: list[list[int]] = []
    for k, st in enumerate(stages):
        if getattr(st, "join", False) and group:
            group.append(k)
        else:
            group = [k]
            groups.append(group)
    readers: dict[int, set[int]] = {}  # tensor id -> positions of the stages reading it
    for k, st in enumerate(stages):
        for r in _reads(st):
            readers.setdefault(id(r.tensor), set()).add(k)
    out = list(stages)
    for g in groups:
        for k in g[:-1] if len(g) > 1 else ():
            st = out[k]
            ts = [t for t in st.tensors if t is not None]  # type: ignore[union-attr]
            if (not st.is_output and ts and len(st.axes) > 1  # type: ignore[union-attr]
                    and all(readers.get(id(t), set()) <= set(g) - {k} for t in ts)):
                out[k] = replace(st, row_buffer=True)  # type: ignore[arg-type]
    return out


# -- 5. scatter -------------------------------------------------------------------------

def _scatter_stage(op: ScatterOp, name: str, is_output: bool, expand: _Expander,
                   ov: Mapping[str, Any], tensors_of: dict[tuple[int, int], Tensor]) -> ScatterStage:
    index = tuple(expand(i) for i in op.index)
    value, cond = expand(op.value), expand(op.condition)
    for e in (*index, value, cond):
        if any(isinstance(x, Reduce) for x in walk(e)):
            raise ScheduleError(f"scatter {name!r}: reductions inside a scatter are not supported; "
                                f"compute them in a stage of their own")
    notes: list[str] = [f"override {k}={v!r}" for k, v in ov.items()]
    cand, dim = None, -1
    axes = set(op.axis)
    for d, ix in enumerate(index):
        if isinstance(ix, IterVar) and ix in axes:
            deps = [v for e in (ix.lo, ix.extent) for v in walk(e) if isinstance(v, IterVar)]
            if not deps:
                cand, dim = ix, d
                break
    want = ov.get("parallel", cand is not None)
    if want and cand is None:
        raise ScheduleError(f"scatter {name!r}: no axis maps injectively to an index dim "
                            f"(index [{', '.join(expr_str(i) for i in index)}]), so a parallel "
                            f"scatter would race; remove the 'parallel' override")
    if not want:
        cand, dim = None, -1
        notes.append("serial: no index dim is exactly one loop axis (a parallel loop would race)"
                     if "parallel" not in ov else "serial by override")
    order = tuple(op.axis) if cand is None else (cand, *[a for a in op.axis if a is not cand])
    return ScatterStage(name, tensors_of[(id(op), 0)], tuple(op.shape), order, index, value, cond,
                        cand, dim, is_output, expand.names_in((*op.index, op.value, op.condition)),
                        tuple(notes))


# -- symbolic dims ------------------------------------------------------------------------

def _vars(e: Expr, out: dict[Var, None]) -> None:
    for x in walk(e):
        if isinstance(x, Var):
            out[x] = None
        elif isinstance(x, IterVar):
            _vars(x.lo, out)
            _vars(x.extent, out)
        elif isinstance(x, Reduce):
            for a in x.axis:
                _vars(a.lo, out)
                _vars(a.extent, out)


def _params(inputs: tuple[Tensor, ...], outputs: tuple[Tensor, ...],
            ops: list[ComputeOp | ScatterOp]) -> tuple[Var, ...]:
    """Symbolic dims, in order of first appearance as an input dimension; all must be bound."""
    bound: dict[Var, None] = {}
    for t in inputs:
        for s in t.shape:
            if isinstance(s, Var):
                bound[s] = None
    used: dict[Var, None] = {}
    for t in topo_order(outputs):
        for s in t.shape:
            _vars(s, used)
    for op in ops:
        for e in _exprs(op):
            _vars(e, used)
        for a in op.axis:
            _vars(a, used)
        if isinstance(op, ScatterOp):
            for s in op.shape:
                _vars(s, used)
    for t in inputs:
        for s in t.shape:
            _vars(s, used)
    free = [v.name for v in used if v not in bound]
    if free:
        raise ScheduleError(f"symbolic dim(s) {free} are used by the kernel but are not a "
                            f"dimension of any input, so they cannot be bound from the input "
                            f"shapes; make each one the size of some input dimension")
    return tuple(bound)


def _tensors_of(outputs: tuple[Tensor, ...]) -> dict[tuple[int, int], Tensor]:
    """(op id, value index) -> tensor, for the tensors reachable from the outputs."""
    return {(id(t.op), t.value_index): t for t in topo_order(outputs)}
