"""Level 5 operators: resize, SSD anchors and box decoding, RoIAlign (TOPI `image` and `vision`).

Resize source coordinates are written in exact integer arithmetic: for
half-pixel centers `src = ((2y + 1) H - OH) / (2 OH)`, so the lower index is
`floordiv(2 H y + H - OH, 2 OH)` and the weight `floormod(...) / (2 OH)`; the
index maps stay affine-with-floordiv, which the index solver can invert.
"""
from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np

from .. import te
from ..te import Tensor, TensorError
from .reduction import arg_reducer
from .registry import Sample, register, register_no_compute, rng_for


def _static(t: Tensor, what: str) -> tuple[int, ...]:
    d = tuple(s.value if isinstance(s, te.Const) else s for s in t.shape)
    if not all(isinstance(s, int) for s in d):
        raise TensorError(f"{what}: tensor {t.name!r} needs a static shape, got {t.shape}")
    return d  # type: ignore[return-value]


def _pair(v: int | Sequence[int], what: str) -> tuple[int, int]:
    out = (v, v) if isinstance(v, int) else tuple(v)
    if len(out) != 2:
        raise TensorError(f"{what} must be an int or 2 ints, got {v!r}")
    return out


# -- resize ----------------------------------------------------------------------------------

def _nearest_index(y: Any, size: int, out: int, align_corners: bool) -> Any:
    if align_corners:  # round-half-up of y (size - 1) / (out - 1)
        return te.floordiv(y * (2 * (size - 1)) + (out - 1), 2 * (out - 1)) if out > 1 else 0
    return te.floordiv(y * size, out)  # floor(y * size / out), PyTorch "nearest"


def _linear_coord(y: Any, size: int, out: int, align_corners: bool, dtype: str
                  ) -> tuple[Any, Any, Any]:
    """(lower index, upper index, weight of the upper) of the source coordinate of `y`."""
    if align_corners:
        if out == 1:
            return 0, 0, None
        num, den = y * (size - 1), out - 1
    else:
        num, den = y * (2 * size) + (size - out) if size != out else y * (2 * size), 2 * out
    lo = te.floordiv(num, den)
    hi = te.min(lo + 1, size - 1)
    if not align_corners and size < out:  # src < 0 near the start: clamp as TOPI/PyTorch
        lo = te.max(lo, 0)
    return lo, hi, te.floormod(num, den).astype(dtype) / float(den)


def resize2d(data: Tensor, size: int | Sequence[int], method: str = "bilinear",
             align_corners: bool = False, name: str = "resize") -> Tensor:
    """Resize NCHW data to `size` (TOPI `image.resize2d`, PyTorch `interpolate` conventions).

    nearest: source `floor(y * H / OH)` (align_corners: round `y (H-1)/(OH-1)`);
    bilinear: half-pixel centers (align_corners: corner pixels aligned), borders clamped.
    """
    if data.ndim != 4:
        raise TensorError(f"{name}: data {data.name!r} must be NCHW, got {data.ndim} dims")
    n, c = (s.value if isinstance(s, te.Const) else s for s in data.shape[:2])
    h, w = _static(data, name)[2:]
    oh, ow = _pair(size, f"{name} size")
    if method == "nearest":
        return te.compute((n, c, oh, ow), lambda b, f, y, x: data[
            b, f, _nearest_index(y, h, oh, align_corners), _nearest_index(x, w, ow, align_corners)],
            name=name)
    if method != "bilinear":
        raise TensorError(f"{name}: method must be 'nearest' or 'bilinear', got {method!r}")

    def lerp(a: Any, b: Any, t: Any) -> Any:
        return a if t is None else a * (1.0 - t) + b * t

    def body(b: Any, f: Any, y: Any, x: Any) -> Any:
        y0, y1, fy = _linear_coord(y, h, oh, align_corners, data.dtype)
        x0, x1, fx = _linear_coord(x, w, ow, align_corners, data.dtype)
        top = lerp(data[b, f, y0, x0], data[b, f, y0, x1], fx)
        bottom = lerp(data[b, f, y1, x0], data[b, f, y1, x1], fx)
        return lerp(top, bottom, fy)

    return te.compute((n, c, oh, ow), body, name=name)


