"""Arrays at the call: converting what a user passes, and checking it against a definition.

Shared by `Kernel.__call__` (texpr_ad/kernels/build.py) and `custom_op` (texpr_ad/api.py).
Anything `np.asarray` accepts is an array (NumPy arrays, nested lists, CPU torch tensors
without grad); anything else is a `ArrayArgumentError` naming the argument and the fix.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .errors import TexprError
from .te.intervals import interval
from .te.tensor import ComputeOp, Tensor, _unguarded_reads, shape_str
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


def check_reads_fit(outputs: Sequence[Tensor], arrays: dict[Tensor, np.ndarray], op: str) -> None:
    """Every unguarded read of an array-bound placeholder whose index range is known from
    constant extents (`A[i, k]` with `k` in [0, 64)) must lie inside the array's shape."""
    from .te.dag import topo_order
    for t in topo_order(outputs):
        if not isinstance(t.op, ComputeOp):
            continue
        for body in t.op.body:
            for r in _unguarded_reads(body):
                a = arrays.get(r.tensor)
                if a is None:
                    continue
                for d, (ix, n) in enumerate(zip(r.indices, a.shape, strict=True)):
                    lo, hi = interval(ix)
                    if lo is None or hi is None or lo > hi or (0 <= lo and hi < n):
                        continue
                    fix = (f"pass an array with dim {d} >= {hi + 1}" if lo >= 0 else
                           "guard the read with te.if_then_else or fix the index")
                    raise ArrayArgumentError(
                        f"{op}: array {r.tensor.name!r} has shape {a.shape}, but {t.name!r} reads "
                        f"{r} with `{ix}` in [{lo}, {hi}] along dim {d} (size {n}); {fix}")


def static_shape(t: Tensor) -> tuple[int, ...] | None:
    """The shape of `t` when every dim is a constant, else None."""
    if all(isinstance(s, Const) for s in t.shape):
        return tuple(int(s.value) for s in t.shape)  # type: ignore[attr-defined]
    return None


__all__ = ["ArrayArgumentError", "as_array", "check_reads_fit", "shape_str", "static_shape"]
