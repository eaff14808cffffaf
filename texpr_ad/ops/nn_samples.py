"""Registry entries of the level-2 operators: samples and NumPy references (written
directly in NumPy, independent of te)."""
from __future__ import annotations

import itertools
from typing import Callable, Sequence

import numpy as np

from .. import te
from ..te import Tensor
from .nn import (
    adaptive_pool2d, avg_pool2d, batch_matmul, conv1d, conv2d, conv2d_transpose,
    conv2d_winograd, conv3d, dense, depthwise_conv2d, einsum, flatten, global_pool2d,
    l2_normalize, lrn, matmul, max_pool1d, max_pool2d, max_pool3d, mirror_pad, pad, upsampling)
from .registry import Sample, register, rng_for

# == registry ===================================================================================

def _rand(rng: np.random.Generator, shape: Sequence[int], dtype: str) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _distinct(rng: np.random.Generator, shape: Sequence[int], dtype: str) -> np.ndarray:
    """Values without ties, pairwise at least ~2/size apart (for max/min windows)."""
    size = int(np.prod(shape))
    vals = (rng.permutation(size) + 0.3 * rng.random(size)) * (4.0 / size) - 2.0
    return vals.reshape(shape).astype(dtype)


def _ph(*specs: tuple[str, Sequence[int]], dtype: str) -> tuple[Tensor, ...]:
    return tuple(te.placeholder(tuple(s), dtype, n) for n, s in specs)


def _float_sample(name: str, dtype: str, specs: Sequence[tuple[str, Sequence[int]]],
                  fn: Callable[..., Tensor], distinct: bool = False) -> Sample:
    rng = rng_for(name)
    ins = _ph(*specs, dtype=dtype)
    gen = _distinct if distinct else _rand
    arrays = tuple(gen(rng, s, dtype) for _, s in specs)
    out = fn(*ins)
    outs = tuple(out) if isinstance(out, (list, tuple)) else (out,)
    return Sample(ins, outs, arrays, (True,) * len(ins))


# -- NumPy references (written directly, independent of te) ------------------------------------

