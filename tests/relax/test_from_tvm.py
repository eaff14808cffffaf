"""from_tvm: tvm.te (TOPI computes) -> texpr_ad te, TVM's semantics kept; checked against TVM's
own compiled forward, and the translated DAG's gradients against float64 central differences."""
from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from tvm import te as tte, tirx, topi  # noqa: E402

import texpr_ad as ta  # noqa: E402
from texpr_ad import te  # noqa: E402
from texpr_ad.relax_bridge import TranslationError, from_tvm  # noqa: E402
from texpr_ad.relax_bridge.from_tvm import truncdiv, truncmod  # noqa: E402
from texpr_ad.te.ops import Op  # noqa: E402

SEED = 9031
RNG = np.random.default_rng(SEED)


def _ph(shape, dtype="float64", name="A"):
    return tte.placeholder(shape, dtype, name=name)


def _sample(t):
    shape = [int(s) for s in t.shape]
    if str(t.dtype).startswith("int"):
        return RNG.integers(0, 3, size=shape).astype(str(t.dtype))
    return RNG.normal(size=shape).astype(str(t.dtype))


def _tvm_run(out, ins, arrays):
    f = tvm.compile(tte.create_prim_func([*ins, out]), target="llvm")
    o = tvm.runtime.tensor(np.zeros([int(s) for s in out.shape], str(out.dtype)))
    f(*[tvm.runtime.tensor(a) for a in arrays], o)
    return o.numpy()


def _cases():
    A, W, S = _ph((1, 2, 7, 7)), _ph((3, 2, 3, 3), name="W"), _ph((4, 5), name="S")
    I = _ph((3,), "int64", name="I")
    x = _ph((6,), name="x")
    return {
        "conv2d_strided_dilated": (topi.nn.conv2d_nchw(A, W, 2, 1, 2), [A, W]),
        "max_pool_padded": (topi.nn.pool2d(A, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "max"), [A]),
        "adaptive_avg_pool": (topi.nn.adaptive_pool(A, (3, 2), "avg"), [A]),  # index-dependent bounds
        "softmax": (topi.nn.softmax(S), [S]),
        "argmax_tuple_reducer": (topi.argmax(S, axis=1), [S]),
        "take_data_dependent": (topi.take(S, I, axis=1), [S, I]),
        "intrinsics": (tte.compute((6,), lambda i: tirx.tan(x[i] * 0.5) + tirx.sinh(x[i])
                                   + tirx.cosh(x[i]) + tirx.asinh(x[i]) + tirx.atan2(x[i], tirx.const(1.5, "float64"))
                                   + tirx.asin(x[i] * 0.3) + tirx.acos(x[i] * 0.3)
                                   + tirx.atanh(x[i] * 0.3) + tirx.acosh(tirx.abs(x[i]) + 1.5)
                                   + tirx.isnan(x[i]).astype("float64"), name="intr"), [x]),
        "trunc_div_mod_round": (tte.compute((6,), lambda i: (
            tirx.truncdiv(i - 3, 2) * 10 + tirx.truncmod(i - 4, 3) + tirx.truncdiv(7, i - 3 + (i == 3))
        ).astype("float64") + tirx.round(x[i] * 2.5) + tirx.nearbyint(x[i] * 1.5)
            + tirx.Cast("float64", (i ^ 5) & tirx.bitwise_not(i) | (i << 1)), name="tdm"), [x]),
    }


CASES = ["adaptive_avg_pool", "argmax_tuple_reducer", "conv2d_strided_dilated", "intrinsics",
         "max_pool_padded", "softmax", "take_data_dependent", "trunc_div_mod_round"]


@pytest.mark.parametrize("name", CASES)
def test_forward_matches_tvm(name):
    out, ins = _cases()[name]
    res = from_tvm(out, placeholders=ins)
    assert [t.name for t in res.inputs] == [t.op.name for t in ins]
    arrays = [_sample(t) for t in ins]
    (got,) = te.evaluate(res.outputs, dict(zip(res.inputs, arrays)))
    np.testing.assert_allclose(got, _tvm_run(out, ins, arrays), rtol=1e-12, atol=1e-12,
                               err_msg=f"{name} seed {SEED}")


@pytest.mark.parametrize("name", ["conv2d_strided_dilated", "max_pool_padded", "adaptive_avg_pool",
                                  "softmax", "intrinsics"])
def test_gradient_of_translated_dag(name):
    out, ins = _cases()[name]
    res = from_tvm(out, placeholders=ins)
    X, Y = res.inputs[0], res.outputs[0]
    H = te.placeholder(Y.shape, "float64", name="H")
    (g,) = ta.grad(Y, [X], head=H)
    arrays = [_sample(t) for t in ins]
    c, v = RNG.normal(size=[int(s) for s in Y.shape]), RNG.normal(size=arrays[0].shape)
    feed = dict(zip(res.inputs, arrays))
    (ga,) = te.evaluate([g], {**feed, H: c})
    eps = 1e-6
    hi = _tvm_run(out, ins, [arrays[0] + eps * v, *arrays[1:]])
    lo = _tvm_run(out, ins, [arrays[0] - eps * v, *arrays[1:]])
    np.testing.assert_allclose((ga * v).sum(), (((hi - lo) / (2 * eps)) * c).sum(), rtol=1e-6,
                               err_msg=f"{name} seed {SEED}")


def test_symbolic_shape_var_and_reducer_identity():
    n = tirx.Var("n", "int64")
    P = _ph((n, 3), name="P")
    k = tte.reduce_axis((0, n), "k")
    M = tte.compute((3,), lambda j: tte.max(P[k, j], axis=k), name="M")
    res = from_tvm(M, [P])
    (nv,) = res.vars.values()
    assert res.var_map[nv].same_as(n) and res.inputs[0].shape[0] is nv
    red = res[0].op.body[0]
    # the range may be empty (n = 0): TVM's identity, the lowest finite float, is kept as init=
    assert red.combiner.kind == "max" and float(red.init[0].value) == float(np.finfo("float64").min)
    p = RNG.normal(size=(4, 3))
    np.testing.assert_allclose(te.evaluate([res[0]], {res.inputs[0]: p})[0], p.max(0))


def test_truncating_division_rule():
    i = te.compute((15,), lambda i: i, name="probe").op.axis[0]
    assert truncdiv(i, te.const(4)).op is Op.FLOORDIV  # proven non-negative: the solver's floordiv
    assert truncmod(i + 1, te.const(4)).op is Op.FLOORMOD
    for b in (2, 3, -2, -3):
        Y = te.compute((15,), lambda j: truncdiv(j - 7, te.const(b)) * 100 + truncmod(j - 7, te.const(b)),
                       name="t")
        a = np.arange(15) - 7
        want = np.trunc(a / b).astype(int) * 100 + np.fmod(a, b)
        np.testing.assert_array_equal(te.evaluate([Y], {})[0], want)


def test_untranslatable_ops_name_the_op():
    A = _ph((4,), name="A")
    E = tte.extern((4,), [A], lambda ins, outs: tirx.Evaluate(0), name="my_extern", dtype="float64")
    Y = tte.compute((4,), lambda i: E[i] * 2.0, name="Y")
    with pytest.raises(TranslationError, match="my_extern"):
        from_tvm(Y)
    B = _ph((4,), "bfloat16", name="B")
    with pytest.raises(TranslationError, match="bfloat16"):
        from_tvm(tte.compute((4,), lambda i: B[i], name="Z"))
