"""Arrays at the call: converting what a user passes (reads that do not fit an array's shape are
rejected when the compute is defined, by te/bounds.py).

Shared by `Kernel.__call__` (texpr_ad/kernels/kernel.py) and `custom_op` (texpr_ad/api.py).
Anything `np.asarray` accepts is an array (NumPy arrays, nested lists, CPU torch tensors
without grad); anything else is a `ArrayArgumentError` naming the argument and the fix.

The framework front ends (texpr_ad/torch.py, texpr_ad/jax.py) are stricter: `op_arguments` and
`op_dtype` are the one place saying what their ops take (tensors and Python numbers,
positionally, in a dtype the kernels compute in); anything else is an `OpArgumentError`.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .errors import TexprError
from .te.tensor import Tensor, shape_str
from .te.expr import Call, Const, Expr, Var
from .te.ops import Op


class ArrayArgumentError(TexprError, ValueError):
    """An argument is not an array, or does not fit the definition it is passed to."""


class OpArgumentError(TexprError, TypeError):
    """A `texpr_ad.torch`/`texpr_ad.jax` op got an argument it cannot take: not a tensor or a
    Python number (a list, tuple, None, or a NumPy array for torch), a keyword argument, or a
    dtype the kernels do not compute in (float16, bfloat16, complex)."""


# dtypes the kernels compute in (te's float16 has no backend), and the fix for the others
KERNEL_DTYPES = ("float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
_DTYPE_FIX = ((("float", "bfloat"), "compute in float32 and cast the result back: {to32}"),
              (("complex",), "pass the real and imaginary parts as two float tensors"),
              (("",), "convert it to one of " + ", ".join(KERNEL_DTYPES)))


def op_arguments(op: str, args: Sequence[Any], kwargs: Mapping[str, Any],
                 names: Callable[[int], list[str]], is_tensor: Callable[[Any], bool], tensor: str,
                 convert: str) -> None:
    """Refuse keyword arguments and anything `is_tensor` rejects, naming the argument (from
    `names(len(args))`, called only then: the check is a type test per argument, and holds no
    state that torch.compile would guard on).

    The one check of what a front-end op takes.  `tensor` says what is taken ("torch tensor
    or Python number"), `convert` how to make a tensor."""
    if kwargs:
        raise OpArgumentError(f"{op}: got keyword argument(s) {', '.join(map(repr, kwargs))}; pass "
                              f"the arguments positionally, in the order of the te function's "
                              f"parameters")
    bad = next((k for k, a in enumerate(args) if not is_tensor(a)), None)
    if bad is not None:
        a, n = args[bad], names(len(args))[bad]
        kind = type(a).__qualname__ if type(a).__module__ == "builtins" else \
            f"{type(a).__module__}.{type(a).__qualname__}"
        raise OpArgumentError(f"{op}: argument {bad} ({n!r}) is of type {kind}, not a {tensor}; "
                              f"convert it to a tensor ({convert})")


def op_dtype(op: str, what: str, dtype: str, to32: str) -> None:
    """Refuse a dtype the kernels do not compute in (`dtype` as NumPy names it: "bfloat16"),
    naming `what` ("argument 0 ('x')") and the fix; `to32` is the float32 round trip written
    in the front end's terms."""
    if dtype not in KERNEL_DTYPES:
        fix = next(f for p, f in _DTYPE_FIX if dtype.startswith(p)).format(to32=to32)
        raise OpArgumentError(f"{op}: {what} has dtype {dtype}, which texpr_ad kernels do not "
                              f"compute in; {fix}")


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


def shape_env(tensors: Sequence[Tensor], shapes: Sequence[Sequence[Any]]) -> dict[Var, Any]:
    """The symbolic dims (`te.var`) of the placeholders `tensors` bound to the sizes in
    `shapes` (ints, or a framework's symbolic sizes: torch SymInts, JAX dim expressions)."""
    return {d: n for t, s in zip(tensors, shapes, strict=True)
            for d, n in zip(t.shape, s, strict=True) if isinstance(d, Var)}


_SHAPE_OPS: dict[Op, Callable[..., Any]] = {
    Op.ADD: operator.add, Op.SUB: operator.sub, Op.MUL: operator.mul, Op.NEG: operator.neg,
    Op.FLOORDIV: operator.floordiv, Op.DIV: operator.floordiv, Op.FLOORMOD: operator.mod,
    Op.MIN: min, Op.MAX: max}


def eval_shape(shape: Sequence[Expr], env: Mapping[Var, Any]) -> tuple[Any, ...]:
    """A te shape with its symbolic dims bound in `env` (see `shape_env`), by Python's
    operators, so that torch SymInts and JAX dim expressions give symbolic sizes."""
    def ev(e: Expr) -> Any:
        if isinstance(e, Const):
            return int(e.value)
        if isinstance(e, Var):
            return env[e]
        if isinstance(e, Call) and e.op in _SHAPE_OPS:
            return _SHAPE_OPS[e.op](*map(ev, e.args))
        raise ArrayArgumentError(f"cannot compute the size `{e}` from the inputs' sizes; give the "
                                 f"te function outputs shaped by its inputs' shapes")
    return tuple(ev(e) for e in shape)


__all__ = ["ArrayArgumentError", "KERNEL_DTYPES", "OpArgumentError", "as_array", "op_arguments",
           "eval_shape", "op_dtype", "shape_env", "shape_str", "static_shape"]
