"""The benchmark workloads written the way a user writes them: `te` directly, no `texpr_ad.ops`.

Each formulation takes the registry workload (bench/workloads.py) and returns the same workload
(same arrays, same PyTorch reference) with its te graph replaced and its name suffixed ":plain".
The differences from the registry that matter to the differentiator and the planner:

- conv2d / conv2d_s2 / max_pool2d: padding is a guard inside the window body
  (`if_then_else(all(in bounds), X[...], 0 or -inf)`), not a separate pad stage or `where=`;
- softmax / log_softmax_nll: the row max is an ordinary `te.max`, not a `stop_gradient`;
- dense: the bias is added in the same compute as the contraction;
- layer_norm / batch_norm: mean and variance stages, then `(x - mean) / sqrt(var + eps)`;
- transpose_reshape: one compute with `//` and `%` index arithmetic.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from texpr_ad import te
from texpr_ad.te.expr import Expr
from texpr_ad.te.tensor import Tensor

from bench.workloads import Workload, make as make_registry

EPS = 1e-5
NEG_INF = float("-inf")


def _ph(w: Workload, k: int, name: str) -> Tensor:
    """A placeholder shaped and typed like the workload's `k`-th array."""
    a = w.arrays[k]
    return te.placeholder(a.shape, str(a.dtype), name=name)


def _inside(idx: list[tuple[Expr, int]]) -> Expr:
    """All of `0 <= i < size` for each (i, size)."""
    return te.all(*[c for i, size in idx for c in (i >= 0, i < size)])


def ew_chain(w: Workload) -> tuple[list[Tensor], Tensor]:
    x, wt, b = _ph(w, 0, "x"), _ph(w, 1, "w"), _ph(w, 2, "b")
    n, m = w.arrays[0].shape
    i, j = te.reduce_axis((0, n), "i"), te.reduce_axis((0, m), "j")
    y = te.compute((), lambda: te.sum(te.tanh(x[i, j] * wt[j] + b[j]) * te.sigmoid(x[i, j]),
                                      axis=[i, j]), name="ew_chain")
    return [x, wt, b], y


def softmax(w: Workload) -> tuple[list[Tensor], Tensor]:
    x = _ph(w, 0, "x")
    n, m = w.arrays[0].shape
    k1, k2 = te.reduce_axis((0, m), "k"), te.reduce_axis((0, m), "k")
    mx = te.compute((n,), lambda i: te.max(x[i, k1], axis=k1), name="row_max")
    e = te.compute((n, m), lambda i, j: te.exp(x[i, j] - mx[i]), name="e")
    s = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
    return [x], te.compute((n, m), lambda i, j: e[i, j] / s[i], name="softmax")


def log_softmax_nll(w: Workload) -> tuple[list[Tensor], Tensor]:
    x, t = _ph(w, 0, "x"), _ph(w, 1, "target")
    n, c = w.arrays[0].shape
    k1, k2 = te.reduce_axis((0, c), "k"), te.reduce_axis((0, c), "k")
    mx = te.compute((n,), lambda i: te.max(x[i, k1], axis=k1), name="row_max")
    lse = te.compute((n,), lambda i: te.log(te.sum(te.exp(x[i, k2] - mx[i]), axis=k2)) + mx[i],
                     name="logsumexp")
    r = te.reduce_axis((0, n), "r")
    return [x, t], te.compute((), lambda: te.sum(lse[r] - x[r, t[r]], axis=r) / float(n),
                              name="nll")


def dense(w: Workload) -> tuple[list[Tensor], Tensor]:
    x, wt, b = _ph(w, 0, "x"), _ph(w, 1, "w"), _ph(w, 2, "bias")
    (n, kk), (m, _) = w.arrays[0].shape, w.arrays[1].shape
    k = te.reduce_axis((0, kk), "k")
    return [x, wt, b], te.compute((n, m), lambda i, j: te.sum(x[i, k] * wt[j, k], axis=k) + b[j],
                                  name="dense")


def _conv(w: Workload, stride: int) -> tuple[list[Tensor], Tensor]:
    x, wt = _ph(w, 0, "x"), _ph(w, 1, "w")
    (n, c, h, wd), (o, _, kh, kw) = w.arrays[0].shape, w.arrays[1].shape
    oh, ow = (h + 2 - kh) // stride + 1, (wd + 2 - kw) // stride + 1
    rc, rr, rs = te.reduce_axis((0, c), "c"), te.reduce_axis((0, kh), "r"), te.reduce_axis((0, kw), "s")

    def body(b: Expr, f: Expr, y: Expr, z: Expr) -> Expr:
        iy, ix = y * stride + rr - 1, z * stride + rs - 1
        v = te.if_then_else(_inside([(iy, h), (ix, wd)]), x[b, rc, iy, ix], 0.0)
        return te.sum(v * wt[f, rc, rr, rs], axis=[rc, rr, rs])

    return [x, wt], te.compute((n, o, oh, ow), body, name="conv")


def conv2d(w: Workload) -> tuple[list[Tensor], Tensor]:
    return _conv(w, 1)


def conv2d_s2(w: Workload) -> tuple[list[Tensor], Tensor]:
    return _conv(w, 2)


def max_pool2d(w: Workload) -> tuple[list[Tensor], Tensor]:
    x = _ph(w, 0, "x")
    n, c, h, wd = w.arrays[0].shape
    oh, ow = (h + 2 - 3) // 2 + 1, (wd + 2 - 3) // 2 + 1
    rr, rs = te.reduce_axis((0, 3), "r"), te.reduce_axis((0, 3), "s")

    def body(b: Expr, f: Expr, y: Expr, z: Expr) -> Expr:
        iy, ix = y * 2 + rr - 1, z * 2 + rs - 1
        return te.max(te.if_then_else(_inside([(iy, h), (ix, wd)]), x[b, f, iy, ix], NEG_INF),
                      axis=[rr, rs])

    return [x], te.compute((n, c, oh, ow), body, name="max_pool")


