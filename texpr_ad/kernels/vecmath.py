"""Vectorizable float32 `exp`, `log`, `log1p`, `erf`, `tanh`, `cosh`, `sinh` and `x ** y` for the
generated CPU kernels.

Numba lowers `np.exp` on a float32 scalar to a call into libm's `expf`, and a
loop with a call in it is never vectorized: the llvmlite wheels carry no SVML.
Softmax, sigmoid, tanh and every loss spend most of their time there.  XLA's CPU
backend meets the same problem by emitting its own polynomial; so do these:
branch-free, only arithmetic, `floor`, comparisons and one integer bitcast, which
LLVM's loop vectorizer turns into SIMD code once they are inlined into a kernel.  The
polynomials and range reductions are fused multiply-adds (`_fma`): a quarter fewer
instructions in exp and tanh, and one rounding per step instead of two.

exp_f32: Cody-Waite range reduction x = n ln2 + r (|r| <= ln2/2, ln2 split in
two so n ln2 is exact), a degree-6 polynomial for exp(r) (the Cephes `expf`
coefficients), and 2^n built from exponent bits in two halves, so results that
are subnormal (x < -87.3) or overflow (x > 88.72) come out as IEEE rounding gives
them.  NaN stays NaN, +-inf give inf and 0.  Max error 2 ulp over the finite
range (tests/kernels/test_vecmath.py sweeps it against NumPy's float64 exp).

tanh_f32: for |x| < 0.625 the odd rational x P(x^2) / Q(x^2) that Eigen and XLA
use for float32; above, 1 - 2 / (exp(2|x|) + 1) with exp_f32 (no cancellation once
|tanh| > 1/2, exactly +-1 where tanh rounds to it).  Max error 4 ulp.

log_f32: the exponent and mantissa bits (`_frexp`; subnormals scaled by 2^23 first),
x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln x = e ln2 + ln m with ln(1 + t) a degree-8
polynomial in t = m - 1 (the Cephes `logf` coefficients).  0 gives -inf, negatives NaN,
inf and NaN stay.  Max error 0.81 ulp over all positive floats.

log1p_f32: ln u for u = fl(1 + x), plus the rounding error of u, (x - (u - 1)) / u,
to first order; x itself where u rounds to 1.  -1 gives -inf, below -1 NaN.  Max error
1.44 ulp.

erf_f32: x P(x^2) / Q(x^2) on x clamped to [-4, 4] (the float32 rational of Eigen and
XLA), evaluated in float64 (float32 Horner steps add up to 7 ulp near |x| = 3.5; in
float64 the loop still vectorizes).  +-inf give +-1.  Max error 1.85 ulp.

cosh_f32, sinh_f32: |x| = n ln2 + r in float64 (clamped to 100), cosh r and sinh r by their
Taylor series to r^9, and the addition formulas with cosh/sinh(n ln2) = (2^n +- 2^-n) / 2; for
|x| < ln2/2 that is sinh r itself, so no cancellation near 0 (sign by copysign: -0 stays -0).
Rounded once to float32, so they overflow to inf exactly where NumPy's float32 does (|x| >
89.42).  Max error 0.51 ulp.

pow_f32: x ** y = e^(y ln|x|) in float64: ln|x| = e ln2 + 2 atanh s, s = (m - 1) / (m + 1)
(m from `_frexp` as in log_f32, |s| < 0.172, the series to s^13), e^z as cosh + sinh above,
2^-37 relative before the one rounding; the special cases are selects, as C's powf (NumPy's
float32 power): x ** 0 = 1 ** y = 1 (NaN too), (-1) ** +-inf = 1, x < 0 with non-integer finite
y is NaN, with odd integer y negative, (+-0) ** y = +-0 or +-inf by y's sign and parity, inf
and NaN as IEEE.  Max error 0.51 ulp.  The renderer keeps `x ** c` for c in {0, 1, 2, -1, 0.5}:
LLVM turns those into exact inline arithmetic itself.

float64 kernels keep NumPy/libm (the gradient checks run in float64 and need
its 0.5 ulp), so these are only used where the expression's dtype is float32.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

_F = np.float32


@intrinsic
def _pow2(typingctx, n):
    """2.0**n in n's type for an integral n, in [-126, 127] (float32) or [-1022, 1023]
    (float64): exponent bits, no call."""
    if n not in (types.float32, types.float64):
        return None
    ints, bias, shift = ((types.int32, 127, 23) if n == types.float32 else (types.int64, 1023, 52))

    def codegen(context, builder, sig, args):
        i = context.get_value_type(ints)
        e = builder.add(builder.fptosi(args[0], i), i(bias))
        return builder.bitcast(builder.shl(e, i(shift)), context.get_value_type(n))

    return n(n), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """a * b + c as llvm.fmuladd: one fused multiply-add where the CPU has one (x86-64 since
    Haswell and Zen, every ARMv8), rounded once; Numba does not contract `a * b + c` itself."""
    if not (isinstance(a, types.Float) and a == b == c):
        return None

    def codegen(context, builder, sig, args):
        from llvmlite import ir
        t = args[0].type
        return builder.call(builder.module.declare_intrinsic(
            "llvm.fmuladd", [t], ir.FunctionType(t, [t] * 3)), args)

    return a(a, a, a), codegen


@njit(inline="always")
def _poly(cs: tuple, x: float) -> float:
    """The polynomial with coefficients `cs` (highest power first) at x, by Horner's rule."""
    p = cs[0]
    for c in cs[1:]:
        p = _fma(p, x, c)
    return p


