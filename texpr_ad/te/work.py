"""Work accounting: the iteration count of a tensor DAG's loop nests (deterministic, no timing).

Each stage counts one iteration per output point plus one per reduction step
(reduce axes with data-dependent bounds are counted exactly); a scatter
counts its domain.  Placeholders cost nothing.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from .dag import topo_order
from .expr import Const, Expr, IterVar, Var
from .interp import domain_mask
from .tensor import ComputeOp, ScatterOp, Tensor


def _count(axes: Sequence[IterVar], reduce_axes: Sequence[IterVar], env: dict[Expr, int]) -> int:
    all_axes = list(axes) + list(reduce_axes)
    if all(isinstance(a.lo, Const) and isinstance(a.extent, Const) for a in all_axes):
        n_data = int(np.prod([max(a.extent.value, 0) for a in axes]))  # type: ignore[attr-defined]
        n_red = int(np.prod([max(a.extent.value, 0) for a in reduce_axes]))  # type: ignore[attr-defined]
        return n_data * max(n_red, 1) if reduce_axes else n_data
    mask = domain_mask(all_axes, env)
    if not reduce_axes:
        return int(mask.sum())
    per_point = mask.reshape(mask.shape[: len(axes)] + (-1,)).sum(axis=-1)
    return int(np.maximum(per_point, 1).sum())


def work(tensors: Sequence[Tensor], var_values: Mapping[Var, int] | None = None) -> int:
    """Total loop iterations to compute `tensors` from their placeholders.

    Symbolic dims must be given in `var_values`.
    """
    env: dict[Expr, int] = {v: n for v, n in (var_values or {}).items()}
    total, seen = 0, set()
    for t in topo_order(list(tensors)):
        op = t.op
        if id(op) in seen:
            continue
        seen.add(id(op))
        if isinstance(op, ComputeOp):
            total += _count(op.axis, list(op.all_reduce_axes), env)
        elif isinstance(op, ScatterOp):
            total += _count(op.axis, [], env)
    return total


