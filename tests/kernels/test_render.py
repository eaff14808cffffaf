"""Structure of plans and generated source (rendering only: nothing is compiled here)."""
from __future__ import annotations

import math
import re
import os
import subprocess
import sys

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.kernels import vecmath
from texpr_ad.kernels.numba_cpu import CPURenderer
from texpr_ad.kernels.render import EXPR_RULES
from texpr_ad.schedule import ComputeStage, ScatterStage, ScheduleError, plan_kernel
from texpr_ad.te.expr import Call, IterVar, Var, const
from texpr_ad.te.interp import NUMPY_IMPL
from texpr_ad.te.ops import UNARY, Op
from texpr_ad.te.tensor import ScatterOp, Tensor


def render(outputs, inputs, **ov):
    plan = plan_kernel(outputs, inputs, "cpu", ov or None)
    return plan, CPURenderer().render(plan)


def matmul(n=te.var("n"), name="A"):
    A = te.placeholder((n, 64), "float32", name=name)
    W = te.placeholder((64, 32), "float32", name="W")
    k = te.reduce_axis((0, 64), name="k")
    Y = te.compute((n, 32), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="Y")
    return A, W, Y


# -- coverage by table --------------------------------------------------------------------

def test_every_op_has_a_render_rule():
    missing = [op.name for op in Op if op not in EXPR_RULES]
    assert not missing, f"no render rule for {missing}"


def _sample_args(op: Op, dtype: str) -> list[tuple]:
    if op in (Op.AND, Op.OR):
        return [(a, b) for a in (True, False) for b in (True, False)]
    if op is Op.NOT:
        return [(True,), (False,)]
    if op is Op.SELECT:
        return [(True, 2.5, -1.5), (False, 2.5, -1.5)]
    if op in (Op.SHL, Op.SHR, Op.BITWISE_AND, Op.BITWISE_OR, Op.BITWISE_XOR, Op.BITWISE_NOT):
        return [(13, 2), (-13, 1)]
    if dtype.startswith("int"):
        return [(-7, 2), (7, -2), (-7, -3), (9, 4)] if op is not Op.POW else [(3, 2), (-2, 3)]
    if op in (Op.LOG, Op.SQRT, Op.RSQRT, Op.LOG1P, Op.POW):
        return [(0.75,), (2.5,)] if op is not Op.POW else [(0.75, 1.5), (2.5, -0.5)]
    if op in (Op.ROUND,):
        return [(0.5,), (1.5,), (-2.5,), (-0.3,)]
    return [(-1.25, 0.75), (2.5, -0.5), (0.5, 1.5)]


VECMATH = {n: getattr(vecmath, n) for n in ("exp_f32", "tanh_f32", "fmax", "fmin")}


@pytest.mark.parametrize("op", [op for op in Op if op is not Op.CAST], ids=lambda o: o.name)
def test_render_rule_semantics_in_python(op):
    """Each rule, run as plain Python/NumPy scalar code, agrees with the reference NUMPY_IMPL."""
    int_ops = {Op.FLOORDIV, Op.FLOORMOD, Op.DIV, Op.SHL, Op.SHR, Op.POW, Op.ABS, Op.SIGN}
    for dtype in (["float64"] + (["int64"] if op in int_ops else [])):
        for vals in _sample_args(op, dtype):
            if op in (Op.SHL, Op.SHR, Op.BITWISE_AND, Op.BITWISE_OR, Op.BITWISE_XOR, Op.BITWISE_NOT):
                dtype = "int64"
            args = [const(v, "bool" if isinstance(v, bool) else dtype) for v in vals]
            n = {Op.SELECT: 3}.get(op, 1 if op in (Op.NOT,) or op.name in _UNARY else 2)
            args = args[:n]
            rdtype = "bool" if op in (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE, Op.AND, Op.OR,
                                       Op.NOT) else dtype
            if op is Op.SELECT:
                args = [const(vals[0], "bool"), const(vals[1], "float64"), const(vals[2], "float64")]
            names = {Var(f"x{k}", a.dtype): f"x{k}" for k, a in enumerate(args)}
            e = Call(op, tuple(names), rdtype)
            src = CPURenderer().render_expr(e, names)
            env = {"np": np, "math": math, **VECMATH, **{f"x{k}": np.array(a.value, a.dtype)[()]
                                              for k, a in enumerate(args)}}
            got = eval(src, env)  # noqa: S307 - our own generated expression
            ref = NUMPY_IMPL.get(op, np.where)  # SELECT is special-cased by the evaluator
            want = ref(*[np.array(a.value, a.dtype) for a in args])
            assert np.allclose(np.float64(got), np.float64(want), equal_nan=True), (op, vals, src)


