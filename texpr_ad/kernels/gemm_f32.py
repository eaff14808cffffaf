"""texpr_ad's own float32 matrix product for x86-64 CPUs: a register-tiled micro-kernel.

Contraction stages (`cpu_render.contraction`) call `numba_cpu.stack_matmul`, which runs float32
products here when `enabled()`, through NumPy's BLAS otherwise.  Why: OpenBLAS picks kernels by
CPU type, and where the environment pins it lower (`OPENBLAS_CORETYPE=Haswell`, as on this
project's machines) or the build predates the CPU, it runs AVX2 code on an AVX-512 machine
(`python -m bench.gemm` compares them and torch, same run, and prints the path taken).
Vector paths (`TILES`): AVX-512 or AVX2 + FMA; elsewhere (ARM, older x86) BLAS.

Layout (Goto/BLIS, with both operands read in place where they can be):

* work items, run in a `prange`: (batch entry, group of up to MC rows, group of columns), rows
  first, so that each item reads its rows of A once;
* each item walks k in equal chunks of at most KC; for each NR-wide column block of its group
  it runs the micro-kernel on every MR-row panel of its rows, read in place where A's rows are
  contiguous (else, and for a row tail, packed); the block of B (chunk x NR floats) likewise
  where B's rows are contiguous and the item has fewer than PACK panels (else packed);
* the micro-kernel (`_tile`, LLVM IR through `numba.extending.intrinsic`) keeps the MR x NR
  result in MR * NV vector registers: per k step NV vector loads of B, MR broadcasts of A and
  MR * NV fused multiply-adds; it stores the tile, or adds it to C after the first chunk.
  Tiles cut by a row or column tail go through a small tile buffer.

Results differ from BLAS only by summation order (fused multiply-adds, chunked sums).
`TEXPR_AD_GEMM=blas` turns it off, `=native` on regardless of the CPU.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np
from llvmlite import ir
from numba import get_num_threads, njit, prange, types
from numba.core import cgutils
from numba.core.registry import cpu_target
from numba.extending import intrinsic

from . import cache, threads
from .._env import gemm_mode as mode, native_gemm as enabled  # noqa: F401  (its switch)
from .._env import vector_isa

# path (`_env.GEMM_ISAS`, of the CPU Numba compiles for: its cache key) -> W lanes, MR x NV
# accumulators (+ NV loads of B, 1 broadcast), G, PACK (above), PF floats prefetched ahead on
# B's rows read in place (AVX2's rows of a block are a line each: they conflict in L1/L2 sets).
TILES = {"avx512": (16, 6, 4, 1, 1 << 62, 0),  # 32 zmm: 24 accumulators, a 6 x 64 tile
         "avx2": (8, 6, 2, 4, 32, 16)}         # 16 ymm: 12 accumulators, a 6 x 16 tile
ISA = vector_isa(*cpu_target.target_context.codegen().magic_tuple()[1:])
W, MR, NV, G, PACK, PF = TILES[ISA or "avx2"]
NR = NV * W             # micro-tile columns
KC = 320                # most k per chunk (k splits into equal chunks): a B block is KC x NR floats
MC = 64 * MR            # most rows per work item: a packed A chunk is at most 480 KiB (L2)
MIN_FLOPS = 1 << 20     # smaller products go to BLAS (the prange launch would dominate)


def describe() -> str:
    """The path float32 products take (`avx512 6x64`, `avx2 6x16`, `numpy BLAS`), for benches."""
    return f"{ISA or 'avx2 (split)'} {MR}x{NR}" if enabled() else "numpy BLAS"


def _cached(**opts: Any) -> Any:
    """`njit(cache=True, **opts)`, cached by Numba beside this file (or NUMBA_CACHE_DIR, the
    user's cache); else in `cache.cache_dir()` (a read-only install); else compiled in memory
    with cache_dir's CacheWarning, not Numba's "no locator available" error at import."""
    def wrap(fn: Any) -> Any:
        try:
            return njit(cache=True, **opts)(fn)
        except RuntimeError as e:
            if "no locator available" not in str(e):
                raise
        folder = cache.cache_dir()
        if folder is not None:
            with cache.numba_cache_dir(folder / "numba"):
                try:
                    return njit(cache=True, **opts)(fn)
                except RuntimeError as e:  # NUMBA_CACHE_LOCATOR_CLASSES leaves that one out
                    if "no locator available" not in str(e):
                        raise
            cache.warn_uncached(f"texpr_ad's float32 GEMM ({fn.__name__})")
        return njit(**opts)(fn)
    return wrap


def handles(arrays: tuple[np.ndarray, ...], flops: int) -> bool:
    """Whether this kernel runs a product of `flops` floating-point operations on `arrays`
    (all float32, large enough, and parallel regions allowed: not in a child forked after GNU
    OpenMP started, whose kernels run serial builds, `threads.py`)."""
    if any(x.dtype != np.float32 for x in arrays):
        return False
    if threads.STATE.forked and threads.STATE.gnu_omp:
        return False
    return flops >= MIN_FLOPS and enabled()


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """`out[q] = a[q] @ b[q]` for float32 stacks of any strides."""
    if b.size == 0 or min(b.strides) < 0 or any(x % 4 for x in b.strides):
        b = np.ascontiguousarray(b)
    qs, ldb, cs = (x // 4 for x in b.strides)
    span = 1 + sum((d - 1) * x for d, x in zip(b.shape, (qs, ldb, cs))) if b.size else 0
    flat = np.lib.stride_tricks.as_strided(b, (span,), (4,), writeable=False)
    rows = np.arange(b.shape[1], dtype=np.int64) * ldb
    _run(a, flat, qs, rows, ldb, cs, b.shape[2], out)


def matmul_rows(a: np.ndarray, flat: np.ndarray, rows: np.ndarray, cols: int,
                out: np.ndarray) -> None:
    """`out[q, :, :cols] = a[q] @ B[q]` with `B[q][p, j] = flat[q, rows[p] + j]`: the rows of B
    are runs of one flat array per batch entry (an implicit im2col: `cpu_implicit.py`).
    `flat` is C-contiguous, `rows` int64 and in bounds (`rows[p] + cols <= flat.shape[1]`)."""
    _run(a, flat.reshape(-1), flat.shape[1], rows, -1, 1, cols, out)


def matmul_a_rows(flat: np.ndarray, rows: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """`out = sum_s A_s @ b[s]` with `A_s[i, p] = flat[s, rows[i] + p]` for p < b.shape[1]: the
    rows of A are runs of one flat array per summed batch entry (the weight gradient of an
    implicit im2col: `cpu_implicit.py`).  `flat` C-contiguous, `rows` int64 and in bounds;
    `out` (len(rows) x n) contiguous."""
    _compiled_a_rows()(flat.reshape(-1), flat.shape[1], rows, b, out, get_num_threads())


@functools.cache
def _compiled_a_rows() -> Any:
    """`_gemm_a_rows` compiled once (see `_compiled`)."""
    flat = types.Array(types.float32, 1, "A", readonly=True)
    rows = types.Array(types.int64, 1, "A", readonly=True)
    b = types.Array(types.float32, 3, "A", readonly=True)
    c = types.Array(types.float32, 2, "A")
    _gemm_a_rows.compile((flat, types.intp, rows, b, c, types.intp))
    _gemm_a_rows.disable_compile()
    return _gemm_a_rows


def _run(a: np.ndarray, flat: np.ndarray, qs: int, rows: np.ndarray, ldb: int, cs: int, n: int,
         out: np.ndarray) -> None:
    c = out if out.strides[2] == 4 else np.empty(out.shape, np.float32)  # rows contiguous
    _compiled()(a, flat, qs, rows, ldb, cs, n, c, get_num_threads())
    if c is not out:
        out[...] = c


@functools.cache
def _compiled() -> Any:
    """`_gemm` compiled once, for any-layout float32 stacks (loaded from Numba's disk cache
    after the first process); C-contiguous arguments convert to it instead of compiling anew."""
    a, c = (types.Array(types.float32, 3, "A", readonly=ro) for ro in (True, False))
    flat = types.Array(types.float32, 1, "A", readonly=True)
    rows = types.Array(types.int64, 1, "A", readonly=True)
    i = types.intp
    _gemm.compile((a, flat, i, rows, i, i, i, c, i))
    _gemm.disable_compile()
    return _gemm


def _micro_kernel(table: bool, a_table: bool = False, ahead: int = 0,
                  shape: tuple[int, ...] = (W, MR, NV)) -> Any:
    """The micro-kernel intrinsic `tile(a, a_ps, a_is, b, ldb, rows, kc, c, ldc, accumulate)`
    for `shape` = (W, MR, NV) (a `TILES` entry; NR = NV * W):

        c[i*ldc + j] (+)= sum_p a[p*a_ps + arow(i)] * b[row(p) + j]  for i < MR, j < NR,

    row(p) = rows[p] if `table` (an implicit im2col; a separate build: the table load costs
    6-13% where not needed), else p*ldb; arow(i) = a_is[i] if `a_table` (`a_is` the address of
    MR int64 row offsets: an implicit im2col's weight gradient), else i*a_is.  `a`, `b`, `c`
    are float32 addresses, `rows` of int64 offsets, strides in elements; the sum is added to c
    when `accumulate`, else stored; b[row(p) + ahead] is prefetched if `ahead`."""
    w, mr, nv = shape
    sig = types.void(types.intp, types.intp, types.intp, types.intp, types.intp, types.intp,
                     types.intp, types.intp, types.intp, types.boolean)

    def codegen(context, builder, signature, args):
        a_at, a_ps, a_is, b_at, ldb, rows_at, kc, c_at, ldc, acc_flag = args
        f32 = ir.FloatType()
        vty = ir.VectorType(f32, w)
        pa, pb, pc = (builder.inttoptr(x, f32.as_pointer()) for x in (a_at, b_at, c_at))
        idx = ir.IntType(64)
        prow = builder.inttoptr(rows_at, idx.as_pointer())
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty] * 3),
                                             f"llvm.fma.v{w}f32")

        def vec(base, i, off):
            return builder.bitcast(builder.gep(base, [builder.add(i, idx(off))]), vty.as_pointer())

        zero = ir.Constant(vty, [0.0] * w)
        acc = [[cgutils.alloca_once_value(builder, zero) for _ in range(nv)] for _ in range(mr)]
        crow = [builder.mul(idx(i), ldc) for i in range(mr)]
        if a_table:
            pat = builder.inttoptr(a_is, idx.as_pointer())
            arow = [builder.load(builder.gep(pat, [idx(i)])) for i in range(mr)]
        else:
            arow = [builder.mul(idx(i), a_is) for i in range(mr)]
        with builder.if_then(acc_flag):
            for i in range(mr):
                for v in range(nv):
                    builder.store(builder.load(vec(pc, crow[i], v * w), align=4), acc[i][v])
        i32 = ir.IntType(32)
        lanes0 = ir.Constant(ir.VectorType(i32, w), [0] * w)
        pft = ir.FunctionType(ir.VoidType(), [f32.as_pointer(), i32, i32, i32])
        prefetch = cgutils.get_or_insert_function(builder.module, pft, "llvm.prefetch.p0")

        def k_loop(row):
            with cgutils.for_range(builder, kc) as loop:
                p = loop.index
                brow = row(p)
                bv = [builder.load(vec(pb, brow, v * w), align=4) for v in range(nv)]
                if ahead:  # (address, read, high locality, data)
                    at = builder.gep(pb, [builder.add(brow, idx(ahead))])
                    builder.call(prefetch, [at, i32(0), i32(3), i32(1)])
                ak = builder.mul(p, a_ps)
                for i in range(mr):
                    s = builder.load(builder.gep(pa, [builder.add(ak, arow[i])]))
                    sv = builder.insert_element(ir.Constant(vty, ir.Undefined), s, i32(0))
                    sv = builder.shuffle_vector(sv, ir.Constant(vty, ir.Undefined), lanes0)
                    for v in range(nv):
                        builder.store(builder.call(fma, [sv, bv[v], builder.load(acc[i][v])]),
                                      acc[i][v])

        if table:
            k_loop(lambda p: builder.load(builder.gep(prow, [p])))
        else:
            k_loop(lambda p: builder.mul(p, ldb))
        for i in range(mr):
            for v in range(nv):
                builder.store(builder.load(acc[i][v]), vec(pc, crow[i], v * w), align=4)
        return context.get_dummy_value()

    def tile(typingctx, a, a_ps, a_is, b, ldb, rows, kc, c, ldc, accumulate):
        return sig, codegen

    return intrinsic(tile)


_tile_spaced, _tile_table, _tile_a_rows, _tile_ahead = (
    _micro_kernel(False), _micro_kernel(True, False, PF), _micro_kernel(False, True),
    _micro_kernel(False, False, PF))


@intrinsic
def _transpose(typingctx, src, lds, dst, ldd):
    """dst[j*ldd + i] = src[i*lds + j] for i, j < W (float32 addresses, strides in elements): W
    vector loads, log2(W) rounds of shuffles swapping the off-diagonal halves of every 2h x 2h
    block, W vector stores."""
    def codegen(context, builder, signature, args):
        f32, i64 = ir.FloatType(), ir.IntType(64)
        vty, mty = ir.VectorType(f32, W), ir.VectorType(ir.IntType(32), W)

        def row(at, ld, i):  # row i of the block at address `at`, as a vector pointer
            first = builder.inttoptr(at, f32.as_pointer())
            return builder.bitcast(builder.gep(first, [builder.mul(i64(i), ld)]), vty.as_pointer())

        r = [builder.load(row(args[0], args[1], i), align=4) for i in range(W)]
        h = W // 2
        while h:
            lo, hi = ([L + d if L % (2 * h) < h else W + L - h + d for L in range(W)]
                      for d in (0, h))
            for i in (i for i in range(W) if i % (2 * h) < h):
                r[i], r[i + h] = (builder.shuffle_vector(r[i], r[i + h], ir.Constant(mty, m))
                                  for m in (lo, hi))
            h //= 2
        for i in range(W):
            builder.store(r[i], row(args[2], args[3], i), align=4)
        return context.get_dummy_value()
    return types.void(types.intp, types.intp, types.intp, types.intp), codegen


@njit(inline="always")
def _tile(a, a_ps, a_is, b, ldb, rows, kc, c, ldc, accumulate, in_place):
    """`_micro_kernel` for B's rows in `rows` if not 0, else ldb apart; in place: PF ahead."""
    if rows:
        _tile_table(a, a_ps, a_is, b, ldb, rows, kc, c, ldc, accumulate)
    elif in_place:
        _tile_ahead(a, a_ps, a_is, b, ldb, rows, kc, c, ldc, accumulate)
    else:
        _tile_spaced(a, a_ps, a_is, b, ldb, rows, kc, c, ldc, accumulate)


@_cached()
def _pack_a(aq, r0, rows, pc, kc, ap):
    """ap[(ib*kc + p)*MR + i] = aq[r0 + ib*MR + i, pc + p] for the panels ib of `rows` rows,
    zero beyond them."""
    for ib in range((rows + MR - 1) // MR):
        base = ib * kc * MR
        for p in range(kc):
            for i in range(MR):
                r = ib * MR + i
                ap[base + p * MR + i] = aq[r0 + r, pc + p] if r < rows else 0.0


@_cached()
def _pack_b(flat, q0, rows, ldb, cs, pc, kc, j0, cols, bt):
    """bt[g, p, j] = B[pc + p, j0 + g*NR + j] for g*NR + j < cols, else 0: G micro-panels of NR
    columns (B[p, j] = flat[q0 + rows[p] + j * cs], rows[p] = p * ldb if ldb >= 0)."""
    if ldb == 1 and cs != 1 and cols == G * NR:  # B transposed: W x W blocks transposed
        src, dst, whole = flat.ctypes.data + 4 * (q0 + j0 * cs + pc), bt.ctypes.data, kc // W * W
        for g in range(G):
            for j in range(0, NR, W):
                for p in range(0, whole, W):
                    _transpose(src + 4 * ((g * NR + j) * cs + p), cs,
                               dst + 4 * ((g * KC + p) * NR + j), NR)
                for p in range(whole, kc):
                    for jj in range(j, j + W):
                        bt[g, p, jj] = flat[q0 + (j0 + g * NR + jj) * cs + pc + p]
        return
    if cs == 1 and cols == G * NR:  # whole rows of the group: runs of G * NR floats
        for p in range(kc):
            at = q0 + rows[pc + p] + j0
            for g in range(G):
                for j in range(NR):
                    bt[g, p, j] = flat[at + g * NR + j]
        return
    for g in range(G):
        for p in range(kc):
            at = q0 + rows[pc + p] + (j0 + g * NR) * cs
            for j in range(NR):
                bt[g, p, j] = flat[at + j * cs] if g * NR + j < cols else 0.0


@_cached()
def _item(aq, flat, q0, brows, ldb, cs, cq, r0, rows, j0, j1, ap, bt, tile):
    """cq[r0:r0+rows, j0:j1] = aq[r0:r0+rows] @ B[:, j0:j1], B[p, j] = flat[q0 + brows[p] + j*cs];
    `ldb` >= 0 says that brows[p] = p * ldb (the micro-kernel then needs no table).

    Whole MR-row panels of A are read in place where A's rows are contiguous (a tail panel,
    or a strided A, is packed into `ap`); whole NR-column blocks of B likewise where its
    columns are (`cs == 1`) and the item has fewer than PACK panels (else G blocks at a time,
    or a tail block, are packed into `bt`)."""
    k = aq.shape[1]
    lda, ldc = aq.strides[0] // 4, cq.strides[0] // 4
    n_panels = (rows + MR - 1) // MR
    a_in_place, b_in_place = aq.strides[1] == 4, cs == 1 and n_panels < PACK
    full = rows // MR if a_in_place else 0  # panels read in place
    a0, b0, c0, r_at = aq.ctypes.data, flat.ctypes.data + 4 * q0, cq.ctypes.data, brows.ctypes.data
    ap0, bt0, t0 = ap.ctypes.data, bt.ctypes.data, tile.ctypes.data
    step = (k + (k + KC - 1) // KC - 1) // ((k + KC - 1) // KC)  # equal chunks of at most KC
    for pc in range(0, k, step):
        kc = min(step, k - pc)
        first = pc == 0
        if full < n_panels:
            _pack_a(aq, r0 + full * MR, rows - full * MR, pc, kc, ap)
        for jb in range(j0, j1, NR):
            cols = min(NR, j1 - jb)
            g = 0 if b_in_place else (jb - j0) // NR % G  # the block's panel in its packed group
            in_place = b_in_place and cols == NR
            if in_place:
                if ldb >= 0:
                    b_at, b_ld, b_rows = b0 + 4 * (pc * ldb + jb), ldb, 0
                else:
                    b_at, b_ld, b_rows = b0 + 4 * jb, 0, r_at + 8 * pc
            else:
                if g == 0:
                    _pack_b(flat, q0, brows, ldb, cs, pc, kc, jb, min(G * NR, j1 - jb), bt)
                b_at, b_ld, b_rows = bt0 + 4 * g * KC * NR, NR, 0
            for ib in range(n_panels):
                i0 = r0 + ib * MR
                a_at, a_ps, a_is = (a0 + 4 * (i0 * lda + pc), 1, lda) if ib < full else \
                    (ap0 + 4 * (ib - full) * kc * MR, MR, 1)
                mr = min(MR, r0 + rows - i0)
                if mr == MR and cols == NR:
                    _tile(a_at, a_ps, a_is, b_at, b_ld, b_rows, kc, c0 + 4 * (i0 * ldc + jb), ldc,
                          not first, in_place)
                    continue
                _tile(a_at, a_ps, a_is, b_at, b_ld, b_rows, kc, t0, NR, False, in_place)
                _merge_tile(cq, i0, jb, mr, cols, tile, first)


@_cached()
def _merge_tile(c, i0, j0, mr, cols, tile, first):
    """c[i0:i0+mr, j0:j0+cols] (+)= the tile buffer's corner: a tile cut by a tail."""
    for i in range(mr):
        for j in range(cols):
            c[i0 + i, j0 + j] = tile[i, j] if first else c[i0 + i, j0 + j] + tile[i, j]


@_cached()
def _items(nb, m, n, threads):
    """(rows per group, row groups, columns per group, column groups) of an m x n product
    over nb batch entries: rows first (each item reads its rows of A once), as many groups as
    threads need, each at most MC rows; then columns where the batch and rows give too few
    items."""
    n_rg = max((m + MC - 1) // MC, min((threads + nb - 1) // nb, (m + MR - 1) // MR))
    rows = ((m + n_rg - 1) // n_rg + MR - 1) // MR * MR
    n_rg = (m + rows - 1) // rows
    n_cb = (n + NR - 1) // NR
    n_cg = min(n_cb, (threads + nb * n_rg - 1) // (nb * n_rg))
    per_cg = (n_cb + n_cg - 1) // n_cg * NR
    return rows, n_rg, per_cg, (n + per_cg - 1) // per_cg


@_cached(parallel=True)
def _gemm(a, flat, qs, brows, ldb, cs, n, c, threads):
    """c[q, :, :n] = a[q] @ B[q], B[q][p, j] = flat[q*qs + brows[p] + j*cs] (= p*ldb if
    ldb >= 0); c's rows contiguous.  Items: (q, row group, column group)."""
    nb, m, k = a.shape
    if nb == 0 or m == 0 or n == 0:
        return
    if k == 0:
        c[:, :, :n] = 0.0
        return
    rows, n_rg, per_cg, n_cg = _items(nb, m, n, threads)
    for it in prange(nb * n_rg * n_cg):
        q, rg, cg = it // (n_rg * n_cg), it // n_cg % n_rg, it % n_cg
        ap = np.empty(rows * KC, np.float32)
        bt = np.empty((G, KC, NR), np.float32)
        tile = np.empty((MR, NR), np.float32)
        r0 = rg * rows
        _item(a[q], flat, q * qs, brows, ldb, cs, c[q], r0, min(rows, m - r0), cg * per_cg,
              min(n, (cg + 1) * per_cg), ap, bt, tile)


@_cached()
def _item_a_rows(flat, qs, arows, b, c, r0, rows, j0, j1, ap, bt, tile):
    """c[r0:r0+rows, j0:j1] = sum_s A_s[r0:r0+rows] @ b[s][:, j0:j1], A_s[i, p] =
    flat[s*qs + arows[i] + p]: whole MR-row panels read in place through the row table, a tail
    panel packed; B blocks in place where its rows are contiguous, the block is whole and the
    item has fewer than PACK panels."""
    nseg, k = b.shape[0], b.shape[1]
    ldc = c.strides[0] // 4
    full = rows // MR
    n_panels = (rows + MR - 1) // MR
    f0, r_at, c0 = flat.ctypes.data, arows.ctypes.data, c.ctypes.data
    ap0, bt0, t0 = ap.ctypes.data, bt.ctypes.data, tile.ctypes.data
    step = (k + (k + KC - 1) // KC - 1) // ((k + KC - 1) // KC)
    for q in range(nseg):
        bq = b[q]
        ldb, b_in_place = bq.strides[0] // 4, bq.strides[1] == 4 and n_panels < PACK
        for pc in range(0, k, step):
            kc = min(step, k - pc)
            first = q == 0 and pc == 0
            if full < n_panels:  # the tail panel: rows of flat, zero-padded to MR
                i0 = r0 + full * MR
                for p in range(kc):
                    for i in range(MR):
                        ap[p * MR + i] = flat[q * qs + arows[i0 + i] + pc + p] \
                            if i0 + i < r0 + rows else 0.0
            for jb in range(j0, j1, NR):
                cols = min(NR, j1 - jb)
                if b_in_place and cols == NR:
                    b_at, b_ld = bq.ctypes.data + 4 * (pc * ldb + jb), ldb
                else:
                    for p in range(kc):
                        for j in range(NR):
                            bt[p, j] = bq[pc + p, jb + j] if j < cols else 0.0
                    b_at, b_ld = bt0, NR
                for ib in range(n_panels):
                    i0 = r0 + ib * MR
                    mr = min(MR, r0 + rows - i0)
                    c_at, c_ld = (c0 + 4 * (i0 * ldc + jb), ldc) if mr == MR and cols == NR \
                        else (t0, NR)
                    if ib < full:
                        _tile_a_rows(f0 + 4 * (q * qs + pc), 1, r_at + 8 * i0, b_at, b_ld, 0, kc,
                                     c_at, c_ld, not first and c_at != t0)
                    else:
                        _tile_spaced(ap0, MR, 1, b_at, b_ld, 0, kc, c_at, c_ld,
                                     not first and c_at != t0)
                    if c_at == t0:
                        _merge_tile(c, i0, jb, mr, cols, tile, first)


@_cached(parallel=True)
def _gemm_a_rows(flat, qs, arows, b, c, threads):
    """c = sum_s A_s @ b[s], A_s[i, p] = flat[s*qs + arows[i] + p]; c's rows contiguous.
    Items: (row group, column group), each summing over every s."""
    m, n = c.shape
    nseg, k = b.shape[0], b.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0 or nseg == 0:
        c[...] = 0.0
        return
    rows, n_rg, per_cg, n_cg = _items(1, m, n, threads)
    for it in prange(n_rg * n_cg):
        rg, cg = it // n_cg, it % n_cg
        ap = np.empty(MR * KC, np.float32)
        bt = np.empty((KC, NR), np.float32)
        tile = np.empty((MR, NR), np.float32)
        r0 = rg * rows
        _item_a_rows(flat, qs, arows, b, c, r0, min(rows, m - r0), cg * per_cg,
                     min(n, (cg + 1) * per_cg), ap, bt, tile)
