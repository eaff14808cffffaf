"""CPU rewrites of a reduction's loops: `where=` bounds become its range (`tighten`), and its
axes run in memory order, the unit-stride axis innermost (`reorder_reductions`).

A band or causal mask written as `where=(k <= i) & (i - k < 64)` is a condition tested at all
256 values of k; the same sum written with `reduce_axis((i - 63, i + 1))` loops over 64.  A
formulation's spelling should not change its cost, so `tighten` folds every affine condition
on the reduction's axes into their bounds (deriv.solver.invert, Fourier-Motzkin: each axis'
bounds use only outer axes), keeping the rest as the condition.

An index expression fixes its reduction axes in the order the author (or the differentiator)
listed them, not in the order its reads are laid out: group norm's backward sums
`dy[b, g * cg + c, i, j]` over (i, j, c), so the innermost loop strides by H*W elements, misses
the cache on every term and does not vectorize.  A sum, max or min of independent axes (each
running over bounds that use no other loop axis) may fold its terms in any order, so this
rewrite orders the axes by the smallest stride at which the source reads each in its largest
tensors (what misses the cache; largest stride outermost, ties as written), and the later CPU steps (lanes, row accumulation) see
the unit-stride axis innermost.  Sums then regroup within float rounding, as lanes do already;
max and min are exact in any order.

Short rows do not vectorize either: LLVM's vector loop takes vector width x unroll terms per
iteration (64 float32 with AVX-512), so batch norm's sum over the 56 x 56 pixels of
`x[n, c, h, w]` ran its rows of 56 in the scalar remainder.  Where a reduction's two innermost
axes index only whole, adjacent dims of inputs or of whole intermediate arrays (`x[.., h, w]`
with h, w over all of both dims) and the inner one is shorter than `SHORT_ROW`, `collapse_rows`
(the last CPU step, after fusion; elementwise stages likewise, writing through a view of their
array) runs them as one loop over a view with the two dims merged (`x.reshape(n, c, h * w)`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

from ..deriv.solver import invert
from ..te.expr import Const, Expr, IterVar, Read, Reduce, ReduceKind, always, const
from ..te.tensor import PlaceholderOp, Tensor
from ..te.visit import substitute, transform, walk
from .loopnest import Loop, LoopKind, Node, Place, refs
from .nest import reduction_notes
from .plan import ComputeStage, Stage, with_cpu

SHORT_ROW = 64  # terms one iteration of LLVM's widest float32 vector loop takes (16 lanes x 4)
KINDS = (ReduceKind.SUM, ReduceKind.MAX, ReduceKind.MIN)  # reducers whose terms commute exactly
#                                                          or within float rounding


def tighten(st: ComputeStage) -> ComputeStage:
    """`st` with the affine `where=` conditions of its reductions folded into their ranges."""
    got = _each_reduction(st, _tightened)
    if got is None:
        return st
    bodies = got[1]
    return replace(st, bodies=bodies, reduction=reduction_notes(bodies, st.axes), notes=(
        *st.notes, "tightened: the affine where= conditions of its reduction are its loop range"))


def _each_reduction(st: ComputeStage, rewrite: Callable[[Reduce], Reduce | None]
                    ) -> tuple[dict[tuple, Reduce], tuple[Expr, ...]] | None:
    """Each distinct reduction of `st` through `rewrite` (None: unchanged): the rewritten ones by
    loop key and the bodies using them, or None where none changed."""
    done: dict[tuple, Reduce | None] = {}
    for r in (x for b in st.bodies for x in walk(b) if isinstance(x, Reduce)):
        if r.loop_key not in done:
            done[r.loop_key] = rewrite(r)
    new = {k: v for k, v in done.items() if v is not None}
    if not new:
        return None

    def fn(x: Expr) -> Expr | None:
        if not isinstance(x, Reduce) or x.loop_key not in new:
            return None
        return replace(new[x.loop_key], value_index=x.value_index, dtype=x.dtype)
    return new, tuple(transform(b, fn) for b in st.bodies)


def _tightened(r: Reduce) -> Reduce | None:
    """`r` over the ranges its condition allows, or None where no condition part is affine."""
    if always(r.condition):
        return None
    inv = invert([], list(r.axis), [], [r.condition])
    if inv is None or not inv.new_axes or (len(inv.conditions) == 1 and
                                           inv.conditions[0].same_as(r.condition)):
        return None  # (no axes left: a one-term range, `s <= i` over [0, 1), keeps its loop)
    sub = {a: v for a, v in inv.subst.items() if v is not a}
    cond = functools.reduce(lambda a, b: a & b, inv.conditions) if inv.conditions else const(True)
    return replace(r, axis=inv.new_axes, condition=substitute(cond, sub) if sub else cond,
                   source=tuple(substitute(e, sub) for e in r.source) if sub else r.source,
                   init=tuple(substitute(e, sub) for e in r.init) if sub else r.init)


def reorder_reductions(st: ComputeStage, order: Callable[[Reduce], tuple[IterVar, ...]] | None
                       = None, why: str = "innermost the axis read at the smallest stride"
                       ) -> ComputeStage:
    """`st` with each reduction's axes in memory order (see the module docstring), or `order`'s."""
    done: dict[tuple, tuple[IterVar, ...]] = {}
    for r in (x for b in st.bodies for x in walk(b) if isinstance(x, Reduce)):
        if r.loop_key not in done:
            done[r.loop_key] = (order or _memory_order)(r)
    new = {k: v for k, v in done.items() if v != k[2]}
    if not new:
        return st

    def fn(x: Expr) -> Expr | None:
        if isinstance(x, Reduce) and x.loop_key in new:
            return replace(x, axis=new[x.loop_key])
        return None
    notes = [f"reordered: reduction loops {' > '.join(a.name for a in axes)} (written "
             f"{' > '.join(a.name for a in key[2])}): {why}" for key, axes in new.items()]
    bodies = tuple(transform(b, fn) for b in st.bodies)
    return replace(st, bodies=bodies, reduction=reduction_notes(bodies, st.axes),
                   notes=(*st.notes, *notes))


def reorderable(r: Reduce) -> bool:
    """Whether `r`'s axes may loop in any order: a sum, max or min over independent axes."""
    return len(r.axis) > 1 and r.combiner.kind in KINDS and not any(
        isinstance(v, IterVar) for a in r.axis for e in (a.lo, a.extent) for v in walk(e))


