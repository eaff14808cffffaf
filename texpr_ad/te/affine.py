"""Affine normal form of integer index arithmetic: `sum coeff * atom + const`."""
from __future__ import annotations

from . import dtype as dt
from .expr import Call, Const, Expr
from .ops import Op
from .visit import fold

Affine = tuple[dict[Expr, int], int]


def to_affine(e: Expr) -> Affine | None:
    """`e` as ({atom: coeff}, const) when it is a linear integer combination, else None.

    Atoms are variables and non-linear subterms (floordiv, reads, ...), in first-use order.
    Iterative (an explicit stack, a shared subterm visited once), so the depth of `e` is not
    bounded by Python's recursion limit.
    """
    return fold(e, _linear_args, _combine)


def _linear_args(e: Expr) -> tuple[Expr, ...]:
    """The operands `to_affine` folds into `e`'s form (none for an atom)."""
    if dt.is_int(e.dtype) and isinstance(e, Call) and e.op in (Op.ADD, Op.SUB, Op.NEG, Op.MUL):
        return e.args
    return ()


def _combine(e: Expr, forms: list[Affine | None]) -> Affine | None:
    """`e`'s affine form from its operands' (`forms`, aligned with `_linear_args(e)`)."""
    if not dt.is_int(e.dtype):
        return None
    if isinstance(e, Const):
        return {}, int(e.value)
    if not forms:
        return {e: 1}, 0
    known = [f for f in forms if f is not None]
    if len(known) < len(forms) or not isinstance(e, Call):  # (forms come from a Call's operands)
        return None
    match e.op, known:
        case (Op.ADD | Op.SUB), [fa, fb]:
            s = 1 if e.op is Op.ADD else -1
            terms = dict(fa[0])
            for k, v in fb[0].items():
                terms[k] = terms.get(k, 0) + s * v
            return {k: v for k, v in terms.items() if v}, fa[1] + s * fb[1]
        case Op.NEG, [fa]:
            return {k: -v for k, v in fa[0].items()}, -fa[1]
        case Op.MUL, [fa, fb]:
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


