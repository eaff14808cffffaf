"""texpr_ad's own float32 GEMM (`kernels/gemm_f32.py`): results against float64 NumPy, on every
path through the kernel (whole tiles, row and column tails, k chunks, A or B read in place or
packed, groups of packed B blocks, broadcast batch operands, a strided output), and its
dispatch from contraction stages.

The kernel's LLVM vectors are legal on any CPU (LLVM splits them where registers are narrower),
so these run everywhere, on the vector path (`gemm_f32.ISA`: tile shape, packing) of the CPU
Numba compiles for.  `test_the_avx2_path_in_a_child` runs this file again in a process compiling
for AVX2 (Haswell), so an AVX-512 machine tests both paths; it needs an x86-64 CPU that runs
AVX2 code and is skipped elsewhere (ARM, older x86), saying why.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import _env, te
from texpr_ad.kernels import gemm_f32

MR, NR, KC, G = gemm_f32.MR, gemm_f32.NR, gemm_f32.KC, gemm_f32.G
PACKED = min(gemm_f32.PACK, 40) * MR + 5  # an item of this many rows packs B where the path does
ROOT = Path(__file__).resolve().parents[2]


def _operands(rng, nb, m, k, n, a_layout, b_layout):
    """float32 stacks (nb, m, k) and (nb, k, n) in the named memory layouts."""
    def make(rows, cols, layout, batch):
        if layout == "transposed":  # rows strided, columns contiguous in memory the other way
            return rng.standard_normal((batch, cols, rows)).astype(np.float32).transpose(0, 2, 1)
        if layout == "strided":  # every other column of a wider array
            return rng.standard_normal((batch, rows, 2 * cols)).astype(np.float32)[:, :, ::2]
        if layout == "broadcast":  # one matrix for every batch entry (zero batch stride)
            return np.broadcast_to(rng.standard_normal((1, rows, cols)).astype(np.float32),
                                   (batch, rows, cols))
        return rng.standard_normal((batch, rows, cols)).astype(np.float32)
    return make(m, k, a_layout, nb), make(k, n, b_layout, nb)


def _check(a, b, out):
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    scale = np.sqrt(a.shape[2])  # float32 rounding of a k-term sum of unit-variance products
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * scale * max(1.0, np.abs(ref).max()))


SHAPES = [  # (nb, m, k, n): whole tiles, tails in m / n / k, k over several chunks, tiny,
    # items packing B: whole groups of G blocks, a group cut short, a column tail in it
    (1, MR, 16, NR), (2, 4 * MR, 3 * KC, 2 * NR), (1, MR + 1, 7, NR + 1), (3, 2 * MR - 1, KC + 5, 3 * NR - 7),
    (1, 1, 1, 1), (2, 5, 2 * KC + 1, 3), (1, 200, 300, 70),
    (2, PACKED, KC + 9, 2 * G * NR + NR + 3),
]


@pytest.fixture(params=["threads", "one item"])
def items(request, monkeypatch):
    """Work items as the thread count splits them, or as for one thread: every row of a product
    in one item, so that B is packed where the path packs for that many rows, whatever the
    machine's thread count."""
    if request.param == "one item":
        monkeypatch.setattr(gemm_f32, "get_num_threads", lambda: 1)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("a_layout,b_layout", [("contiguous", "contiguous"),
                                               ("transposed", "strided"),
                                               ("broadcast", "transposed"),
                                               ("strided", "broadcast")])
def test_matches_float64_matmul(shape, a_layout, b_layout, items):
    rng = np.random.default_rng(sum(shape))
    a, b = _operands(rng, *shape, a_layout, b_layout)
    out = np.full((shape[0], shape[1], shape[3]), np.nan, np.float32)
    gemm_f32.matmul(a, b, out)
    _check(a, b, out)


def test_strided_output_and_many_threads_worth_of_items():
    """An output whose rows are not contiguous goes through a temporary; a product with many
    more items than threads gives every item its own rows and columns."""
    rng = np.random.default_rng(3)
    a, b = _operands(rng, 5, 3 * MR + 2, 40, 5 * NR + 3, "contiguous", "contiguous")
    wide = np.full((5, 3 * MR + 2, 2 * (5 * NR + 3)), np.nan, np.float32)
    out = wide[:, :, ::2]
    gemm_f32.matmul(a, b, out)
    _check(a, b, out)
    assert np.isnan(wide[:, :, 1::2]).all()  # the columns in between are untouched


