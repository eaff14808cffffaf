"""Helpers shared by the operator modules: axes, NumPy-style broadcasting, and
`SampleBuilder` for seeded registry samples kept away from kinks."""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from .. import te
from ..te import Expr, Tensor, TensorError
from ..te.expr import Const
from ..te.tensor import shape_str
from .registry import Sample, rng_for

Operand = Tensor | Expr | float | int



def normalize_axis(x: Tensor, axis: int, what: str = "axis") -> int:
    """`axis` as a non-negative int, or a TensorError naming `x`."""
    if not -x.ndim <= axis < x.ndim:
        raise TensorError(f"{what}={axis} is out of range for tensor {x.name!r} with {x.ndim} "
                          f"dims; pass an axis in [{-x.ndim}, {x.ndim})")
    return axis % x.ndim


def is_one(d: Expr) -> bool:
    return isinstance(d, Const) and d.value == 1


def const_dim(d: Expr, x: Tensor, what: str) -> int:
    if not isinstance(d, Const):
        raise TensorError(f"{what} of tensor {x.name!r} needs constant dims, got `{d}`")
    return int(d.value)


def numel(dims: Sequence[Expr], dtype: str) -> Expr:
    """The product of `dims` as a `dtype` scalar (folded to a constant when the dims are)."""
    sizes = [int(d.value) for d in dims if isinstance(d, Const)]
    if len(sizes) == len(dims):
        return te.const(float(math.prod(sizes)), dtype)
    out: Expr = te.const(1)
    for d in dims:
        out = out * d
    return out.astype(dtype)


def broadcast_shape(operands: Sequence[Operand]) -> tuple[Expr, ...]:
    """NumPy broadcasting of the tensor operands' shapes (scalars have shape ())."""
    shapes = [(o.name, o.shape) for o in operands if isinstance(o, Tensor)]
    nd = max((len(s) for _, s in shapes), default=0)
    out: list[Expr] = []
    for d in range(nd):
        dims = [(n, s[d - nd + len(s)]) for n, s in shapes if d - nd + len(s) >= 0]
        big = [(n, x) for n, x in dims if not is_one(x)]
        for n, x in big[1:]:
            if not x.same_as(big[0][1]):
                desc = ", ".join(f"{m!r} {shape_str(s)}" for m, s in shapes)
                raise TensorError(f"cannot broadcast tensor {n!r} against {big[0][0]!r}: dim "
                                  f"{x} vs {big[0][1]} (shapes {desc}); make the dims equal or 1")
        out.append(big[0][1] if big else te.const(1))
    return tuple(out)


def broadcast_read(x: Operand, idx: Sequence[Expr]) -> Any:
    """Read `x` at output index `idx` under right-aligned broadcasting (dims of 1 read 0)."""
    if not isinstance(x, Tensor):
        return x
    tail = idx[len(idx) - x.ndim:] if x.ndim else ()
    return x[tuple(te.const(0) if is_one(d) else i for d, i in zip(x.shape, tail, strict=True))]


def broadcast_compute(fn: Callable[..., Any], operands: Sequence[Operand], name: str) -> Tensor:
    """`out[i] = fn(*operands[i])` with NumPy broadcasting; scalars pass through."""
    if not any(isinstance(o, Tensor) for o in operands):
        raise TensorError(f"{name}: at least one operand must be a tensor")
    shape = broadcast_shape(operands)
    return te.compute(shape, lambda *i: fn(*(broadcast_read(o, i) for o in operands)), name=name)


def map_compute(fn: Callable[[Expr], Any], x: Tensor, name: str) -> Tensor:
    """`out[i] = fn(x[i])`."""
    return te.compute(x.shape, lambda *i: fn(x[i]), name=name)


def insert_at(idx: Sequence[Expr], pos: int, *vals: Expr) -> tuple[Expr, ...]:
    return (*idx[:pos], *vals, *idx[pos:])


def drop_at(idx: Sequence[Expr], pos: int) -> tuple[Expr, ...]:
    return (*idx[:pos], *idx[pos + 1:])


def away(rng: np.random.Generator, shape: Sequence[int], lo: float, hi: float,
         avoid: Callable[[np.ndarray], np.ndarray] | Sequence[float] = (), gap: float = 0.1
         ) -> np.ndarray:
    """Uniform values in [lo, hi) at least `gap` away from the points `avoid` (or a distance fn)."""
    def dist(x: np.ndarray) -> np.ndarray:
        if callable(avoid):
            return avoid(x)
        pts = np.asarray(avoid, float)
        return np.min(np.abs(x[..., None] - pts), axis=-1) if pts.size else np.full(x.shape, np.inf)

    x = rng.uniform(lo, hi, shape)
    for _ in range(1000):
        bad = dist(x) < gap
        if not bad.any():
            return x
        x[bad] = rng.uniform(lo, hi, int(bad.sum()))
    raise RuntimeError("could not sample values away from the kinks")


def from_integers(x: np.ndarray) -> np.ndarray:
    return np.abs(x - np.round(x))


def from_half_integers(x: np.ndarray) -> np.ndarray:
    return np.abs(x - np.floor(x) - 0.5)


class SampleBuilder:
    """Collects placeholders and their seeded arrays for one registry sample."""

    def __init__(self, name: str, dtype: str) -> None:
        self.rng, self.dtype = rng_for(name), dtype
        self.inputs: list[Tensor] = []
        self.arrays: list[np.ndarray] = []
        self.diff: list[bool] = []

    def input(self, name: str, array: Any, differentiable: bool = True,
              dtype: str | None = None) -> Tensor:
        """A placeholder for `array`; float arrays take the sample dtype unless `dtype` says."""
        arr = np.asarray(array)
        d = dtype or (self.dtype if np.issubdtype(arr.dtype, np.floating) else str(arr.dtype))
        arr = arr.astype(d)
        t = te.placeholder(arr.shape, d, name)
        self.inputs.append(t)
        self.arrays.append(arr)
        self.diff.append(differentiable and np.issubdtype(arr.dtype, np.floating))
        return t

    def uniform(self, name: str, shape: Sequence[int], lo: float = -2.0, hi: float = 2.0,
                avoid: Any = (), gap: float = 0.1, differentiable: bool = True) -> Tensor:
        return self.input(name, away(self.rng, shape, lo, hi, avoid, gap), differentiable)

    def ints(self, name: str, shape: Sequence[int], lo: int, hi: int,
             dtype: str = "int32") -> Tensor:
        return self.input(name, self.rng.integers(lo, hi, shape), False, dtype)

    def sample(self, *outputs: Tensor | Sequence[Tensor]) -> Sample:
        outs: list[Tensor] = []
        for o in outputs:
            outs.extend([o] if isinstance(o, Tensor) else o)
        return Sample(tuple(self.inputs), tuple(outs), tuple(self.arrays), tuple(self.diff))


def erf_np(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)
