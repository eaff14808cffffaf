"""texpr_ad.jax ops in JAX training code beyond jit/grad/vmap (tests/frontends/test_jax_op.py):
Python-number promotion under jax_enable_x64, forward mode, pickling, dynamic shapes; every
value and gradient against jax.numpy's own autodiff of the same math.  Skipped without jax."""
import pickle

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import texpr_ad as ta  # noqa: E402
import texpr_ad.jax as tj  # noqa: E402
from texpr_ad import te  # noqa: E402


pytestmark = pytest.mark.usefixtures("x64")  # tests/frontends/conftest.py


def _scale_shift(x, s, b):
    return te.compute(x.shape, lambda i, j: x[i, j] * s + b[j], name="y")


def _scale_shift_ref(x, s, b):
    return x * s + b


def _rms_sym(x, g):
    n, d = x.shape  # te.var sizes under dynamic=True
    j = te.reduce_axis((0, d), name="j")
    ms = te.compute((n,), lambda i: te.sum(x[i, j] * x[i, j], axis=j) / d.astype("float64"),
                    name="ms")
    return te.compute((n, d), lambda i, c: x[i, c] * g[c] * te.rsqrt(ms[i] + 1e-6), name="y")


def _rms_ref(x, g):
    return x * g * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6)


def test_a_python_number_takes_the_dtype_of_the_arrays_of_its_kind_as_in_jax():
    """Before: with jax_enable_x64 on, op(x_float32, 0.5, b_float32) returned float64 (the
    Python float became a float64 array), where x * 0.5 + b is float32 in JAX (weak types);
    a float32 model's activations silently turned float64 (and int32 indices + 1, int64)."""
    op = tj.custom_op(_scale_shift, name="scale_shift_weak")
    x = jnp.asarray(np.random.default_rng(0).standard_normal((3, 4)), jnp.float32)
    b = jnp.linspace(-1, 1, 4, dtype=jnp.float32)
    for f in (op, jax.jit(op)):
        y = f(x, 0.5, b)
        ref = _scale_shift_ref(x, 0.5, b)
        assert y.dtype == ref.dtype == jnp.float32
        np.testing.assert_allclose(y, ref, rtol=1e-6)
    loss = lambda f: lambda s, x: jnp.sum(f(x, s, b) ** 2)  # noqa: E731
    ours, theirs = jax.grad(loss(op))(0.5, x), jax.grad(loss(_scale_shift_ref))(0.5, x)
    assert ours.dtype == theirs.dtype
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    y64 = op(x.astype(jnp.float64), 0.5, b.astype(jnp.float64))  # float64 arrays stay float64
    assert y64.dtype == jnp.float64
    shift = tj.custom_op(lambda idx, s: te.compute(idx.shape, lambda i: idx[i] + s, name="y"),
                         name="shift_weak")
    idx = jnp.asarray([1, 2, 3], jnp.int32)
    for f in (shift, jax.jit(shift)):  # a Python int: int32, as idx + 1 (it was int64)
        assert f(idx, 1).dtype == (idx + 1).dtype == jnp.int32
        np.testing.assert_array_equal(f(idx, 1), idx + 1)


def test_forward_mode_is_a_clear_jax_op_error_and_reverse_mode_jacobians_work():
    """Before: jax.jvp / jax.jacfwd of the op failed with JAX's "can't apply forward-mode
    autodiff (jvp) to a custom_vjp function", which names neither the op nor what to use."""
    op = tj.custom_op(_scale_shift, name="scale_shift_fwd")
    r = np.random.default_rng(1)
    x, b = jnp.asarray(r.standard_normal((2, 3))), jnp.asarray(r.standard_normal(3))
    f = lambda x: op(x, 1.5, b)  # noqa: E731
    for call in (lambda: jax.jvp(f, (x,), (jnp.ones_like(x),)), lambda: jax.jacfwd(f)(x),
                 lambda: jax.jit(jax.jacfwd(f))(x)):
        with pytest.raises(tj.JaxOpError, match="scale_shift_fwd: forward-mode.*jax.jacrev"):
            call()
    np.testing.assert_allclose(jax.jacrev(f)(x),
                               jax.jacrev(lambda x: _scale_shift_ref(x, 1.5, b))(x), rtol=1e-12)


def test_an_op_pickles_and_computes_the_same_after_loading():
    """Before: pickle.dumps(op) (a model object holding it, multiprocessing) failed with
    "cannot pickle '_thread._local' object" from inside jax.custom_vjp."""
    op = tj.custom_op(_scale_shift, name="scale_shift_pickle")
    again = pickle.loads(pickle.dumps({"op": op}))["op"]
    x, b = jnp.arange(6.0).reshape(2, 3), jnp.ones(3)
    assert again.name == op.name
    np.testing.assert_allclose(again(x, 2.0, b), _scale_shift_ref(x, 2.0, b))
    np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(again(x, 2.0, b) ** 2))(x),
                               jax.grad(lambda x: jnp.sum(_scale_shift_ref(x, 2.0, b) ** 2))(x))