_LOG2E = _F(1.4426950408889634)
_LN2_HI = _F(0.693359375)        # exact in 9 bits: n * _LN2_HI has no rounding for |n| < 2^15
_LN2_LO = _F(-2.12194440e-4)     # ln 2 - _LN2_HI
_EXP_P = tuple(_F(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3333452e-3,
                               4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))
_X_HI, _X_LO = _F(89.0), _F(-104.0)  # exp overflows above 88.72 and is 0 below -103.97
_HALF, _ONE = _F(0.5), _F(1.0)


@njit(inline="always", error_model="numpy")
def exp_f32(x: float) -> float:
    """e**x for float32 x, vectorizable (see the module docstring)."""
    xc = _X_HI if x > _X_HI else x
    xc = _X_LO if xc < _X_LO else xc
    n = np.floor(_fma(xc, _LOG2E, _HALF))
    r = _fma(-n, _LN2_LO, _fma(-n, _LN2_HI, xc))
    p = _fma(_poly(_EXP_P, r), r * r, r + _ONE)
    n1 = np.floor(n * _HALF)  # 2^n = 2^n1 * 2^(n - n1): both halves stay normal
    y = p * _pow2(n1) * _pow2(n - n1)
    return y if x == x else x


_TANH_SMALL = _F(0.0004)  # below this tanh(x) rounds to x in float32
_TANH_MID = _F(0.625)   # the rational form below, the exp form above
_TWO = _F(2.0)
_TANH_P = tuple(_F(c) for c in (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                                5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                                4.89352455891786e-03))
_TANH_Q = tuple(_F(c) for c in (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                                4.89352518554385e-03))


@njit(inline="always", error_model="numpy")
def tanh_f32(x: float) -> float:
    """tanh(x) for float32 x, vectorizable (see the module docstring)."""
    x2 = x * x  # the rational form only counts where |x| < 0.625
    y = x * _poly(_TANH_P, x2) / _poly(_TANH_Q, x2)
    e = exp_f32(_TWO * abs(x))  # 1 - 2 / (e^2|x| + 1): no cancellation once |tanh| > 1/2
    z = _ONE - _TWO / (e + _ONE)
    z = z if x > 0 else -z
    y = y if abs(x) < _TANH_MID else z
    return x if abs(x) < _TANH_SMALL else y


