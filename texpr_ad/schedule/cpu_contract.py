"""CPU contraction strategies (refine step 6): a stage `sum_K A[..] * B[..]` (contraction.py's
normal form) run as BLAS products (`contraction_of`), through an im2col gather or a padded copy
read in place (`im2col`, cpu_implicit.py), or with its constant axes summed first by a factored
contraction (`factor_contraction`, then cpu_col2im.py).  cpu.py's module docstring describes
each; the plan prints every decision with its reason."""
from __future__ import annotations

import functools
import itertools
from dataclasses import replace
from typing import Any, Mapping, Sequence

from ..te.expr import Call, Const, Expr, IterVar, Read, is_zero
from ..te.ops import Op
from ..te.printer import expr_str
from ..te.reduce import sum as te_sum
from ..te.tensor import compute, reduce_axis
from ..te.visit import substitute, walk
from . import cpu_implicit, normalize
from .contraction import Operand, Role, SumOfProduct, normal_form, product
from .nest import Expander, compute_stage, extent_product
from .nest import const_int as _const, iteration_count as _work, reduction_notes as _reduction_notes
from .plan import ComputeStage, Contraction
from .plan import with_cpu as _cpu

MIN_BLAS_WORK = 4096  # contractions with fewer multiply-adds stay in loops
MAX_IM2COL = 1 << 26  # elements of an im2col gather stage (256 MiB of float32) at most
SHARED_BATCH_MIN_WORK = 1 << 20  # multiply-adds per batch entry of a shared-operand product
IM2COL_MIN_ENTRY = 1 << 17  # multiply-adds per batch entry of a gathered (im2col) product
SYMBOLIC_BATCH = 64  # images a symbolic batch is planned for (the im2col buffer's bound)
_planned = functools.partial(extent_product, symbolic=SYMBOLIC_BATCH)  # sizes for planning


class _NoExpand:
    """The expander of stages built from already expanded bodies (im2col, factored sums)."""

    def __call__(self, e: Expr) -> Expr:
        return e

    def names_in(self, exprs: Sequence[Expr]) -> tuple[str, ...]:
        return ()


NO_EXPAND = _NoExpand()


def factor_contraction(st: ComputeStage, ov: Mapping[str, Any],
                        expand: Expander) -> tuple[ComputeStage | None, ComputeStage]:
    """Pull the constant-bound reduction axes that index both operands plainly out of a sum
    whose other axes have dependent bounds (the input gradient of a convolution):
    `sum_{R, C} A * B = sum_R P[..]` with `P = sum_C A * B` over whole dims, a contraction
    (BLAS) of a size comparable to the stage's output."""
    loop_keys = {"order", "fuse", "parallel"} & set(ov)
    f = normal_form(st) if ov.get("blas", not loop_keys) else None
    if f is None or f.body.init or any(o.g.cond is not None or not o.closed for o in (f.a, f.b)):
        return None, st
    body, ra, rb = f.body, f.a.read, f.b.read

    def plain_in(k: IterVar, o: Operand) -> bool:
        hits = [ix for ix in o.index if ix.expr is k]
        return len(hits) == 1 and hits[0].plain is k

    const_axes = [k for k in body.axis if is_zero(k.lo) and isinstance(k.extent, Const)
                  and plain_in(k, f.a) and plain_in(k, f.b) and k not in walk(body.condition)]
    rest = [k for k in body.axis if k not in const_axes]
    if not const_axes or not rest:
        return None, st
    cset = set(const_axes)
    kept = [[(d, ix) for d, ix in enumerate(o.index) if ix.expr not in cset] for o in (f.a, f.b)]
    if any(v in cset for g in kept for _, ix in g for v in ix.axes):
        return None, st
    keep = [[(d, ix.expr) for d, ix in g] for g in kept]
    groups = _factor_layout(st, rest, [(ra, keep[0]), (rb, keep[1])])
    dims = [r.tensor.shape[d] for r, g in groups for d, _ in g]
    size, points = _planned(dims), _planned([a.extent for a in st.axes])
    if size > MAX_IM2COL or size > 16 * points or size * _work(const_axes, ()) < MIN_BLAS_WORK:
        return None, st
    name = f"{st.name}_factor"

    def fcompute(*ax: IterVar) -> Expr:
        cs: dict[Expr, IterVar] = {k: reduce_axis((0, k.extent), k.name) for k in const_axes}
        at = dict(zip(((id(r), d) for r, g in groups for d, _ in g), ax))  # P's dim of each
        idx = {id(r): [cs[i] if i in cset else at[id(r), d] for d, i in enumerate(r.indices)]
               for r in (ra, rb)}
        return te_sum(ra.tensor[tuple(idx[id(ra)])] * rb.tensor[tuple(idx[id(rb)])],
                      axis=list(cs.values()))

    fcompute.axis_names = [f"p{k}" for k in range(len(dims))]  # type: ignore[attr-defined]
    p = compute(tuple(dims), fcompute, name=name)
    p_stage = pre_stage(p, f"the sum over {', '.join(k.name for k in const_axes)} of stage "
                            f"{st.name}, factored out as a contraction", expand=expand)
    new_body = replace(body, source=(p[tuple(i for _, g in groups for _, i in g)],), axis=tuple(rest))
    return p_stage, replace(st, bodies=(new_body,),
                            reduction=_reduction_notes((new_body,), st.axes),
                            notes=(*st.notes, f"factored: the sum over "
                                   f"{', '.join(k.name for k in const_axes)} is stage {name}"))


