"""Planner step 5b (layout): an intermediate's dims are stored in the order its loops want.

A materialized intermediate is the kernel's own array, so the order of its dims is free.  The
order written in te is often the wrong one for the loops that touch it: an EMA written as
`y[n, i, f] = sum_s pw[f, i - s] * x[n, s, f]` reads `pw` along `f` in its innermost loop (the
loop that makes the big `x` contiguous), but `pw` is stored `[f, k]`, so every read is a
stride-64 gather and the loop does not vectorize (7.8 ms; stored `[k, f]`: 1.1 ms).

Each stage that touches the array votes for the dim its innermost loop will run along, weighted
by its iterations: a reader for the dim of its read indexed by that loop's axis, the writer for
the dim of that axis.  A stage's innermost loop is predicted as the axis that makes its other
large operands contiguous (their last index is that axis, plus or minus a constant, weighted by
their size), its own output's last axis counting for its size.  When another dim outvotes the
last one, it moves last: a new tensor with the permuted shape, the writer's axes (and loop
order, where it was the axes' order) permuted alike, every read's indices permuted.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from ..te.affine import to_affine
from ..te.expr import Const, Expr, IterVar, Read, Reduce
from ..te.tensor import ComputeOp, Tensor
from ..te.visit import reads_in, transform, walk
from .plan import ComputeStage, Stage


def choose_layouts(stages: Sequence[Stage]) -> list[Stage]:
    """The stages with each voted-for intermediate stored in its loops' order (module doc)."""
    out = list(stages)
    for k, st in enumerate(stages):
        if not _candidate(st):
            continue
        assert isinstance(st, ComputeStage)
        t = st.tensors[0]
        assert t is not None
        votes = [0.0] * t.ndim
        readers = [r for r in out if r is not out[k] and any(x.tensor is t for x in _reads(r))]
        if any(not isinstance(r, ComputeStage) or _in_bounds(r, t) for r in readers):
            continue
        for r in readers:
            inner = _inner_axis(r, t)  # type: ignore[arg-type]
            for x in _reads(r):
                if x.tensor is t and (d := _dim_of(x.indices, inner)) is not None:
                    votes[d] += _work(r)  # type: ignore[arg-type]
        inner = _inner_axis(out[k], t)  # type: ignore[arg-type]
        if inner is not None and any(inner is a for a in st.axes):
            votes[next(d for d, a in enumerate(st.axes) if a is inner)] += _work(st)
        best = max(range(t.ndim), key=lambda d: (votes[d], d))
        if best == t.ndim - 1 or votes[best] <= votes[-1]:
            continue
        perm = [d for d in range(t.ndim) if d != best] + [best]
        out = _permuted(out, k, perm)
    return out


def _candidate(st: Stage) -> bool:
    """A compute stage writing one intermediate of two dims or more."""
    return (isinstance(st, ComputeStage) and not st.is_output and len(st.tensors) == 1
            and st.tensors[0] is not None and st.tensors[0].ndim >= 2)


def _reads(st: Stage) -> list[Read]:
    return list(reads_in(st.bodies)) if isinstance(st, ComputeStage) else []


def _in_bounds(st: ComputeStage, t: Tensor) -> bool:
    """Whether `st` reads `t` in a reduction's bounds (not rewritten here)."""
    in_bodies = {id(x) for b in st.bodies for x in walk(b) if isinstance(x, Read)}
    return any(x.tensor is t and id(x) not in in_bodies for x in reads_in(st.bodies))


def _unit(e: Expr, a: IterVar) -> bool:
    """Whether `e` is `a` plus or minus terms free of `a` (a unit stride along `a`)."""
    f = to_affine(e)
    return f is not None and abs(f[0].get(a, 0)) == 1


def _dim_of(indices: Sequence[Expr], a: IterVar | None) -> int | None:
    """The one index position that moves with `a` at unit stride, else None."""
    if a is None:
        return None
    hits = [d for d, i in enumerate(indices) if any(v is a for v in walk(i))]
    return hits[0] if len(hits) == 1 and _unit(indices[hits[0]], a) else None


def _size(t: Tensor) -> float:
    return math.prod(float(s.value) if isinstance(s, Const) else 1e6 for s in t.shape)


def _inner_axis(st: ComputeStage, skip: Tensor) -> IterVar | None:
    """The axis `st`'s innermost loop is predicted to run along (module doc)."""
    axes = list(st.axes) + [a for b in st.bodies for x in walk(b) if isinstance(x, Reduce)
                            for a in x.axis]
    score = {id(a): 0.0 for a in axes}
    if st.axes:
        score[id(st.axes[-1])] += sum(_size(t) for t in st.tensors if t is not None)
    for x in _reads(st):
        if x.tensor is not skip and x.indices:
            for a in axes:
                if _unit(x.indices[-1], a):
                    score[id(a)] += _size(x.tensor)
    best = max(axes, key=lambda a: score[id(a)], default=None)
    return best if best is not None and score[id(best)] > 0 else None


def _work(st: ComputeStage) -> float:
    """Iterations of the stage: its points times its reductions' extents."""
    n = math.prod(float(a.extent.value) if isinstance(a.extent, Const) else 64.0 for a in st.axes)
    reds = [x for b in st.bodies for x in walk(b) if isinstance(x, Reduce)]
    for r in reds[:1]:
        n *= math.prod(float(a.extent.value) if isinstance(a.extent, Const) else 64.0
                       for a in r.axis)
    return n


def _permuted(stages: list[Stage], k: int, perm: list[int]) -> list[Stage]:
    """Stage `k`'s tensor stored with its dims in `perm` order, its readers reading it so."""
    st = stages[k]
    assert isinstance(st, ComputeStage) and st.tensors[0] is not None
    old = st.tensors[0]
    op = old.op
    assert isinstance(op, ComputeOp)
    axis = tuple(op.axis[d] for d in perm)
    new = Tensor(ComputeOp(op.name, axis, op.body, op.tag, dict(op.attrs)), 0,
                 tuple(old.shape[d] for d in perm), old.dtype)
    axes = tuple(st.axes[d] for d in perm)
    order = axes if st.order == st.axes else st.order
    note = (f"layout: stored as [{', '.join(a.name for a in axes)}] (written "
            f"[{', '.join(a.name for a in st.axes)}]): the loops that read and write it run "
            f"along {axes[-1].name} innermost")
    out: list[Stage] = []
    for j, s in enumerate(stages):
        if j == k:
            s = replace(st, tensors=(new,), axes=axes, order=order, notes=(*st.notes, note))
        elif isinstance(s, ComputeStage):
            def fn(x: Expr) -> Expr | None:
                if isinstance(x, Read) and x.tensor is old:
                    return Read(new, tuple(x.indices[d] for d in perm), x.dtype)
                return None
            s = replace(s, bodies=tuple(transform(b, fn) for b in s.bodies))
        out.append(s)
    return out
