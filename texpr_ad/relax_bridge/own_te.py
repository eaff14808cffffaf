"""texpr_ad's own te for the Relax ops TVM 0.27 cannot hand over as te (a tiny TOPI).

TVM legalizes these ops to `te.extern`, packed functions or nothing, so `relax_capture` finds no
te to differentiate.  `OWN_TE[op](call, orig_var)` gives, for one Relax call (its arguments'
types and its attributes), the Relax values the te reads and a function building texpr_ad te
from their placeholders; `relax_ops.derived_gradient` derives and emits its adjoints exactly as
for a captured legalization.  Only the adjoints run: the forward stays TVM's.  Where the te needs
what TVM's forward decided, it reads it from TVM, so the gradient follows the forward exactly
(ties and duplicate indices included):

    sort, topk, median        values = x gathered at the indices: the call's own index output
                              (`orig_var`), else an argsort/topk emitted beside the gradient;
                              the gradient is a scatter of dy to those indices
    scatter_elements,         reduction "update": which update each position kept, found by the
    scatter_nd, index_put     same op scattering update numbers (1 + flat position; 0 = none):
                              d data = dy where none was kept, d updates = dy at their position
                              for the kept ones, 0 for overwritten duplicates (PyTorch gives
                              every duplicate the position's dy);
                              "add" / accumulate: data + a scatter-add (d updates = dy gathered)
    cumsum, cumprod           a sum / product over k <= i (k < i when exclusive); the product's
                              gradient never divides (texpr_ad's prod rule counts the zeros)
    take_backward             a scatter-add of the output gradient along the axis
    layout_transform          out[index_map(i)] = x[i] (a scatter), padding filled with pad_value
    slice_scatter             src inside the slice, x elsewhere (TVM's te reads past src's end)
    ewise_fma, wrap_param,    elementwise, a cast, a pixel rearrangement, attention over packed
    pixel_shuffle,            sequences (per sequence as `relax.nn.attention`); TVM 0.27 cannot
    attention_var_len         compile these at all, so `legalize` gives them one from this te

`NO_GRAD` lists the ops whose outputs are indices, counts, samples or selections: they get a
no-grad gradient (PyTorch has none for them either).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .. import te
from ..ops.common import broadcast_read
from ..ops.shape import cast, copy, gather_elements, pixel_shuffle, ravel_index, reshape, \
    unravel_index
from ..te.expr import Expr, IterVar, Var
from ..te.tensor import ScatterOp, ScatterUpdate, Tensor
from .from_tvm import prim_expr
from .grad import BridgeError, placeholders

REASON = "texpr_ad's own te (TVM's legalization is not te, or reads out of bounds)"

# op -> why its gradient is no-grad
NO_GRAD: dict[str, str] = {
    "relax.argsort": "integer output (indices)",
    "relax.bucketize": "integer output (bucket indices)",
    "relax.nonzero": "integer output (indices)",
    "relax.unique": "a set of values and indices (torch.unique has no gradient either)",
    "relax.arange": "no tensor input",
    "relax.size": "integer output (element count)",
    "relax.multinomial_from_uniform": "integer output (sampled indices)",
    "relax.vision.get_valid_counts": "a selection of boxes (counts, indices, boxes by score)",
    "relax.vision.non_max_suppression": "a selection of boxes (indices, kept boxes)",
    "relax.vision.all_class_non_max_suppression": "integer output (selected indices)",
}

Define = Callable[[Any, Any], tuple[list[Any], Callable[..., Any]]]


@dataclass
class OwnTe:
    """The te of one call: `outputs` (one per Relax output), its placeholders `inputs`, the
    Relax expression feeding each (`values`), symbolic dim -> the caller's tirx.Var."""

    outputs: list[Tensor]
    inputs: list[Tensor]
    values: list[Any]
    var_map: dict[Var, Any]
    multi: bool


