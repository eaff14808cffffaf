"""Operators from real models, written the plain way a user writes them in `te` (nothing from
`texpr_ad.ops`), each next to the PyTorch function a user would otherwise write and the inputs
both take (bench/user_ops.py times them).

Each `UserOp` has a te function (placeholders in, te tensor out: what `texpr_ad.torch.custom_op`
takes), a PyTorch reference of the same arguments in the same order, an input maker
(`quick=True`: tiny shapes) and the inputs a training step differentiates (`diff`; the others,
integer or not, are data: rotary tables, targets).  Constants (groups, eps, window) are module
constants, so a te function and its reference cannot disagree on them.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from texpr_ad import te
from texpr_ad.te.expr import Expr
from texpr_ad.te.tensor import Tensor

EPS = 1e-5
GROUPS = 8          # group_norm groups
BAND = 64           # banded attention: key j attends to i - BAND < j <= i
TAPS = 4            # depthwise causal conv1d taps
DILATION = 2        # dilated conv2d (padding = DILATION keeps the size, 3x3 kernel)
SMOOTHING = 0.1     # cross-entropy label smoothing

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class UserOp:
    """One benchmark operator: te function, torch reference, inputs, differentiated inputs."""

    name: str
    source: str                                   # where it comes from, for the table's legend
    te_fn: Callable[..., Tensor]
    torch_fn: Callable[..., Any]
    make: Callable[[bool, np.random.Generator], Arrays]
    diff: tuple[str, ...]

    @property
    def args(self) -> tuple[str, ...]:
        """The argument names, in call order (the te function's parameters)."""
        return tuple(inspect.signature(self.te_fn).parameters)


def _rand(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _shape(t: Tensor) -> tuple[int, ...]:
    return tuple(int(d) for d in t.shape)


def _inside(*idx: tuple[Expr, int]) -> Expr:
    """All of `0 <= i < size` for each (i, size)."""
    return te.all(*[c for i, size in idx for c in (i >= 0, i < size)])


def _F() -> Any:
    import torch.nn.functional as F
    return F


# -- group norm + SiLU over NCHW (diffusion U-Net blocks) ---------------------------------------

def groupnorm_silu(x: Tensor, gamma: Tensor, beta: Tensor) -> Tensor:
    n, c, h, w = _shape(x)
    cg = c // GROUPS
    cnt = float(cg * h * w)

    def axes() -> list[Any]:
        return [te.reduce_axis((0, cg), "rc"), te.reduce_axis((0, h), "rh"),
                te.reduce_axis((0, w), "rw")]

    r1, r2 = axes(), axes()
    mean = te.compute((n, GROUPS), lambda b, g: te.sum(x[b, g * cg + r1[0], r1[1], r1[2]],
                                                       axis=r1) / cnt, name="mean")

    def sq(b: Expr, g: Expr) -> Expr:
        d = x[b, g * cg + r2[0], r2[1], r2[2]] - mean[b, g]
        return d * d

    var = te.compute((n, GROUPS), lambda b, g: te.sum(sq(b, g), axis=r2) / cnt, name="var")
    y = te.compute((n, c, h, w), lambda b, f, i, j: (x[b, f, i, j] - mean[b, f // cg])
                   * te.rsqrt(var[b, f // cg] + EPS) * gamma[f] + beta[f], name="gn")
    return te.compute((n, c, h, w), lambda b, f, i, j: y[b, f, i, j] * te.sigmoid(y[b, f, i, j]),
                      name="silu")


def groupnorm_silu_ref(x: Any, gamma: Any, beta: Any) -> Any:
    F = _F()
    return F.silu(F.group_norm(x, GROUPS, gamma, beta, EPS))


def groupnorm_silu_in(q: bool, rng: np.random.Generator) -> Arrays:
    n, c, hw = (2, 16, 4) if q else (8, 64, 32)
    return {"x": _rand(rng, n, c, hw, hw), "gamma": 1 + _rand(rng, c, scale=0.1),
            "beta": _rand(rng, c, scale=0.1)}


# -- mean-reduced losses to a scalar over ~1e6 elements ----------------------------------------

def smooth_l1_mean(pred: Tensor, target: Tensor) -> Tensor:
    n, m = _shape(pred)
    i, j = te.reduce_axis((0, n), "i"), te.reduce_axis((0, m), "j")
    d = pred[i, j] - target[i, j]
    term = te.if_then_else(te.abs(d) < 1.0, 0.5 * d * d, te.abs(d) - 0.5)
    return te.compute((), lambda: te.sum(term, axis=[i, j]) / float(n * m), name="smooth_l1")


def smooth_l1_mean_ref(pred: Any, target: Any) -> Any:
    return _F().smooth_l1_loss(pred, target)


def bce_logits_mean(logits: Tensor, labels: Tensor) -> Tensor:
    n, m = _shape(logits)
    i, j = te.reduce_axis((0, n), "i"), te.reduce_axis((0, m), "j")
    x = logits[i, j]
    term = te.max(x, 0.0) - x * labels[i, j] + te.log1p(te.exp(-te.abs(x)))
    return te.compute((), lambda: te.sum(term, axis=[i, j]) / float(n * m), name="bce")


def bce_logits_mean_ref(logits: Any, labels: Any) -> Any:
    return _F().binary_cross_entropy_with_logits(logits, labels)


def _loss_in(a: str, b: str, binary: bool) -> Callable[[bool, np.random.Generator], Arrays]:
    def make(q: bool, rng: np.random.Generator) -> Arrays:
        n, m = (16, 24) if q else (1000, 1000)
        other = (rng.random((n, m)) < 0.5).astype(np.float32) if binary else _rand(rng, n, m)
        return {a: _rand(rng, n, m, scale=2.0), b: other}
    return make


# -- rotary positional embedding (LLaMA), cos/sin tables are data ------------------------------

def rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    b, t, h, d = _shape(x)
    half = d // 2

    def body(n: Expr, s: Expr, k: Expr, c: Expr) -> Expr:
        cs, sn = te.stop_gradient(cos[s, c % half]), te.stop_gradient(sin[s, c % half])
        rot = te.if_then_else(c < half, -x[n, s, k, c + half], x[n, s, k, c - half])
        return x[n, s, k, c] * cs + rot * sn

    return te.compute((b, t, h, d), body, name="rope")


def rope_ref(x: Any, cos: Any, sin: Any) -> Any:
    import torch
    c = torch.cat([cos, cos], -1)[None, :, None, :]
    s = torch.cat([sin, sin], -1)[None, :, None, :]
    x1, x2 = x.chunk(2, -1)
    return x * c + torch.cat([-x2, x1], -1) * s


def rope_in(q: bool, rng: np.random.Generator) -> Arrays:
    b, t, h, d = (2, 8, 2, 8) if q else (8, 256, 8, 64)
    inv = 1.0 / 10000 ** (np.arange(0, d, 2) / d)
    ang = np.outer(np.arange(t), inv)
    return {"x": _rand(rng, b, t, h, d), "cos": np.cos(ang).astype(np.float32),
            "sin": np.sin(ang).astype(np.float32)}


# -- causal banded attention softmax (sliding-window attention) --------------------------------

def banded_softmax(scores: Tensor) -> Tensor:
    bh, t, _ = _shape(scores)

    def band(i: Expr, j: Expr) -> Expr:
        return te.all(j <= i, i - j < BAND)

    k1, k2 = te.reduce_axis((0, t), "k"), te.reduce_axis((0, t), "k")
    mx = te.compute((bh, t), lambda b, i: te.max(scores[b, i, k1], axis=k1, where=band(i, k1)),
                    name="row_max")
    e = te.compute((bh, t, t), lambda b, i, j: te.if_then_else(
        band(i, j), te.exp(scores[b, i, j] - mx[b, i]), 0.0), name="e")
    den = te.compute((bh, t), lambda b, i: te.sum(e[b, i, k2], axis=k2), name="den")
    return te.compute((bh, t, t), lambda b, i, j: e[b, i, j] / den[b, i], name="attn")


def banded_softmax_ref(scores: Any) -> Any:
    import torch
    t = scores.shape[-1]
    i = torch.arange(t, device=scores.device)
    d = i[:, None] - i[None, :]
    return torch.softmax(scores.masked_fill((d < 0) | (d >= BAND), float("-inf")), -1)


def banded_softmax_in(q: bool, rng: np.random.Generator) -> Arrays:
    bh, t = (2, 80) if q else (32, 256)
    return {"scores": _rand(rng, bh, t, t)}


# -- depthwise causal conv1d, 4 taps (Mamba) ---------------------------------------------------

def dwconv1d_causal(x: Tensor, w: Tensor, bias: Tensor) -> Tensor:
    b, c, t = _shape(x)
    k = te.reduce_axis((0, TAPS), "k")

    def body(n: Expr, f: Expr, s: Expr) -> Expr:
        p = s + k - (TAPS - 1)
        return te.sum(te.if_then_else(p >= 0, x[n, f, p], 0.0) * w[f, k], axis=k) + bias[f]

    return te.compute((b, c, t), body, name="dwconv")


def dwconv1d_causal_ref(x: Any, w: Any, bias: Any) -> Any:
    F = _F()
    return F.conv1d(F.pad(x, (TAPS - 1, 0)), w[:, None, :], bias, groups=x.shape[1])


def dwconv1d_causal_in(q: bool, rng: np.random.Generator) -> Arrays:
    b, c, t = (2, 8, 16) if q else (8, 256, 1024)
    return {"x": _rand(rng, b, c, t), "w": _rand(rng, c, TAPS, scale=0.5), "bias": _rand(rng, c)}


# -- dilated 3x3 conv2d (DeepLab / WaveNet-style context) --------------------------------------

def dilated_conv2d(x: Tensor, w: Tensor) -> Tensor:
    n, c, h, wd = _shape(x)
    o, _, kh, kw = _shape(w)
    rc, rr, rs = (te.reduce_axis((0, c), "c"), te.reduce_axis((0, kh), "r"),
                  te.reduce_axis((0, kw), "s"))

    def body(b: Expr, f: Expr, y: Expr, z: Expr) -> Expr:
        iy, ix = y + DILATION * rr - DILATION, z + DILATION * rs - DILATION
        v = te.if_then_else(_inside((iy, h), (ix, wd)), x[b, rc, iy, ix], 0.0)
        return te.sum(v * w[f, rc, rr, rs], axis=[rc, rr, rs])

    return te.compute((n, o, h, wd), body, name="dconv")


def dilated_conv2d_ref(x: Any, w: Any) -> Any:
    return _F().conv2d(x, w, padding=DILATION, dilation=DILATION)


def dilated_conv2d_in(q: bool, rng: np.random.Generator) -> Arrays:
    n, c, hw = (1, 4, 8) if q else (8, 64, 32)
    return {"x": _rand(rng, n, c, hw, hw), "w": _rand(rng, c, c, 3, 3, scale=1 / math.sqrt(9 * c))}


# -- bilinear grid sampler (spatial transformers, deformable sampling) -------------------------

def grid_sample(x: Tensor, grid: Tensor) -> Tensor:
    """F.grid_sample(mode="bilinear", padding_mode="zeros", align_corners=False)."""
    n, c, h, w = _shape(x)
    _, ho, wo, _ = _shape(grid)

    def body(b: Expr, f: Expr, i: Expr, j: Expr) -> Expr:
        fx = ((grid[b, i, j, 0] + 1.0) * w - 1.0) * 0.5
        fy = ((grid[b, i, j, 1] + 1.0) * h - 1.0) * 0.5
        x0, y0 = te.floor(fx), te.floor(fy)
        ax, ay = fx - x0, fy - y0
        xi, yi = x0.astype("int32"), y0.astype("int32")

        def tap(yy: Expr, xx: Expr) -> Expr:
            return te.if_then_else(_inside((yy, h), (xx, w)), x[b, f, yy, xx], 0.0)

        return ((tap(yi, xi) * (1.0 - ax) + tap(yi, xi + 1) * ax) * (1.0 - ay)
                + (tap(yi + 1, xi) * (1.0 - ax) + tap(yi + 1, xi + 1) * ax) * ay)

    return te.compute((n, c, ho, wo), body, name="grid_sample")


def grid_sample_ref(x: Any, grid: Any) -> Any:
    return _F().grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def grid_sample_in(q: bool, rng: np.random.Generator) -> Arrays:
    n, c, hw = (2, 3, 6) if q else (8, 32, 64)
    return {"x": _rand(rng, n, c, hw, hw),
            "grid": rng.uniform(-1.1, 1.1, (n, hw, hw, 2)).astype(np.float32)}


# -- segment sum over sorted ids (graph nets, ragged batches) ----------------------------------

def segment_sum(x: Tensor, offsets: Tensor) -> Tensor:
    (_, d), (s1,) = _shape(x), _shape(offsets)

    def body(s: Expr, k: Expr) -> Expr:
        r = te.reduce_axis((offsets[s], offsets[s + 1]), "r")
        return te.sum(x[r, k], axis=r)

    return te.compute((s1 - 1, d), body, name="segment_sum")


def segment_sum_ref(x: Any, offsets: Any) -> Any:
    import torch
    ids = torch.searchsorted(offsets[1:], torch.arange(x.shape[0], device=x.device), right=True)
    out = torch.zeros(offsets.shape[0] - 1, x.shape[1], dtype=x.dtype, device=x.device)
    return out.index_add(0, ids, x)


def segment_sum_in(q: bool, rng: np.random.Generator) -> Arrays:
    r, d, s = (40, 4, 6) if q else (65536, 64, 1024)
    cuts = np.sort(rng.integers(0, r + 1, s - 1))
    return {"x": _rand(rng, r, d), "offsets": np.concatenate([[0], cuts, [r]]).astype(np.int64)}


# -- gated MLP (SwiGLU, LLaMA) -----------------------------------------------------------------

def swiglu(x: Tensor, w1: Tensor, w3: Tensor, w2: Tensor) -> Tensor:
    (t, d), (_, f) = _shape(x), _shape(w1)
    k, k3, j = te.reduce_axis((0, d), "k"), te.reduce_axis((0, d), "k"), te.reduce_axis((0, f), "j")
    h1 = te.compute((t, f), lambda i, c: te.sum(x[i, k] * w1[k, c], axis=k), name="h1")
    h3 = te.compute((t, f), lambda i, c: te.sum(x[i, k3] * w3[k3, c], axis=k3), name="h3")
    a = te.compute((t, f), lambda i, c: h1[i, c] * te.sigmoid(h1[i, c]) * h3[i, c], name="gate")
    return te.compute((t, d), lambda i, m: te.sum(a[i, j] * w2[j, m], axis=j), name="swiglu")


def swiglu_ref(x: Any, w1: Any, w3: Any, w2: Any) -> Any:
    return (_F().silu(x @ w1) * (x @ w3)) @ w2


def swiglu_in(q: bool, rng: np.random.Generator) -> Arrays:
    t, d, f = (8, 16, 24) if q else (512, 512, 1376)
    return {"x": _rand(rng, t, d), "w1": _rand(rng, d, f, scale=d ** -0.5),
            "w3": _rand(rng, d, f, scale=d ** -0.5), "w2": _rand(rng, f, d, scale=f ** -0.5)}


# -- linear recurrence h_t = a * h_{t-1} + x_t (EMA / linear RNN), cumulative form -------------

def ema_scan(x: Tensor, p: Tensor) -> Tensor:
    """y[b, t, c] = sum_{s <= t} a[c]^(t - s) x[b, s, c], a = sigmoid(p): the scan unrolled."""
    b, t, c = _shape(x)
    a = te.compute((c,), lambda f: te.sigmoid(p[f]), name="decay")
    pw = te.compute((c, t), lambda f, k: te.power(a[f], k.astype(x.dtype)), name="powers")
    s = te.reduce_axis((0, t), "s")
    return te.compute((b, t, c), lambda n, i, f: te.sum(pw[f, i - s] * x[n, s, f], axis=s,
                                                        where=s <= i), name="ema")


def ema_scan_ref(x: Any, p: Any) -> Any:
    import torch
    a, h, ys = torch.sigmoid(p), torch.zeros_like(x[:, 0]), []
    for t in range(x.shape[1]):
        h = a * h + x[:, t]
        ys.append(h)
    return torch.stack(ys, 1)


def ema_scan_in(q: bool, rng: np.random.Generator) -> Arrays:
    b, t, c = (2, 6, 4) if q else (16, 64, 512)
    return {"x": _rand(rng, b, t, c), "p": _rand(rng, c)}


# -- RMSNorm (LLaMA) ---------------------------------------------------------------------------

def rmsnorm(x: Tensor, g: Tensor) -> Tensor:
    n, d = _shape(x)
    j = te.reduce_axis((0, d), "j")
    ms = te.compute((n,), lambda i: te.sum(x[i, j] * x[i, j], axis=j) / float(d), name="ms")
    return te.compute((n, d), lambda i, c: x[i, c] * te.rsqrt(ms[i] + EPS) * g[c], name="rmsnorm")


def rmsnorm_ref(x: Any, g: Any) -> Any:
    import torch
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * g


def rmsnorm_in(q: bool, rng: np.random.Generator) -> Arrays:
    n, d = (8, 32) if q else (4096, 1024)
    return {"x": _rand(rng, n, d), "g": 1 + _rand(rng, d, scale=0.1)}


# -- fused bias + GELU (BERT/GPT MLP) ----------------------------------------------------------

def bias_gelu(x: Tensor, b: Tensor) -> Tensor:
    n, d = _shape(x)

    def body(i: Expr, j: Expr) -> Expr:
        v = x[i, j] + b[j]
        return 0.5 * v * (1.0 + te.erf(v * (1.0 / math.sqrt(2.0))))

    return te.compute((n, d), body, name="bias_gelu")


def bias_gelu_ref(x: Any, b: Any) -> Any:
    return _F().gelu(x + b)


def bias_gelu_in(q: bool, rng: np.random.Generator) -> Arrays:
    n, d = (8, 32) if q else (2048, 2048)
    return {"x": _rand(rng, n, d), "b": _rand(rng, d, scale=0.1)}


# -- cross-entropy with label smoothing (classifiers, LMs) -------------------------------------

def ce_label_smoothing(logits: Tensor, target: Tensor) -> Tensor:
    """mean_i [(1 - eps) (lse_i - x[i, t_i]) + eps (lse_i - mean_j x[i, j])]."""
    n, c = _shape(logits)
    k1, k2, k3 = (te.reduce_axis((0, c), "k") for _ in range(3))
    mx = te.compute((n,), lambda i: te.max(logits[i, k1], axis=k1), name="row_max")
    lse = te.compute((n,), lambda i: te.log(te.sum(te.exp(logits[i, k2] - mx[i]), axis=k2))
                     + mx[i], name="lse")
    sx = te.compute((n,), lambda i: te.sum(logits[i, k3], axis=k3), name="row_sum")
    r = te.reduce_axis((0, n), "r")
    return te.compute((), lambda: te.sum(lse[r] - (1.0 - SMOOTHING) * logits[r, target[r]]
                                         - SMOOTHING / c * sx[r], axis=r) / float(n), name="ce")


def ce_label_smoothing_ref(logits: Any, target: Any) -> Any:
    return _F().cross_entropy(logits, target, label_smoothing=SMOOTHING)


def ce_label_smoothing_in(q: bool, rng: np.random.Generator) -> Arrays:
    n, c = (8, 10) if q else (2048, 1000)
    return {"logits": _rand(rng, n, c, scale=2.0), "target": rng.integers(0, c, n)}


USER_OPS: dict[str, UserOp] = {u.name: u for u in (
    UserOp("groupnorm_silu", "diffusion U-Net", groupnorm_silu, groupnorm_silu_ref,
           groupnorm_silu_in, ("x", "gamma", "beta")),
    UserOp("smooth_l1_mean", "detection box loss", smooth_l1_mean, smooth_l1_mean_ref,
           _loss_in("pred", "target", False), ("pred",)),
    UserOp("bce_logits_mean", "multi-label loss", bce_logits_mean, bce_logits_mean_ref,
           _loss_in("logits", "labels", True), ("logits",)),
    UserOp("rope", "LLaMA attention", rope, rope_ref, rope_in, ("x",)),
    UserOp("banded_softmax", "sliding-window attention", banded_softmax, banded_softmax_ref,
           banded_softmax_in, ("scores",)),
    UserOp("dwconv1d_causal", "Mamba block", dwconv1d_causal, dwconv1d_causal_ref,
           dwconv1d_causal_in, ("x", "w", "bias")),
    UserOp("dilated_conv2d", "DeepLab context", dilated_conv2d, dilated_conv2d_ref,
           dilated_conv2d_in, ("x", "w")),
    UserOp("grid_sample", "spatial transformer", grid_sample, grid_sample_ref, grid_sample_in,
           ("x", "grid")),
    UserOp("segment_sum", "graph nets", segment_sum, segment_sum_ref, segment_sum_in, ("x",)),
    UserOp("swiglu", "LLaMA MLP", swiglu, swiglu_ref, swiglu_in, ("x", "w1", "w3", "w2")),
    UserOp("ema_scan", "linear RNN / EMA", ema_scan, ema_scan_ref, ema_scan_in, ("x", "p")),
    UserOp("rmsnorm", "LLaMA norm", rmsnorm, rmsnorm_ref, rmsnorm_in, ("x", "g")),
    UserOp("bias_gelu", "BERT/GPT MLP", bias_gelu, bias_gelu_ref, bias_gelu_in, ("x", "b")),
    UserOp("ce_label_smoothing", "classifier loss", ce_label_smoothing, ce_label_smoothing_ref,
           ce_label_smoothing_in, ("logits",)),
)}
