"""Issue #13, class 1: every read is proven in bounds when defined, or checked when the kernel runs.

Definition-time proofs need no compiler; the run-time checks build a few small kernels.
"""
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.kernels.build import KernelArgumentError, KernelIndexError
from texpr_ad.kernels.numba_cpu import CPURenderer
from texpr_ad.ops import get
from texpr_ad.testing import derive
from texpr_ad.schedule.planner import plan_kernel
from texpr_ad.te.bounds import Verdict, dim_verdict, facts, guarded_reads, read_verdicts
from texpr_ad.te.expr import IterVar, const

A = te.placeholder((4,), "float64", name="A")


# -- the issue's repros: rejected at definition ----------------------------------------------------

@pytest.mark.parametrize("index, values", [
    (lambda i: i + 1, r"\[1, 4\]"),                  # returned [1, 2, 3, 2.4e-322]
    (lambda i: i - 1, r"\[-1, 2\]"),                 # wrapped to A[-1]
    (lambda i: i * 10**9, r"\[0, 3000000000\]"),     # segfaulted
])
def test_issue_repros_are_errors_at_definition(index, values):
    with pytest.raises(te.TensorError, match=rf"dim 0 of tensor 'A'.*{values}.*\[0, 4\)"):
        te.compute((4,), lambda i: A[index(i)], name="Y")


def test_some_points_out_of_bounds_is_enough():
    X = te.placeholder((4, 5), "float64", name="X")
    k = te.reduce_axis((0, 3), name="k")
    with pytest.raises(te.TensorError, match="dim 1 of tensor 'X'"):
        te.compute((4, 4), lambda i, j: te.sum(X[i, j + k], axis=k))  # j + k up to 5
    with pytest.raises(te.TensorError, match="'A'"):  # guards one side only
        te.compute((6,), lambda i: te.if_then_else(i >= 1, A[i - 1], 0.0))
    with pytest.raises(te.TensorError, match="'A'"):  # the guard does not cover the shift
        te.compute((4,), lambda i: te.if_then_else(i >= 1, A[i - 2], 0.0))
    with pytest.raises(te.TensorError, match="'A'"):  # a guard on the wrong branch
        te.compute((5,), lambda i: te.if_then_else(i < 4, 0.0, A[i]))


# -- guards, padding idioms and index arithmetic stay accepted -------------------------------------

