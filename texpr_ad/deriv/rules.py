"""Scalar derivative rules: one entry per `Op`, with the math beside it.

`PARTIALS[op](node)` returns, for each argument of the Call `node`, the partial
derivative d node / d arg as an expression over the arguments and the node
itself, or `None` for "no derivative" (integer-valued or non-differentiable
arguments), so graphs never fill with `0 * x`.  Rules are checked against
`sympy.diff` at random points in tests/unit/test_rules.py.

`SELECT` is not here: its condition has no derivative and its branches are
handled by the differentiator as guards (iteration constraints), not as
multiplications by zero.
"""
from __future__ import annotations

import math
from typing import Callable

from ..te import Op
from ..te import intrin as ti
from ..te.expr import Call, Const, Expr

Partials = tuple[Expr | None, ...]


def _c(v: float, like: Expr) -> Const:
    return Const(v, like.dtype)


def _pick(loses: Expr, a: Expr, b: Expr, n: Call) -> Expr:
    """0 where the operand `loses`, 1/2 at a tie, else 1 (so 1 to both when either is NaN)."""
    return ti.if_then_else(loses, _c(0.0, n), ti.if_then_else(a.eq(b), _c(0.5, n), _c(1.0, n)))


def _max_partials(n: Call) -> Partials:
    """d max(a, b): 1 to the larger operand; ties split half and half (PyTorch, JAX); with a
    NaN operand (the result is NaN) 1 to both, as PyTorch."""
    a, b = n.args
    return (_pick(a < b, a, b, n), _pick(b < a, a, b, n))


def _min_partials(n: Call) -> Partials:
    """d min(a, b): 1 to the smaller operand; ties and NaN as for max."""
    a, b = n.args
    return (_pick(a > b, a, b, n), _pick(b > a, a, b, n))


def _abs_partials(n: Call) -> Partials:
    """d |a| = (a > 0) - (a < 0): sign a, but 0 at 0 and at NaN, as PyTorch's sgn."""
    a = n.args[0]
    return (ti.if_then_else(a > _c(0.0, a), _c(1.0, n),
                            ti.if_then_else(a < _c(0.0, a), _c(-1.0, n), _c(0.0, n))),)


def _pow_partials(n: Call) -> Partials:
    """d a**b = (b * a**(b-1), a**b * log(a)); the second only matters when b varies."""
    a, b = n.args
    da = b * ti.power(a, b - _c(1.0, b)) if not (isinstance(b, Const) and b.value == 1) else _c(1.0, n)
    return (da, n * ti.log(a))


def _cast_partials(n: Call) -> Partials:
    """Cast between floats passes the adjoint through; a cast to an integer has none."""
    src = n.args[0]
    return (_c(1.0, n),) if n.dtype.startswith("float") and src.dtype.startswith("float") else (None,)


def _atan2_partials(n: Call) -> Partials:
    """d atan2(y, x) = (x, -y) / (x^2 + y^2)."""
    y, x = n.args
    r2 = x * x + y * y
    return (x / r2, -y / r2)


_ZERO1: Callable[[Call], Partials] = lambda n: (None,)  # noqa: E731
_ZERO2: Callable[[Call], Partials] = lambda n: (None, None)  # noqa: E731

