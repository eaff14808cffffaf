"""Issue 28 items 18-20 (item 19 is issue 26's item 4): accurate long float32 sums in every
reduction strategy, results that do not depend on the CPU's vector width, and texpr_ad's float32
GEMM with no writable folder.  No timing.

Long sums (plan.wide_sum): a float16/float32 sum of more than LONG_SUM terms folds into float64
through float32 partial sums of at most SUM_CHAIN terms (vectorized loops: blocks of SUM_BLOCK,
column sums: float32 rows per block of rows).  Before: one float32 accumulator (or one per SIMD
lane) added every term, and 1e6 terms of 0.1 summed to 99999.09 (100958.3 serially).  Each strategy below is checked on constant data, the worst case of a serial
float32 chain (every rounding errs the same way), against float64: within 1e-6 relative.

Bit-identity is promised run to run on one machine with one thread count (README, docs/kernels.md),
and tested exactly so; kernels that regroup lanes (vectorized differently on AVX2 and AVX-512)
are compared with tolerances tied to float32 rounding (tests/kernels/test_shared_loops.py).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import _env, te
from texpr_ad.kernels.cuda_render import CUDARenderer
from texpr_ad.ops import elementwise as ew
from texpr_ad.schedule import plan_kernel
from texpr_ad.schedule.plan import LONG_SUM, wide_sum
from texpr_ad.te.expr import Reduce
from texpr_ad.te.visit import walk

ROOT = Path(__file__).resolve().parents[2]
SEED = 2828
TENTH = np.float32(0.1)


def rng() -> np.random.Generator:
    print(f"seed {SEED}")
    return np.random.default_rng(SEED)


def rel_err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want) / np.abs(want)))


# -- item 19: the done-when figure ---------------------------------------------------------------

def test_a_float32_sum_of_a_million_tenths_is_within_1e6_of_float64():
    n = 10**6
    x = te.placeholder((n,), "float32", name="x")
    k = te.reduce_axis((0, n), name="k")
    y = te.compute((), lambda: te.sum(x[k], axis=k), name="y")
    kern = ta.build([y], [x])
    assert "wide: 1000000 float32 terms" in str(kern.plan), str(kern.plan)
    xs = np.full(n, TENTH)
    (got,) = kern(xs)
    assert rel_err(got, xs.astype(np.float64).sum()) < 1e-6, got  # before: 99999.09, 9e-6


# -- every CPU reduction strategy, on constant data -----------------------------------------------

def _split_lanes():
    n = 600_000
    x = te.placeholder((n,), "float32", name="x")
    k = te.reduce_axis((0, n), name="k")
    y = te.compute((), lambda: te.sum(x[k] * 2.0, axis=k), name="y")
    return ([y], [x], [(n,)], lambda p: p.stage("y").cpu.accumulate.vector,
            lambda a: [(2 * a).sum()])


def _split_serial():  # where=: chunks fold serially
    n = 600_000
    x = te.placeholder((n,), "float32", name="x")
    k = te.reduce_axis((0, n), name="k")
    y = te.compute((), lambda: te.sum(x[k], axis=k, where=x[k] > 0), name="y")
    return ([y], [x], [(n,)], lambda p: (p.stage("y").cpu.accumulate.split is not None
                                          and not p.stage("y").cpu.accumulate.vector),
            lambda a: [a.sum()])


def _symbolic():  # a count known at the call: split into chunks of a size computed at the call,
    n = te.var("n")  # each stepped like lanes (a symbolic extent counts as long)
    x = te.placeholder((n,), "float32", name="x")
    k = te.reduce_axis((0, n), name="k")
    y = te.compute((), lambda: te.sum(x[k], axis=k), name="y")
    return ([y], [x], [(300_000,)],
            lambda p: p.stage("y").cpu.accumulate.split is not None and p.stage("y").cpu.accumulate.vector,
            lambda a: [a.sum()])


def _lanes():  # row sums, vectorized into SIMD lanes
    x = te.placeholder((64, 40_000), "float32", name="x")
    k = te.reduce_axis((0, 40_000), name="k")
    y = te.compute((64,), lambda i: te.sum(x[i, k], axis=k), name="y")
    return ([y], [x], [(64, 40_000)],
            lambda p: p.stage("y").cpu.lanes > 1 and p.stage("y").cpu.accumulate is None,
            lambda a: [a.sum(1)])


def _row_accumulation():  # reduction loops outside the contiguous axis: a row of accumulators
    x = te.placeholder((64, 8000, 16), "float32", name="x")
    k = te.reduce_axis((0, 8000), name="k")
    y = te.compute((64, 16), lambda b, j: te.sum(x[b, k, j], axis=k), name="y")
    return ([y], [x], [(64, 8000, 16)],
            lambda p: p.stage("y").cpu.accumulate.row is not None and p.stage("y").cpu.accumulate.split is None,
            lambda a: [a.sum(1)])


def _split_rows():  # column sums: a row of partial results per chunk
    x = te.placeholder((80_000, 32), "float32", name="x")
    k = te.reduce_axis((0, 80_000), name="k")
    y = te.compute((32,), lambda j: te.sum(x[k, j], axis=k), name="y")
    return ([y], [x], [(80_000, 32)],
            lambda p: p.stage("y").cpu.accumulate.row is not None and p.stage("y").cpu.accumulate.split is not None,
            lambda a: [a.sum(0)])


def _riders():  # a scalar stepped sum riding in column sums' loops (schedule/fuse.py)
    x = te.placeholder((16_000, 64), "float32", name="x")
    i, j = te.reduce_axis((0, 16_000), name="i"), te.reduce_axis((0, 64), name="j")
    i2 = te.reduce_axis((0, 16_000), name="i")
    total = te.compute((), lambda: te.sum(x[i, j] * 2.0, axis=[i, j]), name="total")
    col = te.compute((64,), lambda c: te.sum(x[i2, c] * 3.0, axis=i2), name="col")
    return ([total, col], [x], [(16_000, 64)],
            lambda p: p.joined("total") and p.loop_of("total").kind == "stepped" and p.stage("col").cpu.accumulate.row is not None,
            lambda a: [(2 * a).sum(), (3 * a).sum(0)])


def _row_fold():  # a row sum folded into the loop of the elementwise stage it reduces
    x = te.placeholder((64, 20_000), "float32", name="x")
    k = te.reduce_axis((0, 20_000), name="k")
    e = te.compute((64, 20_000), lambda i, j: x[i, j] * 0.5, name="e")
    s = te.compute((64,), lambda i: te.sum(e[i, k], axis=k), name="s")
    y = te.compute((64, 20_000), lambda i, j: e[i, j] / s[i], name="y")
    return ([y, s], [x], [(64, 20_000)], lambda p: p.loop_of("s").kind == "row",
            lambda a: [(0.5 * a) / (0.5 * a).sum(1, keepdims=True), (0.5 * a).sum(1)])


def _nested_lanes():  # a sum over (n, h, w): one stepped accumulator per axis
    x = te.placeholder((8, 4, 2048, 64), "float32", name="x")
    r = [te.reduce_axis((0, e), f"r{d}") for d, e in ((0, 8), (2, 2048), (3, 64))]
    y = te.compute((4,), lambda c: te.sum(x[r[0], c, r[1], r[2]], axis=r), name="y")
    return ([y], [x], [(8, 4, 2048, 64)], lambda p: p.stage("y").cpu.lanes > 1,
            lambda a: [a.sum((0, 2, 3))])


STRATEGIES = {f.__name__[1:]: f for f in (_split_lanes, _split_serial, _symbolic, _lanes,
                                           _row_accumulation, _split_rows, _riders, _row_fold,
                                           _nested_lanes)}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_long_float32_sums_are_accurate_in_every_strategy(name):
    """Before: 2e-6 to 4e-4 off (one float32 chain per accumulator or lane); now within
    float32 rounding of float64 (a few 1e-8), asserted at 1e-6."""
    outs, ins, shapes, planned, ref = STRATEGIES[name]()
    kern = ta.build(outs, ins)
    assert planned(kern.plan), str(kern.plan)
    assert "wide:" in str(kern.plan), str(kern.plan)
    (xs,) = [np.full(shape, TENTH) for shape in shapes]
    got = kern(xs)
    for o, g, w in zip(outs, got, ref(xs.astype(np.float64)), strict=True):
        assert rel_err(g, w) < 1e-6, (o.name, rel_err(g, w))


def test_wide_column_sums_keep_float32_rows_in_their_simd_loop():
    """Column sums fold blocks of 64 rows into a float32 row (the SIMD loop over columns stays
    float32) added into the float64 partial row per block; a 1-D chunk folds float32 blocks
    of 256 terms whose index counts up from a non-negative start (so it vectorizes)."""
    outs, ins, *_ = _split_rows()
    src = ta.build(outs, ins).source
    assert "y_blk = np.empty(32, dtype=np.float32)" in src and ", 64):" in src, src
    assert "dtype=np.float64" in src and "y_part[y_c, j] = y_part[y_c, j] + y_blk[j]" in src, src
    outs, ins, *_ = _split_lanes()
    src = ta.build(outs, ins).source
    assert "y_s0 = max(y_c * 37500, 0)" in src and "range(min(256, y_n - y_kb * 256))" in src, src


def test_short_sums_keep_their_float32_accumulators():
    """A sum of at most LONG_SUM terms is planned and rendered as before (no float64, no blocks):
    softmax's row sums, layer_norm's statistics."""
    x = te.placeholder((256, LONG_SUM), "float32", name="x")
    k = ta.build([ew.softmax(x, -1)], [x])
    assert "float64" not in k.source and "_blk" not in k.source, k.source
    assert "wide" not in str(k.plan)
    r = next(e for e in walk(k.plan.stage("softmax_expsum").bodies[0]) if isinstance(e, Reduce))
    assert not wide_sum(r)


def test_float64_and_integer_sums_are_not_widened():
    for dtype in ("float64", "int32"):
        x = te.placeholder((10_000,), dtype, name="x")
        k = te.reduce_axis((0, 10_000), name="k")
        y = te.compute((), lambda: te.sum(x[k], axis=k), name="y")
        assert "wide" not in str(plan_kernel([y], [x]))


def test_a_window_depending_on_an_outer_axis_counts_its_longest_row():
    """Reduce bounds depending on an outer axis (a causal window, j <= i) count their largest
    extent: up to 64 terms is short, up to 5000 long."""
    for n, wide in ((64, False), (5000, True)):
        x = te.placeholder((n,), "float32", name="x")

        def causal(i):
            j = te.reduce_axis((0, i + 1), "j")
            return te.sum(x[j], axis=j)

        y = te.compute((n,), causal, name="y")
        assert ("wide" in str(plan_kernel([y], [x]))) is wide
        red = next(e for e in walk(y.op.body[0]) if isinstance(e, Reduce))
        assert wide_sum(red) is wide


# -- item 19: a mean-reduced loss against PyTorch -------------------------------------------------

def _losses():
    n = 10**6
    x = te.placeholder((n,), "float32", name="x")
    t = te.placeholder((n,), "float32", name="t")
    k1, k2 = te.reduce_axis((0, n), "k"), te.reduce_axis((0, n), "k")
    log1p = te.compute((), lambda: te.sum(te.log1p(x[k1] * x[k1]), axis=k1) / n, name="log1p")
    mse = te.compute((), lambda: te.sum((x[k2] - t[k2]) * (x[k2] - t[k2]), axis=k2) / n, name="mse")
    return x, t, log1p, mse


def _float32_reference(xs: np.ndarray, ts: np.ndarray) -> list[float]:
    """The two losses in float32 by PyTorch if installed, else by NumPy (pairwise sums)."""
    try:
        import torch
    except ImportError:
        return [float(np.log1p(xs * xs).mean()), float(((xs - ts) ** 2).mean())]
    xt, tt = torch.from_numpy(xs), torch.from_numpy(ts)
    return [float(torch.log1p(xt * xt).mean()), float(torch.nn.functional.mse_loss(xt, tt))]


def test_a_mean_reduced_loss_is_within_10x_of_pytorchs_float32_error():
    x, t, log1p, mse = _losses()
    kern = ta.build([log1p, mse], [x, t])
    r = rng()
    xs, ts = r.standard_normal(10**6, dtype=np.float32), r.standard_normal(10**6, dtype=np.float32)
    x64, t64 = xs.astype(np.float64), ts.astype(np.float64)
    exact = [float(np.log1p(x64 * x64).mean()), float(((x64 - t64) ** 2).mean())]
    got = [float(v) for v in kern(xs, ts)]
    ref = _float32_reference(xs, ts)
    for name, g, f, e in zip(("log1p", "mse"), got, ref, exact, strict=True):
        ulp = float(np.spacing(np.float32(e))) / abs(e)  # the float32 result's own rounding
        bound = 10 * max(abs(f - e) / abs(e), ulp / 2)
        print(name, "ours", abs(g - e) / abs(e), "reference", abs(f - e) / abs(e))
        assert abs(g - e) / abs(e) <= bound, (name, g, f, e)  # before: 3.2e-5 for log1p


# -- CUDA: the same rule in the thread and block strategies ---------------------------------------

def test_cuda_kernels_accumulate_long_sums_in_float64():
    n = 50_000
    x = te.placeholder((4, n), "float32", name="x")
    k = te.reduce_axis((0, n), name="k")
    y = te.compute((4,), lambda i: te.sum(x[i, k], axis=k), name="y")
    src = CUDARenderer().render(plan_kernel([y], [x], target="cuda"))
    assert "cuda.shared.array(256, np.float64)" in src, src
    assert re.search(r"y_acc\w* = np.float64\(0.0\)", src), src  # split or not: float64 partials
    assert re.search(r"np.float32\(y_acc\w*\)", src), src
    xb = te.placeholder((8192, n), "float32", name="xb")  # many points: a thread per point
    yb = te.compute((8192,), lambda i: te.sum(xb[i, k], axis=k), name="yb")
    plan = plan_kernel([yb], [xb], target="cuda")
    assert plan.stage("yb").cuda.strategy == "thread"
    assert "yb_acc = np.float64(0.0)" in CUDARenderer().render(plan)


CUDA_SCRIPT = textwrap.dedent("""
    import numpy as np, texpr_ad as ta
    from texpr_ad import te
    n = 6000
    x = te.placeholder((2, n), "float32", name="x")
    k = te.reduce_axis((0, n), name="k")
    y = te.compute((2,), lambda i: te.sum(x[i, k], axis=k), name="y")
    kern = ta.build([y], [x], target="cuda")
    xs = np.full((2, n), np.float32(0.1))
    (got,) = kern(xs)
    want = xs.astype(np.float64).sum(1)
    print("ERR", float(np.max(np.abs(got - want) / want)), kern.plan.stage("y").cuda.strategy)
