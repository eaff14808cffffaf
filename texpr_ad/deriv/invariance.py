"""Shift invariance: a row max whose shift cancels gets no gradient, without `stop_gradient`.

Softmax written plainly subtracts its row max and divides it back out:

    m[i] = max_k x[i, k];  e[i, j] = exp(x[i, j] - m[i]);  s[i] = sum_j e[i, j];  y = e / s

Perturb `m` by any per-row amount, m'[i] = m[i] + d[i]: then e' = e * exp(-d[i]),
s' = s * exp(-d[i]) and y' = y exactly (in real arithmetic).  So dy/dm = 0, and the adjoint may
skip `m`'s gradient (the tie-count routing of a max costs two extra row passes) -- the same
result `stop_gradient` gives, and what PyTorch's fused softmax backward computes.

The proof is an abstract interpretation over the stages after `m`.  Each value `v` at a point
`p` is described relative to the perturbation `d` at a row `r(p)` (index expressions):

    INV            v' = v                  (does not depend on m)
    Shift(a, r)    v' = v + a * d[r(p)]    (x - m, log of a Scale, max of a Shift)
    Scale(b, r)    v' = v * exp(b * d[r(p)])  (exp of a Shift, sums and quotients of Scales)
    anything else  unknown: no claim

A select on a condition independent of `m` keeps its branches' common movement, and a scaled
branch against the constant 0 stays scaled (0 = 0 * e^{bd}: a masked softmax).
`m` gets no gradient when every output is INV.  The rules are exact identities (max(v + c) =
max(v) + c, sum(v * c) = sum(v) * c for c independent of the summed axes, exp(a + b) =
exp(a) exp(b), ...); anything they do not cover is "unknown", so a max used otherwise
(`x - max x`, `exp(x - m)`, a max whose row the sum runs across) keeps its gradient.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..te import dtype as dt
from ..te.dag import topo_order
from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce, ReduceKind
from ..te.ops import Op
from ..te.tensor import ComputeOp, ScatterOp, Tensor
from ..te.visit import children, substitute, walk

INV = "inv"  # the abstract value of anything independent of m


@dataclass(frozen=True)
class Moved:
    """v' = v + coeff * d[row] (kind "shift") or v * exp(coeff * d[row]) (kind "scale")."""

    kind: str
    coeff: float
    row: tuple[Expr, ...]


Abs = str | Moved | None  # INV, a Moved, or None (unknown)
CANDIDATES = (ReduceKind.MAX, ReduceKind.MIN)  # the stages tried: a shift of these cancels


def _same_row(a: Moved, b: Moved) -> bool:
    return len(a.row) == len(b.row) and all(x.same_as(y) for x, y in zip(a.row, b.row, strict=True))


def _moved(kind: str, coeff: float, row: tuple[Expr, ...]) -> Abs:
    return INV if coeff == 0 else Moved(kind, coeff, row)


def _combine(kind: str, sign: float) -> Callable[[Abs, Abs], Abs]:
    """Add/sub on shifts (coefficients add), mul/div on scales (exponents add)."""
    def rule(a: Abs, b: Abs) -> Abs:
        if a is INV and b is INV:
            return INV
        if isinstance(a, Moved) and b is INV and a.kind == kind:
            return a
        if a is INV and isinstance(b, Moved) and b.kind == kind:
            return Moved(kind, sign * b.coeff, b.row)
        if isinstance(a, Moved) and isinstance(b, Moved) and a.kind == b.kind == kind \
                and _same_row(a, b):
            return _moved(kind, a.coeff + sign * b.coeff, a.row)
        return None
    return rule


def _const_value(e: Expr) -> float | None:
    return float(e.value) if isinstance(e, Const) and not isinstance(e.value, bool) else None