Kept = list[tuple[int, Expr]]  # (operand dim, its index in the stage) of a factored operand


def _factor_layout(st: ComputeStage, rest: list[IterVar],
                   groups: list[tuple[Read, Kept]]) -> list[tuple[Read, Kept]]:
    """The dim order of a factored contraction P: its dims follow the stage's loops (its
    order, then the remaining reduction axes), within what BLAS can write in place.  A group's
    leading dims indexed by output axes looped before anything indexing the other group go
    first, as P's batch (the image of a convolution); then the two groups, the one indexed by
    the earlier loops first.  For a strided convolution's input gradient that is Caffe's
    col2im layout P[n, c, ry, rx, y, x]: the stage's innermost loop, over x, reads P
    contiguously, and the product is w^T @ dy[n] per image with no copy."""
    loops = [*st.order, *rest]

    def rank(ix: Expr) -> int:
        return min((loops.index(v) for v in walk(ix) if v in loops), default=len(loops))

    def first(g: Kept) -> int:
        return min((rank(i) for _, i in g), default=len(loops))

    (ra, ga), (rb, gb) = groups
    for (r, g), other in (((ra, ga), gb), ((rb, gb), ga)):
        lead = list(itertools.takewhile(
            lambda di: di[1] in st.axes and rank(di[1]) < first(other), g))
        if lead:
            tail = [(r, g[len(lead):]), (rb if r is ra else ra, other)]
            return [(r, lead), *sorted(tail, key=lambda t: first(t[1]))]
    return sorted(groups, key=lambda t: first(t[1]))


