"""Elementwise, activation, normalization and softmax operators (TOPI role), with registry entries.

Each operator takes te tensors plus attributes and returns te tensors, written
as plain index expressions (no hand-written gradients).  Binary operators
broadcast NumPy-style (helpers in `common.py`).
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Sequence

import numpy as np

from .. import te
from ..te import Expr, Tensor, TensorError
from ..te.tensor import shape_str
from ..te.expr import Const, is_zero
from .registry import Sample, register

from .common import (Operand, SampleBuilder, erf_np, away, broadcast_compute, const_dim, drop_at,
                     from_half_integers, from_integers, insert_at, map_compute, normalize_axis,
                     numel)

# --------------------------------------------------------------------------------------------
# unary operators
# --------------------------------------------------------------------------------------------

def _unary(name: str, fn: Callable[[Expr], Any], doc: str) -> Callable[[Tensor], Tensor]:
    def op(x: Tensor) -> Tensor:
        return map_compute(fn, x, name)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


log = _unary("log", te.log, "Natural logarithm, elementwise.")
sqrt = _unary("sqrt", te.sqrt, "Square root, elementwise.")
rsqrt = _unary("rsqrt", te.rsqrt, "1 / sqrt(x), elementwise.")
exp = _unary("exp", te.exp, "Exponential, elementwise.")
sigmoid = _unary("sigmoid", te.sigmoid, "Logistic sigmoid 1 / (1 + exp(-x)).")
tanh = _unary("tanh", te.tanh, "Hyperbolic tangent, elementwise.")
erf = _unary("erf", te.erf, "Gauss error function, elementwise.")
negative = _unary("negative", lambda v: -v, "-x, elementwise.")
abs = _unary("abs", te.abs, "|x|, elementwise.")  # noqa: A001
relu = _unary("relu", lambda v: te.if_then_else(v <= 0, 0, v),
              "max(x, 0) written as select(x <= 0, 0, x): relu'(0) = 0, and relu(NaN) = NaN "
              "with relu'(NaN) = 1, as in PyTorch.")
silu = _unary("silu", lambda v: v * te.sigmoid(v), "x * sigmoid(x) (swish).")
floor = _unary("floor", te.floor, "Largest integer <= x (float result).")
ceil = _unary("ceil", te.ceil, "Smallest integer >= x (float result).")
trunc = _unary("trunc", te.trunc, "x rounded toward zero (float result).")
round = _unary("round", te.round, "x rounded half to even, as NumPy/PyTorch.")  # noqa: A001
sign = _unary("sign", te.sign, "-1, 0 or 1 by the sign of x (float result).")


def leaky_relu(x: Tensor, alpha: float = 0.01) -> Tensor:
    """x where x > 0 else alpha * x (NaN takes the alpha branch: slope alpha, as PyTorch)."""
    return map_compute(lambda v: te.if_then_else(v > 0, v, v * alpha), x, "leaky_relu")


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """alpha * (exp(x) - 1) where x <= 0 else x: slope alpha at 0, and NaN takes the x branch
    (elu(NaN) = NaN with slope 1), as PyTorch."""
    return map_compute(lambda v: te.if_then_else(v <= 0, alpha * (te.exp(v) - 1), v), x, "elu")


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: 0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation (approximate="tanh")."""
    if approximate == "none":
        return map_compute(lambda v: 0.5 * v * (1 + te.erf(v * (1 / math.sqrt(2)))), x, "gelu")
    if approximate == "tanh":
        c = math.sqrt(2 / math.pi)
        return map_compute(lambda v: 0.5 * v * (1 + te.tanh(c * (v + 0.044715 * (v * v * v)))),
                           x, "gelu_tanh")
    raise ValueError(f"gelu: approximate={approximate!r}; use 'none' or 'tanh'")


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (as PyTorch)."""
    def body(v: Expr) -> Expr:
        bv = v if beta == 1 else v * beta
        sp = te.log1p(te.exp(bv))
        return te.if_then_else(bv > threshold, v, sp if beta == 1 else sp * (1 / beta))

    return map_compute(body, x, "softplus")


def prelu(x: Tensor, alpha: Tensor, axis: int = 1) -> Tensor:
    """x where x > 0 else alpha[c] * x, with one slope per index c of `axis`."""
    ax = normalize_axis(x, axis)
    if alpha.ndim != 1 or not alpha.shape[0].same_as(x.shape[ax]):
        raise TensorError(f"prelu: slope tensor {alpha.name!r} must have shape ({x.shape[ax]},) "
                          f"to match axis {ax} of {x.name!r}")
    return te.compute(x.shape, lambda *i: te.if_then_else(x[i] > 0, x[i], alpha[i[ax]] * x[i]),
                      name="prelu")


def clip(x: Tensor, a_min: float, a_max: float) -> Tensor:
    """x clamped to [a_min, a_max]; select form, so the gradient is 1 on the closed interval.
    clip(NaN) = NaN with gradient 0 (torch.clamp): the NaN branch is a `stop_gradient`."""
    if a_min > a_max:
        raise ValueError(f"clip of {x.name!r}: a_min={a_min} > a_max={a_max}")

    def body(v: Expr) -> Expr:
        inside = te.if_then_else(v.eq(v), v, te.stop_gradient(v))
        return te.if_then_else(v < a_min, te.const(a_min, x.dtype),
                               te.if_then_else(v > a_max, te.const(a_max, x.dtype), inside))

    return map_compute(body, x, "clip")


# --------------------------------------------------------------------------------------------
# binary operators (NumPy broadcasting)
# --------------------------------------------------------------------------------------------

def _binary(name: str, fn: Callable[[Any, Any], Any], doc: str
            ) -> Callable[[Operand, Operand], Tensor]:
    def op(a: Operand, b: Operand) -> Tensor:
        return broadcast_compute(fn, (a, b), name)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


add = _binary("add", lambda a, b: a + b, "a + b with broadcasting.")
subtract = _binary("subtract", lambda a, b: a - b, "a - b with broadcasting.")
multiply = _binary("multiply", lambda a, b: a * b, "a * b with broadcasting.")
divide = _binary("divide", lambda a, b: a / b, "a / b (true division) with broadcasting.")
floor_mod = _binary("floor_mod", lambda a, b: a - te.floor(a / b) * b,
                    "a - floor(a / b) * b: the remainder takes the divisor's sign (np.mod).")
power = _binary("power", te.power, "a ** b with broadcasting.")
maximum = _binary("maximum", lambda a, b: te.max(a, b), "Elementwise max with broadcasting.")
minimum = _binary("minimum", lambda a, b: te.min(a, b), "Elementwise min with broadcasting.")


def where(condition: Tensor, x: Operand, y: Operand) -> Tensor:
    """x where `condition` (bool) holds else y, with broadcasting of all three."""
    if condition.dtype != "bool":
        raise TensorError(f"where: condition {condition.name!r} has dtype {condition.dtype}; "
                          "pass a bool tensor (e.g. compare first)")
    return broadcast_compute(te.if_then_else, (condition, x, y), "where")


def bias_add(x: Tensor, bias: Tensor, axis: int = 1) -> Tensor:
    """x + bias, with the 1-D `bias` laid along `axis` (TOPI nn.bias_add)."""
    ax = normalize_axis(x, axis)
    if bias.ndim != 1 or not bias.shape[0].same_as(x.shape[ax]):
        raise TensorError(f"bias_add: bias {bias.name!r} must have shape ({x.shape[ax]},) "
                          f"to match axis {ax} of {x.name!r}")
    return te.compute(x.shape, lambda *i: x[i] + bias[i[ax]], name="bias_add")


def dropout(x: Tensor, mask: Tensor, rate: float = 0.5) -> Tensor:
    """x * mask / (1 - rate); the 0/1 `mask` is an input (drawn by the caller)."""
    if not 0 <= rate < 1:
        raise ValueError(f"dropout of {x.name!r}: rate={rate} must be in [0, 1)")
    scale = 1.0 / (1.0 - rate)
    return broadcast_compute(lambda a, m: a * m.astype(x.dtype) * scale, (x, mask), "dropout")


# --------------------------------------------------------------------------------------------
# softmax and normalization
# --------------------------------------------------------------------------------------------

def _stable_max(x: Tensor, ax: int, name: str) -> Tensor:
    """max over `ax` (dropped), as a `stop_gradient`: softmax-like results do not depend on the
    shift (it cancels), so the adjoint need not differentiate the max to sum it to zero."""
    k = te.reduce_axis((0, x.shape[ax]), "k")
    return te.compute(drop_at(x.shape, ax),
                      lambda *i: te.stop_gradient(te.max(x[insert_at(i, ax, k)], axis=k)),
                      name=name + "_max")


def _max_and_sumexp(x: Tensor, ax: int, name: str) -> tuple[Tensor, Tensor]:
    """m = max over `ax`, s = sum over `ax` of exp(x - m) (both with `ax` dropped)."""
    m = _stable_max(x, ax, name)
    k = te.reduce_axis((0, x.shape[ax]), "k")
    s = te.compute(m.shape, lambda *i: te.sum(te.exp(x[insert_at(i, ax, k)] - m[i]), axis=k),
                   name=name + "_sumexp")
    return m, s


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along `axis` (max-subtracted, numerically stable).

    Stages as TOPI's `softmax`: max, e = exp(x - max), sum(e), e / sum: each exponential is
    computed once (the CPU planner keeps `e` as a per-row buffer).
    """
    ax = normalize_axis(x, axis)
    m = _stable_max(x, ax, "softmax")
    e = te.compute(x.shape, lambda *i: te.exp(x[i] - m[drop_at(i, ax)]), name="softmax_exp")
    k = te.reduce_axis((0, x.shape[ax]), "k")
    s = te.compute(m.shape, lambda *i: te.sum(e[insert_at(i, ax, k)], axis=k), name="softmax_expsum")
    return te.compute(x.shape, lambda *i: e[i] / s[drop_at(i, ax)], name="softmax")


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """x - max - log(sum(exp(x - max))) along `axis`."""
    ax = normalize_axis(x, axis)
    m, s = _max_and_sumexp(x, ax, "log_softmax")
    return te.compute(x.shape, lambda *i: x[i] - m[drop_at(i, ax)] - te.log(s[drop_at(i, ax)]),
                      name="log_softmax")