def _memory_order(r: Reduce) -> tuple[IterVar, ...]:
    """`r`'s axes, largest read stride first, or as written where reordering is not sound."""
    if not reorderable(r):
        return r.axis
    stride = {a: math.inf for a in r.axis}
    reads = [x for s in r.source for x in walk(s) if isinstance(x, Read)]
    big = max((static_size(x.tensor.shape) for x in reads), default=0.0)
    for x in (x for x in reads if static_size(x.tensor.shape) == big):  # what misses the cache: the largest
        for d, ix in enumerate(x.indices):
            s = _dim_stride(x, d)
            for v in walk(ix):
                if v in stride:
                    stride[v] = min(stride[v], s)  # type: ignore[index]
    return tuple(sorted(r.axis, key=lambda a: -stride[a]))  # stable: ties as written


def _dim_stride(x: Read, d: int) -> float:
    """The row-major stride of dim `d` of the tensor `x` reads (inf past a symbolic dim)."""
    return static_size(x.tensor.shape[d + 1:])


def static_size(shape: tuple[Expr, ...]) -> float:
    """Elements of a tensor of `shape` (inf when a dim is symbolic)."""
    n = 1.0
    for e in shape:
        n *= float(e.value) if isinstance(e, Const) else math.inf
    return n


def collapse_rows(stages: list[Stage], nest: tuple[Node, ...], inputs: tuple[Tensor, ...],
                  keep: set[str]) -> list[Stage]:
    """The stages with their reductions' short inner rows merged (`collapse_reductions`): the
    last CPU rewrite, so fusion and hoisting saw the arrays, not views of them.  Views reshape
    inputs and whole arrays (not row buffers); the members of a siblings loop merge alike or
    keep their loops; stages in a row fold or chunk loop, or with an accumulation or split
    strategy, or named in `keep` (overridden), keep theirs."""
    rows = {r.name for r in refs(nest) if r.place is Place.ROW_BUFFER}
    fixed = keep | {r.name for n in nest if isinstance(n, Loop) for m in _loops(n)
             if m.kind in (LoopKind.ROW, LoopKind.CHUNKS) for r in refs((m,))}
    ok = {id(t) for t in inputs} | {id(t) for st in stages if st.name not in rows
                                    for t in (st.tensors if isinstance(st, ComputeStage)
                                              else (st.tensor,)) if t is not None}
    m = _Merge(ok)
    loose = {r.name for n in nest if not isinstance(n, Loop) for r in refs((n,))}
    out = {st.name: (collapse_reductions(st, m) if _reduces(st) else
                     collapse_data_rows(st, m) if st.name not in rows else st)
           if isinstance(st, ComputeStage) and st.name not in fixed and
           st.cpu.accumulate is None and st.cpu.contraction is None and st.cpu.split is None
           else _collapse_row(st, m) if st.name in loose else st for st in stages}
    for n in nest:
        for g in (_loops(n) if isinstance(n, Loop) else ()):
            names = [r.name for r in refs((g,))]
            if g.kind is LoopKind.SIBLINGS and len({_reduce_axes(out[k]) or tuple(
                    id(a) for a in out[k].order) for k in names}) > 1:  # (elementwise: its loops)
                out.update({k: st for st in stages if (k := st.name) in names})
    return [out[st.name] for st in stages]


