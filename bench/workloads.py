"""The fixed float32 benchmark workloads, each built from the texpr_ad operator library.

A `Workload` holds the te graph (placeholders, the forward output), the NumPy
inputs and a PyTorch function of the same inputs; the bench differentiates with
respect to every float input (`float_inputs`).  bench/plain.py rewrites each
graph in plain `te` on the same arrays and reference.  `quick=True` gives small
shapes for smoke tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from texpr_ad import te
from texpr_ad.ops import elementwise as ew
from texpr_ad.ops import losses, nn, reduction, shape
from texpr_ad.te.tensor import Tensor


@dataclass(frozen=True)
class Workload:
    """One benchmark case: te inputs and output, arrays, and the PyTorch equivalent."""

    name: str
    inputs: tuple[Tensor, ...]
    output: Tensor
    arrays: tuple[np.ndarray, ...]
    torch_fn: Callable[..., Any]  # torch tensors (same order as inputs) -> output tensor

    @property
    def float_inputs(self) -> tuple[int, ...]:
        return tuple(k for k, t in enumerate(self.inputs) if t.dtype.startswith("float"))


_BATCH: dict[str, Any] = {}  # make(symbolic_batch=True): {"size": the first input's dim 0, "var"}


def _ph(shape_: tuple[int, ...], name: str, dtype: str = "float32") -> Tensor:
    """A placeholder; under make(symbolic_batch=True) a dim 0 of the batch's size is a te.var."""
    if "var" in _BATCH and shape_:
        size = _BATCH.setdefault("size", shape_[0])
        shape_ = (_BATCH["var"], *shape_[1:]) if shape_[0] == size else shape_  # type: ignore[assignment]
    return te.placeholder(shape_, dtype, name=name)


def _rand(rng: np.random.Generator, *shape_: int) -> np.ndarray:
    return rng.standard_normal(shape_).astype(np.float32)


def _F() -> Any:
    import torch.nn.functional as F
    return F


def ew_chain(q: bool, rng: np.random.Generator) -> Workload:
    n, m = (256, 128) if q else (4096, 1024)
    x, w, b = _ph((n, m), "x"), _ph((m,), "w"), _ph((m,), "b")
    y = reduction.sum(ew.multiply(ew.tanh(ew.add(ew.multiply(x, w), b)), ew.sigmoid(x)))
    import torch
    return Workload("ew_chain", (x, w, b), y, (_rand(rng, n, m), _rand(rng, m), _rand(rng, m)),
                    lambda x, w, b: (torch.tanh(x * w + b) * torch.sigmoid(x)).sum())


def softmax(q: bool, rng: np.random.Generator) -> Workload:
    n, m = (128, 100) if q else (2048, 1000)
    x = _ph((n, m), "x")
    import torch
    return Workload("softmax", (x,), ew.softmax(x, -1), (_rand(rng, n, m),),
                    lambda x: torch.softmax(x, -1))


def log_softmax_nll(q: bool, rng: np.random.Generator) -> Workload:
    n, c = (64, 100) if q else (512, 1000)
    x, t = _ph((n, c), "x"), _ph((n,), "target", "int64")
    y = losses.nll_loss(ew.log_softmax(x, -1), t, "mean")
    F = _F()
    return Workload("log_softmax_nll", (x, t), y, (_rand(rng, n, c), rng.integers(0, c, n)),
                    lambda x, t: F.nll_loss(F.log_softmax(x, -1), t))


def dense(q: bool, rng: np.random.Generator) -> Workload:
    n, k, m = (64, 128, 96) if q else (512, 1024, 1024)
    x, w, b = _ph((n, k), "x"), _ph((m, k), "w"), _ph((m,), "bias")
    F = _F()
    return Workload("dense", (x, w, b), nn.dense(x, w, b),
                    (_rand(rng, n, k), _rand(rng, m, k) / np.float32(np.sqrt(k)), _rand(rng, m)),
                    lambda x, w, b: F.linear(x, w, b))


def _conv(name: str, q: bool, rng: np.random.Generator, o: int, stride: int) -> Workload:
    n, c, h = (2, 8, 12) if q else (8, 64, 56)
    o = 16 if q else o
    x, w = _ph((n, c, h, h), "x"), _ph((o, c, 3, 3), "w")
    F = _F()
    return Workload(name, (x, w), nn.conv2d(x, w, stride, 1),
                    (_rand(rng, n, c, h, h), _rand(rng, o, c, 3, 3) / np.float32(np.sqrt(9 * c))),
                    lambda x, w: F.conv2d(x, w, stride=stride, padding=1))


def conv2d(q: bool, rng: np.random.Generator) -> Workload:
    return _conv("conv2d", q, rng, 64, 1)


def conv2d_s2(q: bool, rng: np.random.Generator) -> Workload:
    return _conv("conv2d_s2", q, rng, 128, 2)


