"""Level 4 operators: broadcast comparisons, logic and shifts, reductions, argmax, cumsum, slicing.

TOPI style: a reduction is the whole body of its stage; argmax/argmin are
tuple `comm_reducer`s over (index, value) pairs; composite reductions (mean,
variance, logsumexp) are chains of such stages.
"""
from __future__ import annotations

import builtins
from typing import Any, Callable, Sequence

import numpy as np

from .. import te
from ..te import Tensor, TensorError
from .registry import Sample, register, rng_for

# -- helpers ---------------------------------------------------------------------------------


def _dims(t: Tensor) -> tuple[Any, ...]:
    return tuple(s.value if isinstance(s, te.Const) else s for s in t.shape)


def _axes(t: Tensor, axis: int | Sequence[int] | None, what: str) -> list[int]:
    nd = t.ndim
    raw = list(range(nd)) if axis is None else [axis] if isinstance(axis, int) else list(axis)
    for a in raw:
        if not -nd <= a < nd:
            raise TensorError(f"{what}: axis {a} is out of range for tensor {t.name!r} "
                              f"with {nd} dims")
    out = sorted({a % nd for a in raw})
    if len(out) != len(raw):
        raise TensorError(f"{what}: repeated axis in {axis!r} for tensor {t.name!r}")
    return out


def reduce_map(data: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False,
               what: str = "reduce"
               ) -> tuple[tuple[Any, ...], Callable[[Sequence[Any]], tuple[Any, ...]],
                          list[te.IterVar]]:
    """(output shape, output index -> input index using the reduce axes, the reduce axes)."""
    axes = _axes(data, axis, what)
    shape = _dims(data)
    raxes = [te.reduce_axis((0, shape[a]), name=f"k{a}") for a in axes]
    out_shape = tuple(1 if a in axes else s for a, s in enumerate(shape)
                      if keepdims or a not in axes)

    def to_input(idx: Sequence[Any]) -> tuple[Any, ...]:
        it, rit, src = iter(idx), iter(raxes), []
        for a in range(data.ndim):
            if a in axes:
                if keepdims:
                    next(it)
                src.append(next(rit))
            else:
                src.append(next(it))
        return tuple(src)

    return out_shape, to_input, raxes


def _keep_index(src: Sequence[Any], axes: Sequence[int]) -> tuple[Any, ...]:
    """Index into a keepdims reduction result from an input index."""
    return tuple(0 if a in axes else x for a, x in enumerate(src))


def broadcast_shape(a: Tensor, b: Tensor, what: str) -> tuple[Any, ...]:
    sa, sb = _dims(a), _dims(b)
    n = builtins.max(len(sa), len(sb))
    pa, pb = (1,) * (n - len(sa)) + sa, (1,) * (n - len(sb)) + sb
    out = []
    for d, (x, y) in enumerate(zip(pa, pb, strict=True)):
        if isinstance(x, int) and isinstance(y, int) and x != y and 1 not in (x, y):
            raise TensorError(f"{what}: shapes {sa} of {a.name!r} and {sb} of {b.name!r} do not "
                              f"broadcast (dim {d}: {x} vs {y})")
        out.append(y if isinstance(x, int) and x == 1 else x)
    return tuple(out)


def _bcast_index(t: Tensor, out_shape: Sequence[Any], idx: Sequence[Any]) -> tuple[Any, ...]:
    shape = _dims(t)
    lead = len(out_shape) - len(shape)
    return tuple(0 if s == 1 and not (isinstance(o, int) and o == 1) else i
                 for s, o, i in zip(shape, out_shape[lead:], idx[lead:], strict=True))


def broadcast_binary(a: Tensor, b: Tensor, f: Callable[[Any, Any], Any], name: str) -> Tensor:
    """`f(a, b)` elementwise with NumPy broadcasting."""
    shape = broadcast_shape(a, b, name)
    return te.compute(shape, lambda *i: f(a[_bcast_index(a, shape, i)],
                                          b[_bcast_index(b, shape, i)]), name=name)


