"""The vectorizable float32 exp/log/log1p/erf/tanh/cosh/sinh/pow of the CPU kernels: accuracy against float64 NumPy, IEEE
special values, and that the renderer uses them for float32 only."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from numba import njit

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.kernels.vecmath import (cosh_f32, erf_f32, exp_f32, fmaximum, fminimum, log1p_f32,
                                     log_f32, pow_f32, radd, sinh_f32, tanh_f32)


@njit(error_model="numpy")
def _map_exp(x, out):
    for i in range(x.size):
        out[i] = exp_f32(x[i])


@njit(error_model="numpy")
def _map_tanh(x, out):
    for i in range(x.size):
        out[i] = tanh_f32(x[i])


def _max_ulp(fn, x: np.ndarray, exact: np.ndarray) -> float:
    """Largest |got - exact| in units of the float32 spacing at the exact value (finite results)."""
    got = np.empty_like(x)
    fn(x, got)
    with np.errstate(over="ignore"):
        w32 = exact.astype(np.float32)
    ok = np.isfinite(w32)
    ulp = np.spacing(np.abs(w32[ok])).astype(np.float64)
    return float((np.abs(got[ok].astype(np.float64) - exact[ok]) / ulp).max())


def test_exp_f32_within_1_5_ulp_over_the_whole_range():
    x = np.linspace(-104.0, 88.7, 2_000_001, dtype=np.float32)  # subnormal to near overflow
    x = np.concatenate([x, np.random.default_rng(0).standard_normal(200_000).astype(np.float32)])
    assert _max_ulp(_map_exp, x, np.exp(x.astype(np.float64))) <= 1.5


def test_tanh_f32_within_4_ulp():
    rng = np.random.default_rng(1)
    x = np.concatenate([np.linspace(-12, 12, 2_000_001, dtype=np.float32),
                        np.logspace(-30, 1, 100_000, dtype=np.float32),
                        -np.logspace(-30, 1, 100_000, dtype=np.float32),
                        rng.standard_normal(100_000).astype(np.float32)])
    assert _max_ulp(_map_tanh, x, np.tanh(x.astype(np.float64))) <= 4.0


def _assert_special_values(fn, ref, x):
    """`fn` on float32 `x` equals NumPy's float64 `ref` rounded to float32: NaN where it is NaN,
    within 1 ulp-ish elsewhere, with the same sign bit (so -0 stays -0)."""
    got = np.empty_like(x)
    fn(x, got)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fin = ~np.isnan(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=3e-7, atol=0)
    np.testing.assert_array_equal(np.signbit(got[fin]), np.signbit(want[fin]))


@pytest.mark.parametrize("fn, ref", [(_map_exp, np.exp), (_map_tanh, np.tanh)])
def test_special_values_match_numpy(fn, ref):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 89.0, -105.0, 88.72, -87.5, 1e-40],
                 dtype=np.float32)
    _assert_special_values(fn, ref, x)


@pytest.mark.parametrize("dtype, uses", [("float32", True), ("float64", False)])
def test_renderer_uses_them_for_float32_only(dtype, uses):
    x = te.placeholder((64,), dtype, name="x")
    y = te.compute((64,), lambda i: te.exp(x[i]) + te.tanh(x[i]) + te.sigmoid(x[i]), name="y")
    k = ta.build([y], [x])
    assert ("exp_f32(" in k.source and "tanh_f32(" in k.source) == uses
    a = np.linspace(-5, 5, 64).astype(dtype)
    want = np.exp(a) + np.tanh(a) + 1 / (1 + np.exp(-a))
    tol = 1e-6 if dtype == "float32" else 1e-14
    np.testing.assert_allclose(k(a)[0], want, rtol=tol, atol=tol)


def test_fmax_fmin_propagate_nan_like_numpy():
    from texpr_ad.kernels.vecmath import fmax, fmin
    vals = [np.nan, np.inf, -np.inf, 0.0, -1.5, 2.0]
    for a in vals:
        for b in vals:
            for fn, ref in ((fmax, np.maximum), (fmin, np.minimum)):
                got, want = fn(a, b), ref(a, b)
                assert (np.isnan(got) and np.isnan(want)) or got == want, (fn, a, b)


# -- the lanes reduction steps: radd (reassociable add), fmaximum/fminimum (llvm.maximum) ------

@njit(error_model="numpy")
def _fold(x):
    s, hi, lo = np.float32(0.0), np.float32(-np.inf), np.float32(np.inf)
    for v in x:
        s, hi, lo = radd(s, v), fmaximum(hi, v), fminimum(lo, v)
    return s, hi, lo


@pytest.mark.parametrize("case", ["finite", "nan", "inf", "-inf", "inf-inf", "zeros"])
def test_lane_steps_fold_like_numpy(case):
    x = np.random.default_rng(1).standard_normal(1003).astype(np.float32)
    specials = {"finite": [], "nan": [(17, np.nan)], "inf": [(5, np.inf)], "-inf": [(900, -np.inf)],
                "inf-inf": [(3, np.inf), (4, -np.inf)], "zeros": []}
    for k, v in specials[case]:
        x[k] = v
    if case == "zeros":
        x[:] = -0.0
    s, hi, lo = _fold(x)
    np.testing.assert_allclose(s, x.astype(np.float64).sum(), rtol=1e-5, atol=1e-4, equal_nan=True)
    assert (hi, lo) == (x.max(), x.min()) or (np.isnan(hi) and np.isnan(lo) and np.isnan(x).any())


def test_lane_reductions_render_as_vectorizable_steps_and_agree():
    """Sum/max/min row reductions with lanes accumulate through radd/fmaximum/fminimum (one
    scalar accumulator; no lane array), and give NumPy's results, NaN rows included."""
    x = te.placeholder((6, 200), "float32", name="x")

    def row(f, n):
        k = te.reduce_axis((0, 200), f"k{n}")
        return te.compute((6,), lambda i: f(x[i, k] * 2.0, axis=k), name=f"y{n}")

    ys = [row(f, n) for n, f in enumerate((te.sum, te.max, te.min))]
    kern = ta.build(ys, [x])
    src = kern.source
    assert all(s in src for s in ("radd(", "fmaximum(", "fminimum(")) and "_lanes" not in src
    assert all(kern.plan.stage(y.op.name).cpu.lanes > 1 for y in ys)
    a = np.random.default_rng(2).standard_normal((6, 200)).astype(np.float32)
    a[1, 7], a[2, 0], a[3, 199] = np.nan, np.inf, -np.inf
    s, hi, lo = kern(a)
    np.testing.assert_allclose(s, (2 * a).astype(np.float64).sum(1), rtol=1e-5, equal_nan=True)
    np.testing.assert_array_equal(hi, (2 * a).max(1))
    np.testing.assert_array_equal(lo, (2 * a).min(1))


