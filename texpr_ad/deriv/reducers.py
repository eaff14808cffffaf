"""Recognize custom reducers that are sum/prod/max/min on one component.

`te.comm_reducer(lambda x, y: x + y, ...)` is a sum, and the value component of
an argmax reducer, `select(x1 >= y1, x1, y1)`, is a max: such reductions are
rewritten to the built-in kind so the differentiator's rules apply.  Other
custom reducers are not differentiable (an error names them).
"""
from __future__ import annotations

from ..te import reduce as tr
from ..te.expr import Call, Expr, Reduce, Var
from ..te.ops import Op
from ..te.visit import free_vars

_BUILTIN = {"sum": tr.sum, "prod": tr.prod, "max": tr.max, "min": tr.min}
_SYMMETRIC = {Op.ADD: "sum", Op.MUL: "prod", Op.MAX: "max", Op.MIN: "min"}
# select(x OP y, x, y): which extreme it keeps
_SELECT_KEEP_X = {Op.GE: "max", Op.GT: "max", Op.LE: "min", Op.LT: "min"}


def classify(result: Expr, x: Var, y: Var) -> str | None:
    """The built-in kind of `result` as a function of (x, y), or None."""
    if set(free_vars(result)) - {x, y}:
        return None
    match result:
        case Call(op=op, args=(a, b)) if op in _SYMMETRIC and {a, b} == {x, y} and not a.same_as(b):
            return _SYMMETRIC[op]
        case Call(op=Op.SELECT, args=(Call(op=cmp, args=(ca, cb)), t, f)) if cmp in _SELECT_KEEP_X:
            kind = _SELECT_KEEP_X[cmp]
            flip = {"max": "min", "min": "max"}
            if ca.same_as(y) and cb.same_as(x):  # y OP x
                kind = flip[kind]
            elif not (ca.same_as(x) and cb.same_as(y)):
                return None
            if t.same_as(x) and f.same_as(y):
                return kind
            if t.same_as(y) and f.same_as(x):
                return flip[kind]
    return None


def as_builtin(body: Reduce) -> Reduce | None:
    """`body` as a single-source built-in reduction, or None when it is not one."""
    comb = body.combiner
    if comb.kind in _BUILTIN:
        return body
    k = body.value_index
    kind = classify(comb.result[k], comb.lhs[k], comb.rhs[k])
    if kind is None:
        return None
    builtin = _BUILTIN[kind].make([body.dtype])
    init = (body.init[k],) if body.init else ()
    return Reduce(builtin, (body.source[k],), body.axis, body.condition, 0, body.dtype, init)
