"""Integer interval bounds of index expressions over constant loop ranges."""
from __future__ import annotations

from .expr import Call, Const, Expr, IterVar
from .ops import Op

Interval = tuple[int | None, int | None]  # inclusive; None = unbounded


def _mul(a: Interval, b: Interval) -> Interval:
    if None in a or None in b:
        return (None, None)
    ps = [x * y for x in a for y in b]  # type: ignore[operator]
    return (min(ps), max(ps))


def interval(e: Expr) -> Interval:
    """Inclusive bounds of integer expression `e`, or None where unknown."""
    match e:
        case Const(value=v) if isinstance(v, (int, bool)):
            return (int(v), int(v))
        case IterVar(lo=Const(value=lo), extent=Const(value=n)):
            return (int(lo), int(lo) + int(n) - 1)
        case IterVar(lo=lo, extent=n):
            return (interval(lo)[0], interval(lo + n - 1)[1])
        case Call(op=Op.ADD, args=(a, b)):
            (al, ah), (bl, bh) = interval(a), interval(b)
            return (None if al is None or bl is None else al + bl,
                    None if ah is None or bh is None else ah + bh)
        case Call(op=Op.SUB, args=(a, b)):
            (al, ah), (bl, bh) = interval(a), interval(b)
            return (None if al is None or bh is None else al - bh,
                    None if ah is None or bl is None else ah - bl)
        case Call(op=Op.NEG, args=(a,)):
            al, ah = interval(a)
            return (None if ah is None else -ah, None if al is None else -al)
        case Call(op=Op.MUL, args=(a, b)):
            return _mul(interval(a), interval(b))
        case Call(op=Op.FLOORDIV, args=(a, Const(value=int() as c))) if c > 0:
            al, ah = interval(a)
            return (None if al is None else al // c, None if ah is None else ah // c)
        case Call(op=Op.FLOORMOD, args=(a, Const(value=int() as c))) if c > 0:
            al, ah = interval(a)
            if al is not None and ah is not None and al // c == ah // c:
                return (al % c, ah % c)
            return (0, c - 1)
        case Call(op=Op.MIN, args=(a, b)):
            (al, ah), (bl, bh) = interval(a), interval(b)
            his = [h for h in (ah, bh) if h is not None]
            return (None if al is None or bl is None else min(al, bl), min(his) if his else None)
        case Call(op=Op.MAX, args=(a, b)):
            (al, ah), (bl, bh) = interval(a), interval(b)
            los = [lo for lo in (al, bl) if lo is not None]
            return (max(los) if los else None, None if ah is None or bh is None else max(ah, bh))
        case Call(op=Op.CAST, args=(a,)):
            return interval(a)
        case Call(op=Op.SELECT, args=(_, a, b)):  # either branch
            (al, ah), (bl, bh) = interval(a), interval(b)
            return (None if al is None or bl is None else min(al, bl),
                    None if ah is None or bh is None else max(ah, bh))
    return (None, None)
