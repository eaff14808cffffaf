"""Centered sums: `sum_K c (X[g(K)] - M)` is exactly zero when M is the mean of X over K.

The variance's adjoint with respect to its mean is such a sum:

    mean[i] = sum_k x[i, k] / n;  var[i] = sum_k (x[i, k] - mean[i])^2 / n
    dmean[i] += dvar[i] / n * sum_k -2 (x[i, k] - mean[i])      <- zero: sum_k x[i, k] = n mean[i]

In floating point the computed sum is rounding noise, and it costs a pass over the data
(a row pass of layer_norm, a whole-tensor pass of batch_norm).  `is_centered_zero` recognizes
it so the adjoint builder drops the term (PyTorch's normalization backward has no such term).

The sum must be linear: constant multiples of reads, with the reads of X summing to -c and
those of M to +c.  M is a stage `R[..] / n` (or `R[..] * (1/n)`) and R a stage
`sum_K' X[g'(K')]` without condition or init over constant ranges of total size n, whose
index map is the sum's own once R's reduce axes are renamed to the sum's axes (in order).
"""
from __future__ import annotations

import math

from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce, ReduceKind
from ..te.ops import Op
from ..te.tensor import ComputeOp
from ..te.simplify import simplify
from ..te.visit import substitute, walk

Linear = dict[Read, float]  # read -> coefficient


def _linear(e: Expr) -> Linear | None:
    """`e` as sum_r c_r r over reads, or None when it is not of that form."""
    match e:
        case Read():
            return {e: 1.0}
        case Call(op=Op.NEG, args=(a,)):
            la = _linear(a)
            return None if la is None else {r: -c for r, c in la.items()}
        case Call(op=Op.ADD | Op.SUB, args=(a, b)):
            la, lb = _linear(a), _linear(b)
            if la is None or lb is None:
                return None
            sign = 1.0 if e.op is Op.ADD else -1.0
            out = dict(la)
            for r, c in lb.items():
                key = next((q for q in out if q.same_as(r)), r)
                out[key] = out.get(key, 0.0) + sign * c
            return out
        case Call(op=Op.MUL, args=(a, Const(value=v))) | Call(op=Op.MUL, args=(Const(value=v), a)):
            la = _linear(a)
            return None if la is None or isinstance(v, bool) else {r: c * float(v) for r, c in la.items()}
    return None


def _mean_of(m: Read) -> tuple[Reduce, dict[Expr, Expr]] | None:
    """(the sum R reduces, R's data axes -> m's indices) if m reads a stage R / n with n the
    size of R's constant reduce ranges; else None."""
    op = m.tensor.op
    if not isinstance(op, ComputeOp) or len(op.body) != 1:
        return None
    match op.body[0]:
        case Call(op=Op.DIV, args=(Read() as r, Const(value=n))):
            scale = 1.0 / float(n) if n else 0.0
        case Call(op=Op.MUL, args=(Read() as r, Const(value=s))):
            scale = float(s)
        case _:
            return None
    rop = r.tensor.op
    if not (isinstance(rop, ComputeOp) and len(rop.body) == 1 and isinstance(rop.body[0], Reduce)):
        return None
    red = rop.body[0]
    ok = (red.combiner.kind is ReduceKind.SUM and len(red.source) == 1 and not red.init
          and isinstance(red.condition, Const) and red.condition.value is True
          and all(isinstance(a.lo, Const) and a.lo.value == 0 and isinstance(a.extent, Const)
                  for a in red.axis)
          and len(r.indices) == len(op.axis)
          and all(i is a for i, a in zip(r.indices, op.axis, strict=True)))  # M[p] = R[p] / n
    size = math.prod([int(a.extent.value) for a in red.axis if isinstance(a.extent, Const)])
    if not ok or not math.isclose(scale * size, 1.0, rel_tol=1e-12):
        return None
    return red, dict(zip(rop.axis, m.indices, strict=True))


def is_centered_zero(source: Expr, axes: tuple[IterVar, ...]) -> bool:
    """Whether `sum_axes source` (constant ranges, no condition) is exactly zero in real
    arithmetic because `source` is c (X - mean_axes X) (see the module docstring)."""
    lin = _linear(source)
    if lin is None or not lin:
        return False
    means = [(r, c) for r, c in lin.items() if _mean_of(r) is not None]
    if len(means) != 1:
        return False
    m, cm = means[0]
    red, data = _mean_of(m)  # type: ignore[misc]
    rest = {r: c for r, c in lin.items() if r is not m}
    if len(rest) != 1 or len(red.axis) != len(axes) or any(
            not (isinstance(a.lo, Const) and a.lo.value == 0 and a.extent.same_as(b.extent))
            for a, b in zip(red.axis, axes, strict=True)):
        return False
    (x, cx), = rest.items()
    if cx + cm != 0 or any(v is a for a in axes for i in m.indices for v in walk(i)):
        return False
    want = substitute(red.source[0], {**data, **dict(zip(red.axis, axes, strict=True))})
    return simplify(want).same_as(simplify(x))  # `g * 8 + rc` as the adjoint spells it, `8 * g + rc`


__all__ = ["is_centered_zero"]
