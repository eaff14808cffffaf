"""Code written for tvm.te / TOPI runs on texpr_ad.te by changing the import (no TVM needed).

The computes below are TOPI's own bodies (tvm/topi/nn/pad.py, softmax.py, dense.py and the
classic conv2d_nchw), with `tvm.te`/`tvm.tirx` replaced by `texpr_ad.te`; each is
differentiated and checked against float64 central differences.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import TexprError
from texpr_ad import te

tvm = SimpleNamespace(te=te, tirx=te)  # the only change: `import tvm` -> texpr_ad's te
SEED = 1207
RNG = np.random.default_rng(SEED)


# -- helpers TOPI code uses (topi.utils), unchanged apart from the import ---------------------

def get_const_tuple(in_tuple):
    return tuple(x.value if hasattr(x, "value") else int(x) for x in in_tuple)


def equal_const_int(expr, value):
    return isinstance(expr, int) and expr == value or hasattr(expr, "value") and expr.value == value


# -- TOPI bodies ------------------------------------------------------------------------------

def pad(data, pad_before, pad_after=None, pad_value=0.0, name="PadInput"):
    n = len(data.shape)
    pad_after = pad_after if pad_after else pad_before
    out_shape = tuple(data.shape[i] + pad_before[i] + pad_after[i] for i in range(n))
    pad_value = tvm.tirx.const(pad_value, data.dtype)

    def _pad(*indices):
        not_zero = []
        index_tuple = []
        for i in range(n):
            if equal_const_int(pad_before[i], 0) and equal_const_int(pad_after[i], 0):
                index_tuple.append(indices[i])
            else:
                index_tuple.append(indices[i] - pad_before[i])
                not_zero.append(indices[i] >= pad_before[i])
                not_zero.append(indices[i] < data.shape[i] + pad_before[i])
        if not_zero:
            not_zero = tvm.tirx.all(*not_zero)
            return tvm.tirx.if_then_else(not_zero, data(*index_tuple), pad_value)
        return data(*index_tuple)

    return te.compute(out_shape, _pad, name=name)


def softmax(x, axis=-1):
    shape = x.shape
    if axis < 0:
        axis = len(shape) + axis
    k1 = te.reduce_axis((0, shape[axis]), name="k")
    k2 = te.reduce_axis((0, shape[axis]), name="k")

    def insert_reduce_index(indices, reduce_index):
        return indices[:axis] + (reduce_index,) + indices[axis:]

    def get_non_reduce_indices(indices):
        return tuple([var for (i, var) in enumerate(indices) if i != axis])

    def _compute_max(*indices):
        return tvm.te.max(x[insert_reduce_index(indices, k1)], axis=k1)

    def _compute_exp(max_elem, *indices):
        return te.exp(x[indices] - max_elem[get_non_reduce_indices(indices)])

    def _compute_expsum(exp, *indices):
        return te.sum(exp[insert_reduce_index(indices, k2)], axis=k2)

    def _normalize(exp, expsum, *indices):
        return exp[indices] / expsum[get_non_reduce_indices(indices)]

    reduced_shape = tuple([dim for (i, dim) in enumerate(shape) if i != axis])
    max_elem = te.compute(reduced_shape, _compute_max, name="T_softmax_maxelem")
    exp = te.compute(shape, lambda *indices: _compute_exp(max_elem, *indices), name="T_softmax_exp")
    expsum = te.compute(reduced_shape, lambda *indices: _compute_expsum(exp, *indices),
                        name="T_softmax_expsum")
    return te.compute(shape, lambda *indices: _normalize(exp, expsum, *indices), name="T_softmax_norm")


def dense(data, weight, bias=None, out_dtype=None):
    if out_dtype is None:
        out_dtype = data.dtype
    batch, in_dim = data.shape
    out_dim, red_dim = weight.shape
    assert int(in_dim) == int(red_dim)
    k = te.reduce_axis((0, in_dim), name="k")
    mat = te.compute((batch, out_dim), lambda i, j: te.sum(
        data[i, k].astype(out_dtype) * weight[j, k].astype(out_dtype), axis=k), name="T_dense")
    if bias is not None:
        mat = te.compute((batch, out_dim), lambda i, j: mat[i, j] + bias[j].astype(out_dtype),
                         name="T_add")
    return mat


def conv2d_nchw(Input, Filter, stride, padding, dilation):
    batch, in_channel, in_height, in_width = Input.shape
    num_filter, channel, kernel_h, kernel_w = Filter.shape
    stride_h, stride_w = stride
    dilation_h, dilation_w = dilation
    dilated_kernel_h = (kernel_h - 1) * dilation_h + 1
    dilated_kernel_w = (kernel_w - 1) * dilation_w + 1
    pad_top = pad_left = pad_down = pad_right = padding
    out_channel = num_filter
    out_height = (in_height - dilated_kernel_h + pad_top + pad_down) // stride_h + 1
    out_width = (in_width - dilated_kernel_w + pad_left + pad_right) // stride_w + 1
    temp = pad(Input, [0, 0, pad_top, pad_left], [0, 0, pad_down, pad_right], name="pad_temp")
    rc = te.reduce_axis((0, in_channel), name="rc")
    ry = te.reduce_axis((0, kernel_h), name="ry")
    rx = te.reduce_axis((0, kernel_w), name="rx")
    return te.compute(
        (batch, out_channel, out_height, out_width),
        lambda nn, ff, yy, xx: te.sum(
            temp[nn, rc, yy * stride_h + ry * dilation_h, xx * stride_w + rx * dilation_w]
            * Filter[ff, rc, ry, rx], axis=[rc, ry, rx]),
        name="conv2d_nchw")


# -- checks ------------------------------------------------------------------------------------

def _check_grad(Y, inputs, arrays):
    """<dY/dx . v, c> against a float64 central difference in a random direction, per input."""
    H = te.placeholder(Y.shape, "float64", name="H")
    grads = ta.grad(Y, inputs, head=H)
    c = RNG.normal(size=get_const_tuple(Y.shape))
    feed = dict(zip(inputs, arrays))
    got = te.evaluate(grads, {**feed, H: c})
    for k, (x, g) in enumerate(zip(inputs, got)):
        v = RNG.normal(size=arrays[k].shape)
        eps = 1e-6
        hi = te.evaluate([Y], {**feed, x: arrays[k] + eps * v})[0]
        lo = te.evaluate([Y], {**feed, x: arrays[k] - eps * v})[0]
        want = float(((hi - lo) / (2 * eps) * c).sum())
        assert np.isclose(float((g * v).sum()), want, rtol=1e-6, atol=1e-9), (x.name, SEED)


def _arr(t):
    return RNG.normal(size=get_const_tuple(t.shape))


def test_ported_topi_pad_and_conv2d_nchw_strided_dilated():
    A = te.placeholder((1, 2, 7, 7), "float64", name="A")
    W = te.placeholder((3, 2, 3, 3), "float64", name="W")
    Y = conv2d_nchw(A, W, (2, 2), 1, (2, 1))
    assert get_const_tuple(Y.shape) == (1, 3, 3, 4)
    _check_grad(Y, [A, W], [_arr(A), _arr(W)])


def test_ported_topi_softmax_and_dense():
    X = te.placeholder((3, 5), "float64", name="X")
    W = te.placeholder((4, 5), "float64", name="W")
    b = te.placeholder((4,), "float64", name="b")
    Y = softmax(dense(X, W, b), axis=1)
    arrays = [_arr(X), _arr(W), _arr(b)]
    y = te.evaluate([Y], dict(zip([X, W, b], arrays)))[0]
    z = arrays[0] @ arrays[1].T + arrays[2]
    np.testing.assert_allclose(y, np.exp(z) / np.exp(z).sum(1, keepdims=True), rtol=1e-12)
    _check_grad(Y, [X, W, b], arrays)


def test_shape_entries_behave_like_intimm():
    X = te.placeholder((3, 4), "float32", name="X")
    assert int(X.shape[0]) == 3 and X.shape[1].value == 4
    assert [int(s) for s in X.shape] == [3, 4] and get_const_tuple(X.shape) == (3, 4)
    assert np.zeros(X.shape).shape == (3, 4) and list(range(X.shape[0])) == [0, 1, 2]
    assert X.shape[0] == 3 and not (X.shape[0] == 4) and X.shape[0] != 4
    assert float(te.const(2.5, "float32")) == 2.5 and isinstance(X.shape, tuple)
    assert te.placeholder((2,), "int64").dtype == "int64"


def test_symbolic_dim_has_no_int_value():
    n = te.var("n")
    X = te.placeholder((n, 4), "float32", name="X")
    with pytest.raises(TypeError, match="not a constant") as err:
        int(X.shape[0])
    assert isinstance(err.value, TexprError)
    with pytest.raises(TypeError):
        range(X.shape[0])
    with pytest.raises(TexprError, match="not an integer"):
        [0, 1][te.const(1.0, "float32")]


def test_integer_bitwise_ops_and_new_intrinsics_evaluate_like_numpy():
    I = te.placeholder((6,), "int32", name="I")
    X = te.placeholder((6,), "float64", name="X")
    Y = te.compute((6,), lambda i: ((I[i] & 6) | (I[i] ^ 3) | ~I[i]) + te.bitwise_and(I[i], 1)
                   + te.if_then_else(te.isnan(X[i]), 1, 0), name="Y")
    iv = np.arange(-3, 3, dtype="int32")
    xv = np.array([0.0, np.nan, 1.0, 2.0, np.nan, -1.0])
    (y,) = te.evaluate([Y], {I: iv, X: xv})
    np.testing.assert_array_equal(y, ((iv & 6) | (iv ^ 3) | ~iv) + (iv & 1) + np.isnan(xv))
    with pytest.raises(TypeError, match="integer"):
        te.bitwise_and(X[0], 1)
