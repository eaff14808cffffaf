"""NaN and infinities propagate as NumPy and PyTorch propagate them, forward and backward
(issue 13, class 3): on the reference evaluator, the CPU kernels and the CUDA simulator.

Each case runs forward and the vector-Jacobian product (head of ones) and compares with
torch autograd on the same float32 inputs, NaN matching NaN.  Where torch splits ties
differently (max(dim), max_pool2d give all to the first) the test compares the tie-free
part and the total gradient mass; README's "NaN and infinities" table states each rule.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops import elementwise as E
from texpr_ad.ops import nn as NN
from texpr_ad.ops import reduction as R

torch = pytest.importorskip("torch")
F = torch.nn.functional
nan, inf = np.nan, np.inf
VALUES = [nan, inf, -inf, 0.0, 1.0, -1.0, 3e-39, 25.0]

# name -> (texpr op on a tensor, torch op)
UNARY: dict[str, tuple[Callable, Callable]] = {
    "relu": (E.relu, F.relu),
    "leaky_relu": (lambda x: E.leaky_relu(x, 0.1), lambda x: F.leaky_relu(x, 0.1)),
    "elu": (lambda x: E.elu(x, 1.5), lambda x: F.elu(x, 1.5)),
    "clip": (lambda x: E.clip(x, -1.0, 1.0), lambda x: torch.clamp(x, -1.0, 1.0)),
    "abs": (E.abs, torch.abs),
    "softplus": (E.softplus, F.softplus),
    "sigmoid": (E.sigmoid, torch.sigmoid),
    "tanh": (E.tanh, torch.tanh),
    "exp": (E.exp, torch.exp),
    "sqrt": (E.sqrt, torch.sqrt),
    "log": (E.log, torch.log),
    "rsqrt": (E.rsqrt, torch.rsqrt),
    "silu": (E.silu, F.silu),
    "gelu_tanh": (lambda x: E.gelu(x, "tanh"), lambda x: F.gelu(x, approximate="tanh")),
}


def _torch_vjp(fn: Callable, arrays: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*ts)
    y.backward(torch.ones_like(y))
    return y.detach().numpy(), [t.grad.numpy() for t in ts]


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=2e-5, atol=1e-6, equal_nan=True, err_msg=what)


def _texpr_vjp(outs: list[te.Tensor], xs: list[te.Tensor], arrays: list[np.ndarray],
               target: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Forward values and the gradients of sum(outs) (a ones head per output)."""
    heads = [te.placeholder(y.shape, y.dtype, name=f"h{k}") for k, y in enumerate(outs)]
    grads: list[te.Tensor | None] = [None] * len(xs)
    for y, h in zip(outs, heads):
        for k, g in enumerate(ta.grad(y, xs, head=h)):
            if g is not None:
                grads[k] = g if grads[k] is None else te.compute(
                    g.shape, lambda *i, a=grads[k], b=g: a[i] + b[i], name=f"g{k}")
    if target == "ref":
        feed = dict(zip(xs, arrays))
        ys = te.evaluate(outs, feed)
        feed.update({h: np.ones(y.shape, "float32") for h, y in zip(heads, ys)})
        return ys, te.evaluate(grads, feed)
    ys = list(ta.build(outs, xs, target=target)(*arrays))
    ones = [np.ones(y.shape, "float32") for y in ys]
    return ys, list(ta.build(grads, xs + heads, target=target)(*arrays, *ones))


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_elementwise_nonfinite_like_torch(target):
    """relu(NaN) = NaN (was 0) with relu'(NaN) = 1; leaky_relu'(NaN) = alpha (was 0); elu, clamp,
    abs, softplus at NaN as torch; the float32 vecmath polynomials at +-inf and NaN."""
    a = np.array(VALUES, "float32")
    xs = [te.placeholder((len(VALUES),), "float32", name=f"x_{n}") for n in UNARY]
    outs = [f(x) for x, (f, _) in zip(xs, UNARY.values())]
    ys, gs = _texpr_vjp(outs, xs, [a] * len(xs), target)
    for (name, (_, tf)), y, g in zip(UNARY.items(), ys, gs):
        ty, (tg,) = _torch_vjp(tf, [a])
        _same(y, ty, f"{name} forward")
        _same(g, tg, f"{name} gradient")


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_maximum_minimum_nan_like_torch(target):
    """Elementwise max/min: NaN if either operand is; the gradient 1 to both then (torch)."""
    a = np.array([nan, 1.0, nan, 2.0, inf, -inf], "float32")
    b = np.array([1.0, nan, nan, 2.0, inf, -inf], "float32")
    xa, xb = te.placeholder((6,), "float32", name="a"), te.placeholder((6,), "float32", name="b")
    for op, tf in ((E.maximum, torch.maximum), (E.minimum, torch.minimum)):
        (y,), g = _texpr_vjp([op(xa, xb)], [xa, xb], [a, b], target)
        ty, tg = _torch_vjp(tf, [a, b])
        _same(y, ty, "forward")
        _same(g[0], tg[0], "d a")
        _same(g[1], tg[1], "d b")


