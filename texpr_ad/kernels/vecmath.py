"""Vectorizable float32 `exp` and `tanh` for the generated CPU kernels.

Numba lowers `np.exp` on a float32 scalar to a call into libm's `expf`, and a
loop with a call in it is never vectorized: the llvmlite wheels carry no SVML.
Softmax, sigmoid, tanh and every loss spend most of their time there.  XLA's CPU
backend meets the same problem by emitting its own polynomial; so do these:
branch-free, only arithmetic, `floor`, comparisons and one integer bitcast, which
LLVM's loop vectorizer turns into SIMD code once they are inlined into a kernel.

exp_f32: Cody-Waite range reduction x = n ln2 + r (|r| <= ln2/2, ln2 split in
two so n ln2 is exact), a degree-6 polynomial for exp(r) (the Cephes `expf`
coefficients), and 2^n built from exponent bits in two halves, so results that
are subnormal (x < -87.3) or overflow (x > 88.72) come out as IEEE rounding gives
them.  NaN stays NaN, +-inf give inf and 0.  Max error 2 ulp over the finite
range (tests/kernels/test_vecmath.py sweeps it against NumPy's float64 exp).

tanh_f32: for |x| < 0.625 the odd rational x P(x^2) / Q(x^2) that Eigen and XLA
use for float32; above, 1 - 2 / (exp(2|x|) + 1) with exp_f32 (no cancellation once
|tanh| > 1/2, exactly +-1 where tanh rounds to it).  Max error 4 ulp.

float64 kernels keep NumPy/libm (the gradient checks run in float64 and need
its 0.5 ulp), so these are only used where the expression's dtype is float32.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

_F = np.float32


@intrinsic
def _pow2(typingctx, n):  # type: ignore[no-untyped-def]
    """2.0**n as float32 for an integral float32 n in [-126, 127]: exponent bits, no call."""
    if n != types.float32:
        return None

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        i32 = context.get_value_type(types.int32)
        e = builder.add(builder.fptosi(args[0], i32), i32(127))
        return builder.bitcast(builder.shl(e, i32(23)), context.get_value_type(types.float32))

    return types.float32(types.float32), codegen


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
    n = np.floor(xc * _LOG2E + _HALF)
    r = (xc - n * _LN2_HI) - n * _LN2_LO
    p = _EXP_P[0]
    p = p * r + _EXP_P[1]
    p = p * r + _EXP_P[2]
    p = p * r + _EXP_P[3]
    p = p * r + _EXP_P[4]
    p = p * r + _EXP_P[5]
    p = p * (r * r) + r + _ONE
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
    p = _TANH_P[0] * x2 + _TANH_P[1]
    p = p * x2 + _TANH_P[2]
    p = p * x2 + _TANH_P[3]
    p = p * x2 + _TANH_P[4]
    p = p * x2 + _TANH_P[5]
    p = p * x2 + _TANH_P[6]
    q = _TANH_Q[0] * x2 + _TANH_Q[1]
    q = q * x2 + _TANH_Q[2]
    q = q * x2 + _TANH_Q[3]
    y = x * p / q
    e = exp_f32(_TWO * abs(x))  # 1 - 2 / (e^2|x| + 1): no cancellation once |tanh| > 1/2
    z = _ONE - _TWO / (e + _ONE)
    z = z if x > 0 else -z
    y = y if abs(x) < _TANH_MID else z
    return x if abs(x) < _TANH_SMALL else y


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

def _binary(emit):  # type: ignore[no-untyped-def]
    """An intrinsic `f(acc, b)` on floats, in the accumulator's type (b is cast to it),
    lowered by `emit(builder, acc, b)`."""
    @intrinsic
    def op(typingctx, a, b):  # type: ignore[no-untyped-def]
        if not (isinstance(a, types.Float) and isinstance(b, (types.Float, types.Integer))):
            return None

        def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
            return emit(builder, args[0], context.cast(builder, args[1], sig.args[1], sig.args[0]))

        return a(a, b), codegen
    return op


def _llvm_binary(name: str):  # type: ignore[no-untyped-def]
    def emit(builder, a, b):  # type: ignore[no-untyped-def]
        from llvmlite import ir
        fn = builder.module.declare_intrinsic(name, [a.type], ir.FunctionType(a.type, [a.type] * 2))
        return builder.call(fn, [a, b])
    return emit


radd = _binary(lambda builder, a, b: builder.fadd(a, b, flags=("reassoc",)))  # a + b, regroupable
fmaximum = _binary(_llvm_binary("llvm.maximum"))  # max(a, b), NaN if either is NaN
fminimum = _binary(_llvm_binary("llvm.minimum"))  # min(a, b), NaN if either is NaN