def _mul(call: Call, a: Abs, b: Abs) -> Abs:
    """Scales multiply; a shift times a constant c is a shift by c times as much."""
    for x, y, other in ((a, b, call.args[1]), (b, a, call.args[0])):
        c = _const_value(other)
        if isinstance(x, Moved) and x.kind == "shift" and y is INV and c is not None:
            return _moved("shift", x.coeff * c, x.row)
    return _combine("scale", 1.0)(a, b)


def _div(call: Call, a: Abs, b: Abs) -> Abs:
    c = _const_value(call.args[1])
    if isinstance(a, Moved) and a.kind == "shift" and b is INV and c:
        return Moved("shift", a.coeff / c, a.row)
    return _combine("scale", -1.0)(a, b)


def _unary(kind_in: str, kind_out: str, sign: float = 1.0) -> Callable[[Call, Abs], Abs]:
    def rule(call: Call, a: Abs) -> Abs:
        if isinstance(a, Moved) and a.kind == kind_in:
            return Moved(kind_out, sign * a.coeff, a.row)
        return INV if a is INV else None
    return rule


def _cast(call: Call, a: Abs) -> Abs:
    return a if a is INV or dt.is_float(call.dtype) else None


# -- the rule tables: how each op moves a shifted or scaled argument ----------------------------

BINARY: dict[Op, Callable[[Call, Abs, Abs], Abs]] = {
    Op.ADD: lambda c, a, b: _combine("shift", 1.0)(a, b),    # (v + a d) + (w + b d) = v + w + (a + b) d
    Op.SUB: lambda c, a, b: _combine("shift", -1.0)(a, b),   # (v + a d) - (w + b d) = v - w + (a - b) d
    Op.MUL: _mul,                                            # v e^{a d} * w e^{b d} = vw e^{(a + b) d}
    Op.DIV: _div,                                            # v e^{a d} / w e^{b d} = v/w e^{(a - b) d}
}
UNARY: dict[Op, Callable[[Call, Abs], Abs]] = {
    Op.NEG: lambda c, a: (Moved("shift", -a.coeff, a.row)    # -(v + a d) = -v - a d
                          if isinstance(a, Moved) and a.kind == "shift" else a),  # -(v e^{bd}) = (-v) e^{bd}
    Op.EXP: _unary("shift", "scale"),                        # exp(v + a d) = exp(v) e^{a d}
    Op.LOG: _unary("scale", "shift"),                        # log(v e^{b d}) = log v + b d
    Op.STOP_GRADIENT: lambda c, a: a,                        # the value is unchanged
    Op.CAST: _cast,                                          # float -> float keeps the value
}


def _select(call: Call, c: Abs, a: Abs, b: Abs) -> Abs:
    """select(cond, v', w') with cond independent of m: both branches moved alike, or a scaled
    branch against the constant 0 (0 = 0 * e^{bd}: a masked softmax's `where(band, exp, 0)`)."""
    if c is not INV:
        return None
    if isinstance(a, Moved) and isinstance(b, Moved):
        return a if a.kind == b.kind and a.coeff == b.coeff and _same_row(a, b) else None
    for moved, other, arg in ((a, b, call.args[2]), (b, a, call.args[1])):
        if isinstance(moved, Moved) and moved.kind == "scale" and other is INV \
                and _const_value(arg) == 0.0:
            return moved
    return None


# reductions: max/min commute with adding (and with scaling by exp(.) > 0) a term constant
# along the reduced axes; sums commute with a common factor
REDUCE: dict[ReduceKind, frozenset[str]] = {
    ReduceKind.MAX: frozenset({"shift", "scale"}),
    ReduceKind.MIN: frozenset({"shift", "scale"}),
    ReduceKind.SUM: frozenset({"scale"}),
}