@intrinsic
def _frexp(typingctx, x):
    """(m, e) with x = m 2^e, m in [0.5, 1), for a positive normal float32 x: the exponent
    and mantissa bits, no call (e is a float32 integer)."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        i32, f32 = context.get_value_type(types.int32), context.get_value_type(types.float32)
        bits = builder.bitcast(args[0], i32)
        m = builder.or_(builder.and_(bits, i32(0x807FFFFF)), i32(0x3F000000))
        e = builder.sub(builder.and_(builder.lshr(bits, i32(23)), i32(0xFF)), i32(126))
        return context.make_tuple(builder, sig.return_type,
                                  [builder.bitcast(m, f32), builder.sitofp(e, f32)])

    return types.UniTuple(types.float32, 2)(types.float32), codegen


_TINY = _F(1.17549435e-38)   # the smallest normal float32: subnormals are scaled by 2^23 first
_TWO23 = _F(8388608.0)
_SQRT_HALF = _F(0.707106781186547524)
_LOG_P = tuple(_F(c) for c in (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1,
                               -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
                               2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1))
_INF, _NAN = _F(np.inf), _F(np.nan)


@njit(inline="always", error_model="numpy")
def log_f32(x: float) -> float:
    """ln x for float32 x, vectorizable (see the module docstring)."""
    sub = x < _TINY
    m, e = _frexp(x * _TWO23 if sub else x)
    e = e - _F(23.0) if sub else e
    lo = m < _SQRT_HALF  # m in [sqrt(1/2), sqrt(2)): t = m - 1 small on both sides of 1
    t = (m + m if lo else m) - _ONE
    e = e - _ONE if lo else e
    z = t * t
    y = t * z * _poly(_LOG_P, t) + e * _LN2_LO - _HALF * z
    y = (t + y) + e * _LN2_HI
    y = y if x < _INF else x  # inf and NaN stay
    y = -_INF if x == 0 else y
    return _NAN if x < 0 else y


@njit(inline="always", error_model="numpy")
def log1p_f32(x: float) -> float:
    """ln(1 + x) for float32 x, vectorizable: ln u for u = fl(1 + x), plus the rounding
    error of u, (x - (u - 1)) / u, to first order (see the module docstring)."""
    u = x + _ONE
    y = log_f32(u) + (x - (u - _ONE)) / u
    y = y if (x < _INF and u != 0) else log_f32(u)  # inf, NaN, -1 (u = 0), below -1
    return x if u == _ONE else y  # |x| <= 2^-24: log1p(x) rounds to x (and -0 stays -0)


_ERF_MAX = _F(4.0)  # erf(4) rounds to 1 in float32
_ERF_P = tuple(np.float64(_F(c)) for c in (  # the float32 coefficients, evaluated in float64
    -2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
    -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02))
_ERF_Q = tuple(np.float64(_F(c)) for c in (
    -1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
    -1.42647390514189e-02))


@njit(inline="always", error_model="numpy")
def erf_f32(x: float) -> float:
    """erf(x) for float32 x, vectorizable (see the module docstring)."""
    xc = _ERF_MAX if x > _ERF_MAX else x
    xc = -_ERF_MAX if xc < -_ERF_MAX else xc
    xd = np.float64(xc)
    x2 = xd * xd
    y = np.float32(xd * (_poly(_ERF_P, x2) / _poly(_ERF_Q, x2)))
    y = _ONE if y > _ONE else y
    y = -_ONE if y < -_ONE else y
    return y if x == x else x


# -- in float64, rounded once: cosh, sinh, pow ------------------------------------------------
# Float32 range reduction costs these several ulp (cosh(89) - ln2 in float32 loses 2^-18 of
# it), so they reduce and sum in float64, ~2^-37 relative, and round once to float32: that
# rounding makes overflow to inf and subnormal results exactly what IEEE float32 gives.

_D = np.float64
_LN2_D, _LOG2E_D, _HALF_D, _ONE_D, _TWO_D = _D(np.log(2.0)), _D(1 / np.log(2.0)), _D(0.5), _D(1), _D(2)
_COSH_P = tuple(_D(1 / math.factorial(k)) for k in (8, 6, 4, 2, 0))  # cosh r, Taylor in r^2
_SINH_P = tuple(_D(1 / math.factorial(k)) for k in (9, 7, 5, 3, 1))  # sinh r / r, in r^2


@njit(inline="always")
def _exp_parts(z: float) -> tuple:
    """(n, cosh r, sinh r) with z = n ln2 + r, |r| <= ln2/2, for float64 z (|n| < 1000):
    e^z = 2^n (cosh r + sinh r).  The Taylor series stop at r^8 and r^9: 2^-37 relative."""
    n = np.floor(_fma(z, _LOG2E_D, _HALF_D))
    r = _fma(-n, _LN2_D, z)
    r2 = r * r
    return n, _poly(_COSH_P, r2), r * _poly(_SINH_P, r2)


_HYP_MAX = _D(100.0)  # cosh and sinh leave float32 above 89.42: clamped here, still > FLT_MAX


@njit(inline="always")
def _cosh_sinh(x: np.float32) -> tuple:
    """(cosh |x|, sinh |x|) in float64 by the addition formulas over |x| = n ln2 + r: sinh r
    carries the small-|x| case (n = 0) with no cancellation."""
    ax = _D(abs(x))
    n, c, s = _exp_parts(_HYP_MAX if ax > _HYP_MAX else ax)
    e, f = _HALF_D * _pow2(n), _HALF_D * _pow2(-n)
    return _fma(c, e + f, s * (e - f)), _fma(c, e - f, s * (e + f))


@njit(inline="always", error_model="numpy")
def cosh_f32(x: np.float32) -> np.float32:
    """cosh(x) for float32 x, vectorizable (see the module docstring)."""
    y = np.float32(_cosh_sinh(x)[0])
    return y if x == x else x


@njit(inline="always", error_model="numpy")
def sinh_f32(x: np.float32) -> np.float32:
    """sinh(x) for float32 x, vectorizable (see the module docstring)."""
    y = np.float32(math.copysign(np.float32(_cosh_sinh(x)[1]), x))
    return y if x == x else x


_POW_Z = _D(200.0)  # |y ln x| beyond this is 0 or inf in float32 either way
_LOG_S = tuple(_D(2 / k) for k in (13, 11, 9, 7, 5, 3))  # ln m = s (2 + s^2 P(s^2)), atanh series


@njit(inline="always", error_model="numpy")
def pow_f32(x: np.float32, y: np.float32) -> np.float32:
    """x ** y for float32 x and y, vectorizable, with C's powf special cases (NumPy's float32
    power): see the module docstring."""
    ax = abs(x)
    sub = ax < _TINY
    m, e = _frexp(ax * _TWO23 if sub else ax)
    e = e - _F(23.0) if sub else e
    lo = m < _SQRT_HALF
    md = _D(m + m if lo else m)
    e = e - _ONE if lo else e
    s = (md - _ONE_D) / (md + _ONE_D)  # ln m = 2 atanh s, |s| < 0.172
    s2 = s * s
    lnx = _fma(_D(e), _LN2_D, s * _fma(_poly(_LOG_S, s2), s2, _TWO_D))
    lnx = lnx if ax < _INF else _D(ax)  # inf and NaN stay
    lnx = -_D(np.inf) if ax == 0 else lnx
    z = _D(y) * lnx
    z = _POW_Z if z > _POW_Z else z  # NaN stays
    n, c, t = _exp_parts(-_POW_Z if z < -_POW_Z else z)
    r = np.float32((c + t) * _pow2(n))
    r = r if z == z else np.float32(z)
    yint = np.floor(y) == y  # +-inf count as even integers, as in C
    odd = yint & (np.floor(y * _HALF) != y * _HALF)
    r = -r if odd & (math.copysign(_ONE, x) < 0) else r  # (-0) ** 3 = -0, (-0) ** -3 = -inf
    r = _NAN if (x < 0) & (x > -_INF) & (np.floor(y) != y) else r  # also y NaN
    return _ONE if (y == 0) | (x == _ONE) | ((ax == _ONE) & (abs(y) == _INF)) else r


@njit(inline="always")
def fmax(a: float, b: float) -> float:
    """np.maximum for floats (NaN if either is NaN) as a compare and select, which vectorizes
    into max instructions where Numba's ufunc lowering does not."""
    return a if (a >= b or a != a) else b


