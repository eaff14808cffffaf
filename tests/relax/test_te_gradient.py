"""te_gradient (TVM's removed te.gradient) on the kinds of cases of TVM's old te-autodiff tests:
built with te.create_prim_func + tvm.compile, checked against float64 central differences of
TVM's own forward, with no Jacobian-sized buffer in the lowered code when a head is given."""
from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from tvm import te as tte, tirx, topi  # noqa: E402

import itertools  # noqa: E402

import texpr_ad as ta  # noqa: E402
from texpr_ad.relax_bridge import from_tvm, te_gradient  # noqa: E402
from tir_work import tir_work  # noqa: E402

SEED = 5150
RNG = np.random.default_rng(SEED)
F = "float64"


def _shape(t):
    return [int(s) for s in t.shape]


def _run(outs, ins, arrays):
    f = tvm.compile(tte.create_prim_func([*ins, *outs]), target="llvm")
    res = [tvm.runtime.tensor(np.zeros(_shape(o), F)) for o in outs]
    f(*[tvm.runtime.tensor(a) for a in arrays], *res)
    return [r.numpy() for r in res], f


def _prod_reducer():
    return tte.comm_reducer(lambda x, y: x * y, lambda t: tirx.const(1, t), name="prod")


def _cases():
    A, B = tte.placeholder((4, 4), F, name="A"), tte.placeholder((4, 4), F, name="B")
    k = tte.reduce_axis((0, 4), "k")
    X = tte.placeholder((1, 2, 7, 7), F, name="X")
    W = tte.placeholder((3, 2, 3, 3), F, name="W")
    W1 = tte.placeholder((3, 2, 1, 1), F, name="W1")
    V = tte.placeholder((6,), F, name="V")
    idx = tte.placeholder((3,), "int64", name="idx")
    return {
        "elementwise": (tte.compute((4, 4), lambda i, j: tirx.exp(A[i, j]) * B[j, i] + A[i, j] / (1.5 + B[i, j] * B[i, j])), [A, B]),
        "sum": (tte.compute((4,), lambda i: tte.sum(A[i, k] * B[k, i], axis=k)), [A, B]),
        "max": (tte.compute((4,), lambda i: tte.max(A[k, i] + B[i, k], axis=k)), [A, B]),
        "custom_reducer_prod": (tte.compute((4, 4), lambda i, j: _prod_reducer()(A[i, k] + A[k, i], axis=k)), [A]),
        "tensordot": (topi.tensordot(tte.compute((6,), lambda i: V[i] + V[5 - i]),
                                     tte.compute((6,), lambda i: V[i] * V[5 - i]), 1), [V]),
        "conv2d_strided_dilated": (topi.nn.conv2d_nchw(X, W, 2, 1, 2), [X, W]),
        "pool_max_strided": (topi.nn.pool2d(X, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "max"), [X]),
        "pool_avg_dilated": (topi.nn.pool2d(X, (2, 2), (2, 2), (2, 2), (0, 0, 0, 0), "avg"), [X]),
        # gated gathers (issue #29): no tap unless gcd(stride, dilation) | j + pad, or 1x1 taps
        "conv2d_s3_d3_k1": (topi.nn.conv2d_nchw(X, W1, 3, 0, 3), [X, W1]),
        "conv2d_s3_d2_k1": (topi.nn.conv2d_nchw(X, W1, 3, 0, 2), [X, W1]),  # windows often empty
        "pool_avg_s3_d3": (topi.nn.pool2d(X, (2, 2), (3, 3), (3, 3), (1, 1, 1, 1), "avg"), [X]),
        "conv_softmax": (topi.nn.softmax(topi.reshape(topi.nn.conv2d_nchw(X, W, 1, 0, 1), (3, 25))), [X, W]),
        "split_concat": (topi.concatenate([*topi.split(A, 2, axis=1)][::-1], axis=0), [A]),
        "take": (topi.take(A, idx, axis=1), [A, idx]),
    }


NAMES = ["conv2d_s3_d2_k1", "conv2d_s3_d3_k1", "conv2d_strided_dilated", "conv_softmax",
         "custom_reducer_prod", "elementwise", "max", "pool_avg_dilated", "pool_avg_s3_d3",
         "pool_max_strided", "split_concat", "sum", "take", "tensordot"]


def _sample(t):
    if str(t.dtype) == "int64":
        return RNG.integers(0, 4, size=_shape(t)).astype("int64")
    return RNG.normal(size=_shape(t))