_UNARY = {o.name for o in UNARY}


def test_select_is_lazy_and_float32_consts_are_typed():
    x = Var("x", "float32")
    A = te.placeholder((4,), "float32", name="A")
    i = Var("i", "int32")
    e = te.if_then_else(i > 0, A[i - 1] * 0.5, x)
    src = CPURenderer().render_expr(e, {x: "x", i: "i"})
    assert src == "(A[i - 1] * np.float32(0.5)) if (i > 0) else x"


# -- loop structure -------------------------------------------------------------------------------

def test_matmul_prange_outer_and_contiguous_inner():
    A, W, Y = matmul()
    plan, src = render([Y], [A, W], Y={"blas": False, "accumulate": False})  # the plain loop nest
    (st,) = plan.stages
    assert isinstance(st, ComputeStage) and st.parallel and st.fused == 1
    assert st.order[-1] is st.axes[-1]  # innermost loop is the last (contiguous) axis
    lines = [ln.strip() for ln in src.splitlines()]
    k_par = lines.index("for i in prange(n):")
    assert lines[k_par + 1] == "for j in range(32):"
    assert "Y_acc = np.float32(0.0)" in lines
    assert "for k in range(64):" in lines
    assert "def texpr_kernel(A, W, n):" in src
    assert "sum over k in a local float32 accumulator" in str(plan)


def test_fused_prange_over_flattened_axes():
    A = te.placeholder((8, 16, 32), "float64", name="A")
    Y = te.compute((8, 16, 32), lambda a, b, c: A[a, b, c] + 1.0, name="Y")
    plan, src = render([Y], [A])
    st = plan.stages[0]
    assert st.fused == 2 and [a.name for a in st.parallel_axes] == ["a", "b"]
    assert "for Y_f in prange(8 * 16):" in src
    assert "a = Y_f // 16" in src and "b = Y_f % 16" in src
    assert "prange(fused a * b)" in str(plan)


def test_serial_override_and_small_stages():
    A, W, Y = matmul()
    plan, src = render([Y], [A, W], Y={"parallel": False})
    assert "prange" not in src.split("def texpr_kernel")[1]
    assert "parallel=" not in src  # no parallel decorator without a parallel loop
    B = te.placeholder((4,), "float32", name="B")
    Z = te.compute((4,), lambda i: B[i] * 2.0, name="Z")
    plan, src = render([Z], [B])
    assert not plan.stages[0].parallel and "serial: only 4 iterations" in str(plan)


def test_zero_dim_stage_has_no_loop():
    A = te.placeholder((10,), "float32", name="A")
    k = te.reduce_axis((0, 10), name="k")
    S = te.compute((), lambda: te.sum(A[k], axis=k), name="S")
    plan, src = render([S], [A])
    assert "S = np.empty(1, dtype=np.float32)" in src
    assert "S[0] = S_acc" in src


# -- inlining ----------------------------------------------------------------------------------------