def _need_dtype(ts: Sequence[Tensor], ok: Callable[[str], bool], kind: str, what: str) -> None:
    for t in ts:
        if not ok(t.dtype):
            raise TensorError(f"{what}: tensor {t.name!r} has dtype {t.dtype}, needs {kind}; "
                              f"cast it with .astype in a compute first")


# -- elementwise comparisons, logic and shifts ------------------------------------------------

def left_shift(a: Tensor, b: Tensor) -> Tensor:
    """a << b on integers (broadcasting)."""
    _need_dtype((a, b), te.dtype.is_int, "an integer dtype", "left_shift")
    return broadcast_binary(a, b, lambda x, y: x << y, "T_left_shift")


def right_shift(a: Tensor, b: Tensor) -> Tensor:
    """a >> b on integers (arithmetic shift for signed dtypes, as NumPy)."""
    _need_dtype((a, b), te.dtype.is_int, "an integer dtype", "right_shift")
    return broadcast_binary(a, b, lambda x, y: x >> y, "T_right_shift")


def equal(a: Tensor, b: Tensor) -> Tensor:
    return broadcast_binary(a, b, lambda x, y: x.eq(y), "T_equal")


def not_equal(a: Tensor, b: Tensor) -> Tensor:
    return broadcast_binary(a, b, lambda x, y: x.ne(y), "T_not_equal")


def greater(a: Tensor, b: Tensor) -> Tensor:
    return broadcast_binary(a, b, lambda x, y: x > y, "T_greater")


def greater_equal(a: Tensor, b: Tensor) -> Tensor:
    return broadcast_binary(a, b, lambda x, y: x >= y, "T_greater_equal")


def less(a: Tensor, b: Tensor) -> Tensor:
    return broadcast_binary(a, b, lambda x, y: x < y, "T_less")


def less_equal(a: Tensor, b: Tensor) -> Tensor:
    return broadcast_binary(a, b, lambda x, y: x <= y, "T_less_equal")


def logical_and(a: Tensor, b: Tensor) -> Tensor:
    _need_dtype((a, b), lambda d: d == "bool", "bool", "logical_and")
    return broadcast_binary(a, b, lambda x, y: x & y, "T_logical_and")


def logical_or(a: Tensor, b: Tensor) -> Tensor:
    _need_dtype((a, b), lambda d: d == "bool", "bool", "logical_or")
    return broadcast_binary(a, b, lambda x, y: x | y, "T_logical_or")


def logical_not(a: Tensor) -> Tensor:
    _need_dtype((a,), lambda d: d == "bool", "bool", "logical_not")
    return te.compute(a.shape, lambda *i: te.logical_not(a[i]), name="T_logical_not")


# -- reductions ------------------------------------------------------------------------------

def _reduce(data: Tensor, axis: Any, keepdims: bool, reducer: Any, name: str) -> Tensor:
    shape, to_input, raxes = reduce_map(data, axis, keepdims, name)
    return te.compute(shape, lambda *i: reducer(data[to_input(i)], axis=raxes), name=name)