def avg_pool2d(w: Workload) -> tuple[list[Tensor], Tensor]:
    x = _ph(w, 0, "x")
    n, c, h, wd = w.arrays[0].shape
    rr, rs = te.reduce_axis((0, 2), "r"), te.reduce_axis((0, 2), "s")
    return [x], te.compute((n, c, h // 2, wd // 2), lambda b, f, y, z: te.sum(
        x[b, f, 2 * y + rr, 2 * z + rs], axis=[rr, rs]) * 0.25, name="avg_pool")


def layer_norm(w: Workload) -> tuple[list[Tensor], Tensor]:
    x, g, b = _ph(w, 0, "x"), _ph(w, 1, "gamma"), _ph(w, 2, "beta")
    n, m = w.arrays[0].shape
    k1, k2 = te.reduce_axis((0, m), "k"), te.reduce_axis((0, m), "k")
    mean = te.compute((n,), lambda i: te.sum(x[i, k1], axis=k1) / float(m), name="mean")
    var = te.compute((n,), lambda i: te.sum((x[i, k2] - mean[i]) * (x[i, k2] - mean[i]),
                                            axis=k2) / float(m), name="var")
    return [x, g, b], te.compute((n, m), lambda i, j: (x[i, j] - mean[i]) / te.sqrt(var[i] + EPS)
                                 * g[j] + b[j], name="layer_norm")


def batch_norm(w: Workload) -> tuple[list[Tensor], Tensor]:
    x, g, b = _ph(w, 0, "x"), _ph(w, 1, "gamma"), _ph(w, 2, "beta")
    n, c, h, wd = w.arrays[0].shape
    cnt = float(n * h * wd)

    def axes() -> list[te.IterVar]:
        return [te.reduce_axis((0, n), "n"), te.reduce_axis((0, h), "h"),
                te.reduce_axis((0, wd), "w")]

    r1, r2 = axes(), axes()
    mean = te.compute((c,), lambda f: te.sum(x[r1[0], f, r1[1], r1[2]], axis=r1) / cnt,
                      name="mean")

    def sq(f: Expr) -> Expr:
        d = x[r2[0], f, r2[1], r2[2]] - mean[f]
        return d * d

    var = te.compute((c,), lambda f: te.sum(sq(f), axis=r2) / cnt, name="var")
    return [x, g, b], te.compute((n, c, h, wd), lambda i, f, y, z: (x[i, f, y, z] - mean[f])
                                 / te.sqrt(var[f] + EPS) * g[f] + b[f], name="batch_norm")


def reduce_sum(w: Workload) -> tuple[list[Tensor], Tensor]:
    x = _ph(w, 0, "x")
    n, m = w.arrays[0].shape
    k = te.reduce_axis((0, m), "k")
    return [x], te.compute((n,), lambda i: te.sum(x[i, k], axis=k), name="row_sum")


def transpose_reshape(w: Workload) -> tuple[list[Tensor], Tensor]:
    x = _ph(w, 0, "x")
    a, b, c, d = w.arrays[0].shape
    return [x], te.compute((a, c, b * d), lambda i, j, k: x[i, k // d, j, k % d],
                           name="transpose_reshape")


def take_embedding(w: Workload) -> tuple[list[Tensor], Tensor]:
    table, idx = _ph(w, 0, "table"), _ph(w, 1, "indices")
    (_, d), (n,) = w.arrays[0].shape, w.arrays[1].shape
    return [table, idx], te.compute((n, d), lambda i, j: table[idx[i], j], name="embedding")


def strided_slice(w: Workload) -> tuple[list[Tensor], Tensor]:
    x = _ph(w, 0, "x")
    n, m = w.arrays[0].shape
    return [x], te.compute((len(range(0, n, 2)), len(range(1, m, 3))),
                           lambda i, j: x[2 * i, 3 * j + 1], name="strided_slice")


def batch_matmul(w: Workload) -> tuple[list[Tensor], Tensor]:
    x, y = _ph(w, 0, "x"), _ph(w, 1, "y")
    (bs, m, kk), (_, _, n) = w.arrays[0].shape, w.arrays[1].shape
    k = te.reduce_axis((0, kk), "k")
    return [x, y], te.compute((bs, m, n), lambda b, i, j: te.sum(x[b, i, k] * y[b, k, j], axis=k),
                              name="bmm")


PLAIN: dict[str, Callable[[Workload], tuple[list[Tensor], Tensor]]] = {
    f.__name__: f for f in (ew_chain, softmax, log_softmax_nll, dense, conv2d, conv2d_s2,
                            max_pool2d, avg_pool2d, layer_norm, batch_norm, reduce_sum,
                            transpose_reshape, take_embedding, strided_slice, batch_matmul)}

SUFFIX = ":plain"


def plain(w: Workload) -> Workload:
    """The plain formulation of registry workload `w`: same arrays and torch reference."""
    inputs, out = PLAIN[w.name](w)
    return dataclasses.replace(w, name=w.name + SUFFIX, inputs=tuple(inputs), output=out)


def make(name: str, quick: bool = False, seed: int = 0) -> Workload:
    """A registry workload by name, or its plain formulation for "<name>:plain"."""
    if name.endswith(SUFFIX):
        return plain(make_registry(name[:-len(SUFFIX)], quick, seed))
    return make_registry(name, quick, seed)