def _collapse_row(st: Stage, m: _Merge) -> Stage:
    """A row accumulation (no split) whose row is short, merged with the data axis outside it
    as `collapse_data_rows` merges an elementwise stage's: the longer row vectorizes."""
    acc = st.cpu.accumulate
    if not isinstance(st, ComputeStage) or acc is None or acc.row is None or acc.split is not None:
        return st
    got = collapse_data_rows(st, m)
    return st if got is st else with_cpu(got, accumulate=replace(acc, row=got.order[-1]))


def _loops(n: Loop) -> Iterator[Loop]:
    yield n
    for b in n.body:
        if isinstance(b, Loop):
            yield from _loops(b)


def _reduces(st: ComputeStage) -> bool:
    return any(isinstance(x, Reduce) for b in st.bodies for x in walk(b))


def collapse_data_rows(st: ComputeStage, m: _Merge) -> ComputeStage:
    """Elementwise (or row-accumulated) `st` with its two innermost (serial) loops merged when
    they are adjacent dims of its arrays, short, and index only whole adjacent dims of what it
    reads: it writes and reads through views (its own arrays are allocated whole, then viewed)."""
    serial = st.order[st.fused if st.parallel else 0:]
    if len(serial) < 2 or any(t is None for t in st.tensors):
        return st
    a, b = serial[-2:]
    d = next((k for k in range(len(st.axes) - 1) if st.axes[k] is a and st.axes[k + 1] is b), -1)
    got = _merged(a, b, st.bodies, m) if d >= 0 else None
    if got is None:
        return st
    ab, bodies = got
    own = [_view(t, d, m.bases) for t in st.tensors]  # type: ignore[arg-type]
    note = (f"collapsed: loops {a.name} > {b.name} run as one loop {ab.name} of {ab.extent}: "
            f"they index whole adjacent dims only, written and read through views")
    return with_cpu(replace(st, tensors=tuple(own), bodies=bodies,
                            axes=(*st.axes[:d], ab, *st.axes[d + 2:]),
                            order=(*st.order[:-2], ab), notes=(*st.notes, note)),
                    views=(*zip(own, st.tensors), *_views_read(bodies, m)))


def _views_read(bodies: tuple[Expr, ...], m: _Merge) -> tuple[tuple[Tensor, Tensor], ...]:
    used = {id(x.tensor) for b in bodies for x in walk(b) if isinstance(x, Read)}
    return tuple((v, m.bases[id(v)]) for v in m.views.values() if id(v) in used)


def _reduce_axes(st: Stage) -> tuple[int, ...]:
    return tuple(id(a) for b in getattr(st, "bodies", ()) for x in walk(b)
                 if isinstance(x, Reduce) for a in x.axis)


@dataclass
class _Merge:
    """What the merges of one plan share: the arrays a view may reshape (ids), the merged axis
    of each pair (siblings' loops stay one), each view, and the array each view reshapes."""

    ok: set[int]
    axes: dict[tuple[int, int], IterVar] = field(default_factory=dict)
    views: dict[tuple[int, int], Tensor] = field(default_factory=dict)  # (id(viewed), dim) ->
    bases: dict[int, Tensor] = field(default_factory=dict)  # id(view) -> the array it reshapes


