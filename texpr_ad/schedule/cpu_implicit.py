"""Implicit im2col: a stride-1 convolution's product reads its padded input in place.

`cpu_contract.im2col` turns `O[n, f, y, x] = sum_{c, ry, rx} W[f, c, ry, rx] * X[n, c, y + ry - 1, x + rx - 1]`
(guarded at the border) into a gather `col[n, c, ry, rx, y, x]` and one product per image.  The
gather writes (and the product reads back) 9x the input: on conv2d 8x64x56^2 that is 58 MB
through DRAM, about 2 ms of a 6 ms product.  For stride 1 each row of col is a run of a padded
copy P of X, if the product is computed on P's width and cropped afterwards:

    col[n][(c, ry, rx), y * PW + x] = P[n].flat[c * PH * PW + ry * PW + rx + (y * PW + x)]

so texpr_ad's GEMM (`kernels/gemm_f32.matmul_rows`) reads the rows of B in place through a
table of row offsets.  P is the padded input (8 MB, in cache), the product computes PW / W
(here 58 / 56) more columns, and the crop copies the output once.

`window` decides it, from the contraction's normal form (`contraction.SumOfProduct`):
* the read is `S[lead..., channels..., i_1 + o_1(r), ..., i_d + o_d(r)]`: the output's leading
  axes that only it indexes (the batch), then plain reduction axes, then one index per
  remaining output axis i_j (in the output's order, at the end of both), each that axis with
  coefficient 1 plus an affine `o_j` of other reduction axes (dilation and flipped kernels
  included; strides are not: their rows are not runs);
* the output's axes are (lead, the other operand's own axes, i_1..i_d);
* the guard, conjunct by conjunct, concerns one window dim each and is exactly "the index is
  inside S" there (checked by enumeration; one-sided padding, a causal convolution's, is
  padding too; a masked tap or a dilation's `where` is not, and keeps the stored gather);
* float32 on texpr_ad's GEMM (`_env.native_gemm`): through BLAS the rows would have
  to be gathered anyway.
P is then a stage `P[lead, channels, p] = S[lead, channels, p + min o]` guarded by S's bounds
(no stage when S already is P: an unpadded convolution).

`crop`: a stage that only copies a box of such a product (the input gradient of a padded
convolution, computed on the padded grid, then cropped) computes the product on that box
alone: the row starts move by the box's offset.

`weight_window`: the weight gradient `sum_{n, y, x} dY[n, f, y, x] * S[n, c, y + ry - 1, ..]`
reads the same windows, as the rows (c, ry, rx) of the product's other operand, summed over
the batch n (`gemm_f32.matmul_a_rows`), against dY laid out on P's grid with zeros in the
padded columns.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any, Sequence, cast

from .._env import native_gemm
from ..te.affine import to_affine
from ..te.bounds import bound, enumerate_holds
from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce, const
from ..te.intrin import all as te_all
from ..te.intrin import if_then_else
from ..te.simplify import simplify
from ..te.ops import Op
from ..te.tensor import Tensor, compute
from ..te.visit import substitute, transform, walk
from .contraction import Role, SumOfProduct, product
from .nest import const_int
from .normalize import Guarded
from .plan import ComputeStage, Contraction, Window

MIN_COLS = 64  # output columns per row of the product at least (one micro-tile wide)
WINDOW_TAPS = 16  # `pad_windows`: taps per window dim at most (a weight gradient's are the image)


@dataclass(frozen=True)
class Implicit:
    """What `window` or `weight_window` found: the padded tensor (None: read S itself), its
    read in the contraction body (the new gathered operand), the zero-padded copy D of the
    other operand (`weight_window` only), and the contraction (its window record included)."""

    padded: Tensor | None
    read: Read
    head: Tensor | None
    contraction: Contraction


def _conjuncts(c: Expr | None) -> list[Expr]:
    if c is None:
        return []
    if isinstance(c, Call) and c.op is Op.AND:
        return [x for a in c.args for x in _conjuncts(a)]
    return [c]


def window(f: SumOfProduct, name: str) -> Implicit | None:
    """The implicit-im2col form of a contraction whose gathered operand is `f.b`, or None (see
    the module docstring)."""
    g, a, red, data = f.b.g, f.a.read, f.red, f.data
    lead, mids = f.leading(Role.N), f.axes(Role.M)
    inner = [x for x in f.axes(Role.N) if x not in lead]
    if f.body.dtype != "float32" or not inner or list(data) != [*lead, *mids, *inner] \
            or f.axes(Role.BATCH, Role.OTHER) or not native_gemm():
        return None  # (no BATCH, OTHER: `a` reads the reduction and its own axes only)
    s, idx = g.read.tensor, g.read.indices
    nl, nd = len(lead), len(inner)
    nc = len(idx) - nl - nd
    shape = _sized(s.shape, nl)  # the images' dims may be symbolic (the batch), the rest not
    if nc < 0 or None in shape or tuple(idx[:nl]) != tuple(lead):
        return None
    chans = list(idx[nl:nl + nc])
    if not all(isinstance(c, IterVar) and c in red for c in chans) or len(set(chans)) != nc:
        return None
    dims: list[tuple[dict[IterVar, int], int]] = []  # per window dim: {reduction axis: coeff}, const
    for i, ix in zip(inner, f.b.index[nl + nc:], strict=True):
        aff = ix.affine  # (its terms are the stage's axes)
        if aff is None or aff[0].get(i) != 1 or const_int(i.lo) != 0:
            return None
        terms = {k: v for k, v in aff[0].items() if k is not i}
        if not all(k in red and k not in chans for k in terms):
            return None
        dims.append((terms, aff[1]))  # type: ignore[arg-type]
    used = [k for t, _ in dims for k in t]
    if len(used) != len(set(used)) or set(used) | set(chans) != set(red):
        return None  # a reduction axis in two window dims, or one the read does not use
    exts = {k: f.extent(k) for k in red}  # (im2col: every reduction axis runs from 0)
    outs = [f.extent(i) for i in inner]
    if any(v is None or v <= 0 for v in [*exts.values(), *outs]):
        return None
    lay = _layout(g, shape, _sized([x.extent for x in lead], nl), chans, inner, dims, exts, outs)
    if lay is None:
        return None
    flip = tuple(lay.strides[k] < 0 for k in red)
    base = lay.base + sum(lay.strides[k] * (exts[k] - 1) for k in red if lay.strides[k] < 0)
    win = Window(tuple(exts[k] for k in red), tuple(abs(lay.strides[k]) for k in red), flip,
                 base, (outs[0], *lay.grid[1:]), tuple(outs))  # type: ignore[arg-type]
    padded, read = _padded_read(s, [*lead, *chans], inner, dims, lay, name)
    return Implicit(padded, read, None, Contraction(
        a.tensor, read.tensor, tuple(a.indices.index(x) for x in (*mids, *red)), (),
        (product(lead), product(mids), product(red), const(win.cols, "int64")),
        tuple(x.extent for x in data), None, "a", win))


def _sized(dims: Sequence[Expr], symbolic: int) -> list[Any]:
    """Each dim's static size; of the first `symbolic`, a dim with none is its expression."""
    return [d if (c := const_int(d)) is None and k < symbolic else c for k, d in enumerate(dims)]