@pytest.mark.parametrize("name", NAMES)
def test_adjoints_match_central_differences_without_a_jacobian(name):
    out, ins = _cases()[name]
    H = tte.placeholder(out.shape, F, name="H")
    fl = [x for x in ins if str(x.dtype) == F]
    grads = te_gradient(out, fl, head=H)
    arrays = [_sample(x) for x in ins]
    c = RNG.normal(size=_shape(out))
    got, _ = _run(grads, [*ins, H], [*arrays, c])
    jac_size = int(np.prod(_shape(out))) * max(int(np.prod(_shape(x))) for x in fl)
    pf = tte.create_prim_func([*ins, H, *grads])
    for buf in pf.body.block.alloc_buffers:  # the intermediates of the lowered code
        size = int(np.prod([int(s) for s in buf.shape]))
        assert size < jac_size or size <= max(int(np.prod(_shape(x))) for x in ins), (name, buf.name)
    eps = 1e-6
    for x, g in zip(fl, got):
        k = ins.index(x)
        v = RNG.normal(size=arrays[k].shape)
        hi = _run([out], ins, [a + eps * v if j == k else a for j, a in enumerate(arrays)])[0][0]
        lo = _run([out], ins, [a - eps * v if j == k else a for j, a in enumerate(arrays)])[0][0]
        np.testing.assert_allclose((g * v).sum(), (((hi - lo) / (2 * eps)) * c).sum(), rtol=1e-6,
                                   atol=1e-9, err_msg=f"{name} d/{x.op.name} seed {SEED}")


def test_head_none_is_the_jacobian():
    out, ins = _cases()["sum"]
    J, _ = te_gradient(out, ins)
    assert _shape(J) == _shape(out) + _shape(ins[0])
    a, b = RNG.normal(size=(4, 4)), RNG.normal(size=(4, 4))
    (j,), _ = _run([J], ins, [a, b])
    want = np.zeros((4, 4, 4))
    for i in range(4):
        want[i, i, :] = b[:, i]  # d/dA[i, k] of sum_k A[i, k] B[k, i]
    np.testing.assert_allclose(j, want, rtol=1e-12)


STRIDED = [(op, s, d, k) for op in ("conv2d", "pool_max", "pool_avg")
           for s, d, k in itertools.product((2, 3), (1, 2, 3), (1, 2, 3))]


def _strided(op, s, d, k):
    X = tte.placeholder((2, 8, 12, 12), F, name="X")
    p = d * (k - 1) // 2
    if op == "conv2d":
        W = tte.placeholder((8, 8, k, k), F, name="W")
        return topi.nn.conv2d_nchw(X, W, s, p, d), [X, W]
    return topi.nn.pool2d(X, (k, k), (s, s), (d, d), (p, p, p, p), op[5:]), [X]


@pytest.mark.parametrize("op,s,d,k", STRIDED, ids=[f"{o}-s{s}-d{d}-k{k}" for o, s, d, k in STRIDED])
def test_strided_topi_windows_adjoint_work_is_bounded(op, s, d, k):
    """Issue #29 for TOPI's spellings through the bridge's import: the adjoint's iterations over
    max(the forward's, the gradient's size) stay <= 4 (tests/unit/test_strided_work.py)."""
    out, ins = _strided(op, s, d, k)
    res = from_tvm([out])
    y, xs = res[0], [res.tensor(x) for x in ins]
    head = ta.te.placeholder(y.shape, y.dtype, name="H")
    grads = [g for g in ta.grad(y, xs, head=head) if g is not None]
    ratio = ta.work(grads) / max(ta.work([y]), sum(int(np.prod(_shape(x))) for x in ins))
    print(f"topi {op} stride {s} dilation {d} kernel {k}: work ratio {ratio:.2f}")
    assert ratio <= 4.0, f"topi {op} stride {s} dilation {d} kernel {k}: {ratio:.2f}x"


@pytest.mark.parametrize("op,s,d,k", STRIDED, ids=[f"{o}-s{s}-d{d}-k{k}" for o, s, d, k in STRIDED])
def test_strided_topi_windows_adjoint_tir_work_is_bounded(op, s, d, k):
    """The same bound on the TIR that te_gradient hands TVM (`tir_work`: block executions, each
    loop at its own extent), so TVM's loops visit the exact tap ranges too: a gated axis
    (extent `select(c, E, 0)`) and a window that moves with the output index used to run over
    their largest width under a guard (conv2d stride 3 dilation 3 kernel 3: 16.9x)."""
    out, ins = _strided(op, s, d, k)
    H = tte.placeholder(out.shape, F, name="H")
    adjoint = tir_work(tte.create_prim_func([*ins, H, *te_gradient(out, ins, head=H)]))
    forward = tir_work(tte.create_prim_func([*ins, out]))
    ratio = adjoint / max(forward, sum(int(np.prod(_shape(x))) for x in ins))
    print(f"topi {op} stride {s} dilation {d} kernel {k}: TIR work ratio {ratio:.2f}")
    assert ratio <= 4.0, f"topi {op} stride {s} dilation {d} kernel {k}: TIR {ratio:.2f}x"
