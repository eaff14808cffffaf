"""Shape, indexing, layout and constant-fill operators (TOPI role), with registry entries.

Reshape-like operators compute a flat row-major index from the output index
and unravel it into the input's index with `floordiv`/`floormod` (TVM style),
so the differentiator sees ordinary index arithmetic.
"""
from __future__ import annotations

import math
import re
from typing import Any, Sequence

import numpy as np

from .. import te
from ..te import Expr, Tensor, TensorError
from ..te.tensor import shape_str
from ..te import dtype as dt
from ..te.expr import Const
from .common import (SampleBuilder, broadcast_read, const_dim, from_integers, is_one,
                     normalize_axis)
from .registry import Sample, register

Shape = Sequence[int | Expr]


def _dims(shape: Shape) -> tuple[Expr, ...]:
    return tuple(te.const(int(d)) if isinstance(d, (int, np.integer)) else d for d in shape)


def ravel_index(idx: Sequence[Expr], shape: Sequence[Expr]) -> Expr:
    """Row-major flat index of `idx` in `shape`: ((i0 * s1 + i1) * s2 + i2) ..."""
    flat: Expr | None = None
    for i, s in zip(idx, shape, strict=True):
        if is_one(s):  # its index is 0
            continue
        flat = i if flat is None else flat * s + i
    return te.const(0) if flat is None else flat


def unravel_index(flat: Expr, shape: Sequence[Expr]) -> tuple[Expr, ...]:
    """Inverse of `ravel_index` by floormod/floordiv, innermost dim first; dims of 1 give 0."""
    out: list[Expr] = []
    for k in range(len(shape) - 1, -1, -1):
        s = shape[k]
        if is_one(s):
            out.append(te.const(0))
        elif k == 0:
            out.append(flat)
        else:
            out.append(te.floormod(flat, s))
            flat = te.floordiv(flat, s)
    return tuple(reversed(out))


def _mul_dim(d: Expr, k: int) -> Expr:
    """d * k, folded when d is constant."""
    return te.const(int(d.value) * k) if isinstance(d, Const) else d * k


def _numel(shape: Sequence[Expr]) -> int | None:
    sizes = [int(d.value) for d in shape if isinstance(d, Const)]
    return math.prod(sizes) if len(sizes) == len(shape) else None


# --------------------------------------------------------------------------------------------
# reshaping and copying
# --------------------------------------------------------------------------------------------

