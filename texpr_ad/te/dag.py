"""Tensor-DAG utilities: topological order, placeholders and input replacement."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from .tensor import Tensor


def topo_order(outputs: Iterable[Tensor]) -> list[Tensor]:
    """Every tensor reachable from `outputs`, producers before consumers, deterministic."""
    order: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor) -> None:
        stack: list[tuple[Tensor, bool]] = [(t, False)]
        while stack:
            x, done = stack.pop()
            if done:
                order.append(x)
                continue
            if id(x) in seen:
                continue
            seen.add(id(x))
            stack.append((x, True))
            for s in reversed(_siblings_and_inputs(x)):
                if id(s) not in seen:
                    stack.append((s, False))

    for t in outputs:
        visit(t)
    return order


def _siblings_and_inputs(t: Tensor) -> list[Tensor]:
    return list(t.op.inputs)


def placeholders(outputs: Iterable[Tensor]) -> list[Tensor]:
    from .tensor import PlaceholderOp
    return [t for t in topo_order(outputs) if isinstance(t.op, PlaceholderOp)]


def replace_inputs(outputs: Iterable[Tensor], mapping: Mapping[Tensor, Tensor]) -> list[Tensor]:
    """`outputs` rebuilt with every tensor in `mapping` replaced by its image.

    Stages that (transitively) read a replaced tensor are cloned with their
    reads retargeted (one clone per operation, so multi-output stages stay one
    stage); stages that do not are shared with the original DAG.  A replacement
    must have the dtype and rank of the tensor it replaces, and equal constant
    dims; the shapes of cloned stages are kept as they are.

        x2 = te.placeholder(x.shape, x.dtype, "x2")
        (y2,) = replace_inputs([y], {x: x2})   # y2 computes y from x2
    """
    from .expr import Expr, Read, Reduce
    from .tensor import ComputeOp, ScatterOp
    from .visit import rebind_bounds, substitute, transform

    new: dict[Tensor, Tensor] = {}
    for old, img in mapping.items():
        _check_replacement(old, img)
        new[old] = img
    outputs = list(outputs)
    clones: dict[int, Any] = {}  # id(old op) -> cloned op
    images: dict[tuple[int, int], Tensor] = {}  # (id(old op), value_index) -> new tensor

    def fn(x: Expr) -> Expr | None:
        if isinstance(x, Read) and x.tensor in new:
            return Read(new[x.tensor], x.indices, x.dtype)
        if isinstance(x, Reduce):  # reads in its axes' bounds (`reduce_axis((0, L[i]))`)
            return rebind_bounds(x, lambda b, axes: substitute(transform(b, fn), axes))
        return None

    for t in topo_order(outputs):
        if t in new:
            continue
        op = t.op
        if id(op) not in clones:
            if not any(s in new for s in op.inputs):
                continue  # untouched: shared with the original DAG
            match op:
                case ComputeOp():
                    clones[id(op)] = ComputeOp(op.name, op.axis,
                                               tuple(transform(b, fn) for b in op.body),
                                               op.tag, dict(op.attrs))
                case ScatterOp():
                    clones[id(op)] = _clone_scatter(op, lambda e: transform(e, fn))
                case _:
                    raise TypeError(f"replace_inputs: cannot clone stage {t.name!r} "
                                    f"({type(op).__name__})")
        key = (id(op), t.value_index)
        if key not in images:
            images[key] = Tensor(clones[id(op)], t.value_index, t.shape, t.dtype)
        new[t] = images[key]
    return [new.get(t, t) for t in outputs]


def _clone_scatter(op: Any, fn: Any) -> Any:
    """The scatter `op` with `fn` applied to its updates and to its domain's bounds (new axes
    where a bound changes: a ragged domain `k < L[i]` reading a replaced L)."""
    from .expr import IterVar
    from .tensor import ScatterOp
    from .visit import substitute
    moved: dict[Any, Any] = {}
    for a in op.axis:
        lo, ext = (substitute(fn(b), moved) for b in (a.lo, a.extent))
        if lo is not a.lo or ext is not a.extent:
            moved[a] = IterVar(a.name, lo, ext, a.kind)
    out = op.map(lambda e: substitute(fn(e), moved))
    axes = tuple(moved.get(a, a) for a in op.axis)
    return out if not moved else ScatterOp.of(out.name, out.shape, out.dtype, axes, out.updates)


def _check_replacement(old: Tensor, img: Tensor) -> None:
    from .expr import Const
    if not isinstance(old, Tensor) or not isinstance(img, Tensor):
        raise TypeError(f"replace_inputs: mapping must be Tensor -> Tensor, got {old!r} -> {img!r}")
    same = old.dtype == img.dtype and old.ndim == img.ndim and all(
        not (isinstance(a, Const) and isinstance(b, Const)) or a.value == b.value
        for a, b in zip(old.shape, img.shape, strict=True))
    if not same:
        raise ValueError(f"replace_inputs: {img!r} cannot replace {old!r}; the replacement needs "
                         "the same dtype, rank and constant dims")


def cse(outputs: Iterable[Tensor]) -> list[Tensor]:
    """`outputs` with structurally identical single-output compute stages merged.

    Two stages are identical when their shapes and bodies agree up to the names of their
    axes (data axes by position, reduction axes by order of appearance), reading the same
    tensors.  Readers of a duplicate read the first copy instead; an output is never
    replaced (where an intermediate duplicates an output, the output is the one kept).
    Adjoints often hold such twins: `sum_n head` is both `dbeta` and a factor of `dmean`.
    """
    from .expr import Read
    from .tensor import ComputeOp
    from .visit import transform

    outs = list(outputs)
    is_out = {id(t) for t in outs}
    rep: dict[Tensor, Tensor] = {}
    kept: dict[Any, Tensor] = {}

    def image(t: Tensor) -> Tensor:
        while t in rep:
            t = rep[t]
        return t

    for t in topo_order(outs):
        op = t.op
        if not isinstance(op, ComputeOp) or len(op.body) != 1:
            continue
        body = transform(op.body[0], lambda x: Read(image(x.tensor), x.indices, x.dtype)
                         if isinstance(x, Read) and x.tensor in rep else None)
        key = (t.dtype, _canonical(op.axis, body))
        first = kept.get(key)
        if first is None:
            kept[key] = t
        elif id(t) not in is_out:
            rep[t] = first
        elif id(first) not in is_out:
            rep[first] = kept[key] = t
    rep = {old: image(old) for old in rep}
    return replace_inputs(outs, rep) if rep else outs


def _canonical(axes: Any, body: Any) -> tuple:
    """A hashable key of a compute body up to the names of its axes: the printed body with data
    axes renamed by position and reduction axes by order, the reduction axes' bounds (the
    printed body names an axis, not its range), and the identities of the tensors read
    (printed names can collide)."""
    from .expr import IterVar, Reduce
    from .printer import expr_str
    from .visit import reads_in, substitute, transform, walk

    n = [0]

    def rename_reduce(x: Any) -> Any:
        if not isinstance(x, Reduce):
            return None
        amap = {}
        for a in x.axis:
            amap[a] = IterVar(f"_r{n[0]}", a.lo, a.extent, a.kind)
            n[0] += 1
        inner = Reduce(x.combiner, tuple(transform(s, rename_reduce) for s in x.source), x.axis,
                       transform(x.condition, rename_reduce), x.value_index, x.dtype,
                       tuple(transform(i, rename_reduce) for i in x.init))
        return Reduce(inner.combiner, tuple(substitute(s, amap) for s in inner.source),
                      tuple(amap[a] for a in x.axis), substitute(inner.condition, amap),
                      inner.value_index, inner.dtype, tuple(substitute(i, amap) for i in inner.init))

    data = {a: IterVar(f"_d{k}", a.lo, a.extent, a.kind) for k, a in enumerate(axes)}
    canon = substitute(transform(body, rename_reduce), data)
    bounds = tuple((a.name, expr_str(a.lo), expr_str(a.extent))
                   for x in walk(canon) if isinstance(x, Reduce) for a in x.axis)
    return (expr_str(canon), tuple(expr_str(a.extent) for a in axes), bounds,
            tuple(id(x.tensor) for x in reads_in([canon])))


def add_batch_axis(outputs: Iterable[Tensor], batched: Mapping[Tensor, Tensor]) -> list[Tensor]:
    """`outputs` mapped over a leading batch axis (what `torch.vmap` of a te function is: one
    batched kernel, not a loop).

    `batched` maps placeholders to their batched images (shape `(B, *shape)`, same dtype).
    Every stage that (transitively) reads one gets a leading axis over B and reads batched
    tensors at it; the others are shared with the original DAG.  Returns each output's image
    (batched, or the output itself when it reads no batched tensor)."""
    from .expr import Expr, IterVar, Read, Reduce, const
    from .tensor import ComputeOp, ScatterOp, ScatterUpdate
    from .visit import rebind_bounds, substitute, transform

    if not batched:
        return list(outputs)
    new: dict[Tensor, Tensor] = dict(batched)
    size = next(iter(batched.values())).shape[0]
    images: dict[tuple[int, int], Tensor] = {}
    clones: dict[int, Any] = {}

    def batch_stage(op: Any) -> Any:
        b = IterVar("b", const(0), size, "data")

        def fn(x: Expr) -> Expr | None:
            if isinstance(x, Read) and x.tensor in new:
                return Read(new[x.tensor], (b, *x.indices), x.dtype)
            if isinstance(x, Reduce):  # reads in its axes' bounds
                return rebind_bounds(x, lambda bd, axes: substitute(transform(bd, fn), axes))
            return None

        def f(e: Expr) -> Expr:
            return transform(e, fn)
        if isinstance(op, ComputeOp):
            return ComputeOp(op.name, (b, *op.axis), tuple(f(e) for e in op.body), op.tag,
                             dict(op.attrs))
        if isinstance(op, ScatterOp):
            moved = {a: IterVar(a.name, f(a.lo), f(a.extent), a.kind) for a in op.axis}
            ups = [ScatterUpdate((b, *(substitute(f(i), moved) for i in u.index)),
                                 substitute(f(u.value), moved), substitute(f(u.condition), moved))
                   for u in op.updates]
            return ScatterOp.of(op.name, (size, *op.shape), op.dtype,
                                (b, *(moved[a] for a in op.axis)), ups)
        raise TypeError(f"add_batch_axis: cannot batch stage {op.name!r} ({type(op).__name__})")

    outputs = list(outputs)
    for t in topo_order(outputs):
        if t in new or not any(s in new for s in t.op.inputs):
            continue  # a batched placeholder, or a stage shared with the original DAG
        if id(t.op) not in clones:
            clones[id(t.op)] = batch_stage(t.op)
        key = (id(t.op), t.value_index)
        if key not in images:
            images[key] = Tensor(clones[id(t.op)], t.value_index, (size, *t.shape), t.dtype)
        new[t] = images[key]
    return [new.get(t, t) for t in outputs]
