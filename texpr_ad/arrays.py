"""Arrays at the call: converting what a user passes (reads that do not fit an array's shape are
rejected when the compute is defined, by te/bounds.py).

Shared by `Kernel.__call__` (texpr_ad/kernels/kernel.py) and `custom_op` (texpr_ad/api.py).
Anything `np.asarray` accepts is an array (NumPy arrays, nested lists, CPU torch tensors
without grad); anything else is a `ArrayArgumentError` naming the argument and the fix.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import TexprError
from .te.tensor import Tensor, shape_str
from .te.expr import Const


class ArrayArgumentError(TexprError, ValueError):
    """An argument is not an array, or does not fit the definition it is passed to."""


def as_array(x: Any, what: str) -> np.ndarray:
    """`np.asarray(x)` in native byte order, or an ArrayArgumentError naming `what`."""
    if isinstance(x, np.ndarray):
        a = x
    else:
        if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor: say how to hand it over
            hint = "pass x.detach().cpu().numpy()"
        else:
            hint = "pass a NumPy array"
        try:
            a = np.asarray(x)
        except Exception as e:
            raise ArrayArgumentError(f"{what} is not an array ({type(x).__name__}: {e}); {hint}") \
                from None
        if a.dtype == object:
            raise ArrayArgumentError(f"{what} is not an array of numbers ({type(x).__name__} "
                                     f"converts to dtype object); {hint}")
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return a


def static_shape(t: Tensor) -> tuple[int, ...] | None:
    """The shape of `t` when every dim is a constant, else None."""
    if all(isinstance(s, Const) for s in t.shape):
        return tuple(int(s.value) for s in t.shape)  # type: ignore[attr-defined]
    return None


__all__ = ["ArrayArgumentError", "as_array", "shape_str", "static_shape"]