def reshape(x: Tensor, newshape: Shape) -> Tensor:
    """Row-major reshape; one entry of `newshape` may be -1 (inferred)."""
    shape = list(newshape)
    n = _numel(x.shape)
    if sum(1 for d in shape if isinstance(d, int) and d == -1) > 1:
        raise TensorError(f"reshape of {x.name!r}: at most one -1 in newshape {tuple(newshape)}")
    if -1 in [d for d in shape if isinstance(d, int)]:
        rest = _numel(_dims([d for d in shape if not (isinstance(d, int) and d == -1)]))
        if n is None or rest is None or rest == 0 or n % rest:
            raise TensorError(f"reshape of {x.name!r} {shape_str(x.shape)}: cannot infer the -1 "
                              f"in {tuple(newshape)}")
        shape = [n // rest if isinstance(d, int) and d == -1 else d for d in shape]
    dims = _dims(shape)
    m = _numel(dims)
    if n is not None and m is not None and n != m:
        raise TensorError(f"reshape of {x.name!r}: shape {shape_str(x.shape)} has {n} elements "
                          f"but {shape_str(dims)} has {m}; the element counts must agree")
    return te.compute(dims, lambda *i: x[unravel_index(ravel_index(i, dims), x.shape)],
                      name="reshape")


def reshape_like(x: Tensor, like: Tensor) -> Tensor:
    """Reshape `x` to the shape of `like` (only `like`'s shape is used)."""
    return reshape(x, like.shape)


def copy(x: Tensor) -> Tensor:
    """An identity copy."""
    return te.compute(x.shape, lambda *i: x[i], name="copy")


def device_copy(x: Tensor, src_device: str = "cpu", dst_device: str = "cpu") -> Tensor:
    """Copy between devices; in the IR it is the identity (the devices are annotations)."""
    return te.compute(x.shape, lambda *i: x[i], name="device_copy",
                      attrs={"src_device": src_device, "dst_device": dst_device})


def transpose(x: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    """Permute dims: out dim k is input dim axes[k] (reversed when axes is None)."""
    perm = list(range(x.ndim))[::-1] if axes is None else [normalize_axis(x, a) for a in axes]
    if sorted(perm) != list(range(x.ndim)):
        raise TensorError(f"transpose of {x.name!r}: axes {axes} is not a permutation of "
                          f"{list(range(x.ndim))}")
    inv = [perm.index(d) for d in range(x.ndim)]
    return te.compute(tuple(x.shape[p] for p in perm), lambda *i: x[tuple(i[k] for k in inv)],
                      name="transpose")


def squeeze(x: Tensor, axis: int | Sequence[int] | None = None) -> Tensor:
    """Drop dims of size 1 (all of them, or those in `axis`, which must have size 1)."""
    if axis is None:
        drop = [d for d in range(x.ndim) if is_one(x.shape[d])]
    else:
        drop = [normalize_axis(x, a) for a in ([axis] if isinstance(axis, int) else axis)]
        for d in drop:
            if not is_one(x.shape[d]):
                raise TensorError(f"squeeze of {x.name!r}: dim {d} has size {x.shape[d]}, not 1")
    keep = [d for d in range(x.ndim) if d not in drop]

    def body(*i: Expr) -> Expr:
        pos = dict(zip(keep, i, strict=True))
        return x[tuple(pos.get(d, te.const(0)) for d in range(x.ndim))]

    return te.compute(tuple(x.shape[d] for d in keep), body, name="squeeze")


def flip(x: Tensor, axis: int | Sequence[int] = 0) -> Tensor:
    """Reverse the order of elements along `axis` (one axis or several)."""
    axes = {normalize_axis(x, a) for a in ([axis] if isinstance(axis, int) else axis)}
    return te.compute(x.shape, lambda *i: x[tuple(x.shape[d] - 1 - i[d] if d in axes else i[d]
                                                  for d in range(x.ndim))], name="flip")


def tile(x: Tensor, reps: Sequence[int]) -> Tensor:
    """Repeat the whole tensor `reps[d]` times along each dim (np.tile rules)."""
    nd = max(x.ndim, len(reps))
    reps = [1] * (nd - len(reps)) + list(reps)
    lead = nd - x.ndim
    shape = tuple(te.const(r) if d < lead else
                  _mul_dim(x.shape[d - lead], r)
                  for d, r in enumerate(reps))
    return te.compute(shape, lambda *i: x[tuple(
        i[d] if reps[d] == 1 else te.floormod(i[d], x.shape[d - lead])
        for d in range(lead, nd))], name="tile")


def repeat(x: Tensor, repeats: int, axis: int) -> Tensor:
    """Repeat each element `repeats` times along `axis` (np.repeat with an int count)."""
    ax = normalize_axis(x, axis)
    if repeats < 1:
        raise TensorError(f"repeat of {x.name!r}: repeats={repeats} must be >= 1")
    shape = (*x.shape[:ax], _mul_dim(x.shape[ax], repeats), *x.shape[ax + 1:])
    return te.compute(shape, lambda *i: x[(*i[:ax], te.floordiv(i[ax], repeats), *i[ax + 1:])],
                      name="repeat")


def expand_shape(x: Tensor, shape: Shape) -> tuple[Expr, ...]:
    """Check that `x` broadcasts to `shape` (NumPy rules, one direction) and return the dims."""
    dims = _dims(shape)
    if x.ndim > len(dims):
        raise TensorError(f"cannot broadcast {x.name!r} {shape_str(x.shape)} to "
                          f"{shape_str(dims)}: it has more dims")
    for s, d in zip(x.shape, dims[len(dims) - x.ndim:], strict=True):
        if not (is_one(s) or s.same_as(d)):
            raise TensorError(f"cannot broadcast {x.name!r} {shape_str(x.shape)} to "
                              f"{shape_str(dims)}: dim {s} is neither 1 nor {d}")
    return dims


def broadcast_to(x: Tensor, shape: Shape) -> Tensor:
    """Broadcast `x` to `shape` (dims of size 1 and missing leading dims are repeated)."""
    dims = expand_shape(x, shape)
    return te.compute(dims, lambda *i: broadcast_read(x, i), name="broadcast_to")


def broadcast_to_like(x: Tensor, like: Tensor) -> Tensor:
    """Broadcast `x` to the shape of `like` (only `like`'s shape is used)."""
    return broadcast_to(x, like.shape)


def collapse_sum_like(x: Tensor, like: Tensor) -> Tensor:
    """Sum `x` down to the shape of `like`: the reverse of broadcasting `like` to `x`."""
    expand_shape(like, x.shape)
    lead = x.ndim - like.ndim
    summed = [d for d in range(x.ndim)
              if d < lead or (is_one(like.shape[d - lead]) and not is_one(x.shape[d]))]
    if not summed:
        return te.compute(like.shape, lambda *i: x[(*[te.const(0)] * lead, *i)],
                          name="collapse_sum_like")
    rs = {d: te.reduce_axis((0, x.shape[d]), f"r{d}") for d in summed}

    def body(*i: Expr) -> Expr:
        idx = [rs[d] if d in rs else i[d - lead] for d in range(x.ndim)]
        return te.sum(x[tuple(idx)], axis=list(rs.values()))

    return te.compute(like.shape, body, name="collapse_sum_like")


def slice_like(x: Tensor, like: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    """x[:like.shape[0], :like.shape[1], ...] on `axes` (all of `like`'s dims when None)."""
    axes_ = list(range(like.ndim)) if axes is None else [normalize_axis(x, a) for a in axes]
    shape = list(x.shape)
    for d in axes_:
        if d >= like.ndim:
            raise TensorError(f"slice_like: axis {d} is not a dim of {like.name!r}")
        a, b = like.shape[d], x.shape[d]
        if isinstance(a, Const) and isinstance(b, Const) and a.value > b.value:
            raise TensorError(f"slice_like: {like.name!r} is larger than {x.name!r} in dim {d} "
                              f"({a} > {b}); it can only shrink")
        shape[d] = a
    return te.compute(tuple(shape), lambda *i: x[i], name="slice_like")


def split(x: Tensor, indices_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Split along `axis` into equal sections (one multi-output compute) or at the given
    indices (one compute per piece)."""
    ax = normalize_axis(x, axis)
    n = const_dim(x.shape[ax], x, f"split along axis {ax}")
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        if k < 1 or n % k:
            raise TensorError(f"split of {x.name!r}: {n} elements along axis {ax} do not split "
                              f"into {k} equal sections")
        size = n // k
        shape = (*x.shape[:ax], te.const(size), *x.shape[ax + 1:])
        return te.compute(shape, lambda *i: [x[(*i[:ax], i[ax] + s * size, *i[ax + 1:])]
                                             if s else x[i] for s in range(k)], name="split")
    bounds = [0, *indices_or_sections, n]
    if any(a > b for a, b in zip(bounds, bounds[1:])):
        raise TensorError(f"split of {x.name!r}: indices {list(indices_or_sections)} must be "
                          f"increasing and within [0, {n}]")
    out = []
    for s, (a, b) in enumerate(zip(bounds, bounds[1:])):
        shape = (*x.shape[:ax], te.const(b - a), *x.shape[ax + 1:])
        out.append(te.compute(shape, (lambda a: lambda *i: x[(*i[:ax], i[ax] + a, *i[ax + 1:])]
                                      if a else x[i])(a), name=f"split_{s}"))
    return out


# --------------------------------------------------------------------------------------------
# indexing by data
# --------------------------------------------------------------------------------------------

def _index_expr(v: Expr, n: Expr, mode: str, what: str) -> Expr:
    if mode == "fast":
        return v
    if mode == "clip":
        hi = (te.const(int(n.value) - 1, v.dtype) if isinstance(n, Const)
              else (n - 1).astype(v.dtype))
        return te.min(te.max(v, te.const(0, v.dtype)), hi)
    if mode == "wrap":
        return te.floormod(v, n)
    raise ValueError(f"{what}: mode={mode!r}; use 'fast', 'clip' or 'wrap'")


def take(a: Tensor, indices: Tensor, axis: int | None = 0, mode: str = "fast") -> Tensor:
    """Gather slices of `a` along `axis` at integer `indices` (np.take / torch.index_select).

    mode "fast" requires indices in range (an out-of-range read is an error);
    "clip" clamps them and "wrap" wraps them, as TOPI.  axis=None takes from the
    flattened `a`.
    """
    if not dt.is_int(indices.dtype):
        raise TensorError(f"take: indices {indices.name!r} have dtype {indices.dtype}; "
                          "pass an integer tensor")
    if axis is None:
        a = reshape(a, (_numel(a.shape) or -1,))
        axis = 0
    ax = normalize_axis(a, axis)
    k = indices.ndim
    shape = (*a.shape[:ax], *indices.shape, *a.shape[ax + 1:])

    def body(*i: Expr) -> Expr:
        j = _index_expr(indices[i[ax:ax + k]], a.shape[ax], mode, "take")
        return a[(*i[:ax], j, *i[ax + k:])]

    return te.compute(shape, body, name="take")


def gather_elements(data: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
    """out[i] = data[i with i[axis] replaced by indices[i]] (torch.gather, ONNX GatherElements)."""
    if not dt.is_int(indices.dtype):
        raise TensorError(f"gather_elements: indices {indices.name!r} have dtype "
                          f"{indices.dtype}; pass an integer tensor")
    if indices.ndim != data.ndim:
        raise TensorError(f"gather_elements: indices {indices.name!r} have {indices.ndim} dims "
                          f"but data {data.name!r} has {data.ndim}; they must match")
    ax = normalize_axis(data, axis)
    for d, (s, n) in enumerate(zip(indices.shape, data.shape, strict=True)):
        if d != ax and isinstance(s, Const) and isinstance(n, Const) and s.value > n.value:
            raise TensorError(f"gather_elements: indices {indices.name!r} are larger than data "
                              f"{data.name!r} in dim {d} ({s} > {n})")
    return te.compute(indices.shape, lambda *i: data[(*i[:ax], indices[i], *i[ax + 1:])],
                      name="gather_elements")


# --------------------------------------------------------------------------------------------
# constants and casts
# --------------------------------------------------------------------------------------------

def full(shape: Shape, fill_value: float, dtype: str = "float32") -> Tensor:
    """A tensor of `shape` filled with `fill_value`."""
    d = dt.check(dtype)
    return te.compute(_dims(shape), lambda *i: te.const(fill_value, d), name="full")


def zeros(shape: Shape, dtype: str = "float32") -> Tensor:
    """A tensor of zeros."""
    return full(shape, 0, dtype)


def ones(shape: Shape, dtype: str = "float32") -> Tensor:
    """A tensor of ones."""
    return full(shape, 1, dtype)


def full_like(x: Tensor, fill_value: float) -> Tensor:
    """`fill_value` in the shape and dtype of `x` (x is not read)."""
    return full(x.shape, fill_value, x.dtype)


def zeros_like(x: Tensor) -> Tensor:
    """Zeros in the shape and dtype of `x` (x is not read)."""
    return full(x.shape, 0, x.dtype)


def ones_like(x: Tensor) -> Tensor:
    """Ones in the shape and dtype of `x` (x is not read)."""
    return full(x.shape, 1, x.dtype)


def cast(x: Tensor, dtype: str) -> Tensor:
    """Convert to `dtype`; float to int truncates toward zero (C, NumPy, PyTorch)."""
    d = dt.check(dtype)
    return te.compute(x.shape, lambda *i: x[i].astype(d), name="cast")


# --------------------------------------------------------------------------------------------
# spatial rearrangements and layouts
# --------------------------------------------------------------------------------------------

def _nchw_block(x: Tensor, block: int, what: str) -> tuple[int, Expr]:
    if x.ndim != 4:
        raise TensorError(f"{what}: {x.name!r} must be NCHW (4 dims), got {x.ndim}")
    if block < 1:
        raise TensorError(f"{what}: block size {block} must be >= 1")
    return const_dim(x.shape[1], x, what), x.shape[1]


def pixel_shuffle(x: Tensor, upscale_factor: int) -> Tensor:
    """(N, C r^2, H, W) -> (N, C, H r, W r), torch.nn.PixelShuffle (= depth_to_space "CRD")."""
    r = upscale_factor
    c, _ = _nchw_block(x, r, "pixel_shuffle")
    if c % (r * r):
        raise TensorError(f"pixel_shuffle: {c} channels of {x.name!r} not divisible by {r * r}")
    n, _, h, w = x.shape
    return te.compute((n, te.const(c // (r * r)), _mul_dim(h, r), _mul_dim(w, r)),
                      lambda b, ch, y, xx: x[b, ch * (r * r) + te.floormod(y, r) * r
                                             + te.floormod(xx, r),
                                             te.floordiv(y, r), te.floordiv(xx, r)],
                      name="pixel_shuffle")


def depth_to_space(x: Tensor, block_size: int, mode: str = "DCR") -> Tensor:
    """NCHW depth to space (TOPI/ONNX); "DCR" takes the block offset from the outer channel
    bits, "CRD" from the inner ones (= pixel_shuffle)."""
    if mode == "CRD":
        return pixel_shuffle(x, block_size)
    if mode != "DCR":
        raise ValueError(f"depth_to_space: mode={mode!r}; use 'DCR' or 'CRD'")
    b = block_size
    c, _ = _nchw_block(x, b, "depth_to_space")
    if c % (b * b):
        raise TensorError(f"depth_to_space: {c} channels of {x.name!r} not divisible by {b * b}")
    oc = c // (b * b)
    n, _, h, w = x.shape
    return te.compute((n, te.const(oc), _mul_dim(h, b), _mul_dim(w, b)), lambda i, ch, y, xx: x[
        i, (te.floormod(y, b) * b + te.floormod(xx, b)) * oc + ch,
        te.floordiv(y, b), te.floordiv(xx, b)], name="depth_to_space")


def space_to_depth(x: Tensor, block_size: int) -> Tensor:
    """(N, C, H b, W b) -> (N, C b^2, H, W), the inverse of depth_to_space "DCR" (TOPI)."""
    b = block_size
    c, _ = _nchw_block(x, b, "space_to_depth")
    n, _, h, w = x.shape
    hh, ww = (const_dim(d, x, "space_to_depth") for d in (h, w))
    if hh % b or ww % b:
        raise TensorError(f"space_to_depth: spatial dims ({hh}, {ww}) of {x.name!r} are not "
                          f"divisible by block size {b}")

    def body(i: Expr, ch: Expr, y: Expr, xx: Expr) -> Expr:
        off = te.floordiv(ch, c)
        return x[i, te.floormod(ch, c), y * b + te.floordiv(off, b), xx * b + te.floormod(off, b)]

    return te.compute((n, te.const(c * b * b), te.const(hh // b), te.const(ww // b)), body,
                      name="space_to_depth")


def _parse_layout(layout: str, ndim: int, x: Tensor, what: str) -> list[tuple[str, int]]:
    """"NCHW4c" -> [(N, 0), (C, 0), (H, 0), (W, 0), (c, 4)]: primal axes upper case with
    factor 0, sub-axes lower case with their factor."""
    parts = re.findall(r"(\d*)([A-Za-z])", layout)
    if "".join(f + a for f, a in parts) != layout:
        raise TensorError(f"layout_transform: cannot parse {what}={layout!r}")
    out = []
    for f, a in parts:
        if a.isupper() != (f == ""):
            raise TensorError(f"layout_transform: in {what}={layout!r} a primal axis is an upper "
                              f"case letter and a split axis a factor plus a lower case letter")
        out.append((a, int(f) if f else 0))
    letters = [a for a, _ in out]
    if len(set(letters)) != len(letters) or any(a.islower() and a.upper() not in letters
                                                for a in letters):
        raise TensorError(f"layout_transform: {what}={layout!r} repeats an axis or splits an "
                          "axis that it does not have")
    if len(out) != ndim:
        raise TensorError(f"layout_transform: {what}={layout!r} has {len(out)} axes but "
                          f"{x.name!r} has {ndim} dims")
    return out


def layout_transform(x: Tensor, src_layout: str, dst_layout: str) -> Tensor:
    """Relayout, e.g. "NCHW" -> "NCHW4c" (c = C mod 4 innermost) and back (TOPI)."""
    src = _parse_layout(src_layout, x.ndim, x, "src_layout")
    dst = _parse_layout(dst_layout, len(re.findall(r"[A-Za-z]", dst_layout)), x, "dst_layout")
    if {a for a, _ in src if a.isupper()} != {a for a, _ in dst if a.isupper()}:
        raise TensorError(f"layout_transform: {src_layout!r} and {dst_layout!r} must have the "
                          "same primal (upper case) axes")
    sf = {a.upper(): f for a, f in src if f}
    df = {a.upper(): f for a, f in dst if f}
    ext: dict[str, int] = {}
    for (a, f), s in zip(src, x.shape, strict=True):
        n = const_dim(s, x, "layout_transform")
        if a.isupper():
            ext[a] = ext.get(a, 1) * n
        elif n != f:
            raise TensorError(f"layout_transform: dim {a!r} of {x.name!r} is {n}, not {f}")
        else:
            ext[a.upper()] = ext.get(a.upper(), 1) * n
    for a, f in df.items():
        if ext[a] % f:
            raise TensorError(f"layout_transform: axis {a} of {x.name!r} has extent {ext[a]}, "
                              f"not divisible by the split factor {f} of {dst_layout!r}")
    shape = tuple(te.const(f if f else ext[a] // df.get(a, 1)) for a, f in dst)
    pos = {a: k for k, (a, _) in enumerate(dst)}

    def body(*i: Expr) -> Expr:
        val = {a: i[pos[a]] * df[a] + i[pos[a.lower()]] if a in df else i[pos[a]]
               for a in ext}
        return x[tuple((te.floordiv(val[a], sf[a]) if a in sf else val[a]) if a.isupper()
                       else te.floormod(val[a.upper()], f) for a, f in src)]

    return te.compute(shape, body, name="layout_transform")


# --------------------------------------------------------------------------------------------
# NumPy references
# --------------------------------------------------------------------------------------------

def _np_depth_to_space(x: np.ndarray, b: int) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2).reshape(
        n, c // (b * b), h * b, w * b)


def _np_pixel_shuffle(x: np.ndarray, r: int) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(
        n, c // (r * r), h * r, w * r)


def _np_space_to_depth(x: np.ndarray, b: int) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4).reshape(
        n, c * b * b, h // b, w // b)


# --------------------------------------------------------------------------------------------
# registry entries
# --------------------------------------------------------------------------------------------

_SHAPE_ONLY = "the `like` input is used only for its shape (not read, not differentiable)"


def _one_input(name: str, shape: tuple[int, ...], op: Any, cat: str, ref: Any, notes: str = "",
               differentiable: bool = True, **uniform: Any) -> None:
    """Register an operator of one float input of `shape`."""
    def sample(dtype: str) -> Sample:
        b = SampleBuilder(name, dtype)
        return b.sample(op(b.uniform("x", shape, differentiable=differentiable, **uniform)))

    sample.__name__ = f"sample_{name}"
    register(name, cat, lambda x: ref(x), notes=notes)(sample)


_one_input("reshape", (2, 3, 4), lambda x: reshape(x, (4, -1)), "L3",
           lambda x: [x.reshape(4, 6)], "row-major; flat index unravelled by floordiv/floormod")
_one_input("copy", (4, 5), copy, "L3", lambda x: [x.copy()])
_one_input("transpose", (2, 3, 4), lambda x: transpose(x, (2, 0, 1)), "L3",
           lambda x: [x.transpose(2, 0, 1)])
_one_input("squeeze", (3, 1, 4, 1), squeeze, "L3", lambda x: [x.reshape(3, 4)])
_one_input("flip", (2, 3, 4), lambda x: flip(x, (0, 2)), "L3", lambda x: [x[::-1, :, ::-1]])
_one_input("tile", (2, 3), lambda x: tile(x, (2, 1, 2)), "L3", lambda x: [np.tile(x, (2, 1, 2))],
           "np.tile rules; floormod reads")
_one_input("repeat", (2, 3), lambda x: repeat(x, 2, axis=1), "L3",
           lambda x: [np.repeat(x, 2, axis=1)], "floordiv reads")
_one_input("split", (6, 3), lambda x: split(x, 3, axis=0), "L3",
           lambda x: np.split(x, 3, axis=0), "3 equal sections: one multi-output compute")
_one_input("split_indices", (7, 3), lambda x: split(x, [2, 5], axis=0), "L3",
           lambda x: np.split(x, [2, 5], axis=0), "split at [2, 5]: one compute per piece")
_one_input("cast_f2i", (4, 5), lambda x: cast(x, "int32"), "L3",
           lambda x: [x.astype(np.int32)],
           "float -> int32 truncates toward zero; integer output: no gradient (input marked "
           "not differentiable); inputs >= 0.1 away from integers",
           differentiable=False, lo=-4.0, hi=4.0, avoid=from_integers)
_one_input("pixel_shuffle", (1, 8, 2, 3), lambda x: pixel_shuffle(x, 2), "L3",
           lambda x: [_np_pixel_shuffle(x, 2)], "torch.nn.PixelShuffle, upscale 2 (CRD order)")
_one_input("depth_to_space", (1, 8, 2, 3), lambda x: depth_to_space(x, 2), "L3",
           lambda x: [_np_depth_to_space(x, 2)], "TOPI/ONNX default mode DCR, block 2")
_one_input("space_to_depth", (1, 2, 4, 6), lambda x: space_to_depth(x, 2), "L3",
           lambda x: [_np_space_to_depth(x, 2)], "TOPI/ONNX, block 2 (inverse of DCR)")
_one_input("layout_transform_nchw4c", (1, 8, 2, 3),
           lambda x: layout_transform(x, "NCHW", "NCHW4c"), "L10",
           lambda x: [x.reshape(1, 2, 4, 2, 3).transpose(0, 1, 3, 4, 2)], "NCHW -> NCHW4c")
_one_input("layout_transform_nchw4c_back", (1, 2, 2, 3, 4),
           lambda x: layout_transform(x, "NCHW4c", "NCHW"), "L10",
           lambda x: [x.transpose(0, 1, 4, 2, 3).reshape(1, 8, 2, 3)], "NCHW4c -> NCHW")
_one_input("device_copy", (4, 5), device_copy, "L10", lambda x: [x.copy()], "identity")


def _with_like(name: str, xshape: tuple[int, ...], lshape: tuple[int, ...], op: Any, cat: str,
               ref: Any, notes: str) -> None:
    """Register an operator of a float input `x` and a shape-only input `like`."""
    def sample(dtype: str) -> Sample:
        b = SampleBuilder(name, dtype)
        x = b.uniform("x", xshape)
        like = b.uniform("like", lshape, differentiable=False)
        return b.sample(op(x, like))

    sample.__name__ = f"sample_{name}"
    register(name, cat, lambda x, like: ref(x, like), notes=notes)(sample)


_with_like("reshape_like", (2, 6), (3, 4), reshape_like, "L3",
           lambda x, like: [x.reshape(like.shape)], _SHAPE_ONLY)
_with_like("broadcast_to_like", (3, 1), (2, 3, 4), broadcast_to_like, "L10",
           lambda x, like: [np.broadcast_to(x, like.shape).copy()], _SHAPE_ONLY)
_with_like("collapse_sum_like", (2, 3, 4), (3, 1), collapse_sum_like, "L10",
           lambda x, like: [x.sum(axis=(0, 2)).reshape(3, 1)],
           _SHAPE_ONLY + "; sums the leading dim and the dims where `like` has 1")
_with_like("slice_like", (4, 5), (2, 3), slice_like, "L10",
           lambda x, like: [x[:2, :3].copy()], _SHAPE_ONLY)


def _fill(name: str, op: Any, value: float, like: bool) -> None:
    shape = (3, 4)

    def sample(dtype: str) -> Sample:
        b = SampleBuilder(name, dtype)
        if like:
            return b.sample(op(b.uniform("x", shape, differentiable=False)))
        return b.sample(op(shape, dtype))

    sample.__name__ = f"sample_{name}"
    src = "x's shape and dtype; x is not read, marked not differentiable" if like else \
        "no inputs"
    register(name, "L3", (lambda *a: [np.full(shape, value)]),
             notes=f"constant {value}: {src}")(sample)


_fill("zeros", zeros, 0.0, False)
_fill("ones", ones, 1.0, False)
_fill("full", lambda shape, dtype: full(shape, 2.5, dtype), 2.5, False)
_fill("zeros_like", zeros_like, 0.0, True)
_fill("ones_like", ones_like, 1.0, True)
_fill("full_like", lambda x: full_like(x, 2.5), 2.5, True)


@register("cast_f2f", "L3",
          lambda x: [x.astype(np.float32 if x.dtype == np.float64 else np.float64)],
          notes="float64 sample casts to float32 (lossy: finite differences need a step "
                ">= 1e-3 and tolerance ~1e-3), float32 sample casts to float64", tol=1e-3)
def _cast_f2f_sample(dtype: str) -> Sample:
    b = SampleBuilder("cast_f2f", dtype)
    x = b.uniform("x", (4, 5))
    return b.sample(cast(x, "float32" if dtype == "float64" else "float64"))


@register("take", "L3", lambda a, idx: [np.take(a, idx, axis=0)],
          notes="rows of a (5, 3) at int32 indices (2, 4) with repeats (gradient must "
                "accumulate); mode 'fast': indices must be in range")
def _take_sample(dtype: str) -> Sample:
    b = SampleBuilder("take", dtype)
    a = b.uniform("a", (5, 3))
    idx = b.ints("indices", (2, 4), 0, 5, "int32")
    return b.sample(take(a, idx, axis=0))


@register("gather_elements", "L3",
          lambda d, idx: [np.take_along_axis(d, idx, axis=1)],
          notes="torch.gather along axis 1 with int64 indices (3, 5) into (3, 4): repeats in "
                "every row")
def _gather_elements_sample(dtype: str) -> Sample:
    b = SampleBuilder("gather_elements", dtype)
    d = b.uniform("data", (3, 4))
    idx = b.ints("indices", (3, 5), 0, 4, "int64")
    return b.sample(gather_elements(d, idx, axis=1))


__all__ = [
    "broadcast_to", "broadcast_to_like", "cast", "collapse_sum_like", "copy", "depth_to_space",
    "device_copy", "expand_shape", "flip", "full", "full_like", "gather_elements",
    "layout_transform", "ones", "ones_like", "pixel_shuffle", "ravel_index", "repeat",
    "reshape", "reshape_like", "slice_like", "space_to_depth", "split", "squeeze", "take",
    "tile", "transpose", "unravel_index", "zeros", "zeros_like",
]
