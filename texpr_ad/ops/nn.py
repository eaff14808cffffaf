"""Level 2 operators: dense, matmul, einsum, convolutions, pooling, upsampling, padding, norms.

Written as TVM TOPI writes them: NCHW data, OIHW weights, padding as a
separate stage guarded by `te.if_then_else`, strides and dilation as affine
index maps, a reduction as the whole body of its stage.  Spatial dims must be
static; batch dims may be symbolic.
"""
from __future__ import annotations

import inspect
import itertools
from typing import Any, Callable, Sequence

import numpy as np

from .. import te
from ..te import Tensor, TensorError

# -- helpers ---------------------------------------------------------------------------------

IntLike = Any  # a Python int or an integer te expression (symbolic dim)


def dims(t: Tensor) -> tuple[IntLike, ...]:
    """The shape of `t` with constant dims as Python ints (symbolic dims stay expressions)."""
    return tuple(s.value if isinstance(s, te.Const) else s for s in t.shape)


def static_dims(t: Tensor, what: str) -> tuple[int, ...]:
    d = dims(t)
    if not all(isinstance(s, int) for s in d):
        raise TensorError(f"{what}: tensor {t.name!r} needs a static shape here, got {t.shape}")
    return d


def expand(v: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    """`v` repeated n times, or `v` itself when it is already a sequence of length n."""
    out = (v,) * n if isinstance(v, int) else tuple(v)
    if len(out) != n:
        raise TensorError(f"{what} must be an int or {n} ints, got {v!r}")
    return out


def named(names: Sequence[str], f: Callable[..., Any]) -> Callable[..., Any]:
    """`f(*idx)` with a signature naming its parameters, so te.compute names the axes."""
    def g(*idx: Any) -> Any:
        return f(*idx)
    g.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names])
    return g


def affine(x: Any, s: int, r: Any, d: int) -> Any:
    """`x * s + r * d` without multiplications by one."""
    xs = x if s == 1 else x * s
    rd = r if d == 1 else r * d
    return xs + rd


def _spatial_names(nd: int) -> list[str]:
    return ["z", "y", "x"][3 - nd:] if nd <= 3 else [f"s{k}" for k in range(nd)]


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise TensorError(msg)


# -- padding ---------------------------------------------------------------------------------

def pad(data: Tensor, pad_before: Sequence[int], pad_after: Sequence[int] | None = None,
        pad_value: Any = 0.0, name: str = "PadInput") -> Tensor:
    """Constant padding (TOPI `nn.pad`): `pad_before[d]`/`pad_after[d]` elements per dim."""
    n = data.ndim
    after = tuple(pad_before) if pad_after is None else tuple(pad_after)
    _need(len(pad_before) == n and len(after) == n,
          f"pad: tensor {data.name!r} has {n} dims; pass {n} pad_before and pad_after values")
    shape = dims(data)
    out_shape = tuple(s + b + a for s, b, a in zip(shape, pad_before, after, strict=True))

    def body(*idx: Any) -> Any:
        conds, src = [], []
        for x, b, a, s in zip(idx, pad_before, after, shape, strict=True):
            src.append(x - b if b else x)
            if b:
                conds.append(x >= b)
            if a:
                conds.append(x < b + s)
        if not conds:
            return data[tuple(src)]
        return te.if_then_else(te.all(*conds), data[tuple(src)], pad_value)

    return te.compute(out_shape, body, name=name)