""")


def test_a_long_block_reduction_on_the_cuda_simulator_is_accurate():
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run([sys.executable, "-c", CUDA_SCRIPT], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    err, strategy = res.stdout.split("ERR")[1].split()
    assert strategy == "block" and float(err) < 1e-6, res.stdout  # before: 5.3e-6 (8 threads)


# -- item 20: what does not depend on the CPU ------------------------------------------------------

def _child(code: str, cache: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "TEXPR_CACHE_DIR": str(cache), "NUMBA_NUM_THREADS": "2", **env,
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=600)


COUNT_SCRIPT = textwrap.dedent("""
    import numpy as np, texpr_ad as ta
    from texpr_ad import te
    from texpr_ad.kernels import cache
    x = te.placeholder((64, 512), "float32", name="x")
    k = te.reduce_axis((0, 512), name="k")
    y = te.compute((64,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="y")
    (got,) = ta.build([y], [x])(np.ones((64, 512), np.float32))
    assert (got == 512).all()
    print("COUNTS", *cache.compile_counts())
""")


def _counts(res: subprocess.CompletedProcess) -> tuple[int, int]:
    assert res.returncode == 0, res.stderr[-3000:]
    compiled, loaded = res.stdout.split("COUNTS")[1].split()
    return int(compiled), int(loaded)


def test_the_kernel_cache_never_loads_code_compiled_for_another_cpu(tmp_path):
    """Numba keys its cache index by the CPU name and features it compiled for (texpr_ad's files
    are keyed by source only): a kernel compiled for this CPU is not loaded by a process that
    targets another one (NUMBA_CPU_NAME=generic: baseline x86-64), which compiles its own."""
    assert _counts(_child(COUNT_SCRIPT, tmp_path)) == (1, 0)
    assert _counts(_child(COUNT_SCRIPT, tmp_path)) == (0, 1)
    generic = {"NUMBA_CPU_NAME": "generic", "NUMBA_CPU_FEATURES": ""}
    assert _counts(_child(COUNT_SCRIPT, tmp_path, **generic)) == (1, 0)
    assert _counts(_child(COUNT_SCRIPT, tmp_path, **generic)) == (0, 1)


RUN_SCRIPT = textwrap.dedent("""
    import numpy as np, texpr_ad as ta
    from texpr_ad import te
    from texpr_ad.ops import elementwise as ew
    x = te.placeholder((64, 5000), "float32", name="x")
    k1, k2 = te.reduce_axis((0, 64), "i"), te.reduce_axis((0, 64), "i")
    j1 = te.reduce_axis((0, 5000), "j")
    cols = te.compute((5000,), lambda c: te.sum(te.exp(x[k1, c]), axis=k1), name="cols")
    total = te.compute((), lambda: te.sum(x[k2, j1] * 0.5, axis=[k2, j1]), name="total")
    kern = ta.build([ew.softmax(x, -1), cols, total], [x])
    xs = np.random.default_rng(4).standard_normal((64, 5000)).astype(np.float32)
    a, b = kern(xs), kern(xs)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    print("RESULT", b"".join(u.tobytes() for u in a).hex()[:4000], sum(float(u.sum()) for u in a))
""")


def test_results_are_bit_identical_run_to_run_on_one_machine_and_thread_count(tmp_path):
    """What README promises: the same kernel on the same inputs gives the same bits in one
    process and in the next (same CPU, same NUMBA_NUM_THREADS): split reductions use a fixed
    number of chunks, combined in order, and lanes regroup the same way each time."""
    first, second = (_child(RUN_SCRIPT, tmp_path) for _ in range(2))
    assert first.returncode == 0 and second.returncode == 0, (first.stderr + second.stderr)[-3000:]
    assert first.stdout.split("RESULT")[1] == second.stdout.split("RESULT")[1]


GENERIC_SCRIPT = textwrap.dedent("""
    import numpy as np, texpr_ad as ta
    from texpr_ad import te
    n = 10**6
    x = te.placeholder((n,), "float32", name="x")
    k = te.reduce_axis((0, n), name="k")
    y = te.compute((), lambda: te.sum(x[k], axis=k), name="y")
    r = te.placeholder((64, 40000), "float32", name="r")
    j = te.reduce_axis((0, 40000), name="j")
    rows = te.compute((64,), lambda i: te.sum(r[i, j], axis=j), name="rows")
    got, = ta.build([y], [x])(np.full(n, np.float32(0.1)))
    got_rows, = ta.build([rows], [r])(np.full((64, 40000), np.float32(0.1)))
    want = np.float64(np.float32(0.1))
    print("ERR", abs(float(got) / (n * want) - 1), float(np.max(np.abs(got_rows / (40000 * want) - 1))))
""")


def test_long_sums_are_accurate_on_the_narrowest_vector_target(tmp_path):
    """The same accuracy with Numba compiling for baseline x86-64 (128-bit SSE2 vectors):
    a block of SUM_BLOCK terms over at least 4 lanes leaves each a chain of SUM_CHAIN."""
    res = _child(GENERIC_SCRIPT, tmp_path, NUMBA_CPU_NAME="generic", NUMBA_CPU_FEATURES="")
    assert res.returncode == 0, res.stderr[-3000:]
    errs = [float(e) for e in res.stdout.split("ERR")[1].split()]
    assert max(errs) < 1e-6, errs


@pytest.mark.parametrize("cpu,features,isa", [
    ("generic", None, None), ("sandybridge", "", None),  # SSE2 only; AVX without FMA
    ("haswell", "", "avx2"), ("x86-64", "+avx2,+fma", "avx2"),
    ("skylake-avx512", "", "avx512"), ("haswell", "+avx512f", "avx512")])
def test_the_native_gemm_follows_numbas_target(monkeypatch, cpu, features, isa):
    """TEXPR_AD_GEMM=auto asks LLVM about the CPU Numba compiles for (NUMBA_CPU_NAME and
    NUMBA_CPU_FEATURES, "" meaning the named CPU's own): AVX-512 or AVX2 + FMA turn the GEMM on
    (an AVX2 target forced on an AVX-512 machine gets the AVX2 path, as an AVX2 machine does),
    anything less keeps BLAS.  Before: only AVX-512 turned it on."""
    import llvmlite.binding as ll
    if not ll.get_process_triple().startswith(("x86_64", "amd64")):
        pytest.skip(f"x86-64 CPU names; Numba targets {ll.get_process_triple()}")
    monkeypatch.delenv("TEXPR_AD_GEMM", raising=False)
    monkeypatch.setenv("NUMBA_CPU_NAME", cpu)
    if features is None:
        monkeypatch.delenv("NUMBA_CPU_FEATURES", raising=False)
    else:
        monkeypatch.setenv("NUMBA_CPU_FEATURES", features)
    try:
        _env.native_gemm.cache_clear()
        assert _env.vector_isa(*_env.numba_target()) == isa
        assert _env.native_gemm() is (isa is not None)
    finally:
        _env.native_gemm.cache_clear()


# -- item 18: no writable folder at all ------------------------------------------------------------

GEMM_SCRIPT = textwrap.dedent("""
    import importlib.util, sys, tempfile, warnings
    from numba.core import caching
    tempfile.tempdir = sys.argv[1]          # the temp dir holds a file named like the cache
    warnings.simplefilter("always")
    # a read-only install: Numba may not write beside texpr_ad's own files (root could)
    pkg = importlib.util.find_spec("texpr_ad").submodule_search_locations[0]
    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # _CacheImpl before 0.68
    in_tree = next(c for c in impl._locator_classes if "InTree" in c.__name__)
    beside = in_tree.from_function.__func__
    in_tree.from_function = classmethod(
        lambda cls, fn, path: None if path.startswith(pkg) else beside(cls, fn, path))
    import numpy as np, texpr_ad as ta
    from texpr_ad import te
    from texpr_ad.kernels import gemm_f32
    a = te.placeholder((128, 128), "float32", name="a")
    k = te.reduce_axis((0, 128), name="k")
    c = te.compute((128, 128), lambda i, j: te.sum(a[i, k] * a[k, j], axis=k), name="c")
    xs = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
    got, = ta.build([c], [a])(xs)
    assert np.allclose(got, xs.astype(np.float64) @ xs, rtol=1e-4, atol=1e-3)
    print("GEMM", sum(gemm_f32._gemm.stats.cache_hits.values()), gemm_f32._gemm.stats.cache_misses)
""")


@pytest.mark.parametrize("texpr_cache", ["none", "set"])
def test_the_float32_gemm_runs_with_no_writable_numba_cache_folder(tmp_path, texpr_cache):
    """A read-only install (Numba may not write beside gemm_f32.py: the child drops that cache
    locator, which root could otherwise always use) with no writable home, cwd or temp dir.  Before: Numba raised
    "cannot cache function '_pack_a': no locator available" at the first float32 product.
    Now: with TEXPR_CACHE_DIR set the GEMM is cached there (the next process loads it); with
    no folder at all it is compiled in memory and the CacheWarning says so."""
    blocked = tmp_path / "blocked"
    for d in ("cwd", "tmp"):
        (blocked / d).mkdir(parents=True)
    (blocked / "cwd" / ".texpr_cache").write_text("a file where the cache folder would go")
    (blocked / "tmp" / "texpr_cache").write_text("a file where the cache folder would go")
    (blocked / "home").write_text("a file: no folder can be made under it")
    env = {**os.environ, "HOME": str(blocked / "home"), "XDG_CACHE_HOME": str(blocked / "home" / "c"),
           "TEXPR_AD_GEMM": "native", "NUMBA_NUM_THREADS": "2",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for v in ("NUMBA_CACHE_DIR", "TEXPR_CACHE_DIR", "NUMBA_CACHE_LOCATOR_CLASSES"):
        env.pop(v, None)
    if texpr_cache == "set":
        env["TEXPR_CACHE_DIR"] = str(tmp_path / "cache")

    def run() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", GEMM_SCRIPT, str(blocked / "tmp")],
                              cwd=blocked / "cwd", env=env, capture_output=True, text=True,
                              timeout=600)

    res = run()
    assert res.returncode == 0 and "no locator" not in res.stderr, res.stderr[-3000:]
    if texpr_cache == "none":
        assert "CacheWarning: no writable folder for the texpr_ad kernel cache" in res.stderr
        assert "GEMM 0" in res.stdout  # compiled, nothing loaded
    else:
        assert "CacheWarning" not in res.stderr, res.stderr[-3000:]
        assert list((tmp_path / "cache" / "numba").rglob("gemm_f32._gemm-*.nbi"))
        again = run()
        assert again.returncode == 0 and "GEMM 1" in again.stdout, again.stderr[-3000:]


def test_wide_sum_of_a_static_count_runs_full_blocks_then_its_tail():
    """A sum of 3136 float32 terms (batch norm's 56 x 56 pixels, merged) folds 12 blocks of 256
    and a last block of 64, each loop with a count LLVM knows (a `min(256, ...)` count made a
    loop of two accumulators 1.4x slower); the same blocks as before, so the same value."""
    x = te.placeholder((4, 16, 3136), "float32", name="x")  # 4 x 3136 terms: a wide sum
    n, k = te.reduce_axis((0, 4), name="n"), te.reduce_axis((0, 3136), name="k")
    n2, k2 = te.reduce_axis((0, 4), name="n2"), te.reduce_axis((0, 3136), name="k2")
    s = te.compute((16,), lambda c: te.sum(x[n, c, k] * x[n, c, k], axis=[n, k]), name="s")
    t = te.compute((16,), lambda c: te.sum(x[n2, c, k2], axis=[n2, k2]), name="t")
    kern = ta.build([s, t], [x])
    src = kern.source
    assert "range(12):" in src and "range(256):" in src and "range(64):" in src, src
    assert "min(256" not in src, src
    xs = np.random.default_rng(5).random((4, 16, 3136)).astype(np.float32)  # no cancellation
    got_s, got_t = kern(xs)
    x64 = xs.astype(np.float64)
    assert rel_err(got_s, (x64 * x64).sum((0, 2))) < 1e-6
    assert rel_err(got_t, x64.sum((0, 2))) < 1e-6
