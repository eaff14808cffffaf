"""Your own operator, for `texpr-ad grad`.

Convention: a function of no arguments returning `(outputs, inputs)`, te tensors:
the outputs to differentiate and the placeholders they read, in call order.
Float placeholders are differentiated; use float64 for a tight numerical check.

    texpr-ad grad examples/custom_op.py:causal_conv
    texpr-ad grad examples/custom_op.py:scaled_rows --shapes x=3x8
"""
from texpr_ad import te


def causal_conv():
    """y[b, t] = tanh(sum_{k <= t} w[k] * x[b, t - k]): a causal 1-D filter and a tanh."""
    x = te.placeholder((3, 10), "float64", name="x")
    w = te.placeholder((4,), "float64", name="w")
    k = te.reduce_axis((0, 4), name="k")
    y = te.compute((3, 10),
                   lambda b, t: te.tanh(te.sum(w[k] * x[b, t - k], axis=k, where=t >= k)),
                   name="y")
    return [y], [x, w]


def scaled_rows():
    """y[i, j] = x[i, j] * s[j] / sqrt(mean_j x[i, j]^2 + 1e-6), with a symbolic row count n
    (give concrete shapes with --shapes x=3x8)."""
    n = te.var("n")
    x = te.placeholder((n, 8), "float64", name="x")
    s = te.placeholder((8,), "float64", name="s")
    j = te.reduce_axis((0, 8), name="j")
    ms = te.compute((n,), lambda i: te.sum(x[i, j] * x[i, j], axis=j) / 8.0, name="ms")
    y = te.compute((n, 8), lambda i, c: x[i, c] * s[c] * te.rsqrt(ms[i] + 1e-6), name="y")
    return [y], [x, s]
