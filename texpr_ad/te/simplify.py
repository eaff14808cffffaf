"""Algebraic simplification so derived adjoints (and inlined index maps) read like hand-written
ones.

A list of small rewrite rules, each matching one shape, applied bottom-up to a
fixpoint; integer index arithmetic is additionally brought to a canonical
affine form (`h + 1 - kh`).  Floats are never reassociated: only constants are
folded and neutral elements dropped.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from . import dtype as dt
from .expr import Call, Const, Expr, IterVar
from .interp import NUMPY_IMPL
from .ops import Op
from .affine import from_affine, to_affine
from .visit import transform

Rule = Callable[[Expr], Expr | None]


def _is(e: Expr, v: float) -> bool:
    return isinstance(e, Const) and not isinstance(e.value, bool) and e.value == v


def _fold(e: Expr) -> Expr | None:
    """Call of constants -> constant."""
    if not (isinstance(e, Call) and e.args and all(isinstance(a, Const) for a in e.args)):
        return None
    if e.op is Op.SELECT:
        return e.args[1] if e.args[0].value else e.args[2]  # type: ignore[attr-defined]
    if e.op is Op.CAST:
        v = e.args[0].value  # type: ignore[attr-defined]
        return Const(int(v) if dt.is_int(e.dtype) else v, e.dtype)
    if e.op is Op.ERF or (dt.is_int(e.dtype) and e.op in (Op.FLOORDIV, Op.FLOORMOD, Op.DIV)
                          and e.args[1].value == 0):  # type: ignore[attr-defined]
        return None
    with np.errstate(all="ignore"):
        v = NUMPY_IMPL[e.op](*(np.array(a.value, dtype=a.dtype) for a in e.args))  # type: ignore[attr-defined]
    return Const(np.asarray(v).astype(e.dtype).item(), e.dtype)


def _neutral(e: Expr) -> Expr | None:
    match e:
        case Call(op=Op.ADD, args=(a, b)) if _is(b, 0):
            return a  # x + 0 -> x
        case Call(op=Op.ADD, args=(a, b)) if _is(a, 0):
            return b  # 0 + x -> x
        case Call(op=Op.SUB, args=(a, b)) if _is(b, 0):
            return a  # x - 0 -> x
        case Call(op=Op.SUB, args=(a, b)) if _is(a, 0):
            return Call(Op.NEG, (b,), e.dtype)  # 0 - x -> -x
        case Call(op=Op.MUL, args=(a, b)) if _is(b, 1):
            return a  # x * 1 -> x
        case Call(op=Op.MUL, args=(a, b)) if _is(a, 1):
            return b  # 1 * x -> x
        case Call(op=Op.MUL, args=(a, b)) if _is(a, -1) or _is(b, -1):
            return Call(Op.NEG, (b if _is(a, -1) else a,), e.dtype)  # -1 * x -> -x
        case Call(op=Op.MUL, args=(a, b)) if dt.is_int(e.dtype) and (_is(a, 0) or _is(b, 0)):
            return Const(0, e.dtype)  # i * 0 -> 0 (integers only)
        case Call(op=Op.DIV | Op.FLOORDIV, args=(a, b)) if _is(b, 1):
            return a  # x / 1 -> x
        case Call(op=Op.FLOORMOD, args=(a, b)) if _is(b, 1):
            return Const(0, e.dtype)  # i % 1 -> 0
        case Call(op=Op.NEG, args=(Call(op=Op.NEG, args=(a,)),)):
            return a  # --x -> x
        case Call(op=Op.ADD, args=(a, Call(op=Op.NEG, args=(b,)))):
            return Call(Op.SUB, (a, b), e.dtype)  # a + -b -> a - b
        case Call(op=Op.SUB, args=(a, Call(op=Op.NEG, args=(b,)))):
            return Call(Op.ADD, (a, b), e.dtype)  # a - -b -> a + b
        case Call(op=Op.MUL, args=(Call(op=Op.NEG, args=(a,)), b)):
            return Call(Op.NEG, (Call(Op.MUL, (a, b), e.dtype),), e.dtype)  # (-a)*b -> -(a*b)
        case Call(op=Op.SELECT, args=(_, a, b)) if a.same_as(b):
            return a  # select(c, x, x) -> x
        case Call(op=Op.AND, args=(Const() as c, o) | (o, Const() as c)):
            return o if c.value else c  # True & x -> x ; False & x -> False
        case Call(op=Op.OR, args=(Const() as c, o) | (o, Const() as c)):
            return c if c.value else o
        case Call(op=Op.CAST, args=(a,)) if a.dtype == e.dtype:
            return a
    return None


def _affine(e: Expr) -> Expr | None:
    if not (isinstance(e, Call) and e.op in (Op.ADD, Op.SUB, Op.MUL, Op.NEG) and dt.is_int(e.dtype)):
        return None
    f = to_affine(e)
    if f is None:
        return None
    out = from_affine(f[0], f[1], e.dtype)
    return None if out.same_as(e) else out


def _div_mod_const(e: Expr) -> Expr | None:
    """floordiv/floormod of `c*q + r` by c when 0 <= r < c is known: `(c*q + r) // c -> q`;
    `(c*q + r) % c -> r % c` always; and chains by positive constants, `x // a // b ->
    x // (a*b)`, `x // a % b -> x % (a*b) // a` (the flatten/unflatten of a reshape)."""
    from .intervals import interval
    match e:
        case Call(op=Op.FLOORDIV | Op.FLOORMOD,
                  args=(Call(op=Op.FLOORDIV, args=(x, Const(value=a))), Const(value=b))) \
                if dt.is_int(e.dtype) and a > 0 and b > 0:
            ab = Const(a * b, e.dtype)
            if e.op is Op.FLOORDIV:
                return Call(Op.FLOORDIV, (x, ab), e.dtype)
            return Call(Op.FLOORDIV, (Call(Op.FLOORMOD, (x, ab), e.dtype), Const(a, e.dtype)), e.dtype)
        case Call(op=Op.FLOORDIV | Op.FLOORMOD, args=(a, Const(value=int() as c))) \
                if dt.is_int(e.dtype) and c > 0:
            f = to_affine(a)
            if f is None:
                return None
            terms, k = f
            whole = {t: v for t, v in terms.items() if v % c == 0}
            rest = {t: v for t, v in terms.items() if v % c != 0}
            restc = k % c
            lo, hi = interval(from_affine(rest, restc, e.dtype))
            if lo is None or hi is None or lo < 0 or hi >= c:
                if e.op is Op.FLOORMOD and whole:  # multiples of c drop out
                    return Call(Op.FLOORMOD, (from_affine(rest, k, e.dtype), e.args[1]), e.dtype)
                return None
            if e.op is Op.FLOORMOD:
                return from_affine(rest, restc, e.dtype)
            q = {t: v // c for t, v in whole.items()}
            return from_affine(q, (k - restc) // c, e.dtype)
    return None


def _extreme(terms: dict[Expr, int], c: int, lowest: bool) -> tuple[dict[Expr, int], int] | None:
    """The min (or max) of an affine form over the ranges of its loop variables, as an affine form."""
    out: dict[Expr, int] = {}
    k = c
    for atom, coeff in terms.items():
        if not isinstance(atom, IterVar):
            out[atom] = out.get(atom, 0) + coeff
            continue
        take_lo = (coeff > 0) == lowest
        bound = atom.lo if take_lo else atom.lo + atom.extent - 1
        f = to_affine(bound)
        if f is None:
            return None
        for a, v in f[0].items():
            out[a] = out.get(a, 0) + coeff * v
        k += coeff * f[1]
    return {a: v for a, v in out.items() if v}, k


def _range_decided(e: Expr) -> Expr | None:
    """`i + 1 <= n` is true when i ranges over [0, n): decide comparisons from loop ranges."""
    match e:
        case Call(op=Op.GE | Op.GT | Op.LE | Op.LT, args=(a, b)) if dt.is_int(a.dtype):
            big, small = (a, b) if e.op in (Op.GE, Op.GT) else (b, a)
            f = to_affine(Call(Op.SUB, (big, small), a.dtype))
            if f is None or not any(isinstance(t, IterVar) for t in f[0]):
                return None
            strict = e.op in (Op.GT, Op.LT)
            lo = _extreme(f[0], f[1], lowest=True)
            if lo is not None and not lo[0] and (lo[1] > 0 if strict else lo[1] >= 0):
                return Const(True, "bool")
            hi = _extreme(f[0], f[1], lowest=False)
            if hi is not None and not hi[0] and (hi[1] <= 0 if strict else hi[1] < 0):
                return Const(False, "bool")
    return None


def _mod_of_sum(e: Expr) -> Expr | None:
    """Floor semantics make `x - c*(x // c)` exactly `x % c`: in an integer sum holding
    `-m*c * (E // c)` together with `m*E`'s terms, both become `m * (E % c)` (the composed
    index maps of reshape adjoints: `L - 24*(L // 24)` -> `L % 24`)."""
    if not (isinstance(e, Call) and e.op in (Op.ADD, Op.SUB) and dt.is_int(e.dtype)):
        return None
    f = to_affine(e)
    if f is None:
        return None
    terms, k = f
    for t, v in terms.items():
        if not (isinstance(t, Call) and t.op is Op.FLOORDIV and isinstance(t.args[1], Const)):
            continue
        c = int(t.args[1].value)
        if c <= 0 or v % c:
            continue
        m = -v // c
        fe = to_affine(t.args[0])
        if fe is None or not fe[0] or any(terms.get(a, 0) != m * w for a, w in fe[0].items()):
            continue
        rest = {a: w for a, w in terms.items() if a is not t and a not in fe[0]}
        mod = Call(Op.FLOORMOD, (t.args[0], t.args[1]), e.dtype)
        rest[mod] = rest.get(mod, 0) + m
        return from_affine({a: w for a, w in rest.items() if w}, k - m * fe[1], e.dtype)
    return None


def _div_mod_recombine(e: Expr) -> Expr | None:
    """`m*c*(E // c) + m*(E % c)` in an integer sum -> `m*E` (floor semantics): a window read at
    the solution of `c*o + r = h`, `2*(h // 2) + h % 2` -> `h`."""
    if not (isinstance(e, Call) and e.op in (Op.ADD, Op.SUB)) or (f := to_affine(e)) is None:
        return None
    terms, k = f
    for t, v in terms.items():
        if isinstance(t, Call) and t.op is Op.FLOORMOD and isinstance(t.args[1], Const):
            q, c, fx = Call(Op.FLOORDIV, t.args, t.dtype), int(t.args[1].value), to_affine(t.args[0])
            if c > 0 and terms.get(q, 0) == c * v and fx is not None:
                rest = {a: w for a, w in terms.items() if a not in (t, q)}
                for a, w in fx[0].items():
                    rest[a] = rest.get(a, 0) + v * w
                return from_affine({a: w for a, w in rest.items() if w}, k + v * fx[1], e.dtype)
    return None


def _widen_div_mod(e: Expr) -> Expr | None:
    """`(h // 2).astype("int64") -> h.astype("int64") // 2`: an int's cast to int64 keeps it."""
    match e:
        case Call(op=Op.CAST, dtype="int64", args=(Call(op=Op.FLOORDIV | Op.FLOORMOD as op,
                                                        args=(x, Const(value=int() as c))),)) \
                if dt.is_int(x.dtype):
            return Call(op, (Call(Op.CAST, (x,), e.dtype), Const(c, e.dtype)), e.dtype)
    return None