def sum(data: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Sum over `axis` (an int, a tuple, or None for all); bool data is counted in int64, as
    NumPy sums it (te.sum refuses a bool sum: it would be a logical or)."""
    return _reduce(data, axis, keepdims, lambda x, axis: te.sum(_counted(x), axis=axis), "T_sum")


def _counted(x: Any) -> Any:
    """A bool value as the int64 0/1 that a sum counts; other values as they are."""
    return x.astype("int64") if x.dtype == "bool" else x


def max(data: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Max over `axis` (gradient split evenly among tied maxima)."""
    return _reduce(data, axis, keepdims, te.max, "T_max")


def min(data: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Min over `axis` (gradient split evenly among tied minima)."""
    return _reduce(data, axis, keepdims, te.min, "T_min")


def prod(data: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Product over `axis`."""
    return _reduce(data, axis, keepdims, te.prod, "T_prod")


def _count(data: Tensor, axis: Any) -> Any:
    shape = _dims(data)
    n: Any = 1
    for a in _axes(data, axis, "mean"):
        n = n * shape[a]
    return n.astype(data.dtype) if isinstance(n, te.Expr) else float(n)


def mean(data: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Sum over `axis` divided by the number of reduced elements."""
    total = sum(data, axis, keepdims)
    n = _count(data, axis)
    return te.compute(total.shape, lambda *i: total[i] / n, name="T_mean")


def variance(data: Tensor, axis: Any = None, keepdims: bool = False,
             unbiased: bool = False) -> Tensor:
    """mean((x - mean(x))^2) over `axis` (divide by N - 1 when `unbiased`), two-pass."""
    axes = _axes(data, axis, "variance")
    mu = mean(data, axes, keepdims=True)
    shape, to_input, raxes = reduce_map(data, axes, keepdims, "variance")
    n = _count(data, axes)
    denom = n - 1.0 if unbiased else n

    def body(*i: Any) -> Any:
        src = to_input(i)
        d = data[src] - mu[_keep_index(src, axes)]
        return te.sum(d * d, axis=raxes)

    sq = te.compute(shape, body, name="T_sqdev_sum")
    return te.compute(shape, lambda *i: sq[i] / denom, name="T_variance")


def std(data: Tensor, axis: Any = None, keepdims: bool = False, unbiased: bool = False) -> Tensor:
    """sqrt(variance(data, axis))."""
    var = variance(data, axis, keepdims, unbiased)
    return te.compute(var.shape, lambda *i: te.sqrt(var[i]), name="T_std")


def logsumexp(data: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """log(sum(exp(x))) over `axis`, stabilized: m + log(sum(exp(x - m))), m = max(x).

    Any finite m gives the same value, so m is a `stop_gradient` in both places it is used; an
    infinite max shifts by 0 instead (as PyTorch), so a row of -inf gives -inf and a row holding
    +inf gives +inf, not inf - inf = NaN.
    """
    axes = _axes(data, axis, "logsumexp")
    big = max(data, axes, keepdims=True)
    m = te.compute(big.shape, lambda *i: te.if_then_else(
        te.abs(big[i]) < te.max_value(data.dtype), big[i], te.const(0.0, data.dtype)),
        name="T_max_finite")
    shape, to_input, raxes = reduce_map(data, axes, keepdims, "logsumexp")
    s = te.compute(shape, lambda *i: te.sum(
        te.exp(data[to_input(i)] - te.stop_gradient(m[_keep_index(to_input(i), axes)])), axis=raxes),
        name="T_sumexp")

    def body(*i: Any) -> Any:
        it = iter(i)  # without keepdims the output index holds only the kept dims
        mi = i if keepdims else tuple(0 if a in axes else next(it) for a in range(data.ndim))
        return te.log(s[i]) + te.stop_gradient(m[mi])

    return te.compute(shape, body, name="T_logsumexp")


def arg_reducer(kind: str) -> te.Reducer:
    """(index, value) reducer; ties keep the smaller index (NumPy/PyTorch first occurrence)."""
    def fcombine(x: Any, y: Any) -> tuple[Any, Any]:
        (li, lv), (ri, rv) = x, y
        better = lv > rv if kind == "max" else lv < rv
        keep = better | ((lv == rv) & (li < ri))
        return te.if_then_else(keep, li, ri), te.if_then_else(keep, lv, rv)

    def fidentity(ti: str, tv: str) -> tuple[Any, Any]:
        return te.const(-1, ti), te.min_value(tv) if kind == "max" else te.max_value(tv)

    return te.comm_reducer(fcombine, fidentity, name=f"arg{kind}")


_ARGMAX, _ARGMIN = arg_reducer("max"), arg_reducer("min")


def _argext(data: Tensor, axis: int, keepdims: bool, kind: str) -> Tensor:
    if not isinstance(axis, int):
        raise TensorError(f"arg{kind}: axis must be one int, got {axis!r}")
    shape, to_input, (k,) = reduce_map(data, axis, keepdims, f"arg{kind}")
    red = _ARGMAX if kind == "max" else _ARGMIN
    return te.compute(shape, lambda *i: red((k, data[to_input(i)]), axis=k)[0], name=f"T_arg{kind}")


def argmax(data: Tensor, axis: int, keepdims: bool = False) -> Tensor:
    """int32 index of the maximum along `axis` (first one on ties)."""
    return _argext(data, axis, keepdims, "max")


def argmin(data: Tensor, axis: int, keepdims: bool = False) -> Tensor:
    """int32 index of the minimum along `axis` (first one on ties)."""
    return _argext(data, axis, keepdims, "min")


def cumsum(data: Tensor, axis: int = 0, exclusive: bool = False) -> Tensor:
    """out[.., i, ..] = sum_{k <= i} data[.., k, ..] (k < i when `exclusive`), as a reduction;
    bool data counted in int64, as NumPy's cumsum does."""
    (a,) = _axes(data, axis, "cumsum")
    k = te.reduce_axis((0, _dims(data)[a]), name="k")

    def body(*i: Any) -> Any:
        src = tuple(k if d == a else x for d, x in enumerate(i))
        return te.sum(_counted(data[src]), axis=k, where=(k < i[a]) if exclusive else (k <= i[a]))

    return te.compute(data.shape, body, name="T_cumsum")


# -- slicing and broadcasting ----------------------------------------------------------------

def strided_slice(data: Tensor, begin: Sequence[int | None], end: Sequence[int | None],
                  strides: Sequence[int] | None = None) -> Tensor:
    """`data[b0:e0:s0, b1:e1:s1, ...]` with Python slice semantics (negative steps too)."""
    shape = _dims(data)
    n = len(begin)
    strides = list(strides) if strides is not None else [1] * n
    if not (len(end) == n == len(strides) and n <= data.ndim):
        raise TensorError(f"strided_slice of {data.name!r}: begin, end and strides need equal "
                          f"lengths <= {data.ndim}, got {begin}, {end}, {strides}")
    starts, steps, out_shape = [], [], []
    for d, s in enumerate(shape):
        if d >= n:
            starts.append(0)
            steps.append(1)
            out_shape.append(s)
            continue
        if not isinstance(s, int):  # a symbolic dim: from a start >= 0 to its end, stride > 0
            b, st = begin[d] or 0, strides[d]
            if end[d] is not None or b < 0 or st <= 0:
                raise TensorError(f"strided_slice: dim {d} of {data.name!r} is symbolic ({s}): "
                                  f"slice it from a start >= 0 to its end (end None) with a "
                                  f"positive stride, or make the dim static")
            starts.append(b)
            steps.append(st)
            rest = s - b if b else s
            out_shape.append(s if (b, st) == (0, 1) else te.max((rest + st - 1) // st, 0))
            continue
        if strides[d] == 0:
            raise TensorError(f"strided_slice of {data.name!r}: stride of dim {d} is 0")
        start, stop, step = slice(begin[d], end[d], strides[d]).indices(s)
        starts.append(start)
        steps.append(step)
        out_shape.append(len(range(start, stop, step)))
    return te.compute(tuple(out_shape), lambda *i: data[tuple(
        x if (b, st) == (0, 1) else b + x * st if st != 1 else b + x
        for x, b, st in zip(i, starts, steps, strict=True))], name="T_strided_slice")


def broadcast_to(data: Tensor, shape: Sequence[int]) -> Tensor:
    """Broadcast `data` to `shape` with NumPy rules."""
    src = _dims(data)
    lead = len(shape) - len(src)
    if lead < 0 or any(s not in (1, o) for s, o in zip(src, shape[lead:], strict=True)):
        raise TensorError(f"broadcast_to: tensor {data.name!r} of shape {src} cannot broadcast to "
                          f"{tuple(shape)}")
    return te.compute(tuple(shape), lambda *i: data[_bcast_index(data, tuple(shape), i)],
                      name="T_broadcast_to")


# == registry ===================================================================================

def _ph(specs: Sequence[tuple[str, Sequence[int], str]]) -> tuple[Tensor, ...]:
    return tuple(te.placeholder(tuple(s), d, n) for n, s, d in specs)


def _distinct(rng: np.random.Generator, shape: Sequence[int], dtype: str) -> np.ndarray:
    size = int(np.prod(shape))
    vals = (rng.permutation(size) + 0.3 * rng.random(size)) * (4.0 / size) - 2.0
    return vals.reshape(shape).astype(dtype)


def _reg_float(name: str, shape: Sequence[int], fn: Callable[[Tensor], Tensor],
               reference: Callable[[np.ndarray], np.ndarray], notes: str = "",
               gen: Callable[[np.random.Generator, Sequence[int], str], np.ndarray] | None = None
               ) -> None:
    """A one-input float operator with a differentiable float output."""
    @register(name, "L4", lambda x: [np.asarray(reference(x))], notes=notes)
    def sample(dtype: str) -> Sample:
        rng = rng_for(name)
        (x,) = _ph([("data", shape, dtype)])
        arr = gen(rng, shape, dtype) if gen else rng.standard_normal(shape).astype(dtype)
        return Sample((x,), (fn(x),), (arr,), (True,))


# shifts: integer inputs, nothing differentiable
@register("left_shift", "L4", lambda a, b: [np.left_shift(a, b)],
          notes="int32, broadcasting (3,4) << (4,); no gradient (integer)")
def _left_shift(dtype: str) -> Sample:
    rng = rng_for("left_shift")
    a, b = _ph([("a", (3, 4), "int32"), ("b", (4,), "int32")])
    arrays = (rng.integers(-50, 50, (3, 4)).astype("int32"),
              rng.integers(0, 6, (4,)).astype("int32"))
    return Sample((a, b), (left_shift(a, b),), arrays, (False, False))


@register("right_shift", "L4", lambda a, b: [np.right_shift(a, b)],
          notes="int64, arithmetic shift for negatives (NumPy); no gradient (integer)")
def _right_shift(dtype: str) -> Sample:
    rng = rng_for("right_shift")
    a, b = _ph([("a", (3, 4), "int64"), ("b", (3, 4), "int64")])
    arrays = (rng.integers(-1000, 1000, (3, 4)), rng.integers(0, 8, (3, 4)))
    return Sample((a, b), (right_shift(a, b),), arrays, (False, False))


def _reg_compare(name: str, fn: Callable[[Tensor, Tensor], Tensor],
                 ref: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    @register(name, "L4", lambda a, b: [ref(a, b)],
              notes="bool output, broadcasting (3,4) vs (4,), some exact equalities; piecewise "
                    "constant: no gradient")
    def sample(dtype: str) -> Sample:
        rng = rng_for(name)
        a, b = _ph([("a", (3, 4), dtype), ("b", (4,), dtype)])
        av, bv = rng.standard_normal((3, 4)).astype(dtype), rng.standard_normal(4).astype(dtype)
        av[0, :2], av[2, 3] = bv[:2], bv[3]  # exact ties exercise ==, <=, >=
        return Sample((a, b), (fn(a, b),), (av, bv), (False, False))


for _n, _f, _r in [("equal", equal, np.equal), ("not_equal", not_equal, np.not_equal),
                   ("greater", greater, np.greater),
                   ("greater_equal", greater_equal, np.greater_equal),
                   ("less", less, np.less), ("less_equal", less_equal, np.less_equal)]:
    _reg_compare(_n, _f, _r)


def _reg_logic(name: str, fn: Callable[..., Tensor], ref: Callable[..., np.ndarray],
               nin: int) -> None:
    @register(name, "L4", lambda *a: [ref(*a)], notes="bool inputs and output; no gradient")
    def sample(dtype: str) -> Sample:
        rng = rng_for(name)
        specs = [("a", (3, 4), "bool"), ("b", (4,), "bool")][:nin]
        ins = _ph(specs)
        arrays = tuple(rng.random(s) < 0.5 for _, s, _ in specs)
        return Sample(ins, (fn(*ins),), arrays, (False,) * nin)


_reg_logic("logical_and", logical_and, np.logical_and, 2)
_reg_logic("logical_or", logical_or, np.logical_or, 2)
_reg_logic("logical_not", logical_not, np.logical_not, 1)


def _reg_arg(name: str, fn: Callable[..., Tensor], ref: Callable[..., np.ndarray]) -> None:
    @register(name, "L4", lambda x: [ref(x, axis=1).astype("int32")],
              notes="int32 output over axis 1 via an (index, value) comm_reducer; ties -> first "
                    "index; no gradient")
    def sample(dtype: str) -> Sample:
        (x,) = _ph([("data", (3, 5, 4), dtype)])
        return Sample((x,), (fn(x, 1),), (_distinct(rng_for(name), (3, 5, 4), dtype),), (False,))


_reg_arg("argmax", argmax, np.argmax)
_reg_arg("argmin", argmin, np.argmin)

_TIE = ("ties: texpr_ad splits the gradient evenly among tied extremes (JAX, PyTorch "
        "amax/amin); the sample has none")
_reg_float("sum", (3, 4, 5), lambda x: sum(x, (0, 2)), lambda x: x.sum(axis=(0, 2)),
           notes="axes (0, 2)")
_reg_float("max", (3, 5, 4), lambda x: max(x, 1), lambda x: x.max(axis=1), notes="axis 1; " + _TIE,
           gen=_distinct)
_reg_float("min", (3, 4, 5), lambda x: min(x, 2, keepdims=True),
           lambda x: x.min(axis=2, keepdims=True), notes="axis 2, keepdims; " + _TIE, gen=_distinct)
_reg_float("mean", (3, 4, 5), lambda x: mean(x, 1, keepdims=True),
           lambda x: x.mean(axis=1, keepdims=True), notes="axis 1, keepdims")


def _no_zero(rng: np.random.Generator, shape: Sequence[int], dtype: str) -> np.ndarray:
    return (rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)).astype(dtype)


def _with_zero(rng: np.random.Generator, shape: Sequence[int], dtype: str) -> np.ndarray:
    x = _no_zero(rng, shape, dtype)
    x[0, 2, 1] = 0.0                 # one zero in row (0, :, 1)
    x[2, 1, 3] = x[2, 4, 3] = 0.0    # two zeros in row (2, :, 3): gradient all zero
    return x


_reg_float("prod", (3, 5, 4), lambda x: prod(x, 1), lambda x: x.prod(axis=1),
           notes="axis 1; sample has no zeros", gen=_no_zero)
_reg_float("prod_with_zero", (3, 5, 4), lambda x: prod(x, 1), lambda x: x.prod(axis=1),
           notes="axis 1; rows with one and two exact zeros: the gradient must not divide by x",
           gen=_with_zero)
_reg_float("variance", (3, 5, 4), lambda x: variance(x, 1), lambda x: x.var(axis=1),
           notes="axis 1, biased (divide by N), two-pass")
_reg_float("std", (3, 5, 4), lambda x: std(x, (1, 2)), lambda x: x.std(axis=(1, 2)),
           notes="axes (1, 2), biased")


def _big_rows(rng: np.random.Generator, shape: Sequence[int], dtype: str) -> np.ndarray:
    x = rng.standard_normal(shape)
    x[0] += 800.0  # exp overflows without the max shift
    x[1] -= 800.0
    return x.astype(dtype)


def _np_logsumexp(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=1, keepdims=True)
    return (np.log(np.exp(x - m).sum(axis=1, keepdims=True)) + m)[:, 0]


_reg_float("logsumexp", (3, 5, 4), lambda x: logsumexp(x, 1), _np_logsumexp,
           notes="axis 1, max-shifted (rows near +-800 would overflow naively); the max's "
                 "gradient cancels exactly, so ties do not matter", gen=_big_rows)
_reg_float("cumsum", (3, 6), lambda x: cumsum(x, 1), lambda x: np.cumsum(x, axis=1),
           notes="axis 1, inclusive, as a sum with where= k <= i")
_reg_float("strided_slice", (6, 7, 4),
           lambda x: strided_slice(x, [0, 1, None], [6, 7, None], [2, 3, -1]),
           lambda x: x[0:6:2, 1:7:3, ::-1], notes="x[0:6:2, 1:7:3, ::-1]")
_reg_float("broadcast_to", (3, 1, 4), lambda x: broadcast_to(x, (2, 3, 5, 4)),
           lambda x: np.broadcast_to(x, (2, 3, 5, 4)), notes="(3, 1, 4) -> (2, 3, 5, 4)")
