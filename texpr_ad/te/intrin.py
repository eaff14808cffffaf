"""Math intrinsics, selects, logic and casts of the DSL (TVM names and argument orders)."""
from __future__ import annotations

from typing import Any

from . import dtype as dt
from .expr import Call, Expr, as_expr, binary, const
from .ops import Op


def _float_unary(op: Op) -> Any:
    def f(x: Any) -> Expr:
        e = as_expr(x)
        if not dt.is_float(e.dtype):
            if op in (Op.ABS, Op.SIGN):
                return Call(op, (e,), e.dtype)
            e = e.astype("float32")
        return Call(op, (e,), e.dtype)

    f.__name__ = op.name.lower()
    f.__doc__ = f"Elementwise `{op.name.lower()}` (float)."
    return f


exp = _float_unary(Op.EXP)
log = _float_unary(Op.LOG)
log1p = _float_unary(Op.LOG1P)
sqrt = _float_unary(Op.SQRT)
rsqrt = _float_unary(Op.RSQRT)
tanh = _float_unary(Op.TANH)
sigmoid = _float_unary(Op.SIGMOID)
erf = _float_unary(Op.ERF)
sin = _float_unary(Op.SIN)
cos = _float_unary(Op.COS)
atan = _float_unary(Op.ATAN)
abs = _float_unary(Op.ABS)  # noqa: A001
floor = _float_unary(Op.FLOOR)
ceil = _float_unary(Op.CEIL)
trunc = _float_unary(Op.TRUNC)
round = _float_unary(Op.ROUND)  # noqa: A001
sign = _float_unary(Op.SIGN)
tan = _float_unary(Op.TAN)
sinh = _float_unary(Op.SINH)
cosh = _float_unary(Op.COSH)
asin = _float_unary(Op.ASIN)
acos = _float_unary(Op.ACOS)
asinh = _float_unary(Op.ASINH)
acosh = _float_unary(Op.ACOSH)
atanh = _float_unary(Op.ATANH)


def atan2(y: Any, x: Any) -> Expr:
    """The angle of the point (x, y), in [-pi, pi] (`tvm.tirx.atan2`, `np.arctan2`)."""
    e = binary(Op.ATAN2, y, x)
    return e if dt.is_float(e.dtype) else binary(Op.ATAN2, as_expr(y).astype("float32"),
                                                  as_expr(x).astype("float32"))


def isnan(x: Any) -> Expr:
    """True where `x` is NaN (always False for integers)."""
    e = as_expr(x)
    return Call(Op.ISNAN, (e,), "bool") if dt.is_float(e.dtype) else const(False)


def _int_operands(name: str, *xs: Any) -> None:
    for x in xs:
        if not dt.is_int(as_expr(x).dtype):
            raise dt.ExprTypeError(f"te.{name} needs integer operands, got `{x}` of dtype {as_expr(x).dtype}")


def bitwise_and(a: Any, b: Any) -> Expr:
    _int_operands("bitwise_and", a, b)
    return binary(Op.BITWISE_AND, a, b)


def bitwise_or(a: Any, b: Any) -> Expr:
    _int_operands("bitwise_or", a, b)
    return binary(Op.BITWISE_OR, a, b)


def bitwise_xor(a: Any, b: Any) -> Expr:
    _int_operands("bitwise_xor", a, b)
    return binary(Op.BITWISE_XOR, a, b)


def bitwise_not(a: Any) -> Expr:
    _int_operands("bitwise_not", a)
    e = as_expr(a)
    return Call(Op.BITWISE_NOT, (e,), e.dtype)


def stop_gradient(x: Any) -> Expr:
    """`x` itself, but differentiation treats it as a constant (its adjoint is zero).

    For shifts that cancel mathematically, like the max subtracted in a stable
    softmax: without it the derived adjoint computes the max's gradient only to add
    up to zero (`jax.nn.softmax` does the same with `lax.stop_gradient`).
    """
    e = as_expr(x)
    return Call(Op.STOP_GRADIENT, (e,), e.dtype)


def power(a: Any, b: Any) -> Expr:
    return binary(Op.POW, a, b)


pow = power  # noqa: A001


def floordiv(a: Any, b: Any) -> Expr:
    return binary(Op.FLOORDIV, a, b)


def floormod(a: Any, b: Any) -> Expr:
    return binary(Op.FLOORMOD, a, b)


indexdiv, indexmod = floordiv, floormod


def cast(x: Any, dtype: str) -> Expr:
    return as_expr(x).astype(dtype)


def _cond(c: Any) -> Expr:
    e = as_expr(c)
    if e.dtype != "bool":
        raise dt.ExprTypeError(f"condition `{e}` has dtype {e.dtype}; compare it, e.g. `x > 0`")
    return e


def if_then_else(cond: Any, t: Any, f: Any) -> Expr:
    """`t` where `cond` holds else `f`; only the taken branch is evaluated (guards reads)."""
    c = _cond(cond)
    if isinstance(t, (int, float)) and not isinstance(f, (int, float)):
        fe = as_expr(f)
        te_ = as_expr(t, fe.dtype)
    else:
        te_ = as_expr(t)
        fe = as_expr(f, te_.dtype)
    d = dt.promote(te_.dtype, fe.dtype)
    return Call(Op.SELECT, (c, te_.astype(d), fe.astype(d)), d)


select = if_then_else


def all(*conds: Any) -> Expr:  # noqa: A001
    """Conjunction of conditions (`te.all`)."""
    cs = [_cond(c) for c in conds]
    out = cs[0] if cs else const(True)
    for c in cs[1:]:
        out = binary(Op.AND, out, c)
    return out


def any(*conds: Any) -> Expr:  # noqa: A001
    """Disjunction of conditions (`te.any`)."""
    cs = [_cond(c) for c in conds]
    out = cs[0] if cs else const(False)
    for c in cs[1:]:
        out = binary(Op.OR, out, c)
    return out


def logical_not(c: Any) -> Expr:
    return Call(Op.NOT, (_cond(c),), "bool")


def left_shift(a: Any, b: Any) -> Expr:
    return binary(Op.SHL, a, b)


def right_shift(a: Any, b: Any) -> Expr:
    return binary(Op.SHR, a, b)
