"""Tensor-DAG utilities: topological order and consumers."""
from __future__ import annotations

from typing import Iterable

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
