"""JAX functions from te functions (optional extra `jax`).

    import texpr_ad.jax as tj
    rms = tj.custom_op(lambda x, g: ..., name="rms")        # a te function, as ta.custom_op
    y = rms(x, g); jax.grad(lambda x: rms(x, g).sum())(x)  # jax.jit, jax.grad, jax.vmap work

Route: `jax.custom_vjp` whose forward and backward are `jax.pure_callback`s into the core
`ta.custom_op` (Numba CPU kernels, cached per shape, or rank with dynamic=True, and dtype); output
shapes come from the te definition (`CustomOp.define`), so `jax.jit` traces without running kernels.
Host (CPU) arrays only: on an accelerator backend JAX copies the operands to the host for
the callback.  Under `jax.vmap` the callback runs once per batch element (`sequential`).
Residuals (`ta.vjp`): under differentiation the forward callback also returns the
intermediates the backward reads (see `Pullback.explain()`), kept as the rule's residuals with
the inputs and outputs; the backward callback reads them.  Integer inputs get a zero
cotangent (None in the custom_vjp rule); integer outputs are not differentiated (their float0
cotangents are not passed on).  Without `jax_enable_x64`, JAX keeps float64 as float32, so the
kernels see float32, a te function giving a 64-bit output is a JaxOpError, and one with a
64-bit intermediate recomputes it in the backward (`_save`).  First order, reverse mode only:
differentiating the callbacks (jax.hessian, grad of grad: `_callback`) and jax.jvp are
JaxOpErrors.  Python numbers take the dtype of the first array of their kind (weak types).

Arguments: JAX or NumPy arrays and Python numbers (0-dim arrays, as `jnp.asarray` makes
them: runtime values, one kernel for every value), positionally (`arrays.op_arguments`), in a
dtype the kernels compute in (`arrays.op_dtype`; float16/bfloat16: compute in float32), with
concrete shapes (`jax.export`'s symbolic dims are refused), else a TexprError.  Kernels are built while JAX
traces, so what the definition or the planner rejects is raised there, as a TexprError; a
kernel's own run-time error (a gather index out of range) comes out of the callback as JAX's
`JaxRuntimeError` holding the texpr_ad message.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from texpr_ad.api import CustomOp, param_names
from texpr_ad.arrays import KERNEL_DTYPES, OpArgumentError, op_arguments, op_dtype, shape_env
from texpr_ad.errors import TexprError


class JaxOpError(TexprError, ValueError):
    """A texpr_ad JAX op called with symbolic shapes, or whose definition gives outputs JAX
    cannot shape (a symbolic shape; a 64-bit dtype with `jax_enable_x64` off)."""


def _is_float(x: Any) -> bool:
    return np.issubdtype(np.dtype(x.dtype), np.floating)


def _is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, np.generic, bool, int, float))


class JaxOp:
    """A te function as a JAX function with a derived custom_vjp; call it on arrays.

    Returns an array, or a tuple for several outputs.  `op.core` is the NumPy `ta.CustomOp`.
    """

    def __init__(self, fn: Callable[..., Any], name: str, dynamic: bool = False,
                 static_dims: Mapping[str, int | Sequence[int]] | None = None):
        self.name = name
        self.core = CustomOp(fn, name, dynamic=dynamic, static_dims=static_dims)
        self._f = jax.custom_vjp(self._forward)
        self._f.defvjp(self._forward_rule, self._backward_rule)

    def __reduce__(self) -> tuple:
        """Pickled as its te function (by reference) and options; kernels are built again."""
        return JaxOp, (self.core.fn, self.name, self.core.dynamic, self.core.static_dims)

    def __call__(self, *xs: Any, **kwargs: Any) -> Any:
        op_arguments(self.name, xs, kwargs, self._arg_names, _is_array,
                     "JAX array or Python number", "jnp.asarray(value)")
        xs = _weak_cast(tuple(jnp.asarray(x) for x in xs))  # 64-bit types canonical
        for k, x in enumerate(xs):
            if np.dtype(x.dtype).name not in KERNEL_DTYPES:
                op_dtype(self.name, self._label(xs, k), np.dtype(x.dtype).name,
                         "op(x.astype(jnp.float32), ...).astype(x.dtype)")
            if not all(isinstance(d, int) for d in np.shape(x)):
                raise JaxOpError(f"{self.name}: {self._label(xs, k)} has the symbolic shape "
                                 f"{np.shape(x)}; texpr_ad.jax ops take concrete shapes, and run "
                                 f"as host callbacks, which jax.export cannot serialize: call "
                                 f"the function under jax.jit (concrete shapes) instead of "
                                 f"exporting it")
        try:
            outs = self._f(*xs)
        except TypeError as e:  # JAX's error for a custom_vjp under jax.jvp
            if "forward-mode" not in str(e):
                raise
            raise JaxOpError(f"{self.name}: forward-mode differentiation (jax.jvp, jax.jacfwd, "
                             f"the function jax.linearize returns) is not supported: the op has "
                             f"a derived vjp only; use reverse mode (jax.vjp, jax.grad, "
                             f"jax.jacrev)") from None
        return outs[0] if len(outs) == 1 else outs

    def _arg_names(self, n: int) -> list[str]:
        """The te function's parameter names for `n` arrays (for messages: a CustomOpError if
        it takes another count)."""
        return param_names(self.core.fn, n, self.name)

    def _label(self, xs: Sequence[Any], k: int) -> str:
        return f"argument {k} ({self._arg_names(len(xs))[k]!r})"

    def _save(self, xs: Sequence[Any]) -> str:
        """The pullback's `save` (while tracing): "auto", or "none" (recompute them in the
        backward) where a saved intermediate is 64-bit and JAX, with 64-bit types disabled,
        could not hold it (a float64 accumulation in a float32 op)."""
        extra = self._pullback(xs, "auto").extra
        return "none" if any(jax.dtypes.canonicalize_dtype(o.dtype) != np.dtype(o.dtype)
                             for o in extra) else "auto"

    def _pullback(self, xs: Sequence[Any], save: str) -> Any:
        return self.core.pullback([(np.shape(x), np.dtype(x.dtype)) for x in xs], save)

    def _out_specs(self, xs: Sequence[Any], save: str | None = None
                   ) -> tuple[jax.ShapeDtypeStruct, ...]:
        """Shapes of the outputs (then of the saved intermediates of that `save`, if given)."""
        specs_in = [(np.shape(x), np.dtype(x.dtype)) for x in xs]
        _, outs = self.core.define(specs_in)
        n_out = len(outs)
        if save is not None:
            outs = outs + self._pullback(xs, save).extra
        specs = []
        for k, (o, s) in enumerate(zip(outs, self.core.out_shapes(specs_in, outs), strict=True)):
            what = f"{'output' if k < n_out else 'saved intermediate'} {o.name!r}"
            d = np.dtype(o.dtype)
            if not all(isinstance(n, (int, np.integer)) for n in s):
                raise JaxOpError(f"{self.name}: {what} has a symbolic shape; the te "
                                 f"function must give outputs shaped by its inputs' shapes")
            if jax.dtypes.canonicalize_dtype(d) != d:
                raise JaxOpError(f"{self.name}: {what} is {d}, but JAX has 64-bit types disabled; "
                                 f"enable them (jax.config.update('jax_enable_x64', True)) or make "
                                 f"the te function compute in 32 bits (float32, int32)")
            specs.append(jax.ShapeDtypeStruct(tuple(map(int, s)), d))
        return tuple(specs)

    def _forward(self, *xs: Any) -> tuple[Any, ...]:
        specs = self._out_specs(xs)
        self.core._instance(xs)  # built while tracing: the planner's errors are TexprErrors here

        def host(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
            res = self.core(*map(np.asarray, arrays))  # the callback may get jax Arrays
            return res if isinstance(res, tuple) else (res,)
        return self._callback(host, specs, *xs)

    def _callback(self, host: Callable[..., Any], specs: Any, *xs: Any) -> Any:
        """`jax.pure_callback`, whose derivative (second order) is a clear JaxOpError."""
        f = jax.custom_jvp(lambda *a: jax.pure_callback(host, specs, *a, vmap_method="sequential"))
        f.defjvp(lambda *_: _raise(JaxOpError(
            f"{self.name}: derivatives of second order (jax.hessian, grad of grad) are not "
            f"supported: the op's vjp runs as a host callback, which JAX cannot differentiate; "
            f"differentiate once, or use texpr_ad.torch (double backward derived)")))
        return f(*xs)

    def _forward_rule(self, *xs: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """The outputs, and as residuals the inputs, outputs and saved intermediates."""
        p = self._pullback(xs, save := self._save(xs))
        n = len(p.outputs)
        p.forward_kernel  # built while tracing (as in _forward)

        def host(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
            return tuple(self._pullback(arrays, save).forward_kernel(*map(np.asarray, arrays)))

        ys = self._callback(host, self._out_specs(xs, save), *xs)
        return tuple(ys[:n]), (xs, tuple(ys))

    def _backward_rule(self, saved: tuple[Any, ...], gs: tuple[Any, ...]) -> tuple[Any, ...]:
        xs, ys = saved
        floats = [_is_float(x) for x in xs]
        specs = tuple(jax.ShapeDtypeStruct(np.shape(x), x.dtype) for x, f in zip(xs, floats) if f)
        p = self._pullback(xs, save := self._save(xs))
        p.backward_kernel  # built while tracing (as in _forward)
        live = [k for k, o in enumerate(p.outputs) if _is_float(o)]  # integer ones get float0
        nx, ng, no = len(xs), len(live), len(p.outputs)

        def host(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
            arrays = tuple(map(np.asarray, arrays))
            ins, given, saved = arrays[:nx], arrays[nx:nx + ng], arrays[nx + ng:]
            p = self._pullback(ins, save)
            heads = [np.zeros(y.shape, o.dtype) for y, o in zip(saved, p.outputs)]
            for k, g in zip(live, given, strict=True):
                heads[k] = g
            res = p.residuals(ins, saved[:no], saved[no:])
            env = shape_env(p.inputs, [a.shape for a in ins])  # dynamic=True: the symbolic dims
            got = p.backward(res, *self.core._heads(heads, p.outputs, env))
            return tuple(np.zeros_like(x) if r is None else r
                         for r, x, f in zip(got, ins, floats, strict=True) if f)

        grads = iter(self._callback(host, specs, *xs, *[gs[k] for k in live], *ys) if specs else ())
        return tuple(next(grads) if f else None for f in floats)


def _raise(e: Exception) -> Any:
    raise e


def _weak_cast(xs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Weakly typed numbers (Python floats, ints) in the dtype of the first other array of their
    kind, as JAX promotes them (`x * 0.5` float32, `idx + 1` int32 with `jax_enable_x64` on)."""
    kinds = [np.dtype(x.dtype).kind if jax.typeof(x).weak_type else None for x in xs]
    to: dict[str, Any] = {}
    for x, k in zip(xs, kinds):
        if k is None:
            to.setdefault(np.dtype(x.dtype).kind, x.dtype)
    return tuple(x.astype(to[k]) if k in ("f", "i") and k in to else x for x, k in zip(xs, kinds))


def custom_op(fn: Callable[..., Any], name: str = "custom_op", dynamic: bool = False,
              static_dims: Mapping[str, int | Sequence[int]] | None = None) -> JaxOp:
    """Turn a te function (placeholders in, te tensor or list of them out; see `ta.custom_op`)
    into a JAX function with a derived vjp (`jax.grad`, `jax.jit` and `jax.vmap` work);
    `dynamic=True` builds kernels per rank and dtype, not per shape (`static_dims` pins dims)."""
    return JaxOp(fn, name, dynamic, static_dims)


__all__ = ["JaxOp", "JaxOpError", "OpArgumentError", "custom_op"]