def test_guards_and_idioms_are_accepted():
    X = te.placeholder((3, 10), "float64", name="X")
    w = te.placeholder((4,), "float64", name="w")
    k = te.reduce_axis((0, 4), name="k")
    ok = [
        te.compute((6,), lambda i: te.if_then_else(te.all(i >= 1, i < 5), A[i - 1], 0.0)),
        te.compute((6,), lambda i: te.if_then_else(te.any(i < 1, i >= 5), 0.0, A[i - 1])),
        te.compute((6,), lambda i: te.if_then_else((i >= 1) & (i - 1 < 4) & (A[i - 1] > 0),
                                                   A[i - 1], 0.0)),
        te.compute((3, 10), lambda b, t: te.sum(w[k] * X[b, t - k], axis=k, where=t >= k)),
        te.compute((6,), lambda c: te.if_then_else(c == 0, 1.0, te.if_then_else(
            c == 1, 2.0, A[c - 2]))),                                        # TOPI's c == 0 chain
        te.compute((8,), lambda i: A[te.if_then_else(i - 2 < 0, 0, te.if_then_else(
            i - 2 >= 4, 3, i - 2))]),                                         # edge padding (clamp)
        te.compute((8,), lambda i: A[te.min(te.max(i - 2, 0), 3)]),          # clamp by min/max
        te.compute((2, 2), lambda i, j: A[(i * 2 + j) // 2 * 2 + (i * 2 + j) % 2]),  # reshape
        te.compute((12,), lambda i: A[i // 3]),                              # repeat
        te.compute((4,), lambda i: te.if_then_else(False, A[i + 10], 0.0)),  # never read
    ]
    assert len(ok) == 10


def test_what_the_prover_misses_small_static_domains_settle_by_enumeration():
    """TOPI's adaptive pooling: the window end is a ceil written with a `% == 0` select."""
    X = te.placeholder((7,), "float64", name="X")

    def end(i):
        return te.if_then_else((i + 1) * 7 % 3 == 0, (i + 1) * 7 // 3, (i + 1) * 7 // 3 + 1)

    def pool(extra):
        def body(i):
            r = te.reduce_axis((0, end(i) + extra - i * 7 // 3), name="r")
            return te.sum(X[i * 7 // 3 + r], axis=r)
        return te.compute((3,), body, name="pool")

    x = np.arange(7.0)
    np.testing.assert_allclose(te.evaluate([pool(0)], {X: x})[0], [x[0:3].sum(), x[2:5].sum(),
                                                                   x[4:7].sum()])
    with pytest.raises(te.TensorError, match="'X'"):  # one more element runs past the end
        pool(1)


def test_symbolic_dims_are_proven_where_affine():
    n = te.var("n")
    B = te.placeholder((n,), "float64", name="B")
    C = te.placeholder((n, 64), "float64", name="C")
    te.compute((n - 1,), lambda i: B[i + 1])
    te.compute((n,), lambda i: te.if_then_else(i >= 1, B[i - 1], 0.0))
    with pytest.raises(te.TensorError, match="'B'"):  # B[n] at i = n - 1, whatever n is
        te.compute((n,), lambda i: B[i + 1])
    k = te.reduce_axis((0, 64), name="k")
    Y = te.compute((n,), lambda i: te.sum(C[i, k], axis=k))
    assert all(v is Verdict.PROVEN for r, f in guarded_reads(Y.op.body[0]) for v in read_verdicts(r, f))


def test_every_registry_operator_and_adjoint_still_defines():
    """The stronger proof rejects nothing the library defines (forward, adjoints and jvp are
    built by `derive` and the tests of tests/numeric; this checks a spread of index kinds)."""
    for name in ("conv2d_strided", "conv2d_transpose", "conv2d_winograd", "max_pool2d", "pad_edge",
                 "pad_reflect", "reshape", "space_to_depth", "resize_bilinear", "multibox_transform_loc",
                 "strided_slice", "adaptive_avg_pool2d"):
        assert derive(get(name)) is not None, name


def test_registry_kernels_have_no_new_run_time_checks():
    """Static shapes are proven: only data-dependent indices (take, roi_align) keep their checks,
    so the hot loops of the forward and adjoint kernels are unchanged."""
    for name in ("conv2d", "conv2d_transpose", "max_pool2d", "reshape", "resize_bilinear", "lrn"):
        d = derive(get(name))
        s = d.sample
        live = [g for g in d.grads if g is not None]
        for outs, ins in ((list(s.outputs), list(s.inputs)), (live, list(s.inputs) + d.heads)):
            src = CPURenderer().render(plan_kernel(outs, ins, "cpu", None))
            assert "_chk(" not in src, name


# -- the prover itself: sound by brute force -------------------------------------------------------

def test_prover_is_sound_on_random_affine_reads():
    """Whatever the prover calls PROVEN is in bounds at every live point (enumerated)."""
    seed = random.randrange(10**6)
    rnd = random.Random(seed)
    proven = 0
    for _ in range(300):
        i = IterVar("i", const(0), const(rnd.randint(1, 6)), "data")
        j = IterVar("j", const(rnd.randint(-2, 2)), const(rnd.randint(1, 5)), "reduce")
        a, b, c = rnd.randint(-3, 3), rnd.randint(-3, 3), rnd.randint(-4, 4)
        ix = a * i + b * j + c
        if rnd.random() < 0.3:
            ix = te.floordiv(ix, rnd.randint(1, 3))
        g = rnd.randint(-3, 3)
        guard = (i + j >= g) if rnd.random() < 0.5 else (ix < rnd.randint(1, 6))
        ext = rnd.randint(1, 8)
        known = facts(guard)
        v = dim_verdict(ix, const(ext), known)
        if v is not Verdict.PROVEN:
            continue
        proven += 1
        for iv in range(int(i.extent.value)):
            for jv in range(int(j.lo.value), int(j.lo.value) + int(j.extent.value)):
                env = {"i": iv, "j": jv}
                live = _eval(guard, env)
                if live:
                    x = _eval(ix, env)
                    assert 0 <= x < ext, f"seed {seed}: {ix} = {x} at {env}, extent {ext}"
    assert proven > 20, f"seed {seed}: the prover proved only {proven} reads"


def _eval(e, env):
    from texpr_ad.te.interp import NUMPY_IMPL
    from texpr_ad.te.expr import Call, Const
    match e:
        case Const(value=v):
            return v
        case IterVar(name=n):
            return env[n]
        case Call(op=op, args=args):
            return NUMPY_IMPL[op](*[np.int64(_eval(x, env)) for x in args])
    raise TypeError(e)


# -- run-time checks: data-dependent reduce ranges, symbolic dims, scatters -----------------------

@pytest.fixture(scope="module")
def segments():
    L = te.placeholder((3,), "int32", name="L")
    X = te.placeholder((3, 5), "float64", name="X")

    def seg(i):
        k = te.reduce_axis((0, L[i]), name="k")
        return te.sum(X[i, k] * X[i, k], axis=k)

    S = te.compute((3,), seg, name="S")
    dS = te.placeholder((3,), "float64", name="dS")
    (dX,) = ta.grad(S, [X], head=dS)
    tX = te.placeholder((3, 5), "float64", name="tX")
    (tS,) = ta.jvp([S], [X], [tX])
    return (ta.build([S], [L, X]), ta.build([dX], [L, X, dS]), ta.build([tS], [L, X, tX]))


def test_reduce_range_read_from_data(segments):
    fwd, bwd, tan = segments
    x = np.arange(15.0).reshape(3, 5)
    good = np.array([1, 5, 0], np.int32)
    (s,) = fwd(good, x)
    np.testing.assert_allclose(s, [0.0, (x[1] ** 2).sum(), 0.0])
    (g,) = bwd(good, x, np.ones(3))
    np.testing.assert_allclose(g, np.where(np.arange(5) < good[:, None], 2 * x, 0.0))
    assert "_chk(k" not in fwd.source  # checked once per row at loop entry, not per element
    # the plan holds the decision the renderer prints, and shows it
    (entry,) = fwd.plan.checks["S"].at_entry.values()
    assert [(r.tensor.name, d) for r, d, _ in entry] == [("X", 1)]
    assert "S: X[i, k] dim 1 at the entry of loop k" in str(fwd.plan), str(fwd.plan)
    bad = np.array([1, 6, 0], np.int32)  # row 1 would run into row 2 (the gradient wrote there)
    for kern, args, what in ((fwd, (bad, x), "read X"), (bwd, (bad, x, np.ones(3)), "scatter"),
                             (tan, (bad, x, x), "read")):
        with pytest.raises(KernelIndexError, match=rf"{what}.*dim 1.*= 5, outside \[0, 5\)"):
            kern(*args)


def test_symbolic_dims_that_do_not_fit_are_checked_at_the_call():
    n, m = te.var("n"), te.var("m")
    P = te.placeholder((n,), "float64", name="P")
    Q = te.placeholder((m,), "float64", name="Q")
    Y = te.compute((n,), lambda i: P[i] * Q[i] + P[i % m], name="Y")
    k = ta.build([Y], [P, Q])
    (y,) = k(np.arange(3.0), np.arange(4.0))
    np.testing.assert_allclose(y, np.arange(3.0) ** 2 + np.arange(3.0))
    with pytest.raises(KernelIndexError, match=r"tensor 'Q', dim 0, index `i` = 3, outside \[0, 3\)"):
        k(np.arange(4.0), np.arange(3.0))
    with pytest.raises(KernelArgumentError, match=r"`i % m` divides by `m` = 0 \(with m=0\)"):
        k(np.arange(4.0), np.zeros(0))
    with pytest.raises(IndexError):  # still an IndexError for code that caught those
        k(np.arange(4.0), np.arange(3.0))


def test_readme_matmul_with_symbolic_batch_has_no_checks():
    """Affine reads over symbolic dims are proven, so the kernels pay nothing for the checks."""
    n = te.var("n")
    X = te.placeholder((n, 64), "float32", name="X")
    W = te.placeholder((64, 32), "float32", name="W")
    k = te.reduce_axis((0, 64), name="k")
    Y = te.compute((n, 32), lambda i, j: te.sum(X[i, k] * W[k, j], axis=k), name="Y")
    dY = te.placeholder(Y.shape, "float32", name="dY")
    dX, dW = ta.grad(Y, [X, W], head=dY)
    for outs, ins in (([Y], [X, W]), ([dX, dW], [X, W, dY])):
        assert "_chk(" not in CPURenderer().render(plan_kernel(outs, ins, "cpu", None))


def test_cli_grad_does_not_report_ok(tmp_path):
    f = tmp_path / "op.py"
    f.write_text(textwrap.dedent("""
        from texpr_ad import te
        def shifted():
            A = te.placeholder((4,), "float64", name="A")
            return [te.compute((4,), lambda i: A[i + 1], name="Y")], [A]
    """))
    p = subprocess.run([sys.executable, "-m", "texpr_ad", "grad", f"{f}:shifted", "--no-source"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "out of bounds in dim 0 of tensor 'A'" in p.stderr + p.stdout


def test_cuda_simulator_checks_reduce_ranges():
    code = textwrap.dedent("""
        import numpy as np, texpr_ad as ta
        from texpr_ad import te
        from texpr_ad.kernels.build import KernelIndexError
        L = te.placeholder((3,), "int32", name="L")
        X = te.placeholder((3, 5), "float64", name="X")
        def seg(i):
            k = te.reduce_axis((0, L[i]), name="k")
            return te.sum(X[i, k], axis=k)
        S = te.compute((3,), seg, name="S")
        k = ta.build([S], [L, X], target="cuda")
        print(k(np.array([1, 5, 2], np.int32), np.ones((3, 5)))[0].tolist())
        try:
            k(np.array([1, 7, 2], np.int32), np.ones((3, 5)))
        except KernelIndexError as e:
            print("RAISED", e)
    """)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert "[1.0, 5.0, 2.0]" in p.stdout, p.stderr[-2000:]
    assert "RAISED stage S" in p.stdout and "= 6, outside [0, 5)" in p.stdout, p.stdout + p.stderr[-2000:]


def test_evaluate_data_dependent_out_of_bounds_is_a_texpr_index_error():
    """te.evaluate raised a plain IndexError; now EvaluateIndexError (TexprError and IndexError)
    naming the tensor, the index and its value, like the kernels' KernelIndexError."""
    from texpr_ad.te.interp import EvaluateIndexError
    A = te.placeholder((3,), "float64", name="A")
    idx = te.placeholder((3,), "int32", name="idx")
    Z = te.compute((3,), lambda i: A[idx[i]], name="Z")
    with pytest.raises(EvaluateIndexError, match=r"tensor 'A'.*`idx\[i\]` = 5, outside \[0, 3\)"):
        te.evaluate([Z], {A: np.ones(3), idx: np.array([0, 5, 1], np.int32)})
    assert issubclass(EvaluateIndexError, ta.TexprError) and issubclass(EvaluateIndexError, IndexError)
    G = te.compute((3,), lambda i: te.if_then_else(idx[i] < 3, A[idx[i]], 0.0), name="G")  # guarded
    np.testing.assert_array_equal(te.evaluate([G], {A: np.arange(3.0), idx: np.array([2, 5, 1], np.int32)})[0],
                                  [2.0, 0.0, 1.0])