def test_a_lanes_sum_over_several_axes_nests_its_accumulators():
    """A sum over (n, h, w) keeps one accumulator per axis (float32 chains of n, h and w terms,
    not n*h*w): within 3e-7 of float64 over 16384 positive terms (one float32 chain of them
    is 1.1e-6 off)."""
    x = te.placeholder((16, 64, 32, 32), "float32", name="x")
    r = [te.reduce_axis((0, e), f"r{d}") for d, e in ((0, 16), (2, 32), (3, 32))]
    y = te.compute((64,), lambda c: te.sum(x[r[0], c, r[1], r[2]], axis=r), name="y")
    kern = ta.build([y], [x])
    assert kern.plan.stage("y").cpu.lanes > 1 and kern.source.count("y_acc") >= 3
    a = (1.0 + 0.1 * np.random.default_rng(4).standard_normal((16, 64, 32, 32))).astype(np.float32)
    (got,) = kern(a)
    want = a.astype(np.float64).sum((0, 2, 3))
    assert np.abs(got - want).max() / want.max() < 3e-7


# -- log, log1p, erf --------------------------------------------------------------------------

def _mapper(f):
    @njit(error_model="numpy")
    def run(x, out):
        for i in range(x.size):
            out[i] = f(x[i])
    return run


_map_log, _map_log1p, _map_erf = (_mapper(f) for f in (log_f32, log1p_f32, erf_f32))
_np_erf = np.vectorize(math.erf, otypes=[np.float64])


def _every_positive_float(step: int) -> np.ndarray:
    """Every `step`-th positive finite float32 by bit pattern: subnormals to the largest."""
    x = np.arange(1, 0x7F800000, step, dtype=np.uint32).view(np.float32)
    return x[np.isfinite(x)]


def test_log_f32_within_1_ulp_over_all_positive_floats_subnormals_included():
    x = _every_positive_float(17)
    assert _max_ulp(_map_log, x, np.log(x.astype(np.float64))) <= 1.0