def np_conv(x: np.ndarray, w: np.ndarray, stride: Sequence[int], padding: Sequence[int],
            dilation: Sequence[int], groups: int = 1) -> np.ndarray:
    nd = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    o, cg, *ks = w.shape
    out_sp = [(xp.shape[2 + i] - dilation[i] * (ks[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    out = np.zeros((x.shape[0], o, *out_sp), dtype=np.result_type(x, w))
    og = o // groups
    for g in range(groups):
        xg = xp[:, g * cg:(g + 1) * cg]
        wg = w[g * og:(g + 1) * og]
        for kpos in itertools.product(*[range(k) for k in ks]):
            first = [kpos[i] * dilation[i] for i in range(nd)]
            sl = tuple(slice(first[i], first[i] + stride[i] * (out_sp[i] - 1) + 1, stride[i])
                       for i in range(nd))
            patch = xg[(slice(None), slice(None), *sl)]
            out[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", patch, wg[(..., *kpos)])
    return out


def np_conv_transpose2d(x: np.ndarray, w: np.ndarray, stride: int, padding: int,
                        output_padding: int = 0) -> np.ndarray:
    """Scatter form: out[n, o, i*s + ky - p, j*s + kx - p] += x[n, c, i, j] * w[c, o, ky, kx]."""
    n, c, h, wd = x.shape
    _, o, kh, kw = w.shape
    full = np.zeros((n, o, (h - 1) * stride + kh + output_padding,
                     (wd - 1) * stride + kw + output_padding))
    for i, j in itertools.product(range(h), range(wd)):
        full[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw] += np.einsum(
            "nc,cokl->nokl", x[:, :, i, j], w)
    oh = (h - 1) * stride - 2 * padding + kh + output_padding
    ow = (wd - 1) * stride - 2 * padding + kw + output_padding
    return full[:, :, padding:padding + oh, padding:padding + ow]


def np_pool(x: np.ndarray, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int],
            kind: str, count_include_pad: bool = True) -> np.ndarray:
    nd = x.ndim - 2
    sp = x.shape[2:]
    out_sp = [(sp[i] + 2 * padding[i] - kernel[i]) // stride[i] + 1 for i in range(nd)]
    out = np.zeros(x.shape[:2] + tuple(out_sp))
    for pos in itertools.product(*[range(s) for s in out_sp]):
        lo = [pos[i] * stride[i] - padding[i] for i in range(nd)]
        hi = [lo[i] + kernel[i] for i in range(nd)]
        sl = tuple(slice(max(lo[i], 0), min(hi[i], sp[i])) for i in range(nd))
        win = x[(slice(None), slice(None), *sl)].reshape(x.shape[:2] + (-1,))
        if kind == "max":
            out[(..., *pos)] = win.max(-1)
        else:
            cnt = np.prod(kernel) if count_include_pad else win.shape[-1]
            out[(..., *pos)] = win.sum(-1) / cnt
    return out


def np_adaptive_avg_pool2d(x: np.ndarray, oh: int, ow: int) -> np.ndarray:
    h, w = x.shape[2:]
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        h0, h1 = int(np.floor(i * h / oh)), int(np.ceil((i + 1) * h / oh))
        w0, w1 = int(np.floor(j * w / ow)), int(np.ceil((j + 1) * w / ow))
        out[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return out


def _np_upsample_bilinear(x: np.ndarray, scale: int) -> np.ndarray:
    from .vision import np_resize_bilinear
    return np_resize_bilinear(x, x.shape[2] * scale, x.shape[3] * scale)


def _np_lrn(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    r = size // 2
    sq = np.pad(x * x, [(0, 0), (r, r), (0, 0), (0, 0)])
    s = sum(sq[:, k:k + x.shape[1]] for k in range(size))
    return x / (bias + alpha * s / size) ** beta


# -- entries ------------------------------------------------------------------------------------

def _reg(name: str, specs: Sequence[tuple[str, Sequence[int]]], fn: Callable[..., Tensor],
         reference: Callable[..., Sequence[np.ndarray]], notes: str = "", distinct: bool = False,
         category: str = "L2") -> None:
    @register(name, category, reference, notes=notes)
    def sample(dtype: str) -> Sample:
        return _float_sample(name, dtype, specs, fn, distinct)


_reg("dense", [("data", (4, 5)), ("weight", (3, 5))], dense, lambda x, w: [x @ w.T],
     notes="x (N, K), w (M, K) -> x w^T, as TOPI/PyTorch Linear")
_reg("matmul", [("A", (4, 5)), ("B", (5, 3))], matmul, lambda a, b: [a @ b])
_reg("batch_matmul", [("data", (2, 3, 4)), ("y", (2, 5, 4))], batch_matmul,
     lambda x, y: [x @ y.transpose(0, 2, 1)], notes="TOPI layout: y is (B, N, K), transpose_b=True")
for _sub, _name, _specs in [
        ("ij,jk->ik", "einsum_ij_jk", [("A", (4, 5)), ("B", (5, 3))]),
        ("bij,bjk->bik", "einsum_bij_bjk", [("A", (2, 3, 4)), ("B", (2, 4, 5))]),
        ("i,i->", "einsum_i_i", [("A", (6,)), ("B", (6,))]),
        ("ij->ji", "einsum_ij_ji", [("A", (3, 4))]),
        ("ij,ji->ij", "einsum_ij_ji_ij", [("A", (3, 4)), ("B", (4, 3))])]:
    _reg(_name, _specs, (lambda s: lambda *t: einsum(s, *t))(_sub),
         (lambda s: lambda *a: [np.asarray(np.einsum(s, *a))])(_sub),
         notes=f"einsum {_sub!r}" + (" (zero-dim output)" if _sub.endswith("->") else ""))

_reg("conv1d", [("data", (2, 3, 9)), ("weight", (4, 3, 3))], lambda x, w: conv1d(x, w, 1, 1),
     lambda x, w: [np_conv(x, w, (1,), (1,), (1,))], notes="NCW/OIW, stride 1, padding 1")
_reg("conv2d", [("data", (2, 3, 7, 7)), ("weight", (4, 3, 3, 3))], conv2d,
     lambda x, w: [np_conv(x, w, (1, 1), (0, 0), (1, 1))], notes="NCHW/OIHW, no padding")
_reg("conv2d_strided", [("data", (2, 3, 7, 7)), ("weight", (4, 3, 3, 3))],
     lambda x, w: conv2d(x, w, stride=2, padding=1),
     lambda x, w: [np_conv(x, w, (2, 2), (1, 1), (1, 1))], notes="stride 2, padding 1")
_reg("conv2d_dilated", [("data", (2, 3, 7, 7)), ("weight", (4, 3, 3, 3))],
     lambda x, w: conv2d(x, w, dilation=2, padding=1),
     lambda x, w: [np_conv(x, w, (1, 1), (1, 1), (2, 2))], notes="dilation 2, padding 1")
_reg("conv2d_grouped", [("data", (2, 4, 6, 6)), ("weight", (6, 2, 3, 3))],
     lambda x, w: conv2d(x, w, padding=1, groups=2),
     lambda x, w: [np_conv(x, w, (1, 1), (1, 1), (1, 1), groups=2)],
     notes="groups 2: weight (O, C/groups, KH, KW); output channel f reads group f // (O/groups)")
_reg("conv2d_depthwise", [("data", (2, 3, 6, 6)), ("weight", (3, 2, 3, 3))],
     lambda x, w: depthwise_conv2d(x, w, padding=1),
     lambda x, w: [np_conv(x, w.reshape(6, 1, 3, 3), (1, 1), (1, 1), (1, 1), groups=3)],
     notes="TOPI depthwise layout: weight (C, multiplier, KH, KW); out channel c*multiplier + m")
_reg("conv3d", [("data", (1, 2, 5, 5, 5)), ("weight", (3, 2, 3, 3, 3))],
     lambda x, w: conv3d(x, w, padding=1),
     lambda x, w: [np_conv(x, w, (1,) * 3, (1,) * 3, (1,) * 3)], notes="NCDHW/OIDHW, padding 1")
_reg("conv2d_transpose", [("data", (2, 3, 4, 4)), ("weight", (3, 2, 3, 3))],
     lambda x, w: conv2d_transpose(x, w, stride=2, padding=1, output_padding=1),
     lambda x, w: [np_conv_transpose2d(x, w, 2, 1, 1)],
     notes="weight (C_in, C_out, KH, KW) as PyTorch; stride 2, padding 1, output_padding 1")
_reg("conv2d_winograd", [("data", (2, 3, 6, 6)), ("weight", (4, 3, 3, 3))],
     lambda x, w: conv2d_winograd(x, w, padding=1),
     lambda x, w: [np_conv(x, w, (1, 1), (1, 1), (1, 1))],
     notes="F(2x2,3x3) with Lavin-Gray G, B^T, A^T as const-matrix stages; equals conv2d padding 1")

_MAXNOTE = ("ties: texpr_ad splits the gradient evenly among tied maxima (JAX / PyTorch amax), "
            "where PyTorch max-pool gives it all to the first maximum; the sample has no ties, "
            "so both agree; padding is -inf so padded cells never win")
_reg("max_pool1d", [("data", (2, 3, 9))], lambda x: max_pool1d(x, 3, 2, 1),
     lambda x: [np_pool(x, (3,), (2,), (1,), "max")], notes=_MAXNOTE, distinct=True)
_reg("max_pool2d", [("data", (2, 3, 7, 7))], lambda x: max_pool2d(x, 3, 2, 1),
     lambda x: [np_pool(x, (3, 3), (2, 2), (1, 1), "max")], notes="3x3 s2 p1; " + _MAXNOTE,
     distinct=True)
_reg("max_pool3d", [("data", (1, 2, 5, 5, 5))], lambda x: max_pool3d(x, 2, 2, 0),
     lambda x: [np_pool(x, (2,) * 3, (2,) * 3, (0,) * 3, "max")], notes="2x2x2 s2; " + _MAXNOTE,
     distinct=True)
_reg("avg_pool2d_pad_incl", [("data", (2, 3, 6, 6))],
     lambda x: avg_pool2d(x, 3, 2, 1, count_include_pad=True),
     lambda x: [np_pool(x, (3, 3), (2, 2), (1, 1), "avg", True)],
     notes="count_include_pad=True: divide by the kernel size (PyTorch default)")
_reg("avg_pool2d_pad_excl", [("data", (2, 3, 6, 6))],
     lambda x: avg_pool2d(x, 3, 2, 1, count_include_pad=False),
     lambda x: [np_pool(x, (3, 3), (2, 2), (1, 1), "avg", False)],
     notes="count_include_pad=False: divide by the in-bounds window size")
_reg("global_max_pool2d", [("data", (2, 3, 4, 5))], lambda x: global_pool2d(x, "max"),
     lambda x: [x.max(axis=(2, 3), keepdims=True)], notes="-> (N, C, 1, 1); " + _MAXNOTE,
     distinct=True)
_reg("global_avg_pool2d", [("data", (2, 3, 4, 5))], lambda x: global_pool2d(x, "avg"),
     lambda x: [x.mean(axis=(2, 3), keepdims=True)], notes="-> (N, C, 1, 1)")
_reg("adaptive_avg_pool2d", [("data", (2, 3, 7, 5))], lambda x: adaptive_pool2d(x, (3, 2), "avg"),
     lambda x: [np_adaptive_avg_pool2d(x, 3, 2)],
     notes="windows [floor(i*H/OH), ceil((i+1)*H/OH)) as PyTorch; 7x5 -> 3x2 (overlapping)")
_reg("upsampling_nearest", [("data", (2, 3, 3, 4))], lambda x: upsampling(x, 2, 3, "nearest"),
     lambda x: [x.repeat(2, axis=2).repeat(3, axis=3)], notes="source index floor(y / scale)")
_reg("upsampling_bilinear", [("data", (2, 3, 3, 4))], lambda x: upsampling(x, 2, 2, "bilinear"),
     lambda x: [_np_upsample_bilinear(x, 2)],
     notes="align_corners=False (half-pixel centers, PyTorch interpolate bilinear)")
_reg("flatten", [("data", (2, 3, 4, 5))], flatten, lambda x: [x.reshape(2, -1)])
_reg("pad_constant", [("data", (3, 4, 5))], lambda x: pad(x, (1, 0, 2), (0, 2, 1), 0.5),
     lambda x: [np.pad(x, [(1, 0), (0, 2), (2, 1)], constant_values=0.5)], notes="pad value 0.5")
_reg("pad_edge", [("data", (3, 4, 5))], lambda x: mirror_pad(x, (1, 0, 2), (0, 2, 3), "EDGE"),
     lambda x: [np.pad(x, [(1, 0), (0, 2), (2, 3)], mode="edge")], notes="replicate the border")
_reg("pad_reflect", [("data", (3, 4, 5))], lambda x: mirror_pad(x, (1, 0, 2), (0, 2, 3), "REFLECT"),
     lambda x: [np.pad(x, [(1, 0), (0, 2), (2, 3)], mode="reflect")],
     notes="reflect without repeating the border (NumPy 'reflect', PyTorch ReflectionPad)")
_reg("lrn", [("data", (2, 5, 3, 3))], lambda x: lrn(x, 3, 1, 0.1, 0.75, 2.0),
     lambda x: [_np_lrn(x, 3, 0.1, 0.75, 2.0)], notes="size 3 across channels, alpha/size scaling")
_reg("l2_normalize", [("data", (2, 4, 3))], lambda x: l2_normalize(x, 1e-12, 1),
     lambda x: [x / np.sqrt(np.maximum((x * x).sum(axis=1, keepdims=True), 1e-12))],
     notes="eps=1e-12 below every sample norm, so max(., eps) is smooth here")