def build(call: Any, orig_var: Any = None, emit: Callable[[Any], Any] | None = None) -> OwnTe:
    """texpr_ad te for `call` (an op of `OWN_TE`); `orig_var` is the forward's output where the
    te may read it, `emit` binds the helper calls it needs (`ctx.emit` in a gradient; both None
    when building a legalization)."""
    from tvm import relax
    op = str(call.op.name)
    values, fte = OWN_TE[op](call, orig_var)
    if any(isinstance(v, relax.Call) for v in values) and emit is None:
        raise BridgeError(f"{op}: its te reads helper calls; pass `emit` (a BlockBuilder's emit)")
    bb = relax.BlockBuilder()  # types of tuple items (a TupleGetItem is a leaf)
    values = [emit(v) if isinstance(v, relax.Call) else
              bb.normalize(v) if isinstance(v, relax.TupleGetItem) else v for v in values]
    phs, var_map = placeholders(values, op)
    res = fte(*phs)
    multi = isinstance(call.ty, relax.TupleType)
    outs = list(res) if isinstance(res, (list, tuple)) else [res]
    return OwnTe(outs, phs, values, var_map, multi)


# -- helpers ---------------------------------------------------------------------------------

def _int(v: Any, default: int | None = None) -> int | None:
    return default if v is None else int(v)


def _axis(v: Any, ndim: int) -> int:
    return int(v) % ndim


def _tuple_fields(e: Any) -> list[Any]:
    """The fields of a Relax tuple argument (a literal, or a tuple-typed var)."""
    from tvm import relax
    if isinstance(e, relax.Tuple):
        return list(e.fields)
    return [relax.TupleGetItem(e, k) for k in range(len(e.ty.fields))]


def _item(orig_var: Any, k: int) -> Any:
    from tvm import relax
    return relax.TupleGetItem(orig_var, k)


def _wrap(v: Expr, n: Expr) -> Expr:
    """A possibly negative index into a dim of `n` (TVM's scatters and index_put shift them)."""
    return te.if_then_else(v < 0, v + n.astype(v.dtype), v)


def _replace(idx: Sequence[Expr], axis: int, v: Expr) -> tuple[Expr, ...]:
    return (*idx[:axis], v, *idx[axis + 1:])


def scatter_add(name: str, shape: Sequence[Expr], dtype: str, domain: Sequence[Expr],
                fn: Callable[..., tuple[Sequence[Expr], Expr]]) -> Tensor:
    """zeros(`shape`) plus `value(u)` at `index(u)` for every u of `domain`, with
    `fn(*u) -> (index, value)`: a texpr_ad scatter-add stage (its adjoint is a gather)."""
    axes = tuple(IterVar(f"u{k}", te.const(0), d, "data") for k, d in enumerate(domain))
    index, value = fn(*axes)
    op = ScatterOp.of(name, tuple(shape), dtype, axes,
                      [ScatterUpdate(tuple(index), value.astype(dtype), te.const(True))])
    return Tensor(op, 0, op.shape, dtype)


def _kept(name: str, data: Tensor, winner: Tensor, updates: Callable[..., Expr],
          domain: Sequence[Expr]) -> Tensor:
    """reduction "update": data where `winner` is 0, else the update it names (1 + the flat
    position of the update in `domain`)."""
    def body(*p: Expr) -> Expr:
        w = winner[p]
        u = unravel_index(te.max(w - 1, te.const(0, w.dtype)), domain)
        return te.if_then_else(w > 0, updates(*u), data[p])

    return te.compute(data.shape, body, name=name)


def _update_numbers(shape: Any) -> Any:
    """Relax: 1, 2, ... n (int64) in `shape` (a Relax ShapeExpr): the number of each update."""
    from tvm import relax
    import tvm
    n = 1
    for d in shape.values:
        n = n * d
    n = tvm.sym.Analyzer().simplify(n)
    seq = relax.op.arange(relax.prim_value(tvm.tirx.const(1, "int64")),
                          relax.prim_value(n + 1), relax.prim_value(tvm.tirx.const(1, "int64")),
                          "int64")
    return relax.op.reshape(seq, shape)


def _reduction(op: str, red: str, allowed: Sequence[str]) -> str:
    if red not in allowed:
        raise BridgeError(f"{op}: reduction={red!r} has no derived gradient; texpr_ad defines "
                          f"{', '.join(map(repr, allowed))} (write the op with those, or register "
                          "a gradient for it by hand)")
    return red


# -- definitions -----------------------------------------------------------------------------

