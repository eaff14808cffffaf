"""CUDA kernel features, run as a script by test_cuda.py (under the simulator or on a GPU).

Each check compares with NumPy written here, independently of texpr_ad; prints
"PASS <name>" per check and exits non-zero on the first failure.
"""
from __future__ import annotations

import sys

import numpy as np

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.kernels import KernelArgumentError, build
from texpr_ad.kernels.cuda_kernel import CudaKernel
from texpr_ad.schedule.cuda import strategy
from texpr_ad.te.expr import IterVar, const
from texpr_ad.te.tensor import ScatterOp, Tensor

SEED = 31337
print(f"seed = {SEED}")
RNG = np.random.default_rng(SEED)
sys.setswitchinterval(1e-5)


def close(got, want, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)


def strategies(k: CudaKernel) -> list[str]:
    return [strategy(s) for s in k.plan.stages]


def matmul_symbolic_and_device_chaining() -> None:
    n = te.var("n")
    A = te.placeholder((n, 12), "float32", name="A")
    W = te.placeholder((12, 10), "float32", name="W")
    k = te.reduce_axis((0, 12), name="k")
    Y = te.compute((n, 10), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="Y")
    R = te.compute((n, 10), lambda i, j: te.max(Y[i, j], te.const(0.0, "float32")), name="R")
    f = build([R, Y], [A, W], target="cuda")
    assert isinstance(f, CudaKernel)
    for rows in (1, 5, 37):
        a = RNG.standard_normal((rows, 12)).astype(np.float32)
        w = RNG.standard_normal((12, 10)).astype(np.float32)
        r, y = f(a, w)
        assert isinstance(r, np.ndarray) and r.dtype == np.float32 and r.shape == (rows, 10)
        close(y, a.astype(np.float64) @ w, 1e-4)
        close(r, np.maximum(a.astype(np.float64) @ w, 0), 1e-4)
    # device arrays in: no copies, device arrays out, which chain into the next kernel
    from numba import cuda
    a = RNG.standard_normal((4, 12)).astype(np.float32)
    w = RNG.standard_normal((12, 10)).astype(np.float32)
    da, dw = cuda.to_device(a), cuda.to_device(w)
    r, y = f(da, dw)
    assert not isinstance(r, np.ndarray) and hasattr(r, "copy_to_host")
    X = te.placeholder((n, 10), "float32", name="X")
    c = te.reduce_axis((0, 10), "c")
    S = te.compute((n,), lambda i: te.sum(X[i, c] * 2.0, axis=c), name="S")
    g = build([S], [X], target="cuda")
    (s,) = g(r)
    close(s.copy_to_host(), 2 * np.maximum(a.astype(np.float64) @ w, 0).sum(1), 1e-4)
    print("PASS matmul_symbolic_and_device_chaining")


def argument_errors() -> None:
    A = te.placeholder((3, 4), "float64", name="A")
    B = te.compute((3, 4), lambda i, j: A[i, j] * 2.0, name="B")
    f = build([B], [A], target="cuda")
    for bad, msg in ((np.zeros((3, 5)), "must have shape"), (np.zeros((3, 4), np.float32), "dtype"),
                     (np.zeros(3), "dims")):
        try:
            f(bad)
        except KernelArgumentError as e:
            assert "'A'" in str(e) and msg in str(e), e
        else:
            raise AssertionError(f"no error for {bad.shape} {bad.dtype}")
    from numba import cuda
    try:
        f(cuda.to_device(np.zeros((4, 4))))
    except KernelArgumentError as e:
        assert "'A'" in str(e)
    else:
        raise AssertionError("no error for a device array of the wrong shape")
    print("PASS argument_errors")


