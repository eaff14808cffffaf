"""CPU refine steps 9-10: loop-invariant values hoisted out of a stage's serial loops (with the
float32 divisors among them, turned into reciprocals), and large intermediates kept as
workspace buffers reused across calls.  Both are printed in the plan and overridable
(`hoist`, `reciprocal`, `workspace`)."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce
from ..te.ops import Op
from ..te.tensor import Tensor
from ..te.visit import children, walk
from .plan import ComputeStage, Stage
from .plan import with_cpu as _cpu

WORKSPACE_MIN_BYTES = 1 << 20  # intermediates this large are reused across calls (see step 10)


def hoist(st: Stage, ov: Mapping[str, Any]) -> Stage:
    """Step 9: the loop-invariant values of a loop-nest stage, and the float32 divisors among
    them (overrides: `hoist`, `reciprocal`, both bool)."""
    c = st.cpu
    if not isinstance(st, ComputeStage) or c is None or c.contraction is not None \
            or c.accumulate is not None or not ov.get("hoist", True):
        return st
    serial = st.order[st.fused:] if st.parallel and st.fused else st.order
    if not (serial or any(isinstance(x, Reduce) for b in st.bodies for x in walk(b))):
        return st
    inner = set(serial)
    if c.split is not None:  # the bodies index the split axis through its two loop axes
        inner |= {c.split.hi, c.split.lo}
    found = tuple(_invariant_exprs(st.bodies, inner))
    recips = tuple(_f32_divisors(st.bodies, set(found))) if ov.get("reciprocal", True) else ()
    return _cpu(st, hoisted=found, reciprocals=recips)


def workspace(st: Stage, outputs: set[int], ov: Mapping[str, Any]) -> Stage:
    """Step 10: the stage's intermediates of at least WORKSPACE_MIN_BYTES (static shapes),
    passed in preallocated (override `workspace`: bool)."""
    if st.cpu is None or not ov.get("workspace", True):
        return st
    ts = st.tensors if isinstance(st, ComputeStage) else (st.tensor,)
    found: list[Tensor] = []
    for t in ts:
        if t is None or id(t) in outputs or not all(isinstance(s, Const) for s in t.shape):
            continue
        size = np.dtype("bool" if t.dtype == "bool" else t.dtype).itemsize
        if math.prod(int(s.value) for s in t.shape) * size >= WORKSPACE_MIN_BYTES:  # type: ignore[attr-defined]
            found.append(t)
    return _cpu(st, workspace=tuple(found)) if found else st


def _invariant_exprs(bodies: Sequence[Expr], inner: set[IterVar]) -> list[Expr]:
    """The largest subexpressions evaluated on every iteration that read a tensor but use none
    of the `inner` loop axes nor a reduction axis (`log(s[i])` in a loop over j): safe to compute
    once.  Select branches, the right side of `&`/`|` and conditioned reductions are not
    entered (what they read may be guarded); reads at data-dependent indices stay in place."""
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

    stack: list[tuple[Expr, frozenset[IterVar]]] = [(b, frozenset(inner)) for b in reversed(bodies)]
    while stack:  # preorder, explicit stack
        e, bound = stack.pop()
        if isinstance(e, (Read, Call)) and reads[id(e)] and not blocked[id(e)] \
                and not axes[id(e)] & bound:
            found.setdefault(e, None)
            continue
        match e:
            case Call(op=Op.SELECT, args=(c, _, _)):
                kids: tuple[tuple[Expr, frozenset[IterVar]], ...] = ((c, bound),)
            case Call(op=Op.AND | Op.OR, args=(a, _)):
                kids = ((a, bound),)
            case Reduce():
                if not (isinstance(e.condition, Const) and e.condition.value is True):
                    continue
                kids = tuple((s, bound | frozenset(e.axis)) for s in e.source + e.init)
            case _:
                kids = tuple((c, bound) for c in children(e))
        stack.extend(reversed(kids))
    return list(found)


def _f32_divisors(bodies: Sequence[Expr], hoisted: set[Expr]) -> list[Expr]:
    """Hoisted values that divide float32 expressions in `bodies`, in order."""
    return list(dict.fromkeys(x.args[1] for b in bodies for x in walk(b)
                              if isinstance(x, Call) and x.op is Op.DIV and x.dtype == "float32"
                              and x.args[1] in hoisted))