def _scan(reducer: Any, name: str) -> Define:
    """cumsum / cumprod: out[.., i, ..] = reduce_{k <= i} x[.., k, ..] (k < i if exclusive);
    axis None scans the flattened tensor; dtype casts first."""
    def define(call: Any, _: Any) -> tuple[list[Any], Callable[..., Any]]:
        a = call.attrs
        exclusive = bool(a.exclusive) if a.exclusive is not None else False

        def fte(x: Tensor) -> Tensor:
            if a.dtype is not None and str(a.dtype) not in ("", "void", x.dtype):
                x = cast(x, str(a.dtype))
            if a.axis is None:
                x = reshape(x, (-1,))
            ax = _axis(_int(a.axis, 0), x.ndim)
            k = te.reduce_axis((0, x.shape[ax]), name="k")
            return te.compute(x.shape, lambda *i: reducer(
                x[_replace(i, ax, k)], axis=k, where=(k < i[ax]) if exclusive else (k <= i[ax])),
                name=name)
        return [call.args[0]], fte
    return define


def _sort(call: Any, _: Any) -> tuple[list[Any], Callable[..., Any]]:
    from tvm import relax
    a = call.attrs
    x = call.args[0]
    ax = _axis(a.axis, len(x.ty.shape.values))
    idx = relax.op.argsort(x, ax, bool(a.descending), "int64")
    return [x, idx], lambda X, I: gather_elements(X, I, ax)


def _topk(call: Any, orig_var: Any) -> tuple[list[Any], Callable[..., Any]]:
    from tvm import relax
    a = call.attrs
    x = call.args[0]
    ax = _axis(a.axis, len(x.ty.shape.values))
    both = str(a.ret_type) == "both"
    idx = (_item(orig_var, 1) if both and orig_var is not None else
           relax.op.topk(x, int(a.k), ax, "indices", bool(a.largest), "int64"))

    def fte(X: Tensor, I: Tensor) -> Any:
        values = gather_elements(X, I, ax)
        return [values, copy(I)] if both else values
    return [x, idx], fte


def _median(call: Any, orig_var: Any) -> tuple[list[Any], Callable[..., Any]]:
    """The element TVM picked: its index output; axis None (values only): the ((n-1)//2)-th of
    an argsort of the flattened x."""
    from tvm import relax
    a = call.attrs
    x = call.args[0]
    axes = [] if a.axis is None else [int(v) for v in a.axis]
    if len(axes) > 1:
        raise BridgeError(f"relax.median over axes {axes}: TVM 0.27 computes one axis or all; "
                          "reduce one axis at a time")
    out_shape = call.ty.fields[0].shape if isinstance(call.ty, relax.TupleType) else call.ty.shape
    if not axes:
        flat = relax.op.reshape(x, [-1])
        order = relax.op.argsort(flat, -1, False, "int64")

        def flat_fte(X: Tensor, O: Tensor) -> Tensor:
            Xf = reshape(X, (-1,))
            mid = te.floordiv(Xf.shape[0] - 1, 2)
            shape = tuple(te.const(int(d)) for d in out_shape.values)
            return te.compute(shape, lambda *_: Xf[O[mid]], name="median")
        return [x, order], flat_fte
    ax = axes[0] % len(x.ty.shape.values)
    keep = bool(a.keepdims)

    def fte(X: Tensor, I: Tensor) -> list[Tensor]:
        def body(*o: Expr) -> Expr:
            return X[_replace(o, ax, I[o]) if keep else (*o[:ax], I[o], *o[ax:])]
        return [te.compute(I.shape, body, name="median"), copy(I)]
    return [x, _item(orig_var, 1)], fte


def _scatter_elements(call: Any, _: Any) -> tuple[list[Any], Callable[..., Any]]:
    from tvm import relax
    op = str(call.op.name)
    data, indices, updates = call.args
    red = _reduction(op, str(call.attrs.reduction), ("update", "add"))
    ax = _axis(call.attrs.axis, len(data.ty.shape.values))
    if red == "add":
        def add(D: Tensor, I: Tensor, U: Tensor) -> Tensor:
            S = scatter_add("scatter_add", D.shape, D.dtype, U.shape,
                            lambda *u: (_replace(u, ax, _wrap(I[u], D.shape[ax])), U[u]))
            return te.compute(D.shape, lambda *p: D[p] + S[p], name="scatter_elements")
        return [data, indices, updates], add
    numbers = _update_numbers(updates.ty.shape)
    winner = relax.op.scatter_elements(relax.op.zeros(data.ty.shape, "int64"), indices, numbers,
                                       ax, "update")
    return [data, updates, winner], lambda D, U, W: _kept(
        "scatter_elements", D, W, lambda *u: U[u], U.shape)