def test_inline_elementwise_read_once_at_same_index():
    A = te.placeholder((100, 50), "float32", name="A")
    B = te.compute((100, 50), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((50, 100), lambda j, i: te.exp(B[i, j]), name="C")  # transposed read: still 1:1
    plan, src = render([C], [A])
    assert [s.name for s in plan.stages] == ["C"] and plan.inlined[0].stage == "B"
    assert "exp_f32((A[i, j] * np.float32(2.0)))" in src


def test_never_inline_reductions_broadcasts_or_multiple_reads():
    A = te.placeholder((100, 50), "float32", name="A")
    k = te.reduce_axis((0, 50), name="k")
    R = te.compute((100,), lambda i: te.sum(A[i, k], axis=k), name="R")      # has a reduction
    Bc = te.compute((100, 50), lambda i, j: A[i, j] + R[i], name="Bc")
    E = te.compute((100,), lambda i: A[i, 0] * 3.0, name="E")                # broadcast read
    F = te.compute((100, 50), lambda i, j: Bc[i, j] * E[i] + Bc[i, 49 - j], name="F")  # Bc at 2 points
    plan, _ = render([F], [A])
    assert [s.name for s in plan.stages] == ["R", "Bc", "E", "F"] and not plan.inlined
    text = str(plan)
    assert "it contains a reduction" in text
    assert "it is read 2 times" in text
    assert "not at a permutation of the reader's axes" in text


def test_inline_override():
    A = te.placeholder((100, 50), "float32", name="A")
    B = te.compute((100, 50), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((100, 50), lambda i, j: B[i, j] + 1.0, name="C")
    plan, _ = render([C], [A], B={"inline": False})
    assert [s.name for s in plan.stages] == ["B", "C"]
    assert "inlining turned off by override" in str(plan)


# -- scatter strategy -----------------------------------------------------------------------------------

def _scatter(index_of, name):
    ids = te.placeholder((50,), "int32", name="ids")
    g = te.placeholder((50, 8), "float32", name="g")
    t = IterVar("t", const(0), const(50), "data")
    d = IterVar("d", const(0), const(8), "data")
    index = index_of(ids, t, d)
    op = ScatterOp(name, (const(12), const(8)), "float32", (t, d), index, g[t, d], const(True))
    return Tensor(op, 0, op.shape, "float32"), ids, g


def test_scatter_parallel_only_over_injective_axis():
    T, ids, g = _scatter(lambda ids, t, d: (ids[t], d), "emb")
    plan, src = render([T], [ids, g])
    (st,) = plan.stages
    assert isinstance(st, ScatterStage)
    assert st.parallel_axis.name == "d" and st.parallel_dim == 1
    assert all(u.index[st.parallel_dim].same_as(st.parallel_axis) for u in st.updates)
    assert "+= g[t, d]" in src and "for d in range(" in src  # gathered rows: one 8-wide block
    assert "injective" in str(plan) and "blocks of 8 d values" in str(plan)


def test_scatter_serial_when_no_axis_is_injective():
    T, ids, g = _scatter(lambda ids, t, d: (ids[t], (d * 3) % 8), "mix")
    plan, src = render([T], [ids, g])
    (st,) = plan.stages
    assert st.parallel_axis is None and st.strategy == "serial"
    assert "prange" not in src.split("def texpr_kernel")[1]
    with pytest.raises(ScheduleError, match="would race"):
        render([T], [ids, g], mix={"parallel": True})


def test_parallel_scatter_zeroes_in_parallel_including_unwritten_rows():
    """A parallel scatter's target is allocated empty and zeroed in a prange (here over chunks
    of the flat array: its iterations own column blocks, not contiguous slices); rows no index reaches must read
    0, also when the target is a workspace buffer the previous call left full (2 MiB here)."""
    ids = te.placeholder((300,), "int32", name="ids")
    g = te.placeholder((300, 512), "float32", name="g")
    t = IterVar("t", const(0), const(300), "data")
    d = IterVar("d", const(0), const(512), "data")
    op = ScatterOp("acc", (const(1024), const(512)), "float32", (t, d), (ids[t], d), g[t, d],
                   const(True))
    acc = Tensor(op, 0, op.shape, "float32")
    out = te.compute((1024, 512), lambda i, j: acc[i, j] * 2.0, name="out")
    for target, inputs in ((acc, [ids, g]), (out, [ids, g])):
        plan, src = render([target], inputs)
        assert plan.stage("acc").cpu.zero == "chunks"  # the plan decides, the renderer prints
        assert "zeroed: the target in parallel, in chunks of the flat array" in str(plan)
        assert "acc = np.zeros" not in src and "acc.fill(0)" not in src
        assert ("for acc_z in prange((acc_flat.size + 16383) // 16384):\n"
                "        acc_flat[acc_z * 16384:(acc_z + 1) * 16384] = 0") in src, src
    k = ta.build([out], [ids, g])
    assert k.plan.workspace and k.plan.workspace[0].name == "acc"
    rng = np.random.default_rng(0)
    for _ in range(2):  # the second call finds the workspace full of the first call's sums
        i = rng.integers(0, 500, 300).astype(np.int32)  # rows 500.. are never written
        x = rng.standard_normal((300, 512)).astype(np.float32)
        want = np.zeros((1024, 512), np.float32)
        np.add.at(want, i, x)
        np.testing.assert_allclose(k(i, x)[0], 2 * want, rtol=1e-6, atol=1e-6)


def test_scatter_over_whole_rows_zeroes_its_own_slices():
    """acc[ids[t], :] += g over a prange of the target's leading dim: each iteration owns whole
    rows, so it zeroes its own slice (pages first touched by the thread writing them)."""
    src_ids = te.placeholder((64,), "int32", name="src")
    g = te.placeholder((64, 32, 16), "float32", name="g")
    r = IterVar("r", const(0), const(64), "data")
    c = IterVar("c", const(0), const(32), "data")
    d = IterVar("d", const(0), const(16), "data")
    op = ScatterOp("acc", (const(64), const(32), const(16)), "float32", (r, c, d),
                   (r, c, src_ids[r] % 16), g[r, c, d], const(True))
    acc = Tensor(op, 0, op.shape, "float32")
    plan, src = render([acc], [src_ids, g])
    assert plan.stage("acc").cpu.zero == "own slices", str(plan)
    assert "acc = np.empty((64, 32, 16)" in src and "acc[r].fill(0)" in src
    k = ta.build([acc], [src_ids, g])
    rng = np.random.default_rng(3)
    i, x = rng.integers(0, 99, 64).astype(np.int32), rng.standard_normal((64, 32, 16)).astype(np.float32)
    want = np.zeros((64, 32, 16), np.float32)
    for row in range(64):
        want[row, :, i[row] % 16] += x[row].sum(1)
    np.testing.assert_allclose(k(i, x)[0], want, rtol=1e-5, atol=1e-5)


# -- naming and determinism ---------------------------------------------------------------------------

def test_source_is_deterministic_and_names_unique():
    A1, W1, Y1 = matmul(name="A")
    A2, W2, Y2 = matmul(name="A")
    assert render([Y1], [A1, W1])[1] == render([Y2], [A2, W2])[1]
    # two inputs with the same name, and a name that is a Python keyword
    X = te.placeholder((64,), "float32", name="A")
    L = te.placeholder((64,), "float32", name="lambda")
    Z = te.compute((64,), lambda i: X[i] + L[i], name="A")
    _, src = render([Z], [X, L])
    assert "def texpr_kernel(A, lambda_1):" in src
    assert "A_1[i] = A[i] + lambda_1[i]" in src


def test_data_dependent_reduce_bounds_render_as_range():
    X = te.placeholder((30,), "float32", name="X")

    def body(j):
        lo = te.max(j - 3, 0)
        t = IterVar("t", lo, te.min(j, 26) + 1 - lo, "reduce")
        return te.sum(X[t], axis=t)

    Y = te.compute((30,), body, name="Y")
    _, src = render([Y], [X])
    assert "for t in range(max((j - 3), 0), min(j, 26) + 1):" in src


def test_cuda_target_without_gpu_or_simulator_is_a_clear_error():
    from texpr_ad.kernels import build
    from texpr_ad.kernels.cuda_runtime import CudaUnavailableError
    A, W, Y = matmul()
    with pytest.raises(CudaUnavailableError, match="NUMBA_ENABLE_CUDASIM"):
        build([Y], [A, W], target="cuda")


def test_rendering_does_not_import_numba():
    code = ("import sys\nfrom texpr_ad import te\nfrom texpr_ad.schedule import plan_kernel\n"
            "from texpr_ad.kernels.numba_cpu import CPURenderer\n"
            "A = te.placeholder((8,), 'float32', name='A')\n"
            "Y = te.compute((8,), lambda i: A[i] * 2.0, name='Y')\n"
            "print(CPURenderer().render(plan_kernel([Y], [A])))\n"
            "assert 'numba' not in sys.modules, 'rendering imported numba'\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert re.search(r"Y\[i\] = A\[i\] \* np\.float32\(2\.0\)", res.stdout)


def test_loop_invariant_reads_are_hoisted_but_guarded_reads_are_not():
    A = te.placeholder((64, 100), "float32", name="A")
    s = te.placeholder((64,), "float32", name="s")
    B = te.compute((64, 100), lambda i, j: A[i, j] / s[i], name="B")
    C = te.compute((64, 100), lambda i, j: te.if_then_else(j > 0, s[i], A[i, j]), name="C")
    _, src = render([B, C], [A, s])
    body = src.split("def texpr_kernel")[1]  # (B and C share their row loop: siblings)
    assert "s_r = s[i]" in body and "/ (s_r" in body  # loaded once per row
    store_c = next(ln for ln in body.splitlines() if ln.strip().startswith("C["))
    assert "if (j > 0) else A[i, j]" in store_c, body  # the select stays in the loop
    a = np.random.default_rng(0).standard_normal((64, 100)).astype("float32")
    sv = np.linspace(1, 2, 64).astype("float32")
    b, c = ta.build([B, C], [A, s])(a, sv)
    np.testing.assert_allclose(b, a / sv[:, None], rtol=1e-6)
    np.testing.assert_array_equal(c, np.where(np.arange(100)[None] > 0, sv[:, None], a))


def test_a_read_guarded_by_a_select_is_never_evaluated_outside_its_branch():
    # I[j] = 99 would fail the run-time check of A[I[j]] (KernelIndexError) if the branch's
    # bound locals were evaluated before the guard I[j] < 16.
    A = te.placeholder((16,), "float32", name="A")
    idx = te.placeholder((32,), "int64", name="I")
    Y = te.compute((32,), lambda j: te.if_then_else(
        idx[j] < 16, te.tanh(A[idx[j]]) * te.tanh(A[idx[j]]) + te.tanh(A[idx[j]]), 0.0), name="Y")
    _, src = render([Y], [A, idx])
    guard, rest = src.split("if I[j] < 16:\n", 1)
    assert "A[" not in guard and re.match(r"( +)Y_t = tanh_f32\(A\[", rest), src
    av = np.linspace(-2, 2, 16, dtype=np.float32)
    iv = np.where(np.arange(32) % 3 == 0, 99, np.arange(32) % 16)
    t = np.tanh(av[np.minimum(iv, 15)].astype(np.float64))
    want = np.where(iv < 16, t * t + t, 0.0)
    np.testing.assert_allclose(ta.build([Y], [A, idx])(av, iv)[0], want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("user_value", [None, "ACTIVE"])
def test_start_threads_leaves_the_environment_as_it_found_it(user_value):
    code = ("import os\nfrom texpr_ad.kernels.numba_cpu import start_threads\nstart_threads()\n"
            "import numba\nprint(os.environ.get('OMP_WAIT_POLICY'), numba.threading_layer())\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if user_value:
        env["OMP_WAIT_POLICY"] = user_value
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[0] == str(user_value)  # only Numba's runtime saw PASSIVE


def test_loop_invariant_calls_are_computed_once_per_row():
    A = te.placeholder((64, 100), "float64", name="A")
    s = te.placeholder((64,), "float64", name="s")
    B = te.compute((64, 100), lambda i, j: A[i, j] - te.log(s[i]), name="B")
    _, src = render([B], [A, s])
    loop = src.split("for j in range(100):")
    assert "np.log(s[i])" in loop[0] and "np.log" not in loop[1], src
    a = np.random.default_rng(1).standard_normal((64, 100))
    sv = np.linspace(1, 2, 64)
    np.testing.assert_allclose(ta.build([B], [A, s])(a, sv)[0], a - np.log(sv)[:, None], rtol=1e-14)


def test_hoisting_reciprocals_and_workspace_are_plan_decisions_and_overridable():
    A = te.placeholder((64, 100), "float32", name="A")
    s = te.placeholder((64,), "float32", name="s")
    B = te.compute((64, 100), lambda i, j: A[i, j] / s[i], name="B")
    plan, src = render([B], [A, s])
    assert plan.stage("B").cpu.hoisted and plan.stage("B").cpu.reciprocals
    assert "hoisted: s[i]" in str(plan) and "reciprocal: float32 division by s[i]" in str(plan)
    plan, src = render([B], [A, s], B={"reciprocal": False})
    assert not plan.stage("B").cpu.reciprocals and "/ s_r" in src
    plan, src = render([B], [A, s], B={"hoist": False})
    assert not plan.stage("B").cpu.hoisted and "s_r" not in src and "/ s[i]" in src
