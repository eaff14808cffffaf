"""`ta.vjp`: gradients read from residuals agree with float64 central differences, with the
recompute-everything backward, and the forward's outputs are the plain forward's."""
import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops import registry
from texpr_ad.pullback import ResidualsError
from texpr_ad.te import dtype as dt
from texpr_ad.testing import grad_error

# operators whose adjoints read saved forward reductions, outputs or tie counts
OPS = ["softmax", "log_softmax", "layer_norm", "batch_norm_train", "rms_norm", "max_pool2d",
       "logsumexp", "std", "prod", "max", "cross_entropy", "scaled_dot_product_attention"]


@pytest.mark.parametrize("name", OPS)
def test_residual_gradients_match_finite_differences(name):
    s = registry.get(name).sample("float64")
    outs = [o for o in s.outputs if dt.is_float(o.dtype)]
    fwd, bwd = ta.vjp(outs, list(s.inputs))
    assert any(d.save for d in fwd.pullback.decisions), fwd.explain()
    ys, res = fwd(*s.arrays)
    want = te.evaluate(outs, dict(zip(s.inputs, s.arrays, strict=True)))
    for y, w in zip(ys, want, strict=True):
        np.testing.assert_allclose(y, w, rtol=1e-10, atol=1e-12)
    rng = np.random.default_rng(0)
    hs = [rng.standard_normal(np.shape(y)) for y in ys]
    grads = bwd(res, *hs)
    claimed = {k: g for k, (g, d) in enumerate(zip(grads, s.differentiable, strict=True))
               if d and g is not None}
    assert claimed

    def loss(xs):
        got = te.evaluate(outs, dict(zip(s.inputs, xs, strict=True)))
        return float(sum(np.vdot(h, y) for h, y in zip(hs, got, strict=True)))

    assert grad_error(loss, list(s.arrays), claimed, 1e-6, 2, rng) < 1e-6
    (none_fwd, none_bwd) = ta.vjp(outs, list(s.inputs), save="none")
    _, none_res = none_fwd(*s.arrays)
    for g, h in zip(grads, none_bwd(none_res, *hs), strict=True):
        if g is not None:
            np.testing.assert_allclose(g, h, rtol=1e-9, atol=1e-12)


def test_backward_checks_its_residuals_and_cotangents():
    x = te.placeholder((3,), "float64", name="x")
    y = te.compute((3,), lambda i: te.exp(x[i]), name="y")
    fwd, bwd = ta.vjp([y], [x])
    (out,), res = fwd(np.zeros(3))
    np.testing.assert_array_equal(bwd(res, np.ones(3))[0], np.ones(3))
    other, _ = ta.vjp([y], [x])
    _, res2 = other(np.zeros(3))
    with pytest.raises(ResidualsError, match="residuals returned by this vjp"):
        bwd(res2, np.ones(3))
    with pytest.raises(ResidualsError, match="1 output"):
        bwd(res)
    with pytest.raises(ta.TexprError, match="dy"):
        bwd(res, np.ones(4))


def test_custom_op_forward_backward_with_residuals():
    def rms(x):
        n, d = x.shape
        j = te.reduce_axis((0, d), name="j")
        ms = te.compute((n,), lambda i: te.sum(x[i, j] * x[i, j], axis=j), name="ms")
        return te.compute((n, d), lambda i, c: x[i, c] * te.rsqrt(ms[i] + 1.0), name="y")
    op = ta.custom_op(rms, "rms")
    a = np.random.default_rng(1).standard_normal((4, 6))
    g = np.random.default_rng(2).standard_normal((4, 6))
    (y,), res = op.forward(a)
    assert "saved ms" in res.names and res.nbytes == 4 * 8
    (ga,) = op.backward(res, g)
    np.testing.assert_allclose(ga, op.vjp(g, a)[0], rtol=1e-12)
    np.testing.assert_allclose(y, op(a))
    with pytest.raises(ta.CustomOpError, match="rms.forward"):
        op.backward(object(), g)


def _softmax(shift: bool, dtype: str = "float32"):
    x = te.placeholder((4, 6), dtype, name="x")
    k1, k2 = te.reduce_axis((0, 6), "k"), te.reduce_axis((0, 6), "k")
    m = te.compute((4,), lambda i: te.max(x[i, k1], axis=k1), name="row_max")
    e = te.compute((4, 6), lambda i, j: te.exp(x[i, j] - m[i]) if shift else te.exp(x[i, j]),
                   name="e")
    s = te.compute((4,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
    return x, te.compute((4, 6), lambda i, j: e[i, j] / s[i], name="y")


def test_softmax_exp_is_rebuilt_from_the_saved_output_and_sum():
    """exp(x - max) is read back as y * sum (no exp, no input stream); float64 gradients match
    central differences and the recompute-everything backward."""
    x, y = _softmax(True, "float64")
    fwd, bwd = ta.vjp([y], [x])
    (d,) = [d for d in fwd.pullback.decisions if d.tensor.name == "e"]
    assert not d.save and d.rebuild is not None and [t.name for t in d.rebuild] == ["y", "row_sum"]
    assert "rebuild   e (4x6)" in fwd.explain()
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 6))
    h = rng.standard_normal((4, 6))
    (ys,), res = fwd(a)
    (g,) = bwd(res, h)
    f0, b0 = ta.vjp([y], [x], save="none")
    (g_none,) = b0(f0(a)[1], h)
    np.testing.assert_allclose(g, g_none, rtol=1e-12, atol=1e-14)

    def loss(xs):
        return float(np.vdot(h, te.evaluate([y], {x: xs[0]})[0]))
    assert grad_error(loss, [a], {0: g}, 1e-6, 2, rng) < 1e-6


def test_rebuilt_exp_falls_back_where_the_sum_overflows():
    """Unshifted softmax whose row sum overflows float32 (three exp(88) terms) while each term
    is finite: y is 0 there and y * sum would be NaN, so that row recomputes exp."""
    x, y = _softmax(False)
    fwd, bwd = ta.vjp([y], [x])
    assert any(d.rebuild for d in fwd.pullback.decisions), fwd.explain()
    a = np.random.default_rng(4).standard_normal((4, 6)).astype(np.float32)
    a[1, :3] = 88.0
    h = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32)
    (ys,), res = fwd(a)
    assert np.isinf(np.exp(a[1].astype(np.float64)).sum().astype(np.float32)) and ys[1].max() == 0
    (g,) = bwd(res, h)
    f0, b0 = ta.vjp([y], [x], save="none")
    (g_none,) = b0(f0(a)[1], h)
    assert np.isfinite(g).all()
    np.testing.assert_allclose(g, g_none, rtol=1e-6, atol=1e-7)


def test_no_rebuild_when_the_sum_is_not_of_the_numerator():
    """y = e / s with s summing a different tensor: |y| is not bounded, nothing is rebuilt."""
    x = te.placeholder((4, 6), "float32", name="x")
    k = te.reduce_axis((0, 6), "k")
    e = te.compute((4, 6), lambda i, j: te.exp(x[i, j]), name="e")
    s = te.compute((4,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="s")
    y = te.compute((4, 6), lambda i, j: e[i, j] / s[i], name="y")
    fwd, _ = ta.vjp([y], [x])
    assert not any(d.rebuild for d in fwd.pullback.decisions), fwd.explain()