@njit(inline="always")
def fmin(a: float, b: float) -> float:
    """np.minimum for floats (NaN if either is NaN), as `fmax`."""
    return a if (a <= b or a != a) else b


# -- reduction steps that LLVM vectorizes ----------------------------------------------------
# A loop `acc = acc + f(k)` runs scalar: IEEE addition is not associative, so LLVM may not
# split the chain into SIMD lanes.  The lanes plan decision (schedule/cpu.py `_lanes`) grants
# that license for one reduction: `radd` is an fadd marked `reassoc` (only that instruction;
# the body's arithmetic keeps its order), so the sum regroups within float rounding, as
# torch's vectorized sums do.  Max and min are exactly associative: `fmaximum`/`fminimum` are
# llvm.maximum/llvm.minimum (NaN if either is NaN, like np.maximum; -0 < +0), which LLVM
# vectorizes as reductions with no license at all.  About 5x faster than a scalar chain
# on rows in cache.

def _binary(emit):
    """An intrinsic `f(acc, b)` on floats, in the accumulator's type (b is cast to it),
    lowered by `emit(builder, acc, b)`."""
    @intrinsic
    def op(typingctx, a, b):
        if not (isinstance(a, types.Float) and isinstance(b, (types.Float, types.Integer))):
            return None

        def codegen(context, builder, sig, args):
            return emit(builder, args[0], context.cast(builder, args[1], sig.args[1], sig.args[0]))

        return a(a, b), codegen
    return op


def _llvm_binary(name: str):
    def emit(builder, a, b):
        from llvmlite import ir
        fn = builder.module.declare_intrinsic(name, [a.type], ir.FunctionType(a.type, [a.type] * 2))
        return builder.call(fn, [a, b])
    return emit


radd = _binary(lambda builder, a, b: builder.fadd(a, b, flags=("reassoc",)))  # a + b, regroupable
fmaximum = _binary(_llvm_binary("llvm.maximum"))  # max(a, b), NaN if either is NaN
fminimum = _binary(_llvm_binary("llvm.minimum"))  # min(a, b), NaN if either is NaN