def test_log1p_f32_within_1_5_ulp():
    x = _every_positive_float(37)
    x = np.concatenate([x[x < 1e38], -x[x < 1], np.linspace(-1, 1, 1_000_001, dtype=np.float32)])
    with np.errstate(divide="ignore"):  # log1p(-1) = -inf
        exact = np.log1p(x.astype(np.float64))
    assert _max_ulp(_map_log1p, x, exact) <= 1.5


def test_erf_f32_within_2_ulp():
    x = _every_positive_float(1009)
    x = np.concatenate([x, -x, np.linspace(-5, 5, 1_000_001, dtype=np.float32)])
    assert _max_ulp(_map_erf, x, _np_erf(x.astype(np.float64))) <= 2.0


@pytest.mark.parametrize("fn, ref", [(_map_log, np.log), (_map_log1p, np.log1p),
                                     (_map_erf, _np_erf)])
def test_log_log1p_erf_special_values_match_numpy(fn, ref):
    """log(0) = -inf, log(<0) = NaN, log1p(-1) = -inf, erf(+-inf) = +-1, NaN stays NaN,
    -0 keeps its sign, subnormal inputs."""
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, -2.0, 1.0, 1e-45, 1e-40,
                  1.17549435e-38, 3.4e38, -1e-30, 4.0, -5.0], dtype=np.float32)
    _assert_special_values(fn, ref, x)


@pytest.mark.parametrize("dtype, uses", [("float32", True), ("float64", False)])
def test_renderer_uses_log_log1p_erf_for_float32_only(dtype, uses):
    x = te.placeholder((64,), dtype, name="x")
    y = te.compute((64,), lambda i: te.log(x[i]) + te.log1p(x[i]) + te.erf(x[i]), name="y")
    k = ta.build([y], [x])
    assert all(f"{f}_f32(" in k.source for f in ("log", "log1p", "erf")) == uses
    a = np.linspace(0.01, 5, 64).astype(dtype)
    want = np.log(a) + np.log1p(a) + _np_erf(a)
    tol = 1e-6 if dtype == "float32" else 1e-14
    np.testing.assert_allclose(k(a)[0], want, rtol=tol, atol=tol)


# -- cosh, sinh, pow (float64 inside, rounded once) --------------------------------------------

@njit(error_model="numpy")
def _map_pow(x, y, out):
    for i in range(x.size):
        out[i] = pow_f32(x[i], y[i])


_map_cosh, _map_sinh = _mapper(cosh_f32), _mapper(sinh_f32)


def _hyp_samples() -> np.ndarray:
    x = np.concatenate([np.linspace(-95, 95, 2_000_001, dtype=np.float32),
                        _every_positive_float(4099)])  # subnormals, tiny, huge
    return np.concatenate([x, -x])


@pytest.mark.parametrize("fn, ref", [(_map_cosh, np.cosh), (_map_sinh, np.sinh)])
def test_cosh_sinh_f32_within_1_ulp_and_overflow_where_numpy_does(fn, ref):
    x = _hyp_samples()
    with np.errstate(over="ignore"):
        exact = ref(x.astype(np.float64))
        numpy32 = ref(x)
    assert _max_ulp(fn, x, exact) <= 1.0
    got = np.empty_like(x)
    fn(x, got)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(numpy32))  # |x| > 89.42 or so


@pytest.mark.parametrize("fn, ref", [(_map_cosh, np.cosh), (_map_sinh, np.sinh)])
def test_cosh_sinh_special_values_match_numpy(fn, ref):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-40, 1e-20, -3e-8, 0.34657,
                  89.41, 89.42, -89.5, 1e30], dtype=np.float32)
    _assert_special_values(fn, ref, x)


def _pow_ulp(x: np.ndarray, y: np.ndarray) -> float:
    """Largest error of pow_f32(x, y) in float32 ulp against float64 NumPy, finite nonzero
    results; infinities, zeros and NaN exactly as float64 NumPy rounded to float32."""
    got = np.empty_like(x)
    _map_pow(x, y, got)
    with np.errstate(all="ignore"):
        exact = np.power(x.astype(np.float64), y.astype(np.float64))
        want = exact.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    for same in (np.isinf(want), want == 0):
        np.testing.assert_array_equal(got[same], want[same])
        np.testing.assert_array_equal(np.signbit(got[same]), np.signbit(want[same]))
    ok = np.isfinite(want) & (want != 0)
    return float((np.abs(got[ok] - exact[ok]) / np.spacing(np.abs(want[ok]))).max())