def im2col(st: ComputeStage, ov: Mapping[str, Any],
            expand: Expander) -> tuple[tuple[ComputeStage, ...], ComputeStage]:
    """Split `sum_K A[plain] * B[affine]` (a convolution and its weight gradient) into a gather
    stage `col[data axes of B, K] = B[..]` and a contraction of A with `col` (then BLAS), or,
    on texpr_ad's GEMM, into the stages an implicit im2col reads (`_implicit`): the stages to
    run first, and the contraction stage."""
    loop_keys = {"order", "fuse", "parallel"} & set(ov)
    f = normal_form(st) if ov.get("blas", not loop_keys) else None
    box = normalize.boxed(f.body, st.axes) if f is not None and f.simple else None
    if box is not None:  # dependent windows -> constant hull + guard
        f = normal_form(replace(st, bodies=(box.body,)))
    if (f is None or not f.simple or f.a.plain == f.b.plain  # (a symbolic reduction extent:
            or any(not is_zero(k.lo) for k in f.red)):        # a weight gradient's batch)
        return (), st
    # the gathered operand in normal form: a guarded read, padding stages folded in
    f = (f if f.a.plain else f.swapped()).gathered(None if box is None else box.cond)
    if not f.b.closed or any(f.role(k) is not Role.K for k in f.red) or not f.axes(Role.M):
        return (), st  # no M: each gathered element would meet one row of A (a depthwise
        #                convolution, a matrix-vector product per channel): loops read it once
    if f.axes(Role.BATCH) and f.per_entry(f.axes(Role.BATCH)) < IM2COL_MIN_ENTRY:
        return (), st  # a batch of small products (an EMA's adjoint: 512 of 16 x 64 x 64): the
        #                gather and the per-product calls cost more than the loops
    red, gathered = f.red, f.b.g
    if ov.get("implicit", True):
        done = _implicit(st, f, box)
        if done is not None:
            return done
    # the group (data axes of the gather, or K) holding the longest axis of B's contiguous dim
    # goes last: the gather then streams along it on both sides, and the product's operand
    # is a plain reshape of `col` (rows K x columns data for a convolution: Caffe's layout)
    inner = list(f.b.index[-1].axes)
    last = max(inner, key=lambda v: _const(v.extent) or 0) if inner else None
    # the output's leading axes that only the gather indexes (a convolution's batch) go first
    # when each of their entries is a large product: `col[n]` is then the operand of one
    # product per entry whose result is the output's own slice `Y[n]` (see _shared_batch)
    cols, lead = f.axes(Role.BATCH, Role.N), f.leading(Role.N)
    inner = [x for x in cols if x not in lead]
    if not inner or f.per_entry(lead) < SHARED_BATCH_MIN_WORK:
        lead, inner = [], cols
    axes = lead + (list(red) + inner if last in inner else inner + list(red))
    size = _planned([x.extent for x in axes])  # (`col` grows with a symbolic batch)
    if size > MAX_IM2COL or f.work < MIN_BLAS_WORK:
        return (), st
    name = f"{st.name}_im2col"

    def gather(*new: IterVar) -> Expr:
        return substitute(gathered.expr, dict(zip(axes, new, strict=True)))

    gather.axis_names = [x.name for x in axes]  # type: ignore[attr-defined]
    col = compute(tuple(x.extent for x in axes), gather, name=name)
    g = gathered.read
    why = []
    if gathered.cond is not None:
        why.append(f"guarded gather: zero where {expr_str(gathered.cond)} fails (the padding "
                   f"guard of the read, kept in the gather instead of a padded copy)")
    if gathered.folded:
        why.append(f"folded: padding stage {', '.join(gathered.folded)} evaluated in the gather "
                   f"(no padded copy of {g.tensor.name} is read)")
    col_stage = pre_stage(col, f"im2col gather of {g.tensor.name} for the contraction -> BLAS "
                                f"of stage {st.name}", *why, expand=expand)
    return (col_stage,), _times_a(st, f, box, col[tuple(axes)],
                                  f"im2col: {g.tensor.name} gathered by {name}")


def _implicit(st: ComputeStage, f: SumOfProduct, box: normalize.Boxed | None
              ) -> tuple[tuple[ComputeStage, ...], ComputeStage] | None:
    """`im2col` without the gather: the product reads a padded copy of the gathered operand
    `f.b` in place (`cpu_implicit.py`), as B's rows (`window`: a convolution, its input
    gradient) or A's (`weight_window`: its weight gradient), or None where that does not apply."""
    if f.work < MIN_BLAS_WORK:
        return None
    imp = cpu_implicit.window(f, st.name) or cpu_implicit.weight_window(f, st.name)
    if imp is None:
        return None
    a, x, y = f.a.read, f.b.read.tensor.name, imp.read.tensor.name
    why = f"for the implicit im2col of stage {st.name}"
    pre = [] if imp.padded is None else [(imp.padded, f"{x} padded {why}")]
    how = f"{y} in place as a sliding window"
    if imp.head is not None:
        pre.append((imp.head, f"{a.tensor.name} on the padded grid (zero in the padded columns) "
                              f"{why}"))
        how = f"windows of {y} in place as its rows"
    return tuple(pre_stage(t, w) for t, w in pre), _times_a(
        st, f, box, imp.read, f"implicit im2col: the product reads {how} (no gather of {x} is "
                              f"stored)", contraction=imp.contraction, parallel=False, fused=0)


def _times_a(st: ComputeStage, f: SumOfProduct, box: normalize.Boxed | None, b: Expr,
             note: str, **cpu: Any) -> ComputeStage:
    """Stage `st` summing `f.a` times `b`, the gathered operand's new read (`cpu`: the plan),
    noting the boxed windows (if they were)."""
    body = replace(f.body, source=(Call(Op.MUL, (f.a.read, b), f.body.dtype),))
    notes = [*st.notes, note]
    if box is not None:
        hulls = ", ".join(f"{k} in [{lo}, {hi})" for k, lo, hi in box.hulls)
        notes.insert(-1, f"boxed: the windows of {', '.join(k for k, _, _ in box.hulls)} depend "
                         f"on the output point; summed over their hull ({hulls}) with the windows "
                         f"as the gather's guard, a contraction again (a non-finite "
                         f"{f.a.read.tensor.name} value then meets the guard's zeros: NaN where "
                         f"the windows would skip it; override blas=False keeps the windows)")
    return _cpu(st, bodies=(body,), notes=tuple(notes), reduction=_reduction_notes((body,), st.axes),
                **cpu)