def _moments(x: Tensor, axes: Sequence[int], name: str) -> tuple[Tensor, Tensor]:
    """Mean and biased variance over `axes` (outputs drop those axes); two-pass."""
    keep = [d for d in range(x.ndim) if d not in axes]
    shape = tuple(x.shape[d] for d in keep)
    n = numel([x.shape[d] for d in axes], x.dtype)

    def full(i: Sequence[Expr], r: Sequence[Expr]) -> tuple[Expr, ...]:
        pos = dict(zip(keep, i, strict=True)) | dict(zip(axes, r, strict=True))
        return tuple(pos[d] for d in range(x.ndim))

    r1 = [te.reduce_axis((0, x.shape[d]), f"r{d}") for d in axes]
    mean = te.compute(shape, lambda *i: te.sum(x[full(i, r1)], axis=r1) / n, name=name + "_mean")
    r2 = [te.reduce_axis((0, x.shape[d]), f"r{d}") for d in axes]

    def sq(i: Sequence[Expr]) -> Expr:
        d = x[full(i, r2)] - mean[tuple(i)]
        return d * d

    var = te.compute(shape, lambda *i: te.sum(sq(i), axis=r2) / n, name=name + "_var")
    return mean, var


def _check_param(p: Tensor, x: Tensor, dims: Sequence[Expr], what: str) -> None:
    if p.ndim != len(dims) or not all(a.same_as(b) for a, b in zip(p.shape, dims, strict=True)):
        raise TensorError(f"{what}: parameter {p.name!r} has shape {shape_str(p.shape)} "
                          f"but {x.name!r} needs {shape_str(dims)}")


