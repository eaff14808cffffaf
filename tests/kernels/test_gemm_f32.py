"""texpr_ad's own float32 GEMM (`kernels/gemm_f32.py`): results against float64 NumPy, on every
path through the kernel (whole tiles, row and column tails, k chunks, A or B read in place or
packed, broadcast batch operands, a strided output), and its dispatch from contraction stages.

The kernel's LLVM vectors are legal on any CPU (LLVM splits them where registers are narrower),
so these run everywhere; only `enabled()`'s automatic choice depends on AVX-512.
"""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.kernels import gemm_f32

MR, NR, KC = gemm_f32.MR, gemm_f32.NR, gemm_f32.KC


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


SHAPES = [  # (nb, m, k, n): whole tiles, tails in m / n / k, k over several chunks, tiny
    (1, MR, 16, NR), (2, 4 * MR, 3 * KC, 2 * NR), (1, MR + 1, 7, NR + 1), (3, 2 * MR - 1, KC + 5, 3 * NR - 7),
    (1, 1, 1, 1), (2, 5, 2 * KC + 1, 3), (1, 200, 300, 70),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("a_layout,b_layout", [("contiguous", "contiguous"),
                                               ("transposed", "strided"),
                                               ("broadcast", "transposed"),
                                               ("strided", "broadcast")])
def test_matches_float64_matmul(shape, a_layout, b_layout):
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
                                              (1, [0], 1, 1), (3, list(range(0, 4000, 33)), 700, 64)])
def test_matmul_a_rows(segments, rows, k, n):
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
