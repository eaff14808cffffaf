"""CPU refine steps 9-10: loop-invariant values hoisted out of a stage's serial loops (with the
float32 divisors among them, turned into reciprocals), and large intermediates kept as
workspace buffers reused across calls.  Both are printed in the plan and overridable
(`hoist`, `reciprocal`, `workspace`)."""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce, always
from ..te.ops import Op
from ..te.tensor import Tensor
from ..te.bounds import Verdict, dim_verdict
from ..te.visit import children, walk
from .plan import ComputeStage, Stage
from .plan import with_cpu as _cpu

WORKSPACE_MIN_BYTES = 1 << 20  # intermediates this large are reused across calls (see step 10)
FRESH_BYTES = 1 << 25  # glibc's largest mmap threshold: allocations this large map fresh pages


def nbytes(t: Tensor, symbolic: int) -> int:
    """The bytes of `t`, counting each symbolic dim as `symbolic` elements."""
    size = np.dtype("bool" if t.dtype == "bool" else t.dtype).itemsize
    return math.prod(int(s.value) if isinstance(s, Const) else symbolic for s in t.shape) * size


def hoist(st: Stage, ov: Mapping[str, Any]) -> Stage:
    """Step 9: the loop-invariant values of a loop-nest stage, and the float32 divisors among
    them (overrides: `hoist`, `reciprocal`, both bool)."""
    c = st.cpu
    if not isinstance(st, ComputeStage) or c.contraction is not None \
            or c.accumulate is not None or not ov.get("hoist", True):
        return st
    serial = st.order[st.fused:] if st.parallel and st.fused else st.order
    if not (serial or any(isinstance(x, Reduce) for b in st.bodies for x in walk(b))):
        return st
    inner = set(serial)
    if c.split is not None:  # the bodies index the split axis through its two loop axes
        inner |= {c.split.hi, c.split.lo}
    found = tuple(_invariant_exprs(st.bodies, inner, safe_reads))
    recips = tuple(_f32_divisors(st.bodies, set(found))) if ov.get("reciprocal", True) else ()
    folds = tuple(dict.fromkeys(
        e for r in _reduces(st.bodies, set(found))
        for e in _invariant_exprs(r.source, set(r.axis), safe_reads, not always(r.condition))))
    return _cpu(st, hoisted=found, reciprocals=recips, fold_hoisted=folds)


def _reduces(bodies: Sequence[Expr], hoisted: set[Expr]) -> list[Reduce]:
    """The reductions of `bodies` evaluated in the serial loops (not inside a value hoisted
    before them), outermost only."""
    out: dict[Reduce, None] = {}
    stack = list(bodies)
    while stack:
        e = stack.pop()
        if e in hoisted:
            continue
        if isinstance(e, Reduce):
            out.setdefault(e, None)
            continue
        stack.extend(children(e))
    return list(out)


def safe_reads(e: Expr) -> bool:
    """Every read in `e` is in bounds wherever it is evaluated (no guard needed): it may be
    computed before the loops even where a select or `&` guards it."""
    return all(dim_verdict(i, n) is Verdict.PROVEN for x in walk(e) if isinstance(x, Read)
               for i, n in zip(x.indices, x.tensor.shape))


def workspace(st: Stage, outputs: set[int], ov: Mapping[str, Any]) -> Stage:
    """Step 10: the stage's intermediates of at least WORKSPACE_MIN_BYTES, or with a symbolic
    dim (their size is known at the call: a batch), passed in preallocated (override
    `workspace`: bool)."""
    if not ov.get("workspace", True):
        return st
    ts = st.tensors if isinstance(st, ComputeStage) else (st.tensor,)
    found: list[Tensor] = []
    for t in ts:
        if t is None or id(t) in outputs or not t.shape:
            continue
        if nbytes(t, WORKSPACE_MIN_BYTES) >= WORKSPACE_MIN_BYTES:
            found.append(t)
    return _cpu(st, workspace=tuple(found)) if found else st


def _invariant_exprs(bodies: Sequence[Expr], inner: set[IterVar],
                     unguarded: Callable[[Expr], bool] | None = None,
                     guarded: bool = False) -> list[Expr]:
    """The largest subexpressions evaluated on every iteration that read a tensor but use none
    of the `inner` loop axes nor a reduction axis (`log(s[i])` in a loop over j): safe to compute
    once.  Select branches, the right side of `&`/`|` and conditioned reductions are not
    entered (what they read may be guarded), except for values `unguarded` accepts (all of
    them if `guarded`: `bodies` are a conditioned reduction's terms); reads at data-dependent
    indices stay in place."""
    found: dict[Expr, None] = {}
    reads: dict[int, bool] = {}  # a read below
    blocked: dict[int, bool] = {}  # a reduction or a data-dependent read below
    axes: dict[int, frozenset[IterVar]] = {}  # loop axes used below
    for x in (x for b in bodies for x in walk(b)):  # children first, once per node
        kids = children(x)
        reads[id(x)] = isinstance(x, Read) or any(reads[id(c)] for c in kids)
        blocked[id(x)] = isinstance(x, Reduce) or any(blocked[id(c)] for c in kids) or (
            isinstance(x, Read) and any(reads[id(i)] for i in x.indices))
        axes[id(x)] = frozenset((x,)) if isinstance(x, IterVar) else frozenset().union(
            *(axes[id(c)] for c in kids))

    root = unguarded if guarded else None
    stack: list[tuple[Expr, frozenset[IterVar], Callable[[Expr], bool] | None]] = [
        (b, frozenset(inner), root) for b in reversed(bodies)]
    while stack:  # preorder, explicit stack; `ok`: inside a branch, what may be hoisted
        e, bound, ok = stack.pop()
        if isinstance(e, (Read, Call)) and reads[id(e)] and not blocked[id(e)] \
                and not axes[id(e)] & bound and (ok is None or ok(e)):
            found.setdefault(e, None)
            continue
        inner_ok = ok or (unguarded if unguarded is not None else _never)
        match e:
            case Call(op=Op.SELECT, args=(c, a, b)):
                nxt: list[tuple[Expr, frozenset[IterVar], Callable[[Expr], bool] | None]] = [
                    (c, bound, ok), (a, bound, inner_ok), (b, bound, inner_ok)]
            case Call(op=Op.AND | Op.OR, args=(a, b)):
                nxt = [(a, bound, ok), (b, bound, inner_ok)]
            case Reduce():
                if not always(e.condition):
                    continue
                nxt = [(s, bound | frozenset(e.axis), ok) for s in e.source + e.init]
            case _:
                nxt = [(c, bound, ok) for c in children(e)]
        stack.extend(reversed(nxt))
    return list(found)


def _never(e: Expr) -> bool:
    return False


def _f32_divisors(bodies: Sequence[Expr], hoisted: set[Expr]) -> list[Expr]:
    """Hoisted values that divide float32 expressions in `bodies`, in order."""
    return list(dict.fromkeys(x.args[1] for b in bodies for x in walk(b)
                              if isinstance(x, Call) and x.op is Op.DIV and x.dtype == "float32"
                              and x.args[1] in hoisted))