def test_dynamic_op_reuses_its_kernels_across_batch_sizes_under_jit():
    """Before: tj.custom_op(..., dynamic=True, static_dims=...) was a TypeError (unexpected
    keyword), though docs/frameworks.md describes both for ta.custom_op and the torch op: a
    JAX user retracing a jitted step for every batch size built new kernels every time."""
    op = tj.custom_op(_rms_sym, name="rms_dyn_jax", dynamic=True, static_dims={"g": 0})
    g = jnp.asarray(np.random.default_rng(2).standard_normal(8))
    step = jax.jit(jax.value_and_grad(lambda x, g: jnp.sum(jnp.tanh(op(x, g))), argnums=(0, 1)))
    ref = jax.value_and_grad(lambda x, g: jnp.sum(jnp.tanh(_rms_ref(x, g))), argnums=(0, 1))
    builds = []
    for n in (2, 3, 5):
        x = jnp.asarray(np.random.default_rng(n).standard_normal((n, 8)))
        (v, (gx, gg)), (rv, (rx, rg)) = step(x, g), ref(x, g)
        np.testing.assert_allclose(v, rv, rtol=1e-12)
        np.testing.assert_allclose(gx, rx, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(gg, rg, rtol=1e-10, atol=1e-12)
        builds.append(op.core.builds)
    assert builds[0] == builds[-1] > 0  # the kernels of the first size serve the others


def _gather_twice(x, idx):
    return te.compute(idx.shape, lambda i: x[idx[i]] * 2.0, name="g")


def test_uint8_indices_gather_and_differentiate():
    """Before: a uint8 index array (class labels, token ids) was refused while tracing: "the
    constant -1 does not fit uint8", from the bounds prover's own arithmetic (an upper bound
    `extent - 1 - idx` built in uint8), a constant the user never wrote."""
    op = tj.custom_op(_gather_twice, name="gather_uint8")
    x = jnp.linspace(0.0, 1.0, 300)
    idx = jnp.asarray([255, 0, 7, 255], jnp.uint8)
    np.testing.assert_allclose(op(x, idx), x[idx.astype(jnp.int32)] * 2.0)
    loss = lambda f: lambda x: jnp.sum(f(x, idx) ** 2)  # noqa: E731
    np.testing.assert_allclose(jax.jit(jax.grad(loss(op)))(x),
                               jax.grad(loss(lambda x, i: x[i.astype(jnp.int32)] * 2.0))(x))
    with pytest.raises(jax.errors.JaxRuntimeError, match="out of bounds"):  # checked at run time
        jax.block_until_ready(op(x[:5], idx))


def _sum_in_float64(x):
    k = te.reduce_axis((0, x.shape[0]), name="k")
    s = te.compute((), lambda: te.sum(x[k].astype("float64") * x[k], axis=k), name="s64")
    return te.compute(x.shape, lambda i: x[i] * s[()].astype("float32"), name="y")


def test_a_float64_intermediate_differentiates_with_x64_disabled():
    """Before: with jax_enable_x64 off (JAX's default), a float32 op accumulating in float64
    ran forward but jax.grad of it was a JaxOpError ("saved intermediate 's64' is float64"):
    the float64 residual could not be a JAX array.  Now that op recomputes it in the backward."""
    op = tj.custom_op(_sum_in_float64, name="sum_in_float64")
    with jax.enable_x64(False):
        x = jnp.linspace(-1.0, 2.0, 7, dtype=jnp.float32)
        loss = lambda f: lambda x: jnp.sum(jnp.sin(f(x)))  # noqa: E731
        ref = lambda x: x * jnp.sum(x * x)  # noqa: E731
        np.testing.assert_allclose(op(x), ref(x), rtol=1e-6)
        for grad in (jax.grad(loss(op)), jax.jit(jax.grad(loss(op)))):
            got = grad(x)
            assert got.dtype == jnp.float32
            np.testing.assert_allclose(got, jax.grad(loss(ref))(x), rtol=1e-5, atol=1e-6)


def test_static_dims_naming_no_parameter_or_not_a_mapping_is_a_clear_error():
    """Before: static_dims={"gain": 0} for a parameter named g was silently ignored (the dims
    stayed symbolic: slower kernels, no message), and static_dims=0 was an AttributeError
    ("'int' object has no attribute 'items'") from inside the core."""
    with pytest.raises(ta.CustomOpError, match=r"static_dims names 'gain', not a parameter of its "
                                            r"te function \(x, g\)"):
        tj.custom_op(_rms_sym, name="rms_typo", dynamic=True, static_dims={"gain": 0})
    with pytest.raises(ta.CustomOpError, match="static_dims maps parameter names to dims.*got 0"):
        tj.custom_op(_rms_sym, name="rms_int", dynamic=True, static_dims=0)
    star = tj.custom_op(lambda *xs: te.compute(xs[0].shape, lambda i: xs[0][i] * xs[1][i],
                                               name="y"), name="star", static_dims={"xs1": 0})
    assert star.core.static_dims == {"xs1": (0,)}  # `*xs` placeholders are xs0, xs1, ...