def test_empty_k_gives_zeros_and_empty_m_n_write_nothing():
    a, b = np.ones((2, 3, 0), np.float32), np.ones((2, 0, 4), np.float32)
    out = np.full((2, 3, 4), np.nan, np.float32)
    gemm_f32.matmul(a, b, out)
    assert (out == 0).all()
    gemm_f32.matmul(np.ones((1, 0, 5), np.float32), np.ones((1, 5, 4), np.float32),
                    np.empty((1, 0, 4), np.float32))


def test_nonfinite_inputs_propagate_like_blas():
    rng = np.random.default_rng(4)
    a, b = _operands(rng, 1, 2 * MR + 3, 2 * KC + 9, NR + 5, "contiguous", "contiguous")
    a[0, 1, 7], a[0, MR * 2 + 1, KC + 3], b[0, 5, 2] = np.inf, np.nan, -np.inf
    out = np.empty((1, a.shape[1], b.shape[2]), np.float32)
    gemm_f32.matmul(a, b, out)
    ref = np.matmul(a, b)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(out), np.isinf(ref))


@pytest.fixture
def gemm_mode(monkeypatch):
    """Set TEXPR_AD_GEMM for one test (enabled() caches its answer)."""
    def set_mode(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv("TEXPR_AD_GEMM", raising=False)
        else:
            monkeypatch.setenv("TEXPR_AD_GEMM", value)
        gemm_f32.enabled.cache_clear()
    yield set_mode
    gemm_f32.enabled.cache_clear()


def test_mode_variable(gemm_mode):
    gemm_mode("blas")
    assert not gemm_f32.enabled()
    gemm_mode(" Native ")
    assert gemm_f32.enabled()
    gemm_mode("fast")
    with pytest.raises(ValueError, match="TEXPR_AD_GEMM='fast'.*auto, native, blas"):
        gemm_f32.enabled()


def _contraction(n: int, dtype: str):
    X = te.placeholder((n, n), dtype, name="X")
    W = te.placeholder((n, n), dtype, name="W")
    k = te.reduce_axis((0, n), name="k")
    Y = te.compute((n, n), lambda i, j: te.sum(X[i, k] * W[k, j], axis=k), name="Y")
    return ta.build([Y], [X, W])


@pytest.mark.parametrize("mode,dtype,native", [("native", "float32", True),
                                                ("blas", "float32", False),
                                                ("native", "float64", False)])
def test_contraction_stages_dispatch(gemm_mode, monkeypatch, mode, dtype, native):
    """A float32 contraction stage runs on this kernel when it is enabled, on BLAS otherwise;
    float64 always on BLAS.  The result is right either way."""
    gemm_mode(mode)
    calls: list[tuple] = []
    real = gemm_f32.matmul
    monkeypatch.setattr(gemm_f32, "matmul", lambda a, b, o: (calls.append(a.shape), real(a, b, o)))
    n = 128  # 2 n^3 >= MIN_FLOPS
    kern = _contraction(n, dtype)
    rng = np.random.default_rng(5)
    x, w = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
    (y,) = kern(x, w)
    assert bool(calls) == native
    np.testing.assert_allclose(y, x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("segments,rows,k,n", [(2, [3, 17, 5, 100, 200, 1, 7, 9, 11, 13, 50, 60, 70], 650, 70),
                                              (1, [0], 1, 1), (3, list(range(0, 4000, 33)), 700, 64),
                                              (2, list(range(PACKED * 7, 0, -7)), KC + 3, NR + 5)])
def test_matmul_a_rows(segments, rows, k, n, items):
    """A's rows are runs of a flat array per segment (any order, tails of rows, columns and k
    chunks), summed over the segments."""
    r = np.random.default_rng(k + n)
    flat = r.standard_normal((segments, max(rows) + k + 3)).astype(np.float32)
    b = r.standard_normal((segments, k, n)).astype(np.float32)
    out = np.full((len(rows), n), np.nan, np.float32)
    gemm_f32.matmul_a_rows(flat, np.asarray(rows, np.int64), b, out)
    a = np.stack([[flat[s, o:o + k] for o in rows] for s in range(segments)]).astype(np.float64)
    want = np.einsum("smk,skn->mn", a, b.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.sqrt(k))


@pytest.mark.parametrize("nb,m,k,n", [(2, 2 * MR + 1, KC + 7, 3 * NR + 5),
                                      (1, PACKED, 2 * KC + 3, G * NR + 9)])
def test_matmul_rows_reads_b_through_a_row_table(nb, m, k, n, items):
    """B's rows as runs of one flat array per batch entry, in any order (an implicit im2col),
    read in place through the table or packed from it, against the gathered rows in float64."""
    r = np.random.default_rng(m + k)
    flat = r.standard_normal((nb, 3 * k + n)).astype(np.float32)
    rows = r.permutation(3 * k)[:k].astype(np.int64)
    a = r.standard_normal((nb, m, k)).astype(np.float32)
    out = np.full((nb, m, n + 4), np.nan, np.float32)
    gemm_f32.matmul_rows(a, flat, rows, n, out)
    b = np.stack([[flat[q, o:o + n] for o in rows] for q in range(nb)]).astype(np.float64)
    _check(a, b, out[:, :, :n])


def _runs_avx2_code() -> str | None:
    """Why this machine cannot run code compiled for AVX2 (None: it can)."""
    import llvmlite.binding as ll
    triple = ll.get_process_triple()
    if not triple.startswith(("x86_64", "amd64")):
        return f"Numba targets {triple}: AVX2 is an x86-64 path (this CPU keeps BLAS)"
    cpu, features = _env.numba_target()
    if _env.vector_isa(cpu, features) is None:
        return f"the CPU ({cpu}) has no AVX2 + FMA: it cannot run the AVX2 path's code"
    return None


@pytest.mark.skipif(_runs_avx2_code() is not None, reason=str(_runs_avx2_code()))
def test_the_avx2_path_in_a_child(tmp_path):
    """A process compiling for AVX2 (`NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=`: Haswell's
    own features, what an AVX2 machine gets) takes the 8-lane 6 x 16 tile and turns the kernel
    on, and this file's tests pass there.  Before: the kernel was AVX-512 only and auto chose
    BLAS."""
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "",
           "NUMBA_NUM_THREADS": "2", "TEXPR_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("TEXPR_AD_GEMM", None)

    def child(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=900)

    res = child("-c", "from texpr_ad.kernels import gemm_f32 as g; "
                      "print(g.ISA, g.W, g.MR, g.NR, g.enabled(), g.describe())")
    want = ["avx2", "8", "6", "16", "True", "avx2", "6x16"]
    assert res.stdout.split() == want, res.stderr[-3000:]
    res = child("-m", "pytest", "-p", "no:cacheprovider", "-x", __file__, "-k", "not avx2_path")
    assert res.returncode == 0 and " passed" in res.stdout, (res.stdout + res.stderr)[-3000:]


@pytest.mark.parametrize("path", sorted(gemm_f32.TILES))
@pytest.mark.parametrize("table,ahead", [(False, 0), (True, 16)])
def test_the_micro_kernel_of_every_path(path, table, ahead):
    """Every TILES entry's micro-kernel, built here whatever this CPU's own path is (LLVM keeps
    or splits the vectors), on one MR x NR tile of a k = 37 product: stored, then added to C;
    B's rows through a table or evenly spaced, prefetching ahead or not."""
    from numba import njit
    w, mr, nv = gemm_f32.TILES[path][:3]
    tile = gemm_f32._micro_kernel(table, False, ahead, (w, mr, nv))

    @njit
    def run(a, b, rows, c, accumulate):
        tile(a.ctypes.data, 1, a.strides[0] // 4, b.ctypes.data, b.shape[1], rows.ctypes.data,
             a.shape[1], c.ctypes.data, c.shape[1], accumulate)

    r = np.random.default_rng(w + mr)
    k, nr = 37, w * nv
    a = r.standard_normal((mr, k + 3)).astype(np.float32)[:, :k]  # rows k + 3 apart
    b = r.standard_normal((2 * k, nr + 5)).astype(np.float32)
    pick = r.permutation(2 * k)[:k] if table else np.arange(k)
    rows = (pick * b.shape[1]).astype(np.int64)
    c = np.full((mr, nr + 2), np.nan, np.float32)
    run(a, b, rows, c, False)
    want = a.astype(np.float64) @ b[pick, :nr]
    np.testing.assert_allclose(c[:, :nr], want, rtol=1e-5, atol=1e-5)
    assert np.isnan(c[:, nr:]).all()
    run(a, b, rows, c, True)
    np.testing.assert_allclose(c[:, :nr], 2 * want, rtol=1e-5, atol=1e-5)