def bias_and_batchnorm_grads_block_reduce() -> None:
    N, C, H, Wd = 4, 3, 9, 8  # each channel reduces over N*H*W = 288 >= BLOCK_MIN_REDUCE
    X = te.placeholder((N, C, H, Wd), "float64", name="X")
    b = te.placeholder((C,), "float64", name="b")
    Y = te.compute((N, C, H, Wd), lambda n, c, h, w: X[n, c, h, w] * X[n, c, h, w] + b[c], name="Y")
    rn, rh, rw = (te.reduce_axis((0, e), name=s) for e, s in ((N, "rn"), (H, "rh"), (Wd, "rw")))
    mean = te.compute((C,), lambda c: te.sum(X[rn, c, rh, rw], axis=[rn, rh, rw]) / (N * H * Wd),
                      name="mean")
    dY = te.placeholder(Y.shape, "float64", name="dY")
    db, dX = ta.grad(Y, [b, X], head=dY)
    k = build([db, dX, mean], [X, b, dY], target="cuda")
    assert "block" in strategies(k), k.plan
    x = RNG.standard_normal((N, C, H, Wd))
    g = RNG.standard_normal((N, C, H, Wd))
    gb, gx, m = k(x, RNG.standard_normal(C), g)
    close(gb, g.sum(axis=(0, 2, 3)), 1e-10)
    close(gx, 2 * x * g, 1e-10)
    close(m, x.mean(axis=(0, 2, 3)), 1e-10)
    # argmax-style tuple reducer and a max over a long axis, zero-dim output (block, one point)
    v = te.placeholder((700,), "float32", name="v")
    r = te.reduce_axis((0, 700), name="r")
    M = te.compute((), lambda: te.max(v[r], axis=r), name="M")
    k2 = build([M], [v], target="cuda")
    assert strategies(k2) == ["block"], k2.plan
    vv = RNG.standard_normal(700).astype(np.float32)
    (mm,) = k2(vv)
    assert mm.shape == () and mm == vv.max()
    print("PASS bias_and_batchnorm_grads_block_reduce")