def _padded_read(s: Tensor, keep: Sequence[Expr], inner: Sequence[IterVar],
                 dims: list[tuple[dict[IterVar, int], int]], lay: _Layout, name: str
                 ) -> tuple[Tensor | None, Read]:
    """The padded copy P of `s` (None where `s` is P already) and its windows' read."""
    padded = None if lay.reads_s else _padded(s, len(keep), lay.lo, lay.shape, name)
    at = [_shifted(i, t, c - low) for i, (t, c), low in zip(inner, dims, lay.lo)]
    return padded, (s if padded is None else padded)[(*keep, *at)]


@dataclass(frozen=True)
class _Layout:
    """The padded copy P of a window read: per window dim the lowest offset `lo` and P's
    extent `grid`, P's `shape` (kept dims, channels, window dims), whether P is S itself
    (`reads_s`), and a row's start as `base + sum_k strides[k] * k` over the offset axes and
    channels."""

    lo: list[int]
    grid: list[int]
    shape: list[int]
    reads_s: bool
    strides: dict[IterVar, int]
    base: int


def _layout(g: Guarded, shape: list[int | None], keep: list[int | None], chans: list[IterVar],
            inner: Sequence[IterVar], dims: list[tuple[dict[IterVar, int], int]],
            exts: dict[IterVar, int | None], outs: list[int | None]) -> _Layout | None:
    """P's layout for a window read of `g` (`keep`: the extents of its leading dims before the
    channels), or None when the guard is not padding or the rows are too short."""
    nd, nk = len(inner), len(keep) + len(chans)
    lo = [c + sum(min(0, v * (exts[k] - 1)) for k, v in t.items()) for t, c in dims]  # type: ignore[operator]
    hi = [c + sum(max(0, v * (exts[k] - 1)) for k, v in t.items()) for t, c in dims]  # type: ignore[operator]
    grid = [o + h - low for o, h, low in zip(outs, hi, lo)]  # type: ignore[operator]
    if not _guard_is_padding(g, inner, dims, shape[nk:]):  # type: ignore[arg-type]
        return None
    pitch = [math.prod(grid[j + 1:]) for j in range(nd)]
    if outs[-1] < MIN_COLS // 2 or sum((o - 1) * p for o, p in zip(outs, pitch)) < MIN_COLS:  # type: ignore[operator]
        return None  # rows too short for the micro-kernel's 64 columns
    p_shape = [*keep, *(exts[c] for c in chans), *grid]
    chan_stride = {c: math.prod(p_shape[len(keep) + q + 1:]) for q, c in enumerate(chans)}  # type: ignore[arg-type]
    strides = {**chan_stride, **{k: v * pitch[j] for j, (t, _) in enumerate(dims)
                                 for k, v in t.items()}}
    base = sum((c - low) * p for (_, c), low, p in zip(dims, lo, pitch))
    return _Layout(lo, grid, p_shape, lo == [0] * nd and p_shape == shape, strides, base)  # type: ignore[arg-type]