def batch_norm_train(x: Tensor, gamma: Tensor, beta: Tensor, axis: int = 1,
                     epsilon: float = 1e-5) -> Tensor:
    """Training-mode batch norm: normalize with the batch mean and biased variance over every
    axis but `axis`, then scale by gamma and shift by beta (the normalized tensor only)."""
    ax = normalize_axis(x, axis)
    for p in (gamma, beta):
        _check_param(p, x, (x.shape[ax],), "batch_norm_train")
    mean, var = _moments(x, [d for d in range(x.ndim) if d != ax], "batch_norm")
    return te.compute(x.shape, lambda *i: (x[i] - mean[i[ax]]) * te.rsqrt(var[i[ax]] + epsilon)
                      * gamma[i[ax]] + beta[i[ax]], name="batch_norm_train")


def batch_norm_infer(x: Tensor, gamma: Tensor, beta: Tensor, moving_mean: Tensor,
                     moving_var: Tensor, axis: int = 1, epsilon: float = 1e-5) -> Tensor:
    """Inference-mode batch norm with the given moving mean and variance."""
    ax = normalize_axis(x, axis)
    for p in (gamma, beta, moving_mean, moving_var):
        _check_param(p, x, (x.shape[ax],), "batch_norm_infer")
    return te.compute(x.shape, lambda *i: (x[i] - moving_mean[i[ax]])
                      * te.rsqrt(moving_var[i[ax]] + epsilon) * gamma[i[ax]] + beta[i[ax]],
                      name="batch_norm_infer")