def pre_stage(t: Any, why: str, *more: str, expand: Expander = NO_EXPAND) -> ComputeStage:
    """The stage computing `t` (built by a CPU strategy), with why it is materialized."""
    st = compute_stage(t.op, t.name, False, expand, {}, {(id(t.op), 0): t})
    return replace(st, notes=(f"materialized: {why}", *more))


def contraction_of(st: ComputeStage) -> Contraction | None:
    """A (batched) matrix product `O = sum_K A * B`, or None (see the module docstring)."""
    f = normal_form(st)
    if (f is None or not f.simple or not (f.a.plain and f.b.plain) or not f.red
            or f.axes(Role.OTHER)):
        return None
    if not f.axes(Role.M) or not f.axes(Role.N):
        return None  # dot products and matrix-vector products are memory-bound: loops (with
        #              lanes, inside the row's prange) do as well without leaving the loop nest
    if f.work < MIN_BLAS_WORK:
        return None  # small: loops.  Symbolic dims (inf) go to BLAS: at worst a call's
        #              overhead on a small product, where loops would be 100x slower on a large
    # A @ B or B @ A: whichever copies the fewest elements into BLAS layout, then the one with
    # more rows (OpenBLAS sgemm runs tall products faster, and the rows are split over threads)
    cands = [_orient(g, g.axes(Role.BATCH)) for g in (f, f.swapped())] + _shared_batch(f)
    return min(cands, key=lambda c: (_copied(c), -(_const(c.sizes[1]) or 0)))


def _shared_batch(f: SumOfProduct) -> list[Contraction]:
    """Contractions batched over the output's leading axes that only one operand indexes
    (the image of a convolution after im2col), the other shared by every batch entry, when
    that gives the output's own order (no permuted copy of the result) and each batch entry
    is a product of at least SHARED_BATCH_MIN_WORK multiply-adds."""
    if f.axes(Role.BATCH):
        return []
    out = []
    for g in (f, f.swapped()):
        lead = g.leading(Role.M)
        for p in range(1, len(lead) + 1):
            for c in (_orient(g.swapped(), lead[:p], shared="a"), _orient(g, lead[:p], shared="b")):
                if c.out_perm is None and all(_const(z) != 1 for z in c.sizes[1:]) \
                        and f.per_entry(lead[:p]) >= SHARED_BATCH_MIN_WORK:
                    out.append(c)
    return out


def _orient(f: SumOfProduct, batch: list[IterVar], shared: str = "") -> Contraction:
    """The contraction with `f.a` as the (batch, M, K) operand and `f.b` as (batch, K, N);
    `shared`: the operand ("a" or "b") without the batch axes."""
    ra, rb, red, data = f.a.read, f.b.read, f.red, f.data
    m = [x for x in data if x not in batch and x in f.a.axes]
    n = [x for x in data if x not in batch and x in f.b.axes]
    a_perm = tuple(ra.indices.index(x) for x in (*(() if shared == "a" else batch), *m, *red))
    b_perm = tuple(rb.indices.index(x) for x in (*(() if shared == "b" else batch), *red, *n))
    natural = (*batch, *m, *n)
    out_perm = None if natural == data else tuple(natural.index(a) for a in data)
    sizes = tuple(map(product, (batch, m, red, n)))
    return Contraction(ra.tensor, rb.tensor, a_perm, b_perm, sizes,  # type: ignore[arg-type]
                       tuple(a.extent for a in natural), out_perm, shared)


def _copied(c: Contraction) -> float:
    """Elements a contraction copies: each operand that is not a (batch, rows, cols) view of
    its array, and the result when it must be permuted into the output's order."""
    n = sum(_planned(t.shape) for t, p in ((c.a, c.a_perm), (c.b, c.b_perm)) if not _blas_view(p))
    return n + (_planned(c.bmn_shape) if c.out_perm is not None else 0.0)


def _blas_view(perm: tuple[int, ...]) -> bool:
    """True if dims in this order merge into a (batch, rows, cols) view without a copy: the
    identity, or the identity with one trailing block moved to the front of the rest (a
    transposed matrix, which BLAS reads with its transpose flag)."""
    n = len(perm)  # b leading batch dims in place, then the runs [b, s) and [s, n) swapped
    return any(perm == (*range(b), *range(s, n), *range(b, s))
               for b in range(n + 1) for s in range(b, n + 1))