class _Interp:
    """The abstract values of the tensors after `m`, relative to a perturbation of `m`."""

    def __init__(self, m: Tensor):
        self.m = m
        self.env: dict[Tensor, Abs] = {}

    def tensor(self, t: Tensor) -> Abs:
        op = t.op
        if not isinstance(op, ComputeOp):
            return INV if not any(self.read(r) is not INV for r in _op_reads(op)) else None
        v = self.expr(op.body[t.value_index])
        if isinstance(v, Moved) and any(isinstance(x, IterVar) and x.kind == "reduce"
                                        for e in v.row for x in walk(e)):
            return None  # a row that runs along a reduction is no row of the output
        return v

    def read(self, r: Read) -> Abs:
        if any(self.expr(i) is not INV for i in r.indices):
            return None
        if r.tensor is self.m:
            return Moved("shift", 1.0, r.indices)
        v = self.env.get(r.tensor, INV)
        if not isinstance(v, Moved):
            return v
        sub = dict(zip(r.tensor.op.axis, r.indices, strict=True))
        return Moved(v.kind, v.coeff, tuple(substitute(e, sub) for e in v.row))

    def expr(self, e: Expr) -> Abs:
        memo: dict[int, Abs] = {}
        for x in walk(e):  # children first
            memo[id(x)] = self._node(x, memo)
        return memo[id(e)]

    def _node(self, x: Expr, memo: dict[int, Abs]) -> Abs:
        if isinstance(x, Read):
            return self.read(x)
        if isinstance(x, Reduce):
            return self._reduce(x, memo)
        args = [memo[id(c)] for c in children(x)]
        if all(a is INV for a in args):
            return INV
        if isinstance(x, Call) and x.op in BINARY and len(args) == 2:
            return BINARY[x.op](x, *args)
        if isinstance(x, Call) and x.op in UNARY and len(args) == 1:
            return UNARY[x.op](x, args[0])
        if isinstance(x, Call) and x.op is Op.SELECT and len(args) == 3:
            return _select(x, *args)
        return None

    def _reduce(self, x: Reduce, memo: dict[int, Abs]) -> Abs:
        bounds = [b for a in x.axis for b in (a.lo, a.extent)]
        if any(self.expr(e) is not INV for e in (*bounds, x.condition, *x.init)):
            return None
        srcs = [memo[id(s)] for s in x.source]
        if all(s is INV for s in srcs):
            return INV
        if len(srcs) != 1 or not isinstance(srcs[0], Moved):
            return None
        s = srcs[0]
        axes = set(x.axis)
        if s.kind not in REDUCE.get(x.combiner.kind, frozenset()) or any(
                v in axes for e in s.row for v in walk(e)):
            return None
        return s


def _op_reads(op: object) -> list[Read]:
    if isinstance(op, ScatterOp):
        return [x for u in op.updates for e in u.exprs for x in walk(e) if isinstance(x, Read)]
    return []


def _candidate(t: Tensor) -> bool:
    op = t.op
    return (isinstance(op, ComputeOp) and dt.is_float(t.dtype) and len(op.body) == 1
            and isinstance(op.body[0], Reduce) and op.body[0].combiner.kind in CANDIDATES)


def shift_invariant(outputs: Sequence[Tensor], keep: Sequence[Tensor] = ()) -> dict[Tensor, str]:
    """The max/min stages that every output is provably invariant to (see the module
    docstring), each with the reason; tensors in `keep` (asked-for inputs) are never listed."""
    order = topo_order(outputs)
    outs = set(outputs)
    found: dict[Tensor, str] = {}
    for pos, m in enumerate(order):
        if not _candidate(m) or m in outs or m in keep:
            continue
        interp = _Interp(m)
        after = order[pos + 1:]
        for t in after:
            interp.env[t] = interp.tensor(t)
        if all(interp.env.get(o) is INV for o in outputs):
            moved = [t.name for t in after if isinstance(interp.env[t], Moved)]
            found[m] = (f"the outputs are invariant to a per-row shift of {m.name!r} "
                        f"(it cancels through {', '.join(moved)}), so it gets no gradient")
    return found


__all__ = ["Moved", "shift_invariant"]