def layer_norm(x: Tensor, gamma: Tensor, beta: Tensor, epsilon: float = 1e-5) -> Tensor:
    """Normalize over the trailing `gamma.ndim` axes (PyTorch normalized_shape = gamma.shape)."""
    k = gamma.ndim
    _check_param(gamma, x, x.shape[x.ndim - k:], "layer_norm")
    _check_param(beta, x, x.shape[x.ndim - k:], "layer_norm")
    mean, var = _moments(x, list(range(x.ndim - k, x.ndim)), "layer_norm")
    lead = x.ndim - k
    return te.compute(x.shape, lambda *i: (x[i] - mean[i[:lead]])
                      * te.rsqrt(var[i[:lead]] + epsilon) * gamma[i[lead:]] + beta[i[lead:]],
                      name="layer_norm")


def group_norm(x: Tensor, gamma: Tensor, beta: Tensor, num_groups: int,
               epsilon: float = 1e-5) -> Tensor:
    """Group norm of x (N, C, *spatial): statistics per (n, group of C // num_groups channels)."""
    if x.ndim < 2:
        raise TensorError(f"group_norm: {x.name!r} needs shape (N, C, ...), got {x.ndim} dims")
    c = const_dim(x.shape[1], x, "group_norm channel dim")
    if c % num_groups:
        raise TensorError(f"group_norm: {c} channels of {x.name!r} do not split into "
                          f"{num_groups} groups; pick num_groups dividing {c}")
    for p in (gamma, beta):
        _check_param(p, x, (x.shape[1],), "group_norm")
    cg = c // num_groups
    grouped = te.compute((x.shape[0], num_groups, cg, *x.shape[2:]),
                         lambda n, g, j, *s: x[(n, g * cg + j, *s)], name="group_norm_split")
    mean, var = _moments(grouped, list(range(2, grouped.ndim)), "group_norm")

    def body(n: Expr, ch: Expr, *s: Expr) -> Expr:
        g = te.floordiv(ch, cg)
        return ((x[(n, ch, *s)] - mean[n, g]) * te.rsqrt(var[n, g] + epsilon) * gamma[ch]
                + beta[ch])

    return te.compute(x.shape, body, name="group_norm")


def rms_norm(x: Tensor, gamma: Tensor, axis: int = -1, epsilon: float = 1e-5) -> Tensor:
    """x * rsqrt(mean(x^2 over `axis`) + eps) * gamma[index along axis]."""
    ax = normalize_axis(x, axis)
    _check_param(gamma, x, (x.shape[ax],), "rms_norm")
    k = te.reduce_axis((0, x.shape[ax]), "k")
    n = numel([x.shape[ax]], x.dtype)
    ms = te.compute(drop_at(x.shape, ax), lambda *i: te.sum(
        x[insert_at(i, ax, k)] * x[insert_at(i, ax, k)], axis=k) / n, name="rms_norm_ms")
    return te.compute(x.shape, lambda *i: x[i] * te.rsqrt(ms[drop_at(i, ax)] + epsilon)
                      * gamma[i[ax]], name="rms_norm")


# --------------------------------------------------------------------------------------------
# joining and reshaping helpers that are elementwise in spirit
# --------------------------------------------------------------------------------------------

def _cumsum(dims: Sequence[Expr]) -> list[Expr]:
    """[0, d0, d0 + d1, ...], folded to constants when the dims are constant."""
    sizes = [int(d.value) for d in dims if isinstance(d, Const)]
    if len(sizes) == len(dims):
        return [te.const(v) for v in itertools.accumulate(sizes, initial=0)]
    out: list[Expr] = [te.const(0)]
    for d in dims:
        out.append(d if is_zero(out[-1]) else out[-1] + d)
    return out