def test_pow_f32_within_1_ulp_over_the_whole_range():
    """Every 997th positive float32 as x, each with exponents that take x ** y over the whole
    float32 range (overflow and subnormal results included) and small ones; negative x with
    integer exponents (odd and even)."""
    rng = np.random.default_rng(7)
    x = _every_positive_float(997)
    reach = 150.0 / np.maximum(np.abs(np.log2(x.astype(np.float64))), 1 / 64)
    y = np.concatenate([(rng.uniform(-1, 1, x.size) * reach).astype(np.float32),
                        (rng.standard_normal(x.size) * 4).astype(np.float32)])
    xs = np.concatenate([x, x])
    assert _pow_ulp(xs, y) <= 1.0
    xn = -x[(x > 1e-3) & (x < 1e3)]
    yn = rng.integers(-12, 13, xn.size).astype(np.float32)
    assert _pow_ulp(xn, yn) <= 1.0
    near1 = (1 + np.linspace(-1e-3, 1e-3, 200_001)).astype(np.float32)  # ln x tiny, y huge
    assert _pow_ulp(near1, rng.uniform(-8e4, 8e4, near1.size).astype(np.float32)) <= 1.0


def test_pow_f32_special_values_match_numpy():
    """C's powf cases, as NumPy's float32 power: x ** 0 and 1 ** y are 1 (NaN too), (-1) **
    +-inf = 1, negative x with non-integer y is NaN, odd integer y keeps x's sign (-0 and -inf
    too), +-0 ** negative y is inf, over/underflow to inf/0."""
    v = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0,
                  2.5, -2.5, 1e-40, -1e-40, 1e-45, 3e38, -3e38, 16777216.0, 16777218.0, 1e10,
                  -1e10, 1.0000001, 0.9999999], dtype=np.float32)
    x, y = (a.ravel() for a in np.meshgrid(v, v))
    got = np.empty_like(x)
    _map_pow(x, y, got)
    with np.errstate(all="ignore"):
        want = np.power(x, y)  # NumPy float32
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fin = ~np.isnan(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1.2e-7, atol=0)
    np.testing.assert_array_equal(np.signbit(got[fin]), np.signbit(want[fin]))
    assert _pow_ulp(x, y) <= 1.0


def _llvm_calls(fn, *args) -> set[str]:
    fn(*args)
    return set(re.findall(r"call [^@\n]*@([\w.]+)", next(iter(fn.inspect_llvm().values()))))


def test_cosh_sinh_pow_loops_call_no_libm():
    """A loop of them holds no call into libm (powf, coshf, llvm.pow, ... scalar or vector):
    only arithmetic and intrinsics LLVM vectorizes inline (fabs, floor, fmuladd, copysign)."""
    @njit(error_model="numpy")
    def loop(x, y, out):
        for i in range(x.size):
            out[i] = pow_f32(x[i], y[i]) + cosh_f32(x[i]) + sinh_f32(y[i])

    a = np.ones(16, np.float32)
    libm = re.compile(r"(llvm\.)?(pow|cosh|sinh|exp|log)")
    math_calls = {c for c in _llvm_calls(loop, a, a, a.copy()) if libm.match(c)}
    assert not math_calls, math_calls


@pytest.mark.parametrize("dtype, uses", [("float32", True), ("float64", False)])
def test_renderer_uses_cosh_sinh_pow_for_float32_only(dtype, uses):
    """x ** y and x ** -0.75 go to pow_f32; x ** 2 and x ** 0.5 stay `**` (LLVM makes them
    x * x and a sqrt itself)."""
    x = te.placeholder((64,), dtype, name="x")
    y = te.compute((64,), lambda i: (te.cosh(x[i]) + te.sinh(x[i]) + x[i] ** x[i]
                                     + te.power(x[i], -0.75) + x[i] ** 2 + te.sqrt(x[i]) ** 0.5),
                   name="y")
    k = ta.build([y], [x])
    assert all(f"{f}_f32(" in k.source for f in ("cosh", "sinh", "pow")) == uses
    assert k.source.count("pow_f32(") == 2 * uses
    a = np.linspace(0.01, 5, 64).astype(dtype)
    want = np.cosh(a) + np.sinh(a) + a ** a + a ** -0.75 + a ** 2 + np.sqrt(a) ** 0.5
    tol = 1e-6 if dtype == "float32" else 1e-14
    np.testing.assert_allclose(k(a)[0], want, rtol=tol, atol=tol)