def test_documented_divergences_from_torch():
    """sign(NaN) is NaN as NumPy (torch gives 0); gelu(inf) = inf as the formula (torch NaN)."""
    x = te.placeholder((3,), "float32", name="x")
    y = te.evaluate([E.sign(x), E.gelu(x)], {x: np.array([nan, inf, -inf], "float32")})
    assert np.isnan(y[0][0]) and y[0][1] == 1 and y[0][2] == -1
    assert y[1][1] == inf and np.isnan(y[1][2])


ROWS = [[1.0, nan, 3.0], [-inf, -inf, -inf], [inf, 1.0, inf], [-inf, 1.0, 2.0], [nan, 2.0, inf],
        [0.0, inf, 2.0]]

def _plain_softmax(x, log=False):
    """softmax / log_softmax written out, its max without stop_gradient (deriv/invariance.py
    proves the shift cancels, so the max gets no gradient, as in the registry's ops)."""
    n, c = x.shape
    k, k2 = te.reduce_axis((0, c), "k"), te.reduce_axis((0, c), "k2")
    m = te.compute((n,), lambda i: te.max(x[i, k], axis=k), name="m")
    e = te.compute(x.shape, lambda i, j: te.exp(x[i, j] - m[i]), name="e")
    s = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
    if log:
        return te.compute(x.shape, lambda i, j: x[i, j] - m[i] - te.log(s[i]), name="y")
    return te.compute(x.shape, lambda i, j: e[i, j] / s[i], name="y")


ROW_OPS = {
    "logsumexp": (lambda x: R.logsumexp(x, 1), lambda x: torch.logsumexp(x, 1)),
    "plain_softmax": (_plain_softmax, lambda x: torch.softmax(x, 1)),
    "plain_log_softmax": (lambda x: _plain_softmax(x, True), lambda x: torch.log_softmax(x, 1)),
    "softmax": (lambda x: E.softmax(x, 1), lambda x: torch.softmax(x, 1)),
    "log_softmax": (lambda x: E.log_softmax(x, 1), lambda x: torch.log_softmax(x, 1)),
}


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_row_reductions_nonfinite_like_torch(target):
    """logsumexp of an all -inf row is -inf and of a row with +inf is +inf (was NaN), its
    gradient as torch's; softmax and log_softmax rows with NaN/inf as torch."""
    a = np.array(ROWS, "float32")
    xs = [te.placeholder(a.shape, "float32", name=f"x_{n}") for n in ROW_OPS]
    outs = [f(x) for x, (f, _) in zip(xs, ROW_OPS.values())]
    ys, gs = _texpr_vjp(outs, xs, [a] * len(xs), target)
    for (name, (_, tf)), y, g in zip(ROW_OPS.items(), ys, gs):
        ty, (tg,) = _torch_vjp(tf, [a])
        _same(y, ty, f"{name} forward")
        _same(g, tg, f"{name} gradient")
    assert ys[0][1] == -inf and ys[0][2] == inf


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_max_min_reduction_nan_gives_a_nan_gradient(target):
    """max/min over a NaN is NaN, and so is the gradient of its whole row: ties split the
    gradient, and a NaN equals no element, so each share is 0/0 (torch amax/amin, JAX; issue 28
    item 16: was routed to the NaN element, [0, 1, 0], as torch's max(dim) that does not split)."""
    a = np.array([[1.0, nan, 3.0], [nan, nan, 1.0], [1.0, 3.0, 3.0], [-inf, -inf, 0.5]], "float32")
    x = te.placeholder(a.shape, "float32", name="x")
    (ymax, ymin), (g,) = _texpr_vjp([R.max(x, 1), R.min(x, 1)], [x], [a], target)
    _same(ymax, [nan, nan, 3.0, 0.5], "max")
    _same(ymin, [nan, nan, 1.0, -inf], "min")
    want = np.array([[nan] * 3, [nan] * 3, [1, 0.5, 0.5], [0.5, 0.5, 1]], "float32")
    _same(g, want, "gradient of max + min")
    tg = _torch_vjp(lambda t: torch.amax(t, 1) + torch.amin(t, 1), [a])[1][0]
    _same(g, tg, "as torch amax + amin")


