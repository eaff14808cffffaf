"""The JAX side of the bench (optional): each workload in jax.numpy / lax, jitted three ways.

    fwd   jit(f)(*xs)
    step  jit(lambda xs, g: vjp_fn(g) of jax.vjp(f, *float xs))   forward + backward; returns
          the gradients only, as torch.autograd.grad does (returning y too measured 2x slower
          for layer_norm: XLA then fuses less)
    bwd   jit(lambda vjp_fn, g: vjp_fn(g)), vjp_fn (the residuals) computed once beforehand

Every call ends in `block_until_ready`. XLA reads its thread settings when jax is first
imported; bench/__main__.py sets XLA_FLAGS before that (see THREAD_FLAGS).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

# XLA's CPU client: no Eigen thread pool inside ops, two threads for the intra-op pool.
THREAD_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=2"

JaxFn = Callable[..., Any]


def available() -> bool:
    try:
        import jax  # noqa: F401
    except ImportError:
        return False
    return True


def _conv(stride: int) -> Callable[[Sequence[np.ndarray]], JaxFn]:
    def make(_: Sequence[np.ndarray]) -> JaxFn:
        from jax import lax
        return lambda x, w: lax.conv_general_dilated(x, w, (stride, stride), ((1, 1), (1, 1)),
                                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return make


def _ew_chain(_: Sequence[np.ndarray]) -> JaxFn:
    import jax
    import jax.numpy as jnp
    return lambda x, w, b: (jnp.tanh(x * w + b) * jax.nn.sigmoid(x)).sum()


def _softmax(_: Sequence[np.ndarray]) -> JaxFn:
    import jax
    return lambda x: jax.nn.softmax(x, axis=-1)


def _log_softmax_nll(_: Sequence[np.ndarray]) -> JaxFn:
    import jax
    import jax.numpy as jnp
    return lambda x, t: -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(x, -1), t[:, None], 1))


def _dense(_: Sequence[np.ndarray]) -> JaxFn:
    return lambda x, w, b: x @ w.T + b


def _max_pool2d(_: Sequence[np.ndarray]) -> JaxFn:
    from jax import lax
    pad = ((0, 0), (0, 0), (1, 1), (1, 1))
    return lambda x: lax.reduce_window(x, -np.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), pad)


def _avg_pool2d(_: Sequence[np.ndarray]) -> JaxFn:
    from jax import lax
    return lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 1, 2, 2), (1, 1, 2, 2), "VALID") * 0.25


def _norm(axes: tuple[int, ...], bshape: Callable[[tuple[int, ...]], tuple[int, ...]]
          ) -> Callable[[Sequence[np.ndarray]], JaxFn]:
    def make(arrays: Sequence[np.ndarray]) -> JaxFn:
        import jax.numpy as jnp
        shp = bshape(arrays[0].shape)

        def f(x: Any, g: Any, b: Any) -> Any:
            mean = x.mean(axes, keepdims=True)
            var = ((x - mean) ** 2).mean(axes, keepdims=True)
            return (x - mean) / jnp.sqrt(var + 1e-5) * g.reshape(shp) + b.reshape(shp)
        return f
    return make


def _transpose_reshape(arrays: Sequence[np.ndarray]) -> JaxFn:
    a, b, c, d = arrays[0].shape
    return lambda x: x.transpose(0, 2, 1, 3).reshape(a, c, b * d)


JAX_FNS: dict[str, Callable[[Sequence[np.ndarray]], JaxFn]] = {
    "ew_chain": _ew_chain,
    "softmax": _softmax,
    "log_softmax_nll": _log_softmax_nll,
    "dense": _dense,
    "conv2d": _conv(1),
    "conv2d_s2": _conv(2),
    "max_pool2d": _max_pool2d,
    "avg_pool2d": _avg_pool2d,
    "layer_norm": _norm((1,), lambda s: (1, s[1])),
    "batch_norm": _norm((0, 2, 3), lambda s: (1, s[1], 1, 1)),
    "reduce_sum": lambda _: lambda x: x.sum(1),
    "transpose_reshape": _transpose_reshape,
    "take_embedding": lambda _: lambda t, i: t[i],
    "strided_slice": lambda _: lambda x: x[::2, 1::3],
    "batch_matmul": lambda _: lambda x, y: x @ y,
}


def jax_side(name: str, arrays: Sequence[np.ndarray], float_inputs: Sequence[int],
             head: np.ndarray) -> dict[str, Callable[[], Any]] | None:
    """{"fwd", "step", "bwd"} -> zero-argument timed calls, or None where there is no JAX
    translation of `name`."""
    if name not in JAX_FNS:
        return None
    import jax
    f = JAX_FNS[name](arrays)
    xs = [jax.device_put(a) for a in arrays]
    diff = list(float_inputs)

    def of_diff(*ds: Any, rest: Sequence[Any]) -> Any:
        args = list(rest)
        for k, d in zip(diff, ds, strict=True):
            args[k] = d
        return f(*args)

    def pullback(xs_: Sequence[Any]) -> Any:
        return jax.vjp(lambda *ds: of_diff(*ds, rest=xs_), *[xs_[k] for k in diff])

    y0 = jax.jit(f)(*xs)
    g = jax.device_put(head.reshape(y0.shape))
    fwd = jax.jit(f)
    step = jax.jit(lambda xs_, g_: pullback(xs_)[1](g_))
    pb = jax.jit(lambda xs_: pullback(xs_)[1])(xs)
    bwd = jax.jit(lambda pb_, g_: pb_(g_))
    return {"fwd": lambda: jax.block_until_ready(fwd(*xs)),
            "step": lambda: jax.block_until_ready(step(xs, g)),
            "bwd": lambda: jax.block_until_ready(bwd(pb, g))}
