"""Reducers: the built-in sum/prod/max/min and user-defined `comm_reducer`s (tuples too)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..errors import TexprError
from . import dtype as dt
from .expr import Call, CommReducer, Expr, IterVar, Reduce, ReduceKind, Var, as_expr, const
from .ops import Op


def max_value(dtype: str) -> Expr:
    import numpy as np
    d = dt.check(dtype)
    return const(float("inf") if dt.is_float(d) else int(np.iinfo(d).max) if d != "bool" else True, d)


def min_value(dtype: str) -> Expr:
    import numpy as np
    d = dt.check(dtype)
    return const(float("-inf") if dt.is_float(d) else int(np.iinfo(d).min) if d != "bool" else False, d)


# where a two-value form exists: how to write it instead
_ELEMENTWISE = {n: f" (the elementwise {n} of two values is te.{n}(a, b), without axis=)"
                for n in ("max", "min")}


def _axes(axis: Any, name: str) -> tuple[IterVar, ...]:
    from .tensor import TensorError
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    if not axes:
        raise TensorError(f"te.{name}: axis= is empty; pass the te.reduce_axis (or a list of "
                          f"them) to reduce over")
    for a in axes:
        if isinstance(a, IterVar) and a.kind != "reduce":
            raise TensorError(f"te.{name}: axis {a.name!r} is a data axis of the compute (a lambda "
                              f"argument), not a reduction axis; reduce over a te.reduce_axis"
                              + _ELEMENTWISE.get(name, ""))
        if not isinstance(a, IterVar):
            raise TensorError(f"te.{name}: axis= must be reduce axes made with te.reduce_axis, "
                              f"got `{a}`" + _ELEMENTWISE.get(name, ""))
    return axes


def _is_axis_arg(axis: Any) -> bool:
    if isinstance(axis, (list, tuple)):
        return len(axis) > 0 and all(isinstance(a, IterVar) and a.kind == "reduce" for a in axis)
    return isinstance(axis, IterVar) and axis.kind == "reduce"


class Reducer:
    """A callable reducer: `r(expr, axis=k, where=cond, init=x)` reduces; `r(a, b)` combines."""

    def __init__(self, kind: ReduceKind, fcombine: Callable[..., Any], fidentity: Callable[..., Any],
                 name: str) -> None:
        self.kind, self.fcombine, self.fidentity, self.name = ReduceKind(kind), fcombine, fidentity, name
        self._made: dict[tuple[str, ...], CommReducer] = {}

    def make(self, dtypes: Sequence[str]) -> CommReducer:
        """The CommReducer for these dtypes (one per dtype tuple, so equal reductions compare equal)."""
        key = tuple(dtypes)
        if key not in self._made:
            self._made[key] = self._make(key)
        return self._made[key]

    def _make(self, dtypes: Sequence[str]) -> CommReducer:
        from .tensor import TensorError
        lhs = tuple(Var(f"x{i}" if len(dtypes) > 1 else "x", d) for i, d in enumerate(dtypes))
        rhs = tuple(Var(f"y{i}" if len(dtypes) > 1 else "y", d) for i, d in enumerate(dtypes))
        single = len(dtypes) == 1
        parts = []
        for what, fn, args, want in (
                ("fcombine", self.fcombine, (lhs[0], rhs[0]) if single else (lhs, rhs), "fcombine(x, y)"),
                ("fidentity", self.fidentity, tuple(dtypes), f"fidentity({', '.join(map(repr, dtypes))})")):
            try:
                got = fn(*args)
            except TexprError:
                raise
            except TypeError as e:  # the user's function has the wrong signature
                raise TensorError(f"te.comm_reducer {self.name!r}: calling {want} failed ({e}); "
                                  f"fcombine takes two values (two tuples for a tuple reducer) and "
                                  f"fidentity one dtype per reduced expression") from e
            got = (got,) if single else tuple(got) if isinstance(got, (tuple, list)) else (got,)
            if len(got) != len(dtypes):
                raise TensorError(f"te.comm_reducer {self.name!r}: {what} returned {len(got)} values "
                                  f"for {len(dtypes)} reduced expressions; return one per expression")
            parts.append(tuple(as_expr(r, d).astype(d) for r, d in zip(got, dtypes, strict=True)))
        return CommReducer(self.kind, lhs, rhs, parts[0], parts[1], self.name)

    def __call__(self, expr: Any, b: Any = None, /, where: Any = None, init: Any = None,
                 *args: Any, axis: Any = None) -> Any:
        """`r(expr, axis=k, where=cond, init=x)` reduces over reduce axes k (`r(expr, k)` too);
        `r(a, b)` combines two values.  A keyword `axis=` always reduces, so a data axis or an
        expression there is an error, not the elementwise form."""
        if axis is not None:
            if b is not None:
                from .tensor import TensorError
                raise TensorError(f"te.{self.name}: got both a second operand and axis=; pass the "
                                  f"reduce axes once")
            _axes(axis, self.name)
        elif b is not None and not isinstance(b, (IterVar, list, tuple)) and \
                (where is not None or args):  # te.max(a, b, c): not a where=
            raise dt.ExprTypeError(f"te.{self.name} of more than two values: its elementwise form "
                                   f"takes two (te.{self.name}(a, b)); nest it, "
                                   f"te.{self.name}(te.{self.name}(a, b), c)")
        axis = b if axis is None else axis
        if isinstance(axis, (list, tuple)) or (isinstance(axis, IterVar) and (
                axis.kind == "reduce" or self.kind not in (ReduceKind.MAX, ReduceKind.MIN))):
            _axes(axis, self.name)  # a reduction; te.max(x, i) / te.min stay elementwise
        if axis is not None and not _is_axis_arg(axis) and where is None and init is None:
            # elementwise form: te.max(a, b)
            b = axis if isinstance(axis, Expr) else None
            ea = as_expr(expr, b.dtype if b is not None else None)
            return self._combine2(ea, as_expr(axis, ea.dtype))
        if axis is None:
            raise dt.ExprTypeError(f"te.{self.name} needs axis= (a reduce_axis or a list of them), "
                            f"or two expressions for the elementwise form")
        multi = isinstance(expr, (tuple, list))
        srcs = tuple(as_expr(x) for x in (expr if multi else (expr,)))
        bools = [s for s in srcs if s.dtype == "bool"]
        if bools and self.kind is ReduceKind.SUM:  # a bool sum is True/False, not a count
            raise dt.ExprTypeError(f"te.sum of the condition `{bools[0]}` (dtype bool) would be a "
                                   f"logical or, not a count; cast it to count: "
                                   f"te.sum(({bools[0]}).astype(\"int32\"), axis=...) (te.max over "
                                   f"the axis is 'any')")
        comb = self.make([s.dtype for s in srcs])
        cond = const(True) if where is None else as_expr(where)
        if cond.dtype != "bool":
            raise dt.ExprTypeError(f"te.{self.name}: where= must be a condition (bool), got `{cond}` of "
                                   f"dtype {cond.dtype}; compare it, e.g. `x > 0`")
        inits: tuple[Expr, ...] = ()
        if init is not None:
            iv = init if isinstance(init, (tuple, list)) else (init,)
            if len(iv) != len(srcs):
                from .tensor import TensorError
                raise TensorError(f"te.{self.name}: init= has {len(iv)} values for {len(srcs)} "
                                  f"reduced expressions; pass one per expression")
            inits = tuple(as_expr(x, s.dtype).astype(s.dtype) for x, s in zip(iv, srcs, strict=True))
        axes = _axes(axis, self.name)
        outs = tuple(Reduce(comb, srcs, axes, cond, i, s.dtype, inits) for i, s in enumerate(srcs))
        return outs if multi else outs[0]

    def _combine2(self, a: Expr, b: Expr) -> Expr:
        from .visit import substitute
        comb = self.make([dt.promote(a.dtype, b.dtype)])
        d = comb.lhs[0].dtype
        return substitute(comb.result[0], {comb.lhs[0]: a.astype(d), comb.rhs[0]: b.astype(d)})


def comm_reducer(fcombine: Callable[..., Any], fidentity: Callable[..., Any],
                 name: str = "reduce") -> Reducer:
    """A custom commutative reducer, as `tvm.te.comm_reducer`.

    `fcombine(x, y)` combines two values (two tuples for a tuple reducer) and
    `fidentity(*dtypes)` returns the identity; e.g. argmax over `(index, value)`.
    """
    return Reducer(ReduceKind.CUSTOM, fcombine, fidentity, name)


sum = Reducer(ReduceKind.SUM, lambda x, y: x + y, lambda t: const(0, t), "sum")  # noqa: A001
prod = Reducer(ReduceKind.PROD, lambda x, y: x * y, lambda t: const(1, t), "prod")
max = Reducer(ReduceKind.MAX, lambda x, y: Call(Op.MAX, (x, y), x.dtype), min_value, "max")  # noqa: A001
min = Reducer(ReduceKind.MIN, lambda x, y: Call(Op.MIN, (x, y), x.dtype), max_value, "min")  # noqa: A001

__all__ = ["Reducer", "comm_reducer", "sum", "prod", "max", "min", "max_value", "min_value"]