def weight_window(f: SumOfProduct, name: str) -> Implicit | None:
    """The implicit-im2col form of a weight gradient (the contraction `f`), or None:

        dW[f, c, ry, rx] = sum_{n, y, x} dY[n, f, y, x] * S[n, c, y + ry - 1, x + rx - 1]

    is `C[(c, ry, rx), f] = sum_n Win_n @ D_n`: row (c, ry, rx) of Win_n is a run of the padded
    copy P[n] (as in the forward, with the reduction axes y, x sliding and the output axes
    ry, rx the offsets), over P's width; D_n[(y, x'), f] = dY[n, f, y, x'] where x' is inside
    the output, 0 in the padded columns.  The read of S is `S[lead, chans, i_j + o_j]`: lead
    reduction axes (K: `a` reads them too, the summed batch), output axes (N: channels), then
    one index per remaining reduction axis i_j, that axis plus an affine o_j of N axes.  `f`
    is as `cpu_contract.im2col` leaves it: `a` plain, every reduction axis K."""
    if f.body.dtype != "float32" or not native_gemm():
        return None
    g, a, red, data = f.b.g, f.a.read, f.red, f.data
    s, idx = g.read.tensor, g.read.indices

    def run(r: Role, es: Sequence[Expr]) -> list[IterVar]:  # leading axes of role r
        return cast(list[IterVar], list(itertools.takewhile(
            lambda e: isinstance(e, IterVar) and f.role(e) is r, es)))

    lead = run(Role.K, idx)
    chans = run(Role.N, idx[len(lead):])
    nk, shape = len(lead) + len(chans), _sized(s.shape, len(lead))  # the batch may be symbolic
    inner: list[IterVar] = []
    dims: list[tuple[dict[IterVar, int], int]] = []
    for ix in f.b.index[nk:]:
        if ix.affine is None:
            return None
        slides = [k for k in ix.affine[0] if k in red]
        terms = {k: v for k, v in ix.affine[0].items() if k not in red}
        if len(slides) != 1 or ix.affine[0][slides[0]] != 1 or slides[0] in lead \
                or not all(f.role(k) is Role.N and k not in chans  # type: ignore[arg-type]
                           for k in terms):
            return None
        inner.append(slides[0])  # type: ignore[arg-type]
        dims.append((terms, ix.affine[1]))  # type: ignore[arg-type]
    offs = [k for t, _ in dims for k in t]
    mids = f.axes(Role.M, Role.BATCH)
    if not inner or None in shape or len(set(inner)) != len(inner) or len(offs) != len(set(offs)) \
            or set(red) != set(lead) | set(inner) \
            or set(data) != set(chans) | set(offs) | set(mids):
        return None  # (then `a`, plain, reads exactly lead, inner and mids)
    exts = {k: f.extent(k) for k in (*data, *red) if k not in lead}
    outs = [exts[i] for i in inner]
    if any(v is None or v <= 0 for v in exts.values()) \
            or any(const_int(k.lo) != 0 for k in (*data, *red)):
        return None
    keep = _sized([k.extent for k in lead], len(lead))
    lay = _layout(g, shape, keep, chans, inner, dims, exts, outs)
    if lay is None:
        return None
    rows = tuple(x for x in data if x not in mids)
    win = Window(tuple(exts[k] for k in rows), tuple(lay.strides[k] for k in rows),  # type: ignore[misc]
                 (False,) * len(rows), lay.base, (outs[0], *lay.grid[1:]), tuple(outs), "a")  # type: ignore[arg-type]
    padded, read = _padded_read(s, [*lead, *chans], inner, dims, lay, name)
    head = _head(a, lead, keep, inner, lay.grid, mids, name)
    natural = (*rows, *mids)
    return Implicit(padded, read, head, Contraction(
        read.tensor, head, (), (), (product(lead), product(rows), const(win.cols, "int64"),
                                    product(mids)), tuple(x.extent for x in natural),
        None if natural == tuple(data) else tuple(natural.index(x) for x in data), "", win))


