"""JAX functions from te functions (optional extra `jax`).

    import texpr_ad.jax as tj
    rms = tj.custom_op(lambda x, g: ..., name="rms")        # a te function, as ta.custom_op
    y = rms(x, g); jax.grad(lambda x: rms(x, g).sum())(x)  # jax.jit, jax.grad, jax.vmap work

Route: `jax.custom_vjp` whose forward and backward are `jax.pure_callback`s into the core
`ta.custom_op` (Numba CPU kernels, built and cached per shape/dtype signature); output shapes
come from the te definition (`CustomOp.define`), so `jax.jit` traces without running kernels.
Host (CPU) arrays only: on an accelerator backend JAX copies the operands to the host for
the callback.  Under `jax.vmap` the callback runs once per batch element (`sequential`).
Residuals (`ta.vjp`): under differentiation the forward callback also returns the
intermediates the backward reads (see `Pullback.explain()`), kept as the rule's residuals with
the inputs and outputs; the backward callback reads them.  Integer inputs get a zero
cotangent (None in the custom_vjp rule).  Without `jax_enable_x64`, JAX keeps float64 as
float32, so the kernels see float32.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import numpy as np

from texpr_ad.api import CustomOp
from texpr_ad.arrays import static_shape
from texpr_ad.errors import TexprError


class JaxOpError(TexprError, ValueError):
    """A texpr_ad JAX op whose definition gives outputs JAX cannot shape."""


def _is_float(x: Any) -> bool:
    return np.issubdtype(np.dtype(x.dtype), np.floating)


class JaxOp:
    """A te function as a JAX function with a derived custom_vjp; call it on arrays.

    Returns an array, or a tuple for several outputs.  `op.core` is the NumPy `ta.CustomOp`.
    """

    def __init__(self, fn: Callable[..., Any], name: str):
        self.name = name
        self.core = CustomOp(fn, name)
        self._f = jax.custom_vjp(self._forward)
        self._f.defvjp(self._forward_rule, self._backward_rule)

    def __call__(self, *xs: Any) -> Any:
        outs = self._f(*xs)
        return outs[0] if len(outs) == 1 else outs

    def _pullback(self, xs: Sequence[Any]) -> Any:
        return self.core.pullback([(np.shape(x), np.dtype(x.dtype)) for x in xs])

    def _out_specs(self, xs: Sequence[Any], extra: bool = False) -> tuple[jax.ShapeDtypeStruct, ...]:
        """Shapes of the outputs (then of the saved intermediates, with `extra`)."""
        _, outs = self.core.define([(np.shape(x), np.dtype(x.dtype)) for x in xs])
        if extra:
            outs = outs + self._pullback(xs).extra
        specs = []
        for o in outs:
            s = static_shape(o)
            if s is None:
                raise JaxOpError(f"{self.name}: output {o.name!r} has a symbolic shape; the te "
                                 f"function must give outputs shaped by its inputs' shapes")
            specs.append(jax.ShapeDtypeStruct(s, np.dtype(o.dtype)))
        return tuple(specs)

    def _forward(self, *xs: Any) -> tuple[Any, ...]:
        def host(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
            res = self.core(*map(np.asarray, arrays))  # the callback may get jax Arrays
            return res if isinstance(res, tuple) else (res,)
        return jax.pure_callback(host, self._out_specs(xs), *xs, vmap_method="sequential")

    def _forward_rule(self, *xs: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """The outputs, and as residuals the inputs, outputs and saved intermediates."""
        n = len(self._pullback(xs).outputs)

        def host(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
            return tuple(self._pullback(arrays).forward_kernel(*map(np.asarray, arrays)))

        ys = jax.pure_callback(host, self._out_specs(xs, extra=True), *xs,
                               vmap_method="sequential")
        return tuple(ys[:n]), (xs, tuple(ys))

    def _backward_rule(self, saved: tuple[Any, ...], gs: tuple[Any, ...]) -> tuple[Any, ...]:
        xs, ys = saved
        floats = [_is_float(x) for x in xs]
        specs = tuple(jax.ShapeDtypeStruct(np.shape(x), x.dtype) for x, f in zip(xs, floats) if f)
        nx, ng = len(xs), len(gs)

        def host(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
            arrays = tuple(map(np.asarray, arrays))
            ins, heads, outs = arrays[:nx], arrays[nx:nx + ng], arrays[nx + ng:]
            p = self._pullback(ins)
            res = p.residuals(ins, outs[:ng], outs[ng:])
            got = p.backward(res, *self.core._heads(list(heads), p.outputs))
            return tuple(np.zeros_like(x) if r is None else r
                         for r, x, f in zip(got, ins, floats, strict=True) if f)

        grads = iter(jax.pure_callback(host, specs, *xs, *gs, *ys, vmap_method="sequential")
                     if specs else ())
        return tuple(next(grads) if f else None for f in floats)


def custom_op(fn: Callable[..., Any], name: str = "custom_op") -> JaxOp:
    """Turn a te function (placeholders in, te tensor or list of them out; see `ta.custom_op`)
    into a JAX function with a derived vjp (`jax.grad`, `jax.jit` and `jax.vmap` work)."""
    return JaxOp(fn, name)


__all__ = ["JaxOp", "JaxOpError", "custom_op"]