def _scatter_nd(call: Any, _: Any) -> tuple[list[Any], Callable[..., Any]]:
    """indices (Y..., M), updates (Y..., rest...): out[indices[y, :], rest] = updates[y, rest]
    (TVM does not shift negative indices here)."""
    from tvm import relax
    op = str(call.op.name)
    data, indices, updates = call.args
    red = _reduction(op, str(call.attrs.reduction), ("update", "add"))
    if red == "add":
        def add(D: Tensor, I: Tensor, U: Tensor) -> Tensor:
            m, ny = int(I.shape[-1].value), I.ndim - 1
            S = scatter_add("scatter_add", D.shape, D.dtype, U.shape, lambda *u: (
                (*(I[(*u[:ny], te.const(d))] for d in range(m)), *u[ny:]), U[u]))
            return te.compute(D.shape, lambda *p: D[p] + S[p], name="scatter_nd")
        return [data, indices, updates], add
    numbers = _update_numbers(updates.ty.shape)
    winner = relax.op.scatter_nd(relax.op.zeros(data.ty.shape, "int64"), indices, numbers,
                                 "update")
    return [data, updates, winner], lambda D, U, W: _kept(
        "scatter_nd", D, W, lambda *u: U[u], U.shape)


def _index_put(call: Any, _: Any) -> tuple[list[Any], Callable[..., Any]]:
    """data[indices] = values (+= with accumulate): the index tensors broadcast together
    (right-aligned) to the update domain, negative indices count from the end, and values are
    read flat over the domain, as TVM does (so they need exactly that many elements)."""
    from tvm import relax
    import tvm
    data, indices, values = call.args
    index = _tuple_fields(indices)
    shapes = [[int(d) for d in relax.BlockBuilder().normalize(i).ty.shape.values]
              for i in index]
    dims = _broadcast(shapes)
    domain = [te.const(d, "int64") for d in dims]
    vshape = tuple(int(d) for d in values.ty.shape.values)
    if math.prod(vshape) != math.prod(dims):
        raise BridgeError(f"relax.index_put: values of shape {vshape} give {math.prod(vshape)} "
                          f"value(s) for the {math.prod(dims)} positions the indices broadcast to "
                          f"{tuple(dims)}; TVM 0.27 reads values flat over those positions, so "
                          f"broadcast values to {tuple(dims)} first")

    def value(V: Tensor, u: Sequence[Expr]) -> Expr:
        return V[unravel_index(ravel_index(u, domain), V.shape)]
    n = len(index)
    if bool(call.attrs.accumulate):
        def add(D: Tensor, *rest: Tensor) -> Tensor:
            Is, V = rest[:n], rest[n]
            S = scatter_add("index_put_add", D.shape, D.dtype, domain, lambda *u: (
                tuple(_wrap(broadcast_read(I, u), D.shape[d]) for d, I in enumerate(Is)),
                value(V, u)))
            return te.compute(D.shape, lambda *p: D[p] + S[p], name="index_put")
        return [data, *index, values], add
    shape = relax.ShapeExpr([tvm.tirx.const(d, "int64") for d in dims])
    winner = relax.op.index_put(relax.op.zeros(data.ty.shape, "int64"), indices,
                                _update_numbers(shape), False)
    return [data, values, winner], lambda D, V, W: _kept(
        "index_put", D, W, lambda *u: value(V, u), domain)


def _broadcast(shapes: Sequence[Sequence[int]]) -> list[int]:
    nd = max(len(s) for s in shapes)
    out = [1] * nd
    for s in shapes:
        for k, d in enumerate(s, nd - len(s)):
            out[k] = d if out[k] == 1 else out[k]
    return out


def _take_backward(call: Any, _: Any) -> tuple[list[Any], Callable[..., Any]]:
    """out = zeros_like(x); out[.., indices[l], ..] += output_grad[.., l, ..] (x: shape only)."""
    axis = call.attrs.axis
    og, x, indices = call.args

    def fte(G: Tensor, X: Tensor, I: Tensor) -> Tensor:
        if axis is None:
            return scatter_add("take_backward", X.shape, X.dtype, G.shape,
                               lambda *u: (unravel_index(I[u], X.shape), G[u]))
        ax = _axis(axis, X.ndim)
        return scatter_add("take_backward", X.shape, X.dtype, G.shape,
                           lambda *u: (_replace(u, ax, I[u[ax]]), G[u]))
    return [og, x, indices], fte