def _head(a: Read, lead: list[IterVar], keep: list[Any], inner: list[IterVar], grid: list[int],
          mids: list[IterVar], name: str) -> Tensor:
    """`D[lead, i_1, p_2.., mids] = a[..]` where each p_j < its output extent, else 0: the
    other operand of a weight gradient on the padded grid (rows contiguous per lead entry)."""
    outs = [const_int(i.extent) for i in inner]

    def body(*ax: IterVar) -> Expr:
        nl, nd = len(lead), len(inner)
        sub = dict(zip([*lead, *inner, *mids], ax, strict=True))
        v = a.tensor[tuple(sub[i] for i in a.indices)]  # type: ignore[index]
        conds = [p < o for p, o, g in zip(ax[nl + 1:nl + nd], outs[1:], grid[1:]) if g > o]  # type: ignore[operator]
        return if_then_else(te_all(*conds), v, 0.0) if conds else v

    body.axis_names = [*(f"k{q}" for q in range(len(lead))),  # type: ignore[attr-defined]
                       *(f"p{q}" for q in range(len(inner))), *(f"m{q}" for q in range(len(mids)))]
    shape = [*keep, outs[0], *grid[1:],
             *(const_int(x.extent) for x in mids)]
    return compute(tuple(shape), body, name=f"{name}_head")


def _shifted(i: IterVar, terms: dict[IterVar, int], off: int) -> Expr:
    """`i + sum_k terms[k] * k + off`."""
    e: Expr = i
    for k, v in terms.items():
        e = e + (k if v == 1 else k * v)
    return e + off if off else e


