"""Loss functions and attention (TOPI role), with registry entries.

Losses reduce to a zero-dimensional tensor ("mean" or "sum") or keep one value
per sample ("none"), as PyTorch's `reduction=` argument.
"""
from __future__ import annotations

import math

import numpy as np

from .. import te
from ..te import Expr, Tensor, TensorError
from ..te.tensor import shape_str
from ..te import dtype as dt
from .common import SampleBuilder, numel
from .elementwise import log_softmax, softmax
from .registry import Sample, register

_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction: str, what: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{what}: reduction={reduction!r}; use one of {_REDUCTIONS}")


def _same_shape(a: Tensor, b: Tensor, what: str) -> None:
    if a.ndim != b.ndim or not all(x.same_as(y) for x, y in zip(a.shape, b.shape, strict=True)):
        raise TensorError(f"{what}: {b.name!r} has shape {shape_str(b.shape)} but "
                          f"{a.name!r} has {shape_str(a.shape)}; they must match")


def nll_loss(log_probs: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Negative log likelihood: -log_probs[n, target[n]] for log_probs (N, C) and integer
    target (N,), averaged ("mean"), summed ("sum") or per sample ("none"); no class weights."""
    _check_reduction(reduction, "nll_loss")
    if log_probs.ndim != 2 or target.ndim != 1 or not target.shape[0].same_as(log_probs.shape[0]):
        raise TensorError(f"nll_loss: expects log_probs (N, C) and target (N,), got "
                          f"{log_probs.name!r} {shape_str(log_probs.shape)} and "
                          f"{target.name!r} {shape_str(target.shape)}")
    if not dt.is_int(target.dtype):
        raise TensorError(f"nll_loss: target {target.name!r} has dtype {target.dtype}; pass "
                          "integer class indices")
    if reduction == "none":
        return te.compute(target.shape, lambda i: -log_probs[i, target[i]], name="nll_loss")
    n = log_probs.shape[0]
    k = te.reduce_axis((0, n), "n")
    if reduction == "sum":
        return te.compute((), lambda: te.sum(-log_probs[k, target[k]], axis=k), name="nll_loss")
    cnt = numel([n], log_probs.dtype)
    return te.compute((), lambda: te.sum(-log_probs[k, target[k]], axis=k) / cnt, name="nll_loss")


def cross_entropy(logits: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """nll_loss(log_softmax(logits, axis=1), target): logits (N, C), integer target (N,)."""
    return nll_loss(log_softmax(logits, axis=1), target, reduction)


def mse_loss(pred: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """(pred - target)^2, averaged over every element ("mean"), summed, or elementwise."""
    _check_reduction(reduction, "mse_loss")
    _same_shape(pred, target, "mse_loss")

    def sq(*i: Expr) -> Expr:
        d = pred[i] - target[i]
        return d * d

    if reduction == "none":
        return te.compute(pred.shape, sq, name="mse_loss")
    rs = [te.reduce_axis((0, s), f"r{d}") for d, s in enumerate(pred.shape)]
    if reduction == "sum":
        return te.compute((), lambda: te.sum(sq(*rs), axis=rs), name="mse_loss")
    n = numel(pred.shape, pred.dtype)
    return te.compute((), lambda: te.sum(sq(*rs), axis=rs) / n, name="mse_loss")


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor,
                                 scale: float | None = None) -> Tensor:
    """softmax(Q K^T * scale) V for q (B, L, d), k (B, S, d), v (B, S, dv); scale 1/sqrt(d)."""
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise TensorError("scaled_dot_product_attention: q, k, v must be (B, L, d), (B, S, d), "
                          f"(B, S, dv); got {q.ndim}, {k.ndim}, {v.ndim} dims")
    for t, dim, ref in ((k, 0, q), (k, 2, q), (v, 0, q), (v, 1, k)):
        if not t.shape[dim].same_as(ref.shape[dim]):
            raise TensorError(f"scaled_dot_product_attention: dim {dim} of {t.name!r} is "
                              f"{t.shape[dim]} but {ref.name!r} has {ref.shape[dim]} there")
    b, ln, d = q.shape
    s, dv = k.shape[1], v.shape[2]
    if scale is None:
        if not isinstance(d, te.Const):
            raise TensorError("scaled_dot_product_attention: pass scale= for a symbolic head dim")
        scale = 1.0 / math.sqrt(int(d.value))
    r = te.reduce_axis((0, d), "r")
    scores = te.compute((b, ln, s), lambda i, t, j: te.sum(q[i, t, r] * k[i, j, r], axis=r) * scale,
                        name="sdpa_scores")
    p = softmax(scores, axis=-1)
    j = te.reduce_axis((0, s), "j")
    return te.compute((b, ln, dv), lambda i, t, e: te.sum(p[i, t, j] * v[i, j, e], axis=j),
                      name="sdpa")


# --------------------------------------------------------------------------------------------
# NumPy references and registry entries
# --------------------------------------------------------------------------------------------

def _np_log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(1, keepdims=True)
    return z - np.log(np.exp(z).sum(1, keepdims=True))


def _np_nll(logp: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.asarray(-np.mean(logp[np.arange(len(t)), t]))


def _np_sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = np.einsum("bld,bsd->bls", q, k) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bls,bsd->bld", p / p.sum(-1, keepdims=True), v)


@register("nll_loss", "loss", lambda lp, t: [_np_nll(lp, t)],
          notes="mean over N = 5 of -log_probs[n, target[n]]; int64 targets with a repeated "
                "class; no weights or ignore_index")
def _nll_sample(dtype: str) -> Sample:
    b = SampleBuilder("nll_loss", dtype)
    lp = b.uniform("log_probs", (5, 4), -3.0, -0.1)
    t = b.input("target", np.array([0, 3, 1, 3, 2]), False, "int64")
    return b.sample(nll_loss(lp, t))


@register("cross_entropy", "loss", lambda x, t: [_np_nll(_np_log_softmax(x), t)],
          notes="logits (5, 4), int64 targets, mean; log_softmax (max-subtracted) then nll")
def _ce_sample(dtype: str) -> Sample:
    b = SampleBuilder("cross_entropy", dtype)
    x = b.uniform("logits", (5, 4), -3.0, 3.0)
    t = b.ints("target", (5,), 0, 4, "int64")
    return b.sample(cross_entropy(x, t))


@register("mse_loss", "loss", lambda p, t: [np.asarray(np.mean((p - t) ** 2))],
          notes="mean over all elements; both inputs differentiable")
def _mse_sample(dtype: str) -> Sample:
    b = SampleBuilder("mse_loss", dtype)
    p, t = b.uniform("pred", (3, 4)), b.uniform("target", (3, 4))
    return b.sample(mse_loss(p, t))


@register("scaled_dot_product_attention", "loss", lambda q, k, v: [_np_sdpa(q, k, v)],
          notes="softmax(Q K^T / sqrt(d)) V with q (2, 3, 4), k (2, 5, 4), v (2, 5, 2); "
                "no mask, no dropout")
def _sdpa_sample(dtype: str) -> Sample:
    b = SampleBuilder("scaled_dot_product_attention", dtype)
    q, k = b.uniform("q", (2, 3, 4)), b.uniform("k", (2, 5, 4))
    v = b.uniform("v", (2, 5, 2))
    return b.sample(scaled_dot_product_attention(q, k, v))
