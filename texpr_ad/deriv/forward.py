"""Forward mode: `jvp(outputs, inputs, tangents)` builds tangent tensors stage by stage.

Needs no index inversion: the tangent of `Y[i] = body(i, r)` is
`dY[i] = sum_reads d body / d X[g] * dX[g(i, r)]`, read at the same indices.
"""
from __future__ import annotations

from typing import Sequence

from .. import te
from ..te import dtype as dt
from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce, const
from ..te.ops import Op
from ..te.tensor import ComputeOp, PlaceholderOp, ScatterOp, ScatterUpdate, Tensor
from ..te.visit import substitute
from .adjoint import check_tensors, zeros_like
from .errors import GradientError, NotDifferentiableError
from .reducers import linearize
from .rules import PARTIALS


def _tangent(e: Expr, tan: dict[Tensor, Tensor], where: str) -> Expr | None:
    """The directional derivative of scalar expression `e` (None when it is exactly zero)."""
    match e:
        case Read(tensor=t) if t in tan and dt.is_float(e.dtype):
            return Read(tan[t], e.indices, e.dtype)
        case Read() | Const() | IterVar():
            return None
        case Call(op=Op.SELECT, args=(c, a, b)):
            ta, tb = _tangent(a, tan, where), _tangent(b, tan, where)
            if ta is None and tb is None:
                return None
            zero = const(0.0, e.dtype)
            return te.if_then_else(c, zero if ta is None else ta, zero if tb is None else tb)
        case Call(op=op, args=args):
            subs = [_tangent(a, tan, where) for a in args]
            if all(s is None for s in subs):
                return None
            rule = PARTIALS.get(op)
            if rule is None:
                raise NotDifferentiableError(f"{where}: no derivative rule for `{op.name.lower()}`")
            out: Expr | None = None
            for p, s in zip(rule(e), subs, strict=True):
                if p is not None and s is not None:
                    out = p * s if out is None else out + p * s
            return out
        case Reduce():
            raise NotDifferentiableError(f"{where}: nested reduction")
    return None


def _reduction_tangent(body: Reduce, Y: Tensor, data: tuple[IterVar, ...], tan: dict[Tensor, Tensor],
                       where: str) -> Expr | None:
    """The reduction's linearization (`reducers.LINEARIZE`) applied to the tangents:

        dY[i] = sum_{r : src_guards} src_scale(dsrc(i, r)) + [init_guards] init_scale(dinit(i))
    """
    body, lin = linearize(body, Y, data, where)
    ts = _tangent(body.source[0], tan, where)
    ti = _tangent(body.init[0], tan, where) if body.init else None
    parts: list[Expr] = []
    if ts is not None:
        parts.append(te.sum(lin.src_scale(ts), axis=list(body.axis), where=te.all(*lin.src_guards)))
    if ti is not None:
        ti = lin.init_scale(ti)
        parts.append(te.if_then_else(te.all(*lin.init_guards), ti, const(0.0, ti.dtype))
                     if lin.init_guards else ti)
    return parts[0] + parts[1] if len(parts) == 2 else parts[0] if parts else None


def _stage_tangents(op: ComputeOp | ScatterOp, outs: dict[int, Tensor], tan: dict[Tensor, Tensor]
                    ) -> dict[int, Tensor]:
    where = f"stage {op.name!r}"
    if isinstance(op, ScatterOp):
        ups = [ScatterUpdate(u.index, v, u.condition) for u in op.updates
               if (v := _tangent(u.value, tan, where)) is not None]
        if not ups:
            return {}
        new = ScatterOp.of(f"{op.name}_tan", op.shape, op.dtype, op.axis, ups)
        return {0: Tensor(new, 0, new.shape, new.dtype)}
    result: dict[int, Tensor] = {}
    data = op.axis
    for k, body in enumerate(op.body):
        Y = outs.get(k)
        if Y is None or not dt.is_float(body.dtype):
            continue
        t = (_reduction_tangent(body, Y, data, tan, where) if isinstance(body, Reduce)
             else _tangent(body, tan, where))
        if t is None:
            continue

        def f(*i: IterVar, t: Expr = t) -> Expr:
            return substitute(t, dict(zip(data, i, strict=True))).astype(Y.dtype)

        f.axis_names = [a.name for a in data]  # type: ignore[attr-defined]
        result[k] = te.compute(Y.shape, f, name=f"{Y.name}_tan", tag="tangent")
    return result


def jvp(outputs: Tensor | Sequence[Tensor], inputs: Sequence[Tensor],
        tangents: Sequence[Tensor]) -> list[Tensor]:
    """Tangents of `outputs` given tangent tensors for `inputs` (same shapes and dtypes)."""
    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    if isinstance(inputs, Tensor) or isinstance(tangents, Tensor):
        raise GradientError("inputs and tangents must be lists of te tensors; wrap single ones as [x]")
    inputs, tangents = list(inputs), list(tangents)
    for xs, what in ((outs, "outputs"), (inputs, "inputs"), (tangents, "tangents")):
        check_tensors(xs, what)
    if len(inputs) != len(tangents):
        raise GradientError(f"got {len(tangents)} tangents for {len(inputs)} inputs; pass one per input")
    tan: dict[Tensor, Tensor] = {}
    for x, t in zip(inputs, tangents, strict=True):
        if tuple(map(str, x.shape)) != tuple(map(str, t.shape)) or x.dtype != t.dtype:
            raise GradientError(f"tangent {t.name!r} must match input {x.name!r}: shape "
                                f"{te.tensor.shape_str(x.shape)} dtype {x.dtype}")
        tan[x] = t
    order = te.topo_order(outs)
    groups: dict[int, list[Tensor]] = {}
    for t in order:
        groups.setdefault(id(t.op), []).append(t)
    for group in groups.values():
        op = group[0].op
        if isinstance(op, PlaceholderOp) or not any(x in tan for x in op.inputs):
            continue
        new = _stage_tangents(op, {t.value_index: t for t in group}, tan)
        for t in group:
            if t.value_index in new:
                tan[t] = new[t.value_index]
    return [tan[o] if o in tan else zeros_like(o, name=f"{o.name}_tan") for o in outs]


