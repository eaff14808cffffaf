"""Scalar dtypes of the IR and the promotion rule for mixed arithmetic."""
from __future__ import annotations

from ..errors import TexprError


class ExprTypeError(TexprError, TypeError):
    """A value of the wrong kind or dtype in a te definition: a non-expression operand or body,
    an unsupported dtype, a non-bool condition (the message names the value and the fix)."""


FLOATS = ("float16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8")
DTYPES = FLOATS + INTS + ("bool",)
INDEX = "int32"  # dtype of loop variables, as in TVM


def check(dtype: object) -> str:
    """Normalize a dtype given as a string or NumPy dtype; raise on anything else."""
    name = str(getattr(dtype, "name", dtype))
    if name not in DTYPES:
        raise ExprTypeError(f"unsupported dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    return name


NARROW = {"int8": (-128, 127), "int16": (-32768, 32767), "uint8": (0, 255)}
# a user's integer literal is checked against these (TVM's IntImm refuses 2**31 as an int32)
RANGES = {**NARROW, "int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}


def check_literal(value: int, dtype: str, ranges: dict[str, tuple[int, int]] = NARROW) -> int:
    """`value`, refused where a narrow integer dtype cannot hold it (as TVM refuses it); with
    `RANGES`, int32/int64 too (te.compute checks its bodies' literals so)."""
    lo, hi = ranges.get(dtype, (value, value))
    if lo <= value <= hi:
        return value
    if dtype == "int64":
        raise ExprTypeError(f"the constant {value} does not fit int64 ({lo}..{hi}), the widest "
                            f"integer dtype; compute in float64 (x.astype(\"float64\"))")
    wider = "int64" if dtype == "int32" else "int32"
    raise ExprTypeError(f"the constant {value} does not fit {dtype} ({lo}..{hi}); cast the {dtype} "
                        f"operand to a wider dtype first, e.g. x.astype(\"{wider}\") + {value}")


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def is_int(dtype: str) -> bool:
    return dtype in INTS


def promote(a: str, b: str) -> str:
    """Result dtype of arithmetic on `a` and `b`: float beats int beats bool, wider wins."""
    order = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
    return a if order.index(a) >= order.index(b) else b