# -- SSD: anchors and box decoding -------------------------------------------------------------

def multibox_prior(data: Tensor, sizes: Sequence[float] = (1.0,), ratios: Sequence[float] = (1.0,),
                   steps: Sequence[float] = (-1.0, -1.0), offsets: Sequence[float] = (0.5, 0.5),
                   clip: bool = False) -> Tensor:
    """SSD prior boxes (TOPI `multibox_prior`): (1, H * W * A, 4), A = sizes + ratios - 1.

    Only the shape of `data` matters.  Anchor k of cell (i, j) has center
    ((j + off_w) step_w, (i + off_h) step_h) and half-sizes from sizes[k] (k < len(sizes))
    or sizes[0] with ratio ratios[k - len(sizes) + 1]; corners [xmin, ymin, xmax, ymax].
    """
    h, w = _static(data, "multibox_prior")[2:]
    ns, nr = len(sizes), len(ratios)
    na = ns + nr - 1
    step_h = steps[0] if steps[0] > 0 else 1.0 / h
    step_w = steps[1] if steps[1] > 0 else 1.0 / w
    half_w = [s * h / w / 2.0 for s in sizes]
    half_w += [sizes[0] * h / w * np.sqrt(r) / 2.0 for r in ratios[1:]]
    half_h = [s / 2.0 for s in sizes] + [sizes[0] / np.sqrt(r) / 2.0 for r in ratios[1:]]
    dtype = data.dtype

    def table(k: Any, vals: Sequence[float]) -> Any:
        out: Any = te.const(float(vals[-1]), dtype)
        for idx in range(len(vals) - 2, -1, -1):
            out = te.if_then_else(k == idx, te.const(float(vals[idx]), dtype), out)
        return out

    def body(_: Any, a: Any, c: Any) -> Any:
        k, j, i = a % na, (a // na) % w, a // (na * w)
        cx = (j.astype(dtype) + offsets[1]) * step_w
        cy = (i.astype(dtype) + offsets[0]) * step_h
        center = te.if_then_else(c % 2 == 0, cx, cy)
        half = te.if_then_else(c % 2 == 0, table(k, half_w), table(k, half_h))
        v = te.if_then_else(c < 2, center - half, center + half)
        return te.min(te.max(v, te.const(0.0, dtype)), te.const(1.0, dtype)) if clip else v

    return te.compute((1, h * w * na, 4), body, name="multibox_prior")


def multibox_transform_loc(cls_prob: Tensor, loc_pred: Tensor, anchor: Tensor, clip: bool = True,
                           threshold: float = 0.01,
                           variances: Sequence[float] = (0.1, 0.1, 0.2, 0.2)) -> list[Tensor]:
    """Decode SSD boxes (TOPI `multibox_transform_loc`) in dense form: [out, valid_count].

    cls_prob (B, C, N) with class 0 = background, loc_pred (B, N * 4), anchor (1, N, 4).
    out[b, n] = [class - 1 (or -1 if score < threshold), score, xmin, ymin, xmax, ymax]
    for every anchor in place; TOPI additionally compacts valid rows to the front,
    a data-dependent move that has no compute form.
    """
    bsz, ncls, nanc = _static(cls_prob, "multibox_transform_loc")
    if _static(loc_pred, "multibox_transform_loc") != (bsz, nanc * 4) or \
            _static(anchor, "multibox_transform_loc") != (1, nanc, 4):
        raise TensorError(f"multibox_transform_loc: with cls_prob {cls_prob.name!r} of shape "
                          f"{(bsz, ncls, nanc)}, loc_pred {loc_pred.name!r} must be "
                          f"{(bsz, nanc * 4)} "
                          f"and anchor {anchor.name!r} must be {(1, nanc, 4)}")
    dtype = loc_pred.dtype
    k = te.reduce_axis((0, ncls - 1), name="k")
    red = arg_reducer("max")
    cls_id, score = te.compute((bsz, nanc), lambda b, n: list(
        red((k + 1, cls_prob[b, k + 1, n]), axis=k)), name="best_class")

    def box(b: Any, n: Any, c: Any) -> Any:  # c: 0 xmin, 1 ymin, 2 xmax, 3 ymax
        xy = c % 2
        lo, hi = anchor[0, n, xy], anchor[0, n, xy + 2]
        v_ctr, v_size = (te.const(v0, dtype) if v0 == v1 else
                         te.if_then_else(xy == 0, te.const(v0, dtype), te.const(v1, dtype))
                         for v0, v1 in (variances[:2], variances[2:]))
        center = loc_pred[b, n * 4 + xy] * v_ctr * (hi - lo) + (lo + hi) / 2.0
        half = te.exp(loc_pred[b, n * 4 + xy + 2] * v_size) * (hi - lo) / 2.0
        v = te.if_then_else(c < 2, center - half, center + half)
        return te.min(te.max(v, te.const(0.0, dtype)), te.const(1.0, dtype)) if clip else v

    boxes = te.compute((bsz, nanc, 4), box, name="boxes")
    valid = lambda b, n: score[b, n] >= threshold  # noqa: E731
    out = te.compute((bsz, nanc, 6), lambda b, n, c: te.if_then_else(
        c == 0, te.if_then_else(valid(b, n), cls_id[b, n] - 1, -1).astype(dtype),
        te.if_then_else(c == 1, score[b, n].astype(dtype), boxes[b, n, c - 2])),
        name="multibox_transform_loc")
    r = te.reduce_axis((0, nanc), name="r")
    count = te.compute((bsz,), lambda b: te.sum(valid(b, r).astype("int32"), axis=r),
                       name="valid_count")
    return [out, count]


# -- RoIAlign -----------------------------------------------------------------------------------

def roi_align(data: Tensor, rois: Tensor, pooled_size: int | Sequence[int], spatial_scale: float,
              sample_ratio: int = 2) -> Tensor:
    """RoIAlign, average mode (TOPI `vision.rcnn.roi_align_nchw`): (R, C, PH, PW).

    rois (R, 5) rows are [batch_index, x1, y1, x2, y2] in input coordinates
    (scaled by `spatial_scale`); each bin averages sample_ratio^2 bilinear samples.
    Samples beyond one pixel outside the image give 0; others are clamped in.
    """
    _, c, h, w = _static(data, "roi_align")
    nroi, five = _static(rois, "roi_align")
    if five != 5:
        raise TensorError(f"roi_align: rois {rois.name!r} must be (R, 5) rows "
                          f"[batch, x1, y1, x2, y2], got {(nroi, five)}")
    if sample_ratio <= 0:
        raise TensorError("roi_align: sample_ratio must be > 0; the adaptive grid "
                          "ceil(roi_size / pooled_size) has a data-dependent extent")
    ph, pw = _pair(pooled_size, "roi_align pooled_size")
    dt = data.dtype
    one, zero = te.const(1.0, dt), te.const(0.0, dt)

    def bilinear(n: Any, f: Any, y: Any, x: Any) -> Any:
        outside = te.any(y < -1.0, x < -1.0, y > float(h), x > float(w))
        y = te.min(te.max(y, zero), te.const(h - 1.0, dt))
        x = te.min(te.max(x, zero), te.const(w - 1.0, dt))
        y0, x0 = te.floor(y).astype("int32"), te.floor(x).astype("int32")
        y1 = te.min(te.ceil(y).astype("int32"), h - 1)
        x1 = te.min(te.ceil(x).astype("int32"), w - 1)
        ly, lx = y - y0.astype(dt), x - x0.astype(dt)
        top = data[n, f, y0, x0] * (one - lx) + data[n, f, y0, x1] * lx
        bottom = data[n, f, y1, x0] * (one - lx) + data[n, f, y1, x1] * lx
        return te.if_then_else(outside, zero, top * (one - ly) + bottom * ly)

    ry = te.reduce_axis((0, sample_ratio), name="ry")
    rx = te.reduce_axis((0, sample_ratio), name="rx")

    def body(i: Any, f: Any, py: Any, px: Any) -> Any:
        b = rois[i, 0].astype("int32")
        x1, y1 = rois[i, 1] * spatial_scale, rois[i, 2] * spatial_scale
        x2, y2 = rois[i, 3] * spatial_scale, rois[i, 4] * spatial_scale
        bin_h = te.max(y2 - y1, one) / float(ph)
        bin_w = te.max(x2 - x1, one) / float(pw)
        ys = y1 + py.astype(dt) * bin_h + (ry.astype(dt) + 0.5) * bin_h / float(sample_ratio)
        xs = x1 + px.astype(dt) * bin_w + (rx.astype(dt) + 0.5) * bin_w / float(sample_ratio)
        return te.sum(bilinear(b, f, ys, xs) / float(sample_ratio * sample_ratio), axis=[ry, rx])

    return te.compute((nroi, c, ph, pw), body, name="roi_align")


# == registry ===================================================================================

def np_resize_nearest(x: np.ndarray, oh: int, ow: int) -> np.ndarray:
    """PyTorch `interpolate(mode="nearest")`: source floor(y * H / OH)."""
    h, w = x.shape[2:]
    ys = np.minimum((np.arange(oh) * h) // oh, h - 1)
    xs = np.minimum((np.arange(ow) * w) // ow, w - 1)
    return x[:, :, ys][:, :, :, xs]


def np_resize_bilinear(x: np.ndarray, oh: int, ow: int, align_corners: bool = False) -> np.ndarray:
    """PyTorch `interpolate(mode="bilinear")`: half-pixel centers with the source clamped at 0."""
    h, w = x.shape[2:]

    def coords(out: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        o = np.arange(out, dtype=np.float64)
        if align_corners:
            src = o * (size - 1) / (out - 1) if out > 1 else np.zeros(out)
        else:
            src = np.maximum((o + 0.5) * size / out - 0.5, 0.0)
        i0 = np.minimum(np.floor(src).astype(int), size - 1)
        return i0, np.minimum(i0 + 1, size - 1), src - i0

    y0, y1, fy = coords(oh, h)
    x0, x1, fx = coords(ow, w)
    top = x[:, :, y0][:, :, :, x0] * (1 - fx) + x[:, :, y0][:, :, :, x1] * fx
    bot = x[:, :, y1][:, :, :, x0] * (1 - fx) + x[:, :, y1][:, :, :, x1] * fx
    return top * (1 - fy[:, None]) + bot * fy[:, None]


def _np_multibox_prior(x: np.ndarray, sizes: Sequence[float],
                       ratios: Sequence[float]) -> np.ndarray:
    h, w = x.shape[2:]
    rows = []
    for i, j in itertools.product(range(h), range(w)):
        cy, cx = (i + 0.5) / h, (j + 0.5) / w
        shapes = [(s * h / w / 2, s / 2) for s in sizes]
        shapes += [(sizes[0] * h / w * np.sqrt(r) / 2, sizes[0] / np.sqrt(r) / 2)
                   for r in ratios[1:]]
        rows += [[cx - hw, cy - hh, cx + hw, cy + hh] for hw, hh in shapes]
    return np.array(rows, dtype=x.dtype)[None]


def _np_transform_loc(cls: np.ndarray, loc: np.ndarray, anc: np.ndarray, clip: bool,
                      thr: float, var: Sequence[float]) -> list[np.ndarray]:
    bsz, _, nanc = cls.shape
    out = np.zeros((bsz, nanc, 6), dtype=loc.dtype)
    for b, n in itertools.product(range(bsz), range(nanc)):
        k = 1 + int(np.argmax(cls[b, 1:, n]))
        score = cls[b, k, n]
        al, at, ar, ab = anc[0, n]
        aw, ah, ax, ay = ar - al, ab - at, (al + ar) / 2, (at + ab) / 2
        px, py, pw, ph = loc[b, 4 * n:4 * n + 4]
        ox, oy = px * var[0] * aw + ax, py * var[1] * ah + ay
        ow, oh = np.exp(pw * var[2]) * aw / 2, np.exp(ph * var[3]) * ah / 2
        box = np.array([ox - ow, oy - oh, ox + ow, oy + oh])
        out[b, n] = [k - 1 if score >= thr else -1, score, *(np.clip(box, 0, 1) if clip else box)]
    return [out, (out[:, :, 0] >= 0).sum(axis=1).astype("int32")]


def _np_roi_align(x: np.ndarray, rois: np.ndarray, ph: int, pw: int, scale: float,
                  ratio: int) -> np.ndarray:
    _, c, h, w = x.shape

    def sample(b: int, y: float, xx: float) -> np.ndarray:
        if y < -1 or xx < -1 or y > h or xx > w:
            return np.zeros(c)
        y, xx = min(max(y, 0.0), h - 1.0), min(max(xx, 0.0), w - 1.0)
        y0, x0 = int(np.floor(y)), int(np.floor(xx))
        y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
        ly, lx = y - y0, xx - x0
        return ((1 - ly) * ((1 - lx) * x[b, :, y0, x0] + lx * x[b, :, y0, x1])
                + ly * ((1 - lx) * x[b, :, y1, x0] + lx * x[b, :, y1, x1]))

    out = np.zeros((len(rois), c, ph, pw), dtype=x.dtype)
    for r, roi in enumerate(rois):
        b = int(roi[0])
        x1, y1, x2, y2 = roi[1:] * scale
        bh, bw = max(y2 - y1, 1.0) / ph, max(x2 - x1, 1.0) / pw
        for i, j in itertools.product(range(ph), range(pw)):
            acc = np.zeros(c)
            for sy, sx in itertools.product(range(ratio), range(ratio)):
                acc += sample(b, y1 + i * bh + (sy + 0.5) * bh / ratio,
                              x1 + j * bw + (sx + 0.5) * bw / ratio)
            out[r, :, i, j] = acc / ratio ** 2
    return out


@register("resize_nearest", "L5", lambda x: [np_resize_nearest(x, 8, 4)],
          notes="5x6 -> 8x4, source floor(y * H / OH) (PyTorch 'nearest', TOPI asymmetric/floor)")
def _resize_nearest(dtype: str) -> Sample:
    x = te.placeholder((1, 2, 5, 6), dtype, "data")
    arr = rng_for("resize_nearest").standard_normal((1, 2, 5, 6)).astype(dtype)
    return Sample((x,), (resize2d(x, (8, 4), "nearest"),), (arr,), (True,))


@register("resize_bilinear", "L5", lambda x: [np_resize_bilinear(x, 7, 4)],
          notes="5x6 -> 7x4, align_corners=False: half-pixel centers, borders clamped "
                "(PyTorch interpolate bilinear, TOPI half_pixel)")
def _resize_bilinear(dtype: str) -> Sample:
    x = te.placeholder((1, 2, 5, 6), dtype, "data")
    arr = rng_for("resize_bilinear").standard_normal((1, 2, 5, 6)).astype(dtype)
    return Sample((x,), (resize2d(x, (7, 4), "bilinear"),), (arr,), (True,))


@register("resize_bilinear_align_corners", "L5",
          lambda x: [np_resize_bilinear(x, 7, 4, align_corners=True)],
          notes="5x6 -> 7x4, align_corners=True: source y (H-1)/(OH-1)")
def _resize_bilinear_ac(dtype: str) -> Sample:
    x = te.placeholder((1, 2, 5, 6), dtype, "data")
    arr = rng_for("resize_bilinear_align_corners").standard_normal((1, 2, 5, 6)).astype(dtype)
    return Sample((x,), (resize2d(x, (7, 4), "bilinear", align_corners=True),), (arr,), (True,))


_SIZES, _RATIOS = (0.3, 0.5), (1.0, 2.0, 0.5)


@register("multibox_prior", "L5", lambda x: [_np_multibox_prior(x, _SIZES, _RATIOS)],
          notes="sizes (0.3, 0.5), ratios (1, 2, 0.5), default steps/offsets, no clip; the output "
                "depends only on the input's shape: nothing differentiable")
def _multibox_prior(dtype: str) -> Sample:
    x = te.placeholder((1, 3, 4, 5), dtype, "data")
    arr = rng_for("multibox_prior").standard_normal((1, 3, 4, 5)).astype(dtype)
    return Sample((x,), (multibox_prior(x, _SIZES, _RATIOS),), (arr,), (False,))


_VAR = (0.1, 0.1, 0.2, 0.2)


@register("multibox_transform_loc", "L5",
          lambda c, lo, a: _np_transform_loc(c, lo, a, False, 0.3, _VAR),
          notes="dense form (no compaction of valid rows); clip=False, threshold 0.3; "
                "differentiable w.r.t. loc_pred; class scores (argmax) and anchors treated as "
                "constants")
def _multibox_transform_loc(dtype: str) -> Sample:
    rng = rng_for("multibox_transform_loc")
    bsz, ncls, nanc = 2, 3, 5
    c = te.placeholder((bsz, ncls, nanc), dtype, "cls_prob")
    lo = te.placeholder((bsz, nanc * 4), dtype, "loc_pred")
    a = te.placeholder((1, nanc, 4), dtype, "anchor")
    logits = rng.standard_normal((bsz, ncls, nanc)) * 2
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    corner = rng.uniform(0.1, 0.5, (1, nanc, 2))
    anchors = np.concatenate([corner, corner + rng.uniform(0.2, 0.4, (1, nanc, 2))], axis=2)
    arrays = (probs.astype(dtype), (rng.standard_normal((bsz, nanc * 4)) * 0.5).astype(dtype),
              anchors.astype(dtype))
    return Sample((c, lo, a), tuple(multibox_transform_loc(c, lo, a, False, 0.3, _VAR)), arrays,
                  (False, True, False))


@register("roi_align", "L5", lambda x, r: [_np_roi_align(x, r, 2, 2, 0.5, 2)],
          notes="avg mode, pooled 2x2, spatial_scale 0.5, sample_ratio 2 (fixed grid); rois "
                "[batch, x1, y1, x2, y2] are a non-differentiable float input; bilinear samples "
                "clamped into the image, zero beyond one pixel outside (TOPI)")
def _roi_align(dtype: str) -> Sample:
    rng = rng_for("roi_align")
    x = te.placeholder((2, 3, 6, 6), dtype, "data")
    r = te.placeholder((3, 5), dtype, "rois")
    lo = rng.uniform(0.3, 4.0, (3, 2))
    rois = np.concatenate([[[0.0], [1.0], [1.0]], lo, lo + rng.uniform(3.0, 7.0, (3, 2))], axis=1)
    arrays = (rng.standard_normal((2, 3, 6, 6)).astype(dtype), rois.astype(dtype))
    return Sample((x, r), (roi_align(x, r, 2, 0.5, 2),), arrays, (True, False))


register_no_compute("nms", "L5", "non-maximum suppression is sequential and data-dependent: "
                    "whether a box survives depends on which higher-scored boxes survived")
register_no_compute("get_valid_counts", "L5", "compacts boxes above a score threshold to the "
                    "front: each output position is a data-dependent prefix count")
register_no_compute("multibox_detection", "L5", "multibox_transform_loc followed by NMS "
                    "(sequential, data-dependent)")
register_no_compute("proposal", "L5", "RPN proposals need a data-dependent sort and NMS")
