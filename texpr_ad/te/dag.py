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
    from .expr import Expr, Read
    from .tensor import ComputeOp, ScatterOp
    from .visit import transform

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
                    clones[id(op)] = ScatterOp(
                        op.name, op.shape, op.dtype, op.axis,
                        tuple(transform(i, fn) for i in op.index), transform(op.value, fn),
                        transform(op.condition, fn))
                case _:
                    raise TypeError(f"replace_inputs: cannot clone stage {t.name!r} "
                                    f"({type(op).__name__})")
        key = (id(op), t.value_index)
        if key not in images:
            images[key] = Tensor(clones[id(op)], t.value_index, t.shape, t.dtype)
        new[t] = images[key]
    return [new.get(t, t) for t in outputs]


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