PARTIALS: dict[Op, Callable[[Call], Partials]] = {
    Op.ADD: lambda n: (_c(1.0, n), _c(1.0, n)),                    # d(a+b) = (1, 1)
    Op.SUB: lambda n: (_c(1.0, n), _c(-1.0, n)),                   # d(a-b) = (1, -1)
    Op.MUL: lambda n: (n.args[1], n.args[0]),                      # d(ab) = (b, a)
    Op.DIV: lambda n: (_c(1.0, n) / n.args[1], -n / n.args[1]),    # d(a/b) = (1/b, -(a/b)/b)
    Op.NEG: lambda n: (_c(-1.0, n),),                              # d(-a) = -1
    Op.POW: _pow_partials,
    Op.MAX: _max_partials,
    Op.MIN: _min_partials,
    Op.EXP: lambda n: (n,),                                        # d exp a = exp a
    Op.LOG: lambda n: (_c(1.0, n) / n.args[0],),                   # d log a = 1/a
    Op.LOG1P: lambda n: (_c(1.0, n) / (_c(1.0, n) + n.args[0]),),  # d log(1+a) = 1/(1+a)
    Op.SQRT: lambda n: (_c(0.5, n) / n,),                          # d sqrt a = 1/(2 sqrt a)
    Op.RSQRT: lambda n: (_c(-0.5, n) * n * n * n,),                # d a^-1/2 = -a^-3/2 / 2
    Op.TANH: lambda n: (_c(1.0, n) - n * n,),                      # d tanh a = 1 - tanh^2 a
    Op.SIGMOID: lambda n: (n * (_c(1.0, n) - n),),                 # d s(a) = s(a)(1 - s(a))
    Op.ERF: lambda n: (_c(2 / math.sqrt(math.pi), n)               # d erf a = 2/sqrt(pi) e^(-a^2)
                       * ti.exp(-(n.args[0] * n.args[0])),),
    Op.SIN: lambda n: (ti.cos(n.args[0]),),                        # d sin a = cos a
    Op.COS: lambda n: (-ti.sin(n.args[0]),),                       # d cos a = -sin a
    Op.ATAN: lambda n: (_c(1.0, n) / (_c(1.0, n) + n.args[0] * n.args[0]),),  # 1/(1+a^2)
    Op.ABS: _abs_partials,                                         # d |a| = sign a (0 at 0, NaN)
    Op.TAN: lambda n: (_c(1.0, n) + n * n,),                       # d tan a = 1 + tan^2 a
    Op.SINH: lambda n: (ti.cosh(n.args[0]),),                      # d sinh a = cosh a
    Op.COSH: lambda n: (ti.sinh(n.args[0]),),                      # d cosh a = sinh a
    Op.ASIN: lambda n: (ti.rsqrt(_c(1.0, n) - n.args[0] * n.args[0]),),   # 1/sqrt(1-a^2)
    Op.ACOS: lambda n: (-ti.rsqrt(_c(1.0, n) - n.args[0] * n.args[0]),),  # -1/sqrt(1-a^2)
    Op.ASINH: lambda n: (ti.rsqrt(n.args[0] * n.args[0] + _c(1.0, n)),),  # 1/sqrt(a^2+1)
    Op.ACOSH: lambda n: (ti.rsqrt((n.args[0] - _c(1.0, n))               # 1/sqrt((a-1)(a+1))
                                  * (n.args[0] + _c(1.0, n))),),
    Op.ATANH: lambda n: (_c(1.0, n) / (_c(1.0, n) - n.args[0] * n.args[0]),),  # 1/(1-a^2)
    Op.ATAN2: _atan2_partials,
    Op.CAST: _cast_partials,
    Op.STOP_GRADIENT: lambda n: (None,),                           # a constant to differentiation
    # integer-valued (piecewise-constant) functions: exact zero almost everywhere
    Op.FLOOR: _ZERO1, Op.CEIL: _ZERO1, Op.TRUNC: _ZERO1, Op.ROUND: _ZERO1, Op.SIGN: _ZERO1,
    Op.FLOORDIV: _ZERO2, Op.FLOORMOD: _ZERO2,
    Op.LT: _ZERO2, Op.LE: _ZERO2, Op.GT: _ZERO2, Op.GE: _ZERO2, Op.EQ: _ZERO2, Op.NE: _ZERO2,
    Op.AND: _ZERO2, Op.OR: _ZERO2, Op.NOT: _ZERO1, Op.SHL: _ZERO2, Op.SHR: _ZERO2,
    Op.ISNAN: _ZERO1, Op.BITWISE_AND: _ZERO2, Op.BITWISE_OR: _ZERO2, Op.BITWISE_XOR: _ZERO2,
    Op.BITWISE_NOT: _ZERO1,
}

# FLOORMOD on floats is a - b*floor(a/b): d/da = 1 where it is smooth
PARTIALS[Op.FLOORMOD] = lambda n: ((_c(1.0, n), -ti.floor(n.args[0] / n.args[1]))
                                   if n.dtype.startswith("float") else (None, None))