def max_pool2d(q: bool, rng: np.random.Generator) -> Workload:
    n, c, h = (2, 4, 16) if q else (8, 64, 112)
    x = _ph((n, c, h, h), "x")
    F = _F()
    return Workload("max_pool2d", (x,), nn.max_pool2d(x, 3, 2, 1), (_rand(rng, n, c, h, h),),
                    lambda x: F.max_pool2d(x, 3, 2, 1))


def avg_pool2d(q: bool, rng: np.random.Generator) -> Workload:
    n, c, h = (2, 4, 16) if q else (8, 64, 112)
    x = _ph((n, c, h, h), "x")
    F = _F()
    return Workload("avg_pool2d", (x,), nn.avg_pool2d(x, 2, 2), (_rand(rng, n, c, h, h),),
                    lambda x: F.avg_pool2d(x, 2, 2))


def layer_norm(q: bool, rng: np.random.Generator) -> Workload:
    n, m = (128, 64) if q else (4096, 1024)
    x, g, b = _ph((n, m), "x"), _ph((m,), "gamma"), _ph((m,), "beta")
    F = _F()
    return Workload("layer_norm", (x, g, b), ew.layer_norm(x, g, b, 1e-5),
                    (_rand(rng, n, m), _rand(rng, m), _rand(rng, m)),
                    lambda x, g, b: F.layer_norm(x, (m,), g, b, 1e-5))


def batch_norm(q: bool, rng: np.random.Generator) -> Workload:
    n, c, h = (4, 8, 8) if q else (32, 64, 56)
    x, g, b = _ph((n, c, h, h), "x"), _ph((c,), "gamma"), _ph((c,), "beta")
    F = _F()
    return Workload("batch_norm", (x, g, b), ew.batch_norm_train(x, g, b, 1, 1e-5),
                    (_rand(rng, n, c, h, h), _rand(rng, c), _rand(rng, c)),
                    lambda x, g, b: F.batch_norm(x, None, None, g, b, True, 0.0, 1e-5))


def reduce_sum(q: bool, rng: np.random.Generator) -> Workload:
    n = 128 if q else 2048
    x = _ph((n, n), "x")
    return Workload("reduce_sum", (x,), reduction.sum(x, 1), (_rand(rng, n, n),),
                    lambda x: x.sum(1))


def transpose_reshape(q: bool, rng: np.random.Generator) -> Workload:
    a, b, c, d = (4, 8, 6, 16) if q else (64, 128, 32, 64)
    x = _ph((a, b, c, d), "x")
    y = shape.reshape(shape.transpose(x, (0, 2, 1, 3)), (a, c, b * d))
    return Workload("transpose_reshape", (x,), y, (_rand(rng, a, b, c, d),),
                    lambda x: x.permute(0, 2, 1, 3).reshape(a, c, b * d))


def take_embedding(q: bool, rng: np.random.Generator) -> Workload:
    v, d, n = (500, 16, 256) if q else (50000, 256, 8192)
    table, idx = _ph((v, d), "table"), _ph((n,), "indices", "int64")
    F = _F()
    return Workload("take_embedding", (table, idx), shape.take(table, idx, 0),
                    (_rand(rng, v, d), rng.integers(0, v, n)),
                    lambda t, i: F.embedding(i, t))


def strided_slice(q: bool, rng: np.random.Generator) -> Workload:
    n, m = (64, 48) if q else (4096, 1024)
    x = _ph((n, m), "x")
    return Workload("strided_slice", (x,),
                    reduction.strided_slice(x, [None, 1], [None, None], [2, 3]),
                    (_rand(rng, n, m),), lambda x: x[::2, 1::3].contiguous())  # a copy, as ours


def batch_matmul(q: bool, rng: np.random.Generator) -> Workload:
    b, m, k, n = (4, 32, 16, 24) if q else (32, 256, 128, 256)
    x, y = _ph((b, m, k), "x"), _ph((b, k, n), "y")
    import torch
    return Workload("batch_matmul", (x, y), nn.batch_matmul(x, y, transpose_b=False),
                    (_rand(rng, b, m, k), _rand(rng, b, k, n)), lambda x, y: torch.bmm(x, y))


WORKLOADS: dict[str, Callable[[bool, np.random.Generator], Workload]] = {
    f.__name__: f for f in (ew_chain, softmax, log_softmax_nll, dense, conv2d, conv2d_s2,
                            max_pool2d, avg_pool2d, layer_norm, batch_norm, reduce_sum,
                            transpose_reshape, take_embedding, strided_slice, batch_matmul)}


def make(name: str, quick: bool = False, seed: int = 0, symbolic_batch: bool = False) -> Workload:
    """The workload `name` with inputs drawn from `seed`; `symbolic_batch`: the first input's
    dim 0, in every input with a dim 0 of that size, is a te.var (bench/symbolic.py)."""
    if name not in WORKLOADS:
        raise KeyError(f"unknown workload {name!r}; choose from {sorted(WORKLOADS)}")
    _BATCH.clear()
    if symbolic_batch:
        _BATCH["var"] = te.var("batch")
    try:
        return WORKLOADS[name](quick, np.random.default_rng(seed))
    finally:
        _BATCH.clear()
