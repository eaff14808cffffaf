"""Affine normal form of integer index arithmetic: `sum coeff * atom + const`."""
from __future__ import annotations

from . import dtype as dt
from .expr import Call, Const, Expr
from .ops import Op

Affine = tuple[dict[Expr, int], int]


def to_affine(e: Expr) -> Affine | None:
    """`e` as ({atom: coeff}, const) when it is a linear integer combination, else None.

    Atoms are variables and non-linear subterms (floordiv, reads, ...), in first-use order.
    """
    if not dt.is_int(e.dtype):
        return None
    match e:
        case Const(value=v):
            return {}, int(v)
        case Call(op=Op.ADD | Op.SUB, args=(a, b)):
            fa, fb = to_affine(a), to_affine(b)
            if fa is None or fb is None:
                return None
            s = 1 if e.op is Op.ADD else -1
            terms = dict(fa[0])
            for k, v in fb[0].items():
                terms[k] = terms.get(k, 0) + s * v
            return {k: v for k, v in terms.items() if v}, fa[1] + s * fb[1]
        case Call(op=Op.NEG, args=(a,)):
            fa = to_affine(a)
            return None if fa is None else ({k: -v for k, v in fa[0].items()}, -fa[1])
        case Call(op=Op.MUL, args=(a, b)):
            fa, fb = to_affine(a), to_affine(b)
            if fa is None or fb is None:
                return None
            if not fa[0]:
                fa, fb = fb, fa
            if fb[0]:
                return {e: 1}, 0  # non-linear product: an atom
            c = fb[1]
            return {k: v * c for k, v in fa[0].items() if v * c}, fa[1] * c
    return {e: 1}, 0


def from_affine(terms: dict[Expr, int], c: int, dtype: str) -> Expr:
    """Rebuild `sum coeff*atom + c` with positive terms first: `h + 1 - kh`."""
    pos = [(k, v) for k, v in terms.items() if v > 0]
    neg = [(k, -v) for k, v in terms.items() if v < 0]

    def term(k: Expr, v: int) -> Expr:
        return k if v == 1 else Call(Op.MUL, (Const(v, dtype), k), dtype)

    out: Expr | None = None
    for k, v in pos:
        out = term(k, v) if out is None else Call(Op.ADD, (out, term(k, v)), dtype)
    if c > 0 or (out is None and c == 0) or (out is None and not neg):
        out = Const(c, dtype) if out is None else Call(Op.ADD, (out, Const(c, dtype)), dtype)
        c = 0
    for k, v in neg:
        out = Call(Op.NEG, (term(k, v),), dtype) if out is None else Call(Op.SUB, (out, term(k, v)), dtype)
    if c < 0:
        out = Const(c, dtype) if out is None else Call(Op.SUB, (out, Const(-c, dtype)), dtype)
    assert out is not None
    return out


