"""The convenience path: `custom_op` builds and caches forward and backward kernels per signature."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import te
from .deriv import grad
from .te import dtype as dt
from .te.tensor import Tensor


def build(outputs: Sequence[Tensor], inputs: Sequence[Tensor], target: str = "cpu", **kw: Any) -> Any:
    """Compile `outputs` as a function of the placeholders `inputs` (see texpr_ad.kernels.build)."""
    from .kernels import build as _build
    return _build(list(outputs), list(inputs), target=target, **kw)


class CustomOp:
    """An operator defined by a te function; call it on arrays, `.vjp(g, *arrays)` for gradients."""

    def __init__(self, fn: Callable[..., Any], name: str, target: str = "cpu"):
        self.fn, self.name, self.target = fn, name, target
        self._cache: dict[tuple, tuple] = {}

    def _signature(self, arrays: Sequence[np.ndarray]) -> tuple:
        return tuple((a.shape, str(a.dtype)) for a in arrays)

    def _instance(self, arrays: Sequence[np.ndarray]) -> tuple:
        key = self._signature(arrays)
        if key not in self._cache:
            names = list(getattr(self.fn, "__code__", None).co_varnames[: len(arrays)]) \
                if hasattr(self.fn, "__code__") else [f"x{k}" for k in range(len(arrays))]
            ins = [te.placeholder(a.shape, dt.check(a.dtype), name=n) for a, n in zip(arrays, names, strict=True)]
            out = self.fn(*ins)
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            self._cache[key] = (ins, outs, build(outs, ins, self.target), None)
        return self._cache[key]

    def __call__(self, *arrays: Any) -> Any:
        arrs = [np.asarray(a) for a in arrays]
        ins, outs, fwd, _ = self._instance(arrs)
        res = fwd(*arrs)
        return res[0] if len(outs) == 1 else tuple(res)

    def vjp(self, g: Any, *arrays: Any) -> tuple[np.ndarray | None, ...]:
        """Gradients of <g, op(*arrays)> w.r.t. each array (None for integer inputs)."""
        arrs = [np.asarray(a) for a in arrays]
        ins, outs, fwd, bwd = self._instance(arrs)
        gs = list(g) if isinstance(g, (list, tuple)) else [g]
        if bwd is None:
            heads = [te.placeholder(o.shape, o.dtype, name=f"d{o.name}") for o in outs]
            adj = grad(outs, ins, head=heads)
            live = [a for a in adj if a is not None]
            bwd = (heads, adj, build(live, ins + heads, self.target)) if live else (heads, adj, None)
            key = self._signature(arrs)
            self._cache[key] = (ins, outs, fwd, bwd)
        heads, adj, kern = bwd
        res = iter(kern(*arrs, *[np.asarray(x, dtype=o.dtype) for x, o in zip(gs, outs, strict=True)])) \
            if kern is not None else iter(())
        return tuple(None if a is None else next(res) for a in adj)


def custom_op(fn: Callable[..., Any], name: str = "custom_op", target: str = "cpu") -> CustomOp:
    """Wrap a te function of placeholders as an operator on NumPy arrays with a derived vjp."""
    return CustomOp(fn, name, target)