def collapse_reductions(st: ComputeStage, m: _Merge) -> ComputeStage:
    """`st` with each reduction's innermost axes merged while they index only whole adjacent
    dims of arrays in `m.ok`, read through views with those dims merged (module docstring)."""
    def merged(r: Reduce) -> Reduce | None:
        c, nxt = None, _collapsed(r, m)
        while nxt is not None:
            c, nxt = nxt, _collapsed(nxt, m)
        return c
    got = _each_reduction(st, merged)
    if got is None:
        return st
    new, bodies = got
    kept = _views_read(bodies, m)
    notes = [f"collapsed: reduction loops {' > '.join(a.name for a in key[2][len(r.axis) - 1:])}"
             f" run as one loop {r.axis[-1].name} of {r.axis[-1].extent}: they index whole "
             f"adjacent dims only, read through "
             f"{', '.join(f'{v.name} = {b.name}.reshape{_shape(v)}' for v, b in kept)}"
             for key, r in new.items()]
    return with_cpu(replace(st, bodies=bodies, reduction=reduction_notes(bodies, st.axes),
                            notes=(*st.notes, *notes)), views=kept)


def _collapsed(r: Reduce, m: _Merge) -> Reduce | None:
    """`r` with its two innermost axes merged into one (`_merged`), or None."""
    if len(r.axis) < 2 or any(v is x for x in r.axis[-2:] for e in (r.condition, *r.init)
                              for v in walk(e)):
        return None
    got = _merged(r.axis[-2], r.axis[-1], r.source, m)
    return None if got is None else replace(r, axis=(*r.axis[:-2], got[0]), source=got[1])


def _merged(a: IterVar, b: IterVar, exprs: tuple[Expr, ...], m: _Merge
            ) -> tuple[IterVar, tuple[Expr, ...]] | None:
    """One axis for the loops a > b and `exprs` reading through views with it, or None where a
    or b is used other than as dims d, d + 1 of a read of an array in `m.ok` over the whole of
    both, or the inner loop is not short."""
    ext = [x.extent.value if isinstance(x.extent, Const) and isinstance(x.lo, Const)
           and x.lo.value == 0 else None for x in (a, b)]
    if None in ext or ext[1] >= SHORT_ROW:  # type: ignore[operator]
        return None
    ea, eb = int(ext[0]), int(ext[1])  # type: ignore[arg-type]
    ab = m.axes.get((id(a), id(b)))
    if ab is None:
        ab = IterVar(f"{a.name}_{b.name}", const(0), const(ea * eb), kind=b.kind)
    made: dict[tuple[int, int], Tensor] = {}

    def fn(x: Expr) -> Expr | None:
        if not isinstance(x, Read) or id(x.tensor) not in m.ok | m.bases.keys():
            return None
        for d in range(x.tensor.ndim - 1):
            if x.indices[d] is a and x.indices[d + 1] is b and _whole(x.tensor, d, ea, eb):
                key = (id(x.tensor), d)
                v = made.get(key, m.views.get(key))
                made[key] = v = _view(x.tensor, d, m.bases) if v is None else v
                return Read(v, (*x.indices[:d], ab, *x.indices[d + 2:]), x.dtype)
        return None
    source = tuple(transform(e, fn) for e in exprs)
    if any(v is a or v is b for e in source for v in walk(e)):
        return None
    m.views.update(made)
    m.axes[id(a), id(b)] = ab
    return ab, source


def _whole(t: Tensor, d: int, ea: int, eb: int) -> bool:
    return [x.value if isinstance(x, Const) else None for x in t.shape[d:d + 2]] == [ea, eb]


def _view(t: Tensor, d: int, bases: dict[int, Tensor]) -> Tensor:
    """A placeholder for `t` (an array or a view of one) with dims d and d + 1 merged."""
    shape = (*t.shape[:d], const(int(t.shape[d].value) * int(t.shape[d + 1].value)),  # type: ignore[attr-defined]
             *t.shape[d + 2:])
    v = Tensor(PlaceholderOp(f"{t.name}_flat", shape, t.dtype), 0, shape, t.dtype)  # a view
    bases[id(v)] = bases.get(id(t), t)
    return v


def _shape(t: Tensor) -> str:
    return f"({', '.join(str(s) for s in t.shape)})"