def _guard_is_padding(g: Guarded, inner: Sequence[IterVar], dims: list[tuple[dict, int]],
                      extents: Sequence[int]) -> bool:
    """The guard is, dim by window dim, exactly "the index lies inside S" (by enumeration)."""
    groups: list[list[Expr]] = [[] for _ in dims]
    for c in _conjuncts(g.cond):
        vs = {v for v in walk(c) if isinstance(v, (IterVar, Read, Reduce))}
        hit = [j for j, (t, _) in enumerate(dims) if vs <= {inner[j], *t}]
        if not hit:
            return False  # reads, other axes, or two window dims in one conjunct
        groups[hit[0]].append(c)
    for j, (i, (t, c)) in enumerate(zip(inner, dims)):
        at = g.read.indices[len(g.read.indices) - len(dims) + j]
        inside = te_all(at >= 0, at < extents[j])
        guard = te_all(*groups[j]) if groups[j] else te_all(True)
        if enumerate_holds(inside, [guard]) is not True or \
                enumerate_holds(guard, [inside]) is not True:
            return False
    return True


def _padded(s: Tensor, nkeep: int, lo: list[int], shape: list[int], name: str) -> Tensor:
    """`P[keep..., p] = S[keep..., p + lo]` where that lies inside S, else 0."""
    def body(*ax: IterVar) -> Expr:
        at = [a + low if low else a for a, low in zip(ax[nkeep:], lo)]
        conds: list[Expr] = []
        for a, low, n, d in zip(at, lo, shape[nkeep:], s.shape[nkeep:]):
            conds += [a >= 0] if low < 0 else []
            conds += [a < d] if n + low > const_int(d) else []  # type: ignore[operator]
        v = s[(*ax[:nkeep], *at)]
        return if_then_else(te_all(*conds), v, 0.0) if conds else v

    body.axis_names = [*(f"k{q}" for q in range(nkeep)),  # type: ignore[attr-defined]
                       *(f"p{q}" for q in range(len(lo)))]
    return compute(tuple(shape), body, name=f"{name}_padded")


def crop(s: ComputeStage, t: ComputeStage) -> ComputeStage | None:
    """Stage `t` computing, as the window contraction `s` does, only the box of `s` it copies
    (`t[axes] = s[axes + c]`, shifted on the window dims only: the input gradient of a padded
    convolution, cropped from the padded grid), or None if `t` is not such a copy."""
    c = s.cpu.contraction
    assert c is not None and c.window is not None
    w = c.window
    (body,) = t.bodies if len(t.bodies) == 1 else (None,)
    if not (isinstance(body, Read) and body.tensor is s.tensors[0] and len(t.axes) == len(s.axes)):
        return None
    shift: list[int] = []
    for a, i in zip(t.axes, body.indices):
        aff = to_affine(i)
        if aff is None or set(aff[0]) != {a} or aff[0][a] != 1 or const_int(a.lo) != 0:
            return None
        shift.append(aff[1])
    nw = len(w.out)
    outs = [const_int(a.extent) for a in t.axes]  # the leading (batch) dims may be symbolic
    if None in outs[-nw:] or any(shift[:-nw]) or any(not simplify(a.extent).same_as(
            simplify(b.extent)) for a, b in zip(t.axes[:-nw], s.axes[:-nw])):
        return None
    box = list(zip(shift[-nw:], outs[-nw:], w.out))
    if any(k < 0 or k + o > full for k, o, full in box):  # type: ignore[operator]
        return None
    pitch = [math.prod(w.grid[j + 1:]) for j in range(nw)]
    win = replace(w, base=w.base + sum(k * p for k, p in zip(shift[-nw:], pitch)),
                  grid=(outs[-nw], *w.grid[1:]), out=tuple(outs[-nw:]))  # type: ignore[arg-type]
    if win.out[-1] < MIN_COLS // 2 or win.cols < MIN_COLS:
        return None
    new_body = substitute(s.bodies[0], dict(zip(s.axes, body.indices, strict=True)))
    con = replace(c, window=win, sizes=(*c.sizes[:3], const(win.cols, "int64")),
                  bmn_shape=tuple(a.extent for a in t.axes))
    span = [f"{k}:{a.extent if o is None else k + o}" for k, o, a in zip(shift, outs, t.axes)]
    note = (f"cropped: the window contraction of {s.name}, computed only on the box "
            f"{body.tensor.name}[{', '.join(span)}] this stage copies")
    return replace(t, bodies=(new_body,), cpu=replace(s.cpu, contraction=con), parallel=False,
                   fused=0, reduction=s.reduction, notes=(*t.notes, *s.notes, note))


