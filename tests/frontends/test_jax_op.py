"""texpr_ad.jax.custom_op against JAX autodiff of reference implementations: jax.grad, jax.jit,
jax.vmap, several outputs, integer inputs; skipped without jax."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import texpr_ad.jax as tj  # noqa: E402
from texpr_ad import te  # noqa: E402


pytestmark = pytest.mark.usefixtures("x64")  # tests/frontends/conftest.py


def _rms_scale(x, g):
    n, d = x.shape
    j = te.reduce_axis((0, d), name="j")
    ms = te.compute((n,), lambda i: te.sum(x[i, j] * x[i, j], axis=j) / float(d.value), name="ms")
    return te.compute((n, d), lambda i, c: x[i, c] * g[c] * te.rsqrt(ms[i] + 1e-6), name="y")


def _rms_ref(x, g):
    return x * g * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6)


def _args(seed=0):
    r = np.random.default_rng(seed)
    return jnp.asarray(r.standard_normal((5, 8))), jnp.asarray(r.standard_normal(8))


def test_forward_and_grad_match_jax_autodiff_of_the_reference():
    op = tj.custom_op(_rms_scale, name="rms")
    x, g = _args()
    np.testing.assert_allclose(op(x, g), _rms_ref(x, g), rtol=1e-12, atol=1e-12)
    w = jnp.asarray(np.random.default_rng(1).standard_normal((5, 8)))
    loss = lambda f: lambda x, g: jnp.sum(jnp.tanh(f(x, g)) * w)  # noqa: E731
    ours = jax.grad(loss(op), argnums=(0, 1))(x, g)
    theirs = jax.grad(loss(_rms_ref), argnums=(0, 1))(x, g)
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == jnp.float64
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_jit_of_grad_and_vmap():
    op = tj.custom_op(_rms_scale, name="rms_jit")
    x, g = _args(2)
    f = jax.jit(jax.grad(lambda x, g: jnp.sum(op(x, g) ** 2), argnums=1))
    ref = jax.grad(lambda x, g: jnp.sum(_rms_ref(x, g) ** 2), argnums=1)(x, g)
    np.testing.assert_allclose(f(x, g), ref, rtol=1e-10)
    np.testing.assert_allclose(f(x + 1, g), jax.grad(lambda x, g: jnp.sum(_rms_ref(x, g) ** 2),
                                                     argnums=1)(x + 1, g), rtol=1e-10)
    xs = jnp.stack([x, 2 * x])
    np.testing.assert_allclose(jax.vmap(op, in_axes=(0, None))(xs, g),
                               jax.vmap(_rms_ref, in_axes=(0, None))(xs, g), rtol=1e-12)


def test_float32_and_several_outputs():
    def two(x, y):
        s = te.compute(x.shape, lambda i: x[i] * y[i] + te.sin(x[i]), name="s")
        k = te.reduce_axis((0, x.shape[0]), name="k")
        return [s, te.compute((), lambda: te.sum(x[k] * x[k], axis=k), name="t")]
    op = tj.custom_op(two, name="two")
    x = jnp.linspace(-1, 1, 7, dtype=jnp.float32)
    y = jnp.cos(x)
    s, t = op(x, y)
    assert s.dtype == jnp.float32 and t.shape == ()
    gx = jax.grad(lambda x: op(x, y)[1])(x)  # s unused: a zero cotangent
    np.testing.assert_allclose(gx, 2 * x, rtol=1e-6)
    gx, gy = jax.grad(lambda x, y: jnp.sum(op(x, y)[0]) + op(x, y)[1], argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, y + jnp.cos(x) + 2 * x, rtol=1e-5)
    np.testing.assert_allclose(gy, x, rtol=1e-6)


def test_integer_inputs_get_a_zero_cotangent():
    def gather_scale(x, idx):
        return te.compute(idx.shape, lambda i: x[idx[i]] * 2.0, name="g")
    op = tj.custom_op(gather_scale, name="gather")
    x = jnp.arange(5.0)
    idx = jnp.asarray([4, 0, 4, 2])
    gx = jax.jit(jax.grad(lambda x, i: jnp.sum(op(x, i))))(x, idx)
    np.testing.assert_allclose(gx, [2.0, 0, 2, 0, 4])
    gi = jax.grad(lambda x, i: jnp.sum(op(x, i)), argnums=1, allow_int=True)(x, idx)
    assert gi.dtype == jax.dtypes.float0


def test_second_order_is_a_clear_jax_op_error():
    """Before: grad of grad and jax.hessian failed inside JAX with 'Pure callbacks do not
    support JVP. Please use `jax.custom_jvp` ...' (the host callbacks have no derivative),
    which points a user at writing their own rule; first order must keep working."""
    op = tj.custom_op(_rms_scale, name="rms_second")
    x, g = _args(3)
    loss = lambda x: jnp.sum(op(x, g) ** 2)  # noqa: E731
    ref = jax.grad(lambda x: jnp.sum(_rms_ref(x, g) ** 2))(x)
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(x), ref, rtol=1e-10)
    second = [lambda: jax.grad(lambda x: jnp.sum(jax.grad(loss)(x)))(x),
              lambda: jax.hessian(loss)(x[:2]),
              lambda: jax.jit(jax.jacrev(jax.grad(loss)))(x)]
    for f in second:
        with pytest.raises(tj.JaxOpError, match="rms_second: derivatives of second order"):
            f()