def _layout_transform(call: Any, _: Any) -> tuple[list[Any], Callable[..., Any]]:
    """out[index_map(i)] = x[i]; positions no i reaches (padding) hold pad_value."""
    imap, pad = call.attrs.index_map, call.attrs.pad_value
    x = call.args[0]
    out_shape = [te.const(int(d), "int64") for d in call.ty.shape.values]

    def fte(X: Tensor) -> Tensor:
        def moved(*i: Expr) -> tuple[list[Expr], Expr]:
            env = dict(zip(imap.initial_indices, i))
            return [prim_expr(e, env) for e in imap.final_indices], X[i]
        S = scatter_add("layout_transform", out_shape, X.dtype, X.shape, moved)
        if pad is None:
            return S
        inverse, padded = imap.non_surjective_inverse(list(x.ty.shape.values))
        pv = te.const(pad.value, X.dtype)

        def body(*j: Expr) -> Expr:
            return te.if_then_else(prim_expr(padded, dict(zip(inverse.initial_indices, j))),
                                   pv, S[j])
        return te.compute(tuple(out_shape), body, name="layout_transform_pad")
    return [x], fte


def _slice_scatter(call: Any, _: Any) -> tuple[list[Any], Callable[..., Any]]:
    """src[.., (i - start) / step, ..] where start <= i < end on the step, else x (TVM's te reads
    src at an index clipped to x's extent, past src's end, then masks it; its gradient failed)."""
    start, end, step = (int(a.value) for a in call.args[2:5])

    def fte(X: Tensor, S: Tensor) -> Tensor:
        ax = _axis(call.attrs.axis, X.ndim)
        return te.compute(X.shape, lambda *i: te.if_then_else(
            te.all(i[ax] >= start, i[ax] < end, (i[ax] - start) % step == 0),
            S[_replace(i, ax, (i[ax] - start) // step)], X[i]), name="slice_scatter")
    return list(call.args[:2]), fte


def _ewise_fma(call: Any, _: Any) -> tuple[list[Any], Callable[..., Any]]:
    return list(call.args), lambda a, b, c: te.compute(
        a.shape, lambda *i: a[i] * b[i] + c[i], name="ewise_fma")


def _wrap_param(call: Any, _: Any) -> tuple[list[Any], Callable[..., Any]]:
    return [call.args[0]], lambda x: cast(x, str(call.attrs.dtype))


def _pixel_shuffle(call: Any, _: Any) -> tuple[list[Any], Callable[..., Any]]:
    return [call.args[0]], lambda x: pixel_shuffle(x, int(call.attrs.upscale_factor))


def _attention_var_len(call: Any, _: Any) -> tuple[list[Any], Callable[..., Any]]:
    """Query i of sequence b (seqstart_q[b] <= i < seqstart_q[b+1]) attends to the keys
    seqstart_k[b] <= j < seqstart_k[b+1], masked in local positions as `relax.nn.attention`
    masks (TopLeft: j' <= i'; BottomRight: j' <= i' + |len_q - len_k|); a query in no sequence
    gives 0.  max_seqlen_q/k are kernel hints, not read."""
    (q, k, v, sq, sk), a = call.args[:5], call.attrs
    mask = None if a.causal_mask is None else str(a.causal_mask)
    if a.window_size is not None or mask not in (None, "TopLeft", "BottomRight"):
        raise BridgeError(f"relax.nn.attention_var_len: window_size={a.window_size}, causal_mask="
                          f"{mask!r}: texpr_ad defines window_size=None (TVM 0.27 legalizes no "
                          "sliding window) and causal_mask None, 'TopLeft' or 'BottomRight'")

    def fte(Q: Tensor, K: Tensor, V: Tensor, SQ: Tensor, SK: Tensor) -> Tensor:
        (_, nq, nh, d), nk, zero = Q.shape, K.shape[1], te.const(0, Q.dtype)
        scale = te.const(1 / math.sqrt(int(d)) if a.scale is None else float(a.scale), Q.dtype)

        def same(i: Expr, j: Expr) -> Expr:  # 1 where query i and key j share a sequence
            b = te.reduce_axis((0, SQ.shape[0] - 1), name="b")
            q0, q1, k0, k1 = (T[p].astype(i.dtype) for T in (SQ, SK) for p in (b, b + 1))
            off = te.abs(q1 - q0 - k1 + k0) if mask == "BottomRight" else te.const(0, i.dtype)
            causal = [] if mask is None else [j - k0 <= i - q0 + off]
            ok = te.all(q0 <= i, i < q1, k0 <= j, j < k1, *causal)
            return te.sum(te.if_then_else(ok, te.const(1, Q.dtype), zero), axis=b)
        M = te.compute((nq, nk), same, name="same_sequence")
        r = [te.reduce_axis((0, n), name="r") for n in (d, nk, nk, nk)]
        S = te.compute((nq, nh, nk), lambda i, h, j: te.if_then_else(M[i, j] > 0, te.sum(
            Q[0, i, h, r[0]] * K[0, j, h, r[0]] * scale, axis=r[0]), zero), name="scores")
        top = te.compute((nq, nh), lambda i, h: te.max(S[i, h, r[1]], axis=r[1]), name="top")
        E = te.compute(S.shape, lambda i, h, j: te.if_then_else(
            M[i, j] > 0, te.exp(S[i, h, j] - top[i, h]), zero), name="weights")
        Z = te.compute((nq, nh), lambda i, h: te.sum(E[i, h, r[2]], axis=r[2]), name="total")
        N = te.compute((nq, nh, V.shape[3]), lambda i, h, c: te.sum(
            E[i, h, r[3]] * V[0, r[3], h, c], axis=r[3]), name="weighted")
        return te.compute((1, nq, nh, V.shape[3]), lambda _, i, h, c: te.if_then_else(
            Z[i, h] > 0, N[i, h, c] / Z[i, h], zero), name="attention_var_len")
    return [q, k, v, sq, sk], fte


OWN_TE: dict[str, Define] = {
    "relax.cumsum": _scan(te.sum, "cumsum"),
    "relax.cumprod": _scan(te.prod, "cumprod"),
    "relax.sort": _sort,
    "relax.topk": _topk,
    "relax.median": _median,
    "relax.scatter_elements": _scatter_elements,
    "relax.scatter_nd": _scatter_nd,
    "relax.index_put": _index_put,
    "relax.grad.take_backward": _take_backward,
    "relax.layout_transform": _layout_transform,
    "relax.slice_scatter": _slice_scatter,
    "relax.ewise_fma": _ewise_fma,
    "relax.wrap_param": _wrap_param,
    "relax.nn.pixel_shuffle": _pixel_shuffle,
    "relax.nn.attention_var_len": _attention_var_len,
}

# Ops TVM 0.27 cannot compile at all (no legalization, or one that fails): `legalize` gives
# them one from the te above, so that the forward runs too.
LEGALIZE = ("relax.ewise_fma", "relax.wrap_param", "relax.nn.pixel_shuffle",
            "relax.nn.attention_var_len")
LEVEL_LEGALIZE = 20  # above TVM's own FLegalize


def legalize(bb: Any, call: Any) -> Any:
    """FLegalize from the own te: one `call_tir` of its translation to tvm.te."""
    from .to_tvm import translate
    own = build(call)

    def te_fn(*ts: Any) -> Any:
        res = translate(own.outputs, bind=dict(zip(own.inputs, ts, strict=True)),
                        var_map=own.var_map)
        return res if own.multi else res[0]

    name = str(call.op.name).rsplit(".", 1)[-1]
    return bb.call_te(te_fn, *own.values, primfunc_name_hint=name)


_LEGALIZED: set[str] = set()


def register_legalizations(ops: Sequence[str] = LEGALIZE) -> list[str]:
    """Give the ops of `ops` that are in `LEGALIZE` an FLegalize from their own te (once);
    the ops that have it."""
    import tvm
    for op in set(ops) & set(LEGALIZE) - _LEGALIZED:
        tvm.ir.register_op_attr(op, "FLegalize", legalize, level=LEVEL_LEGALIZE)
        _LEGALIZED.add(op)
    return [op for op in ops if op in _LEGALIZED]


__all__ = ["LEGALIZE", "NO_GRAD", "OWN_TE", "OwnTe", "REASON", "build", "legalize",
           "register_legalizations", "scatter_add"]