def _nan_windows(y: np.ndarray, shape: tuple[int, int], k: int, s: int, p: int) -> np.ndarray:
    """The input points of the pooling windows whose max `y` is NaN."""
    mask = np.zeros(shape, bool)
    for oh, ow in zip(*np.nonzero(np.isnan(y[0, 0]))):
        mask[max(oh * s - p, 0):oh * s - p + k, max(ow * s - p, 0):ow * s - p + k] = True
    return mask


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_max_pool_nan_and_inf_padding(target):
    """max_pool2d over a NaN gives a NaN gradient to its window, the rule of every max reduction
    (torch's max_pool2d routes it to the NaN element; overlapping windows, stride 1, take the
    arg-extreme scatter, stride = k the gather: both agree); elsewhere as torch.  -inf padding
    takes no gradient mass: an all -inf input with 3x3 windows, padding 1, kept 4/9 of a corner
    window's head."""
    x = te.placeholder((1, 1, 3, 3), "float32", name="x")
    a = np.full((1, 1, 3, 3), -inf, "float32")
    b = np.arange(9, dtype="float32").reshape(1, 1, 3, 3)
    b[0, 0, 1, 1] = nan
    c = b.copy()
    c[0, 0, 1, 1] = 4.0
    c[0, 0, 2, 2] = nan
    for arr, (k, s, p) in ((a, (3, 1, 1)), (a, (3, 2, 1)), (b, (2, 1, 0)), (b, (3, 2, 1)),
                           (c, (2, 2, 0)), (c, (2, 1, 0))):
        (y,), (g,) = _texpr_vjp([NN.max_pool2d(x, k, s, p)], [x], [arr], target)
        ty, (tg,) = _torch_vjp(lambda t: F.max_pool2d(t, k, s, p), [arr])
        _same(y, ty, f"forward k={k} s={s} p={p}")
        nan_at = _nan_windows(ty, (3, 3), k, s, p)
        assert np.array_equal(np.isnan(g[0, 0]), nan_at), (k, s, p, g)
        if not np.isinf(arr).any():  # no ties: the same routing outside the NaN windows
            _same(g[0, 0][~nan_at], tg[0, 0][~nan_at], f"gradient k={k} s={s} p={p}")
        else:
            assert g.sum() == pytest.approx(float(tg.sum())), (k, s, p, g)  # no mass lost


def test_reciprocal_of_subnormal_divisor_does_not_overflow():
    """A float32 division by a hoisted row value is a product with a reciprocal; a subnormal
    divisor gave inf (3e-39 / 1e-39) and a divisor above 2^126 a subnormal reciprocal."""
    n, m = 64, 512  # large enough for the row-parallel plan that hoists s[i]
    x = te.placeholder((n, m), "float32", name="x")
    k = te.reduce_axis((0, m), name="k")
    s = te.compute((n,), lambda i: te.sum(x[i, k], axis=k), name="s")
    y = te.compute((n, m), lambda i, j: x[i, j] / s[i], name="y")
    f = ta.build([y], [x])
    assert "_inv" in f.source  # the reciprocal path is what this tests
    a = np.zeros((n, m), "float32")
    a[0, :2] = 3e-39, -2e-39                 # s = 1e-39, subnormal
    a[1, :2] = 3e38, 2e38                   # s = 5e38 > 2^126: overflows to inf in float32
    a[2, :2] = 2e37, 7e37                   # s = 9e37 > 2^126
    a[3, :2] = 1.0, 2.0
    a[4] = 0.0                              # 0 / 0
    (got,) = f(a)
    with np.errstate(all="ignore"):
        want = a / a.sum(1, keepdims=True, dtype="float32")
    _same(got[0, :2], [3.0, -2.0], "subnormal divisor")
    np.testing.assert_array_max_ulp(got[2:4, :2], want[2:4, :2], maxulp=1)
    _same(got[1], want[1], "infinite divisor")
    assert np.isnan(got[4]).all()


CUDA_SCRIPT = r"""
import numpy as np, texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops import elementwise as E, reduction as R
nan, inf = np.nan, np.inf
x = te.placeholder((3, 3), "float32", name="x")
a = np.array([[1.0, nan, 3.0], [-inf, -inf, -inf], [inf, 1.0, inf]], "float32")
outs = [E.relu(x), R.max(x, 1)]
for y in outs:
    h = te.placeholder(y.shape, "float32", name="h")
    (g,) = ta.grad(y, [x], head=h)
    ones = np.ones(tuple(int(d.value) for d in y.shape), "float32")
    got = [ta.build([y], [x], target="cuda")(a)[0], ta.build([g], [x, h], target="cuda")(a, ones)[0]]
    ref = te.evaluate([y], {x: a}) + te.evaluate([g], {x: a, h: ones})
    for u, v in zip(got, ref):
        np.testing.assert_allclose(u, v, rtol=1e-6, equal_nan=True)
print("ok")
"""


def test_cuda_simulator_agrees_with_reference():
    """relu and a max reduction with NaN/inf rows on the CUDA target (simulator).  logsumexp is
    left out: the simulator runs `math.log(0)` as Python's, which raises."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1",
           "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-c", CUDA_SCRIPT], cwd=root, env=env, text=True,
                       capture_output=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