def pad_windows(st: ComputeStage) -> tuple[list[Tensor], ComputeStage]:
    """Zero-padded copies of what `st`'s reductions read through 2-d windows of taps guarded by
    their bounds (`if_then_else(0 <= y + r - 3 < h, x[.., y + r - 3], 0)`: a padded convolution
    or pool written plainly), and `st` reading them: its loops lose the selects, which kept
    LLVM scalar (7 x 7 depthwise: 29 -> 4 ms; 3 x 3: 3.3 -> 0.9 ms), for one pass writing each
    copy, which holds the guard's zeros: every term is the one written.  Not a 1-d window
    (its guard vectorizes as masked loads) nor one over more than WINDOW_TAPS (a weight
    gradient's, over the image: 13 -> 29 ms), nor a guard beyond the bounds."""
    pads: dict[tuple, Tensor] = {}
    new: dict[Expr, Expr] = {}
    for r in (x for b in st.bodies for x in walk(b) if isinstance(x, Reduce)):
        for sel in walk(r.source[0]):
            if sel not in new and (got := _padded_window(sel, set(r.axis), pads)) is not None:
                new[sel] = got
    if not new:
        return [], st
    return list(pads.values()), replace(st, bodies=tuple(transform(b, new.get) for b in st.bodies),
                                        notes=(*st.notes, f"padded: its reduction reads "
                                               f"{', '.join(t.name for t in pads.values())}, "
                                               f"zero-padded copies, for its guarded windows"))


def _padded_window(sel: Expr, red: set[IterVar], pads: dict[tuple, Tensor]) -> Expr | None:
    """`sel`, a window read guarded exactly by its bounds, as a read of a zero-padded copy
    (one per tensor and padding, in `pads`), or None."""
    if not (isinstance(sel, Call) and sel.op is Op.SELECT and isinstance(x := sel.args[1], Read)
            and isinstance(z := sel.args[2], Const) and z.value == 0 and sel.dtype != "bool"):
        return None
    shape, off, size = [const_int(n) for n in x.tensor.shape], [], []
    for i, n in zip(x.indices, shape):
        lo, hi = bound(i, False), bound(i, True)
        if n is None or lo is None or hi is None or lo[0] or hi[0]:
            return None
        off.append(min(lo[1], 0))
        size.append(max(hi[1] + 1, n) - off[-1])
    keep = next(d for d in range(len(shape) + 1)  # the dims before the first padded one
                if d == len(shape) or off[d] or size[d] > shape[d])  # type: ignore[operator]
    inside = list(zip(x.indices[keep:], shape[keep:]))
    used = [{v for v in walk(i) if isinstance(v, IterVar)} for i, _ in inside]
    conj = _conjuncts(sel.args[0])
    groups = [[c for c in conj if {v for v in walk(c) if isinstance(v, (IterVar, Read, Reduce))}
               <= u] for u in used]
    taps = [const_int(k.extent) for u in used for k in u & red]
    if len(inside) < 2 or not taps or any(t is None or t > WINDOW_TAPS for t in taps) \
            or sum(map(len, groups)) != len(conj):
        return None  # not a 2-d window of taps, or a guard beyond the bounds (a dilation's)
    for (i, n), g in zip(inside, groups):
        ok = te_all(i >= 0, i < n)
        if not g or enumerate_holds(ok, g) is not True or \
                enumerate_holds(te_all(*g), [ok]) is not True:
            return None
    key = (x.tensor, tuple(off), tuple(size))
    if key not in pads:
        pads[key] = _padded(x.tensor, keep, off[keep:], size, x.tensor.name)
    return pads[key][tuple(simplify(i - o) if o else i for i, o in zip(x.indices, off))]