def mirror_pad(data: Tensor, pad_before: Sequence[int], pad_after: Sequence[int] | None = None,
               mode: str = "REFLECT", name: str = "MirrorPadInput") -> Tensor:
    """Index-remapping padding: "REFLECT" (no edge repeat), "SYMMETRIC" or "EDGE" (replicate).

    Each padded index is mapped back into range with selects on the index:
    REFLECT maps `-k -> k` and `n-1+k -> n-1-k`; EDGE clamps to `[0, n-1]`.
    """
    n = data.ndim
    after = tuple(pad_before) if pad_after is None else tuple(pad_after)
    _need(len(pad_before) == n and len(after) == n,
          f"{mode.lower()} pad: tensor {data.name!r} has {n} dims; pass {n} pad values")
    shape = static_dims(data, f"{mode.lower()} pad")
    for b, a, s in zip(pad_before, after, shape, strict=True):
        limit = s - 1 if mode == "REFLECT" else s
        _need(mode == "EDGE" or max(b, a) <= limit,
              f"{mode.lower()} pad of {data.name!r}: padding {max(b, a)} exceeds {limit} for a dim "
              f"of size {s}; use smaller padding or mode EDGE")
    out_shape = tuple(s + b + a for s, b, a in zip(shape, pad_before, after, strict=True))

    def remap(x: Any, b: int, a: int, s: int) -> Any:
        if not b and not a:
            return x
        i = x - b if b else x
        lo, hi = {"REFLECT": (-i, 2 * (s - 1) - i), "SYMMETRIC": (-1 - i, 2 * s - 1 - i),
                  "EDGE": (0, s - 1)}[mode]
        out = te.if_then_else(i >= s, hi, i) if a else i
        return te.if_then_else(i < 0, lo, out) if b else out

    if mode not in ("REFLECT", "SYMMETRIC", "EDGE"):
        raise TensorError(f"mirror_pad: mode must be REFLECT, SYMMETRIC or EDGE, got {mode!r}")
    return te.compute(out_shape, lambda *idx: data[tuple(
        remap(x, b, a, s) for x, b, a, s in zip(idx, pad_before, after, shape, strict=True))],
        name=name)