def split_block_reductions() -> None:
    """Few output points over long reductions: each point's reduction is split over several
    blocks (`CudaStagePlan.split`) and a second kernel combines the partials."""
    from texpr_ad.ops import reduction
    n = 12288
    x = te.placeholder((3, n // 3), "float32", name="x")
    total = reduction.sum(te.compute(x.shape, lambda i, j: x[i, j] * x[i, j], name="sq"))
    am = reduction.argmax(x, 1)
    r = te.reduce_axis((0, n // 3), name="r")
    pos = te.compute((3,), lambda i: te.sum(x[i, r], axis=r, where=x[i, r] > 0), name="pos")
    idx = te.placeholder((n,), "int64", name="idx")
    q = te.reduce_axis((0, n), name="q")
    gathered = te.compute((), lambda: te.sum(x[0, idx[q]], axis=q), name="gathered")
    k = build([total, am, pos, gathered], [x, idx], target="cuda")
    splits = [s.cuda.split for s in k.plan.stages]
    assert all(sp > 1 for sp in splits), k.plan
    xs = RNG.standard_normal((3, n // 3)).astype(np.float32)
    ids = RNG.integers(0, n // 3, n)
    t, a, p, g = k(xs, ids)
    x64 = xs.astype(np.float64)
    close(t, (x64 * x64).sum(), 1e-5)
    np.testing.assert_array_equal(a, xs.argmax(1))
    close(p, np.where(xs > 0, x64, 0).sum(1), 1e-5)
    close(g, x64[0, ids].sum(), 1e-5)
    ids[5] = n  # out of bounds: the partials kernel's index check raises
    try:
        k(xs, ids)
    except IndexError as e:
        assert "idx" in str(e) or "x" in str(e), e
    else:
        raise AssertionError("an out-of-bounds index in a split reduction was not reported")
    print("PASS split_block_reductions")


def atomic_scatter() -> None:
    ids = te.placeholder((50,), "int64", name="ids")
    v = te.placeholder((50,), "float64", name="v")
    t = IterVar("t", const(0), const(50), "data")
    op = ScatterOp("hist", (const(7),), "float64", (t,), (ids[t],), v[t], const(True))
    T = Tensor(op, 0, op.shape, "float64")
    k = build([T], [ids, v], target="cuda")
    assert strategies(k) == ["atomic"] and "cuda.atomic.add" in k.source
    i = RNG.integers(0, 7, 50)
    x = RNG.standard_normal(50)
    (h,) = k(i, x)
    want = np.zeros(7)
    np.add.at(want, i, x)
    close(h, want, 1e-12)
    bad = i.copy()
    bad[3] = 9
    try:
        k(bad, x)
    except IndexError as e:
        assert "hist" in str(e)
    else:
        raise AssertionError("no IndexError for an out-of-bounds scatter index")
    print("PASS atomic_scatter")


def math_edge_values() -> None:
    x = te.placeholder((12,), "float32", name="x")

    def unary(f, name):
        return te.compute((12,), lambda i: f(x[i]), name=name)

    outs = [unary(f, n) for n, f in
            (("fl", te.floor), ("ce", te.ceil), ("tr", te.trunc), ("ro", te.round), ("sg", te.sign))]
    k = build(outs, [x], target="cuda")
    xs = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0, 3e9, -7.25, 1e30, np.inf, -np.inf],
                  np.float32)
    got = k(xs)
    for g, f in zip(got, (np.floor, np.ceil, np.trunc, np.rint, np.sign), strict=True):
        np.testing.assert_array_equal(g, f(xs))
    print("PASS math_edge_values")


def tiled_contractions() -> None:
    """Matmuls as tiles (schedule.cuda TILE): both operand layouts of a slice, edges of partial
    tiles, and a wide float32 sum (float32 chains of `depth` terms folded into float64)."""
    from texpr_ad.schedule import cuda as sc
    from texpr_ad.schedule.plan import Tile
    saved = sc.TILES, sc.TILE_MIN, sc.TILE_MIN_BLOCKS
    sc.TILE_MIN_BLOCKS = 1  # tiles however few the blocks (a GPU would take more)
    A = te.placeholder((70, 50), "float32", name="A")
    B = te.placeholder((50, 45), "float32", name="B")
    k = te.reduce_axis((0, 50), name="k")
    Y = te.compute((70, 45), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="Y")
    At = te.placeholder((35, 33), "float32", name="At")  # read as At[k, i]: M runs fastest
    Bt = te.placeholder((40, 35), "float32", name="Bt")  # read as Bt[j, k]: K runs fastest
    kt = te.reduce_axis((0, 35), name="kt")
    Z = te.compute((33, 40), lambda i, j: te.sum(At[kt, i] * Bt[j, kt], axis=kt), name="Z")
    for out, ins, ref in ((Y, [A, B], lambda a, b: a @ b), (Z, [At, Bt], lambda a, b: a.T @ b.T)):
        f = build([out], ins, target="cuda")
        assert strategies(f) == ["tile"], strategies(f)
        arrays = [RNG.standard_normal(tuple(int(s.value) for s in t.shape)).astype(np.float32)
                  for t in ins]
        close(f(*arrays)[0], ref(*[a.astype(np.float64) for a in arrays]), 1e-4)
    sc.TILES, sc.TILE_MIN = (Tile(2, 2, 64),), 2
    try:
        L = te.placeholder((4, 4100), "float32", name="L")
        R = te.placeholder((4100, 4), "float32", name="R")
        kl = te.reduce_axis((0, 4100), name="kl")
        S = te.compute((4, 4), lambda i, j: te.sum(L[i, kl] * R[kl, j], axis=kl), name="S")
        f = build([S], [L, R], target="cuda")
    finally:
        sc.TILES, sc.TILE_MIN, sc.TILE_MIN_BLOCKS = saved
    assert [st.cuda.strategy for st in f.plan.stages] == ["tile"] and "float64" in f.source
    lv, rv = (RNG.random((4, 4100)).astype(np.float32), RNG.random((4100, 4)).astype(np.float32))
    want = lv.astype(np.float64) @ rv.astype(np.float64)
    got = f(lv, rv)[0].astype(np.float64)
    assert np.max(np.abs(got - want) / want) < 2e-6, np.max(np.abs(got - want) / want)
    print("PASS tiled_contractions")


if __name__ == "__main__":
    for fn in (matmul_symbolic_and_device_chaining, argument_errors,
               bias_and_batchnorm_grads_block_reduce, split_block_reductions, atomic_scatter,
               math_edge_values, tiled_contractions):
        fn()
    print("ALL PASS")