def concatenate(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along `axis`; all other dims and the dtypes must agree."""
    if not tensors:
        raise TensorError("concatenate: pass at least one tensor")
    first = tensors[0]
    ax = normalize_axis(first, axis)
    for t in tensors[1:]:
        same = t.ndim == first.ndim and all(
            d == ax or a.same_as(b) for d, (a, b) in enumerate(zip(t.shape, first.shape)))
        if not same:
            raise TensorError(f"concatenate along axis {ax}: tensor {t.name!r} has shape "
                              f"{shape_str(t.shape)} but {first.name!r} has "
                              f"{shape_str(first.shape)}; all dims but {ax} must match")
        if t.dtype != first.dtype:
            raise TensorError(f"concatenate: tensor {t.name!r} is {t.dtype} but {first.name!r} "
                              f"is {first.dtype}; cast first")
    offsets = _cumsum([t.shape[ax] for t in tensors])

    def body(*i: Expr) -> Expr:
        j = i[ax]
        def part(k: int) -> Expr:
            jk = j if is_zero(offsets[k]) else j - offsets[k]
            return tensors[k][(*i[:ax], jk, *i[ax + 1:])]

        out = part(len(tensors) - 1)
        for k in range(len(tensors) - 2, -1, -1):
            out = te.if_then_else(j < offsets[k + 1], part(k), out)
        return out

    shape = (*first.shape[:ax], offsets[-1], *first.shape[ax + 1:])
    return te.compute(shape, body, name="concatenate")


def expand_dims(x: Tensor, axis: int, num_newaxis: int = 1) -> Tensor:
    """Insert `num_newaxis` dims of size 1 at `axis` (axis in [-ndim-1, ndim])."""
    if not -x.ndim - 1 <= axis <= x.ndim:
        raise TensorError(f"expand_dims: axis={axis} out of range for {x.name!r} with "
                          f"{x.ndim} dims")
    ax = axis % (x.ndim + 1)
    shape = (*x.shape[:ax], *([te.const(1)] * num_newaxis), *x.shape[ax:])
    return te.compute(shape, lambda *i: x[(*i[:ax], *i[ax + num_newaxis:])], name="expand_dims")


# --------------------------------------------------------------------------------------------
# NumPy references (written independently of the te definitions)
# --------------------------------------------------------------------------------------------

def _np_sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0, -x))


def _np_gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _np_norm(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    return (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)


def _np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _np_log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    z = x - x.max(axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis, keepdims=True))


def _np_group_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, groups: int) -> np.ndarray:
    n, c = x.shape[:2]
    y = _np_norm(x.reshape(n, groups, -1), (2,), 1e-5).reshape(x.shape)
    bshape = (1, c) + (1,) * (x.ndim - 2)
    return y * g.reshape(bshape) + b.reshape(bshape)


# --------------------------------------------------------------------------------------------
# registry entries
# --------------------------------------------------------------------------------------------

_POS = dict(lo=0.3, hi=2.5)                      # log, sqrt, rsqrt
_ANY = dict(lo=-2.0, hi=2.0)
_KINK0 = dict(lo=-2.0, hi=2.0, avoid=(0.0,))       # relu-like kinks at 0
_INT_JUMPS = dict(lo=-3.0, hi=3.0, avoid=from_integers)
_HALF_JUMPS = dict(lo=-3.0, hi=3.0, avoid=from_half_integers)

# name, category, operator, reference, sample domain, notes
_UNARY_TABLE: list[tuple[str, str, Callable[[Tensor], Tensor], Callable[[np.ndarray], Any],
                         dict[str, Any], str]] = [
    ("log", "L1", log, np.log, _POS, "inputs positive"),
    ("sqrt", "L1", sqrt, np.sqrt, _POS, "inputs positive"),
    ("rsqrt", "L1", rsqrt, lambda x: 1 / np.sqrt(x), _POS, "inputs positive"),
    ("exp", "L1", exp, np.exp, _ANY, ""),
    ("sigmoid", "L1", sigmoid, _np_sigmoid, dict(lo=-4.0, hi=4.0), ""),
    ("tanh", "L1", tanh, np.tanh, _ANY, ""),
    ("erf", "L1", erf, erf_np, _ANY, ""),
    ("negative", "L1", negative, np.negative, _ANY, ""),
    ("abs", "L1", abs, np.abs, _KINK0, "inputs >= 0.1 away from 0; abs'(0) per the deriv rule "
     "(PyTorch: sign(0) = 0)"),
    ("relu", "L1", relu, lambda x: np.maximum(x, 0), _KINK0,
     "select(x <= 0, 0, x): relu'(0) = 0, relu(NaN) = NaN as PyTorch; inputs >= 0.1 away from 0"),
    ("leaky_relu", "L1", lambda x: leaky_relu(x, 0.1), lambda x: np.where(x > 0, x, 0.1 * x),
     _KINK0, "alpha = 0.1 in the sample (default 0.01); slope alpha at 0, as PyTorch"),
    ("elu", "L1", lambda x: elu(x, 1.5), lambda x: np.where(x > 0, x, 1.5 * np.expm1(x)), _KINK0,
     "alpha = 1.5 in the sample; select(x <= 0, ...): the left branch's slope at 0 (PyTorch)"),
    ("gelu_erf", "L1", gelu, lambda x: 0.5 * x * (1 + erf_np(x / np.sqrt(2))), _ANY,
     "exact form 0.5 x (1 + erf(x / sqrt 2)) (PyTorch approximate='none')"),
    ("gelu_tanh", "L1", lambda x: gelu(x, "tanh"), _np_gelu_tanh, _ANY,
     "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (PyTorch approximate='tanh')"),
    ("silu", "L1", silu, lambda x: x * _np_sigmoid(x), _ANY, "x * sigmoid(x)"),
    ("softplus", "L1", softplus, lambda x: np.logaddexp(0, x), dict(lo=-4.0, hi=4.0),
     "beta = 1, threshold = 20 (x itself above), as PyTorch; sample below the threshold"),
    ("floor", "L3", floor, np.floor, _INT_JUMPS,
     "integer-valued: gradient exactly 0; inputs >= 0.1 away from integers"),
    ("ceil", "L3", ceil, np.ceil, _INT_JUMPS,
     "integer-valued: gradient exactly 0; inputs >= 0.1 away from integers"),
    ("trunc", "L3", trunc, np.trunc, _INT_JUMPS,
     "integer-valued: gradient exactly 0; inputs >= 0.1 away from integers"),
    ("round", "L3", round, np.round, _HALF_JUMPS,
     "half to even; gradient exactly 0; inputs >= 0.1 away from half-integers"),
    ("sign", "L3", sign, np.sign, _KINK0,
     "integer-valued: gradient exactly 0; inputs >= 0.1 away from 0"),
]


def _unary_sample(name: str, op: Callable[[Tensor], Tensor], dom: dict[str, Any]
                  ) -> Callable[[str], Sample]:
    def sample(dtype: str) -> Sample:
        b = SampleBuilder(name, dtype)
        x = b.uniform("x", (4, 5), **dom)
        return b.sample(op(x))

    sample.__name__ = f"sample_{name}"
    return sample


for _n, _c, _op, _ref, _dom, _notes in _UNARY_TABLE:
    register(_n, _c, (lambda f: lambda x: [f(x)])(_ref), notes=_notes)(
        _unary_sample(_n, _op, _dom))


def _binary_sample(name: str, op: Callable[[Operand, Operand], Tensor], kind: str
                   ) -> Callable[[str], Sample]:
    """a (4, 5) against b (5,): broadcasting along the first dim."""
    def sample(dtype: str) -> Sample:
        bld = SampleBuilder(name, dtype)
        rng = bld.rng
        if kind == "div":
            a, bb = rng.uniform(-2, 2, (4, 5)), away(rng, (5,), -2, 2, (0.0,), 0.5)
        elif kind == "mod":  # a / b at least 0.1 away from an integer
            bb = away(rng, (5,), -1.5, 1.5, (0.0,), 0.5)
            a = (rng.integers(-3, 3, (4, 5)) + rng.uniform(0.1, 0.9, (4, 5))) * bb
        elif kind == "pow":
            a, bb = rng.uniform(0.3, 2.0, (4, 5)), rng.uniform(-1.5, 1.5, (5,))
        elif kind == "untied":
            bb = rng.uniform(-2, 2, (5,))
            a = bb + away(rng, (4, 5), -1, 1, (0.0,), 0.1)
        else:
            a, bb = rng.uniform(-2, 2, (4, 5)), rng.uniform(-2, 2, (5,))
        return bld.sample(op(bld.input("a", a), bld.input("b", bb)))

    sample.__name__ = f"sample_{name}"
    return sample


_BinaryOp = Callable[[Operand, Operand], Tensor]
_BINARY_TABLE: list[tuple[str, _BinaryOp, Callable[..., Any], str, str]] = [
    ("add", add, np.add, "", "broadcast (4, 5) with (5,)"),
    ("subtract", subtract, np.subtract, "", "broadcast (4, 5) with (5,)"),
    ("multiply", multiply, np.multiply, "", "broadcast (4, 5) with (5,)"),
    ("divide", divide, np.divide, "div", "divisor >= 0.5 away from 0"),
    ("floor_mod", floor_mod, np.mod, "mod",
     "a - floor(a / b) * b (sign of the divisor, np.mod / torch.remainder); d/da = 1, "
     "d/db = -floor(a / b); a / b kept >= 0.1 away from integers"),
    ("power", power, np.power, "pow", "base positive"),
    ("maximum", maximum, np.maximum, "untied",
     "operands >= 0.1 apart; at ties the deriv rule for max decides (PyTorch splits evenly)"),
    ("minimum", minimum, np.minimum, "untied",
     "operands >= 0.1 apart; at ties the deriv rule for min decides (PyTorch splits evenly)"),
]

for _n, _bop, _ref, _kind, _notes in _BINARY_TABLE:
    register(_n, "L1", (lambda f: lambda a, b: [f(a, b)])(_ref), notes=_notes)(
        _binary_sample(_n, _bop, _kind))


@register("where", "L1", lambda c, x, y: [np.where(c, x, y)],
          notes="condition is a bool input (not differentiable); x (4, 5), y broadcast (5,)")
def _where_sample(dtype: str) -> Sample:
    b = SampleBuilder("where", dtype)
    c = b.input("cond", b.rng.random((4, 5)) < 0.5, differentiable=False)
    x = b.uniform("x", (4, 5))
    y = b.uniform("y", (5,))
    return b.sample(where(c, x, y))


@register("clip", "L1", lambda x: [np.clip(x, -1.0, 1.0)],
          notes="bounds [-1, 1]; gradient 1 on the closed interval as torch.clamp; "
                "inputs >= 0.1 away from the bounds")
def _clip_sample(dtype: str) -> Sample:
    b = SampleBuilder("clip", dtype)
    return b.sample(clip(b.uniform("x", (4, 5), avoid=(-1.0, 1.0)), -1.0, 1.0))


@register("prelu", "L1",
          lambda x, a: [np.where(x > 0, x, a[None, :, None] * x)],
          notes="one slope per channel (axis 1); select(x > 0, ...): slope alpha at 0")
def _prelu_sample(dtype: str) -> Sample:
    b = SampleBuilder("prelu", dtype)
    x = b.uniform("x", (2, 3, 4), avoid=(0.0,))
    alpha = b.uniform("alpha", (3,), 0.05, 0.5)
    return b.sample(prelu(x, alpha))


@register("bias_add", "L1", lambda x, bias: [x + bias[None, :, None]], notes="bias along axis 1")
def _bias_add_sample(dtype: str) -> Sample:
    b = SampleBuilder("bias_add", dtype)
    x = b.uniform("x", (2, 3, 4))
    return b.sample(bias_add(x, b.uniform("bias", (3,))))


@register("dropout", "L1", lambda x, m: [x * m / (1 - 0.25)],
          notes="the 0/1 mask is a float input (not differentiable), scale 1 / (1 - rate), "
                "rate = 0.25 in the sample")
def _dropout_sample(dtype: str) -> Sample:
    b = SampleBuilder("dropout", dtype)
    x = b.uniform("x", (4, 5))
    mask = b.input("mask", (b.rng.random((4, 5)) >= 0.25).astype(float), differentiable=False)
    return b.sample(dropout(x, mask, 0.25))


@register("softmax", "L1", lambda x: [_np_softmax(x, 1)],
          notes="max-subtracted; sample reduces the middle axis of (2, 4, 3)")
def _softmax_sample(dtype: str) -> Sample:
    b = SampleBuilder("softmax", dtype)
    return b.sample(softmax(b.uniform("x", (2, 4, 3), -3, 3), axis=1))


@register("log_softmax", "L1", lambda x: [_np_log_softmax(x, -1)],
          notes="x - max - log(sum(exp(x - max))); max assumed untied in the sample "
                "(its gradient cancels exactly anyway)")
def _log_softmax_sample(dtype: str) -> Sample:
    b = SampleBuilder("log_softmax", dtype)
    return b.sample(log_softmax(b.uniform("x", (3, 5), -3, 3), axis=-1))


@register("concatenate", "L1", lambda a, b, c: [np.concatenate([a, b, c], axis=1)],
          notes="nested selects on the offset along the axis")
def _concatenate_sample(dtype: str) -> Sample:
    b = SampleBuilder("concatenate", dtype)
    xs = [b.uniform(n, (2, w)) for n, w in (("a", 3), ("b", 2), ("c", 1))]
    return b.sample(concatenate(xs, axis=1))


@register("expand_dims", "L1", lambda x: [x[:, None, :]])
def _expand_dims_sample(dtype: str) -> Sample:
    b = SampleBuilder("expand_dims", dtype)
    return b.sample(expand_dims(b.uniform("x", (3, 4)), 1))


@register("batch_norm_train", "L1",
          lambda x, g, bt: [_np_norm(x, (0, 2), 1e-5) * g[None, :, None] + bt[None, :, None]],
          notes="batch mean and biased variance over all axes but 1 (as PyTorch normalizes); "
                "eps = 1e-5; outputs only the normalized tensor")
def _bn_train_sample(dtype: str) -> Sample:
    b = SampleBuilder("batch_norm_train", dtype)
    x = b.uniform("x", (4, 3, 2))
    g, bt = b.uniform("gamma", (3,), 0.5, 1.5), b.uniform("beta", (3,))
    return b.sample(batch_norm_train(x, g, bt))


@register("batch_norm_infer", "L1",
          lambda x, g, bt, m, v: [(x - m[None, :, None]) / np.sqrt(v[None, :, None] + 1e-5)
                                  * g[None, :, None] + bt[None, :, None]],
          notes="moving mean/var are inputs, marked differentiable (plain smooth inputs); "
                "eps = 1e-5")
def _bn_infer_sample(dtype: str) -> Sample:
    b = SampleBuilder("batch_norm_infer", dtype)
    x = b.uniform("x", (4, 3, 2))
    g, bt = b.uniform("gamma", (3,), 0.5, 1.5), b.uniform("beta", (3,))
    m, v = b.uniform("moving_mean", (3,)), b.uniform("moving_var", (3,), 0.5, 2.0)
    return b.sample(batch_norm_infer(x, g, bt, m, v))


@register("layer_norm", "L1", lambda x, g, bt: [_np_norm(x, (1,), 1e-5) * g + bt],
          notes="normalized over the last axis (normalized_shape = gamma.shape); biased "
                "variance, eps = 1e-5, as PyTorch")
def _layer_norm_sample(dtype: str) -> Sample:
    b = SampleBuilder("layer_norm", dtype)
    x = b.uniform("x", (3, 6))
    g, bt = b.uniform("gamma", (6,), 0.5, 1.5), b.uniform("beta", (6,))
    return b.sample(layer_norm(x, g, bt))


@register("group_norm", "L1", lambda x, g, bt: [_np_group_norm(x, g, bt, 2)],
          notes="2 groups of 2 channels; biased variance, eps = 1e-5, as PyTorch")
def _group_norm_sample(dtype: str) -> Sample:
    b = SampleBuilder("group_norm", dtype)
    x = b.uniform("x", (2, 4, 3))
    g, bt = b.uniform("gamma", (4,), 0.5, 1.5), b.uniform("beta", (4,))
    return b.sample(group_norm(x, g, bt, num_groups=2))


@register("rms_norm", "L1",
          lambda x, g: [x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-5) * g],
          notes="x * rsqrt(mean(x^2) + eps) * gamma over the last axis, eps = 1e-5")
def _rms_norm_sample(dtype: str) -> Sample:
    b = SampleBuilder("rms_norm", dtype)
    x = b.uniform("x", (3, 6))
    return b.sample(rms_norm(x, b.uniform("gamma", (6,), 0.5, 1.5)))