def dilate(data: Tensor, strides: Sequence[int], dilation_value: float = 0.0,
           name: str = "DilatedInput") -> Tensor:
    """Insert `strides[d] - 1` zeros between elements along each dim (TOPI `nn.dilate`)."""
    shape = dims(data)
    out_shape = tuple((s - 1) * k + 1 for s, k in zip(shape, strides, strict=True))

    def body(*idx: Any) -> Any:
        conds = [te.floormod(x, k) == 0 for x, k in zip(idx, strides, strict=True) if k > 1]
        src = tuple(x // k if k > 1 else x for x, k in zip(idx, strides, strict=True))
        return te.if_then_else(te.all(*conds), data[src], dilation_value) if conds else data[src]

    return te.compute(out_shape, body, name=name)


# -- dense / matmul / einsum ------------------------------------------------------------------

def dense(data: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`out[i, j] = sum_k data[i, k] * weight[j, k] (+ bias[j])`: data (N, K), weight (M, K)."""
    _need(data.ndim == 2 and weight.ndim == 2,
          f"dense: data {data.name!r} and weight {weight.name!r} must be 2-d (N, K) and (M, K)")
    (n, k), (m, k2) = dims(data), dims(weight)
    _need(not (isinstance(k, int) and isinstance(k2, int)) or k == k2,
          f"dense: data {data.name!r} has K={k} but weight {weight.name!r} has K={k2}; "
          f"weight must be (out_features, in_features)")
    rk = te.reduce_axis((0, k), name="k")
    out = te.compute((n, m), lambda i, j: te.sum(data[i, rk] * weight[j, rk], axis=rk),
                     name="T_dense")
    if bias is None:
        return out
    return te.compute((n, m), lambda i, j: out[i, j] + bias[j], name="T_add")


def matmul(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    """2-d matrix product `op(a) @ op(b)`, op = transpose where asked."""
    _need(a.ndim == 2 and b.ndim == 2, f"matmul: {a.name!r} and {b.name!r} must be 2-d")
    (a0, a1), (b0, b1) = dims(a), dims(b)
    n, k = (a1, a0) if transpose_a else (a0, a1)
    k2, m = (b1, b0) if transpose_b else (b0, b1)
    _need(not (isinstance(k, int) and isinstance(k2, int)) or k == k2,
          f"matmul: {a.name!r} gives K={k} but {b.name!r} gives K={k2}")
    rk = te.reduce_axis((0, k), name="k")
    return te.compute((n, m), lambda i, j: te.sum(
        (a[rk, i] if transpose_a else a[i, rk]) * (b[j, rk] if transpose_b else b[rk, j]),
        axis=rk), name="T_matmul")


def batch_matmul(x: Tensor, y: Tensor, transpose_a: bool = False,
                 transpose_b: bool = True) -> Tensor:
    """Batched product; TOPI's default layout: x (B, M, K), y (B, N, K) -> (B, M, N)."""
    _need(x.ndim == 3 and y.ndim == 3, f"batch_matmul: {x.name!r} and {y.name!r} must be 3-d")
    (bx, x1, x2), (by, y1, y2) = dims(x), dims(y)
    m, k = (x2, x1) if transpose_a else (x1, x2)
    n, k2 = (y1, y2) if transpose_b else (y2, y1)
    _need(not (isinstance(k, int) and isinstance(k2, int)) or k == k2,
          f"batch_matmul: {x.name!r} gives K={k} but {y.name!r} gives K={k2}")
    _need(not (isinstance(bx, int) and isinstance(by, int)) or bx == by,
          f"batch_matmul: batch {bx} of {x.name!r} differs from batch {by} of {y.name!r}")
    rk = te.reduce_axis((0, k), name="k")
    return te.compute((bx, m, n), lambda b, i, j: te.sum(
        (x[b, rk, i] if transpose_a else x[b, i, rk])
        * (y[b, j, rk] if transpose_b else y[b, rk, j]),
        axis=rk), name="T_batch_matmul")


def einsum(subscripts: str, *operands: Tensor) -> Tensor:
    """`einsum("ij,jk->ik", a, b)`: letters absent from the output become reduce axes.

    Without "->" the output is the letters seen once, sorted (NumPy's rule).
    """
    lhs, _, out = subscripts.replace(" ", "").partition("->")
    terms = lhs.split(",")
    _need(len(terms) == len(operands),
          f"einsum {subscripts!r}: {len(terms)} operand subscripts but {len(operands)} tensors")
    if "->" not in subscripts:
        out = "".join(sorted(c for c in set(lhs) - {","} if lhs.count(c) == 1))
    extent: dict[str, Any] = {}
    for term, t in zip(terms, operands, strict=True):
        _need(len(term) == t.ndim, f"einsum {subscripts!r}: tensor {t.name!r} has {t.ndim} dims "
                                   f"but subscript {term!r} names {len(term)}")
        for c, s in zip(term, dims(t), strict=True):
            _need(extent.setdefault(c, s) is s or extent[c] == s,
                  f"einsum {subscripts!r}: index {c!r} is {extent[c]} elsewhere but {s} in "
                  f"tensor {t.name!r}")
    _need(all(c in extent for c in out), f"einsum {subscripts!r}: output index not in inputs")
    red = {c: te.reduce_axis((0, extent[c]), name=c) for c in extent if c not in out}

    def body(*idx: Any) -> Any:
        env = dict(zip(out, idx, strict=True)) | red
        prod: te.Expr | None = None
        for term, t in zip(terms, operands, strict=True):
            r = t[tuple(env[c] for c in term)]
            prod = r if prod is None else prod * r
        return te.sum(prod, axis=list(red.values())) if red else prod

    return te.compute(tuple(extent[c] for c in out), named(list(out), body), name="T_einsum")


# -- convolutions ------------------------------------------------------------------------------

def conv(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
         padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, groups: int = 1,
         name: str = "conv") -> Tensor:
    """N-d grouped convolution, data (N, C, *S), weight (O, C // groups, *K) -> (N, O, *S')."""
    nd = data.ndim - 2
    _need(nd >= 1 and weight.ndim == nd + 2,
          f"{name}: data {data.name!r} has {data.ndim} dims and weight {weight.name!r} has "
          f"{weight.ndim}; expected (N, C, *spatial) and (O, C/groups, *kernel) of equal rank")
    s, p, d = (expand(v, nd, f"{name} {w}") for v, w in
               ((stride, "stride"), (padding, "padding"), (dilation, "dilation")))
    n, c, *sp = dims(data)
    o, cg, *ks = static_dims(weight, name)
    _need(not isinstance(c, int) or c == cg * groups,
          f"{name}: data {data.name!r} has {c} input channels but weight {weight.name!r} expects "
          f"{cg} x groups={groups} = {cg * groups}; weight must be (O, C/groups, *kernel)")
    _need(o % groups == 0, f"{name}: weight {weight.name!r} has {o} output channels, "
                           f"not divisible by groups={groups}")
    out_sp = [(x + 2 * pp - dd * (k - 1) - 1) // ss + 1 for x, pp, dd, k, ss in
              zip(sp, p, d, ks, s, strict=True)]
    _need(all(not isinstance(x, int) or x > 0 for x in out_sp),
          f"{name}: kernel {tuple(ks)} does not fit input {tuple(sp)} with padding {p}")
    padded = pad(data, (0, 0, *p), None, 0.0, name=f"{name}_pad") if any(p) else data
    rc = te.reduce_axis((0, cg), name="rc")
    rk = [te.reduce_axis((0, k), name=f"r{a}") for k, a in zip(ks, _spatial_names(nd), strict=True)]
    og = o // groups

    def body(b: Any, f: Any, *xs: Any) -> Any:
        ch = rc if groups == 1 else (f // og) * cg + rc
        idx = [affine(x, ss, r, dd) for x, ss, r, dd in zip(xs, s, rk, d, strict=True)]
        return te.sum(padded[(b, ch, *idx)] * weight[(f, rc, *rk)], axis=[rc, *rk])

    return te.compute((n, o, *out_sp), named(["n", "f", *_spatial_names(nd)], body), name=name)


def conv1d(data: Tensor, weight: Tensor, stride: int = 1, padding: int = 0, dilation: int = 1,
           groups: int = 1) -> Tensor:
    """1-d convolution, NCW data and OIW weight."""
    return conv(data, weight, stride, padding, dilation, groups, name="conv1d")


def conv2d(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
           groups: int = 1) -> Tensor:
    """2-d convolution, NCHW data and OIHW weight (groups: weight is (O, C/groups, KH, KW))."""
    return conv(data, weight, stride, padding, dilation, groups, name="conv2d")


def conv3d(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
           groups: int = 1) -> Tensor:
    """3-d convolution, NCDHW data and OIDHW weight."""
    return conv(data, weight, stride, padding, dilation, groups, name="conv3d")


def depthwise_conv2d(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0,
                     dilation: int | Sequence[int] = 1) -> Tensor:
    """Depthwise conv (TOPI `depthwise_conv2d_nchw`): weight (C, multiplier, KH, KW).

    Output channel `f` reads input channel `f // multiplier` with filter `f % multiplier`.
    """
    _need(data.ndim == 4 and weight.ndim == 4,
          f"depthwise_conv2d: data {data.name!r} and weight {weight.name!r} must be 4-d")
    (sh, sw), (ph, pw), (dh, dw) = (
        expand(v, 2, w) for v, w in
        ((stride, "stride"), (padding, "padding"), (dilation, "dilation")))
    n, c, h, w = dims(data)
    cw, mult, kh, kw = static_dims(weight, "depthwise_conv2d")
    _need(not isinstance(c, int) or c == cw,
          f"depthwise_conv2d: data {data.name!r} has {c} channels but weight {weight.name!r} "
          f"has {cw}; weight must be (C, multiplier, KH, KW)")
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    padded = pad(data, (0, 0, ph, pw), None, 0.0, name="depthwise_pad") if ph or pw else data
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    return te.compute((n, c * mult, oh, ow), lambda b, f, y, x: te.sum(
        padded[b, f // mult, affine(y, sh, ry, dh), affine(x, sw, rx, dw)]
        * weight[f // mult, f % mult, ry, rx], axis=[ry, rx]), name="depthwise_conv2d")


def conv2d_transpose(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0,
                     output_padding: int | Sequence[int] = 0) -> Tensor:
    """Transposed conv (TOPI `conv2d_transpose_nchw`): data (N, C, H, W), weight (C, O, KH, KW).

    Dilate the input by the stride, pad by `K - 1 - padding`, and correlate with the
    flipped kernel; output size `(H - 1) * stride - 2 * padding + K + output_padding`.
    """
    _need(data.ndim == 4 and weight.ndim == 4,
          f"conv2d_transpose: data {data.name!r} and weight {weight.name!r} must be 4-d")
    s, p, op = (expand(v, 2, w) for v, w in
                ((stride, "stride"), (padding, "padding"), (output_padding, "output_padding")))
    n, c, h, w = dims(data)
    cw, o, kh, kw = static_dims(weight, "conv2d_transpose")
    _need(not isinstance(c, int) or c == cw,
          f"conv2d_transpose: data {data.name!r} has {c} channels but weight {weight.name!r} "
          f"has {cw} in dim 0; weight must be (C_in, C_out, KH, KW)")
    _need(all(pp <= k - 1 for pp, k in zip(p, (kh, kw), strict=True)) and
          all(q < ss for q, ss in zip(op, s, strict=True)),
          f"conv2d_transpose: need padding <= kernel - 1 and output_padding < stride, got "
          f"padding {p}, output_padding {op} for kernel {(kh, kw)}, stride {s}")
    dil = dilate(data, (1, 1, *s), name="conv2d_transpose_dilate") if max(s) > 1 else data
    before = (0, 0, kh - 1 - p[0], kw - 1 - p[1])
    after = (0, 0, kh - 1 - p[0] + op[0], kw - 1 - p[1] + op[1])
    padded = pad(dil, before, after, 0.0, name="conv2d_transpose_pad") if any(after) else dil
    oh = (h - 1) * s[0] - 2 * p[0] + kh + op[0]
    ow = (w - 1) * s[1] - 2 * p[1] + kw + op[1]
    rc = te.reduce_axis((0, c), name="rc")
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    return te.compute((n, o, oh, ow), lambda b, f, y, x: te.sum(
        padded[b, rc, y + ry, x + rx] * weight[rc, f, kh - 1 - ry, kw - 1 - rx],
        axis=[rc, ry, rx]), name="conv2d_transpose")


# Winograd F(2x2, 3x3) (Lavin & Gray): Y = A^T [(G g G^T) * (B^T d B)] A
WINOGRAD_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
WINOGRAD_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]])
WINOGRAD_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]])


def const_matrix(matrix: np.ndarray, dtype: str, name: str = "const_matrix") -> Tensor:
    """A constant matrix as a compute stage of nested selects (TOPI `const_matrix`)."""
    rows, cols = matrix.shape

    def body(i: Any, j: Any) -> Any:
        now: Any = te.const(0.0, dtype)
        for ii, jj in itertools.product(range(rows), range(cols)):
            if matrix[ii, jj] != 0:
                val = te.const(float(matrix[ii, jj]), dtype)
                now = te.if_then_else(te.all(i == ii, j == jj), val, now)
        return now

    return te.compute(matrix.shape, body, name=name, attrs={"const_matrix": True})


def conv2d_winograd(data: Tensor, weight: Tensor, padding: int = 1) -> Tensor:
    """3x3 stride-1 conv by Winograd F(2x2, 3x3) (TOPI `conv2d_winograd_nchw`); equals conv2d.

    Stages: kernel transform U = G g G^T, input tiles d (4x4, overlapping by 2),
    data transform V = B^T d B, batched product over channels M = sum_c U V,
    inverse transform Y = A^T M A, and the tile-to-image scatter as a gather.
    """
    _need(data.ndim == 4 and weight.ndim == 4,
          f"conv2d_winograd: data {data.name!r} and weight {weight.name!r} must be 4-d")
    n, c, h, w = dims(data)
    o, cw, kh, kw = static_dims(weight, "conv2d_winograd")
    _need((kh, kw) == (3, 3), f"conv2d_winograd: weight {weight.name!r} must be 3x3, "
                              f"got {kh}x{kw}; use conv2d")
    _need(not isinstance(c, int) or c == cw,
          f"conv2d_winograd: data {data.name!r} has {c} channels but weight {weight.name!r} "
          f"has {cw}")
    h, w = static_dims(data, "conv2d_winograd")[2:]
    m, alpha, dtype = 2, 4, data.dtype
    oh, ow = h + 2 * padding - 2, w + 2 * padding - 2
    nh, nw = -(-oh // m), -(-ow // m)
    # pad so that every 4x4 tile is in bounds
    padded = pad(data, (0, 0, padding, padding),
                 (0, 0, nh * m + 2 - h - padding, nw * m + 2 - w - padding), 0.0,
                 name="winograd_pad")
    g_mat = const_matrix(WINOGRAD_G, dtype, "G")
    b_mat = const_matrix(WINOGRAD_BT.T, dtype, "B")
    a_mat = const_matrix(WINOGRAD_AT.T, dtype, "A")
    r1, r2 = te.reduce_axis((0, 3), name="r_kh"), te.reduce_axis((0, 3), name="r_kw")
    u = te.compute((alpha, alpha, o, c), lambda eps, nu, co, ci: te.sum(
        weight[co, ci, r1, r2] * g_mat[eps, r1] * g_mat[nu, r2], axis=[r1, r2]), name="kernel_pack")
    tiles = n * nh * nw
    d = te.compute((c, tiles, alpha, alpha), lambda ci, p, eps, nu: padded[
        p // (nh * nw), ci, (p // nw) % nh * m + eps, p % nw * m + nu], name="d")
    ra, rb = te.reduce_axis((0, alpha), name="r_a"), te.reduce_axis((0, alpha), name="r_b")
    v = te.compute((alpha, alpha, c, tiles), lambda eps, nu, ci, p: te.sum(
        d[ci, p, ra, rb] * b_mat[ra, eps] * b_mat[rb, nu], axis=[ra, rb]), name="data_pack")
    rc = te.reduce_axis((0, c), name="ci")
    mm = te.compute((alpha, alpha, o, tiles), lambda eps, nu, co, p: te.sum(
        u[eps, nu, co, rc] * v[eps, nu, rc, p], axis=rc), name="bgemm")
    sa, sb = te.reduce_axis((0, alpha), name="r_a"), te.reduce_axis((0, alpha), name="r_b")
    y = te.compute((o, tiles, m, m), lambda co, p, vh, vw: te.sum(
        mm[sa, sb, co, p] * a_mat[sa, vh] * a_mat[sb, vw], axis=[sa, sb]), name="inverse")
    return te.compute((n, o, oh, ow), lambda b, co, yy, xx: y[
        co, b * (nh * nw) + (yy // m) * nw + xx // m, yy % m, xx % m], name="conv2d_winograd")


# -- pooling ------------------------------------------------------------------------------------

def pool(data: Tensor, kernel: int | Sequence[int], stride: int | Sequence[int] = 1,
         padding: int | Sequence[int] = 0, pool_type: str = "max",
         count_include_pad: bool = True, name: str = "pool") -> Tensor:
    """N-d max/avg pooling over the trailing dims of (N, C, *S) (TOPI `nn.pool`).

    Max leaves the padding out of each window (`where=`, as if -inf that never wins a tie, so
    an all -inf window's gradient stays on its real elements, as PyTorch's max_pool2d); avg
    pads with 0 and divides by the kernel size (`count_include_pad`) or by the number of
    in-bounds elements of the window.
    """
    nd = data.ndim - 2
    _need(nd >= 1, f"{name}: data {data.name!r} must be (N, C, *spatial)")
    _need(pool_type in ("max", "avg"),
          f"{name}: pool_type must be 'max' or 'avg', got {pool_type!r}")
    k, s, p = (expand(v, nd, f"{name} {w}") for v, w in
               ((kernel, "kernel"), (stride, "stride"), (padding, "padding")))
    n, c, *sp = dims(data)
    _need(all(pp < kk for pp, kk in zip(p, k, strict=True)),
          f"{name}: padding {p} must be smaller than the kernel {k}")
    out_sp = [(x + 2 * pp - kk) // ss + 1 for x, pp, kk, ss in zip(sp, p, k, s, strict=True)]
    names = _spatial_names(nd)
    rk = [te.reduce_axis((0, kk), name=f"r{a}") for kk, a in zip(k, names, strict=True)]
    out_shape = (n, c, *out_sp)
    if pool_type == "max":
        def window_max(b: Any, f: Any, *xs: Any) -> Any:
            idx = [affine(x, ss, r, 1) - pp if pp else affine(x, ss, r, 1)
                   for x, ss, r, pp in zip(xs, s, rk, p, strict=True)]
            inside = [c for i, pp, size in zip(idx, p, sp, strict=True) if pp
                      for c in (i >= 0, i < size)]
            return te.max(data[(b, f, *idx)], axis=rk, where=te.all(*inside) if inside else None)

        return te.compute(out_shape, named(["n", "c", *names], window_max), name=name)
    padded = pad(data, (0, 0, *p), None, 0.0, name=f"{name}_pad") if any(p) else data

    def window(b: Any, f: Any, *xs: Any) -> Any:
        return padded[(b, f, *[affine(x, ss, r, 1) for x, ss, r in zip(xs, s, rk, strict=True)])]

    total = te.compute(out_shape, named(["n", "c", *names],
                                        lambda *i: te.sum(window(*i), axis=rk)), name=f"{name}_sum")

    def divide(b: Any, f: Any, *xs: Any) -> Any:
        if count_include_pad or not any(p):
            return total[(b, f, *xs)] / float(np.prod(k))
        count = None
        for x, ss, pp, kk, size in zip(xs, s, p, k, sp, strict=True):
            start = x * ss - pp
            ext = te.min(start + kk, size) - te.max(start, 0)
            count = ext if count is None else count * ext
        return total[(b, f, *xs)] / count.astype(data.dtype)

    return te.compute(out_shape, named(["n", "c", *names], divide), name=name)


def max_pool1d(data: Tensor, kernel: int, stride: int = 1, padding: int = 0) -> Tensor:
    return pool(data, kernel, stride, padding, "max", name="max_pool1d")


def max_pool2d(data: Tensor, kernel: int | Sequence[int], stride: int | Sequence[int] = 1,
               padding: int | Sequence[int] = 0) -> Tensor:
    """2-d max pooling, NCHW, -inf padding."""
    return pool(data, kernel, stride, padding, "max", name="max_pool2d")


def max_pool3d(data: Tensor, kernel: int | Sequence[int], stride: int | Sequence[int] = 1,
               padding: int | Sequence[int] = 0) -> Tensor:
    return pool(data, kernel, stride, padding, "max", name="max_pool3d")


def avg_pool2d(data: Tensor, kernel: int | Sequence[int], stride: int | Sequence[int] = 1,
               padding: int | Sequence[int] = 0, count_include_pad: bool = True) -> Tensor:
    """2-d average pooling, NCHW (count_include_pad as PyTorch)."""
    return pool(data, kernel, stride, padding, "avg", count_include_pad, name="avg_pool2d")


def global_pool2d(data: Tensor, pool_type: str = "max") -> Tensor:
    """Max/avg over H and W of NCHW data -> (N, C, 1, 1) (TOPI `global_pool`)."""
    _need(data.ndim == 4, f"global_pool2d: data {data.name!r} must be NCHW")
    n, c, h, w = dims(data)
    ry, rx = te.reduce_axis((0, h), name="ry"), te.reduce_axis((0, w), name="rx")
    if pool_type == "max":
        return te.compute((n, c, 1, 1), lambda b, f, y, x: te.max(data[b, f, ry, rx],
                                                                  axis=[ry, rx]),
                          name="global_max_pool2d")
    total = te.compute((n, c, 1, 1), lambda b, f, y, x: te.sum(data[b, f, ry, rx], axis=[ry, rx]),
                       name="global_pool_sum")
    cnt = h * w
    div = cnt.astype(data.dtype) if isinstance(cnt, te.Expr) else float(cnt)
    return te.compute((n, c, 1, 1), lambda b, f, y, x: total[b, f, y, x] / div,
                      name="global_avg_pool2d")


def adaptive_pool2d(data: Tensor, output_size: int | Sequence[int],
                    pool_type: str = "avg") -> Tensor:
    """Adaptive max/avg pooling of NCHW data (TOPI `adaptive_pool`, PyTorch windows).

    Output row i pools input rows [floor(i*H/OH), ceil((i+1)*H/OH)), computed with
    floordiv; the reduction runs over the largest window with a `where=` bound.
    """
    _need(data.ndim == 4, f"adaptive_pool2d: data {data.name!r} must be NCHW")
    n, c = dims(data)[:2]
    h, w = static_dims(data, "adaptive_pool2d")[2:]
    oh, ow = expand(output_size, 2, "adaptive_pool2d output_size")

    def start(i: Any, size: int, out: int) -> Any:
        return (i * size) // out

    def end(i: Any, size: int, out: int) -> Any:
        return ((i + 1) * size + out - 1) // out

    kh = max(end(i, h, oh) - start(i, h, oh) for i in range(oh))
    kw = max(end(i, w, ow) - start(i, w, ow) for i in range(ow))
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")

    def body(b: Any, f: Any, y: Any, x: Any) -> Any:
        hs, ws = start(y, h, oh), start(x, w, ow)
        inside = te.all(ry < end(y, h, oh) - hs, rx < end(x, w, ow) - ws)
        red = te.max if pool_type == "max" else te.sum
        return red(data[b, f, hs + ry, ws + rx], axis=[ry, rx], where=inside)

    name = f"adaptive_{pool_type}_pool2d"
    if pool_type == "max":
        return te.compute((n, c, oh, ow), body, name=name)
    total = te.compute((n, c, oh, ow), body, name="adaptive_pool_sum")
    return te.compute((n, c, oh, ow), lambda b, f, y, x: total[b, f, y, x] / (
        (end(y, h, oh) - start(y, h, oh)) * (end(x, w, ow) - start(x, w, ow))).astype(data.dtype),
        name=name)


# -- layout, upsampling, normalization ---------------------------------------------------------

def flatten(data: Tensor) -> Tensor:
    """(N, d1, ..., dk) -> (N, d1 * ... * dk), row-major (TOPI `batch_flatten`)."""
    _need(data.ndim >= 2, f"flatten: tensor {data.name!r} needs at least 2 dims")
    n, *rest = dims(data)
    rest = list(static_dims(data, "flatten")[1:])
    strides = [int(np.prod(rest[k + 1:])) for k in range(len(rest))]
    size = int(np.prod(rest))

    def body(i: Any, j: Any) -> Any:
        idx = []
        for k, (r, st) in enumerate(zip(rest, strides, strict=True)):
            q = j // st if st > 1 else j
            idx.append(q % r if k > 0 else q)
        return data[(i, *idx)]

    return te.compute((n, size), body, name="T_flatten")


def upsampling(data: Tensor, scale_h: int, scale_w: int, method: str = "nearest",
               align_corners: bool = False) -> Tensor:
    """Upsample NCHW by integer factors (TOPI `nn.upsampling`, via `resize2d`)."""
    from .vision import resize2d
    h, w = static_dims(data, "upsampling")[2:]
    return resize2d(data, (h * scale_h, w * scale_w), method, align_corners, name="upsampling")


def lrn(data: Tensor, size: int, axis: int = 1, alpha: float = 1e-4, beta: float = 0.75,
        bias: float = 2.0) -> Tensor:
    """Local response norm across `axis` (TOPI `nn.lrn`).

    out = data / (bias + alpha * sum_{window of size along axis} data^2 / size) ** beta
    """
    radius = size // 2
    before = [0] * data.ndim
    before[axis] = radius
    padded = pad(data, before, before, 0.0, name="pad_data")
    r = te.reduce_axis((0, size), name="rxs")

    def sq(*idx: Any) -> Any:
        src = tuple(x + r if k == axis else x for k, x in enumerate(idx))
        return te.sum(padded[src] * padded[src], axis=r)

    sqr_sum = te.compute(data.shape, sq, name="sqr_sum")
    scale = te.compute(data.shape,
                       lambda *i: te.power(bias + alpha * sqr_sum[i] / float(size), beta),
                       name="sqr_sum_up")
    return te.compute(data.shape, lambda *i: data[i] / scale[i], name="T_lrn")


def l2_normalize(data: Tensor, eps: float, axis: int | Sequence[int] = 1) -> Tensor:
    """data / sqrt(max(sum(data^2, axis), eps)) (TOPI `nn.l2_normalize`)."""
    from .reduction import reduce_map
    out_shape, to_input, raxes = reduce_map(data, axis, keepdims=True, what="l2_normalize")
    sq = te.compute(out_shape, lambda *i: te.sum(data[to_input(i)] * data[to_input(i)], axis=raxes),
                    name="l2_sum")
    axes = set(a % data.ndim for a in ((axis,) if isinstance(axis, int) else axis))
    return te.compute(data.shape, lambda *i: data[i] / te.sqrt(te.max(
        sq[tuple(0 if k in axes else x for k, x in enumerate(i))], te.const(eps, data.dtype))),
        name="T_l2_normalize")
