"""Reverse mode over one scalar expression: the partial derivative of a stage's
value with respect to every tensor read in it, with the path's guards.

    Y[i] = select(i >= 1, X[i - 1], 0) * W[i]
    -> [(X[i - 1], coeff=W[i], guards=[i >= 1]), (W[i], coeff=select(...), guards=[])]

Every read is its own contribution (`A[i, j] + A[j, i]` gives two), so no
Jacobian condition over all pairs is ever built.  Select branches become
guards (later iteration constraints), never multiplications by zero.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..te import dtype as dt
from ..te.expr import Call, Const, Expr, Read, Reduce
from ..te.ops import Op
from ..te.tensor import Tensor
from ..te.visit import children, walk
from .errors import NotDifferentiableError
from .rules import PARTIALS


@dataclass(frozen=True)
class Contribution:
    """d value / d read = coeff, valid where all guards hold."""

    read: Read
    coeff: Expr
    guards: tuple[Expr, ...]


def _mul(a: Expr | None, b: Expr) -> Expr:
    if a is None:
        return b
    if isinstance(b, Const) and b.value == 1:
        return a
    match a:
        case Call(op=Op.DIV, args=(Const(value=1) | Const(value=1.0), d)):
            return b / d  # (1/d) * b -> b/d: one rounding, and the forward's own a/d shape, so
            #               the forward output can stand in for it (see adjoint._stage_terms)
    return a * b


def collect(e: Expr, wanted: Callable[[Tensor], bool], where: str) -> list[Contribution]:
    """All contributions of reads of `wanted` tensors in `e` (reads in indices excluded)."""
    needs: dict[int, bool] = {}  # id(node) -> whether a wanted float read is below it
    for x in walk(e):
        needs[id(x)] = (wanted(x.tensor) and dt.is_float(x.dtype) if isinstance(x, Read)
                        else any(needs[id(c)] for c in children(x)))

    out: dict[tuple[Read, tuple[Expr, ...]], Expr] = {}
    stack: list[tuple[Expr, Expr | None, tuple[Expr, ...]]] = [(e, None, ())]
    while stack:  # preorder with an explicit stack: any depth
        x, adj, guards = stack.pop()
        if not needs[id(x)]:
            continue
        match x:
            case Read():
                key = (x, guards)
                one = Const(1.0, x.dtype)
                c = adj if adj is not None else one
                out[key] = c if key not in out else out[key] + c
            case Call(op=Op.SELECT, args=(c, a, b)):
                stack.append((b, adj, guards + (Call(Op.NOT, (c,), "bool"),)))
                stack.append((a, adj, guards + (c,)))
            case Call(op=op, args=args):
                rule = PARTIALS.get(op)
                if rule is None:
                    raise NotDifferentiableError(f"{where}: no derivative rule for `{op.name.lower()}` "
                                                 f"in `{x}`")
                stack.extend(reversed([(arg, _mul(adj, p), guards)
                                       for arg, p in zip(args, rule(x), strict=True)
                                       if p is not None and needs[id(arg)]]))
            case Reduce():
                raise NotDifferentiableError(f"{where}: a reduction nested in an expression "
                                             "(te.compute splits these into stages)")
    return [Contribution(r, c, g) for (r, g), c in out.items()]