def _mod_mod(e: Expr) -> Expr | None:
    match e:
        case Call(op=Op.FLOORMOD, args=(Call(op=Op.FLOORMOD, args=(x, Const(value=a))), Const(value=b))) \
                if dt.is_int(e.dtype) and a > 0 and b > 0 and a % b == 0:
            return Call(Op.FLOORMOD, (x, e.args[1]), e.dtype)  # x % (a*b) % b -> x % b
    return None


def _interval_decided(e: Expr) -> Expr | None:
    """`0 <= x % 24 // 6` is true: decide integer comparisons from interval bounds."""
    from .intervals import interval
    match e:
        case Call(op=Op.GE | Op.GT | Op.LE | Op.LT, args=(a, b)) if dt.is_int(a.dtype) and dt.is_int(b.dtype):
            (al, ah), (bl, bh) = interval(a), interval(b)
            if al is None or ah is None or bl is None or bh is None:
                return None
            lt = {Op.LT: (ah < bl, al >= bh), Op.LE: (ah <= bl, al > bh),
                  Op.GT: (al > bh, ah <= bl), Op.GE: (al >= bh, ah < bl)}[e.op]
            if lt[0] or lt[1]:
                return Const(bool(lt[0]), "bool")
    return None


RULES: list[Rule] = [_fold, _neutral, _affine, _div_mod_const, _range_decided, _mod_of_sum, _mod_mod,
                     _interval_decided]
# for indices handed to TVM (its iter-map analysis aborts on `2*(h//2) + (h - 2*(h//2))`)
INDEX_RULES: list[Rule] = [*RULES, _widen_div_mod, _div_mod_recombine]


def simplify(e: Expr, rules: list[Rule] = RULES, max_iter: int = 8) -> Expr:
    """Apply `rules` bottom-up until nothing changes."""
    for _ in range(max_iter):
        def step(x: Expr) -> Expr | None:
            for r in rules:
                y = r(x)
                if y is not None:
                    return y
            return None
        new = transform(e, step)
        if new.same_as(e):
            return new
        e = new
    return e


